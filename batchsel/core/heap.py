"""Compiled (numba) priority queues of the greedy algorithms, and their one tie rule.

Every greedy in batchsel picks the largest gain and, among equal gains, the smallest item
index, so runs are reproducible and lazy greedy returns exactly what naive greedy returns:
that order is :func:`before`, defined here once and used by both heaps and by the greedy
loops that compare candidates directly.

- a binary max-heap over two arrays ``keys`` (float64) and ``items`` (int64):
  :func:`heap_push`, :func:`heap_pop` (SMDL's lazy greedy, GreedMax's per-shard heaps);
- an indexed 4-ary max-heap with stale-bound bookkeeping for :func:`batchsel.maximize`'s
  lazy greedy: :func:`heapify`, :func:`lazy_pop`, :func:`lazy_push`, :func:`lazy_drop`.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, inline="always")
def before(ka: float, ia: int, kb: float, ib: int) -> bool:
    """The greedy order: (key ``ka``, item ``ia``) comes before (``kb``, ``ib``) when its
    key is larger, or the keys are equal and its item smaller (reproducible greedy)."""
    return ka > kb or (ka == kb and ia < ib)


# -- a binary max-heap over (keys, items) ------------------------------------------------
@njit(cache=True, nogil=True, inline="always")
def heap_push(keys: np.ndarray, items: np.ndarray, size: int, key: float, item: int) -> int:
    """Add (key, item) to the heap ``keys[:size]``, ``items[:size]`` (room for one more
    needed); returns the new size."""
    i = size
    keys[i] = key
    items[i] = item
    while i > 0:
        parent = (i - 1) // 2
        if not before(keys[i], items[i], keys[parent], items[parent]):
            break
        keys[parent], keys[i] = keys[i], keys[parent]
        items[parent], items[i] = items[i], items[parent]
        i = parent
    return size + 1


@njit(cache=True, nogil=True, inline="always")
def _binary_sift_down(keys: np.ndarray, items: np.ndarray, size: int, i: int) -> None:
    """Move entry ``i`` down until neither child comes before it."""
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        child = left
        if left + 1 < size and before(keys[left + 1], items[left + 1], keys[left], items[left]):
            child = left + 1
        if not before(keys[child], items[child], keys[i], items[i]):
            break
        keys[child], keys[i] = keys[i], keys[child]
        items[child], items[i] = items[i], items[child]
        i = child


@njit(cache=True, nogil=True, inline="always")
def heap_pop(keys: np.ndarray, items: np.ndarray, size: int) -> int:
    """Remove the top (``keys[0]``, ``items[0]``: read it first); returns the new size."""
    size -= 1
    keys[0] = keys[size]
    items[0] = items[size]
    _binary_sift_down(keys, items, size, 0)
    return size


@njit(cache=True, nogil=True)
def heap_build(keys: np.ndarray, items: np.ndarray, size: int) -> None:
    """Make ``keys[:size]``, ``items[:size]`` a heap of :func:`heap_pop`'s order (sifting
    down from the last parent): it pops what pushing them one by one would."""
    for start in range(size // 2 - 1, -1, -1):
        _binary_sift_down(keys, items, size, start)


# -- an indexed heap for batchsel.maximize's lazy greedy ----------------------------------
# A 4-ary max-heap in the order of before() (bound desc, item asc), packed in one
# (capacity, 3) float64 array of rows (bound, item, stamp) so that a node's children share
# two cache lines, with ``pos[item]`` its row (-1 when out of the heap). The stamp says
# whether the bound is the exact current gain: for functions that report how adds lower
# the gains (``SetFunction._decrements``), stamp >= 0 marks an exact gain; reported drops
# accumulate in ``pending`` and are applied when the entry reaches the top (stamp -1: a
# bound only); for the others a bound is exact when its stamp is the current step. numba,
# because lazy greedy moves ~100 entries per pick on large ground sets, which Python heap
# operations would make costlier than the gains themselves. Items and steps are < 2**53:
# exact in float64.
@njit(cache=True, nogil=True, inline="always")
def _row_before(h, a, b):
    return before(h[a, 0], h[a, 1], h[b, 0], h[b, 1])


@njit(cache=True, nogil=True, inline="always")
def _swap(h, pos, a, b):
    for c in range(3):
        h[a, c], h[b, c] = h[b, c], h[a, c]
    pos[np.int64(h[a, 1])] = a
    pos[np.int64(h[b, 1])] = b


@njit(cache=True, nogil=True)
def _sift_down(h, pos, size, at):
    while True:
        first = 4 * at + 1
        if first >= size:
            return
        best = first
        for c in range(first + 1, min(first + 4, size)):
            if _row_before(h, c, best):
                best = c
        if not _row_before(h, best, at):
            return
        _swap(h, pos, at, best)
        at = best


@njit(cache=True, nogil=True)
def _sift_up(h, pos, at):
    while at > 0:
        parent = (at - 1) // 4
        if not _row_before(h, at, parent):
            return
        _swap(h, pos, at, parent)
        at = parent


@njit(cache=True, nogil=True)
def heapify(h, pos):
    """Make all rows of ``h`` (bound, item, stamp) the indexed 4-ary heap of
    :func:`before`'s order, and set ``pos[item]`` to each item's row."""
    for at in range(h.shape[0]):
        pos[np.int64(h[at, 1])] = at
    for at in range((h.shape[0] - 2) // 4, -1, -1):
        _sift_down(h, pos, h.shape[0], at)


@njit(cache=True, nogil=True)
def _pop_root(h, pos, size):
    """Remove the root; returns the new size (the root's row is moved to index size-1)."""
    _swap(h, pos, 0, size - 1)
    pos[np.int64(h[size - 1, 1])] = -1
    _sift_down(h, pos, size - 1, 0)
    return size - 1


@njit(cache=True, nogil=True, inline="always")
def _fresh(h, at, step, tracked, pending):
    if tracked:
        return h[at, 2] >= 0 and pending[np.int64(h[at, 1])] == 0
    return h[at, 2] == step


@njit(cache=True, nogil=True)
def _settle(h, pos, size, at, pending, slack):
    """Apply the pending drop of the entry at ``at``: lower its bound (keeping a margin of
    ``slack`` times its size against the rounding of the gain computation), mark it
    inexact and sift it down. Returns whether there was anything to apply."""
    u = np.int64(h[at, 1])
    drop = pending[u]
    if drop == 0:
        return False
    pending[u] = 0.0
    old = h[at, 0]
    h[at, 0] = min(old, old - drop + slack * abs(old))
    h[at, 2] = -1.0
    _sift_down(h, pos, size, at)
    return True


@njit(cache=True, nogil=True)
def lazy_pop(h, pos, size_box, step, tracked, pending, batch, slack, out, out_bound):
    """One move of lazy greedy. Returns 1 with the winner in out[0] when the top entry is
    exact and no other bound (inflated by ``slack``) can reach it; 0 with up to ``batch``
    stale items in out[:count] (removed from the heap) to re-evaluate; -1 when empty.
    ``out_bound`` receives the bounds (of the winner, or of the stale items). Pending
    drops (tracked functions) are applied as entries reach the top."""
    size = size_box[0]
    held = -1
    while True:
        if size == 0:
            size_box[0] = 0
            return -1, 0
        if _settle(h, pos, size, 0, pending, slack):
            continue
        if not _fresh(h, 0, step, tracked, pending):
            break
        if size == 1:
            out[0] = np.int64(h[0, 1])
            out_bound[0] = h[0, 0]
            size_box[0] = _pop_root(h, pos, size)
            return 1, 1
        c = 1  # the runner-up is the best child of the root
        for d in range(2, min(5, size)):
            if _row_before(h, d, c):
                c = d
        if _settle(h, pos, size, c, pending, slack):
            continue
        bound = h[c, 0] + slack * abs(h[c, 0])
        if _fresh(h, c, step, tracked, pending) or before(h[0, 0], h[0, 1], bound, h[c, 1]):
            out[0] = np.int64(h[0, 1])
            out_bound[0] = h[0, 0]
            size_box[0] = _pop_root(h, pos, size)
            return 1, 1
        size = _pop_root(h, pos, size)
        held = size  # its row now sits at index `size`, past the heap
        break
    count = 0
    while count < batch and size > 0:
        if _settle(h, pos, size, 0, pending, slack):
            continue
        if _fresh(h, 0, step, tracked, pending):
            break
        out[count] = np.int64(h[0, 1])
        out_bound[count] = h[0, 0]
        count += 1
        size = _pop_root(h, pos, size)
    if held >= 0:
        # Put the exact top back: move its row to the end of the heap and sift it up.
        if held != size:
            _swap(h, pos, size, held)
        pos[np.int64(h[size, 1])] = size
        _sift_up(h, pos, size)
        size += 1
    size_box[0] = size
    return 0, count


@njit(cache=True, nogil=True)
def lazy_push(h, pos, size_box, items, bounds, stamp):
    """Add ``items`` with their ``bounds``, all stamped ``stamp``, to the heap
    ``h[:size_box[0]]`` (room for them needed); updates ``pos`` and ``size_box[0]``."""
    size = size_box[0]
    for i in range(items.shape[0]):
        h[size, 0] = bounds[i]
        h[size, 1] = items[i]
        h[size, 2] = stamp
        pos[items[i]] = size
        _sift_up(h, pos, size)
        size += 1
    size_box[0] = size


@njit(cache=True, nogil=True)
def lazy_drop(pos, pending, items, drops):
    """Record drops (>= 0; an item may repeat) of the gains of items still in the heap;
    they are applied when the entries reach the top (_settle)."""
    for i in range(items.shape[0]):
        if pos[items[i]] >= 0:
            pending[items[i]] += drops[i]


__all__ = ["before", "heap_push", "heap_pop", "heapify", "lazy_pop", "lazy_push", "lazy_drop"]
