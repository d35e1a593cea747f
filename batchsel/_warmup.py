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
    loss_rank = LossRankSelector(64, batch_size=8, seed=0)
    batches = loss_rank.iter_batches(epoch=0)
    first = next(batches)
    loss_rank.observe(first, losses=rng.random(len(first)))
    next(batches)
    smdl = SubmodularSelector(rng.random((64, 4), dtype=np.float32), batch_size=8, seed=0)
    batch = next(smdl.iter_batches(epoch=0))
    smdl.observe(batch, logits=np.zeros((len(batch), 3), np.float32))
    return time.perf_counter() - start


__all__ = ["warmup"]
