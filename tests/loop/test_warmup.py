"""batchsel.warmup() compiles what a training run then uses: no compilation inside the run."""

from __future__ import annotations

import importlib

import numpy as np
import torch

import batchsel
from batchsel import LossRankSelector, SelectionBatchSampler, SubmodularSelector

MODULES = [
    "batchsel.selectors.loss_rank",
    "batchsel.selectors._smdl_kernels",
    "batchsel.core.rng",
    "batchsel.core.heap",
    "batchsel.submodular.kernels",
]


def signatures() -> dict[str, int]:
    found = {}
    for name in MODULES:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if hasattr(value, "signatures") and hasattr(value, "py_func"):  # a numba dispatcher
                found[f"{name}.{attr}"] = len(value.signatures)
    return found


def test_a_run_after_warmup_compiles_nothing():
    assert batchsel.warmup() >= 0
    before = signatures()
    rng = np.random.default_rng(1)
    x = rng.random((300, 16), dtype=np.float32)
    for world_size, rank in ((1, 0), (2, 1), (3, 2)):
        for selector in (LossRankSelector(300, 16, seed=0), SubmodularSelector(x, 16, seed=0)):
            sampler = SelectionBatchSampler(selector, rank=rank, world_size=world_size)
            sampler.set_epoch(0)
            for ib in sampler:
                sampler.observe(ib, losses=torch.rand(len(ib)), logits=torch.randn(len(ib), 10))
    grown = {k: (before.get(k, 0), v) for k, v in signatures().items() if v > before.get(k, 0)}
    assert not grown, f"compiled during the run: {grown}"


def test_warmup_of_one_selector_compiles_only_its_kernels():
    """warmup(selector): a loss-rank run does not wait for SMDL's kernels (a fresh process,
    where nothing is loaded yet)."""
    import subprocess
    import sys

    code = (
        "import importlib, batchsel\n"
        "from batchsel import LossRankSelector, RandomSelector\n"
        "def loaded(name):\n"
        "    m = importlib.import_module(name)\n"
        "    return sum(len(v.signatures) for v in vars(m).values() if hasattr(v, 'signatures') and hasattr(v, 'py_func'))\n"
        "batchsel.warmup(RandomSelector(10, 2))\n"
        "print(loaded('batchsel.selectors.loss_rank'), loaded('batchsel.selectors._smdl_kernels'))\n"
        "batchsel.warmup(LossRankSelector(10, 2))\n"
        "print(loaded('batchsel.selectors.loss_rank'), loaded('batchsel.selectors._smdl_kernels'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    nothing, loss_rank_only = [tuple(map(int, line.split())) for line in out.stdout.split("\n")[:2]]
    assert nothing == (0, 0)  # random batches compile nothing
    assert loss_rank_only[0] > 0 and loss_rank_only[1] == 0
