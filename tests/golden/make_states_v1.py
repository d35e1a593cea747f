"""Record ``states_v1.pt``: :meth:`SelectionBatchSampler.state_dict` outputs as batchsel
0.1.0 wrote them (state version 1), with the batches each run trained after the checkpoint.

Recorded once, before the resume state was rebuilt (#60), and kept as it is: it is the
fixture that says states written by 0.1.0 still load (``tests/project/test_state_compat.py``).
Running this script again writes the current version's states, so do not, unless a new
release's fixture is wanted under another name.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import golden_cases as G  # noqa: E402

import batchsel  # noqa: E402
from batchsel import SelectionBatchSampler  # noqa: E402

B = 16
STOP = 3  # steps of epoch 1 before the checkpoint
EPOCHS = 3


def selectors() -> dict:
    """Each case: (selector factory, sampler keyword arguments)."""
    n = G.N
    lengths = (np.arange(n) * 7919 % 97 + 3).astype(np.int64)
    return {
        "random": (lambda: batchsel.RandomSelector(n, B, seed=0), {}),
        "loss_rank": (lambda: batchsel.LossRankSelector(n, B, seed=0), {}),
        "loss_rank_prefetch": (lambda: batchsel.LossRankSelector(n, B, seed=0), {"prefetch": 1}),
        "auto": (lambda: batchsel.AutoSelector(n, B, labels=G._y(), seed=0), {}),
        "infobatch": (lambda: batchsel.InfoBatchSelector(n, B, epochs=EPOCHS, seed=0), {"weighted": True}),
        "smdl": (lambda: batchsel.SubmodularSelector(G._x(), B, seed=0), {}),
        "graph_blocks": (lambda: batchsel.GraphBlockSelector(G.data()["graph"], 20, seed=0, blocks_per_batch=2), {}),
        "coreset": (lambda: batchsel.CoresetSelector(G._x(), G._y(), 8, fraction=0.25, seed=0), {"weighted": True}),
        "score_pruning": (lambda: batchsel.ScorePruningSelector(G._y(), B, epochs=EPOCHS, keep=0.5, seed=0), {}),
        "bucket": (lambda: batchsel.BucketSelector(lengths, batch_size=B, seed=0), {}),
        "cost_grouped": (lambda: batchsel.CostGroupedSelector(batchsel.LossRankSelector(n, B, seed=0), lengths), {}),
    }


def fake_losses(indices: np.ndarray, epoch: int) -> np.ndarray:
    return ((indices * 2654435761 + epoch * 97) % 1000 / 100.0).astype(np.float32)


def plain(batch) -> list[int]:
    return [int(i) for i in (batch.indices if hasattr(batch, "indices") else batch)]


def run(make, kwargs, rank=0, world_size=1, state=None, stop=None):
    """Epochs 0..2 (from the state's epoch when given); with ``stop``: the state after
    ``stop`` steps of epoch 1. Returns (batches trained, state or None)."""
    sampler = SelectionBatchSampler(make(), rank=rank, world_size=world_size, **kwargs)
    first = 0
    if state is not None:
        sampler.load_state_dict(state)
        first = int(state["epoch"]) if "epoch" in state else int(state["ranks"][rank]["epoch"])
    trained = []
    for epoch in range(first, EPOCHS):
        sampler.set_epoch(epoch)
        for step, batch in enumerate(sampler):
            idx = np.asarray(plain(batch), dtype=np.int64)
            trained.append(idx.tolist())
            if sampler.selector.uses_feedback:
                sampler.observe(idx, losses=fake_losses(idx, epoch))
            if stop is not None and epoch == 1 and step + 1 == stop:
                return trained, sampler.state_dict()
    return trained, None


def record() -> dict:
    cases = {}
    for name, (make, kwargs) in selectors().items():
        _, state = run(make, kwargs, stop=STOP)
        rest, _ = run(make, kwargs, state=state)
        cases[name] = {"state": state, "rest": rest, "kwargs": kwargs}
    # two ranks, explicit rank and world size, saved in the all-ranks form of state_dict(all_ranks=True)
    make, kwargs = selectors()["loss_rank"]
    ranks = [run(make, kwargs, rank=r, world_size=2, stop=STOP)[1] for r in range(2)]
    every = {"version": ranks[0]["version"], "world_size": 2, "ranks": ranks}
    cases["loss_rank_two_ranks"] = {
        "state": every,
        "rest": [run(make, kwargs, rank=r, world_size=2, state=every)[0] for r in range(2)],
        "kwargs": kwargs,
    }
    return cases


if __name__ == "__main__":
    path = os.path.join(HERE, "states_v1.pt")
    cases = record()
    torch.save({"batchsel": batchsel.__version__, "cases": cases}, path)
    loaded = torch.load(path, weights_only=True)
    print(f"wrote {path}: {len(cases)} cases, batchsel {loaded['batchsel']}; loads with weights_only=True")
