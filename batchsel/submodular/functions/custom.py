"""A set function the user writes as a plain Python callable over rows:
f(S) = function(rows[S]), apricot's ``CustomSelection`` (rows = features) and
``CustomGraphSelection`` (rows = similarity rows)."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from batchsel.core.checks import check_finite, tensor_to_numpy
from batchsel.submodular.functions.base import SetFunction


class Custom(SetFunction):
    """``f(S) = function(rows[S])`` for any callable that maps a ``|S| x d`` matrix to a
    number, with ``f({}) = 0``: the way to optimize a function batchsel does not ship
    (apricot's ``CustomSelection``; for its ``CustomGraphSelection`` pass the similarity
    matrix as ``rows``, e.g. from :func:`~batchsel.submodular.functions.facility_location.similarity_from_embeddings`).

    Every gain calls ``function`` once on the current set plus the candidate, so it costs
    ``O(candidates x cost(function))``: fine for hundreds to thousands of items; for more,
    write a :class:`SetFunction` subclass with incremental state. Lazy greedy assumes the
    function is submodular (gains that only shrink); for one that is not, use
    ``optimizer="naive"``.

    Parameters
    ----------
    rows:
        ``n x d`` array: one row per item of the ground set.
    function:
        ``function(matrix) -> float`` for a matrix of 1 or more rows; called with
        ``**function_kwargs``.

    Example
    -------
    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    >>> f = Custom(x, lambda m: np.sqrt(m.sum(axis=0)).sum())   # a feature-based function
    >>> from batchsel import maximize
    >>> maximize(f, 2, optimizer="naive").indices.tolist()
    [1, 2]
    """

    def __init__(self, rows: Any, function: Callable[..., float], **function_kwargs: Any) -> None:
        x = np.asarray(tensor_to_numpy(rows))
        if x.ndim != 2 or x.shape[0] == 0:
            raise ValueError(f"rows must be a non-empty 2-D array (one row per item), got shape {x.shape}")
        if not np.issubdtype(x.dtype, np.number):
            raise TypeError(f"rows must be numeric, got dtype {x.dtype}")
        if not callable(function):
            raise TypeError(f"function must be callable, got {type(function).__name__}")
        self.rows = x.astype(np.float64, copy=False)
        check_finite(self.rows, "rows")
        self.function = function
        self.function_kwargs = function_kwargs
        super().__init__(x.shape[0])

    def _call(self, matrix: np.ndarray) -> float:
        value = float(self.function(matrix, **self.function_kwargs))
        if not math.isfinite(value):
            raise ValueError(f"function returned {value} on a set of {len(matrix)} rows; it must be finite")
        return value

    def _reset_state(self) -> None:
        self._chosen = np.empty((0, self.rows.shape[1]))  # rows of S (and of add_rows)
        self._current = 0.0  # function(S), 0 for the empty set

    def _gains(self, idx: np.ndarray) -> np.ndarray:
        # one spare last row reused for every candidate, as apricot does
        work = np.concatenate([self._chosen, np.zeros((1, self.rows.shape[1]))])
        out = np.empty(idx.size)
        for i, j in enumerate(idx):
            work[-1] = self.rows[j]
            out[i] = self._call(work) - self._current
        return out

    def _add(self, j: int) -> None:
        self._chosen = np.concatenate([self._chosen, self.rows[j : j + 1]])
        self._current = self._call(self._chosen)

    def _add_rows(self, rows: Any) -> float:
        r = np.asarray(tensor_to_numpy(rows), dtype=np.float64)
        if r.ndim != 2 or r.shape[1] != self.rows.shape[1]:
            raise ValueError(f"rows must be 2-D with {self.rows.shape[1]} columns, got shape {r.shape}")
        check_finite(r, "rows")
        before = self._current
        self._chosen = np.concatenate([self._chosen, r])
        self._current = self._call(self._chosen) if len(self._chosen) else 0.0
        return self._current - before

    def _evaluate(self, idx: np.ndarray) -> float:
        return self._call(self.rows[idx])
