"""apricot 0.6.1's sieve, as its ``SieveGreedy`` and its selections' ``partial_fit`` run it:
one sieve per threshold ``(1 + epsilon)^j - 1`` (and a first one at 1), grown as the
largest singleton gain seen grows and never dropped, each taking a row whose gain passes
``(v / 2 - value) / (k - picked)``; the result is the sieve of the largest value.

:class:`SieveState` holds the sieves (apricot keeps them on the selection), the steps
(:func:`facility_step`, :func:`feature_step`, :func:`coverage_step`) are apricot's gains
for each function, vectorized over the sieves. batchsel's own sieve-streaming, with its
pruned thresholds and fixed reference, is :class:`batchsel.submodular.streaming.SieveStreaming`.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

Step = Callable[[np.ndarray, np.ndarray, np.ndarray], "tuple[np.ndarray, np.ndarray, np.ndarray]"]


def facility_step(d: int) -> Step:
    """apricot's facility-location sieve gain over the first ``d`` columns (the reservoir's
    rows so far): the mean of ``max(coverage, row)`` less the sieve's value, which it then
    becomes.

    Parameters
    ----------
    d : int
        The columns of the chunk's similarity (the reservoir's size when it was computed).

    Returns
    -------
    callable
        ``step(coverage, row, value) -> (gain, new coverage, new value)`` over the sieves.

    Example
    -------
    >>> gain, cover, value = facility_step(2)(np.zeros((1, 3)), np.array([1.0, 3.0, 9.0]), np.zeros(1))
    >>> gain.tolist(), cover.tolist(), value.tolist()
    ([2.0], [[1.0, 3.0, 0.0]], [2.0])
    """

    def step(cur: np.ndarray, row: np.ndarray, total: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        new = cur.copy()
        np.maximum(cur[:, :d], row[:d], out=new[:, :d])
        value = new[:, :d].mean(axis=1)
        return value - total, new, value

    return step


def concave_array(concave: Any) -> Callable[[np.ndarray], np.ndarray]:
    """apricot's concave function of a feature-based selection, on arrays: ``"sqrt"``,
    ``"log"`` (``log1p``), ``"sigmoid"`` / ``"inverse"`` (``x / (1 + x)``) or a vectorized
    callable.

    Parameters
    ----------
    concave : str or callable
        The selection's ``concave_func``.

    Returns
    -------
    callable

    Raises
    ------
    ValueError
        For another name (``"min"`` needs a saturation apricot's selection does not take).

    Example
    -------
    >>> concave_array("sigmoid")(np.array([1.0, 3.0])).tolist()
    [0.5, 0.75]
    """
    if callable(concave):
        return concave
    named: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "sqrt": np.sqrt,
        "log": np.log1p,
        "sigmoid": lambda x: x / (1.0 + x),
        "inverse": lambda x: x / (1.0 + x),
    }
    if concave not in named:
        raise ValueError(f"the sieve streams concave_func 'sqrt', 'log', 'sigmoid' or a callable, not {concave!r}")
    return named[concave]


def feature_step(func: Callable[[np.ndarray], np.ndarray]) -> Step:
    """apricot's feature-based sieve gain: ``sum func(sums + row)`` less the sieve's value,
    which grows by that gain.

    Parameters
    ----------
    func : callable
        The concave function (:func:`concave_array`).

    Returns
    -------
    callable
        ``step(sums, row, value) -> (gain, new sums, new value)`` over the sieves.

    Example
    -------
    >>> gain, sums, value = feature_step(np.sqrt)(np.zeros((1, 2)), np.array([4.0, 9.0]), np.zeros(1))
    >>> gain.tolist(), value.tolist()
    ([5.0], [5.0])
    """

    def step(cur: np.ndarray, row: np.ndarray, total: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        new = cur + row
        gain = func(new).sum(axis=1) - total
        return gain, new, total + gain

    return step


def coverage_step(threshold: float) -> Step:
    """apricot's max-coverage sieve gain: ``sum min(sums + row, threshold)`` less the
    sieve's value, which grows by that gain.

    Parameters
    ----------
    threshold : float
        The selection's coverage threshold.

    Returns
    -------
    callable
        ``step(sums, row, value) -> (gain, new sums, new value)`` over the sieves.

    Example
    -------
    >>> gain, sums, value = coverage_step(1.0)(np.zeros((1, 3)), np.array([2.0, 0.0, 1.0]), np.zeros(1))
    >>> gain.tolist()
    [2.0]
    """

    def step(cur: np.ndarray, row: np.ndarray, total: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        new = cur + row
        gain = np.fmin(new, threshold).sum(axis=1) - total
        return gain, new, total + gain

    return step


class SieveState:
    """apricot's sieves (its selection's ``sieve_*_`` arrays): per sieve, the state its
    gains are computed against (``width`` columns), its picks, their gains, its value; and
    the rows of the picks of every sieve (for ``subset``).

    Parameters
    ----------
    k : int
        Picks per sieve.
    width : int
        Columns of a sieve's state: the features, or the reservoir's (or the data's) rows.

    Example
    -------
    >>> state = SieveState(2, 2)
    >>> x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    >>> state.scan(coverage_step(1.0), x, np.array([1.0, 2.0]), np.arange(3), x)
    >>> ranking, gains, subset = state.best()
    >>> ranking.tolist(), gains.tolist()
    ([0, 1], [1.0, 1.0])
    """

    def __init__(self, k: int, width: int) -> None:
        self.k, self.width = int(k), int(width)
        self.current = np.zeros((0, self.width))
        self.selections = np.zeros((0, self.k), dtype=np.int64)
        self.gains = np.zeros((0, self.k))
        self.n_selected = np.zeros(0, dtype=np.int64)
        self.total = np.zeros(0)
        self.rows: dict[int, np.ndarray] = {}
        self.row_width = 0

    def grow(self, n_sieves: int) -> None:
        """Add empty sieves up to ``n_sieves`` (apricot never removes one)."""
        extra = n_sieves - self.total.shape[0]
        if extra <= 0:
            return
        self.current = np.vstack([self.current, np.zeros((extra, self.width))])
        self.selections = np.vstack([self.selections, np.full((extra, self.k), -1, dtype=np.int64)])
        self.gains = np.vstack([self.gains, np.zeros((extra, self.k))])
        self.n_selected = np.concatenate([self.n_selected, np.zeros(extra, dtype=np.int64)])
        self.total = np.concatenate([self.total, np.zeros(extra)])

    def scan(
        self,
        step: Step,
        matrix: np.ndarray,
        thresholds: np.ndarray,
        idxs: np.ndarray,
        rows: np.ndarray,
        bound: np.ndarray | None = None,
    ) -> None:
        """Pass the chunk's rows through every sieve in order, as apricot's kernels do: a
        sieve that is not full takes a row whose gain exceeds ``(v / 2 - value) / (k -
        picked)`` (``v``: its threshold).

        Parameters
        ----------
        step : callable
            The function's gains (:func:`facility_step`, :func:`feature_step`, ...).
        matrix : numpy.ndarray
            The chunk's rows as the function sees them (features, or similarities).
        thresholds : numpy.ndarray
            Every sieve's ``v``.
        idxs : numpy.ndarray
            The rows' numbers across the stream.
        rows : numpy.ndarray
            The rows (their features), kept for the picks' ``subset``.
        bound : numpy.ndarray, optional
            An upper bound of each row's gain in any sieve: a sieve whose threshold is
            above it (by more than rounding) cannot take the row and is not evaluated.
        """
        self.grow(thresholds.shape[0])
        self.row_width = rows.shape[1]
        k = self.k
        active = np.flatnonzero(self.n_selected < k)
        for i in range(matrix.shape[0]):
            if active.size == 0:
                break
            left = k - self.n_selected[active]
            threshold = (thresholds[active] / 2.0 - self.total[active]) / left
            live = active
            if bound is not None:
                near = threshold < bound[i] + 1e-9 * (1.0 + abs(bound[i]))
                live, left, threshold = active[near], left[near], threshold[near]
                if live.size == 0:
                    continue
            gain, new, value = step(self.current[live], matrix[i], self.total[live])
            taken = gain > threshold
            if not taken.any():
                continue
            sieves = live[taken]
            slots = self.n_selected[sieves]
            self.current[sieves] = new[taken]
            self.total[sieves] = value[taken]
            self.selections[sieves, slots] = idxs[i]
            self.gains[sieves, slots] = gain[taken]
            self.n_selected[sieves] += 1
            self.rows[int(idxs[i])] = np.array(rows[i], dtype=np.float64)
            if (left[taken] == 1).any():
                active = np.flatnonzero(self.n_selected < k)
        # keep the rows some sieve still holds (apricot keeps k rows per sieve)
        held = set(np.unique(self.selections[self.selections >= 0]).tolist())
        self.rows = {j: r for j, r in self.rows.items() if j in held}

    def best(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The sieve of the largest value (the first of equal ones): its picks (int64),
        their gains and rows.

        Returns
        -------
        ranking, gains, subset : numpy.ndarray
        """
        if self.total.size == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros((0, self.row_width))
        b = int(np.argmax(self.total))
        n = int(self.n_selected[b])
        ranking = self.selections[b, :n].copy()
        subset = np.array([self.rows[int(j)] for j in ranking]).reshape(n, self.row_width)
        return ranking, self.gains[b, :n].copy(), subset
