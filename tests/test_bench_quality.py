"""The regime benchmark: its regimes are what they claim, and its --quick mode (what CI runs)
produces every figure, the JSON and the PNG."""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_quality", ROOT / "benchmarks" / "bench_quality.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_quality"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_splits_are_disjoint_and_standardized(bench):
    data = bench.load_dataset("digits")
    assert len(data.train.y) + len(data.val.y) + len(data.test.y) == 1797
    assert abs(float(data.train.x.mean())) < 1e-3 and data.train.x.dtype == np.float32
    # no test row is also a training row
    train_rows = {row.tobytes() for row in data.train.x}
    assert not any(row.tobytes() in train_rows for row in data.test.x if np.abs(row).sum() > 0)


def test_noise_flips_a_quarter_of_the_labels_to_another_class(bench):
    data = bench.load_dataset("digits")
    noisy, info = bench.make_regime("noise", data.train, 10, seed=3)
    wrong = np.flatnonzero(noisy.y != data.train.y)
    assert len(wrong) == round(0.25 * len(data.train.y))
    np.testing.assert_array_equal(wrong, info["flipped"])
    assert noisy.x is data.train.x
    again, _ = bench.make_regime("noise", data.train, 10, seed=3)
    np.testing.assert_array_equal(again.y, noisy.y)   # a seed's regime is reproducible
    other, _ = bench.make_regime("noise", data.train, 10, seed=4)
    assert (other.y != noisy.y).any()


def test_longtail_has_imbalance_ratio_ten(bench):
    data = bench.load_dataset("digits")
    tail, _ = bench.make_regime("longtail", data.train, 10, seed=0)
    counts = np.bincount(tail.y, minlength=10)
    assert counts[0] / counts[-1] == pytest.approx(10, rel=0.15)
    assert (np.diff(counts) <= 2).all()  # decreasing profile (up to the classes' own sizes)


def test_redundant_half_is_near_duplicates_of_ten_examples(bench):
    data = bench.load_dataset("digits")
    red, info = bench.make_regime("redundant", data.train, 10, seed=0)
    n = len(data.train.y)
    assert len(red.y) == 2 * n
    extra = red.x[n:]
    sources = data.train.x[info["sources"]]
    nearest = ((extra[:, None, :] - sources[None]) ** 2).sum(-1).argmin(1)
    dist = np.sqrt(((extra - sources[nearest]) ** 2).mean(1))
    assert dist.max() < 0.1 and len(np.unique(nearest)) == 10
    np.testing.assert_array_equal(red.y[n:], data.train.y[info["sources"]][nearest])


def test_quick_mode_reports_every_method_and_regime(tmp_path):
    stem = tmp_path / "q"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_quality.py"), "--quick",
                           "--methods", "random,loss-rank", "--regimes", "clean,noise", "--out", str(stem)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(Path(str(stem) + ".json").read_text())["results"]["digits-mlp"]
    for regime in ("clean", "noise"):
        summary = result[regime]["summary"]
        rows = summary["rows"]
        assert set(rows) == {"random", "loss-rank"}
        # the anchor is random's mean final metric, and differences are paired per seed
        assert summary["target"] == pytest.approx(np.mean(rows["random"]["final_per_seed"]))
        paired = np.subtract(rows["loss-rank"]["final_per_seed"], rows["random"]["final_per_seed"])
        assert rows["loss-rank"]["diff_mean"] == pytest.approx(paired.mean())
        for row in rows.values():
            assert len(row["final_per_seed"]) == 2 and 0.1 < row["final_mean"] <= 1.0
    # label noise costs a model accuracy on the clean test labels, whatever the batches
    assert result["noise"]["summary"]["target"] < result["clean"]["summary"]["target"]
    assert Path(str(stem) + ".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "digits-mlp / noise" in proc.stdout and "verdict" in proc.stdout


MPIEXEC = Path(sys.executable).parent / "mpiexec"


@pytest.mark.slow
@pytest.mark.skipif(not MPIEXEC.exists() and shutil.which("mpiexec") is None, reason="no mpiexec")
def test_mpi_mode_runs_two_ranks_end_to_end(tmp_path):
    """``--mpi 2``: one command launches mpiexec; rank 0 reports the slowest rank's walls, and
    every run ran (and was checked) on both ranks."""
    sys.path.insert(0, str(ROOT / "tests" / "mp_scripts"))
    from common import run_command

    drop = ("OMPI_", "PMIX_", "PMI_", "MV2_", "PRTE_")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(drop) and k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")}
    stem = tmp_path / "m"
    output = run_command([sys.executable, ROOT / "benchmarks" / "bench_quality.py", "--quick", "--mpi", "2",
                          "--regimes", "clean", "--methods", "random,loss-rank,lr-pf",
                          "--variant", "lr-pf=loss-rank:prefetch=1", "--steps-scale", "0.2", "--out", stem],
                         env, timeout=120)
    assert "2 ranks x B=32" in output and "digits-mlp / clean" in output
    payload = json.loads(Path(str(stem) + ".json").read_text())
    assert payload["world_size"] == 2 and payload["args"]["bind_to"] == "core"
    runs = payload["results"]["digits-mlp"]["clean"]["runs"]
    assert set(runs) == {"random", "loss-rank", "lr-pf"}
    for method_runs in runs.values():
        assert len(method_runs) == 2
        for run in method_runs:
            assert len(run["rank_wall_seconds"]) == 2 and run["wall_seconds"] == max(run["rank_wall_seconds"])
            assert run["steps"] == 30 and [pt[0] for pt in run["curve"]] == [10, 20, 30]
            assert 0.1 < run["final"] <= 1.0
    # random batches use no feedback: nothing is all-gathered; loss-rank's feedback is
    assert sum(r["observe_seconds"] for r in runs["random"]) < sum(r["observe_seconds"] for r in runs["loss-rank"])
    assert Path(str(stem) + ".md").exists()
