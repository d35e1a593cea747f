"""Compile the selectors' numba kernels before a timed run."""

from __future__ import annotations

import time

import numpy as np


def warmup() -> float:
    """Run loss-rank and SMDL once on tiny data so their kernels compile now, not in step 1.

    The kernels are cached on disk (numba's ``cache=True``, in ``__pycache__`` beside the
    modules, or ``NUMBA_CACHE_DIR``), so after the first run of an installation this
    only loads them. Returns the seconds it took.

    >>> seconds = warmup()
    >>> seconds >= 0
    True
    """
    from .selectors import LossRankSelector, SubmodularSelector

    start = time.perf_counter()
    rng = np.random.default_rng(0)
    x = rng.random((64, 4), dtype=np.float32)
    # one process and a rank of several: a rank's shard is a strided view, which numba
    # compiles apart; float32 feedback as torch gives it
    for world_size in (1, 2):
        loss_rank = LossRankSelector(64, batch_size=8, seed=0)
        batches = loss_rank.iter_batches(epoch=0, rank=0, world_size=world_size)
        first = next(batches)
        loss_rank.observe(first, losses=rng.random(len(first)).astype(np.float32))
        next(batches)
        smdl = SubmodularSelector(x, batch_size=8, seed=0)
        batches = smdl.iter_batches(epoch=0, rank=0, world_size=world_size)
        first = next(batches)
        smdl.observe(first, logits=np.zeros((len(first), 3), np.float32))
        next(batches)
    return time.perf_counter() - start


__all__ = ["warmup"]
