"""A compiled (numba) stable argsort of float64 values by radix, for sorts of millions.

numba's ``np.argsort(kind="mergesort")`` compares and merges; at ten million losses it
reads the values at random many times over. :func:`stable_argsort` maps each value to a
64-bit key whose unsigned order is the values' order (equal values, ``-0.0`` and ``0.0``
included, get one key) and sorts the keys a byte at a time, least significant first,
each pass stable and skipped where every key shares the byte: the same permutation as
a stable sort, equal values in index order.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: below this many values a merge sort is cheaper than eight counting passes
_RADIX_LEAST = 2048
_SIGN = np.uint64(1) << np.uint64(63)
_BYTE = np.uint64(255)


@njit(cache=True, nogil=True)
def stable_argsort(values):  # pragma: no cover - numba
    """The indices that sort ``values`` (float64, no NaN) ascending, equal values in index
    order: ``np.argsort(values, kind="stable")``.

    Parameters
    ----------
    values : numpy.ndarray
        float64, 1-D, no NaN (``-inf`` and ``inf`` sort first and last).

    Returns
    -------
    numpy.ndarray
        int64, a permutation of ``0 .. len(values) - 1``.

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


__all__ = ["stable_argsort"]
