"""Greedy maximization of set functions, by family: the greedy loops (naive, lazy,
approximate lazy, modular: :mod:`~batchsel.submodular.optimizers.greedy`), the stochastic
ones (stochastic, lazier-than-lazy, sample: :mod:`~batchsel.submodular.optimizers.stochastic`),
bidirectional greedy (:mod:`~batchsel.submodular.optimizers.bidirectional`) and GreeDi
(:mod:`~batchsel.submodular.optimizers.greedi`), over the state of one run
(:class:`GreedyRun`, :mod:`~batchsel.submodular.optimizers.run`); :func:`maximize` runs one
by name after checking its arguments (:mod:`~batchsel.submodular.optimizers.arguments`).
The loops are public for adapters that drive them (:mod:`batchsel.apricot`).

Every optimizer picks, at each step, the item of largest marginal gain (per unit cost when
``costs`` are given) among those it looks at, ties broken to the smallest index, so runs
are reproducible and ``"lazy"`` returns exactly what ``"naive"`` returns.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from batchsel.core.communicator import Communicator
from batchsel.submodular.functions.base import SetFunction
from batchsel.submodular.optimizers.arguments import OPTIMIZERS, check_arguments, check_items
from batchsel.submodular.optimizers.bidirectional import bidirectional_greedy
from batchsel.submodular.optimizers.greedi import greedi, greedi_facility_location
from batchsel.submodular.optimizers.greedy import (
    GREEDY,
    approximate_lazy_greedy,
    lazy_greedy,
    naive_greedy,
    run_greedy,
)
from batchsel.submodular.optimizers.run import GreedyRun, Selection
from batchsel.submodular.optimizers.stochastic import SAMPLED, run_sampled

logger = logging.getLogger(__name__)

# GreeDi over a communicator with the whole function on every rank: each rank's lazy greedy
# costs about a whole lazy greedy (its cost grows with k and the ground set, hardly with the
# candidates), then the merge runs another, so it is no faster than one process
# (benchmarks/bench_greedi.py). Said once per process.
_GREEDI_WARNED = False


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

    Keyword groups: options (`epsilon`, `seed`, `beta`, `sample_fraction`), budget and items
    (`costs`, `initial`, `exclude`, `candidates`), GreeDi (`parts`, `comm`), display (`progress`).

    Parameters
    ----------
    f : SetFunction
        The function to maximize.
    k : int or float
        Number of picks (``1 <= k <= n``); with ``costs``, the total cost the picks may
        spend (they are then made by gain per unit cost).
    optimizer : str, default "lazy"
        One of :data:`OPTIMIZERS`; each family's function says how it picks. :func:`run_greedy`:
        ``"naive"``, ``"lazy"`` (naive's picks, fewer evaluations), ``"two-stage"`` (runs
        ``"lazy"``), ``"approximate-lazy"``, ``"modular"``; :func:`run_sampled`:
        ``"stochastic"``, ``"lazier-than-lazy"``, ``"sample"``; :func:`bidirectional_greedy`
        (non-monotone f, no ``costs``); :func:`~batchsel.submodular.optimizers.greedi.greedi`
        (``"greedi"``; slower than ``"lazy"`` over ranks: :func:`greedi_facility_location` pays).
    epsilon, seed, beta, sample_fraction : float, int, float, float
        Sample size of ``"stochastic"`` and ``"lazier-than-lazy"`` (``0 < epsilon < 1``, default
        0.01); seed of those, ``"sample"``, ``"bidirectional"`` and GreeDi's split (default 0);
        ``"approximate-lazy"``'s acceptance factor (``0 < beta <= 1``, default 0.9);
        ``"sample"``'s fraction of the items kept (``0 < sample_fraction <= 1``, default 0.9).
    costs : array-like, optional
        Positive cost of every item (length n).
    initial : array-like, optional
        Items in the set before the first pick: indices, or rows (2-D) for the feature-based
        functions, as apricot's ``initial_subset``.
    exclude, candidates : array-like, optional
        Items that may not be picked; the only items that may be picked.
    parts, comm : int or Communicator, optional
        ``"greedi"``: parts in one process (default 4), or one per rank of ``comm`` (every
        rank calls with the same arguments and gets the same result).
    progress : bool, default False
        A tqdm progress bar over the picks.

    Returns
    -------
    Selection
        ``f`` is reset, then left holding the final set (``f.selected == [*initial, *indices]``).

    Example
    -------
    >>> from batchsel import Modular
    >>> maximize(Modular(np.arange(5.0)), 2).indices.tolist()
    [4, 3]
    """
    seed, cost, budget = check_arguments(f, k, optimizer, costs, seed, epsilon, beta, sample_fraction)
    init, rows, pool = check_items(f.n, None if cost is not None else int(budget), initial, exclude, candidates)
    run = GreedyRun(f, init, cost, progress, rows)
    if optimizer == "greedi":
        _warn_greedi_over_ranks(f, comm)
        return greedi(run, pool, budget, seed, parts, comm)
    if parts is not None or comm is not None:
        raise ValueError(f"parts and comm apply to optimizer='greedi', not {optimizer!r}")
    if optimizer in GREEDY:
        picks = run_greedy(optimizer, run, pool, budget, beta)
    elif optimizer in SAMPLED:
        picks = run_sampled(optimizer, run, pool, budget, np.random.default_rng(seed), epsilon, sample_fraction)
    else:  # "bidirectional"
        picks = bidirectional_greedy(run, pool, budget, np.random.default_rng(seed))
    return run.finish(picks, optimizer)


def _warn_greedi_over_ranks(f: SetFunction, comm: Communicator | None) -> None:
    """Warn, once per process, that GreeDi with the whole function on every rank is slower
    than lazy greedy in one process."""
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
