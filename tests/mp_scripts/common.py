"""Helpers shared by the multi-process test scripts (and tests/loop/test_sampler.py): a tiny
online selector, a launcher for torch.multiprocessing + gloo, and a comparison of states."""

from __future__ import annotations

import os
import re
import socket

import numpy as np

from batchsel.selectors import Selector
from batchsel.selectors.sharding import epoch_rng, even_split


class TinyOnline(Selector, online=True, uses_feedback=True):
    """A minimal online selector for tests: rank r's batch t is the B not-yet-used
    examples of r's shard (a per-epoch shuffle, split as DistributedSampler does) with the
    highest observed score, ties broken by the shuffle order. Scores are the latest loss
    observed for an example."""

    def __init__(self, num_examples: int, batch_size: int, *, seed: int = 0, drop_last: bool = False) -> None:
        super().__init__(num_examples, batch_size, seed=seed, drop_last=drop_last)
        self.scores = np.zeros(num_examples)
        self.observed = np.zeros(num_examples, dtype=np.int64)  # how often each example was observed
        self._used: np.ndarray | None = None  # positions of this rank's shard used this epoch

    def _shard(self, epoch: int, rank: int, world_size: int) -> np.ndarray:
        perm = epoch_rng(self.seed, epoch).permutation(self.num_examples)
        return even_split(perm, world_size, self.drop_last)[rank]

    def num_batches(self, world_size: int = 1) -> int:
        n = self.num_examples // world_size if self.drop_last else -(-self.num_examples // world_size)
        return -(-n // self.batch_size)

    def iter_batches(self, epoch: int, rank: int = 0, world_size: int = 1, start: int = 0):
        shard = self._shard(epoch, rank, world_size)
        if start == 0 or self._used is None:
            self._used = np.zeros(len(shard), dtype=bool)
        for _ in range(start, self.num_batches(world_size)):
            free = np.flatnonzero(~self._used)
            order = np.argsort(-self.scores[shard[free]], kind="stable")[: self.batch_size]
            pick = free[order]
            self._used[pick] = True
            yield shard[pick].astype(np.int64)

    def observe(self, indices, losses=None, logits=None, embeddings=None) -> None:
        idx = np.asarray(indices, dtype=np.int64)
        if losses is not None:
            self.scores[idx] = np.asarray(losses, dtype=np.float64)
        np.add.at(self.observed, idx, 1)

    def state_dict(self):
        return {
            "scores": self.scores.copy(),
            "observed": self.observed.copy(),
            "used": None if self._used is None else self._used.copy(),
        }

    def load_state_dict(self, state):
        self.scores = np.array(state["scores"], dtype=np.float64)
        self.observed = np.array(state["observed"], dtype=np.int64)
        self._used = None if state["used"] is None else np.array(state["used"], dtype=bool)


def same_state(a, b) -> bool:
    """Whether two saved states hold the same values: dicts, lists and tensors compared
    entry by entry, an array a journal saved as a shared base and the entries written since
    (``{"base", "at", "values"}``) by the values they put together, whatever its base."""
    import torch

    from batchsel.core.journal import JOURNALED_KEYS, saved_values

    if all(isinstance(x, dict) and x.keys() == JOURNALED_KEYS for x in (a, b)):
        dtype = np.asarray(a["base"]).dtype
        return np.array_equal(saved_values(a, None, dtype), saved_values(b, None, dtype), equal_nan=dtype.kind == "f")
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(same_state(u, v) for u, v in zip(a, b))
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and np.array_equal(a.numpy(), b.numpy(), equal_nan=a.is_floating_point())
        )
    return a == b


def fake_loss(indices: np.ndarray, epoch: int) -> np.ndarray:
    """A deterministic stand-in for per-example losses."""
    return ((np.asarray(indices) * 7919 + 31 * epoch) % 101) / 101.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torch_worker(rank: int, world_size: int, port: int, fn, args) -> None:
    # what torchrun would set; init_torch_distributed_from_mpi takes it from there
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank)
    )
    fn(*args)


def spawn_torch(fn, world_size: int, *args) -> None:
    """Run ``fn(*args)`` on ``world_size`` processes with torchrun-style variables set;
    torch.multiprocessing ends the others when one fails. Forked, so the children reuse
    the parent's imports (torch, batchsel) instead of paying for them again."""
    import torch.multiprocessing as mp

    mp.start_processes(
        _torch_worker, args=(world_size, free_port(), fn, args), nprocs=world_size, join=True, start_method="fork"
    )


def exit_after_result() -> None:
    """End a framework job (Lightning, HF Trainer) whose ranks have written their results:
    wait for every rank, close the process group, and leave without interpreter teardown.
    That teardown, after the Trainer, aborts now and then in a C++ destructor
    ("terminate called without an active exception", SIGABRT on rank 0) even after
    ``destroy_process_group``; the job has nothing left to check by then."""
    import sys

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_session(cmd: list, env: dict, timeout: float, cwd: "os.PathLike | str | None" = None) -> tuple[int, str]:
    """Run a launcher (and its ranks) in a session of its own: (exit code, output); on a
    hang the whole process group is killed and the test fails with the output's tail."""
    import signal
    import subprocess

    proc = subprocess.Popen(
        [str(c) for c in cmd],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and every rank
        output, _ = proc.communicate()
        raise AssertionError(f"{' '.join(map(str, cmd))} hung for {timeout} s:\n{output[-3000:]}") from None
    return proc.returncode, output


def run_command(cmd: list, env: dict, timeout: float, succeed: bool = True) -> str:
    """:func:`run_session`'s output; ``succeed=False``: the job must fail (non-zero exit)."""
    returncode, output = run_session(cmd, env, timeout)
    assert (returncode == 0) == succeed, (returncode, output[-5000:])
    return output


def cli_cases_on_two_ranks(
    cases: list[tuple["os.PathLike | str", list[str], list[str]]],
    mpiexec: "os.PathLike | str",
    env: dict,
    timeout: float,
) -> tuple[int, dict[tuple[int, int], tuple[int, str, str]]]:
    """Several ``batchsel`` command lines under one mpiexec launch of two ranks
    (tests/mp_scripts/cli_ranks_job.py): ``cases`` lists (folder, argv of rank 0, argv of
    rank 1), run one after the other. Returns the launcher's exit code and, per (case,
    rank), the command's exit code, stdout and stderr (``\\r`` and ESC written as the
    two-character ``\\r`` and four-character ``\\x1b``). A case missing from the output (a
    rank that crashed or hung) fails the test with the output's tail."""
    import json
    import sys
    import tempfile

    job = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "cli_ranks_job.py")]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([[str(folder), list(a0), list(a1)] for folder, a0, a1 in cases], f)
    try:
        argv = [*job, f.name]
        cmd = [mpiexec, "--allow-run-as-root", "--oversubscribe", "-n", "1", *argv, "0", ":", "-n", "1", *argv, "1"]
        rc, output = run_session(cmd, env, timeout)
    finally:
        os.unlink(f.name)
    results: dict = {}
    lines: dict = {}
    for line in output.splitlines():
        m = re.match(r"case (\d+) rank (\d+) (exit (-?\d+)|(out|err)\| (.*))$", line)
        if not m:
            continue
        key = (int(m.group(1)), int(m.group(2)))
        if m.group(4) is not None:
            results[key] = int(m.group(4))
        else:
            lines.setdefault((key, m.group(5)), []).append(m.group(6))
    parsed = {
        key: (code, "\n".join(lines.get((key, "out"), [])), "\n".join(lines.get((key, "err"), [])))
        for key, code in results.items()
    }
    for i in range(len(cases)):
        for rank in (0, 1):
            assert (i, rank) in parsed, (rc, output[-3000:])  # every case ran to its end on each rank
    return rc, parsed
