"""The checks of :func:`~batchsel.submodular.optimizers.maximize`'s arguments, in one place:
the optimizer names (:data:`OPTIMIZERS`), the options, the budget and costs
(:func:`check_arguments`), and the items in the set before the first pick and those that
may be picked (:func:`check_items`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from batchsel.core.checks import check_indices, check_int, check_number, check_seed, tensor_to_numpy
from batchsel.submodular.functions.base import SetFunction

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
NO_COSTS = ("bidirectional",)


def check_arguments(
    f: Any, k: Any, optimizer: str, costs: Any, seed: Any, epsilon: Any, beta: Any, sample_fraction: Any
) -> tuple[int, np.ndarray | None, float]:
    """Check ``maximize``'s function, optimizer, options and budget, in that order.

    Parameters
    ----------
    f : SetFunction
        The function.
    k : int or float
        The number of picks (``1 <= k <= n``) or, with ``costs``, the budget (``> 0``).
    optimizer : str
        One of :data:`OPTIMIZERS`.
    costs : array-like or None
        Positive, finite cost of every item (length n); not for :data:`NO_COSTS`.
    seed : int
        The seed (:func:`~batchsel.core.checks.check_seed`).
    epsilon : float
        In ``(0, 1)``.
    beta, sample_fraction : float
        In ``(0, 1]``.

    Returns
    -------
    tuple
        ``(seed, cost, budget)``: the checked seed, the costs (float64) or None, and the
        budget (an int without costs, a float with them).

    Raises
    ------
    TypeError
        If ``f`` is not a :class:`~batchsel.submodular.functions.SetFunction`.
    ValueError
        If an argument is out of its range.

    Example
    -------
    >>> from batchsel import Modular
    >>> check_arguments(Modular(np.ones(5)), 2, "lazy", None, 0, 0.01, 0.9, 0.9)
    (0, None, 2)
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
    if costs is not None and optimizer in NO_COSTS:
        raise ValueError(f"optimizer={optimizer!r} takes no costs (it has no budget to spend)")
    if costs is None:
        return seed, None, check_int(k, "k", minimum=1, maximum=n)
    cost = np.asarray(costs, dtype=np.float64)
    if cost.shape != (n,):
        raise ValueError(f"costs must have one value per item (shape ({n},)), got shape {cost.shape}")
    if not np.isfinite(cost).all() or (cost <= 0).any():
        bad = cost[~(np.isfinite(cost) & (cost > 0))][0]
        raise ValueError(f"costs must be finite and > 0, found {bad}")
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, float, np.integer, np.floating)) or not k > 0:
        raise ValueError(f"k (the budget) must be a number > 0, got {k!r}")
    return seed, cost, float(k)


def split_initial(initial: Any, n: int) -> tuple[Any, Any]:
    """``initial`` as (indices or None, rows or None): a 2-D array holds rows (examples given
    by their features), a boolean mask of length n selects indices, as in apricot.

    Parameters
    ----------
    initial : array-like or None
        Indices, a boolean mask of length n, or a 2-D array of rows.
    n : int
        The number of items.

    Returns
    -------
    tuple
        ``(indices, rows)``, each None when ``initial`` holds none.

    Example
    -------
    >>> split_initial([True, False, True], 3)
    (array([0, 2]), None)
    """
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


def check_items(
    n: int, count: int | None, initial: Any = None, exclude: Any = None, candidates: Any = None
) -> tuple[np.ndarray, Any, np.ndarray]:
    """The items in the set before the first pick, and those that may be picked.

    Parameters
    ----------
    n : int
        The number of items.
    count : int or None
        The number of picks, which the pool must hold; None (a knapsack budget): no check.
    initial : array-like, optional
        As ``maximize``'s (see :func:`split_initial`).
    exclude : array-like, optional
        Items that may not be picked.
    candidates : array-like, optional
        The only items that may be picked.

    Returns
    -------
    tuple
        ``(init, rows, pool)``: the initial indices (int64, sorted, unique), the initial
        rows or None, and the items that may be picked (int64, sorted).

    Raises
    ------
    ValueError
        If an index is out of range, or the pool holds fewer than ``count`` items, or none.

    Example
    -------
    >>> init, rows, pool = check_items(5, 2, initial=[1], exclude=[3])
    >>> init.tolist(), rows, pool.tolist()
    ([1], None, [0, 2, 4])
    """
    initial, rows = split_initial(initial, n)
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
    if count is not None and count > pool.size:
        raise ValueError(
            f"k={count} but only {pool.size} items may be picked (n={n}, after candidates/exclude/initial)"
        )
    if pool.size == 0:
        raise ValueError("no item may be picked (candidates/exclude/initial leave none)")
    return init, rows, pool
