"""A shard's rank order, kept up to date a few keys at a time: sorted blocks.

Loss rank reads its shard's examples ordered by the key ``(value, position)`` (``value``:
the negated loss, +inf while the loss is pending; ``position``: the example's place in
the shard) and draws ranks of that order. A batch changes a few hundred keys of a shard
of up to millions; a flat sorted array costs O(n) a batch to keep sorted (the changed keys
taken out, merged back), which at ten million examples is a pass over hundreds of MB a
step. Here the order is a sequence of blocks, each a sorted run of at most ``capacity``
keys: a changed key leaves its block and enters another (a binary search over the blocks'
last keys, a shift within a block), a full block splits in two, an empty one leaves the
sequence, and rank ``r``'s key is found by a binary search over the blocks' first ranks,
counted again once a batch. A batch costs O(changes x capacity + n / capacity), not O(n).
A shard of at most ``FLAT_MOST`` keys is one block, brought up to date by one merge of the
changed keys a batch (:func:`move_many`), cheaper at that size.

The order is always the sort by ``(value, position)`` a fresh sort would give (a total
order: positions are distinct), whatever the history, so the batches drawn from it do not
depend on how it was reached (a resumed run rebuilds it with one sort).

The kernels take a :class:`RankOrder` (a tuple of arrays that numba passes whole) and run
without the GIL.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from batchsel.core.rng import substream, uniform
from batchsel.core.sorting import sort_into_rows, stable_argsort

#: keys a block holds at most; a build fills each with the largest power of two up to 8/9
#: of it (256: room for 32 more before it splits; rows of a power of two are laid out
#: without a division per key). A change shifts half a block on average
CAPACITY = 288
#: shards of at most this many keys are one block, brought up to date by one merge of
#: the changed keys a batch (O(n), which at this size costs less than moving them one
#: by one through blocks)
FLAT_MOST = 65536
#: a position above every shard position: ``(value, _ABOVE)`` follows every key of ``value``
_ABOVE = np.int64(2**62)
# substream of a batch's key the tie breaks read (loss rank's: its ranks use 1 and 2)
_TIES = 3


class RankOrder(NamedTuple):
    """A shard's keys in sorted blocks (:func:`build`); the kernels keep its arrays.

    Attributes
    ----------
    cur : numpy.ndarray of float64, shape (n,)
        Each shard position's value as the order holds it.
    values, positions : numpy.ndarray of float64 and int32, shape (blocks, capacity)
        Block ``b``'s keys, sorted, in its first ``counts[b]`` slots.
    counts : numpy.ndarray of int64
        Keys per block.
    sequence : numpy.ndarray of int64
        The blocks in key order (the first ``meta[0]``).
    starts : numpy.ndarray of int64
        The first rank of each block of ``sequence`` (and ``n`` after the last).
    last_values, last_positions : numpy.ndarray
        The largest key of each block of ``sequence`` (in sequence order: the search for
        a key's block reads one small contiguous array).
    free : numpy.ndarray of int64
        Blocks out of the sequence (the first ``meta[1]``).
    meta : numpy.ndarray of int64, shape (2,)
        Blocks in the sequence, blocks free.
    """

    cur: np.ndarray
    values: np.ndarray
    positions: np.ndarray
    counts: np.ndarray
    sequence: np.ndarray
    starts: np.ndarray
    last_values: np.ndarray
    last_positions: np.ndarray
    free: np.ndarray
    meta: np.ndarray


def build(cur: np.ndarray, capacity: int = CAPACITY, flat_most: int = FLAT_MOST) -> RankOrder:
    """The order of the keys ``(cur[p], p)``, in blocks of at most ``capacity`` keys (one
    block of every key where there are at most ``flat_most``).

    Parameters
    ----------
    cur : numpy.ndarray of float64
        Each position's value (kept: the order owns it), no NaN.
    capacity : int, default 288
        Keys a block holds at most, >= 2.
    flat_most : int, default 65536
        Up to this many keys, one block holds them all (:func:`move_many` merges).

    Returns
    -------
    RankOrder

    Example
    -------
    >>> order = build(np.array([2.0, -1.0, 2.0, 0.5]), capacity=2)
    >>> [int(key_at(order, r)[1]) for r in range(4)]
    [1, 3, 0, 2]
    """
    if capacity < 2:
        raise ValueError(f"capacity must be >= 2, got {capacity}")
    n = cur.size
    if n >= 2**31:
        raise ValueError(f"a rank order holds fewer than 2**31 keys (int32 positions), got {n}: use more ranks")
    if n <= flat_most:  # one block, never full (and a spare, never used)
        capacity, blocks = max(n + 1, 2), 2
    else:
        fill = 1 << _row_bits(capacity, n)
        blocks = -(-n // fill) + (-(-n // fill)) // 4 + 4  # the build's blocks and room for splits
    order = RankOrder(
        cur=cur,
        values=_empty_rows(blocks, capacity),
        positions=_empty_positions(blocks, capacity),  # (a shard of fewer than 2**31: fewer pages to map)
        counts=np.zeros(blocks, np.int64),
        sequence=np.empty(blocks, np.int64),
        starts=np.zeros(blocks + 1, np.int64),
        last_values=np.empty(blocks, np.float64),
        last_positions=np.empty(blocks, np.int64),
        free=np.empty(blocks, np.int64),
        meta=np.zeros(2, np.int64),
    )
    resort(order)
    return order


def sorted_keys(order: RankOrder) -> tuple[np.ndarray, np.ndarray]:
    """The order's keys, flat: ``(values, positions)`` in rank order (O(n): for checks)."""
    blocks = order.sequence[: order.meta[0]]
    if not blocks.size:
        return np.zeros(0, np.float64), np.zeros(0, np.int64)
    counts = order.counts[blocks]
    values = np.concatenate([order.values[b, :c] for b, c in zip(blocks, counts)])
    positions = np.concatenate([order.positions[b, :c] for b, c in zip(blocks, counts)])
    return values, positions


# the blocks' rows are allocated by numba, not numpy: numpy asks the kernel for huge pages
# (madvise), which on a machine that defragments for them on demand stalls the first
# write to every page (defrag=madvise: docs/design/implementation-notes.md)
@njit(cache=True, nogil=True)
def _empty_rows(blocks, capacity):  # pragma: no cover - numba
    return np.empty((blocks, capacity), np.float64)


@njit(cache=True, nogil=True)
def _empty_positions(blocks, capacity):  # pragma: no cover - numba
    return np.empty((blocks, capacity), np.int32)


@njit(cache=True, nogil=True)
def _row_bits(capacity, n):  # pragma: no cover - numba
    """log2 of the keys a build puts in a block: the largest power of two up to 8/9 of
    ``capacity`` (at least 1 key); where one block holds every key (``capacity > n``), a
    power of two of at least ``n``."""
    bits = 0
    if capacity > n:
        while (1 << bits) < n:
            bits += 1
        return bits
    while (2 << bits) * 9 <= capacity * 8:
        bits += 1
    return bits


@njit(cache=True, nogil=True, inline="always")
def _flat(order):  # pragma: no cover - numba
    """Whether one block holds every key (a block larger than the shard)."""
    return order.values.shape[1] > order.cur.size


@njit(cache=True, nogil=True, inline="always")
def _before(v1, p1, v2, p2):  # pragma: no cover - numba
    """Whether key ``(v1, p1)`` comes before ``(v2, p2)``."""
    return v1 < v2 or (v1 == v2 and p1 < p2)


@njit(cache=True, nogil=True)
def _lay_out(order, n):  # pragma: no cover - numba
    """Make the first ``ceil(n / fill)`` blocks, whose rows hold the ``n`` keys in order
    (``fill`` a row), the sequence; the other blocks free."""
    values, positions, counts = order.values, order.positions, order.counts
    fill = 1 << _row_bits(values.shape[1], order.cur.size)
    blocks = counts.size
    used = -(-n // fill)
    for b in range(used):
        c = min(fill, n - b * fill)
        counts[b] = c
        order.sequence[b] = b
        order.last_values[b] = values[b, c - 1]
        order.last_positions[b] = positions[b, c - 1]
    for f in range(blocks - used):
        counts[used + f] = 0
        order.free[f] = blocks - 1 - f
    order.meta[0] = used
    order.meta[1] = blocks - used
    recount(order)


@njit(cache=True, nogil=True)
def resort(order):  # pragma: no cover - numba
    """Sort the order anew from ``order.cur`` (after many changes, or none known)."""
    n = order.cur.size
    sort_into_rows(order.cur, order.values, order.positions, _row_bits(order.values.shape[1], n))
    _lay_out(order, n)


@njit(cache=True, nogil=True)
def _repack(order):  # pragma: no cover - numba
    """Lay the keys out again in blocks filled as a build fills them (no block was left
    to split into)."""
    cur, values, positions = order.cur, order.values, order.positions
    flat = np.empty(cur.size, np.int64)
    w = 0
    for i in range(order.meta[0]):
        b = order.sequence[i]
        for j in range(order.counts[b]):
            flat[w] = positions[b, j]
            w += 1
    bits = _row_bits(values.shape[1], cur.size)
    mask = (1 << bits) - 1
    for j in range(w):  # (in a move, the key moved is out: one fewer than the positions)
        values[j >> bits, j & mask] = cur[flat[j]]
        positions[j >> bits, j & mask] = flat[j]
    _lay_out(order, w)


@njit(cache=True, nogil=True)
def recount(order):  # pragma: no cover - numba
    """Each block's first rank (after changes: the rank lookups read them)."""
    starts, sequence, counts = order.starts, order.sequence, order.counts
    starts[0] = 0
    for i in range(order.meta[0]):
        starts[i + 1] = starts[i] + counts[sequence[i]]


@njit(cache=True, nogil=True, inline="always")
def _locate(order, v, p):  # pragma: no cover - numba
    """``(i, j)``: the first block of the sequence whose last key is not before ``(v, p)``
    (the last block if none is) and the first slot of it not before ``(v, p)``."""
    sequence, last_values, last_positions = order.sequence, order.last_values, order.last_positions
    used = order.meta[0]
    lo, hi = 0, used
    while lo < hi:
        mid = (lo + hi) >> 1
        if _before(last_values[mid], last_positions[mid], v, p):
            lo = mid + 1
        else:
            hi = mid
    if lo == used:
        return used - 1, order.counts[sequence[used - 1]]
    b = sequence[lo]
    values, positions = order.values, order.positions
    a, z = 0, order.counts[b]
    while a < z:
        mid = (a + z) >> 1
        if _before(values[b, mid], positions[b, mid], v, p):
            a = mid + 1
        else:
            z = mid
    return lo, a


@njit(cache=True, nogil=True, inline="always")
def _remove(order, v, p):  # pragma: no cover - numba
    """Take the key ``(v, p)`` (present) out of its block."""
    i, j = _locate(order, v, p)
    b = order.sequence[i]
    values, positions, counts = order.values, order.positions, order.counts
    if j >= counts[b] or order.positions[b, j] != p:
        raise ValueError("rank order: a key to move is not where its value puts it")
    c = counts[b] - 1
    for t in range(j, c):
        values[b, t] = values[b, t + 1]
        positions[b, t] = positions[b, t + 1]
    counts[b] = c
    if c == 0:  # the block leaves the sequence
        used = order.meta[0]
        for t in range(i, used - 1):
            order.sequence[t] = order.sequence[t + 1]
            order.last_values[t] = order.last_values[t + 1]
            order.last_positions[t] = order.last_positions[t + 1]
        order.meta[0] = used - 1
        order.free[order.meta[1]] = b
        order.meta[1] += 1
    elif j == c:
        order.last_values[i] = values[b, c - 1]
        order.last_positions[i] = positions[b, c - 1]


@njit(cache=True, nogil=True, inline="always")
def _insert(order, v, p):  # pragma: no cover - numba
    """Put the key ``(v, p)`` in its block; a block that fills up splits in two."""
    if order.meta[1] == 0:  # (a split below needs a free block)
        _repack(order)
    values, positions, counts, sequence = order.values, order.positions, order.counts, order.sequence
    if order.meta[0] == 0:
        order.meta[1] -= 1
        sequence[0] = order.free[order.meta[1]]
        counts[sequence[0]] = 0
        order.meta[0] = 1
        i, j = 0, 0
    else:
        i, j = _locate(order, v, p)
    b = sequence[i]
    c = counts[b]
    for t in range(c, j, -1):
        values[b, t] = values[b, t - 1]
        positions[b, t] = positions[b, t - 1]
    values[b, j] = v
    positions[b, j] = p
    c += 1
    counts[b] = c
    if j == c - 1:
        order.last_values[i] = v
        order.last_positions[i] = p
    capacity = values.shape[1]
    if c == capacity:  # split: the upper half moves to a free block, next in the sequence
        order.meta[1] -= 1
        nb = order.free[order.meta[1]]
        half = capacity // 2
        for t in range(capacity - half):
            values[nb, t] = values[b, half + t]
            positions[nb, t] = positions[b, half + t]
        counts[nb] = capacity - half
        counts[b] = half
        used = order.meta[0]
        for t in range(used, i + 1, -1):
            sequence[t] = sequence[t - 1]
            order.last_values[t] = order.last_values[t - 1]
            order.last_positions[t] = order.last_positions[t - 1]
        sequence[i + 1] = nb
        order.last_values[i + 1] = order.last_values[i]
        order.last_positions[i + 1] = order.last_positions[i]
        order.last_values[i] = values[b, half - 1]
        order.last_positions[i] = positions[b, half - 1]
        order.meta[0] = used + 1


@njit(cache=True, nogil=True, inline="always")
def move(order, p, v):  # pragma: no cover - numba
    """Give position ``p`` the value ``v`` (its key moves where it belongs); call
    :func:`recount` before the next rank lookup."""
    old = order.cur[p]
    if v != old:  # (-0.0 and 0.0 are one value)
        _remove(order, old, p)
        order.cur[p] = v
        _insert(order, v, p)


@njit(cache=True, nogil=True)
def move_many(order, moved, new_values):  # pragma: no cover - numba
    """Give each position ``moved[t]`` the value ``new_values[t]`` (in that order: a
    position given twice keeps the later), then :func:`recount`. Blocks: one move each;
    one block of every key: one pass that takes the changed keys out and merges them
    back sorted, or a new sort where more than an eighth changed."""
    if not _flat(order):
        for t in range(moved.size):
            move(order, moved[t], new_values[t])
        recount(order)
        return
    cur = order.cur
    n = cur.size
    dirty = np.zeros(n, np.bool_)
    changed = np.empty(moved.size, np.int64)
    d = 0
    for t in range(moved.size):
        p, v = moved[t], new_values[t]
        if v != cur[p]:  # (-0.0 and 0.0 are one value)
            cur[p] = v
            if not dirty[p]:
                dirty[p] = True
                changed[d] = p
                d += 1
    if d == 0:
        return
    if 8 * d > n:
        resort(order)
        return
    changed = np.sort(changed[:d])  # by position, then stably by value: by key
    changed = changed[stable_argsort(cur[changed])]
    b = order.sequence[0]
    values, positions = order.values[b], order.positions[b]
    w = 0
    for i in range(n):  # the unchanged keys, in order
        p = positions[i]
        if not dirty[p]:
            values[w] = values[i]
            positions[w] = p
            w += 1
    i, j, out = w - 1, d - 1, n - 1  # the changed ones merged back, from the end
    while j >= 0:
        pj = changed[j]
        vj = cur[pj]
        if i >= 0 and (values[i] > vj or (values[i] == vj and positions[i] > pj)):
            values[out] = values[i]
            positions[out] = positions[i]
            i -= 1
        else:
            values[out] = vj
            positions[out] = pj
            j -= 1
        out -= 1
    order.last_values[0] = values[n - 1]
    order.last_positions[0] = positions[n - 1]


@njit(cache=True, nogil=True)
def key_at(order, r):  # pragma: no cover - numba
    """The key ``(value, position)`` of rank ``r`` (``0 <= r < n``)."""
    starts = order.starts
    lo, hi = 0, order.meta[0] - 1  # the last block whose first rank is <= r
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if starts[mid] <= r:
            lo = mid
        else:
            hi = mid - 1
    b = order.sequence[lo]
    j = r - starts[lo]
    return order.values[b, j], order.positions[b, j]


@njit(cache=True, nogil=True)
def rank_of(order, v, p):  # pragma: no cover - numba
    """How many keys come before ``(v, p)``."""
    if order.meta[0] == 0:
        return 0
    i, j = _locate(order, v, p)
    return order.starts[i] + j


@njit(cache=True, nogil=True)
def slot_of(keys, x):  # pragma: no cover - numba
    """The slot of ``x`` in an open-addressing table of non-negative ints (-1: empty)."""
    mask = keys.size - 1
    s = (x * 2654435761) & mask
    while keys[s] != -1 and keys[s] != x:
        s = (s + 1) & mask
    return s


@njit(cache=True, nogil=True)
def int_table(entries):  # pragma: no cover - numba
    """An empty open-addressing table for up to ``entries`` keys (a quarter full at most)."""
    size = 16
    while size < 4 * entries:
        size *= 2
    return np.full(size, -1, np.int64)


@njit(cache=True, nogil=True)
def pick(order, ranks, key):  # pragma: no cover - numba
    """The positions holding the given distinct ranks, in the order of ``ranks``: a rank
    whose value is unique is its key's position; the ranks falling in a block of equal
    values get distinct members of the block, uniformly at random (sampling without
    replacement: rejection of repeats when the block is at least twice the ranks in it,
    else a partial Fisher-Yates shuffle of the block, whose moved entries a table keeps).
    """
    n = order.cur.size
    k = ranks.size
    by_rank = np.argsort(ranks)
    picked = np.empty(k, np.int64)
    stream = substream(key, _TIES)
    draws = 0
    i = 0
    while i < k:
        r = ranks[by_rank[i]]
        v, p = key_at(order, r)
        if (r == 0 or key_at(order, r - 1)[0] != v) and (r == n - 1 or key_at(order, r + 1)[0] != v):
            picked[i] = p
            i += 1
            continue
        a = rank_of(order, v, np.int64(-1))
        b = rank_of(order, v, _ABOVE)
        j = i
        while j < k and ranks[by_rank[j]] < b:
            j += 1
        m, c = j - i, b - a
        if 2 * m <= c and m <= 64:
            for t in range(m):
                while True:
                    s = int(uniform(stream, draws) * c)
                    draws += 1
                    s = a + (c - 1 if s >= c else s)
                    candidate = key_at(order, s)[1]
                    fresh = True
                    for q in range(i, i + t):
                        if picked[q] == candidate:
                            fresh = False
                            break
                    if fresh:
                        break
                picked[i + t] = candidate
        else:  # block[t], block[s] swapped as in a copy of the block: moved[x] is what slot x holds
            slots = int_table(2 * m)
            moved = np.empty(slots.size, np.int64)
            for t in range(m):
                left = c - t
                s = int(uniform(stream, draws) * left)
                draws += 1
                s = t + (left - 1 if s >= left else s)
                st, ss = slot_of(slots, t), slot_of(slots, s)
                held_t = moved[st] if slots[st] == t else t
                held_s = moved[ss] if slots[ss] == s else s
                slots[st], moved[st] = t, held_s
                ss = slot_of(slots, s)
                slots[ss], moved[ss] = s, held_t
                picked[i + t] = key_at(order, a + held_s)[1]
        i = j
    out = np.empty(k, np.int64)
    for i in range(k):
        out[by_rank[i]] = picked[i]
    return out


__all__ = [
    "RankOrder",
    "CAPACITY",
    "int_table",
    "slot_of",
    "build",
    "resort",
    "recount",
    "move",
    "key_at",
    "rank_of",
    "pick",
    "sorted_keys",
]
