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
def _byte_counts(keys):  # pragma: no cover - numba
    """How many of the uint64 ``keys`` hold each value of each of their 8 bytes."""
    counts = np.zeros((8, 256), np.int64)
    for i in range(keys.size):
        k = keys[i]
        for p in range(8):
            counts[p, (k >> np.uint64(8 * p)) & _BYTE] += 1
    return counts


@njit(cache=True, nogil=True)
def _moving_passes(counts, n):  # pragma: no cover - numba
    """The bytes whose pass moves a key: not those every key shares."""
    return [p for p in range(8) if counts[p].max() != n]


@njit(cache=True, nogil=True, inline="always")
def _bucket_starts(at, counts_of_byte):  # pragma: no cover - numba
    """Where each value of a byte starts in a pass's output."""
    total = 0
    for d in range(256):
        at[d] = total
        total += counts_of_byte[d]


@njit(cache=True, nogil=True)
def _radix_passes(keys, order, counts, passes):  # pragma: no cover - numba
    """``keys`` and ``order`` after the stable passes on the bytes ``passes`` (least
    significant first): new arrays, or the same ones without a pass."""
    n = keys.size
    if len(passes) == 0:
        return keys, order
    keys_out = np.empty(n, np.uint64)
    order_out = np.empty(n, order.dtype)
    at = np.empty(256, np.int64)
    for p in passes:
        _bucket_starts(at, counts[p])
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
    return keys, order


@njit(cache=True, nogil=True)
def _radix_order(keys):  # pragma: no cover - numba
    """The stable argsort of uint64 ``keys`` (which it reorders: pass a copy)."""
    counts = _byte_counts(keys)
    return _radix_passes(keys, np.arange(keys.size), counts, _moving_passes(counts, keys.size))[1]


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
    return _radix_order(_float_keys(values))


@njit(cache=True, nogil=True)
def _float_keys(values):  # pragma: no cover - numba
    """uint64 keys in the order of float64 ``values`` (no NaN), equal values one key."""
    bits = values.view(np.uint64)
    keys = np.empty(values.size, np.uint64)
    for i in range(values.size):
        b = np.uint64(0) if values[i] == 0.0 else bits[i]  # -0.0 == 0.0: one key
        keys[i] = ~b if b & _SIGN else b | _SIGN  # negatives reversed below the positives
    return keys


@njit(cache=True, nogil=True, inline="always")
def _bits_of_key(key):  # pragma: no cover - numba
    """The float64 bits a :func:`_float_keys` key stands for (``0.0`` for a zero)."""
    return key ^ _SIGN if key & _SIGN else ~key


@njit(cache=True, nogil=True)
def sort_into_rows(values, out_values, out_positions, row_bits):  # pragma: no cover - numba
    """Sort float64 ``values`` stably and write the ``j``-th smallest, and its index, at
    row ``j >> row_bits``, column ``j % 2**row_bits`` of ``out_values`` and
    ``out_positions`` (the rest of each row untouched): a sorted array laid out in rows
    with room to grow, with no gather of the values afterwards (the last radix pass
    writes them) and no division per value (rows of a power of two).

    Parameters
    ----------
    values : numpy.ndarray
        float64, 1-D, no NaN; fewer than 2**31 if ``out_positions`` is int32.
    out_values : numpy.ndarray
        float64, 2-D, C-contiguous, at least ``ceil(n / 2**row_bits)`` rows of at
        least ``2**row_bits`` columns. A zero is written as ``0.0`` (``-0.0 == 0.0``).
    out_positions : numpy.ndarray
        Integers, the same shape.
    row_bits : int
        ``log2`` of the values per row, ``>= 0``.

    Example
    -------
    >>> out, at = np.zeros((2, 3)), np.zeros((2, 3), np.int32)
    >>> sort_into_rows(np.array([2.0, -1.0, 0.5, 3.0]), out, at, 1)
    >>> out.tolist(), at.tolist()
    ([[-1.0, 0.5, 0.0], [2.0, 3.0, 0.0]], [[1, 2, 0], [0, 3, 0]])
    """
    n = values.size
    mask = (1 << row_bits) - 1
    if n < _RADIX_LEAST:
        order = np.argsort(values, kind="mergesort")
        for j in range(n):
            out_values[j >> row_bits, j & mask] = values[order[j]] + 0.0  # (-0.0 + 0.0 is 0.0)
            out_positions[j >> row_bits, j & mask] = order[j]
        return
    keys = _float_keys(values)
    counts = _byte_counts(keys)
    passes = _moving_passes(counts, n)
    out_bits = out_values.view(np.uint64)
    order = np.arange(n).astype(out_positions.dtype)
    if not passes:  # one key throughout: in index order
        for j in range(n):
            out_bits[j >> row_bits, j & mask] = _bits_of_key(keys[j])
            out_positions[j >> row_bits, j & mask] = j
        return
    keys, order = _radix_passes(keys, order, counts, passes[:-1])
    at = np.empty(256, np.int64)  # the last pass writes the rows
    _bucket_starts(at, counts[passes[-1]])
    shift = np.uint64(8 * passes[-1])
    for i in range(n):
        k = keys[i]
        d = (k >> shift) & _BYTE
        j = at[d]
        out_bits[j >> row_bits, j & mask] = _bits_of_key(k)
        out_positions[j >> row_bits, j & mask] = order[i]
        at[d] = j + 1


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


__all__ = ["stable_argsort", "stable_argsort_int", "sort_into_rows"]
