"""Multi-process runs: mpiexec (MPIComm, torch.distributed set up from MPI) and
torch.multiprocessing with torchrun's variables (TorchDistComm), gloo on CPU.

Each job is launched once per module (tests/mp_scripts/job.py does the work and asserts
on every rank; rank 0 reports) and killed, with its process group, on timeout."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from paths import MP_SCRIPTS

import batchsel

JOB = MP_SCRIPTS / "job.py"
MPIEXEC = Path(sys.executable).parent / "mpiexec"
if not MPIEXEC.exists():
    MPIEXEC = Path(shutil.which("mpiexec") or "/nonexistent/mpiexec")
TIMEOUT = 180  # generous for a loaded 2-core machine; a healthy job takes a few seconds

import job  # noqa: E402

from batchsel.selectors import LossRankSelector  # noqa: E402

pytestmark = pytest.mark.slow
needs_mpi = pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec")
try:
    from batchsel.submodular.functions import FacilityLocation  # noqa: F401
    from batchsel.submodular.optimizers import maximize  # noqa: F401

    HAS_GREEDI = True
except ImportError:  # the set-function engine is not there yet
    HAS_GREEDI = False


def clean_env() -> dict:
    """This environment without any launcher's variables (pytest itself may run under one)."""
    drop = ("OMPI_", "PMIX_", "PMI_", "MV2_", "PRTE_")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(drop) and k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")
    }
    env["OMP_NUM_THREADS"] = "1"  # several ranks share 2 cores
    return env


def launch(launcher: str, n: int, opts: list, out: Path, timeout: float = TIMEOUT):
    if launcher == "mpi":
        cmd = [
            str(MPIEXEC),
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            str(n),
            sys.executable,
            str(JOB),
            str(out),
            *opts,
        ]
    else:
        cmd = [sys.executable, str(JOB), str(out), "--torch", str(n), *opts]
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and every rank
        output, _ = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} hung for {timeout} s:\n{output[-3000:]}")
    return proc.returncode, output, time.monotonic() - start


def run_ok(launcher, n, opts, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"{launcher}{n}") / "result"
    rc, output, _ = launch(launcher, n, opts, out)
    assert rc == 0, output[-5000:]
    result = json.loads(Path(f"{out}.json").read_text())
    arrays = dict(np.load(f"{out}.npz")) if Path(f"{out}.npz").exists() else {}
    return result, arrays


@pytest.fixture(scope="module")
def mpi4(tmp_path_factory):
    if not MPIEXEC.exists():
        pytest.skip("no mpiexec")
    return run_ok("mpi", 4, ["--checks"], tmp_path_factory)


@pytest.fixture(scope="module")
def mpi2(tmp_path_factory):
    if not MPIEXEC.exists():
        pytest.skip("no mpiexec")
    return run_ok("mpi", 2, ["--ddp"] + (["--greedi"] if HAS_GREEDI else []), tmp_path_factory)


@pytest.fixture(scope="module")
def torch2(tmp_path_factory):
    return run_ok("torch", 2, ["--checks", "--ddp"], tmp_path_factory)


@pytest.mark.parametrize("jobname, comm, world", [("mpi4", "MPIComm", 4), ("torch2", "TorchDistComm", 2)])
def test_sampler_across_ranks(jobname, comm, world, request):
    """On every rank (asserted inside the job): batches disjoint and covering, equal
    counts, fingerprints agree and a seed mismatch is caught, every rank's selector saw
    every rank's feedback, resume from rank 0's checkpoint reproduced the rest."""
    result, _ = request.getfixturevalue(jobname)
    assert result["comm"] == comm and result["world_size"] == world
    assert result["online_batches"] == LossRankSelector(120, 7).num_batches(world)
    assert result["fingerprint_0"] == batchsel.RandomSelector(120, 7, seed=11).plan(0, world).fingerprint()
    assert result["fingerprint_0"] != result["fingerprint_1"]


@pytest.mark.parametrize("jobname, comm", [("mpi2", "MPIComm"), ("torch2", "TorchDistComm")])
def test_ddp_ranks_agree_and_match_one_process_on_the_union_batches(jobname, comm, request):
    result, arrays = request.getfixturevalue(jobname)
    # under mpiexec the DDP loop's sampler shares feedback over MPI (up over the same ranks), not gloo
    assert result["ddp_comm"] == comm
    params, steps = arrays["params"], result["steps"]
    assert params.shape[0] == 2 and np.array_equal(params[0], params[1]), "ranks ended with different models"
    # the global batch of step s is the union of the ranks' batches; DDP averages the
    # ranks' mean losses, which equals the mean over the union as the ranks' batches are
    # equally large
    x, _ = job.digits()
    per_epoch = batchsel.RandomSelector(len(x), job.BATCH).num_batches(2)
    assert steps == job.EPOCHS * per_epoch
    union = []
    for s in range(steps):
        b0, b1 = arrays[f"r0_s{s}"], arrays[f"r1_s{s}"]
        assert len(b0) == len(b1)
        union.append(np.concatenate([b0, b1]))
    first_epoch = np.concatenate(union[:per_epoch])
    assert set(first_epoch.tolist()) == set(range(len(x)))
    reference = job.train_single(union)
    assert np.abs(reference - params[0]).max() < 1e-5


@pytest.mark.skipif(not HAS_GREEDI, reason="batchsel.maximize / FacilityLocation not available yet")
def test_greedi_on_two_mpi_ranks(mpi2):
    result, _ = mpi2
    assert result["greedi_parts"] == 2 and result["greedi_ratio"] >= 0.98, result


@needs_mpi
def test_a_failing_rank_ends_the_job(tmp_path):
    rc, output, seconds = launch(
        "mpi", 2, ["--ddp", "--fail-rank", "1", "--fail-step", "3"], tmp_path / "r", timeout=120
    )
    assert rc != 0
    assert seconds < 60, f"took {seconds:.0f} s to end"
    assert "fails on purpose at step 3" in output  # the failing rank's traceback is shown
