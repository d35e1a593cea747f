"""Launching a benchmark's ranks under ``mpiexec`` from the benchmark itself (one command for
the user), shared by ``bench_overlap.py --mpi`` and ``bench_quality.py --mpi N``.

The parent process runs ``mpiexec ... -n N python SCRIPT ARGS`` with an environment free of
any launcher's variables (the parent may itself run under one, e.g. pytest under mpiexec)
and, on a timeout, kills the launcher and every rank (their own session). ``--bind-to``:
Open MPI binds each of 2 ranks to one core by default, so a rank's prefetch thread shares
that core with its training step; ``none`` lets the OS place it on any core.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

MPIEXEC = Path(sys.executable).parent / "mpiexec"
if not MPIEXEC.exists():
    MPIEXEC = Path(shutil.which("mpiexec") or "mpiexec")

_LAUNCHER_PREFIXES = ("OMPI_", "PMIX_", "PMI_", "MV2_", "PRTE_")
_TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def clean_env() -> dict[str, str]:
    """This environment without any launcher's variables."""
    return {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCHER_PREFIXES) and k not in _TORCHRUN_VARS}


def mpiexec_command(n: int, bind: str, script: str | Path, args: list[str]) -> list[str]:
    """``mpiexec`` running ``script`` with ``args`` on ``n`` ranks of this Python. As root Open
    MPI refuses to start without ``--allow-run-as-root``; ``--oversubscribe`` lets ``n``
    exceed the cores (a 2-core machine)."""
    return [
        str(MPIEXEC),
        "--allow-run-as-root",
        "--oversubscribe",
        "--bind-to",
        bind,
        "-n",
        str(n),
        sys.executable,
        str(script),
        *map(str, args),
    ]


def run_mpiexec(cmd: list[str], timeout: float | None, capture: bool) -> subprocess.CompletedProcess:
    """Run ``cmd`` (from :func:`mpiexec_command`) in a session of its own; ``capture=False``
    streams the ranks' output to this process's. On a timeout the whole session is killed
    and ``TimeoutError`` raised; a non-zero exit raises ``RuntimeError`` with the output's tail."""
    if not Path(cmd[0]).exists() and shutil.which(cmd[0]) is None:
        raise RuntimeError(f"no mpiexec found ({cmd[0]}): install Open MPI / mpi4py in this environment")
    pipe = subprocess.PIPE if capture else None
    proc = subprocess.Popen(cmd, env=clean_env(), stdout=pipe, stderr=pipe, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and every rank
        proc.communicate()
        raise TimeoutError(f"{' '.join(cmd)} ran over {timeout} s and was killed") from None
    except BaseException:  # Ctrl-C: no orphaned ranks
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    if proc.returncode != 0:
        tail = f"\n{(out or '')[-2000:]}\n{(err or '')[-2000:]}" if capture else " (its output is above)"
        raise RuntimeError(f"{' '.join(cmd)} failed with exit code {proc.returncode}{tail}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
