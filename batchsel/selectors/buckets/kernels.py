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
    return _order_by_group(group, int(groups), tiebreak, low, span)


#: a distribution sort's sub-range sorted by insertion up to this many entries, else by a
#: stable argsort (tiebreaks far from uniform crowd some sub-ranges)
_INSERTION_MOST = 32


@njit(cache=True, nogil=True)
def _order_by_group(group, groups, tiebreak, low, span):  # pragma: no cover - numba
    n = group.size
    start = np.zeros(groups + 1, np.int64)
    for p in range(n):
        start[group[p] + 1] += 1
    for g in range(groups):
        start[g + 1] += start[g]
    at = start[:-1].copy()
    by_group = np.empty(n, np.int64)  # the examples in group order, each group in index order
    values = np.empty(n, np.float64)  # their tiebreaks, in the same order
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
    out = np.empty(n, np.int64)
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
        for i in range(m):
            out[first + i] = by_group[first + local[i]]
    return out


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


def bucket_starts(sorted_costs: np.ndarray, width: float, offset: float) -> np.ndarray:
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

    Returns
    -------
    numpy.ndarray
        Ascending int64 positions in ``(0, N)``.

    Example
    -------
    >>> bucket_starts(np.array([1.0, 1.5, 2, 3, 4, 7, 9]), 2.0, 0.0).tolist()
    [2, 4, 6]
    """
    positive = sorted_costs[sorted_costs > 0]
    if positive.size == 0:
        return np.zeros(0, dtype=np.int64)
    # each example's bucket: how many boundaries c0 * width**(k - offset), k >= 1, it passes
    scaled = np.log(np.maximum(sorted_costs, positive[0]) / positive[0]) / np.log(width) + offset
    return (np.flatnonzero(np.diff(np.floor(scaled))) + 1).astype(np.int64)


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
    return _per_batch(np.maximum, batches, costs) if batches else np.zeros(0)


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


class WindowDraws(NamedTuple):
    """The numbers the regrouping of windows draws, window after window, each window's in
    the order :func:`regroup` draws them from its generator (:func:`window_draws`).

    Attributes
    ----------
    tiebreak : numpy.ndarray
        float64, one per example: the order of examples of equal cost.
    deal : numpy.ndarray
        float64, one per batch: the order of regrouped batches of equal cost.
    step_order : numpy.ndarray
        int64, one per step: each window's steps in a random order (window-local numbers).
    rank_order : numpy.ndarray
        int64, ``(steps, world_size)``: each step's batches dealt to the ranks at random.
    """

    tiebreak: np.ndarray
    deal: np.ndarray
    step_order: np.ndarray
    rank_order: np.ndarray


def window_draws(
    rngs: Sequence[np.random.Generator], examples: np.ndarray, world_size: int, batches: np.ndarray
) -> WindowDraws:
    """Every window's numbers, drawn from its own generator (one call per draw: the
    windows' numbers are those a window-by-window regrouping draws).

    Parameters
    ----------
    rngs : sequence of numpy.random.Generator
        One generator per window.
    examples : numpy.ndarray
        The examples of each window.
    world_size : int
        The ranks a window's steps are dealt to.
    batches : numpy.ndarray
        The batches of each window, each a multiple of ``world_size``.

    Returns
    -------
    WindowDraws

    Example
    -------
    >>> draws = window_draws([np.random.default_rng(0)], np.array([4]), 2, np.array([2]))
    >>> draws.tiebreak.shape, draws.deal.shape, draws.rank_order.shape
    ((4,), (2,), (1, 2))
    """
    tiebreak = np.empty(int(np.sum(examples)), np.float64)
    deal = np.empty(int(np.sum(batches)), np.float64)
    steps = np.asarray(batches, np.int64) // world_size
    step_order = np.empty(int(steps.sum()), np.int64)
    rank_order = np.empty((int(steps.sum()), world_size), np.int64)
    tiles: dict[int, np.ndarray] = {}
    at = dealt = stepped = 0
    for rng, count, parts, rows in zip(
        rngs, np.asarray(examples).tolist(), np.asarray(batches).tolist(), steps.tolist()
    ):
        rng.random(out=tiebreak[at : at + count])
        rng.random(out=deal[dealt : dealt + parts])
        step_order[stepped : stepped + rows] = rng.permutation(rows)
        tile = tiles.get(rows)
        if tile is None:
            tile = tiles[rows] = np.tile(np.arange(world_size), (rows, 1))
        rank_order[stepped : stepped + rows] = rng.permuted(tile, axis=1)
        at, dealt, stepped = at + count, dealt + parts, stepped + rows
    return WindowDraws(tiebreak, deal, step_order, rank_order)


@njit(cache=True, nogil=True)
def _sort_windows(costs, tiebreak, sizes, windows):  # pragma: no cover - numba
    """Each window's examples by cost then tiebreak (positions into the windows' examples,
    window after window) and each window's batch sizes, largest first."""
    ranked = np.empty(costs.size, np.int64)
    part_sizes = np.empty(sizes.size, np.int64)
    at = 0
    first = 0
    for w in range(windows.size):
        m = windows[w]
        count = 0
        for b in range(first, first + m):
            count += sizes[b]
        local = by_cost_then(costs[at : at + count], tiebreak[at : at + count])
        for i in range(count):
            ranked[at + i] = at + local[i]
        descending = np.sort(sizes[first : first + m])[::-1]
        part_sizes[first : first + m] = descending
        at += count
        first += m
    return ranked, part_sizes


@njit(cache=True, nogil=True)
def _deal_windows(part_costs, deal, step_order, rank_order, windows, world_size):  # pragma: no cover - numba
    """Each window's regrouped batches dealt to its steps and ranks (:func:`deal_steps`
    with the window's draws): ``(steps, world_size)`` batch numbers."""
    dealt = np.empty((step_order.size, world_size), np.int64)
    first = 0
    step = 0
    for w in range(windows.size):
        m = windows[w]
        ranked = by_cost_then(part_costs[first : first + m], deal[first : first + m])
        for s in range(m // world_size):
            row = step_order[step + s]
            for c in range(world_size):
                dealt[step + s, c] = first + ranked[row * world_size + rank_order[step + s, c]]
        first += m
        step += m // world_size
    return dealt


class Regrouped(NamedTuple):
    """Windows of batches regrouped by cost (:func:`regroup_windows`).

    Attributes
    ----------
    ranked : numpy.ndarray
        int64 positions into the windows' examples (their batches concatenated, window
        after window): each window's examples by cost.
    starts : numpy.ndarray
        int64, where each regrouped batch begins in ``ranked``.
    sizes : numpy.ndarray
        int64, each regrouped batch's size.
    dealt : numpy.ndarray
        int64, ``(steps, world_size)``: the regrouped batch of each step and rank.
    """

    ranked: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray
    dealt: np.ndarray

    def take(self, values: np.ndarray, rank: int) -> tuple[np.ndarray, np.ndarray]:
        """``values`` (one per example of the windows) of ``rank``'s regrouped batches,
        step after step, and where each batch begins and ends among them.

        Returns
        -------
        (numpy.ndarray, numpy.ndarray)
            The values, and ``steps + 1`` int64 bounds: batch ``s`` is
            ``taken[bounds[s] : bounds[s + 1]]``.
        """
        parts = np.ascontiguousarray(self.dealt[:, rank])
        bounds = np.zeros(parts.size + 1, np.int64)
        np.cumsum(self.sizes[parts], out=bounds[1:])
        taken = np.empty(int(bounds[-1]), values.dtype)  # numpy's allocation: huge pages, fewer faults
        _take_parts(values, self.ranked, self.starts, parts, bounds, taken)
        return taken, bounds


@njit(cache=True, nogil=True)
def _take_parts(values, ranked, starts, parts, bounds, out):  # pragma: no cover - numba
    for s in range(parts.size):
        begin = starts[parts[s]]
        at = bounds[s]
        for i in range(bounds[s + 1] - at):
            out[at + i] = values[ranked[begin + i]]


def regroup_windows(
    costs: np.ndarray, sizes: np.ndarray, windows: np.ndarray, world_size: int, draws: WindowDraws, packed: bool = False
) -> Regrouped:
    """Regroup windows of batches by cost, keeping their sizes (:func:`regroup`, for every
    window at once).

    Parameters
    ----------
    costs : numpy.ndarray
        float64, the cost of each example of the windows' batches, concatenated batch
        after batch, window after window.
    sizes : numpy.ndarray
        int64, each batch's size, in the same order.
    windows : numpy.ndarray
        int64, the batches of each window, each a multiple of ``world_size``.
    world_size : int
        The ranks a window's steps are dealt to.
    draws : WindowDraws
        The windows' numbers (:func:`window_draws`).
    packed : bool, default False
        Balance packed costs instead of padded ones.

    Returns
    -------
    Regrouped

    Example
    -------
    >>> costs = np.array([1.0, 9, 2, 8])
    >>> draws = window_draws([np.random.default_rng(0)], np.array([4]), 1, np.array([2]))
    >>> out = regroup_windows(costs, np.array([2, 2]), np.array([2]), 1, draws)
    >>> sorted(costs[out.ranked[s : s + 2]].tolist() for s in out.starts)
    [[1.0, 2.0], [8.0, 9.0]]
    """
    costs = np.asarray(costs, np.float64)
    sizes = np.asarray(sizes, np.int64)
    windows = np.asarray(windows, np.int64)
    ranked, part_sizes = _sort_windows(costs, draws.tiebreak, sizes, windows)
    ends = np.cumsum(part_sizes)
    starts = ends - part_sizes
    if packed:
        part_costs = np.add.reduceat(costs[ranked], starts) if ranked.size else np.zeros(part_sizes.size)
    else:  # a part is a run of the cost order: its longest member is its last
        part_costs = part_sizes * costs[ranked[np.maximum(ends - 1, 0)]] if ranked.size else np.zeros(part_sizes.size)
    dealt = _deal_windows(part_costs, draws.deal, draws.step_order, draws.rank_order, windows, int(world_size))
    return Regrouped(ranked, starts, part_sizes, dealt)


def regroup(
    batches: list[np.ndarray], costs: np.ndarray, world_size: int, rng: np.random.Generator, packed: bool = False
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Regroup a window of batches by cost, keeping their sizes: the window's examples,
    sorted by cost (ties in a random order), are cut into runs of the batches' sizes
    (largest first) and the runs dealt to ``len(batches) / world_size`` steps of
    ``world_size`` ranks as :func:`deal_steps` does. One window of
    :func:`regroup_windows`.

    Parameters
    ----------
    batches : list of numpy.ndarray
        The window's batches (of every rank at those steps); their number a multiple of
        ``world_size``.
    costs : numpy.ndarray
        Every example's cost.
    world_size : int
        The ranks the window's steps are dealt to (1: one rank's window).
    rng : numpy.random.Generator
        The window's generator.
    packed : bool, default False
        Balance packed costs instead of padded ones.

    Returns
    -------
    (numpy.ndarray, list of numpy.ndarray)
        ``(steps, world_size)`` positions into the second item, and the positions of the
        regrouped batches' examples in ``np.concatenate(batches)`` (to carry weights along).

    Example
    -------
    >>> costs = np.array([1.0, 9, 2, 8])
    >>> order, parts = regroup([np.array([0, 1]), np.array([2, 3])], costs, 1, np.random.default_rng(0))
    >>> sorted(sorted(costs[np.concatenate([[0, 1], [2, 3]])[p]].tolist()) for p in parts)
    [[1.0, 2.0], [8.0, 9.0]]
    """
    flat = np.concatenate(batches) if batches else np.zeros(0, np.int64)
    sizes = np.array([len(b) for b in batches], np.int64)
    windows = np.array([len(batches)], np.int64)
    draws = window_draws([rng], np.array([flat.size]), world_size, windows)
    out = regroup_windows(np.asarray(costs, np.float64)[flat], sizes, windows, world_size, draws, packed)
    return out.dealt, [out.ranked[s : s + n] for s, n in zip(out.starts.tolist(), out.sizes.tolist())]


__all__ = [
    "NUM_OFFSETS",
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
    "batch_padding",
    "deal_steps",
    "regroup",
    "regroup_windows",
    "window_draws",
    "Regrouped",
    "WindowDraws",
]
