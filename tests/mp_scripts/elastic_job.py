"""A preempted cluster job, resumed on fewer ranks: ``mpiexec -n 4 elastic_job.py train DIR``
trains epoch 0 (no model: each rank logs the batches it finished), checkpoints every rank's
sampler state every 2 steps (rank 0 writes it), and rank 1 is killed with SIGKILL at step
5. ``mpiexec -n W elastic_job.py resume DIR TAG`` loads the last checkpoint on W ranks and
finishes the epoch, logging its batches under TAG. The test reads the logs: the steps done
before the checkpoint, and the resumed ones, hold every example of the epoch once."""

from __future__ import annotations

import json
import os
import signal
import sys

import torch

from batchsel import AutoSelector, RandomSelector, SelectionBatchSampler
from batchsel.integrations import MPIComm

N, B = 203, 4
CHECKPOINT_EVERY, KILLED_AT = 2, 5


def selector(kind: str):
    if kind == "random":
        return RandomSelector(N, B, seed=5)
    return AutoSelector(N, B, seed=5, pressure=1.0)  # an online selector whose batches hold each example once


def train(folder: str, kind: str) -> None:
    comm = MPIComm()
    sampler = SelectionBatchSampler(selector(kind), comm=comm, timeout=60)
    sampler.set_epoch(0)
    with open(os.path.join(folder, f"trained_{comm.rank}.jsonl"), "w") as log:
        for step, batch in enumerate(sampler):
            if comm.rank == 1 and step == KILLED_AT:
                os.kill(os.getpid(), signal.SIGKILL)  # a node lost mid-epoch
            sampler.observe(batch, losses=torch.rand(len(batch)))  # the step, then its feedback
            log.write(json.dumps({"step": step, "batch": list(batch)}) + "\n")
            log.flush()
            if (step + 1) % CHECKPOINT_EVERY == 0:
                state = sampler.state_dict(all_ranks=True)  # collective
                if comm.rank == 0:
                    tmp = os.path.join(folder, ".checkpoint.tmp")
                    torch.save({"step": step + 1, "sampler": state}, tmp)
                    os.replace(tmp, os.path.join(folder, "checkpoint.pt"))


def resume(folder: str, kind: str, tag: str) -> None:
    comm = MPIComm()
    sampler = SelectionBatchSampler(selector(kind), comm=comm, timeout=60)
    checkpoint = torch.load(os.path.join(folder, "checkpoint.pt"), weights_only=True)
    sampler.load_state_dict(checkpoint["sampler"])
    first = checkpoint["step"]
    batches = []
    for batch in sampler:  # the saved epoch, from the checkpoint's step on
        sampler.observe(batch, losses=torch.rand(len(batch)))
        batches.append(list(batch))
    out = {"first": first, "len": len(sampler), "total": sampler.total_batches(1), "batches": batches}
    with open(os.path.join(folder, f"{tag}_{comm.rank}.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    if sys.argv[1] == "train":
        train(sys.argv[2], sys.argv[3])
    else:
        resume(sys.argv[2], sys.argv[3], sys.argv[4])
