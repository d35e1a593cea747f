"""A state call across ranks that only rank 0 makes: ``sampler.state_dict(all_ranks=True)``
inside ``if rank == 0:``, the mistake that used to wait for gloo's 30-minute timeout.

``python -m torch.distributed.run --nproc_per_node 2 state_call_job.py torch``: rank 0
prints what it raised and how long it waited; ``mpiexec -n 2 ... state_call_job.py mpi``:
rank 0's error ends the job through the abort hook. Rank 1 stays alive meanwhile."""

from __future__ import annotations

import os
import sys
import time

from batchsel import LossRankSelector, SelectionBatchSampler


def main(kind: str) -> None:
    if kind == "torch":
        import torch.distributed as dist

        dist.init_process_group("gloo")
        comm = None  # found: torch.distributed
    else:
        from batchsel.integrations import MPIComm

        comm = MPIComm()
    sampler = SelectionBatchSampler(LossRankSelector(64, 4, seed=0), comm=comm, timeout=None)
    rank = sampler.rank
    if rank == 0:
        start = time.monotonic()
        try:
            sampler.state_dict(all_ranks=True, timeout=3.0)  # the others never make this call
        except RuntimeError as exc:
            print(f"rank 0 raised RuntimeError after {time.monotonic() - start:.1f} s: {exc}", flush=True)
            if kind == "mpi":
                raise  # under mpiexec the abort hook ends every rank
        else:
            print("rank 0 returned", flush=True)
    else:
        time.sleep(12 if kind == "torch" else 60)  # alive, elsewhere in its loop
    sys.stdout.flush()
    os._exit(0)  # the process group saw a failed collective: no orderly teardown to wait for


if __name__ == "__main__":
    main(sys.argv[1])
