"""What a user installing batchsel gets: the core without extras, one version, type hints."""

from __future__ import annotations

import importlib.metadata
import pathlib
import subprocess
import sys
import textwrap

import batchsel

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Every optional dependency (the extras mpi, graph, plot, lightning, hf, pyg and dev's apricot):
# the child process below cannot import any of them, as in `pip install batchsel` alone.
EXTRAS = [
    "mpi4py",
    "pymetis",
    "matplotlib",
    "lightning",
    "pytorch_lightning",
    "transformers",
    "accelerate",
    "torch_geometric",
    "apricot",
    "cleanlab",
    "mnist1d",
]

CORE_LOOP = textwrap.dedent("""
    import importlib.abc, sys

    class NoExtras(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is not installed (blocked by the test)")
            return None

    sys.meta_path.insert(0, NoExtras())
    import numpy as np, torch
    from torch.utils.data import DataLoader, TensorDataset
    import batchsel
    from batchsel import LossRankSelector, RandomSelector, SelectionBatchSampler

    data = TensorDataset(torch.randn(100, 8), torch.randint(0, 3, (100,)), torch.arange(100))
    for selector in (RandomSelector(100, batch_size=16, seed=0), LossRankSelector(100, batch_size=16, seed=0)):
        sampler = SelectionBatchSampler(selector)
        for epoch in range(2):
            sampler.set_epoch(epoch)
            seen = set()
            for xb, yb, ib in DataLoader(data, batch_sampler=sampler):
                sampler.observe(ib, losses=torch.rand(len(ib)))
                seen.update(ib.tolist())
            assert len(seen) == 100 or type(selector).__name__ == "LossRankSelector", len(seen)
    for make, extra in [(lambda: batchsel.GraphBlockSelector(
                             batchsel.EmbeddingIndex(np.random.rand(50, 4).astype("float32"), progress=False)
                             .knn_graph(5), batch_size=10).plan(0, 1), "batchsel[graph]"),
                        (lambda: batchsel.integrations.MPIComm(), "batchsel[mpi]")]:
        try:
            make()
        except ImportError as exc:
            assert extra in str(exc), exc
        else:
            raise AssertionError(f"no ImportError naming {extra}")
    print("core ok")
""")


def test_core_works_without_any_extra():
    code = f"BLOCKED = {set(EXTRAS)!r}\n" + CORE_LOOP
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "core ok" in out.stdout, out.stderr[-3000:]


def test_one_version_and_type_hints():
    assert importlib.metadata.version("batchsel") == batchsel.__version__
    assert 'dynamic = ["version"]' in (ROOT / "pyproject.toml").read_text()
    assert (pathlib.Path(batchsel.__file__).parent / "py.typed").exists()
    cli = subprocess.run([sys.executable, "-m", "batchsel", "--version"], capture_output=True, text=True)
    assert cli.stdout.strip() == f"batchsel {batchsel.__version__}"
