"""Bidirectional greedy: Buchbinder et al.'s randomized double greedy for non-monotone set
functions (:func:`bidirectional_greedy`, ``maximize``'s ``"bidirectional"``, apricot's
BidirectionalGreedy). It decides every item once and evaluates f from scratch for each, so
it is for small ground sets, and takes no costs.
"""

from __future__ import annotations

import numpy as np

from batchsel.submodular.optimizers.run import GreedyRun


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

    Example
    -------
    >>> from batchsel import GraphCut
    >>> sim = np.random.default_rng(0).uniform(size=(20, 20))
    >>> run = GreedyRun(GraphCut(sim + sim.T, lam=2.0), np.empty(0, np.int64), None, False)
    >>> kept = bidirectional_greedy(run, np.arange(20), 20, np.random.default_rng(0))
    >>> len(kept) <= 20, len(run.picked_gains) == len(kept)
    (True, True)
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
