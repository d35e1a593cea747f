"""apricot's optimizers, by name (:data:`OPTIMIZERS`) and as classes, over batchsel's
greedy loops (naive, lazy, approximate lazy, bidirectional) and apricot's own control
flow where its results depend on it (the draws of its ``numpy.random.RandomState`` in
stochastic, sample, random greedy and GreeDi; the tie order of modular greedy). Each
``select(problem, k, sample_cost)`` adds its picks to a :class:`~batchsel.apricot.problem.Problem`.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any

import numpy as np

from batchsel.apricot.problem import Problem
from batchsel.apricot.utils import check_random_state
from batchsel.submodular.optimizers import (
    GreedyRun,
    approximate_lazy_greedy,
    bidirectional_greedy,
    lazy_greedy,
    naive_greedy,
)


def _budget(k: Any, cost: np.ndarray | None) -> Any:
    return float(k) if cost is not None else int(k)


def _take_if_affordable(run: GreedyRun, picks: list[int], j: int, spent: float, k: Any, cost: Any) -> float:
    """Take item ``j`` (into ``run`` and ``picks``) when its cost (1 without ``cost``) fits
    in what ``spent`` leaves of the budget ``k``, as apricot's modular and random greedy;
    returns the budget spent."""
    c = 1.0 if cost is None else float(cost[j])
    if spent + c > k:
        return spent
    run.take(j)
    picks.append(j)
    return spent + c


class _ApricotQueue:
    """apricot's ``PriorityQueue``: a heap of ``[-gain, push number, item]`` entries, so that
    equal gains leave in the order they were pushed; a re-pushed item's old entry is marked
    deleted."""

    def __init__(self, items: np.ndarray, gains: np.ndarray) -> None:
        self.count = itertools.count()
        self.heap: list[list[Any]] = [
            [-float(g), next(self.count), int(j)] for j, g in zip(items.tolist(), gains.tolist())
        ]
        self.lookup = {entry[2]: entry for entry in self.heap}
        heapq.heapify(self.heap)

    def push(self, j: int, gain: float) -> None:
        if j in self.lookup:
            self.lookup.pop(j)[2] = -1
        entry = [-gain, next(self.count), j]
        self.lookup[j] = entry
        heapq.heappush(self.heap, entry)

    def pop(self) -> tuple[float, int] | None:
        while self.heap:
            weight, _, j = heapq.heappop(self.heap)
            if j != -1:
                del self.lookup[j]
                return -float(weight), int(j)
        return None


def apricot_queue_greedy(run: GreedyRun, pool: np.ndarray, k: Any, beta: float | None = None) -> list[int]:
    """apricot's lazy greedy (``beta`` None) or approximate lazy greedy, step for step over
    its priority queue (:class:`_ApricotQueue`): the picks of apricot's, exact ties in its
    order (the one pushed first), where batchsel's loops take the smallest index.

    Parameters
    ----------
    run : GreedyRun
        The run state (costs: a knapsack budget ``k``).
    pool : numpy.ndarray
        The items that may be picked.
    k : int or float
        Number of picks, or the budget.
    beta : float, optional
        Approximate lazy greedy's acceptance ratio.

    Returns
    -------
    list of int
        The picks, in order (their gains in ``run.picked_gains``).

    Example
    -------
    >>> from batchsel import Modular
    >>> run = GreedyRun(Modular(np.array([1.0, 2.0, 2.0])), np.empty(0, np.int64), None, False)
    >>> apricot_queue_greedy(run, np.arange(3), 2)
    [1, 2]
    """
    costs = np.ones(run.f.n) if run.cost is None else run.cost
    queue = _ApricotQueue(pool, run.ratios(pool))
    spent = 0.0
    picks: list[int] = []
    while spent < k:
        best, best_gain = -1, float("-inf")
        while True:
            top = queue.pop()
            if top is None:
                return picks
            stale, j = top
            if spent + costs[j] > k:
                continue
            if beta is None and best == j:
                break
            gain = float(run.ratios(np.array([j], dtype=np.int64))[0])
            if beta is not None:
                if gain >= beta * stale:
                    best = j
                    break
                queue.push(j, gain)
                continue
            queue.push(j, gain)
            # apricot also stops at a second gain of exactly 0 in a row and takes that item,
            # though a later one may still gain: not followed (docs/guide/apricot.md)
            if gain > best_gain:
                best, best_gain = j, gain
        spent += costs[best]
        run.take(best)
        picks.append(best)
    return picks


class BaseOptimizer:
    """apricot's optimizer base: ``select(problem, k, sample_cost)`` adds to the problem's
    picks. The subclasses take apricot's arguments, plus their own (``beta``, ``epsilon``,
    ``optimizer1``, ...), as apricot's classes do.

    Parameters
    ----------
    function : object, optional
        Accepted (apricot sets it) and not used.
    random_state : None, int or numpy.random.RandomState, optional
        The draws of the stochastic optimizers (:func:`~batchsel.apricot.check_random_state`).
    n_jobs : int, optional
        Accepted and not used, as in apricot.
    verbose : bool, default False
        Progress bars over the picks.

    Example
    -------
    >>> from batchsel import Modular
    >>> from batchsel.apricot.problem import Problem
    >>> problem = Problem(Modular, np.arange(6.0), square=False)
    >>> NaiveGreedy().select(problem, 2)
    >>> problem.ranking, problem.gains
    ([5, 4], [5.0, 4.0])
    """

    def __init__(self, function: Any = None, random_state: Any = None, n_jobs: Any = None, verbose: bool = False):
        self.function = function
        self.random_state = check_random_state(random_state)
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.gains_ = None

    def select(self, problem: Problem, k: Any, sample_cost: Any = None) -> None:
        """Add the picks of this optimizer to ``problem`` (its ``ranking`` and ``gains``).

        Parameters
        ----------
        problem : Problem
            The problem; its function holds nothing of the picks until they are made.
        k : int or float
            Number of picks, or the budget with ``sample_cost``.
        sample_cost : numpy.ndarray, optional
            The cost of every item (a knapsack budget of ``k``).
        """
        raise NotImplementedError


def resolve(optimizer: Any, **kwargs: Any) -> BaseOptimizer:
    """An optimizer object as it is, or a new one of :data:`OPTIMIZERS` by name.

    Parameters
    ----------
    optimizer : str or BaseOptimizer
        The optimizer or its apricot name.
    **kwargs
        The new optimizer's arguments.

    Returns
    -------
    BaseOptimizer

    Example
    -------
    >>> type(resolve("lazy")).__name__
    'LazyGreedy'
    """
    if isinstance(optimizer, BaseOptimizer):
        return optimizer
    if isinstance(optimizer, str) and optimizer in OPTIMIZERS:
        return OPTIMIZERS[optimizer](**kwargs)
    raise ValueError(f"Optimizer must be an optimizer object or a str in {list(OPTIMIZERS)}, got {optimizer!r}")


class NaiveGreedy(BaseOptimizer):
    """Every gain at every step (batchsel's ``"naive"``); ties to the smallest index."""

    def select(self, problem: Problem, k: Any, sample_cost: Any = None) -> None:
        run = problem.run(sample_cost)
        problem.record(naive_greedy(run, problem.idxs, _budget(k, sample_cost)), run.picked_gains)


class LazyGreedy(BaseOptimizer):
    """batchsel's lazy greedy: the picks of naive greedy, ties to the smallest index; for
    max coverage (counts, ties everywhere) apricot's queue (:func:`apricot_queue_greedy`)."""

    def select(self, problem: Problem, k: Any, sample_cost: Any = None) -> None:
        run = problem.run(sample_cost)
        if problem.apricot_queue:
            picks = apricot_queue_greedy(run, problem.idxs, _budget(k, sample_cost))
        else:
            picks = lazy_greedy(run, problem.idxs, _budget(k, sample_cost))
        problem.record(picks, run.picked_gains)


class ApproximateLazyGreedy(BaseOptimizer):
    """Accepts the top of the queue once its gain is ``>= beta`` times its stale bound (for
    max coverage in apricot's queue order, :func:`apricot_queue_greedy`)."""

    def __init__(
        self, function: Any = None, beta: float = 0.9, random_state: Any = None, n_jobs: Any = None, verbose=False
    ):
        self.beta = beta
        super().__init__(function=function, random_state=random_state, n_jobs=n_jobs, verbose=verbose)

    def select(self, problem: Problem, k: Any, sample_cost: Any = None) -> None:
        run = problem.run(sample_cost)
        if problem.apricot_queue:
            picks = apricot_queue_greedy(run, problem.idxs, _budget(k, sample_cost), self.beta)
        else:
            picks = approximate_lazy_greedy(run, problem.idxs, _budget(k, sample_cost), self.beta)
        problem.record(picks, run.picked_gains)


class TwoStageGreedy(BaseOptimizer):
    """``optimizer1`` for the first ``n_first_selections`` picks (or that much budget), then
    ``optimizer2`` for the rest, as apricot."""

    def __init__(
        self,
        function: Any = None,
        n_first_selections: int = 10,
        optimizer1: Any = "naive",
        optimizer2: Any = "lazy",
        random_state: Any = None,
        n_jobs: Any = None,
        verbose: bool = False,
    ):
        self.n_first_selections = n_first_selections
        self.optimizer1, self.optimizer2 = optimizer1, optimizer2
        super().__init__(function=function, random_state=random_state, n_jobs=n_jobs, verbose=verbose)

    def select(self, problem: Problem, k: Any, sample_cost: Any = None) -> None:
        first = resolve(self.optimizer1, verbose=self.verbose)
        second = resolve(self.optimizer2, verbose=self.verbose)
        first.select(problem, min(self.n_first_selections, k), sample_cost)
        if k > self.n_first_selections:
            second.select(problem, k - self.n_first_selections, sample_cost)


class StochasticGreedy(BaseOptimizer):
    """apricot's stochastic greedy, draw for draw: each step the best of
    ``max(int(-log(epsilon) n / k), 1)`` remaining items drawn by ``random_state``; with
    ``sample_cost`` the reported gains are per unit cost, as apricot's."""

    def __init__(
        self, function: Any = None, epsilon: float = 0.9, random_state: Any = None, n_jobs: Any = None, verbose=False
    ):
        self.epsilon = epsilon
        super().__init__(function=function, random_state=random_state, n_jobs=n_jobs, verbose=verbose)

    def select(self, problem: Problem, k: Any, sample_cost: Any = None) -> None:
        run = problem.run(sample_cost)
        ones = np.ones(problem.n) if sample_cost is None else sample_cost
        size = max(int(-np.log(self.epsilon) * problem.n / k), 1)
        mask = problem.mask.copy()
        spent, picks, reported = 0.0, [], []
        while spent < k:
            live = np.flatnonzero(~mask)
            if live.size == 0:
                break
            drawn = self.random_state.choice(live, replace=False, size=min(size, live.size)).astype(np.int64)
            ratios = run.ratios(drawn)
            for pos in np.lexsort((np.arange(ratios.size), -ratios)):
                j = int(drawn[pos])
                if spent + ones[j] <= k:
                    break
            else:
                break
            spent += ones[j]
            run.take(j)
            picks.append(j)
            reported.append(float(ratios[pos]))
            mask[j] = True
        # apricot reports the gain per unit cost here (its naive and lazy greedy: the gain)
        problem.record(picks, reported)


class SampleGreedy(BaseOptimizer):
    """apricot's sample greedy: ``random_state`` drops ``n - int(n epsilon)`` items, then
    ``optimizer`` runs on the rest."""

    def __init__(
        self,
        function: Any = None,
        epsilon: float = 0.9,
        optimizer: Any = "lazy",
        random_state: Any = None,
        n_jobs: Any = None,
        verbose: bool = False,
    ):
        self.epsilon, self.optimizer = epsilon, optimizer
        super().__init__(function=function, random_state=random_state, n_jobs=n_jobs, verbose=verbose)

    def select(self, problem: Problem, k: Any, sample_cost: Any = None) -> None:
        n = problem.n
        kept = max(int(n * self.epsilon), 1)
        dropped = self.random_state.choice(problem.idxs, replace=False, size=n - kept)
        problem.mask[dropped] = True
        resolve(self.optimizer, verbose=self.verbose).select(problem, k, sample_cost)


class GreeDi(BaseOptimizer):
    """apricot 0.6.1's GreeDi: the items dealt into ``m`` parts (default 8) by
    ``random_state``, ``optimizer1`` picks ``l`` (default ``min(k // 4, n // m)``) in each
    part's own function, ``optimizer2`` picks k of their union, and the gains are then
    recomputed in that order on the whole function."""

    def __init__(
        self,
        function: Any = None,
        m: int | None = None,
        l: int | None = None,  # noqa: E741 (apricot's name)
        optimizer1: Any = "lazy",
        optimizer2: Any = "lazy",
        random_state: Any = None,
        n_jobs: Any = None,
        verbose: bool = False,
    ):
        self.m, self.l = m, l
        self.optimizer1, self.optimizer2 = optimizer1, optimizer2
        super().__init__(function=function, random_state=random_state, n_jobs=n_jobs, verbose=verbose)

    def select(self, problem: Problem, k: Any, sample_cost: Any = None) -> None:
        n = problem.n
        if self.m is None and self.l is None:
            self.m = 8
            self.l = min(int(k) // 4, n // self.m)
        if k > self.m * self.l:
            raise ValueError("k must be smaller than m * l")
        cost = np.ones(n) if sample_cost is None else sample_cost
        partitions = np.arange(n) % self.m
        self.random_state.shuffle(partitions)
        first = resolve(self.optimizer1, verbose=self.verbose)
        second = resolve(self.optimizer2, verbose=self.verbose)
        rankings = []
        for i in range(self.m):
            idxs = np.flatnonzero(partitions == i)
            part = problem.restrict(idxs)
            first.select(part, self.l, None if sample_cost is None else cost[idxs])
            rankings.append(idxs[np.asarray(part.ranking, dtype=np.int64)])
        union = np.concatenate(rankings)
        merged = problem.restrict(union)
        second.select(merged, k, None if sample_cost is None else cost[union])
        order = union[np.asarray(merged.ranking, dtype=np.int64)]
        run = problem.run(sample_cost)
        for j in order.tolist():
            run.take(int(j))
        problem.record(order.tolist(), run.picked_gains)


class ModularGreedy(BaseOptimizer):
    """apricot's modular approximation: the items in decreasing order of their gain (per
    unit cost) on the initial set, in apricot's order (``argsort()[::-1]``: exact ties come
    in NumPy's sort order, reversed), each added with its true marginal gain."""

    def select(self, problem: Problem, k: Any, sample_cost: Any = None) -> None:
        run = problem.run(sample_cost)
        pool = problem.idxs
        order = pool[run.ratios(pool).argsort()[::-1]]
        picks: list[int] = []
        spent = 0.0
        for j in order.tolist():
            spent = _take_if_affordable(run, picks, j, spent, k, sample_cost)
        problem.record(picks, run.picked_gains)


class RandomGreedy(BaseOptimizer):
    """Items drawn uniformly by ``random_state`` (apricot's class cannot be built: its
    ``__init__`` calls ``super(NaiveGreedy, self)``)."""

    def select(self, problem: Problem, k: Any, sample_cost: Any = None) -> None:
        run = problem.run(sample_cost)
        mask = problem.mask.copy()
        picks: list[int] = []
        spent = 0.0
        while spent < k and not mask.all():
            live = np.flatnonzero(~mask)
            j = int(self.random_state.choice(live))
            mask[j] = True
            spent = _take_if_affordable(run, picks, j, spent, k, sample_cost)
        problem.record(picks, run.picked_gains)


class BidirectionalGreedy(BaseOptimizer):
    """batchsel's randomized double greedy, seeded from ``random_state`` (apricot's own
    fails in 0.6.1: ``self.gains_`` is None)."""

    def select(self, problem: Problem, k: Any, sample_cost: Any = None) -> None:
        if sample_cost is not None:
            raise ValueError("the bidirectional greedy algorithm takes no sample_cost")
        run = problem.run(None)
        rng = np.random.default_rng(int(self.random_state.randint(2**31 - 1)))
        problem.record(bidirectional_greedy(run, problem.idxs, int(k), rng), run.picked_gains)


class SieveGreedy(BaseOptimizer):
    """apricot's sieve (``partial_fit``, and ``fit`` with ``optimizer="sieve"``): its
    thresholds, a first one at 1 then ``(1 + epsilon)^j - 1`` up to the largest singleton
    gain seen times k, grown as that gain grows; the sieves themselves are the selection's
    (:class:`~batchsel.apricot.sieve.SieveState`). batchsel's own sieve-streaming is
    :class:`batchsel.submodular.streaming.SieveStreaming`.

    Parameters
    ----------
    epsilon : float, default 0.01
        The thresholds' ratio, as apricot's.
    function, random_state, n_jobs, verbose
        As :class:`BaseOptimizer`'s.

    Attributes
    ----------
    thresholds : list of float
        Every sieve's threshold ``v``, in the order the sieves were opened.
    max_gain : float
        The largest singleton gain seen (-1 before the first row).
    n_seen_ : int
        Rows streamed: the next row's number.
    """

    def __init__(
        self, function: Any = None, epsilon: float = 0.01, random_state: Any = None, n_jobs: Any = None, verbose=False
    ):
        self.epsilon = epsilon
        super().__init__(function=function, random_state=random_state, n_jobs=n_jobs, verbose=verbose)
        self.restart()

    def restart(self) -> None:
        """Forget the stream: no thresholds but apricot's first (1), no row seen."""
        self.n_seen_ = 0
        self.thresholds: list[float] = [1]
        self.max_gain = -1.0

    def stream(
        self,
        state: Any,
        step: Any,
        matrix: np.ndarray,
        singles: np.ndarray,
        k: int,
        rows: np.ndarray,
        bound: np.ndarray | None = None,
    ) -> None:
        """Open the thresholds the chunk's largest singleton gain calls for, then pass its
        rows through the sieves.

        Parameters
        ----------
        state : SieveState
            The selection's sieves.
        step : callable
            The function's sieve gains (:mod:`batchsel.apricot.sieve`).
        matrix : numpy.ndarray
            The chunk's rows as the function sees them.
        singles : numpy.ndarray
            Every row's singleton gain, as apricot scales it (per unit cost, or a mean over
            the reservoir).
        k : int
            Picks per sieve.
        rows : numpy.ndarray
            The chunk's rows (features), for ``subset``.
        bound : numpy.ndarray, optional
            An upper bound of each row's gain in any sieve (:meth:`SieveState.scan`).
        """
        n = matrix.shape[0]
        if n == 0:
            return
        top = float(singles.max())
        if top > self.max_gain:
            self.max_gain = top
            j = len(self.thresholds)
            threshold = (1 + self.epsilon) ** j - 1
            while threshold <= self.max_gain * k:
                self.thresholds.append(threshold)
                j += 1
                threshold = (1 + self.epsilon) ** j - 1
        idxs = np.arange(n, dtype=np.int64) + self.n_seen_
        state.scan(step, matrix, np.array(self.thresholds, dtype=np.float64), idxs, rows, bound)
        self.n_seen_ += n

    def select(self, problem: Problem, k: Any, sample_cost: Any = None) -> None:
        """Not a greedy loop: the selections stream (``fit`` and ``partial_fit``)."""
        raise ValueError("the sieve optimizer streams rows: the selection's fit or partial_fit runs it")


OPTIMIZERS: dict[str, type[BaseOptimizer]] = {
    "random": RandomGreedy,
    "modular": ModularGreedy,
    "naive": NaiveGreedy,
    "lazy": LazyGreedy,
    "approximate-lazy": ApproximateLazyGreedy,
    "two-stage": TwoStageGreedy,
    "stochastic": StochasticGreedy,
    "sample": SampleGreedy,
    "greedi": GreeDi,
    "bidirectional": BidirectionalGreedy,
    "sieve": SieveGreedy,
}
