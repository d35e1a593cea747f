"""Benchmark of the distributed sampler and the integrations.

1. Sampler overhead per batch: SelectionBatchSampler(RandomSelector) next to torch's
   DistributedSampler + BatchSampler (the anchor), one epoch on rank 0 of W ranks.
   Target: ratio <= 1.2.
2. GreeDi on 2 MPI ranks vs lazy greedy in 1 process, sparse facility location (k-NN
   similarity) with N = 200 000. Targets: speed-up >= 1.6, value ratio (>= 0.98 expected).
3. All-gather of 1M float32 scores on 4 ranks: MPIComm and TorchDistComm (gloo) next to
   the raw calls they wrap (mpi4py ``Allgather`` on buffers, ``dist.all_gather`` on
   tensors) and to mpi4py's pickled ``allgather``.

4. The feedback all-gather of one step (loss-rank, B = 32, ``sync_every=1``) on 2 MPI
   ranks: ``SelectionBatchSampler.observe`` with its default ``timeout`` (a non-blocking
   barrier polled until every rank arrived, then the all-gather with the (epoch, call)
   check) next to ``timeout=None`` (the all-gather alone: the anchor).

Run: ``python benchmarks/bench_sampler.py`` (``--quick``: smaller sizes, < 1 minute).
Parts 2 and 3 launch ``mpiexec`` (the one next to this Python, else on PATH) and
torch.multiprocessing workers; they re-run this file with ``--worker``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

MPIEXEC = Path(sys.executable).parent / "mpiexec"
if not MPIEXEC.exists():
    MPIEXEC = Path(shutil.which("mpiexec") or "mpiexec")


def launch_mpi(n: int, *args: str, timeout: float = 900) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [str(MPIEXEC), "--allow-run-as-root", "--oversubscribe", "-n", str(n), sys.executable, __file__, *args]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


# -- 1. sampler overhead ----------------------------------------------------------------------
def bench_overhead(n: int, batch: int, world: int, epochs: int) -> tuple[float, float, float, int]:
    from torch.utils.data import BatchSampler, DistributedSampler

    from batchsel import RandomSelector, SelectionBatchSampler

    ours = SelectionBatchSampler(RandomSelector(n, batch, seed=0), rank=0, world_size=world)
    dist_sampler = DistributedSampler(range(n), num_replicas=world, rank=0, shuffle=True, seed=0)
    anchor = BatchSampler(dist_sampler, batch, drop_last=False)
    assert len(ours) == len(anchor)

    def epoch_time(set_epoch, sampler, e):
        t = time.perf_counter()
        set_epoch(e)
        count = sum(1 for _ in sampler)
        return time.perf_counter() - t, count

    class SelectorAlone:  # the selector's own iteration, without the sampler around it
        epoch = 0

        def set_epoch(self, e):
            self.epoch = e

        def __iter__(self):
            return ours.selector.iter_batches(self.epoch, 0, world)

    alone = SelectorAlone()
    times_ours, times_anchor, times_alone = [], [], []
    for e in range(epochs):  # interleaved, so all see the same machine load
        t, c = epoch_time(ours.set_epoch, ours, e)
        times_ours.append(t)
        t, c2 = epoch_time(dist_sampler.set_epoch, anchor, e)
        times_anchor.append(t)
        t, _ = epoch_time(alone.set_epoch, alone, e)
        times_alone.append(t)
        assert c == c2 == len(ours)
    return (statistics.median(times_ours), statistics.median(times_anchor), statistics.median(times_alone), len(ours))


# -- 2. GreeDi ----------------------------------------------------------------------------------
def blobs(n: int, d: int = 32, centers: int = 500, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    c = rng.normal(size=(centers, d)) * 2
    return (c[rng.integers(0, centers, n)] + rng.normal(size=(n, d))).astype(np.float32)


def worker_greedi(path: str, k: int, reps: int) -> None:
    import scipy.sparse as sp

    from batchsel.integrations import get_communicator
    from batchsel.submodular.functions import FacilityLocation
    from batchsel.submodular.optimizers import maximize

    comm = get_communicator()
    f = FacilityLocation(sp.load_npz(path))
    maximize(f, 2, optimizer="lazy")  # compile the kernels outside the timings
    times, both_lazy, sel = [], [], None
    for _ in range(reps):
        comm.barrier()
        t = time.perf_counter()
        sel = maximize(f, k, optimizer="greedi", comm=comm)
        times.append(float(comm.allreduce(np.array([time.perf_counter() - t]), op="max")[0]))
        # the same lazy greedy on every rank at once: how much parallelism the machine gives
        comm.barrier()
        t = time.perf_counter()
        maximize(f, k, optimizer="lazy")
        both_lazy.append(float(comm.allreduce(np.array([time.perf_counter() - t]), op="max")[0]))
    evaluations = comm.allreduce(np.array([sel.evaluations]), op="max")[0]
    if comm.rank == 0:
        print(
            "RESULT "
            + json.dumps(
                {
                    "seconds": min(times),
                    "value": float(sel.value),
                    "ranks": comm.size,
                    "concurrent_lazy_s": min(both_lazy),
                    "evaluations": int(evaluations),
                }
            ),
            flush=True,
        )


def bench_greedi(n: int, k: int, reps: int) -> dict:
    import scipy.sparse as sp

    from batchsel.submodular.functions import FacilityLocation
    from batchsel.submodular.optimizers import maximize

    t = time.perf_counter()
    f = FacilityLocation.from_embeddings(blobs(n), neighbors=20)
    build = time.perf_counter() - t
    maximize(f, 2, optimizer="lazy")  # compile the kernels outside the timings
    central_times = []
    for _ in range(reps):
        t = time.perf_counter()
        central = maximize(f, k, optimizer="lazy")
        central_times.append(time.perf_counter() - t)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "similarity.npz")
        sp.save_npz(path, f.similarity, compressed=False)
        two = launch_mpi(2, "--worker", "greedi", path, str(k), str(reps))
    return {
        "build_s": build,
        "central_s": min(central_times),
        "central_value": float(central.value),
        "central_evaluations": int(central.evaluations),
        "greedi_s": two["seconds"],
        "greedi_value": two["value"],
        "greedi_evaluations": two["evaluations"],
        "concurrent_lazy_s": two["concurrent_lazy_s"],
    }


# -- 3. all-gather ------------------------------------------------------------------------------
def _timed(fns: dict, reps: int, comm) -> dict:
    """Median seconds of each call (slowest rank); the calls are interleaved, so that
    all see the same machine load."""
    times: dict = {name: [] for name in fns}
    for rep in range(reps + 1):
        for name, fn in fns.items():
            comm.barrier()
            t = time.perf_counter()
            fn()
            if rep:  # the first round warms up
                times[name].append(time.perf_counter() - t)
    return {name: float(comm.allreduce(np.array([statistics.median(v)]), op="max")[0]) for name, v in times.items()}


def worker_allgather_mpi(size: int, reps: int) -> None:
    from batchsel.integrations import MPIComm

    comm = MPIComm()
    x = np.random.default_rng(comm.rank).random(size, dtype=np.float32)
    recv = np.empty(size * comm.size, dtype=np.float32)
    res = _timed(
        {
            "ours": lambda: comm.allgather(x),
            "raw": lambda: comm.comm.Allgather(x, recv),
            "raw_alloc": lambda: comm.comm.Allgather(x, np.empty(size * comm.size, dtype=np.float32)),
            "pickled": lambda: comm.comm.allgather(x),
        },
        reps,
        comm,
    )
    got = comm.allgather(x)
    comm.comm.Allgather(x, recv)
    assert np.array_equal(np.concatenate(got), recv)
    if comm.rank == 0:
        print("RESULT " + json.dumps(res), flush=True)


def worker_feedback(reps: int) -> None:
    from batchsel.integrations import MPIComm, SelectionBatchSampler
    from batchsel.selectors import LossRankSelector

    comm = MPIComm()
    samplers = {
        name: SelectionBatchSampler(LossRankSelector(4096, 32), comm=comm, sync_every=1, timeout=timeout)
        for name, timeout in (("timeout", 1800.0), ("anchor", None))
    }
    batch = np.arange(32) + 32 * comm.rank
    losses = np.random.default_rng(comm.rank).random(32)
    res = _timed(
        {name: (lambda s=s: [s.observe(batch, losses=losses) for _ in range(100)]) for name, s in samplers.items()},
        reps,
        comm,
    )
    if comm.rank == 0:
        print("RESULT " + json.dumps({k: v / 100 for k, v in res.items()}), flush=True)


def _torch_allgather_rank(rank: int, world: int, port: int, size: int, reps: int, queue) -> None:
    import torch
    import torch.distributed as dist

    from batchsel.integrations import TorchDistComm

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    dist.init_process_group("gloo", init_method="env://")
    comm = TorchDistComm()
    x = np.random.default_rng(rank).random(size, dtype=np.float32)
    xt = torch.from_numpy(x)
    outs = [torch.empty_like(xt) for _ in range(world)]
    res = _timed(
        {
            "ours": lambda: comm.allgather(x),
            "raw": lambda: dist.all_gather(outs, xt),
            "raw_alloc": lambda: dist.all_gather([torch.empty_like(xt) for _ in range(world)], xt),
        },
        reps,
        comm,
    )
    assert np.array_equal(np.concatenate(comm.allgather(x)), torch.cat(outs).numpy())
    if rank == 0:
        queue.put(res)
    dist.destroy_process_group()


def bench_allgather_torch(world: int, size: int, reps: int) -> dict:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # spawn, not fork: this process has run torch ops, and OpenMP's threads do not survive a fork
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_torch_allgather_rank, args=(world, port, size, reps, queue), nprocs=world, start_method="spawn")
    return queue.get()


# -- main ---------------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, under a minute")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        kind, *rest = args.worker
        if kind == "greedi":
            worker_greedi(rest[0], int(rest[1]), int(rest[2]))
        elif kind == "allgather":
            worker_allgather_mpi(int(rest[0]), int(rest[1]))
        elif kind == "feedback":
            worker_feedback(int(rest[0]))
        return

    q = args.quick
    print("== 1. sampler overhead per batch (rank 0), random selection ==")
    print("(us per batch over an epoch, set_epoch included; 'of which selector' = RandomSelector.iter_batches alone)")
    print(
        f"{'N':>9} {'B':>5} {'W':>3} {'batches':>8} {'batchsel':>9} {'of which selector':>18} "
        f"{'DistributedSampler+BatchSampler':>32} {'ratio':>6}"
    )
    for n, b, w in (
        [(100_000, 128, 1), (100_000, 128, 4), (100_000, 32, 4)]
        if q
        else [(1_000_000, 256, 1), (1_000_000, 256, 4), (1_000_000, 32, 4)]
    ):
        ours, anchor, alone, nb = bench_overhead(n, b, w, epochs=3 if q else 7)
        print(
            f"{n:>9} {b:>5} {w:>3} {nb:>8} {ours / nb * 1e6:>9.2f} {alone / nb * 1e6:>18.2f} "
            f"{anchor / nb * 1e6:>32.2f} {ours / anchor:>6.2f}"
        )

    size = 1_000_000
    reps = 5 if q else 20
    print(f"\n== 3. all-gather of {size:,} float32 per rank on 4 ranks (median of {reps}, slowest rank) ==")
    mpi = launch_mpi(4, "--worker", "allgather", str(size), str(reps))
    print("(anchors: the raw call into a preallocated buffer / into a fresh buffer, as our call returns new arrays)")
    print(f"{'':22}{'ours':>9}{'raw':>9}{'raw+alloc':>11}{'ratio raw':>11}{'ratio raw+alloc':>17}")
    tor = bench_allgather_torch(4, size, reps)
    for name, r in (("MPIComm (mpi4py)", mpi), ("TorchDistComm (gloo)", tor)):
        print(
            f"{name:22}{r['ours'] * 1e3:7.2f}ms{r['raw'] * 1e3:7.2f}ms{r['raw_alloc'] * 1e3:9.2f}ms"
            f"{r['ours'] / r['raw']:11.2f}{r['ours'] / r['raw_alloc']:17.2f}"
        )
    print(f"(mpi4py's pickled allgather of the same array: {mpi['pickled'] * 1e3:.2f} ms)")

    fb = launch_mpi(2, "--worker", "feedback", str(reps))
    print(f"\n== 4. one step's feedback all-gather (loss-rank, B = 32) on 2 MPI ranks (median of {reps} x 100) ==")
    print(f"observe(), timeout=1800 (wait_for_ranks + all-gather): {fb['timeout'] * 1e6:7.1f} us")
    print(f"observe(), timeout=None (all-gather alone, anchor)  : {fb['anchor'] * 1e6:7.1f} us")
    print(f"ratio {fb['timeout'] / fb['anchor']:.2f}")

    n, k = (20_000, 100) if q else (200_000, 200)
    print(f"\n== 2. GreeDi, sparse facility location (20-NN), N = {n:,}, k = {k} (best of {2 if q else 3}) ==")
    g = bench_greedi(n, k, reps=2 if q else 3)
    print(f"(similarity built once in {g['build_s']:.1f} s, shared by both runs)")
    print(
        f"lazy greedy, 1 process : {g['central_s']:7.3f} s   value {g['central_value']:.2f}   "
        f"gain evaluations {g['central_evaluations']:,}"
    )
    print(
        f"GreeDi, 2 MPI ranks    : {g['greedi_s']:7.3f} s   value {g['greedi_value']:.2f}   "
        f"gain evaluations per rank {g['greedi_evaluations']:,}"
    )
    print(
        f"speed-up {g['central_s'] / g['greedi_s']:.2f}x (target >= 1.6)   "
        f"value ratio {g['greedi_value'] / g['central_value']:.4f}   "
        f"work ratio (evaluations) {g['central_evaluations'] / g['greedi_evaluations']:.2f}x"
    )
    print(
        f"parallelism the machine gave: lazy greedy alone {g['central_s']:.3f} s, on both ranks at once "
        f"{g['concurrent_lazy_s']:.3f} s -> {2 * g['central_s'] / g['concurrent_lazy_s']:.2f} of 2 cores"
    )


if __name__ == "__main__":
    main()
