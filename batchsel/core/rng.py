"""Counter-based random numbers (splitmix64: a 64-bit mix of a key plus a counter).

A batch is drawn inside one compiled call that never needs the GIL: no numpy Generator is
built or called per batch (that cost more than the draws, with cold caches after a
training step). A run's key hashes (seed, epoch,
rank); batch ``t`` uses ``_batch_key(key, t)``; ``substream(key, which)`` gives the
batch's independent streams and ``uniform(stream, i)`` their numbers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_INV53 = 1.0 / 9007199254740992.0  # 2 ** -53
_MASK63 = (1 << 63) - 1


@njit(inline="always")
def _mix64(z):  # pragma: no cover - numba
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


@njit(inline="always")
def substream(key, which):  # pragma: no cover - numba
    """Stream ``which`` (an integer >= 0) of the batch key ``key``: a 64-bit number for
    :func:`uniform`; distinct ``which`` give independent streams."""
    return _mix64(np.uint64(key) ^ _mix64(np.uint64(which) * _GAMMA))


@njit(inline="always")
def uniform(stream, i):  # pragma: no cover - numba
    """The ``i``-th number in [0, 1) of ``stream`` (53 random bits; ``i`` >= 0)."""
    return np.float64(_mix64(stream + np.uint64(i + 1) * _GAMMA) >> _S11) * _INV53


@njit(cache=True, nogil=True)
def choice(stream, n, k, scratch, out):  # pragma: no cover - numba
    """``k`` distinct numbers of ``0..n-1`` in random order into ``out`` (partial
    Fisher-Yates over ``scratch``, which must hold ``n`` slots)."""
    for i in range(n):
        scratch[i] = i
    for i in range(k):
        j = i + min(int(uniform(stream, i) * (n - i)), n - i - 1)
        scratch[i], scratch[j] = scratch[j], scratch[i]
        out[i] = scratch[i]


def _run_key(seed: int, epoch: int, rank: int) -> int:
    """The 63-bit key of (seed, epoch, rank), hashed by numpy's SeedSequence (any size of
    seed); batch ``t`` of the run uses ``_batch_key(key, t)``."""
    return int(np.random.SeedSequence([int(seed), int(epoch), int(rank)]).generate_state(1, np.uint64)[0]) >> 1


def _batch_key(run_key: int, t: int) -> int:
    # distinct for distinct t (an odd multiplier); the kernels mix it before any use
    return (run_key ^ (int(t) * 0x9E3779B97F4A7C15)) & _MASK63


class CounterKeyedBatches:
    """Mixin for an online selector whose compiled kernel draws a batch's numbers itself.

    Batch ``t`` gets an int key of (seed, epoch, rank, t) instead of a numpy Generator
    (``OnlineSelector._batch_rng``'s default). The run's key is computed once, on first use
    (so also for a run restored from a state), and kept in the run under ``"key"``.

    Attributes
    ----------
    seed : int
        The selector's seed, a non-negative integer (set by the selector, not here).

    See Also
    --------
    stream_key : a batch's key from what ``_batch_rng`` returned.
    """

    seed: int  # the selector's

    def _batch_rng(self, run: dict[str, Any], rank: int, t: int) -> int:
        key = run.get("key")
        if key is None:
            key = run["key"] = _run_key(self.seed, run["epoch"], rank)
        return _batch_key(key, t)


def stream_key(rng: Any) -> int:
    """A batch's key: the int itself, or 63 bits drawn from a numpy Generator.

    Parameters
    ----------
    rng : int or numpy.random.Generator
        A batch key (a Python or numpy integer, not a bool), as
        :class:`CounterKeyedBatches` hands out, or a Generator to draw one from.

    Returns
    -------
    int
        A key in ``[0, 2**63)``: an integer's low 63 bits, or a number drawn from ``rng``
        (which advances it).

    See Also
    --------
    substream : the batch's streams of numbers from this key (in compiled code).

    Examples
    --------
    >>> stream_key(5), stream_key(np.int64(-1)) == 2**63 - 1
    (5, True)
    >>> 0 <= stream_key(np.random.default_rng(0)) < 2**63
    True
    """
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, (bool, np.bool_)):
        return int(rng) & _MASK63
    return int(rng.integers(0, 1 << 63))
