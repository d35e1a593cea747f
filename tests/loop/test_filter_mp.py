"""The candidate-filter loop (tests/mp_scripts/filter_job.py) unchanged in one process,
under torch multiprocessing with torchrun's variables, and under ``mpiexec -n 2``.

The job asserts on every rank (same irreducible losses, equal kept batch sizes, same
model on every rank, exact mid-epoch resume from rank 0's checkpoint); here the reports
are checked and compared across launchers."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from common import run_command  # noqa: E402
from paths import MP_SCRIPTS, REPO
from test_integrations_mp import MPIEXEC, TIMEOUT, clean_env

JOB = MP_SCRIPTS / "filter_job.py"

pytestmark = pytest.mark.slow


def run_job(launcher: str, n: int, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp(f"filter_{launcher}{n}") / "result"
    if launcher == "mpi":
        if not MPIEXEC.exists():
            pytest.skip("no mpiexec")
        cmd = [str(MPIEXEC), "--allow-run-as-root", "--oversubscribe", "-n", str(n), sys.executable, str(JOB), str(out)]
    elif launcher == "torch":
        cmd = [sys.executable, str(JOB), str(out), "--torch", str(n)]
    else:
        cmd = [sys.executable, str(JOB), str(out)]
    run_command(cmd, clean_env(), TIMEOUT)
    return json.loads(Path(f"{out}.json").read_text())


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    return {
        "one": run_job("one", 1, tmp_path_factory),
        "torch2": run_job("torch", 2, tmp_path_factory),
        "mpi2": run_job("mpi", 2, tmp_path_factory),
    }


def test_one_process(reports):
    r = reports["one"]
    assert r["world_size"] == 1 and r["steps"] == 2 * r["per_epoch"]
    # digits, 1797 examples, candidates of 64 -> 29 steps per epoch (the last has 5
    # candidates and keeps 2); the model learns
    assert r["per_epoch"] == 29 and r["kept"] == 2 * (28 * 16 + 2)
    assert r["il_accuracy"] > 0.9 and r["accuracy"] > 0.8


@pytest.mark.parametrize("name", ["torch2", "mpi2"])
def test_two_ranks(reports, name):
    r = reports[name]
    assert r["world_size"] == 2
    # 899 examples per rank, candidates of 64: 15 steps, the last with 3 candidates keeps 1
    assert r["per_epoch"] == 15 and r["kept"] == 2 * (14 * 16 + 1)
    assert r["examples_trained"] > 600  # two epochs of 1/4 of the data each: mostly distinct


def test_launchers_agree(reports):
    """torchrun-style and mpiexec runs are the same computation: same batches, same model."""
    a, b = reports["torch2"], reports["mpi2"]
    assert {k: a[k] for k in ("steps", "kept", "examples_trained", "accuracy")} == {
        k: b[k] for k in ("steps", "kept", "examples_trained", "accuracy")
    }


# -- the example --------------------------------------------------------------------------
EXAMPLE = REPO / "examples" / "train_filter.py"


def run_example(launcher: str, opts: list, tmp_path) -> dict:
    metrics = tmp_path / "m.json"
    script = [str(EXAMPLE), "--quick", "--metrics-json", str(metrics), *opts]
    if launcher == "mpi":
        if not MPIEXEC.exists():
            pytest.skip("no mpiexec")
        cmd = [str(MPIEXEC), "--allow-run-as-root", "--oversubscribe", "-n", "2", sys.executable, *script]
    elif launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", *script]
    else:
        cmd = [sys.executable, *script]
    proc = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(metrics.read_text())


EXAMPLE_RUNS = [
    ("one", 1, ["--score", "rho", "--label-noise", "0.25"]),
    ("one", 1, ["--score", "none"]),
    ("torchrun", 2, ["--score", "gradnorm", "--uniform-fraction", "0.2", "--warmup-steps", "20"]),
    ("mpi", 2, ["--score", "rho", "--diversity", "1"]),
]


@pytest.fixture(scope="module")
def one_process_examples(tmp_path_factory) -> list[dict]:
    """The one-process runs of EXAMPLE_RUNS in one process (the script's ``main`` called
    once per run, as its command line would: each run sets up and tears down its own
    process group), in their order."""
    folder = tmp_path_factory.mktemp("filter_example")
    runs = [opts for launcher, _, opts in EXAMPLE_RUNS if launcher == "one"]
    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(EXAMPLE.parent)!r})\n"
        "import train_filter\n"
        "for i, opts in enumerate(json.loads(sys.argv[1])):\n"
        "    train_filter.main(['--quick', '--metrics-json', f'{i}.json', *opts])\n"
    )
    cmd = [sys.executable, "-c", code, json.dumps(runs)]
    proc = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=TIMEOUT, cwd=folder)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads((folder / f"{i}.json").read_text()) for i in range(len(runs))]


@pytest.mark.parametrize("run", range(len(EXAMPLE_RUNS)), ids=[f"{la}-{w}-{' '.join(o)}" for la, w, o in EXAMPLE_RUNS])
def test_example_runs(run, request, tmp_path):
    launcher, world, opts = EXAMPLE_RUNS[run]
    if launcher == "one":
        ones = [i for i, (la, _, _) in enumerate(EXAMPLE_RUNS) if la == "one"]
        r = request.getfixturevalue("one_process_examples")[ones.index(run)]
    else:
        r = run_example(launcher, opts, tmp_path)
    assert r["world_size"] == world and r["steps"] == 200
    assert r["score"] == opts[opts.index("--score") + 1]
    # 200 Adam steps of 32 on digits: far above chance (0.1) whatever the filter
    assert r["test_accuracy"] > 0.8, r
    if r["score"] != "none":
        assert 0 < r["forward_fraction"] < 1 and 0 < r["select_fraction"] < 1
