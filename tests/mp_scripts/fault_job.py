"""Multi-rank faults that tests/project/test_faults.py launches, one per run:

    mpiexec -n 2 python fault_job.py CASE [CASE ...]

Each case gives the ranks data or calls that disagree. A rank prints
``rank R raised: <message>`` when the library raises and exits 0, so the test can check
that every rank got the same error; a case that must end the job through the abort hook
(a timeout, a rank that exited) lets the exception go. Several cases run one after the
other in one job (one launch for the tests), each on a communicator of its own (a
duplicate of the world's: nothing a failed case left unreceived reaches the next), each
line then prefixed with ``CASE: ``.
"""

import sys
import time

import numpy as np

from batchsel.distributed.sharded import ShardedIndex, facility_location
from batchsel.integrations import MPIComm, SelectionBatchSampler
from batchsel.selectors import InfoBatchSelector, LossRankSelector
from batchsel.submodular.functions import FacilityLocation
from batchsel.submodular.optimizers import greedi_facility_location, maximize


def data(rows: int, dim: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)


def main() -> None:
    cases = sys.argv[1:]
    if len(cases) == 1:
        run(cases[0], MPIComm(), "")
        return
    from mpi4py import MPI

    for case in cases:
        if case in ("observe-stop", "exit-0", "exit-3"):
            raise SystemExit(f"{case} ends the job: run it alone")
        run(case, MPIComm(MPI.COMM_WORLD.Dup()), f"{case}: ")
        MPI.COMM_WORLD.Barrier()


def run(case: str, comm: MPIComm, prefix: str) -> None:
    r = comm.rank
    try:
        if case == "sharded-rows":  # ranks read datasets of different N
            ShardedIndex(data(1000 - 100 * r, 8), comm, metric="euclidean", progress=False).knn_graph(k=5)
        elif case == "sharded-dim":
            ShardedIndex(data(1000, 8 + r), comm, metric="euclidean", progress=False).knn_graph(k=5)
        elif case in ("sharded-nan", "sharded-nan-leader"):  # a NaN in rank 1's shard, at global row 900
            x = data(1000, 8)
            x[900, 3] = np.nan
            node_work = "leader" if case == "sharded-nan-leader" else "shard"
            ShardedIndex(x, comm, metric="euclidean", progress=False, node_work=node_work)
        elif case == "sharded-rows-tiling":  # graph rows that do not tile the graph
            w = np.eye(10, dtype=np.float32)
            import scipy.sparse as sp

            facility_location(sp.csr_matrix(w[:5] if r == 0 else w[3:]), 2, comm, row_start=0 if r == 0 else 3)
        elif case == "greedi-rows":
            f = FacilityLocation.from_embeddings(data(300 - 50 * r, 4), metric="euclidean")
            maximize(f, 10, optimizer="greedi", comm=comm)
        elif case == "greedi-dim":  # same N, other data: the merges would pick differently
            f = FacilityLocation.from_embeddings(data(300, 4 + r, seed=r), metric="euclidean")
            maximize(f, 10, optimizer="greedi", comm=comm)
        elif case == "greedi-embeddings-dim":
            greedi_facility_location(data(300, 4 + r, seed=r), 10, comm=comm)
        elif case in ("observe-skip", "observe-stop"):
            sampler = SelectionBatchSampler(
                LossRankSelector(64, 4), comm=comm, rank=r, world_size=2, sync_every=1, timeout=3.0
            )
            for epoch in range(2):
                sampler.set_epoch(epoch)
                for step, batch in enumerate(sampler):
                    if case == "observe-skip" and r == 1 and epoch == 0 and step == 2:
                        continue  # rank 1 forgets one call
                    if case == "observe-stop" and r == 1 and step == 3:
                        time.sleep(60)  # rank 1 stops early, alive: rank 0 would wait forever
                    sampler.observe(batch, losses=np.ones(len(batch)))
        elif case in ("exit-0", "exit-3"):  # rank 1 calls sys.exit mid-epoch; the timeout stays at 1800 s
            sampler = SelectionBatchSampler(InfoBatchSelector(64, 4, epochs=2), comm=comm, sync_every=1, weighted=False)
            for epoch in range(2):
                sampler.set_epoch(epoch)
                for step, batch in enumerate(sampler):
                    if r == 1 and epoch == 0 and step == 3:
                        sys.exit(int(case[-1]))
                    sampler.observe(batch, losses=np.ones(len(batch)))
        else:
            raise SystemExit(f"unknown case {case}")
    except (RuntimeError, ValueError) as exc:
        if case in ("observe-stop", "exit-0", "exit-3"):
            raise  # the job must end through the abort hook
        print(f"{prefix}rank {r} raised {type(exc).__name__}: {exc}", flush=True)
        return
    print(f"{prefix}rank {r} finished", flush=True)


if __name__ == "__main__":
    main()
