"""Modular functions: f(S) = sum_{s in S} w_s."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchsel.core.checks import tensor_to_numpy
from batchsel.submodular.functions.base import SetFunction


class Modular(SetFunction):
    """Modular ``f(S) = sum_{s in S} weights[s]``: every item has a fixed gain (an
    uncertainty score, a closeness to the mean...). Weights may be negative.

    Example
    -------
    >>> f = Modular([0.5, 2.0, 1.0])
    >>> f.gains([0, 1, 2]).tolist()
    [0.5, 2.0, 1.0]
    >>> f.evaluate([1, 2])
    3.0
    """

    def __init__(self, weights: Any) -> None:
        weights = tensor_to_numpy(weights)
        w = np.asarray(weights)
        if w.ndim != 1 or w.size == 0:
            raise ValueError(f"weights must be a non-empty 1-D array, got shape {w.shape}")
        if not (np.issubdtype(w.dtype, np.number) or w.dtype == bool):
            raise TypeError(f"weights must be numeric, got dtype {w.dtype}")
        w = w.astype(np.float64)
        if not np.isfinite(w).all():
            raise ValueError(f"weights contain NaN or inf (first at {int(np.flatnonzero(~np.isfinite(w))[0])})")
        self.weights = w
        super().__init__(w.size)

    def _reset_state(self) -> None:
        pass

    def _gains(self, idx: np.ndarray) -> np.ndarray:
        return self.weights[idx]

    def _decrements(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        return np.empty(0, dtype=np.int64), np.empty(0)  # gains never change

    def _add(self, j: int) -> None:
        pass

    def _evaluate(self, idx: np.ndarray) -> float:
        return float(self.weights[idx].sum())
