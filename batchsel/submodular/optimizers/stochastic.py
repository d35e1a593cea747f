"""The stochastic family: :func:`stochastic_greedy` (each step looks at a random sample of
the remaining items; with ``lazy=True``, lazier-than-lazy greedy, the same picks with lazy
evaluation inside each sample) and :func:`sample_greedy` (apricot's: lazy greedy on a
random part of the items), with :func:`run_sampled`, which runs one of them by
:func:`~batchsel.submodular.optimizers.maximize`'s name. Each draws from the generator it
is given, so a seed gives the same picks. As the greedy loops
(:mod:`~batchsel.submodular.optimizers.greedy`), each takes ``run``, ``pool`` and
``budget`` as :func:`~batchsel.submodular.optimizers.greedy.naive_greedy` documents them
and returns its picks (a list of int, in pick order).
"""

from __future__ import annotations

import math

import numpy as np

from batchsel.submodular.optimizers.greedy import LAZY_FIRST, LAZY_MAX, inflate_bound, lazy_greedy, take_chosen
from batchsel.submodular.optimizers.run import GreedyRun

# The names of maximize's optimizers that this family runs (see run_sampled).
SAMPLED = ("stochastic", "lazier-than-lazy", "sample")


def run_sampled(
    name: str,
    run: GreedyRun,
    pool: np.ndarray,
    budget: float,
    rng: np.random.Generator,
    epsilon: float = 0.01,
    sample_fraction: float = 0.9,
) -> list[int]:
    """Run the optimizer of this family named ``name`` (one of :data:`SAMPLED`).

    Parameters
    ----------
    name : str
        ``"stochastic"``, ``"lazier-than-lazy"`` or ``"sample"``.
    run, pool, budget
        As in :func:`~batchsel.submodular.optimizers.greedy.naive_greedy`.
    rng : numpy.random.Generator
        The draws.
    epsilon : float, default 0.01
        ``"stochastic"``, ``"lazier-than-lazy"``: the sample size (see
        :func:`stochastic_greedy`).
    sample_fraction : float, default 0.9
        ``"sample"``: the fraction of the items kept (see :func:`sample_greedy`).

    Example
    -------
    >>> from batchsel import Modular
    >>> run = GreedyRun(Modular(np.arange(50.0)), np.empty(0, np.int64), None, False)
    >>> len(run_sampled("lazier-than-lazy", run, np.arange(50), 5, np.random.default_rng(0)))
    5
    """
    if name == "sample":
        return sample_greedy(run, pool, budget, sample_fraction, rng)
    if name in ("stochastic", "lazier-than-lazy"):
        return stochastic_greedy(run, pool, budget, epsilon, rng, lazy=name == "lazier-than-lazy")
    raise ValueError(f"name must be one of {SAMPLED}, got {name!r}")


def stochastic_greedy(
    run: GreedyRun, pool: np.ndarray, budget: float, epsilon: float, rng: np.random.Generator, lazy: bool
) -> list[int]:
    """Stochastic greedy (``maximize``'s ``"stochastic"``; Mirzasoleiman et al. 2015): each
    step looks at ``ceil(n / k * ln(1 / epsilon))`` random remaining items (with costs, k is
    the budget over the median cost) and takes the best, ties to the smallest index;
    ``E[f] >= (1 - 1/e - epsilon) OPT``. With ``lazy`` (``"lazier-than-lazy"``), each
    sample is evaluated in the order of stale bounds until none can beat the best: the same
    picks for the same draws, fewer evaluations.

    Parameters
    ----------
    run, pool, budget
        As in :func:`~batchsel.submodular.optimizers.greedy.naive_greedy`.
    epsilon : float
        The sample size's ``epsilon`` (``0 < epsilon < 1``).
    rng : numpy.random.Generator
        The samples.
    lazy : bool
        Lazy evaluation inside each sample.

    Example
    -------
    >>> from batchsel import FacilityLocation
    >>> f = FacilityLocation.from_embeddings(np.random.default_rng(0).normal(size=(300, 8)).astype(np.float32))
    >>> def picks(lazy):
    ...     run = GreedyRun(f, np.empty(0, np.int64), None, False)
    ...     return stochastic_greedy(run, np.arange(300), 10, 0.01, np.random.default_rng(1), lazy), run.evaluations
    >>> (eager, eager_evaluations), (lazier, lazier_evaluations) = picks(False), picks(True)
    >>> eager == lazier, lazier_evaluations < eager_evaluations
    (True, True)
    """
    steps = budget if run.cost is None else max(1.0, budget / float(np.median(run.cost[pool])))
    sample_size = max(1, math.ceil(pool.size / steps * math.log(1 / epsilon)))
    bounds = np.full(run.f.n, np.inf) if lazy else None

    def choose(live: np.ndarray) -> int:
        pos = np.sort(rng.choice(live.size, size=min(sample_size, live.size), replace=False))
        sample = live[pos]
        if lazy:
            best_pos, _ = _lazy_in_sample(run, sample, bounds)
        else:
            best_pos = int(np.argmax(run.ratios(sample)))
        return int(pos[best_pos])

    return take_chosen(run, pool, budget, "stochastic greedy", choose)


def _lazy_in_sample(run: GreedyRun, sample: np.ndarray, bounds: np.ndarray) -> tuple[int, float]:
    """Best (gain, smallest index) of a sorted sample, evaluating in the order of the
    stale bounds (``bounds``, updated in place) until no stale bound can beat the best."""
    order = np.lexsort((sample, -bounds[sample]))
    best_pos, best_r = -1, -np.inf
    start, size = 0, LAZY_FIRST
    while start < order.size:
        u = bounds[sample[order[start]]]
        if best_pos >= 0 and (
            inflate_bound(u) < best_r or (inflate_bound(u) == best_r and sample[order[start]] > sample[best_pos])
        ):
            break
        chunk = order[start : start + size]
        r = run.ratios(sample[chunk])
        bounds[sample[chunk]] = r
        for p, v in zip(chunk.tolist(), r.tolist()):
            if v > best_r or (v == best_r and sample[p] < sample[best_pos]):
                best_pos, best_r = p, v
        start += chunk.size
        size = min(2 * size, LAZY_MAX)
    return best_pos, best_r


def sample_greedy(
    run: GreedyRun, pool: np.ndarray, budget: float, fraction: float, rng: np.random.Generator
) -> list[int]:
    """Sample greedy (``maximize``'s ``"sample"``, apricot's SampleGreedy): lazy greedy on a
    uniform random ``fraction`` of the items (at least k of them, so that k picks remain
    possible).

    Parameters
    ----------
    run, pool, budget
        As in :func:`~batchsel.submodular.optimizers.greedy.naive_greedy`.
    fraction : float
        Fraction of the items kept (``0 < fraction <= 1``; apricot's ``epsilon``).
    rng : numpy.random.Generator
        The items kept.

    Example
    -------
    >>> from batchsel import Modular
    >>> run = GreedyRun(Modular(np.arange(10.0)), np.empty(0, np.int64), None, False)
    >>> len(sample_greedy(run, np.arange(10), 3, 0.5, np.random.default_rng(0)))
    3
    """
    size = max(1, int(pool.size * fraction))
    if run.cost is None:
        size = max(size, int(budget))
    kept = np.sort(rng.choice(pool, size=min(size, pool.size), replace=False))
    return lazy_greedy(run, kept, budget)
