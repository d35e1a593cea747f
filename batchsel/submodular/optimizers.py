"""Greedy maximization of set functions: naive, lazy, stochastic, lazier-than-lazy and
GreeDi (simulated over ``parts`` in one process, or over the ranks of a communicator);
:func:`greedi_facility_location`, GreeDi for facility location over embeddings that builds
only each rank's part. The greedy loops themselves (:class:`GreedyRun`, the state of one run,
with :func:`naive_greedy`, :func:`lazy_greedy`, :func:`approximate_lazy_greedy`,
:func:`bidirectional_greedy`) are public for adapters that drive them (:mod:`batchsel.apricot`).

Every optimizer picks, at each step, the item of largest marginal gain (per unit cost when
``costs`` are given) among those it looks at, ties broken to the smallest index, so runs
are reproducible and ``"lazy"`` returns exactly what ``"naive"`` returns.
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from batchsel.core.checks import check_indices, check_int, check_number, check_seed, load_embeddings, tensor_to_numpy
from batchsel.core.communicator import Communicator, check_ranks_agree

# lazy greedy's indexed heap (shared tie rule: batchsel.core.heap.before)
from batchsel.core.heap import heapify as _heapify
from batchsel.core.heap import lazy_drop as _lazy_drop
from batchsel.core.heap import lazy_pop as _lazy_pop
from batchsel.core.heap import lazy_push as _lazy_push
from batchsel.submodular.functions.base import SetFunction
from batchsel.submodular.functions.facility_location import METRICS, CoverRows, FacilityLocation, rows_similarity

logger = logging.getLogger(__name__)

OPTIMIZERS = (
    "naive",
    "lazy",
    "two-stage",
    "approximate-lazy",
    "stochastic",
    "lazier-than-lazy",
    "sample",
    "modular",
    "bidirectional",
    "greedi",
)
# Optimizers that take no knapsack costs: bidirectional greedy (double greedy) decides every
# item once, for or against, and has no notion of a budget to spend.
_NO_COSTS = ("bidirectional",)
# GreeDi over a communicator with the whole function on every rank: each rank's lazy greedy
# costs about a whole lazy greedy (its cost grows with k and the ground set, hardly with the
# candidates), then the merge runs another; measured 0.46-1.05x the speed of one process
# (benchmarks/bench_greedi.py). Said once per process.
_GREEDI_WARNED = False

# Lazy greedy re-evaluates the stale top of its queue in batches (one vectorized gains()
# call each): the first batch of a pick is about as large as the recent picks needed (at
# least _LAZY_FIRST), each next batch of the same pick twice as large, up to _LAZY_MAX.
_LAZY_FIRST = 4
_LAZY_MAX = 1024
# Gains per gains() call when every candidate is evaluated (bounds temporaries).
_CHUNK = 1 << 16
# A stale bound u is trusted to be >= the gain only up to this relative slack: functions
# whose floating-point gains are not exactly monotone get re-evaluated instead.
_SLACK = 1e-12


@dataclass
class Selection:
    """The result of :func:`maximize`.

    Attributes
    ----------
    indices:
        Selected items (int64), in selection order; the ``initial`` items are not listed.
    gains:
        Marginal gain (float64) of each selected item when it was added.
    value:
        ``f(initial + indices)``.
    optimizer:
        The optimizer that produced it.
    evaluations:
        Number of marginal gains computed (the cost measure of greedy algorithms).
    extra:
        Optimizer details (GreeDi: ``parts``, ``merged_value``, ``part_values``).
    """

    indices: np.ndarray
    gains: np.ndarray
    value: float
    optimizer: str = "lazy"
    evaluations: int = 0
    extra: dict = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return int(self.indices.shape[0])


def maximize(
    f: SetFunction,
    k: int | float,
    optimizer: str = "lazy",
    *,
    epsilon: float = 0.01,
    seed: int = 0,
    costs: Any = None,
    initial: Any = None,
    exclude: Any = None,
    candidates: Any = None,
    parts: int | None = None,
    comm: Communicator | None = None,
    beta: float = 0.9,
    sample_fraction: float = 0.9,
    progress: bool = False,
) -> Selection:
    """Greedily maximize the set function ``f`` under a cardinality (or knapsack) budget.

    ``f`` is reset, the ``initial`` items are added, then items are added one at a time;
    ``f`` is left holding the final set (``f.selected == [*initial, *indices]``).

    Parameters
    ----------
    f:
        A :class:`~batchsel.submodular.functions.SetFunction`.
    k:
        Number of items to pick (``1 <= k <= n``); with ``costs``, the budget: picks are
        made by gain per unit cost while the total cost stays ``<= k``.
    optimizer:
        ``"naive"`` (every gain at every step), ``"lazy"`` (priority queue of stale
        gains, which bound the current ones by submodularity; same result as naive),
        ``"stochastic"`` (each step looks at ``ceil(n / k * ln(1 / epsilon))`` random
        remaining items; ``E[f] >= (1 - 1/e - epsilon) OPT``), ``"lazier-than-lazy"``
        (stochastic greedy with lazy evaluation inside each sample: the same picks as
        ``"stochastic"`` with the same seed, fewer evaluations), ``"greedi"`` (the items are
        split into ``parts`` random parts, or over the ranks of ``comm``; greedy picks k
        in each part, then greedy on the union; the better of that and the best part wins).
        Every rank holds the whole ``f``, so GreeDi over ranks is slower than ``"lazy"`` in
        one process (logged as a warning); :func:`greedi_facility_location` builds only each
        rank's part of a facility location and is the one that pays.
        The other names follow apricot-select 0.6.1's optimizers: ``"two-stage"``
        (apricot's default: naive greedy for the first picks, then lazy; its picks are
        naive greedy's, so here it runs ``"lazy"``, which returns them exactly),
        ``"approximate-lazy"`` (lazy greedy that accepts the top of its queue once its
        re-evaluated gain is at least ``beta`` times its stale bound,
        ``f >= (1 - e^-beta) OPT`` for monotone f; fewer gain evaluations than ``"lazy"``
        but one at a time, as apricot's, so slower), ``"sample"`` (a random
        ``sample_fraction`` of the items, then lazy greedy on them), ``"modular"`` (the k
        items of largest singleton gain, one pass: a modular approximation) and
        ``"bidirectional"`` (Buchbinder et al.'s randomized double greedy for
        non-monotone f: the items in random order, each kept with probability
        ``a / (a + b)``, a the gain of adding it to the kept set, b the gain of removing it
        from the not-yet-rejected set, both clipped at 0; ``E[f] >= OPT / 2`` when ``k``
        does not bind; it stops at k kept items and may keep fewer; no ``costs``; it
        evaluates f from scratch once per item, so it is for small ground sets).
    beta:
        ``"approximate-lazy"``: accept a re-evaluated gain ``>= beta`` times its bound
        (``0 < beta <= 1``; 1 is lazy greedy; apricot's default 0.9).
    sample_fraction:
        ``"sample"``: fraction of the items kept (``0 < sample_fraction <= 1``, at least
        k items; apricot's ``epsilon``, default 0.9).
    epsilon, seed:
        Sample size and seed of the stochastic optimizers and of GreeDi's split; ``seed``
        also seeds ``"sample"`` and ``"bidirectional"`` (a local generator each run).
    costs:
        Positive cost of every item (length n).
    initial:
        Items in the set before the first pick: indices, or a 2-D array of rows (examples
        given by their features, not items of the ground set) for the feature-based
        functions (:class:`~batchsel.submodular.functions.FeatureBased`,
        :class:`~batchsel.submodular.functions.MaxCoverage`, a :class:`~batchsel.submodular.functions.Mixture` of
        them), as apricot's ``initial_subset`` accepts.
    exclude:
        Items that may not be picked.
    candidates:
        The only items that may be picked (``f`` is still over its whole ground set).
    parts:
        Number of parts for ``"greedi"`` in one process (default 4).
    comm:
        A :class:`~batchsel.core.communicator.Communicator` (``rank``, ``size`` and ``allgather``
        are used) for ``"greedi"`` across processes: rank r runs greedy on part r and every
        rank returns the same result.
        All ranks must call with the same arguments.
    progress:
        A tqdm progress bar over the picks.

    Example
    -------
    >>> import numpy as np
    >>> from batchsel import FacilityLocation, maximize
    >>> x = np.random.default_rng(0).normal(size=(300, 16)).astype(np.float32)
    >>> f = FacilityLocation.from_embeddings(x)
    >>> lazy = maximize(f, 10)
    >>> naive = maximize(f, 10, "naive")
    >>> bool(np.array_equal(lazy.indices, naive.indices)), lazy.evaluations < naive.evaluations
    (True, True)
    >>> stochastic = maximize(f, 10, "stochastic", seed=1)
    >>> bool(stochastic.value >= 0.9 * lazy.value)
    True
    """

    if not isinstance(f, SetFunction):
        raise TypeError(f"f must be a SetFunction, got {type(f).__name__}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
    n = f.n
    seed = check_seed(seed)
    if not (isinstance(epsilon, (int, float)) and 0 < epsilon < 1):
        raise ValueError(f"epsilon must be in (0, 1), got {epsilon!r}")
    if check_number(beta, "beta", 0.0, 1.0) == 0:
        raise ValueError(f"beta must be in (0, 1], got {beta!r}")
    if check_number(sample_fraction, "sample_fraction", 0.0, 1.0) == 0:
        raise ValueError(f"sample_fraction must be in (0, 1], got {sample_fraction!r}")
    if costs is not None and optimizer in _NO_COSTS:
        raise ValueError(f"optimizer={optimizer!r} takes no costs (it has no budget to spend)")

    cost = None
    if costs is not None:
        cost = np.asarray(costs, dtype=np.float64)
        if cost.shape != (n,):
            raise ValueError(f"costs must have one value per item (shape ({n},)), got shape {cost.shape}")
        if not np.isfinite(cost).all() or (cost <= 0).any():
            bad = cost[~(np.isfinite(cost) & (cost > 0))][0]
            raise ValueError(f"costs must be finite and > 0, found {bad}")
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, float, np.integer, np.floating)) or not k > 0:
            raise ValueError(f"k (the budget) must be a number > 0, got {k!r}")
        budget = float(k)
    else:
        budget = check_int(k, "k", minimum=1, maximum=n)

    initial, rows = _split_initial(initial, n)
    init = np.unique(check_indices(initial, n, "initial")) if initial is not None else np.empty(0, np.int64)
    allowed = np.zeros(n, dtype=bool)
    if candidates is None:
        allowed[:] = True
    else:
        allowed[check_indices(candidates, n, "candidates")] = True
    if exclude is not None:
        allowed[check_indices(exclude, n, "exclude")] = False
    allowed[init] = False
    pool = np.flatnonzero(allowed).astype(np.int64)
    if cost is None and budget > pool.size:
        raise ValueError(
            f"k={budget} but only {pool.size} items may be picked (n={n}, after candidates/exclude/initial)"
        )
    if pool.size == 0:
        raise ValueError("no item may be picked (candidates/exclude/initial leave none)")

    run = GreedyRun(f, init, cost, progress, rows)
    if optimizer == "greedi":
        global _GREEDI_WARNED
        if comm is not None and int(comm.size) > 1 and not _GREEDI_WARNED:
            _GREEDI_WARNED = True
            logger.warning(
                "optimizer='greedi' over %d ranks with the whole %s on every rank is slower than "
                "optimizer='lazy' in one process (each rank's greedy costs about a whole lazy "
                "greedy, then the merge runs another); for facility location over embeddings use "
                "greedi_facility_location, which builds only each rank's part",
                int(comm.size),
                type(f).__name__,
            )
        return _greedi(run, pool, budget, seed, parts, comm)
    if parts is not None or comm is not None:
        raise ValueError(f"parts and comm apply to optimizer='greedi', not {optimizer!r}")
    if optimizer == "naive":
        return run.finish(naive_greedy(run, pool, budget), "naive")
    if optimizer in ("lazy", "two-stage"):
        # apricot's two-stage runs naive greedy for its first picks, then lazy greedy: the
        # picks of naive greedy, which lazy greedy returns exactly (ties included)
        return run.finish(lazy_greedy(run, pool, budget), optimizer)
    if optimizer == "approximate-lazy":
        return run.finish(approximate_lazy_greedy(run, pool, budget, beta), optimizer)
    if optimizer == "modular":
        return run.finish(_modular(run, pool, budget), optimizer)
    rng = np.random.default_rng(seed)
    if optimizer == "sample":
        return run.finish(_sample(run, pool, budget, sample_fraction, rng), optimizer)
    if optimizer == "bidirectional":
        return run.finish(bidirectional_greedy(run, pool, budget, rng), optimizer)
    return run.finish(_stochastic(run, pool, budget, epsilon, rng, lazy=optimizer == "lazier-than-lazy"), optimizer)


# -- machinery ---------------------------------------------------------------------------
class GreedyRun:
    """The state of one greedy optimization, shared by :func:`maximize` and the greedy loops
    (:func:`naive_greedy`, :func:`lazy_greedy`, :func:`approximate_lazy_greedy`,
    :func:`bidirectional_greedy`): the function, its initial items, the costs, the count of
    gain evaluations and the gains of the picks (as ``f.add`` computed them).

    Constructing it resets ``f`` and adds the initial items (and rows) to it.

    Parameters
    ----------
    f : SetFunction
        The function to maximize; it holds the current set.
    init : numpy.ndarray
        Indices (int64) of the items in the set before the first pick.
    cost : numpy.ndarray or None
        Positive cost (float64) of every item (length ``f.n``): gains are then compared per
        unit cost and the budget is a total cost; None: unit costs, the budget a count.
    progress : bool
        Show a tqdm progress bar over the picks.
    rows : numpy.ndarray or None
        Rows (examples given by their features) in the set before the first pick, for the
        functions with ``add_rows``; None: none.

    Attributes
    ----------
    evaluations : int
        Marginal gains computed so far (:meth:`ratios` counts them).
    picked_gains : list of float
        Marginal gain of each item :meth:`take` added since the last :meth:`start`.

    Example
    -------
    >>> import numpy as np
    >>> from batchsel import FacilityLocation
    >>> x = np.random.default_rng(0).normal(size=(200, 8)).astype(np.float32)
    >>> run = GreedyRun(FacilityLocation.from_embeddings(x), np.empty(0, np.int64), None, False)
    >>> picks = lazy_greedy(run, np.arange(200), 5)
    >>> sel = run.finish(picks, "lazy")
    >>> len(sel), len(run.picked_gains)
    (5, 5)
    """

    def __init__(
        self, f: SetFunction, init: np.ndarray, cost: np.ndarray | None, progress: bool, rows: Any = None
    ) -> None:
        self.f, self.init, self.cost, self.progress, self.rows = f, init, cost, progress, rows
        self.evaluations = 0
        self.start()

    def start(self) -> None:
        """Reset ``f`` to the initial items (and rows) and forget the picks' gains; the count
        of evaluations goes on."""
        self.f.reset()
        for j in self.init:
            self.f.add(int(j))
        if self.rows is not None:
            self.f.add_rows(self.rows)
        self.picked_gains: list[float] = []

    def ratios(self, idx: np.ndarray) -> np.ndarray:
        """Marginal gains of the items ``idx`` on the current set, per unit cost when there are
        costs, computed in chunks and counted in :attr:`evaluations`.

        Parameters
        ----------
        idx : numpy.ndarray
            Item indices (int64).

        Returns
        -------
        numpy.ndarray
            One gain (ratio) per item of ``idx``.

        Raises
        ------
        ValueError
            If a gain is not finite.
        """
        self.evaluations += idx.size
        if idx.size <= _CHUNK:
            g = self.f.gains(idx)
        else:
            g = np.concatenate([self.f.gains(idx[s : s + _CHUNK]) for s in range(0, idx.size, _CHUNK)])
        if not np.isfinite(g).all():
            # NaN compares false with everything: lazy greedy's queue would never settle
            # (and grow without bound), the others would pick arbitrary items
            bad = int(np.flatnonzero(~np.isfinite(g))[0])
            raise ValueError(
                f"the gain of item {int(idx[bad])} is {g[bad]} (not finite): the similarity or "
                f"features of {type(self.f).__name__} overflowed or hold NaN; rescale the "
                f"embeddings (e.g. divide them by their standard deviation)"
            )
        return g if self.cost is None else g / self.cost[idx]

    def affordable(self, idx: np.ndarray, remaining: float) -> np.ndarray:
        """The items of ``idx`` whose cost is at most ``remaining`` (all of them without costs).

        Parameters
        ----------
        idx : numpy.ndarray
            Item indices (int64).
        remaining : float
            The budget left.

        Returns
        -------
        numpy.ndarray
            The affordable items, in the order of ``idx``.
        """
        return idx if self.cost is None else idx[self.cost[idx] <= remaining]

    def take(self, j: int) -> float:
        """Add item ``j`` to the set and its marginal gain to :attr:`picked_gains`.

        Parameters
        ----------
        j : int
            The item.

        Returns
        -------
        float
            The budget spent: its cost, or 1 without costs.
        """
        self.picked_gains.append(self.f.add(j))
        return 1.0 if self.cost is None else float(self.cost[j])

    def bar(self, total: float, desc: str) -> Any:
        """A tqdm progress bar over ``total`` budget, labelled ``desc`` (disabled unless
        ``progress``)."""
        return tqdm(total=total, desc=desc, disable=not self.progress, leave=False)

    def finish(self, picks: list[int], name: str) -> Selection:
        """The result: ``picks`` with :attr:`picked_gains`, the function's value and the
        evaluations.

        Parameters
        ----------
        picks : list of int
            The picked items, in pick order (the gains of exactly these in :attr:`picked_gains`).
        name : str
            The optimizer's name (``Selection.optimizer``).

        Returns
        -------
        Selection
        """
        return Selection(
            indices=np.asarray(picks, dtype=np.int64),
            gains=np.asarray(self.picked_gains, dtype=np.float64),
            value=float(self.f.value),
            optimizer=name,
            evaluations=self.evaluations,
        )


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
    """
    picks: list[int] = []
    remaining = budget
    live = pool.copy()
    bar = run.bar(budget, "naive greedy")
    while live.size:
        live = run.affordable(live, remaining)
        if live.size == 0:
            break
        r = run.ratios(live)
        best = int(np.argmax(r))  # first maximum: smallest index, live being sorted
        j = int(live[best])
        remaining -= run.take(j)
        picks.append(j)
        live = np.delete(live, best)
        bar.update(1 if run.cost is None else run.cost[j])
        if run.cost is None and len(picks) == budget:
            break
    bar.close()
    return picks


def _inflate(u: float) -> float:
    return u + _SLACK * abs(u)


def lazy_greedy(run: GreedyRun, pool: np.ndarray, budget: float) -> list[int]:
    """Lazy greedy (``maximize``'s ``"lazy"``): a priority queue of stale gains, which bound
    the current ones by submodularity, re-evaluated in batches; the picks of
    :func:`naive_greedy`, ties included, with fewer evaluations.

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
    out = np.empty(_LAZY_MAX, dtype=np.int64)
    out_bound = np.empty(_LAZY_MAX)
    # Re-evaluations one-at-a-time lazy greedy would have needed in recent picks (stale
    # bounds >= the winner's gain): sets the size of a pick's first batch.
    typical = float(_LAZY_FIRST)
    step = 0
    bar = run.bar(budget, "lazy greedy")
    while size[0] and (run.cost is not None or len(picks) < budget):
        batch = int(min(_LAZY_MAX, max(_LAZY_FIRST, typical)))
        bounds: list[np.ndarray] = []
        chosen = -1
        while True:
            code, count = _lazy_pop(heap, pos, size, step, tracked, pending, batch, _SLACK, out, out_bound)
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
            batch = min(2 * batch, _LAZY_MAX)
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


def _stochastic(
    run: GreedyRun, pool: np.ndarray, budget: float, epsilon: float, rng: np.random.Generator, lazy: bool
) -> list[int]:
    picks: list[int] = []
    remaining = budget
    live = pool.copy()
    steps = budget if run.cost is None else max(1.0, budget / float(np.median(run.cost[pool])))
    sample_size = max(1, math.ceil(pool.size / steps * math.log(1 / epsilon)))
    bounds = np.full(run.f.n, np.inf) if lazy else None
    bar = run.bar(budget, "stochastic greedy")
    while live.size:
        live = run.affordable(live, remaining)
        if live.size == 0:
            break
        pos = np.sort(rng.choice(live.size, size=min(sample_size, live.size), replace=False))
        sample = live[pos]
        if lazy:
            best_pos, _ = _lazy_in_sample(run, sample, bounds)
        else:
            best_pos = int(np.argmax(run.ratios(sample)))
        j = int(sample[best_pos])
        remaining -= run.take(j)
        picks.append(j)
        live = np.delete(live, pos[best_pos])
        bar.update(1 if run.cost is None else run.cost[j])
        if run.cost is None and len(picks) == budget:
            break
    bar.close()
    return picks


def _lazy_in_sample(run: GreedyRun, sample: np.ndarray, bounds: np.ndarray) -> tuple[int, float]:
    """Best (gain, smallest index) of a sorted sample, evaluating in the order of the
    stale bounds (``bounds``, updated in place) until no stale bound can beat the best."""
    order = np.lexsort((sample, -bounds[sample]))
    best_pos, best_r = -1, -np.inf
    start, size = 0, _LAZY_FIRST
    while start < order.size:
        u = bounds[sample[order[start]]]
        if best_pos >= 0 and (
            _inflate(u) < best_r or (_inflate(u) == best_r and sample[order[start]] > sample[best_pos])
        ):
            break
        chunk = order[start : start + size]
        r = run.ratios(sample[chunk])
        bounds[sample[chunk]] = r
        for p, v in zip(chunk.tolist(), r.tolist()):
            if v > best_r or (v == best_r and sample[p] < sample[best_pos]):
                best_pos, best_r = p, v
        start += chunk.size
        size = min(2 * size, _LAZY_MAX)
    return best_pos, best_r


# -- apricot's other optimizers -------------------------------------------------------------
def _split_initial(initial: Any, n: int) -> tuple[Any, Any]:
    """``initial`` as (indices or None, rows or None): a 2-D array holds rows (examples given
    by their features), a boolean mask of length n selects indices, as in apricot."""
    if initial is None:
        return None, None
    initial = tensor_to_numpy(initial)
    if isinstance(initial, (list, tuple, np.ndarray)):
        arr = np.asarray(initial)
        if arr.ndim == 2:
            return None, arr
        if arr.ndim == 1 and arr.dtype == bool:
            if arr.shape[0] != n:
                raise ValueError(f"initial as a boolean mask must have length n={n}, got {arr.shape[0]}")
            return np.flatnonzero(arr), None
    return initial, None


def approximate_lazy_greedy(run: GreedyRun, pool: np.ndarray, budget: float, beta: float) -> list[int]:
    """Approximate lazy greedy (``maximize``'s ``"approximate-lazy"``, apricot's
    ApproximateLazyGreedy): pop the top bound (largest, then smallest index), re-evaluate it
    and take it when the gain is within a factor beta of the bound (a gain evaluated at the
    current step is exact and taken); otherwise push it back.

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
    beta : float
        Accept a re-evaluated gain ``>= beta`` times its bound (``0 < beta <= 1``).

    Returns
    -------
    list of int
        The picks, in pick order.
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


def _modular(run: GreedyRun, pool: np.ndarray, budget: float) -> list[int]:
    """apricot's ModularGreedy: rank the items once by their gain (per unit cost) on the
    initial set, largest first, ties to the smallest index, and add them in that order
    (skipping the unaffordable ones); the reported gains are the true marginal gains."""
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


def _sample(run: GreedyRun, pool: np.ndarray, budget: float, fraction: float, rng: np.random.Generator) -> list[int]:
    """apricot's SampleGreedy: lazy greedy on a uniform random ``fraction`` of the items
    (at least k of them, so that k picks remain possible)."""
    size = max(1, int(pool.size * fraction))
    if run.cost is None:
        size = max(size, int(budget))
    kept = np.sort(rng.choice(pool, size=min(size, pool.size), replace=False))
    return lazy_greedy(run, kept, budget)


def bidirectional_greedy(run: GreedyRun, pool: np.ndarray, budget: float, rng: np.random.Generator) -> list[int]:
    """Randomized double greedy (``maximize``'s ``"bidirectional"``; Buchbinder, Feldman,
    Naor, Schwartz 2012; apricot's BidirectionalGreedy): X starts at the initial set, Y at X
    plus every candidate; each candidate i, in random order, joins X with probability
    a / (a + b) (1 when both are 0), a = max(f(X + i) - f(X), 0), b = max(f(Y - i) - f(Y), 0),
    and leaves Y otherwise. X = Y after the pass, E[f(X)] >= OPT / 2; the run stops early once
    X holds ``budget`` items.

    Parameters
    ----------
    run : GreedyRun
        The run, without costs and without rows: f is evaluated from scratch for Y.
    pool : numpy.ndarray
        Sorted indices (int64) of the items that may be picked.
    budget : float
        The most items kept (a count).
    rng : numpy.random.Generator
        The order of the items and the coin flips.

    Returns
    -------
    list of int
        The kept items, in the order they were decided.

    Raises
    ------
    ValueError
        If ``run`` has rows.
    """
    f = run.f
    if run.rows is not None:
        raise ValueError(
            "optimizer='bidirectional' evaluates f from scratch, which rows (a 2-D initial) "
            "are not part of: give initial as indices"
        )
    picks: list[int] = []
    in_y = np.zeros(f.n, dtype=bool)
    in_y[pool] = True
    in_y[run.init] = True
    f_y = f.evaluate(np.flatnonzero(in_y))  # f's state holds X; Y is evaluated from scratch
    bar = run.bar(budget, "bidirectional greedy")
    for i in rng.permutation(pool).tolist():
        a = max(float(run.ratios(np.array([i], dtype=np.int64))[0]), 0.0)
        in_y[i] = False
        f_without = f.evaluate(np.flatnonzero(in_y))
        run.evaluations += 1
        b = max(f_without - f_y, 0.0)
        p = 1.0 if a + b == 0 else a / (a + b)
        if rng.random() < p:
            in_y[i] = True
            run.take(i)
            picks.append(i)
            bar.update(1)
            if len(picks) == budget:
                break
        else:
            f_y = f_without
    bar.close()
    return picks


def _greedi_splits(pool: np.ndarray, seed: int, parts: int | None, comm: Communicator | None) -> list[np.ndarray]:
    """GreeDi's random split of ``pool`` into one sorted part per rank of ``comm`` (or
    ``parts``, default 4), the same on every rank."""
    if comm is not None:
        if parts is not None and parts != comm.size:
            raise ValueError(f"parts={parts} but the communicator has {comm.size} ranks")
        m = int(comm.size)
    else:
        m = check_int(parts if parts is not None else 4, "parts", minimum=1)
    perm = np.random.default_rng(seed).permutation(pool)
    return [np.sort(s) for s in np.array_split(perm, m)]


def _greedi(
    run: GreedyRun, pool: np.ndarray, budget: float, seed: int, parts: int | None, comm: Communicator | None
) -> Selection:
    splits = _greedi_splits(pool, seed, parts, comm)
    m = len(splits)
    per_part = budget if run.cost is not None else None

    def local(part: np.ndarray) -> tuple[list[int], float]:
        run.start()
        if part.size == 0:
            return [], -np.inf
        b = per_part if per_part is not None else min(int(budget), part.size)
        picks = lazy_greedy(run, part, b)
        return picks, float(run.f.value)

    if comm is None:
        results = [local(p) for p in splits]
    else:
        check_ranks_agree(
            comm, "the set function", function=type(run.f).__name__, n=int(run.f.n), pool=_digest(pool), budget=budget
        )
        results = comm.allgather(local(splits[int(comm.rank)]))
    union = np.unique(np.concatenate([np.asarray(p, dtype=np.int64) for p, _ in results]))
    run.start()
    b = budget if run.cost is not None else min(int(budget), union.size)
    merged = lazy_greedy(run, union, b)
    merged_value = float(run.f.value)
    best_local = max(range(m), key=lambda i: (results[i][1], -i))
    picks = merged
    if results[best_local][1] > merged_value:
        picks = results[best_local][0]
        run.start()
        for j in picks:
            run.take(j)
    sel = run.finish(picks, "greedi")
    sel.extra.update(parts=m, merged_value=merged_value, part_values=[v for _, v in results])
    if comm is not None:  # the merge ran on every rank's own function: equal only if the functions are
        _check_same_selection(comm, sel)
    return sel


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).view(np.uint8)).hexdigest()[:16]  # type: ignore[arg-type]


def _check_same_selection(comm: Communicator, sel: Selection) -> None:
    """Collective: ranks whose functions differ in content (same n, other data) would return
    different selections, or the same picks with different values; they raise instead.
    Values are compared to a relative 1e-6: ranks on different CPUs may round differently."""
    every = comm.allgather((_digest(sel.indices.astype(np.int64)), float(sel.value)))
    if all(d == every[0][0] and math.isclose(v, every[0][1], rel_tol=1e-6) for d, v in every):
        return
    held = "; ".join(f"rank {r}: picks {d}, value {v:.9g}" for r, (d, v) in enumerate(every))
    raise RuntimeError(
        f"the ranks disagree on the GreeDi result ({held}): their set functions differ "
        f"(built from different data?); every rank must build the same function"
    )


def greedi_facility_location(
    embeddings: Any,
    k: int,
    *,
    metric: str = "euclidean",
    comm: Communicator | None = None,
    parts: int | None = None,
    seed: int = 0,
) -> Selection:
    """GreeDi for facility location over embeddings, with each part's function on its part
    only (the decomposable GreeDi of Mirzasoleiman et al., 2013): no rank builds the
    ``N x N`` similarity.

    The N points are split into ``m`` random parts (the ranks of ``comm``, or ``parts``
    in one process, default 4); each part runs lazy greedy for k picks on the facility
    location of its own points (``FacilityLocation.from_embeddings`` of the part: an
    ``(N/m)^2`` similarity); the ``m * k`` picks are gathered; lazy greedy picks k of them
    on the facility location over all N points, which needs only their ``m k x N``
    similarity rows. The better of that and the best part's picks (on the same function)
    is returned, identical on every rank. Work per rank: about ``1 / m^2`` of the
    similarity plus ``m k N d`` for the merge, against ``N^2 d`` for one process.

    ``value`` is the facility location of the picks with the floor (for euclidean) at the
    smallest similarity among the gathered rows, not the ``N x N`` matrix's (unknown
    without it): it ranks selections like ``FacilityLocation.from_embeddings``' value, and
    differs from it by a constant; cosine has floor 0 in both. ``extra`` holds ``parts``,
    ``merged_value`` and ``part_values``.

    >>> import numpy as np
    >>> x = np.random.default_rng(0).normal(size=(400, 8)).astype(np.float32)
    >>> sel = greedi_facility_location(x, 10, parts=2)
    >>> len(sel), sel.optimizer
    (10, 'greedi')
    """
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    given_dtype = str(getattr(embeddings, "dtype", ""))
    x = load_embeddings(embeddings)
    n = x.shape[0]
    k = check_int(k, "k", minimum=1, maximum=n)
    seed = check_seed(seed)
    if comm is not None:
        check_ranks_agree(comm, "the embeddings", shape=x.shape, dtype=given_dtype or str(x.dtype), k=k, seed=seed)
    splits = _greedi_splits(np.arange(n), seed, parts, comm)
    m = len(splits)

    def local(part: np.ndarray) -> np.ndarray:
        if part.size == 0:
            return np.empty(0, np.int64)
        f = FacilityLocation.from_embeddings(x[part], metric=metric, dense_max=part.size)
        return part[maximize(f, min(k, part.size)).indices].astype(np.int64)

    picks = [local(p) for p in splits] if comm is None else comm.allgather(local(splits[int(comm.rank)]))
    union = np.unique(np.concatenate(picks))
    sim = rows_similarity(x, union, metric)
    g = CoverRows(sim, float(sim.min()) if metric == "euclidean" else 0.0)
    merged = maximize(g, min(k, union.size))
    # the parts' own picks on the same function (GreeDi keeps the best of all)
    part_values = [g.evaluate(np.searchsorted(union, p)) if p.size else -np.inf for p in picks]
    best = max(range(m), key=lambda i: (part_values[i], -i))
    if part_values[best] > merged.value:
        chosen = np.searchsorted(union, picks[best])
        g.reset()
        gains = [g.add(int(j)) for j in chosen]
        sel = Selection(
            indices=union[chosen],
            gains=np.asarray(gains),
            value=float(g.value),
            optimizer="greedi",
            evaluations=merged.evaluations,
        )
    else:
        sel = Selection(
            indices=union[merged.indices],
            gains=merged.gains,
            value=merged.value,
            optimizer="greedi",
            evaluations=merged.evaluations,
        )
    sel.extra.update(parts=m, merged_value=merged.value, part_values=part_values)
    if comm is not None:
        _check_same_selection(comm, sel)
    return sel


__all__ = [
    "Selection",
    "maximize",
    "greedi_facility_location",
    "OPTIMIZERS",
    "GreedyRun",
    "naive_greedy",
    "lazy_greedy",
    "approximate_lazy_greedy",
    "bidirectional_greedy",
]
