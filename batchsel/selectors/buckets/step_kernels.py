"""The split of one optimizer step's examples into micro-batches of nearly equal cost, and
their deal to ranks: :func:`split_step`, :func:`deal_micro_batches` (numba, one call a step)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, inline="always")
def _cost(n, longest, a, b, c):  # pragma: no cover - numba
    return n * (a * longest + b * longest * longest) + c


@njit(cache=True, nogil=True)
def _greedy(lengths, limit, a, b, c, starts):  # pragma: no cover - numba
    """Contiguous groups of ``lengths`` (sorted, longest first), each as long as it stays
    within ``limit``; their starts in ``starts``, their number returned (``size + 1``
    where one example alone costs more)."""
    size = lengths.size
    groups = 0
    i = 0
    while i < size:
        longest = lengths[i]
        if _cost(1, longest, a, b, c) > limit:
            return size + 1
        starts[groups] = i
        groups += 1
        j = i + 1
        while j < size and _cost(j - i + 1, longest, a, b, c) <= limit:
            j += 1
        i = j
    return groups


@njit(cache=True, nogil=True)
def split_step(lengths, groups, a, b, c):  # pragma: no cover - numba
    """Cut ``lengths`` (sorted, longest first) into exactly ``groups`` contiguous,
    non-empty micro-batches whose largest cost is as small as a bisection finds
    (``a * n * Lmax + b * n * Lmax**2 + c`` each); returns their starts. Needs
    ``groups <= lengths.size``."""
    size = lengths.size
    starts = np.empty(size + 1, np.int64)
    low = _cost(1, lengths[0], a, b, c)  # the longest example alone: no group costs less
    high = _cost(size, lengths[0], a, b, c)
    if _greedy(lengths, low, a, b, c, starts) > groups:
        for _ in range(64):
            middle = 0.5 * (low + high)
            if _greedy(lengths, middle, a, b, c, starts) <= groups:
                high = middle
            else:
                low = middle
            if high - low <= 1e-12 * high:
                break
        low = high
    k = _greedy(lengths, low, a, b, c, starts)
    starts[k] = size
    while k < groups:  # fewer than asked: split the costliest group of two or more, where its halves cost least
        worst, worst_cost = -1, -1.0
        for g in range(k):
            n = starts[g + 1] - starts[g]
            cost = _cost(n, lengths[starts[g]], a, b, c)
            if n >= 2 and cost > worst_cost:
                worst, worst_cost = g, cost
        first, n = starts[worst], starts[worst + 1] - starts[worst]
        cut, cut_cost = 1, np.inf
        for m in range(1, n):
            halves = max(_cost(m, lengths[first], a, b, c), _cost(n - m, lengths[first + m], a, b, c))
            if halves < cut_cost:
                cut, cut_cost = m, halves
        for g in range(k, worst, -1):
            starts[g + 1] = starts[g]
        starts[worst + 1] = first + cut
        k += 1
    return starts[:groups].copy()


@njit(cache=True, nogil=True)
def deal_micro_batches(costs, ranks, per_rank):  # pragma: no cover - numba
    """Deal ``ranks * per_rank`` micro-batches of the given ``costs`` to ranks, ``per_rank``
    each, the costliest first to the least loaded rank that has room (longest processing
    time first); returns each micro-batch's rank."""
    order = np.argsort(-costs, kind="mergesort")
    load = np.zeros(ranks, np.float64)
    count = np.zeros(ranks, np.int64)
    rank_of = np.empty(costs.size, np.int64)
    for g in order:
        best = -1
        for r in range(ranks):
            if count[r] < per_rank and (best < 0 or load[r] < load[best]):
                best = r
        rank_of[g] = best
        load[best] += costs[g]
        count[best] += 1
    return rank_of


__all__ = ["deal_micro_batches", "split_step"]
