"""Helpers shared by tests/integrations/test_lightning.py and tests/integrations/test_hf.py: run a multi-process job
whose ranks write ``OUT.rank{r}.json``, and run an example script in this process."""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import sys
import time
from pathlib import Path

from common import free_port, run_command


def run_ranks(cmd: list[str], out: Path, env: dict, ranks: int = 2, timeout: float = 300) -> list[dict]:
    """Run ``cmd`` in its own session (the whole group is killed if it hangs) and return
    every rank's result."""
    run_command(cmd, env, timeout)
    deadline = time.monotonic() + 60  # a launcher's child rank (Lightning DDP) may end just after rank 0
    while not all(Path(f"{out}.rank{r}.json").exists() for r in range(ranks)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [json.loads(Path(f"{out}.rank{r}.json").read_text()) for r in range(ranks)]


def run_example(path: Path, *argv: str, cwd: Path) -> float:
    """Run ``examples/<path>`` as ``__main__`` here (its imports are already paid for) and
    return the train accuracy it prints last."""
    saved_argv, saved_cwd, printed = sys.argv, os.getcwd(), io.StringIO()
    sys.argv = [str(path), *argv]
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(printed):
            runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
    line = printed.getvalue().strip().splitlines()[-1]
    assert line.startswith("train accuracy"), line
    return float(line.split()[2])


def torchrun(script: Path | str, *argv: str, processes: int = 2) -> list[str]:
    """The command that runs ``script argv...`` on ``processes`` local processes under
    torchrun (gloo on CPU), on a free port."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(processes),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        str(script),
        *map(str, argv),
    ]
