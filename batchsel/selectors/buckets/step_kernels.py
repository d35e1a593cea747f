"""The split of one optimizer step's examples into micro-batches of nearly equal cost, and
their deal to ranks: :func:`split_step`, :func:`deal_micro_batches` (numba, one call a step)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, inline="always")
def _cost(n, longest, a, b, c, d):  # pragma: no cover - numba
    return n * (a * longest + b * longest * longest) + c + d * longest


@njit(cache=True, nogil=True)
def _greedy(lengths, limit, a, b, c, d, starts):  # pragma: no cover - numba
    """Contiguous groups of ``lengths`` (sorted, longest first), each as long as it stays
    within ``limit``; their starts in ``starts``, their number returned (``size + 1``
    where one example alone costs more)."""
    size = lengths.size
    groups = 0
    i = 0
    while i < size:
        longest = lengths[i]
        if _cost(1, longest, a, b, c, d) > limit:
            return size + 1
        starts[groups] = i
        groups += 1
        j = i + 1
        while j < size and _cost(j - i + 1, longest, a, b, c, d) <= limit:
            j += 1
        i = j
    return groups


@njit(cache=True, nogil=True)
def split_step(lengths, groups, a, b, c, d):  # pragma: no cover - numba
    """Cut ``lengths`` (sorted, longest first) into exactly ``groups`` contiguous,
    non-empty micro-batches whose largest cost is as small as a bisection finds
    (``a * n * Lmax + b * n * Lmax**2 + c + d * Lmax`` each); returns their starts. Needs
    ``groups <= lengths.size``."""
    size = lengths.size
    starts = np.empty(size + 1, np.int64)
    low = _cost(1, lengths[0], a, b, c, d)  # the longest example alone: no group costs less
    high = _cost(size, lengths[0], a, b, c, d)
    if _greedy(lengths, low, a, b, c, d, starts) > groups:
        for _ in range(64):
            middle = 0.5 * (low + high)
            if _greedy(lengths, middle, a, b, c, d, starts) <= groups:
                high = middle
            else:
                low = middle
            if high - low <= 1e-12 * high:
                break
        low = high
    k = _greedy(lengths, low, a, b, c, d, starts)
    starts[k] = size
    while k < groups:  # fewer than asked: split the costliest group of two or more, where its halves cost least
        worst, worst_cost = -1, -1.0
        for g in range(k):
            n = starts[g + 1] - starts[g]
            cost = _cost(n, lengths[starts[g]], a, b, c, d)
            if n >= 2 and cost > worst_cost:
                worst, worst_cost = g, cost
        first, n = starts[worst], starts[worst + 1] - starts[worst]
        cut, cut_cost = 1, np.inf
        for m in range(1, n):
            halves = max(_cost(m, lengths[first], a, b, c, d), _cost(n - m, lengths[first + m], a, b, c, d))
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


@njit(cache=True, nogil=True)
def _cut(lengths, members, per_rank, a, b, c, d, starts, offset):  # pragma: no cover - numba
    """Cut ``lengths[members]`` (longest first) into ``per_rank`` contiguous pieces of the
    least total cost (dynamic programming); the pieces' starts, plus ``offset``, go to
    ``starts``. Returns the total."""
    n = members.size
    best = np.full((per_rank + 1, n + 1), np.inf)
    back = np.zeros((per_rank + 1, n + 1), np.int64)
    best[0, 0] = 0.0
    for k in range(1, per_rank + 1):
        for j in range(k, n - (per_rank - k) + 1):
            for i in range(k - 1, j):
                value = best[k - 1, i] + _cost(j - i, lengths[members[i]], a, b, c, d)
                if value < best[k, j]:
                    best[k, j] = value
                    back[k, j] = i
    j = n
    for k in range(per_rank, 0, -1):
        i = back[k, j]
        starts[k - 1] = offset + i
        j = i
    return best[per_rank, n]


@njit(cache=True, nogil=True)
def split_ranks_first(lengths, ranks, per_rank, a, b, c, d):  # pragma: no cover - numba
    """The other way to split a step (``lengths`` sorted, longest first): ``ranks``
    contiguous shares of nearly equal cost (:func:`split_step` with one micro-batch each),
    each cut into ``per_rank`` micro-batches of the least total cost. A share of fewer than
    ``per_rank`` examples (the longest one alone may outweigh a micro-batch's share) gets
    the step's shortest examples from the last shares that can spare them, one micro-batch
    each. Returns ``(perm, starts, rank_of)``: the positions in micro-batch order (each
    micro-batch contiguous in it), the micro-batches' starts in ``perm`` and their ranks;
    empty arrays where the step has too few examples to spare."""
    size = lengths.size
    bounds = np.empty(ranks + 1, np.int64)
    bounds[:ranks] = split_step(lengths, ranks, a, b, c, d)
    bounds[ranks] = size
    ends = bounds[1:].copy()  # a share's end, before it gives examples away
    need = 0
    for r in range(ranks):
        need += max(per_rank - (bounds[r + 1] - bounds[r]), 0)
    donor = ranks - 1
    given = np.empty(need, np.int64)
    g = 0
    while g < need and donor >= 0:  # the shortest examples of the last shares with some to spare
        if ends[donor] - bounds[donor] > per_rank:
            ends[donor] -= 1
            given[g] = ends[donor]
            g += 1
        else:
            donor -= 1
    if g < need:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64)
    perm = np.empty(size, np.int64)
    starts = np.empty(ranks * per_rank, np.int64)
    rank_of = np.empty(ranks * per_rank, np.int64)
    at, taken = 0, 0
    for r in range(ranks):
        own = ends[r] - bounds[r]
        extra = max(per_rank - own, 0)
        members = np.empty(own + extra, np.int64)
        for i in range(own):
            members[i] = bounds[r] + i
        for i in range(extra):
            members[own + i] = given[taken + i]
        taken += extra
        members.sort()  # positions ascending: longest first, whichever share gave them
        _cut(lengths, members, per_rank, a, b, c, d, starts[r * per_rank : (r + 1) * per_rank], at)
        perm[at : at + members.size] = members
        rank_of[r * per_rank : (r + 1) * per_rank] = r
        at += members.size
    return perm, starts, rank_of


@njit(cache=True, nogil=True)
def improve_split(lengths, perm, starts, rank_of, ranks, a, b, c, d):  # pragma: no cover - numba
    """Lower a split's costliest rank by moving single examples between micro-batches
    (``lengths`` sorted, longest first; ``perm``, ``starts``, ``rank_of`` as
    :func:`split_ranks_first` returns them). Each move takes the shortest or the longest
    member of a micro-batch of the costliest rank that has two or more, and puts it in the
    micro-batch of another rank where the larger of the two ranks' new costs is least; a
    move is made only where that is below the costliest rank's cost now, so the ranks'
    costs, sorted, fall at every move and the search ends. Every micro-batch keeps one
    member or more, every rank its micro-batches. Returns ``(perm, starts)`` with each
    micro-batch's members longest first (the ranks stay ``rank_of``)."""
    size, groups = perm.size, starts.size
    group_of = np.empty(size, np.int64)
    for g in range(groups):
        end = starts[g + 1] if g + 1 < groups else size
        for i in range(starts[g], end):
            group_of[perm[i]] = g
    count = np.zeros(groups, np.int64)
    first = np.empty(groups, np.int64)  # the longest member (the smallest position)
    second = np.empty(groups, np.int64)  # the next longest
    last = np.empty(groups, np.int64)  # the shortest
    cost = np.empty(groups, np.float64)
    load = np.zeros(ranks, np.float64)
    for _ in range(4 * size + 16):
        count[:] = 0
        for pos in range(size):  # positions ascending: longest first
            g = group_of[pos]
            if count[g] == 0:
                first[g] = pos
            elif count[g] == 1:
                second[g] = pos
            last[g] = pos
            count[g] += 1
        load[:] = 0.0
        for g in range(groups):
            cost[g] = _cost(count[g], lengths[first[g]], a, b, c, d)
            load[rank_of[g]] += cost[g]
        top = 0
        for r in range(1, ranks):
            if load[r] > load[top]:
                top = r
        best, best_pos, best_to = load[top] * (1.0 - 1e-9), -1, -1
        for g in range(groups):
            if rank_of[g] != top or count[g] < 2:
                continue
            for which in range(2):
                pos = last[g] if which == 0 else first[g]
                longest_left = first[g] if which == 0 else second[g]
                saved = cost[g] - _cost(count[g] - 1, lengths[longest_left], a, b, c, d)
                if load[top] - saved >= best:
                    continue  # (no destination can make this move better than the best so far)
                for h in range(groups):
                    s = rank_of[h]
                    if s == top or load[s] >= best:
                        continue  # (a micro-batch never costs less with one more member)
                    longest = min(first[h], pos)
                    added = _cost(count[h] + 1, lengths[longest], a, b, c, d) - cost[h]
                    worse = max(load[top] - saved, load[s] + added)
                    if worse < best:
                        best, best_pos, best_to = worse, pos, h
        if best_pos < 0:
            break
        group_of[best_pos] = best_to
    count[:] = 0
    for pos in range(size):
        count[group_of[pos]] += 1
    out_starts = np.empty(groups, np.int64)
    at = 0
    for g in range(groups):
        out_starts[g] = at
        at += count[g]
    fill = out_starts.copy()
    out = np.empty(size, np.int64)
    for pos in range(size):  # positions ascending: each micro-batch's longest first
        g = group_of[pos]
        out[fill[g]] = pos
        fill[g] += 1
    return out, out_starts


__all__ = ["deal_micro_batches", "improve_split", "split_ranks_first", "split_step"]
