"""Compile the selectors' numba kernels before a timed run, and time what compiles later."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

_clock: Any = None
_clock_lock = threading.Lock()


def compile_seconds() -> float:
    """Seconds numba has spent compiling in this process since the first call (which
    starts the count and returns 0). Loading a kernel from numba's disk cache is not
    compiling. Nested compilations (a kernel's callees) count once.

    Returns
    -------
    float
        Seconds of numba compilation so far, the one running included.

    Example
    -------
    >>> compile_seconds() >= 0.0
    True
    """
    global _clock
    clock = _clock
    if clock is not None:  # read every step: no lock once the listener exists
        return clock.total + (time.perf_counter() - clock.since if clock.depth else 0.0)
    with _clock_lock:
        if _clock is None:
            import numba.core.event as event

            class Clock(event.Listener):  # numba compiles under one global lock: one depth
                def __init__(self) -> None:
                    self.depth, self.total, self.since = 0, 0.0, 0.0

                def on_start(self, ev: Any) -> None:
                    if self.depth == 0:
                        self.since = time.perf_counter()
                    self.depth += 1

                def on_end(self, ev: Any) -> None:
                    self.depth -= 1
                    if self.depth == 0:
                        self.total += time.perf_counter() - self.since

            _clock = Clock()
            event.register("numba:compile", _clock)
        running = time.perf_counter() - _clock.since if _clock.depth else 0.0
        return _clock.total + running


def warmup(*selectors: Any) -> float:
    """Run loss-rank and SMDL once on tiny data so their kernels compile now, not in step 1.
    The kernels are cached on disk (numba's ``cache=True``, in ``__pycache__`` beside the
    modules, or ``NUMBA_CACHE_DIR``), so after the first run of an installation this
    only loads them. Returns the seconds it took.

    Parameters
    ----------
    *selectors : Selector or Selector subclass
        Compile only what these use (a run's selector): loss-rank's kernels for a
        :class:`~batchsel.LossRankSelector`, SMDL's for a :class:`~batchsel.SubmodularSelector`,
        nothing for the others (random batches and offline plans compile nothing). None
        given: both.

    Returns
    -------
    float
        The seconds it took.

    Examples
    --------
    >>> from batchsel import LossRankSelector
    >>> seconds = warmup(LossRankSelector(100, 10))   # loss-rank's kernels only
    >>> seconds >= 0
    True
    """
    from batchsel.selectors import LossRankSelector, SubmodularSelector

    def uses(kind: type) -> bool:
        return not selectors or any(
            issubclass(s, kind) if isinstance(s, type) else isinstance(s, kind) for s in selectors
        )

    start = time.perf_counter()
    rng = np.random.default_rng(0)
    x = rng.random((64, 4), dtype=np.float32)
    # one process and a rank of several: a rank's shard is a strided view, which numba
    # compiles apart; float32 feedback as torch gives it
    for world_size in (1, 2):
        if uses(LossRankSelector):
            loss_rank = LossRankSelector(64, batch_size=8, seed=0)
            batches = loss_rank.iter_batches(epoch=0, rank=0, world_size=world_size)
            first = next(batches)
            loss_rank.observe(first, losses=rng.random(len(first)).astype(np.float32))
            next(batches)
        if uses(SubmodularSelector):
            smdl = SubmodularSelector(x, batch_size=8, seed=0)
            batches = smdl.iter_batches(epoch=0, rank=0, world_size=world_size)
            first = next(batches)
            smdl.observe(first, logits=np.zeros((len(first), 3), np.float32))
            next(batches)
    return time.perf_counter() - start


__all__ = ["compile_seconds", "warmup"]
