"""The problem an apricot optimizer works on (:class:`Problem`): a batchsel set function
over the data's items, the items already in the set, the picks so far and apricot's mask of
the items that may not be picked.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from batchsel.submodular.functions.base import SetFunction
from batchsel.submodular.optimizers import GreedyRun


class Problem:
    """One greedy run: a batchsel set function over the data's items, the items already in
    the set (``initial_subset`` indices, or rows), the picks so far and apricot's mask of the
    items that may not be picked (``idxs``: those that may). GreeDi and the subsets of
    sample greedy build problems on part of the data (``restrict``).

    Parameters
    ----------
    build : callable
        ``build(matrix)``: the batchsel set function over the rows (or similarity) ``matrix``.
    matrix : array-like
        The selection's matrix: features, or a square similarity.
    square : bool
        ``matrix`` is a square similarity (``restrict`` slices its columns too).
    initial : numpy.ndarray, optional
        Indices of the items in the set before the first pick.
    rows : numpy.ndarray, optional
        Rows (examples given by their features) in the set before the first pick.
    verbose : bool, default False
        Progress bars over the picks.
    apricot_queue : bool, default False
        Lazy and approximate lazy greedy follow apricot's queue order (max coverage).

    Attributes
    ----------
    f : SetFunction
        ``build(matrix)``.
    mask : numpy.ndarray
        apricot's mask of the items that may not be picked (initial, picked, dropped).
    ranking, gains : list
        The picks so far and their gains, as the optimizers recorded them.

    Example
    -------
    >>> from batchsel import Modular
    >>> problem = Problem(Modular, np.arange(5.0), square=False, initial=np.array([4]))
    >>> problem.record([3], [3.0])
    >>> problem.idxs.tolist(), problem.ranking
    ([0, 1, 2], [3])
    """

    def __init__(
        self,
        build: Callable[[Any], SetFunction],
        matrix: Any,
        square: bool,
        initial: np.ndarray | None = None,
        rows: np.ndarray | None = None,
        verbose: bool = False,
        apricot_queue: bool = False,
    ) -> None:
        self.build, self.matrix, self.square, self.verbose = build, matrix, square, verbose
        self.apricot_queue = apricot_queue
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
        """The items that may still be picked (int64, sorted)."""
        return np.flatnonzero(~self.mask).astype(np.int64)

    def run(self, cost: np.ndarray | None) -> GreedyRun:
        """batchsel's run state with the initial items and the picks so far in the set.

        Parameters
        ----------
        cost : numpy.ndarray or None
            The items' costs (a knapsack budget), or None.

        Returns
        -------
        GreedyRun
        """
        init = np.concatenate([self.init, np.asarray(self.ranking, dtype=np.int64)])
        return GreedyRun(self.f, init, cost, self.verbose, self.rows)

    def record(self, picks: list[int], gains: list[float]) -> None:
        """Add ``picks`` and their ``gains`` to the ranking, and mask the picks.

        Parameters
        ----------
        picks : list of int
            The items picked, in order.
        gains : list of float
            Their gains, as the optimizer reports them.
        """
        self.ranking.extend(int(j) for j in picks)
        self.gains.extend(float(g) for g in gains)
        self.mask[np.asarray(picks, dtype=np.int64)] = True

    def restrict(self, idxs: np.ndarray) -> "Problem":
        """The problem on the items ``idxs`` alone (apricot rebuilds its function on
        ``X[idxs]``, and ``X[idxs][:, idxs]`` for a square similarity).

        Parameters
        ----------
        idxs : numpy.ndarray
            The items kept (their positions become the new problem's indices).

        Returns
        -------
        Problem
            Without initial items or picks.
        """
        m = self.matrix[idxs]
        if self.square:
            m = m[:, idxs]
        return Problem(self.build, m, self.square, verbose=self.verbose, apricot_queue=self.apricot_queue)
