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
    "batchsel.selectors._counter_rng",
    "batchsel._heap",
    "batchsel.functions._kernels",
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
