"""Compiled (numba) stable argsorts by radix: float64 values (loss rank's shard, InfoBatch's
losses: millions) and non-negative integers (SMDL's pools of example indices).

numba's ``np.argsort(kind="mergesort")`` compares and merges; at ten million losses it
reads the values at random many times over. Here each value maps to a 64-bit key whose
unsigned order is the values' order (equal floats, ``-0.0`` and ``0.0`` included, get one
key) and the keys are sorted a byte at a time, least significant first, each pass stable
and skipped where every key shares the byte: the same permutation as a stable sort, equal
values in index order (a stable sort's order is unique).
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: below this many floats a merge sort is as cheap as the radix passes
_RADIX_LEAST = 1024
_SIGN = np.uint64(1) << np.uint64(63)
_BYTE = np.uint64(255)


@njit(cache=True, nogil=True)
def _radix_order(keys):  # pragma: no cover - numba
    """The stable argsort of uint64 ``keys`` (which it reorders: pass a copy)."""
    n = keys.size
    counts = np.zeros((8, 256), np.int64)
    for i in range(n):
        k = keys[i]
        for p in range(8):
            counts[p, (k >> np.uint64(8 * p)) & _BYTE] += 1
    order = np.arange(n)
    keys_out = np.empty(n, np.uint64)
    order_out = np.empty(n, np.int64)
    at = np.empty(256, np.int64)
    for p in range(8):
        if counts[p].max() == n:  # every key has this byte: the pass would not move one
            continue
        total = 0
        for d in range(256):
            at[d] = total
            total += counts[p, d]
        shift = np.uint64(8 * p)
        for i in range(n):  # in the current order: equal bytes keep it (stable)
            k = keys[i]
            d = (k >> shift) & _BYTE
            j = at[d]
            keys_out[j] = k
            order_out[j] = order[i]
            at[d] = j + 1
        keys, keys_out = keys_out, keys
        order, order_out = order_out, order
    return order


@njit(cache=True, nogil=True)
def stable_argsort(values):  # pragma: no cover - numba
    """The indices that sort ``values`` (float64, no NaN) ascending, equal values in index
    order: ``np.argsort(values, kind="stable")``.

    Parameters
    ----------
    values : numpy.ndarray
        float64, 1-D, contiguous, no NaN (``-inf`` and ``inf`` sort first and last).

    Returns
    -------
    numpy.ndarray
        int64, a permutation of ``0 .. len(values) - 1``.

    See Also
    --------
    stable_argsort_int : the same for non-negative integers.

    Example
    -------
    >>> stable_argsort(np.array([2.0, -0.0, 1.0, 0.0, -np.inf])).tolist()
    [4, 1, 3, 2, 0]
    """
    n = values.size
    if n < _RADIX_LEAST:
        return np.argsort(values, kind="mergesort")
    bits = values.view(np.uint64)
    keys = np.empty(n, np.uint64)
    for i in range(n):
        b = np.uint64(0) if values[i] == 0.0 else bits[i]  # -0.0 == 0.0: one key
        keys[i] = ~b if b & _SIGN else b | _SIGN  # negatives reversed below the positives
    return _radix_order(keys)


@njit(cache=True, nogil=True)
def stable_argsort_int(keys):  # pragma: no cover - numba
    """The indices that sort non-negative integer ``keys`` ascending, equal keys in index
    order: ``np.argsort(keys, kind="stable")`` (a pool of 1024 example indices sorts in
    a fraction of a merge sort's time: docs/design/implementation-notes.md).

    Parameters
    ----------
    keys : numpy.ndarray
        1-D integers ``>= 0``.

    Returns
    -------
    numpy.ndarray
        int64, a permutation of ``0 .. len(keys) - 1``.

    See Also
    --------
    stable_argsort : the same for float64 values.

    Example
    -------
    >>> stable_argsort_int(np.array([3, 1, 3, 0])).tolist()
    [3, 1, 0, 2]
    """
    return _radix_order(keys.astype(np.uint64))


__all__ = ["stable_argsort", "stable_argsort_int"]
