"""The bucketing kernels: cut examples sorted by cost into buckets, each bucket into
batches under a cost budget, top an epoch up to a fixed number of batches, and deal the
batches to the ranks step by step so that the batches of one step cost nearly the same.

Numpy in, numpy out; no selector state. ``costs`` are float64, ``>= 0``.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np
from numba import njit

from batchsel.core.permutation import shuffle, state_address
from batchsel.core.sorting import stable_argsort

#: how many bucket offsets an epoch draws from: the number of batches per epoch is the
#: largest over them, so that every epoch has the same length (an LR schedule's)
NUM_OFFSETS = 16


def order_by_cost(cost_group: np.ndarray, groups: int, tiebreak: np.ndarray) -> np.ndarray:
    """``np.lexsort((tiebreak, costs))``: the examples by cost, equal costs by ``tiebreak``,
    equal both by index. A stable counting pass deals the examples (and their tiebreaks)
    to their cost groups; each group, small enough to stay in cache, is then sorted by a
    distribution sort of its tiebreaks (expected linear for an epoch's uniform random
    numbers), where a sort of all ``N`` numbers reads them at random, from memory.

    Parameters
    ----------
    cost_group : numpy.ndarray
        Each example's rank among the distinct costs, ``0 .. groups - 1``
        (``np.unique(costs, return_inverse=True)[1]``).
    groups : int
        The number of distinct costs.
    tiebreak : numpy.ndarray
        float64, one per example, no NaN (an epoch's random numbers).

    Returns
    -------
    numpy.ndarray
        int64, a permutation of ``0 .. N - 1``.

    Example
    -------
    >>> costs, tiebreak = np.array([2.0, 1, 2, 1]), np.array([0.5, 0.7, 0.1, 0.7])
    >>> group = np.unique(costs, return_inverse=True)[1]
    >>> order_by_cost(group, 2, tiebreak).tolist(), np.lexsort((tiebreak, costs)).tolist()
    ([1, 3, 2, 0], [1, 3, 2, 0])
    """
    group = np.asarray(cost_group)
    if group.dtype not in (np.int32, np.int64):
        group = group.astype(np.int64)
    tiebreak = np.asarray(tiebreak, np.float64)
    if tiebreak.size == 0:
        return np.zeros(0, np.int64)
    low, high = float(tiebreak.min()), float(tiebreak.max())
    span = high - low if math.isfinite(high - low) else 0.0  # 0: every group sorted by a stable argsort
    # the large arrays from numpy (huge pages where the kernel grants them: fewer faults)
    n = group.size
    by_group, values = np.empty(n, np.int64), np.empty(n, np.float64)
    _order_by_group(group, int(groups), tiebreak, low, span, by_group, values)
    return by_group


#: a distribution sort's sub-range sorted by insertion up to this many entries, else by a
#: stable argsort (tiebreaks far from uniform crowd some sub-ranges)
_INSERTION_MOST = 32


@njit(cache=True, nogil=True)
def _order_by_group(group, groups, tiebreak, low, span, by_group, values):  # pragma: no cover - numba
    n = group.size
    start = np.zeros(groups + 1, np.int64)
    for p in range(n):
        start[group[p] + 1] += 1
    for g in range(groups):
        start[g + 1] += start[g]
    at = start[:-1].copy()
    # by_group: the examples in group order, each group in index order; values: their tiebreaks
    for p in range(n):
        g = group[p]
        i = at[g]
        by_group[i] = p
        values[i] = tiebreak[p]
        at[g] = i + 1
    largest = 0
    for g in range(groups):
        largest = max(largest, start[g + 1] - start[g])
    fill = np.empty(largest + 1, np.int64)
    local = np.empty(largest, np.int64)
    ordered = np.empty(largest, np.int64)
    for g in range(groups):
        first = start[g]
        m = start[g + 1] - first
        if m == 0:
            continue
        part = values[first : first + m]
        if span > 0.0:
            _distribution_sort(part, low, m / span, fill, local)
        else:
            local[:m] = stable_argsort(part)
        for i in range(m):  # the group sorted in place: by_group becomes the order
            ordered[i] = by_group[first + local[i]]
        by_group[first : first + m] = ordered[:m]


@njit(cache=True, nogil=True, inline="always")
def _sub_range(value, low, scale, m):  # pragma: no cover - numba
    """The sub-range of ``value``: ``(value - low) * scale`` rounded down, at most ``m - 1``
    (monotone in ``value``: a larger value never falls in an earlier sub-range)."""
    j = int((value - low) * scale)
    return m - 1 if j >= m else j


@njit(cache=True, nogil=True)
def _distribution_sort(part, low, scale, fill, local):  # pragma: no cover - numba
    """``local[:m]`` = the stable argsort of ``part`` (``m`` values), through ``m``
    sub-ranges of ``[low, low + m / scale]``, each sorted stably."""
    m = part.size
    fill[: m + 1] = 0
    for i in range(m):
        fill[_sub_range(part[i], low, scale, m) + 1] += 1
    for j in range(m):
        fill[j + 1] += fill[j]
    for i in range(m):  # in index order: equal values keep it
        j = _sub_range(part[i], low, scale, m)
        local[fill[j]] = i
        fill[j] += 1
    begin = 0
    for j in range(m):  # fill[j] is now where sub-range j ends
        end = fill[j]
        if end - begin > _INSERTION_MOST:
            members = local[begin:end].copy()
            local[begin:end] = members[stable_argsort(part[members])]
        else:
            for i in range(begin + 1, end):
                x = local[i]
                v = part[x]
                k = i - 1
                while k >= begin and part[local[k]] > v:  # strictly: equal values keep their order
                    local[k + 1] = local[k]
                    k -= 1
                local[k + 1] = x
        begin = end


class CostGroups(NamedTuple):
    """The distinct costs of a set of examples (:func:`cost_groups`).

    Attributes
    ----------
    distinct : numpy.ndarray
        The distinct costs, ascending.
    group : numpy.ndarray
        int64, each example's index into ``distinct``.
    counts : numpy.ndarray
        int64, how many examples have each cost.
    sorted_costs : numpy.ndarray
        Every example's cost, ascending.
    firsts : numpy.ndarray
        int64, where each distinct cost first appears in ``sorted_costs``.
    """

    distinct: np.ndarray
    group: np.ndarray
    counts: np.ndarray
    sorted_costs: np.ndarray
    firsts: np.ndarray


def _first_of_each(sorted_values: np.ndarray) -> np.ndarray:
    """Where each value of a sorted array first appears, as a boolean mask."""
    first = np.ones(len(sorted_values), dtype=bool)
    np.not_equal(sorted_values[1:], sorted_values[:-1], out=first[1:])
    return first


def cost_groups(costs: np.ndarray) -> CostGroups:
    """``np.unique(costs, return_inverse=True, return_counts=True)`` and the sorted costs, by
    one radix argsort where numpy's unique sorts by comparisons (the figures:
    docs/design/implementation-notes.md).

    Parameters
    ----------
    costs : numpy.ndarray
        float64, no NaN.

    Returns
    -------
    CostGroups

    Example
    -------
    >>> groups = cost_groups(np.array([3.0, 1.0, 3.0, 2.0]))
    >>> groups.distinct.tolist(), groups.group.tolist(), groups.counts.tolist(), groups.firsts.tolist()
    ([1.0, 2.0, 3.0], [2, 0, 2, 1], [1, 1, 2], [0, 1, 2])
    """
    costs = np.asarray(costs, np.float64)
    n = costs.size
    order = stable_argsort(costs)
    sorted_costs = costs[order]
    starts = _first_of_each(sorted_costs)
    firsts = np.flatnonzero(starts)
    group = np.empty(n, np.int64)
    group[order] = np.cumsum(starts) - 1
    counts = np.diff(np.append(firsts, n))
    return CostGroups(sorted_costs[firsts], group, counts, sorted_costs, firsts)


def bucket_starts(
    sorted_costs: np.ndarray, width: float, offset: float, distinct: tuple[np.ndarray, np.ndarray] | None = None
) -> np.ndarray:
    """Where the buckets of examples sorted by cost begin, but the first: cost ranges of
    ratio ``width`` (largest to smallest), ``[c0 * width**(j - 1 - offset), c0 * width**(j
    - offset))`` from ``c0`` the smallest positive cost (zero costs join the first).

    Parameters
    ----------
    sorted_costs : numpy.ndarray
        The costs in ascending order.
    width : float
        The ratio of a bucket's largest to its smallest cost (> 1).
    offset : float
        The shift of the boundaries, in ``[0, 1)`` of a bucket (in log scale).
    distinct : (numpy.ndarray, numpy.ndarray) or None, default None
        The distinct costs and where each first appears in ``sorted_costs``, where known
        (a bucket begins only where the cost changes: the work is over them).

    Returns
    -------
    numpy.ndarray
        Ascending int64 positions in ``(0, N)``.

    Example
    -------
    >>> bucket_starts(np.array([1.0, 1.5, 2, 3, 4, 7, 9]), 2.0, 0.0).tolist()
    [2, 4, 6]
    """
    if distinct is None:
        firsts = np.flatnonzero(_first_of_each(sorted_costs))
        values = sorted_costs[firsts]
    else:
        values, firsts = distinct
    positive = values[values > 0]
    if positive.size == 0:
        return np.zeros(0, dtype=np.int64)
    # each cost's bucket: how many boundaries c0 * width**(k - offset), k >= 1, it passes
    scaled = np.log(np.maximum(values, positive[0]) / positive[0]) / np.log(width) + offset
    return np.asarray(firsts, np.int64)[np.flatnonzero(np.diff(np.floor(scaled))) + 1]


def segment_bounds(
    sorted_costs: np.ndarray, width: float, offset: float, max_cost: float, starts: np.ndarray | None = None
) -> np.ndarray:
    """Where the buckets of examples sorted by cost begin and end (:func:`bucket_starts`),
    and one more boundary where costs pass ``max_cost`` (an example over the budget is a
    batch of its own, apart from the rest). A bucket's padding is under ``1 - 1 / width``.

    Parameters
    ----------
    sorted_costs : numpy.ndarray
        The costs in ascending order.
    width : float
        The ratio of a bucket's largest to its smallest cost (> 1).
    offset : float
        The shift of the boundaries, in ``[0, 1)`` of a bucket (in log scale).
    max_cost : float
        The budget.
    starts : numpy.ndarray or None, default None
        :func:`bucket_starts` of the same arguments, when already known.

    Returns
    -------
    numpy.ndarray
        Ascending int64 positions, from 0 to N, without repeats.

    Example
    -------
    >>> segment_bounds(np.array([1.0, 1.5, 2, 3, 4, 7, 9]), 2.0, 0.0, 8.0).tolist()
    [0, 2, 4, 6, 7]
    """
    n = len(sorted_costs)
    if starts is None:
        starts = bucket_starts(sorted_costs, width, offset)
    over = np.searchsorted(sorted_costs, max_cost, side="right")
    return np.unique(np.concatenate([[0, n, over], starts])).astype(np.int64)


def bucket_counts(
    sorted_costs: np.ndarray,
    bounds: np.ndarray,
    max_cost: float,
    max_examples: int,
    packed: bool,
    cumulative: np.ndarray | None = None,
) -> np.ndarray:
    """How many batches each bucket is cut into: independent of the order within the
    bucket, so that an epoch's count is known before it is drawn.

    Padded cost: a batch of the bucket holds at most ``floor(max_cost / c)`` examples,
    ``c`` its largest cost. Packed cost: the fewer of that count (equal runs within the
    budget whatever the costs) and of the batches that filling in any order, closing a
    batch when the next example would pass the budget, can need (each closed batch holds
    more than ``max_cost - c``, or ``max_examples`` examples).

    Parameters
    ----------
    sorted_costs : numpy.ndarray
        The costs in ascending order.
    bounds : numpy.ndarray
        :func:`segment_bounds`.
    max_cost : float
        The budget.
    max_examples : int
        The most examples a batch holds.
    packed : bool
        Packed cost (``sum``) instead of padded cost (``len * max``).
    cumulative : numpy.ndarray or None, default None
        ``[0, cumsum(sorted_costs)]``, when already known (packed cost reads it).

    Returns
    -------
    numpy.ndarray
        int64, one count per bucket.

    Example
    -------
    >>> costs = np.array([1.0, 1, 2, 2, 4, 4])
    >>> bucket_counts(costs, np.array([0, 2, 4, 6]), 4.0, 10, packed=False).tolist()
    [1, 1, 2]
    """
    sizes = np.diff(bounds)
    top = sorted_costs[bounds[1:] - 1]
    equal_runs = -(-sizes // equal_run_size(top, max_cost, max_examples))
    if not packed:
        return equal_runs
    if cumulative is None:
        cumulative = np.concatenate([[0.0], np.cumsum(sorted_costs)])
    sums = cumulative[bounds[1:]] - cumulative[bounds[:-1]]
    slack = max_cost - top
    by_cost = np.where(slack > 0, np.floor(sums / np.where(slack > 0, slack, 1.0)) + 1, sizes)
    next_fit = np.minimum(sizes, sizes // max_examples + by_cost.astype(np.int64))
    return np.minimum(equal_runs, np.maximum(next_fit, -(-sizes // max_examples)))


def equal_run_size(top: np.ndarray | float, max_cost: float, max_examples: int) -> np.ndarray:
    """The most examples of cost at most ``top`` a batch holds within the budget (at
    least 1: an example over the budget alone)."""
    return np.clip(np.floor(max_cost / np.maximum(top, 1e-300)), 1, max_examples).astype(np.int64)


def fill_bucket(
    members: np.ndarray,
    costs: np.ndarray,
    count: int,
    max_cost: float,
    max_examples: int,
    packed: bool,
    top: float | None = None,
) -> list[np.ndarray]:
    """Cut one bucket's examples, in their (shuffled) order, into ``count`` batches.

    Where ``count`` allows it (always for padded cost, by :func:`bucket_counts`):
    ``count`` consecutive runs whose sizes differ by at most one, each within the budget.
    Else (packed cost, fewer batches): runs closed when the next example would pass
    ``max_cost`` or a run holds ``max_examples``, then the largest split in halves until
    there are ``count``.

    Parameters
    ----------
    members : numpy.ndarray
        The bucket's example ids, in order.
    costs : numpy.ndarray
        Every example's cost.
    count : int
        :func:`bucket_counts`' number for the bucket.
    max_cost : float
        The budget.
    max_examples : int
        The most examples a batch holds.
    packed : bool
        Packed cost instead of padded cost.
    top : float or None, default None
        The members' largest cost where the caller knows it (else read from ``costs``).

    Returns
    -------
    list of numpy.ndarray
        ``count`` batches (views of ``members``).

    Example
    -------
    >>> [b.tolist() for b in fill_bucket(np.arange(5), np.ones(5), 2, 3.0, 10, packed=False)]
    [[0, 1, 2], [3, 4]]
    """
    if top is None:
        top = float(costs[members].max())
    if not packed or -(-len(members) // count) <= equal_run_size(top, max_cost, max_examples):
        return np.array_split(members, count)
    starts = [0]
    total = 0.0
    for i, cost in enumerate(costs[members].tolist()):
        if i > starts[-1] and (total + cost > max_cost or i - starts[-1] >= max_examples):
            starts.append(i)
            total = 0.0
        total += cost
    batches = np.split(members, starts[1:])
    return split_largest(batches, count)


def split_largest(batches: list[np.ndarray], count: int) -> list[np.ndarray]:
    """Split the batches with the most examples in halves (the first of equal ones first,
    each at most once per round) until there are ``count``; splitting keeps every batch
    within its budget. Which batches split depends only on their sizes and positions.

    Parameters
    ----------
    batches : list of numpy.ndarray
        The batches.
    count : int
        How many there should be; at most the number of examples.

    Returns
    -------
    list of numpy.ndarray
        ``count`` batches; a split batch's halves take its place.

    Example
    -------
    >>> [b.tolist() for b in split_largest([np.arange(4), np.arange(4, 6)], 3)]
    [[0, 1], [2, 3], [4, 5]]
    """
    batches = list(batches)
    while len(batches) < count:
        sizes = np.array([len(b) for b in batches])
        largest = np.argsort(-sizes, kind="stable")[: count - len(batches)]
        largest = np.sort(largest[sizes[largest] >= 2])
        if largest.size == 0:
            raise ValueError(f"cannot cut {int(sizes.sum())} examples into {count} batches")
        split = set(largest.tolist())
        out: list[np.ndarray] = []
        for i, b in enumerate(batches):
            if i in split:
                half = (len(b) + 1) // 2
                out += [b[:half], b[half:]]
            else:
                out.append(b)
        batches = out
    return batches


def batch_costs(
    batches: list[np.ndarray], costs: np.ndarray, packed: bool, longest: np.ndarray | None = None
) -> np.ndarray:
    """Each batch's cost: ``len(b) * max(costs[b])`` padded, ``sum(costs[b])`` packed.

    Parameters
    ----------
    batches : list of numpy.ndarray
        The batches.
    costs : numpy.ndarray
        Every example's cost.
    packed : bool
        Packed cost instead of padded cost.
    longest : numpy.ndarray or None, default None
        Padded cost: each batch's largest cost where the caller has it
        (:func:`batch_longest`), else read from ``costs``.

    Returns
    -------
    numpy.ndarray
        float64, one per batch.

    Example
    -------
    >>> batch_costs([np.array([0, 1]), np.array([2])], np.array([1.0, 3, 2]), packed=False).tolist()
    [6.0, 2.0]
    """
    if not batches:
        return np.zeros(0)
    if packed:
        return _per_batch(np.add, batches, costs)
    if longest is None:
        longest = _per_batch(np.maximum, batches, costs)
    return np.array([len(b) for b in batches]) * longest


def run_longest(flat: np.ndarray, sizes: np.ndarray, costs: np.ndarray) -> np.ndarray:
    """Each run's largest cost: :func:`batch_longest` of batches that are consecutive runs
    of ``flat`` (of ``sizes``, none empty), without their concatenation.

    Example
    -------
    >>> run_longest(np.array([0, 1, 2]), np.array([2, 1]), np.array([1.0, 3, 2])).tolist()
    [3.0, 2.0]
    """
    return _longest(np.asarray(flat, np.int64), np.asarray(sizes, np.int64), np.asarray(costs, np.float64))


def batch_longest(batches: list[np.ndarray], costs: np.ndarray) -> np.ndarray:
    """Each batch's largest cost (its longest member).

    Parameters
    ----------
    batches : list of numpy.ndarray
        The batches, none empty.
    costs : numpy.ndarray
        Every example's cost.

    Returns
    -------
    numpy.ndarray
        float64, one per batch.

    Example
    -------
    >>> batch_longest([np.array([0, 1]), np.array([2])], np.array([1.0, 3, 2])).tolist()
    [3.0, 2.0]
    """
    if not batches:
        return np.zeros(0)
    sizes = np.fromiter((len(b) for b in batches), np.int64, len(batches))
    return run_longest(np.concatenate(batches), sizes, costs)


@njit(cache=True, nogil=True)
def _longest(flat, sizes, costs):  # pragma: no cover - numba
    """Each run's largest ``costs[flat[i]]`` (runs of ``sizes``, none empty), without the
    gathered array ``np.maximum.reduceat`` needs."""
    out = np.empty(sizes.size)
    at = 0
    for b in range(sizes.size):
        top = costs[flat[at]]
        for i in range(at + 1, at + sizes[b]):
            top = max(top, costs[flat[i]])
        out[b] = top
        at += sizes[b]
    return out


def batch_padding(batches: list[np.ndarray], costs: np.ndarray) -> np.ndarray:
    """Each batch's padding: ``sum(max(costs[b]) - costs[b])``, summed position by
    position so that it is ``>= 0`` (``len * max - sum`` can round below 0).

    Parameters
    ----------
    batches : list of numpy.ndarray
        The batches, none empty.
    costs : numpy.ndarray
        Every example's cost.

    Returns
    -------
    numpy.ndarray
        float64, one per batch.

    Example
    -------
    >>> batch_padding([np.array([0, 1]), np.array([2])], np.array([1.0, 3, 2])).tolist()
    [2.0, 0.0]
    """
    if not batches:
        return np.zeros(0)
    sizes = np.array([len(b) for b in batches])
    longest = np.repeat(_per_batch(np.maximum, batches, costs), sizes)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return np.add.reduceat(longest - costs[np.concatenate(batches)], starts)


def _per_batch(reduce: np.ufunc, batches: list[np.ndarray], costs: np.ndarray) -> np.ndarray:
    """``reduce`` over each batch's costs, in one pass over the concatenated batches."""
    sizes = np.array([len(b) for b in batches])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return reduce.reduceat(costs[np.concatenate(batches)], starts)


def deal_steps(
    costs: np.ndarray, world_size: int, rng: np.random.Generator, longest: np.ndarray | None = None
) -> np.ndarray:
    """Deal batches to ranks so that each step's batches cost nearly the same, with no
    trend of cost over the epoch: sort the batches by cost (ties in a random order), give
    each run of ``world_size`` consecutive ones to one step, shuffle the steps, and the
    ranks within a step. With ``longest``, sort by each batch's longest member first: the
    batches of a step then also match in length and size (a batch of many short examples
    and one of few long ones may pad to the same tokens, yet attention's cost grows with
    the square of the length).

    Parameters
    ----------
    costs : numpy.ndarray
        Each batch's cost; their number a multiple of ``world_size``.
    world_size : int
        The ranks.
    rng : numpy.random.Generator
        The epoch's generator.
    longest : numpy.ndarray or None, default None
        Each batch's largest cost, the first sort key.

    Returns
    -------
    numpy.ndarray
        ``(steps, world_size)`` int64: the batch each rank trains on at each step.

    Example
    -------
    >>> order = deal_steps(np.array([1.0, 9, 2, 8]), 2, np.random.default_rng(0))
    >>> sorted(sorted(row) for row in order.tolist())
    [[0, 2], [1, 3]]
    """
    keys = (rng.random(len(costs)), costs) if longest is None else (rng.random(len(costs)), costs, longest)
    ranked = np.lexsort(keys).reshape(-1, world_size)
    ranked = ranked[rng.permutation(len(ranked))]
    return np.take_along_axis(ranked, rng.permuted(np.tile(np.arange(world_size), (len(ranked), 1)), axis=1), axis=1)


@njit(cache=True, nogil=True)
def by_cost_then(costs, tiebreak):  # pragma: no cover - numba
    """``np.lexsort((tiebreak, costs))`` for float64 ``costs`` and ``tiebreak``: a stable
    sort by the tiebreak, then by cost (two radix argsorts; lexsort compares whole rows).

    Example
    -------
    >>> costs, tiebreak = np.array([2.0, 1.0, 2.0, 1.0]), np.array([0.5, 0.7, 0.1, 0.7])
    >>> by_cost_then(costs, tiebreak).tolist(), np.lexsort((tiebreak, costs)).tolist()
    ([1, 3, 2, 0], [1, 3, 2, 0])
    """
    first = stable_argsort(tiebreak)
    return first[stable_argsort(costs[first])]


@njit(nogil=True)
def _numpy_sum(values, order, begin, count):  # pragma: no cover - numba
    """``np.add.reduceat``'s sum of ``values[order[begin : begin + count]]``: the first
    value plus numpy's pairwise sum of the rest (8 accumulators up to 128 values, halves
    above), so that packed costs are the numbers numpy gives."""
    if count == 0:
        return 0.0
    return values[order[begin]] + _pairwise(values, order, begin + 1, count - 1)


@njit(nogil=True)
def _pairwise(values, order, begin, n):  # pragma: no cover - numba
    if n < 8:
        total = -0.0
        for i in range(begin, begin + n):
            total += values[order[i]]
        return total
    if n <= 128:
        acc = np.empty(8)
        for j in range(8):
            acc[j] = values[order[begin + j]]
        i = 8
        while i < n - n % 8:
            for j in range(8):
                acc[j] += values[order[begin + i + j]]
            i += 8
        total = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
        while i < n:
            total += values[order[begin + i]]
            i += 1
        return total
    half = n // 2
    half -= half % 8
    return _pairwise(values, order, begin, half) + _pairwise(values, order, begin + half, n - half)


@njit(cache=True, nogil=True)
def _regroup_windows(
    examples,
    costs,
    sizes,
    windows,
    world_size,
    states,
    next_double,
    next_uint32,
    next_uint64,
    packed,
    weights,
    out,
    out_weights,
    bounds,
):  # pragma: no cover - numba
    most = 0
    widest = 0
    first = 0
    for w in range(windows.size):
        count = 0
        for b in range(first, first + windows[w]):
            count += sizes[b]
        most = max(most, count)
        widest = max(widest, windows[w])
        first += windows[w]
    window_costs = np.empty(most)
    tiebreak = np.empty(most)
    part_begin = np.empty(widest, np.int64)
    part_costs = np.empty(widest)
    deal = np.empty(widest)
    step_order = np.empty(widest, np.int64)
    rank_order = np.empty(world_size, np.int64)
    at = 0  # the window's first example
    first = 0  # its first batch
    written = 0
    bounds[0] = 0
    for w in range(windows.size):
        m = windows[w]
        rows = m // world_size
        state = states[w]
        count = 0
        for b in range(first, first + m):
            count += sizes[b]
        # the draws in the order regroup's numpy calls made them: tiebreaks, deal keys,
        # the steps' order, each step's ranks
        for i in range(count):
            tiebreak[i] = next_double(state)
        for j in range(m):
            deal[j] = next_double(state)
        for i in range(count):
            window_costs[i] = costs[examples[at + i]]
        ranked = by_cost_then(window_costs[:count], tiebreak[:count])
        part_sizes = np.sort(sizes[first : first + m])[::-1]  # cut largest first
        begin = 0
        for p in range(m):
            part_begin[p] = begin
            if packed:
                part_costs[p] = _numpy_sum(window_costs, ranked, begin, part_sizes[p])
            else:  # a part is a run of the cost order: its longest member is its last
                part_costs[p] = (
                    part_sizes[p] * window_costs[ranked[max(begin + part_sizes[p] - 1, 0)]] if count else 0.0
                )
            begin += part_sizes[p]
        dealt = by_cost_then(part_costs[:m], deal[:m])  # deal_steps: by cost, ties at random
        for s in range(rows):
            step_order[s] = s
        shuffle(next_uint32, next_uint64, state, step_order[:rows])
        for s in range(rows):
            for c in range(world_size):
                rank_order[c] = c
            shuffle(next_uint32, next_uint64, state, rank_order)
            for c in range(world_size):
                p = dealt[step_order[s] * world_size + rank_order[c]]
                for i in range(part_begin[p], part_begin[p] + part_sizes[p]):
                    source = at + ranked[i]
                    out[written] = examples[source]
                    if weights.size:
                        out_weights[written] = weights[source]
                    written += 1
                bounds[first + s * world_size + c + 1] = written
        at += count
        first += m


def regroup_windows(
    examples: np.ndarray,
    costs: np.ndarray,
    sizes: np.ndarray,
    windows: np.ndarray,
    world_size: int,
    rngs: Sequence[np.random.Generator],
    packed: bool = False,
    weights: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Regroup windows of batches by cost, keeping their sizes: each window's examples,
    sorted by cost (ties in a random order), are cut into runs of its batches' sizes
    (largest first) and the runs dealt to the window's steps of ``world_size`` ranks as
    :func:`deal_steps` does. One compiled call for every window; each window draws from
    its own generator (a resume starts at its window).

    Parameters
    ----------
    examples : numpy.ndarray
        int64, the windows' batches concatenated, batch after batch, window after window
        (a window's batches: its steps in order, each step's ranks in order).
    costs : numpy.ndarray
        Every example's cost.
    sizes : numpy.ndarray
        int64, each batch's size, in the same order.
    windows : numpy.ndarray
        int64, the batches of each window, each a multiple of ``world_size``.
    world_size : int
        The ranks a window's steps are dealt to (1: one rank's windows).
    rngs : sequence of numpy.random.Generator
        One fresh generator per window, of one kind of bit generator; they advance as
        numpy's calls (``random``, ``permutation``, ``permuted``) would.
    packed : bool, default False
        Balance packed costs (``sum``) instead of padded ones (``len * max``).
    weights : numpy.ndarray or None, default None
        float32, one per entry of ``examples``, carried along.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray, numpy.ndarray or None)
        The regrouped examples, step after step (window after window), each step's ranks
        in order; ``len(sizes) + 1`` int64 bounds (step ``s``'s batch of rank ``r`` is
        ``out[bounds[s * world_size + r] : bounds[s * world_size + r + 1]]``); their
        weights (None without).

    Example
    -------
    >>> costs = np.array([1.0, 9, 2, 8])
    >>> out, bounds, _ = regroup_windows(np.arange(4), costs, np.array([2, 2]), np.array([2]), 1, [np.random.default_rng(0)])
    >>> sorted(sorted(costs[out[b:e]].tolist()) for b, e in zip(bounds[:-1], bounds[1:]))
    [[1.0, 2.0], [8.0, 9.0]]
    """
    examples = np.asarray(examples, np.int64)
    sizes = np.asarray(sizes, np.int64)
    windows = np.asarray(windows, np.int64)
    bits = [rng.bit_generator for rng in rngs]
    if len(bits) != len(windows):
        raise ValueError(f"{len(bits)} generators for {len(windows)} windows")
    if bits and len({type(b) for b in bits}) > 1:
        raise TypeError(f"the windows' generators mix bit generators: {sorted({type(b).__name__ for b in bits})}")
    out = np.empty(examples.size, np.int64)
    bounds = np.empty(sizes.size + 1, np.int64)
    carried = np.empty(0, np.float32) if weights is None else np.asarray(weights, np.float32)
    out_weights = np.empty(examples.size if weights is not None else 0, np.float32)
    if not bits:
        bounds[:] = 0
        return out, bounds, None if weights is None else out_weights
    functions = bits[0].ctypes
    states = np.array([state_address(b) for b in bits], np.int64)
    _regroup_windows(
        examples,
        np.asarray(costs, np.float64),
        sizes,
        windows,
        int(world_size),
        states,
        functions.next_double,
        functions.next_uint32,
        functions.next_uint64,
        bool(packed),
        carried,
        out,
        out_weights,
        bounds,
    )
    return out, bounds, None if weights is None else out_weights


__all__ = [
    "NUM_OFFSETS",
    "CostGroups",
    "cost_groups",
    "by_cost_then",
    "order_by_cost",
    "bucket_starts",
    "segment_bounds",
    "bucket_counts",
    "fill_bucket",
    "equal_run_size",
    "split_largest",
    "batch_costs",
    "batch_longest",
    "run_longest",
    "batch_padding",
    "deal_steps",
    "regroup_windows",
]
