"""Mixtures: f(S) = sum_i w_i f_i(S)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from batchsel.submodular.functions.base import SetFunction


class Mixture(SetFunction):
    """Weighted sum ``f(S) = sum_i weights[i] * functions[i](S)`` of set functions over
    the same ground set; submodular when every part is and the weights are non-negative
    (apricot's ``MixtureSelection``). The parts keep their own state: adding to the
    mixture adds to each of them.

    Example
    -------
    >>> import numpy as np
    >>> from batchsel.submodular.functions import FacilityLocation, Modular
    >>> sim = np.array([[1.0, 0.9, 0.1], [0.9, 1.0, 0.2], [0.1, 0.2, 1.0]])
    >>> f = Mixture([FacilityLocation(sim), Modular([0.0, 0.0, 1.0])], weights=[1.0, 0.5])
    >>> f.gains([0, 1, 2]).round(2).tolist()
    [2.0, 2.1, 1.8]
    """

    def __init__(self, functions: Sequence[SetFunction], weights: Any = None) -> None:
        functions = list(functions)
        if not functions:
            raise ValueError("Mixture needs at least one function")
        for i, g in enumerate(functions):
            if not isinstance(g, SetFunction):
                raise TypeError(f"functions[{i}] must be a SetFunction, got {type(g).__name__}")
        sizes = {g.n for g in functions}
        if len(sizes) != 1:
            raise ValueError(f"all functions must have the same ground set size, got sizes {sorted(sizes)}")
        w = np.ones(len(functions)) if weights is None else np.asarray(weights, dtype=np.float64)
        if w.shape != (len(functions),):
            raise ValueError(f"weights must have one value per function ({len(functions)}), got shape {w.shape}")
        if not np.isfinite(w).all() or (w < 0).any():
            raise ValueError(f"weights must be finite and >= 0, got {w.tolist()}")
        self.functions = functions
        self.weights = w
        super().__init__(functions[0].n)

    def _reset_state(self) -> None:
        for g in self.functions:
            g.reset()

    def _gains(self, idx: np.ndarray) -> np.ndarray:
        out = np.zeros(idx.size, dtype=np.float64)
        for w, g in zip(self.weights, self.functions):
            if w:
                out += w * g._gains(idx)
        return out

    def _decrements(self, j: int) -> tuple[np.ndarray, np.ndarray] | None:
        parts = [(w, g._decrements(j)) for w, g in zip(self.weights, self.functions) if w]
        if any(d is None for _, d in parts):
            return None
        if not parts:
            return np.empty(0, dtype=np.int64), np.empty(0)
        return (np.concatenate([d[0] for _, d in parts]), np.concatenate([w * d[1] for w, d in parts]))

    def _add(self, j: int) -> None:
        for g in self.functions:
            g.add(j)

    def _add_rows(self, rows: Any) -> float:
        return float(sum(w * g.add_rows(rows) for w, g in zip(self.weights, self.functions)))

    def _evaluate(self, idx: np.ndarray) -> float:
        return float(sum(w * g.evaluate(idx) for w, g in zip(self.weights, self.functions) if w))
