"""apricot-select 0.6.1's API over batchsel's set functions and optimizers:
``import batchsel.apricot as apricot`` in place of ``import apricot``.

The selection classes keep apricot's names, constructor arguments, attributes
(``ranking``, ``gains``, ``subset``, ``idxs``) and methods (``fit``, ``transform``,
``fit_transform``, ``partial_fit``); the optimizers keep apricot's names (as strings and as
classes: ``NaiveGreedy``, ``LazyGreedy``, ...) and arguments. They are thin adapters: the
gains come from :mod:`batchsel.submodular.functions`, the greedy loops from :mod:`batchsel.submodular.optimizers`
(naive, lazy, approximate lazy) and :class:`batchsel.submodular.streaming.SieveStreaming`
(``partial_fit``); what is left here is apricot's control flow where its results depend on
it (the draws of its ``numpy.random.RandomState`` in stochastic, sample and GreeDi, the tie
order of modular). Everything is computed in float64, as apricot does.

Where the results differ from apricot's, and why: docs/guide/apricot.md.

Example
-------
>>> import numpy as np
>>> import batchsel.apricot as apricot
>>> x = np.random.default_rng(0).uniform(size=(200, 8))
>>> sel = apricot.FacilityLocationSelection(10, metric="euclidean").fit(x)
>>> sel.ranking.shape, sel.gains.dtype.name, sel.transform(x).shape
((10,), 'float64', (10, 8))
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from batchsel.submodular.functions import (
    Custom,
    FacilityLocation,
    FeatureBased,
    GraphCut,
    MaxCoverage,
    Mixture,
    SaturatedCoverage,
    SumRedundancy,
)
from batchsel.submodular.functions.base import SetFunction
from batchsel.submodular.optimizers import (
    GreedyRun,
    approximate_lazy_greedy,
    bidirectional_greedy,
    lazy_greedy,
    naive_greedy,
)

__all__ = [
    "BaseSelection",
    "BaseGraphSelection",
    "FacilityLocationSelection",
    "FeatureBasedSelection",
    "GraphCutSelection",
    "SumRedundancySelection",
    "SaturatedCoverageSelection",
    "MaxCoverageSelection",
    "MixtureSelection",
    "CustomSelection",
    "CustomGraphSelection",
    "BaseOptimizer",
    "NaiveGreedy",
    "LazyGreedy",
    "ApproximateLazyGreedy",
    "TwoStageGreedy",
    "StochasticGreedy",
    "SampleGreedy",
    "GreeDi",
    "ModularGreedy",
    "RandomGreedy",
    "BidirectionalGreedy",
    "SieveGreedy",
    "OPTIMIZERS",
    "check_random_state",
]

__version__ = "0.6.1"  # the apricot-select API this module follows


def check_random_state(seed: Any) -> np.random.RandomState:
    """apricot's (and scikit-learn's): None gives NumPy's global RandomState, an int a new
    seeded one, a RandomState itself."""
    if seed is None or seed is np.random:
        # NumPy has no public accessor for its global RandomState (scikit-learn reads it so too)
        return np.random.mtrand._rand
    if isinstance(seed, (int, np.integer)):
        return np.random.RandomState(seed)
    if isinstance(seed, np.random.RandomState):
        return seed
    raise ValueError(f"{seed!r} cannot be used to seed a numpy.random.RandomState instance")


# -- the problem an optimizer works on ---------------------------------------------------------
class _Problem:
    """One greedy run: a batchsel set function over the data's items, the items already in
    the set (``initial_subset`` indices, or rows), the picks so far and apricot's mask of the
    items that may not be picked (``idxs``: those that may). GreeDi and the subsets of
    sample greedy build problems on part of the data (``restrict``)."""

    def __init__(
        self,
        build: Callable[[Any], SetFunction],
        matrix: Any,
        square: bool,
        initial: np.ndarray | None = None,
        rows: np.ndarray | None = None,
        verbose: bool = False,
    ) -> None:
        self.build, self.matrix, self.square, self.verbose = build, matrix, square, verbose
        self.f = build(matrix)
        self.n = self.f.n
        self.init = np.empty(0, np.int64) if initial is None else np.asarray(initial, dtype=np.int64)
        self.rows = rows
        self.mask = np.zeros(self.n, dtype=bool)
        self.mask[self.init] = True
        self.ranking: list[int] = []
        self.gains: list[float] = []

    @property
    def idxs(self) -> np.ndarray:
        return np.flatnonzero(~self.mask).astype(np.int64)

    def run(self, cost: np.ndarray | None) -> GreedyRun:
        """batchsel's run state with the initial items and the picks so far in the set."""
        init = np.concatenate([self.init, np.asarray(self.ranking, dtype=np.int64)])
        return GreedyRun(self.f, init, cost, self.verbose, self.rows)

    def record(self, picks: list[int], gains: list[float]) -> None:
        self.ranking.extend(int(j) for j in picks)
        self.gains.extend(float(g) for g in gains)
        self.mask[np.asarray(picks, dtype=np.int64)] = True

    def restrict(self, idxs: np.ndarray) -> "_Problem":
        """The problem on the items ``idxs`` alone (apricot rebuilds its function on
        ``X[idxs]``, and ``X[idxs][:, idxs]`` for a square similarity)."""
        m = self.matrix[idxs]
        if self.square:
            m = m[:, idxs]
        return _Problem(self.build, m, self.square, verbose=self.verbose)


def _budget(k: Any, cost: np.ndarray | None) -> Any:
    return float(k) if cost is not None else int(k)


def _costs(sample_cost: Any, n: int) -> np.ndarray | None:
    if sample_cost is None:
        return None
    cost = np.asarray(sample_cost, dtype=np.float64)
    if cost.shape != (n,):
        raise ValueError(f"sample_cost must have one value per example ({n}), got shape {cost.shape}")
    return cost


# -- optimizers ---------------------------------------------------------------------------------
class BaseOptimizer:
    """apricot's optimizer base: ``select(problem, k, sample_cost)`` adds to the problem's
    picks. ``function`` is accepted (apricot sets it) and not used."""

    def __init__(self, function: Any = None, random_state: Any = None, n_jobs: Any = None, verbose: bool = False):
        self.function = function
        self.random_state = check_random_state(random_state)
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.gains_ = None

    def select(self, problem: _Problem, k: Any, sample_cost: Any = None) -> None:
        raise NotImplementedError


def _resolve(optimizer: Any, **kwargs: Any) -> BaseOptimizer:
    if isinstance(optimizer, BaseOptimizer):
        return optimizer
    if isinstance(optimizer, str) and optimizer in OPTIMIZERS:
        return OPTIMIZERS[optimizer](**kwargs)
    raise ValueError(f"Optimizer must be an optimizer object or a str in {list(OPTIMIZERS)}, got {optimizer!r}")


class NaiveGreedy(BaseOptimizer):
    """Every gain at every step (batchsel's ``"naive"``); ties to the smallest index."""

    def select(self, problem: _Problem, k: Any, sample_cost: Any = None) -> None:
        run = problem.run(sample_cost)
        problem.record(naive_greedy(run, problem.idxs, _budget(k, sample_cost)), run.picked_gains)


class LazyGreedy(BaseOptimizer):
    """batchsel's lazy greedy: the picks of naive greedy, ties to the smallest index."""

    def select(self, problem: _Problem, k: Any, sample_cost: Any = None) -> None:
        run = problem.run(sample_cost)
        problem.record(lazy_greedy(run, problem.idxs, _budget(k, sample_cost)), run.picked_gains)


class ApproximateLazyGreedy(BaseOptimizer):
    """Accepts the top of the queue once its gain is ``>= beta`` times its stale bound."""

    def __init__(
        self, function: Any = None, beta: float = 0.9, random_state: Any = None, n_jobs: Any = None, verbose=False
    ):
        self.beta = beta
        super().__init__(function=function, random_state=random_state, n_jobs=n_jobs, verbose=verbose)

    def select(self, problem: _Problem, k: Any, sample_cost: Any = None) -> None:
        run = problem.run(sample_cost)
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

    def select(self, problem: _Problem, k: Any, sample_cost: Any = None) -> None:
        first = _resolve(self.optimizer1, verbose=self.verbose)
        second = _resolve(self.optimizer2, verbose=self.verbose)
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

    def select(self, problem: _Problem, k: Any, sample_cost: Any = None) -> None:
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

    def select(self, problem: _Problem, k: Any, sample_cost: Any = None) -> None:
        n = problem.n
        kept = max(int(n * self.epsilon), 1)
        dropped = self.random_state.choice(problem.idxs, replace=False, size=n - kept)
        problem.mask[dropped] = True
        _resolve(self.optimizer, verbose=self.verbose).select(problem, k, sample_cost)


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

    def select(self, problem: _Problem, k: Any, sample_cost: Any = None) -> None:
        n = problem.n
        if self.m is None and self.l is None:
            self.m = 8
            self.l = min(int(k) // 4, n // self.m)
        if k > self.m * self.l:
            raise ValueError("k must be smaller than m * l")
        cost = np.ones(n) if sample_cost is None else sample_cost
        partitions = np.arange(n) % self.m
        self.random_state.shuffle(partitions)
        first = _resolve(self.optimizer1, verbose=self.verbose)
        second = _resolve(self.optimizer2, verbose=self.verbose)
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

    def select(self, problem: _Problem, k: Any, sample_cost: Any = None) -> None:
        run = problem.run(sample_cost)
        pool = problem.idxs
        order = pool[run.ratios(pool).argsort()[::-1]]
        spent, picks = 0.0, []
        for j in order.tolist():
            c = 1.0 if sample_cost is None else float(sample_cost[j])
            if spent + c > k:
                continue
            spent += c
            run.take(j)
            picks.append(j)
        problem.record(picks, run.picked_gains)


class RandomGreedy(BaseOptimizer):
    """Items drawn uniformly by ``random_state`` (apricot's class cannot be built: its
    ``__init__`` calls ``super(NaiveGreedy, self)``)."""

    def select(self, problem: _Problem, k: Any, sample_cost: Any = None) -> None:
        run = problem.run(sample_cost)
        mask = problem.mask.copy()
        spent, picks = 0.0, []
        while spent < k and not mask.all():
            live = np.flatnonzero(~mask)
            j = int(self.random_state.choice(live))
            mask[j] = True
            c = 1.0 if sample_cost is None else float(sample_cost[j])
            if spent + c > k:
                continue
            spent += c
            run.take(j)
            picks.append(j)
        problem.record(picks, run.picked_gains)


class BidirectionalGreedy(BaseOptimizer):
    """batchsel's randomized double greedy, seeded from ``random_state`` (apricot's own
    fails in 0.6.1: ``self.gains_`` is None)."""

    def select(self, problem: _Problem, k: Any, sample_cost: Any = None) -> None:
        if sample_cost is not None:
            raise ValueError("the bidirectional greedy algorithm takes no sample_cost")
        run = problem.run(None)
        rng = np.random.default_rng(int(self.random_state.randint(2**31 - 1)))
        problem.record(bidirectional_greedy(run, problem.idxs, int(k), rng), run.picked_gains)


class SieveGreedy(BaseOptimizer):
    """The streaming optimizer of ``partial_fit`` (batchsel's
    :class:`~batchsel.submodular.streaming.SieveStreaming`, best sieve); ``epsilon`` as apricot's."""

    def __init__(
        self, function: Any = None, epsilon: float = 0.01, random_state: Any = None, n_jobs: Any = None, verbose=False
    ):
        self.epsilon = epsilon
        super().__init__(function=function, random_state=random_state, n_jobs=n_jobs, verbose=verbose)

    def select(self, problem: _Problem, k: Any, sample_cost: Any = None) -> None:
        raise ValueError("the sieve optimizer streams: call partial_fit, not fit")


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


# -- data ---------------------------------------------------------------------------------------
def _as_data(X: Any) -> np.ndarray | sp.csr_matrix:
    if sp.issparse(X):
        return sp.csr_matrix(X)
    if not isinstance(X, (list, np.ndarray)):
        raise ValueError("X must be either a list of lists, a 2D numpy array, or a scipy.sparse.csr_matrix.")
    x = np.asarray(X)
    if x.ndim != 2:
        raise ValueError("X must have exactly two dimensions.")
    return x if x.dtype == np.float64 else x.astype(np.float64)


def _similarity(X: Any, metric: str, n_neighbors: Any = None) -> np.ndarray | sp.csr_matrix:
    """apricot's similarity of the rows of X, computed as apricot computes it (its
    ``_calculate_pairwise_distances``, scikit-learn's distances, then ``max d - d``, or
    ``max d^2 - d^2`` for euclidean, and the squared cosine / correlation), so that its
    float64 values, exact ties included, are apricot's; ``n_neighbors``: scikit-learn's
    k-NN graph, as apricot."""
    if metric in ("precomputed", "ignore"):
        return X
    if sp.issparse(X):
        raise ValueError("Must passed in a precomputed sparse similarity matrix or a dense feature matrix.")
    from sklearn.metrics import pairwise_distances
    from sklearn.neighbors import KNeighborsTransformer

    name = "correlation" if metric == "corr" else metric
    cos = name in ("cosine", "correlation")
    if n_neighbors is None:
        if name == "euclidean":
            d = pairwise_distances(X, metric=name, squared=True)
        else:
            d = pairwise_distances(X, metric=name)
            if cos:  # 1 - (1 - d)^2, in place
                np.subtract(1, d, out=d)
                np.square(d, out=d)
                np.subtract(1, d, out=d)
        if cos:
            return np.subtract(1, d, out=d)
        return np.subtract(d.max(), d, out=d)
    if cos:
        d = pairwise_distances(X, metric=name)
        np.subtract(1, d, out=d)
        np.square(d, out=d)
        np.subtract(1, d, out=d)
        name = "precomputed"
    else:
        d = X
    if isinstance(n_neighbors, KNeighborsTransformer):
        transformer = n_neighbors
    else:
        transformer = KNeighborsTransformer(n_neighbors=int(n_neighbors), metric=name)
    g = sp.csr_matrix(transformer.fit_transform(d))
    g.data = 1 - g.data if cos else g.max() - g.data
    return g


# -- selections ---------------------------------------------------------------------------------
class BaseSelection:
    """apricot's selection base: ``fit(X)`` selects ``n_samples`` examples of X with
    ``optimizer``; the results are ``ranking`` (indices in selection order), ``gains`` (the
    marginal gain of each when picked, float64) and ``subset`` (their rows).

    Parameters follow apricot-select 0.6.1 (``n_samples``, ``initial_subset``,
    ``optimizer``, ``optimizer_kwds``, ``reservoir``, ``max_reservoir_size``, ``n_jobs``,
    ``random_state``, ``verbose``).
    """

    _square = False  # the function's matrix is a square similarity (GreeDi slices columns too)

    def __init__(
        self,
        n_samples: Any,
        initial_subset: Any = None,
        optimizer: Any = "lazy",
        optimizer_kwds: dict | None = None,
        reservoir: Any = None,
        max_reservoir_size: int = 1000,
        n_jobs: int = 1,
        random_state: Any = None,
        verbose: bool = False,
    ) -> None:
        if n_samples <= 0:
            raise ValueError("n_samples must be a positive value.")
        if initial_subset is not None and not isinstance(initial_subset, (list, np.ndarray)):
            raise ValueError("initial_subset must be a list, numpy array, or None")
        if initial_subset is not None:
            initial_subset = np.array(initial_subset)
        if not isinstance(optimizer, BaseOptimizer) and optimizer not in OPTIMIZERS:
            raise ValueError(f"Optimizer must be an optimizer object or a str in {list(OPTIMIZERS)}.")
        if verbose not in (True, False):
            raise ValueError("verbosity must be True or False")
        self.n_samples = n_samples
        self.metric = "ignore"
        self.random_state = check_random_state(random_state)
        self.optimizer = optimizer
        self.optimizer_kwds = {} if optimizer_kwds is None else optimizer_kwds
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.initial_subset = initial_subset
        self.reservoir = reservoir
        self.max_reservoir_size = max_reservoir_size if reservoir is None else np.asarray(reservoir).shape[0]
        self.ranking: Any = None
        self.idxs: Any = None
        self.gains: Any = None
        self.subset: Any = None
        self.sparse: Any = None
        self._sieve: Any = None
        self._sieve_rows: dict[int, np.ndarray] = {}
        self.n_seen_ = 0

    # -- to implement: the batchsel function of a matrix (features or similarity) -------------
    def _make(self, matrix: Any) -> SetFunction:
        raise NotImplementedError

    def _matrix(self, X: Any) -> Any:
        """The matrix the function is built on (features here, a similarity for graphs)."""
        return X

    # -- apricot's interface ------------------------------------------------------------------
    def fit(self, X: Any, y: Any = None, sample_weight: Any = None, sample_cost: Any = None) -> "BaseSelection":
        """Select ``n_samples`` examples of X (``sample_cost``: a knapsack budget of
        ``n_samples``); returns self."""
        x = _as_data(X)
        values = x.data if sp.issparse(x) else x
        if values.size and values.min() < 0.0 and values.max() > 0.0:
            raise ValueError("X cannot contain negative values or must be entirely negative values.")
        if self.n_samples > x.shape[0]:
            raise ValueError("Cannot select more examples than the number in the data set.")
        self.sparse = sp.issparse(x)
        matrix = self._matrix(x)
        initial, rows = self._initial(x.shape[0])
        problem = _Problem(self._make, matrix, self._square, initial, rows, self.verbose)
        optimizer = _resolve(
            self.optimizer, verbose=self.verbose, random_state=self.random_state, **self.optimizer_kwds
        )
        optimizer.select(problem, self.n_samples, _costs(sample_cost, x.shape[0]))
        self.ranking = np.asarray(problem.ranking, dtype=np.int64)
        self.gains = np.asarray(problem.gains, dtype=np.float64)
        self.idxs = problem.idxs
        self.subset = self._rows(x, self.ranking)
        return self

    def transform(self, X: Any, y: Any = None, sample_weight: Any = None) -> Any:
        """The selected rows of X (and of y, sample_weight), in selection order."""
        r = self.ranking
        if sample_weight is not None:
            return X[r], None if y is None else y[r], sample_weight[r]
        return X[r] if y is None else (X[r], y[r])

    def fit_transform(self, X: Any, y: Any = None, sample_weight: Any = None, sample_cost: Any = None) -> Any:
        """``fit`` then ``transform``."""
        self.fit(X, y=y, sample_weight=sample_weight, sample_cost=sample_cost)
        return self.transform(X, y=y, sample_weight=sample_weight)

    def partial_fit(self, X: Any, y: Any = None, sample_weight: Any = None, sample_cost: Any = None) -> "BaseSelection":
        """Stream X (one chunk of rows) through sieve-streaming
        (:class:`batchsel.submodular.streaming.SieveStreaming`, best sieve, apricot's epsilon 0.01);
        ``ranking`` numbers the rows across calls."""
        if sample_cost is not None:
            raise ValueError("partial_fit takes no sample_cost here (sieve-streaming under a cardinality budget)")
        x = _as_data(X)
        x = x.toarray() if sp.issparse(x) else x
        if self._sieve is None:
            self._sieve = self._streamer()
        self._sieve.partial_fit(x)
        base = self.n_seen_
        self.n_seen_ += x.shape[0]
        ranking = np.asarray(self._sieve.indices_, dtype=np.int64)
        # the rows of every open sieve's items (a later chunk may make any of them the best)
        held = set(ranking.tolist()) | set(self._sieve.held_indices_.tolist())
        for j in held:
            if base <= j < self.n_seen_:
                self._sieve_rows[j] = np.array(x[j - base])
        self._sieve_rows = {j: r for j, r in self._sieve_rows.items() if j in held}
        self.ranking = ranking
        self.gains = np.asarray(self._sieve.gains_, dtype=np.float64)
        width = x.shape[1]
        self.subset = np.array([self._sieve_rows[j] for j in ranking.tolist()]).reshape(-1, width)
        return self

    def _streamer(self) -> Any:
        raise NotImplementedError(
            f"partial_fit (sieve-streaming) is available for FeatureBasedSelection and "
            f"FacilityLocationSelection, not {type(self).__name__}"
        )

    def _epsilon(self) -> float:
        if isinstance(self.optimizer, SieveGreedy):
            return float(self.optimizer.epsilon)
        return float(self.optimizer_kwds.get("epsilon", 0.01))

    # -- helpers ------------------------------------------------------------------------------
    def _initial(self, n: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        s = self.initial_subset
        if s is None:
            return None, None
        if s.ndim == 2:
            return None, s.astype(np.float64)
        if s.dtype == bool:
            s = np.flatnonzero(s)
        if len(s) + self.n_samples > n:
            raise ValueError(
                "When using a mask for the initial subset must selected fewer than the size of the subset "
                "minus the initial subset size, i.e., n_samples < X.shape[0] - initial_subset.shape[0]."
            )
        if s.size and (s.max() >= n or s.min() < 0):
            raise ValueError("initial_subset indices must be in [0, X.shape[0])")
        return np.unique(s.astype(np.int64)), None

    def _rows(self, x: Any, ranking: np.ndarray) -> np.ndarray:
        if self.metric == "precomputed":
            return np.zeros((0, x.shape[1]))
        rows = x[ranking]
        return rows.toarray() if sp.issparse(rows) else np.asarray(rows, dtype=np.float64)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_samples={self.n_samples!r}, optimizer={self.optimizer!r})"


class BaseGraphSelection(BaseSelection):
    """Selections over a similarity of the rows: ``metric`` (``"euclidean"``, ``"cosine"``,
    ``"corr"``/``"correlation"``, any scikit-learn metric, or ``"precomputed"`` for a given
    square similarity, dense or CSR) and ``n_neighbors`` (a sparse k-NN similarity) as
    apricot's."""

    _square = True

    def __init__(
        self,
        n_samples: Any,
        metric: str = "euclidean",
        initial_subset: Any = None,
        optimizer: Any = "two-stage",
        optimizer_kwds: dict | None = None,
        n_neighbors: Any = None,
        reservoir: Any = None,
        max_reservoir_size: int = 1000,
        n_jobs: int = 1,
        random_state: Any = None,
        verbose: bool = False,
    ) -> None:
        super().__init__(
            n_samples,
            initial_subset=initial_subset,
            optimizer=optimizer,
            optimizer_kwds=optimizer_kwds,
            reservoir=reservoir,
            max_reservoir_size=max_reservoir_size,
            n_jobs=n_jobs,
            random_state=random_state,
            verbose=verbose,
        )
        self.metric = metric.replace("corr", "correlation") if metric != "correlation" else metric
        self.n_neighbors = n_neighbors

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None, sample_cost: Any = None) -> "BaseSelection":
        if sp.issparse(X) and self.metric not in ("precomputed", "ignore"):
            raise ValueError("Must passed in a precomputed sparse similarity matrix or a dense feature matrix.")
        if self.metric == "precomputed" and X.shape[0] != X.shape[1]:
            raise ValueError("Precomputed similarity matrices must be square and symmetric.")
        return super().fit(X, y=y, sample_weight=sample_weight, sample_cost=sample_cost)

    def _matrix(self, X: Any) -> Any:
        return _similarity(X, self.metric, self.n_neighbors)


class FacilityLocationSelection(BaseGraphSelection):
    """apricot's ``FacilityLocationSelection`` over :class:`batchsel.FacilityLocation`."""

    def __init__(
        self,
        n_samples: Any,
        metric: str = "euclidean",
        initial_subset: Any = None,
        optimizer: Any = "lazy",
        optimizer_kwds: dict | None = None,
        n_neighbors: Any = None,
        reservoir: Any = None,
        max_reservoir_size: int = 1000,
        n_jobs: int = 1,
        random_state: Any = None,
        verbose: bool = False,
    ) -> None:
        super().__init__(
            n_samples, metric, initial_subset, optimizer, optimizer_kwds, n_neighbors, reservoir,
            max_reservoir_size, n_jobs, random_state, verbose,
        )  # fmt: skip

    def _make(self, matrix: Any) -> SetFunction:
        return FacilityLocation(matrix)

    def _streamer(self) -> Any:
        from batchsel.submodular.streaming import SieveStreaming

        metric = self.metric
        if metric not in ("euclidean", "cosine"):
            raise NotImplementedError(f"partial_fit streams facility location for euclidean and cosine, not {metric!r}")
        reference = None if self.reservoir is None else np.asarray(self.reservoir, dtype=np.float32)
        return SieveStreaming(
            "facility-location",
            int(self.n_samples),
            epsilon=self._epsilon(),
            metric=metric,
            reference=reference,
            reference_size=int(self.max_reservoir_size),
            refine=False,
        )


class GraphCutSelection(BaseGraphSelection):
    """apricot's ``GraphCutSelection`` (``alpha``) over :class:`batchsel.GraphCut`."""

    def __init__(
        self,
        n_samples: Any = 10,
        metric: str = "euclidean",
        alpha: float = 1,
        initial_subset: Any = None,
        optimizer: Any = "naive",
        optimizer_kwds: dict | None = None,
        n_neighbors: Any = None,
        reservoir: Any = None,
        max_reservoir_size: int = 1000,
        n_jobs: int = 1,
        random_state: Any = None,
        verbose: bool = False,
    ) -> None:
        self.alpha = alpha
        super().__init__(
            n_samples, metric, initial_subset, optimizer, optimizer_kwds, n_neighbors, reservoir,
            max_reservoir_size, n_jobs, random_state, verbose,
        )  # fmt: skip

    def _make(self, matrix: Any) -> SetFunction:
        return GraphCut(matrix, lam=self.alpha)


class SumRedundancySelection(BaseGraphSelection):
    """apricot's ``SumRedundancySelection`` over :class:`batchsel.SumRedundancy`."""

    def __init__(
        self,
        n_samples: Any = 10,
        metric: str = "euclidean",
        initial_subset: Any = None,
        optimizer: Any = "two-stage",
        n_neighbors: Any = None,
        reservoir: Any = None,
        max_reservoir_size: int = 1000,
        n_jobs: int = 1,
        random_state: Any = None,
        optimizer_kwds: dict | None = None,
        verbose: bool = False,
    ) -> None:
        super().__init__(
            n_samples, metric, initial_subset, optimizer, optimizer_kwds, n_neighbors, reservoir,
            max_reservoir_size, n_jobs, random_state, verbose,
        )  # fmt: skip

    def _make(self, matrix: Any) -> SetFunction:
        return SumRedundancy(matrix)


class SaturatedCoverageSelection(BaseGraphSelection):
    """apricot's ``SaturatedCoverageSelection`` (``alpha``) over
    :class:`batchsel.SaturatedCoverage`."""

    def __init__(
        self,
        n_samples: Any = 10,
        metric: str = "euclidean",
        alpha: float = 0.1,
        initial_subset: Any = None,
        optimizer: Any = "two-stage",
        n_neighbors: Any = None,
        n_jobs: int = 1,
        random_state: Any = None,
        reservoir: Any = None,
        max_reservoir_size: Any = None,
        optimizer_kwds: dict | None = None,
        verbose: bool = False,
    ) -> None:
        self.alpha = alpha
        super().__init__(
            n_samples, metric, initial_subset, optimizer, optimizer_kwds, n_neighbors, reservoir,
            1000 if max_reservoir_size is None else max_reservoir_size, n_jobs, random_state, verbose,
        )  # fmt: skip

    def _make(self, matrix: Any) -> SetFunction:
        return SaturatedCoverage(matrix, alpha=self.alpha)


class FeatureBasedSelection(BaseSelection):
    """apricot's ``FeatureBasedSelection`` (``concave_func``: ``"sqrt"``, ``"log"``,
    ``"sigmoid"``, ``"inverse"``, ``"min"`` or a callable) over :class:`batchsel.FeatureBased`."""

    def __init__(
        self,
        n_samples: Any,
        concave_func: Any = "sqrt",
        initial_subset: Any = None,
        optimizer: Any = "two-stage",
        optimizer_kwds: dict | None = None,
        reservoir: Any = None,
        max_reservoir_size: int = 1000,
        n_jobs: int = 1,
        random_state: Any = None,
        verbose: bool = False,
    ) -> None:
        self.concave_func_name = concave_func
        self.concave_func = concave_func
        super().__init__(
            n_samples, initial_subset, optimizer, optimizer_kwds, reservoir, max_reservoir_size, n_jobs,
            random_state, verbose,
        )  # fmt: skip

    def _make(self, matrix: Any) -> SetFunction:
        return FeatureBased(matrix, self.concave_func)

    def _streamer(self) -> Any:
        from batchsel.submodular.streaming import SieveStreaming

        return SieveStreaming(
            "feature-based", int(self.n_samples), epsilon=self._epsilon(), concave=self.concave_func, refine=False
        )


class MaxCoverageSelection(BaseSelection):
    """apricot's ``MaxCoverageSelection`` (``threshold``) over :class:`batchsel.MaxCoverage`."""

    def __init__(
        self,
        n_samples: Any,
        threshold: float = 1.0,
        initial_subset: Any = None,
        optimizer: Any = "two-stage",
        optimizer_kwds: dict | None = None,
        n_jobs: int = 1,
        random_state: Any = None,
        verbose: bool = False,
    ) -> None:
        self.threshold = threshold
        super().__init__(
            n_samples, initial_subset, optimizer, optimizer_kwds, n_jobs=n_jobs, random_state=random_state,
            verbose=verbose,
        )  # fmt: skip

    def _make(self, matrix: Any) -> SetFunction:
        return MaxCoverage(matrix, threshold=self.threshold)


class MixtureSelection(BaseSelection):
    """apricot's ``MixtureSelection``: ``sum_i weights[i] * functions[i]`` over
    :class:`batchsel.Mixture`; ``functions`` are selections of this module. With a
    ``metric`` the parts share that similarity (apricot sets them to ``"precomputed"``);
    ``weights`` may be a list."""

    def __init__(
        self,
        n_samples: Any,
        functions: list,
        weights: Any = None,
        metric: str = "ignore",
        initial_subset: Any = None,
        optimizer: Any = "two-stage",
        optimizer_kwds: dict | None = None,
        n_neighbors: Any = None,
        reservoir: Any = None,
        max_reservoir_size: int = 1000,
        n_jobs: int = 1,
        random_state: Any = None,
        verbose: bool = False,
    ) -> None:
        if len(functions) < 2:
            raise ValueError("Must mix at least two functions.")
        self.m = len(functions)
        self.functions = functions
        self.weights = np.ones(self.m) if weights is None else np.asarray(weights, dtype=np.float64)
        super().__init__(
            n_samples, initial_subset, optimizer, optimizer_kwds, reservoir, max_reservoir_size, n_jobs,
            random_state, verbose,
        )  # fmt: skip
        self.metric = metric.replace("corr", "correlation") if metric != "correlation" else metric
        self.n_neighbors = n_neighbors
        self._square = self.metric != "ignore"
        for function in self.functions:
            function.initial_subset = self.initial_subset
            function.metric = "precomputed"

    def _matrix(self, X: Any) -> Any:
        return _similarity(X, self.metric, self.n_neighbors)

    def _make(self, matrix: Any) -> SetFunction:
        return Mixture([g._make(matrix) for g in self.functions], weights=self.weights)


class CustomSelection(BaseSelection):
    """apricot's ``CustomSelection``: ``function(rows)`` of the chosen rows, over
    :class:`batchsel.Custom` (``function_kwds`` passed to it)."""

    def __init__(
        self,
        n_samples: Any,
        function: Callable,
        initial_subset: Any = None,
        optimizer: Any = "two-stage",
        optimizer_kwds: dict | None = None,
        function_kwds: dict | None = None,
        n_jobs: int = 1,
        random_state: Any = None,
        verbose: bool = False,
    ) -> None:
        if not callable(function):
            raise ValueError("Must pass in a callable function.")
        self.function = function
        self.function_kwds = {} if function_kwds is None else function_kwds
        super().__init__(
            n_samples, initial_subset, optimizer, optimizer_kwds, n_jobs=n_jobs, random_state=random_state,
            verbose=verbose,
        )  # fmt: skip

    def _make(self, matrix: Any) -> SetFunction:
        dense = matrix.toarray() if sp.issparse(matrix) else matrix
        return Custom(dense, self.function, **self.function_kwds)


class CustomGraphSelection(BaseGraphSelection):
    """apricot's ``CustomGraphSelection``: ``function(rows)`` of the chosen rows of the
    similarity (``metric``), over :class:`batchsel.Custom`."""

    def __init__(
        self,
        n_samples: Any,
        function: Callable,
        metric: str = "euclidean",
        initial_subset: Any = None,
        optimizer: Any = "two-stage",
        optimizer_kwds: dict | None = None,
        function_kwds: dict | None = None,
        n_jobs: int = 1,
        random_state: Any = None,
        verbose: bool = False,
    ) -> None:
        if not callable(function):
            raise ValueError("Must pass in a callable function.")
        self.function = function
        self.function_kwds = {} if function_kwds is None else function_kwds
        super().__init__(
            n_samples, metric, initial_subset, optimizer, optimizer_kwds, n_jobs=n_jobs, random_state=random_state,
            verbose=verbose,
        )  # fmt: skip

    def _make(self, matrix: Any) -> SetFunction:
        dense = matrix.toarray() if sp.issparse(matrix) else matrix
        return Custom(dense, self.function, **self.function_kwds)
