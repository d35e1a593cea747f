"""The greedy family: :func:`naive_greedy` (every gain at every step), :func:`lazy_greedy`
(stale gains in a priority queue bound the current ones: naive greedy's picks, ties
included, with fewer evaluations), :func:`approximate_lazy_greedy` and
:func:`modular_greedy` (apricot's), and :func:`run_greedy`, which runs one of them by
:func:`~batchsel.submodular.optimizers.maximize`'s name (``"two-stage"``, apricot's
default, runs lazy greedy: its picks are naive greedy's).

Each loop adds its picks to a :class:`~batchsel.submodular.optimizers.run.GreedyRun`, at
each step the item of largest gain (per unit cost with costs), ties to the smallest index.
Every loop takes ``run``, ``pool`` and ``budget`` as :func:`naive_greedy` documents them,
and returns its picks (a list of int, in pick order).
"""

from __future__ import annotations

import heapq
from typing import Callable

import numpy as np

# lazy greedy's indexed heap (shared tie rule: batchsel.core.heap.before)
from batchsel.core.heap import heapify as _heapify
from batchsel.core.heap import lazy_drop as _lazy_drop
from batchsel.core.heap import lazy_pop as _lazy_pop
from batchsel.core.heap import lazy_push as _lazy_push
from batchsel.submodular.optimizers.run import GreedyRun

# The names of maximize's optimizers that this family runs (see run_greedy).
GREEDY = ("naive", "lazy", "two-stage", "approximate-lazy", "modular")
# Lazy greedy re-evaluates the stale top of its queue in batches (one vectorized gains()
# call each): the first batch of a pick is about as large as the recent picks needed (at
# least LAZY_FIRST), each next batch of the same pick twice as large, up to LAZY_MAX.
# Lazier-than-lazy greedy (batchsel.submodular.optimizers.stochastic) batches so too.
LAZY_FIRST = 4
LAZY_MAX = 1024
# A stale bound u is trusted to be >= the gain only up to this relative slack: functions
# whose floating-point gains are not exactly monotone get re-evaluated instead.
BOUND_SLACK = 1e-12


def inflate_bound(u: float) -> float:
    """A stale bound ``u`` widened by :data:`BOUND_SLACK` (relative): what a re-evaluated
    gain must beat for the stale entry to be skipped.

    Parameters
    ----------
    u : float
        The stale bound.

    Returns
    -------
    float
        ``u + BOUND_SLACK * |u|``.

    Example
    -------
    >>> inflate_bound(2.0) > 2.0, inflate_bound(0.0)
    (True, 0.0)
    """
    return u + BOUND_SLACK * abs(u)


def run_greedy(name: str, run: GreedyRun, pool: np.ndarray, budget: float, beta: float = 0.9) -> list[int]:
    """Run the optimizer of this family named ``name`` (one of :data:`GREEDY`).

    Parameters
    ----------
    name : str
        ``"naive"``, ``"lazy"``, ``"two-stage"`` (apricot's default, naive greedy for the
        first picks then lazy: naive greedy's picks, which lazy greedy returns exactly),
        ``"approximate-lazy"`` or ``"modular"``.
    run, pool, budget
        As in :func:`naive_greedy`.
    beta : float, default 0.9
        ``"approximate-lazy"``'s acceptance factor.

    Example
    -------
    >>> from batchsel import Modular
    >>> run = GreedyRun(Modular(np.arange(6.0)), np.empty(0, np.int64), None, False)
    >>> run_greedy("two-stage", run, np.arange(6), 2)
    [5, 4]
    """
    if name == "naive":
        return naive_greedy(run, pool, budget)
    if name in ("lazy", "two-stage"):
        return lazy_greedy(run, pool, budget)
    if name == "approximate-lazy":
        return approximate_lazy_greedy(run, pool, budget, beta)
    if name == "modular":
        return modular_greedy(run, pool, budget)
    raise ValueError(f"name must be one of {GREEDY}, got {name!r}")


def naive_greedy(run: GreedyRun, pool: np.ndarray, budget: float) -> list[int]:
    """Naive greedy (``maximize``'s ``"naive"``): every remaining gain at every step, the
    largest taken, ties to the smallest index.

    Parameters
    ----------
    run : GreedyRun
        The run: its function holds the initial set, to which the picks are added (and their
        gains to ``run.picked_gains``).
    pool : numpy.ndarray
        Sorted indices (int64) of the items that may be picked.
    budget : float
        Number of picks (an int) or, when ``run.cost`` is set, the total cost the picks may
        spend.

    Returns
    -------
    list of int
        The picks, in pick order.

    Example
    -------
    >>> from batchsel import FacilityLocation
    >>> x = np.random.default_rng(0).normal(size=(200, 8)).astype(np.float32)
    >>> f = FacilityLocation.from_embeddings(x)
    >>> naive = naive_greedy(GreedyRun(f, np.empty(0, np.int64), None, False), np.arange(200), 5)
    >>> naive == lazy_greedy(GreedyRun(f, np.empty(0, np.int64), None, False), np.arange(200), 5)
    True
    """
    # the first maximum: the smallest index, live being sorted
    return take_chosen(run, pool, budget, "naive greedy", lambda live: int(np.argmax(run.ratios(live))))


def take_chosen(
    run: GreedyRun, pool: np.ndarray, budget: float, desc: str, choose: Callable[[np.ndarray], int]
) -> list[int]:
    """The loop of :func:`naive_greedy` and
    :func:`~batchsel.submodular.optimizers.stochastic.stochastic_greedy`: at each step take
    the item at position ``choose(live)`` of ``live``, the remaining affordable items
    (sorted), until the budget is spent or no item is left.

    Parameters
    ----------
    run, pool, budget
        As in :func:`naive_greedy`.
    desc : str
        The progress bar's label.
    choose : callable
        ``choose(live)``: the position in ``live`` of the item to take.
    """
    picks: list[int] = []
    remaining = budget
    live = pool.copy()
    bar = run.bar(budget, desc)
    while live.size:
        live = run.affordable(live, remaining)
        if live.size == 0:
            break
        best = choose(live)
        j = int(live[best])
        remaining -= run.take(j)
        picks.append(j)
        live = np.delete(live, best)
        bar.update(1 if run.cost is None else run.cost[j])
        if run.cost is None and len(picks) == budget:
            break
    bar.close()
    return picks


def lazy_greedy(run: GreedyRun, pool: np.ndarray, budget: float) -> list[int]:
    """Lazy greedy (``maximize``'s ``"lazy"``): a priority queue of stale gains, which bound
    the current ones by submodularity, re-evaluated in batches; the picks of
    :func:`naive_greedy`, ties included, with fewer evaluations.

    Parameters
    ----------
    run, pool, budget
        As in :func:`naive_greedy`.

    See Also
    --------
    naive_greedy : its example compares the two.
    """
    picks: list[int] = []
    remaining = budget
    # Every entry's bound is an upper bound of the item's current gain (ratio).
    heap = np.zeros((pool.size, 3))
    heap[:, 0] = run.ratios(pool)
    heap[:, 1] = pool
    pos = np.full(run.f.n, -1, dtype=np.int64)
    _heapify(heap, pos)
    size = np.array([pool.size], dtype=np.int64)
    tracked = run.f._decrements(int(pool[0])) is not None  # probe: no state change
    pending = np.zeros(run.f.n)
    out = np.empty(LAZY_MAX, dtype=np.int64)
    out_bound = np.empty(LAZY_MAX)
    # Re-evaluations one-at-a-time lazy greedy would have needed in recent picks (stale
    # bounds >= the winner's gain): sets the size of a pick's first batch.
    typical = float(LAZY_FIRST)
    step = 0
    bar = run.bar(budget, "lazy greedy")
    while size[0] and (run.cost is not None or len(picks) < budget):
        batch = int(min(LAZY_MAX, max(LAZY_FIRST, typical)))
        bounds: list[np.ndarray] = []
        chosen = -1
        while True:
            code, count = _lazy_pop(heap, pos, size, step, tracked, pending, batch, BOUND_SLACK, out, out_bound)
            if code < 0:
                break
            if code == 1:
                j = int(out[0])
                if run.cost is not None and run.cost[j] > remaining:
                    continue  # unaffordable now, hence for good: the budget only shrinks
                chosen, best = j, out_bound[0]
                break
            bounds.append(out_bound[:count].copy())
            idx = out[:count].copy()
            if run.cost is not None:
                idx = idx[run.cost[idx] <= remaining]
            if idx.size:
                _lazy_push(heap, pos, size, idx, run.ratios(idx).astype(np.float64), step)
            batch = min(2 * batch, LAZY_MAX)
        if chosen < 0:
            break
        if tracked:
            items, drops = run.f._decrements(chosen)
            if run.cost is not None:
                drops = drops / run.cost[items]
            _lazy_drop(pos, pending, items, drops)
        remaining -= run.take(chosen)
        picks.append(chosen)
        step += 1
        needed = sum(int((b >= best).sum()) for b in bounds)
        typical = 0.75 * typical + 0.25 * needed
        bar.update(1 if run.cost is None else run.cost[chosen])
    bar.close()
    return picks


def approximate_lazy_greedy(run: GreedyRun, pool: np.ndarray, budget: float, beta: float) -> list[int]:
    """Approximate lazy greedy (``maximize``'s ``"approximate-lazy"``, apricot's
    ApproximateLazyGreedy): pop the top bound (largest, then smallest index), re-evaluate it
    and take it when the gain is within a factor beta of the bound (a gain evaluated at the
    current step is exact and taken); otherwise push it back. ``f >= (1 - e^-beta) OPT``
    for monotone f; fewer gain evaluations than :func:`lazy_greedy` but one at a time, as
    apricot's, so slower.

    Parameters
    ----------
    run, pool, budget
        As in :func:`naive_greedy`.
    beta : float
        Accept a re-evaluated gain ``>= beta`` times its bound (``0 < beta <= 1``; 1 is
        lazy greedy; apricot's default 0.9).

    Example
    -------
    >>> from batchsel import Modular
    >>> run = GreedyRun(Modular(np.arange(6.0)), np.empty(0, np.int64), None, False)
    >>> approximate_lazy_greedy(run, np.arange(6), 3, beta=0.9)
    [5, 4, 3]
    """
    picks: list[int] = []
    remaining = budget
    bounds = run.ratios(pool)
    # heapq orders (-bound, item): largest bound first, ties to the smallest item
    heap = list(zip((-bounds).tolist(), pool.tolist()))
    heapq.heapify(heap)
    fresh_at = np.full(run.f.n, 0, dtype=np.int64)  # step at which an entry's bound was computed
    step = 0
    bar = run.bar(budget, "approximate lazy greedy")
    while heap and (run.cost is not None or len(picks) < budget):
        neg, j = heapq.heappop(heap)
        if run.cost is not None and run.cost[j] > remaining:
            continue  # unaffordable now, hence for good
        if fresh_at[j] != step:
            u = -neg
            g = float(run.ratios(np.array([j], dtype=np.int64))[0])
            fresh_at[j] = step
            # beta * u for u >= 0 (apricot); for a negative bound the same slack, |u| (1 - beta),
            # where apricot's test gain >= beta * u would never pass and loop
            if g < u - (1.0 - beta) * abs(u):
                heapq.heappush(heap, (-g, j))
                continue
        remaining -= run.take(j)
        picks.append(j)
        step += 1
        bar.update(1 if run.cost is None else run.cost[j])
    bar.close()
    return picks


def modular_greedy(run: GreedyRun, pool: np.ndarray, budget: float) -> list[int]:
    """Modular greedy (``maximize``'s ``"modular"``, apricot's ModularGreedy, a modular
    approximation in one pass): rank the items once by their gain (per unit cost) on the
    initial set, largest first, ties to the smallest index, and add them in that order
    (skipping the unaffordable ones); the reported gains are the true marginal gains.

    Parameters
    ----------
    run, pool, budget
        As in :func:`naive_greedy`.

    Example
    -------
    >>> from batchsel import Modular
    >>> run = GreedyRun(Modular(np.array([1.0, 3.0, 3.0, 2.0])), np.empty(0, np.int64), None, False)
    >>> modular_greedy(run, np.arange(4), 3), run.picked_gains
    ([1, 2, 3], [3.0, 3.0, 2.0])
    """
    picks: list[int] = []
    remaining = budget
    r = run.ratios(pool)
    for j in pool[np.lexsort((pool, -r))].tolist():
        if run.cost is None and len(picks) == budget:
            break
        if run.cost is not None and run.cost[j] > remaining:
            continue
        remaining -= run.take(j)
        picks.append(j)
    return picks
