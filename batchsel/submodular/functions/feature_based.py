"""Feature-based functions: f(S) = sum_f phi(sum_{x in S} m_f(x)), phi concave."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from batchsel.submodular.functions.base import SetFunction, as_features, row

CONCAVE = ("sqrt", "log", "inverse", "sigmoid", "min")


def concave_increment(
    concave: str | Callable, saturation: float | None
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``phi(c + x) - phi(c)`` in a form that is monotone (non-increasing in c) in floating
    point too, which lazy greedy relies on."""
    if concave == "sqrt":
        tiny = np.finfo(np.float64).tiny

        def inc(c, x):  # sqrt(c + x) - sqrt(c) = x / (sqrt(c + x) + sqrt(c))
            return x / np.maximum(np.sqrt(c + x) + np.sqrt(c), tiny)
    elif concave == "log":

        def inc(c, x):  # log1p(c + x) - log1p(c) = log1p(x / (1 + c))
            return np.log1p(x / (1.0 + c))
    elif concave in ("inverse", "sigmoid"):

        def inc(c, x):  # (c + x) / (1 + c + x) - c / (1 + c)
            return x / ((1.0 + c) * (1.0 + c + x))
    elif concave == "min":

        def inc(c, x):  # min(c + x, a) - min(c, a)
            return np.maximum(np.minimum(x, saturation - c), 0.0)
    else:

        def inc(c, x):
            return concave(c + x) - concave(c)

    return inc


class FeatureBased(SetFunction):
    """Feature-based function ``f(S) = sum_f phi(sum_{x in S} features[x, f])``.

    Rewards sets whose summed features cover many features, with diminishing returns
    set by the concave ``phi``. Features must be non-negative (e.g. counts, softmax or
    ReLU outputs).

    Parameters
    ----------
    features:
        ``n x d`` non-negative array or CSR matrix (a row per item).
    concave:
        ``"sqrt"`` (apricot's default), ``"log"`` (``log(1 + x)``), ``"inverse"``
        (``x / (1 + x) = 1 - 1 / (1 + x)``, apricot's ``"sigmoid"``, also accepted under that
        name), ``"min"`` (``min(x, saturation)``), or a vectorized callable with
        ``phi(0) = 0`` (it must be concave and non-decreasing for f to be submodular).
    saturation:
        The cap ``a`` of ``"min"``.

    Example
    -------
    >>> import numpy as np
    >>> x = np.array([[4.0, 0.0], [0.0, 1.0], [4.0, 1.0]])
    >>> f = FeatureBased(x)
    >>> f.gains([0, 1, 2]).tolist()
    [2.0, 1.0, 3.0]
    >>> f.add(2)
    3.0
    >>> f.gains([0, 1]).round(4).tolist()
    [0.8284, 0.4142]
    """

    def __init__(self, features: Any, concave: str | Callable = "sqrt", saturation: float | None = None) -> None:
        if not callable(concave) and concave not in CONCAVE:
            raise ValueError(f"concave must be one of {CONCAVE} or a callable, got {concave!r}")
        if concave == "min":
            if saturation is None or not np.isfinite(saturation) or not saturation > 0:
                raise ValueError(f"concave='min' needs saturation > 0, got {saturation!r}")
            saturation = float(saturation)
        elif saturation is not None:
            raise ValueError("saturation applies to concave='min' only")
        self.features = as_features(features)
        self.concave = concave
        self.saturation = saturation
        self.sparse = not isinstance(self.features, np.ndarray)
        self._inc = concave_increment(concave, saturation)
        super().__init__(self.features.shape[0])

    def _reset_state(self) -> None:
        self._sums = np.zeros(self.features.shape[1], dtype=np.float64)

    def _gains(self, idx: np.ndarray) -> np.ndarray:
        if not self.sparse:
            x = self.features[idx].astype(np.float64, copy=False)
            return self._inc(self._sums[None, :], x).sum(axis=1)
        x = self.features
        starts, stops = x.indptr[idx], x.indptr[idx + 1]
        lengths = stops - starts
        out = np.zeros(idx.size, dtype=np.float64)
        if lengths.sum() == 0:
            return out
        # Positions of all stored entries of the candidate rows, row after row.
        offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
        pos = offsets + np.arange(lengths.sum())
        terms = self._inc(self._sums[x.indices[pos]], x.data[pos].astype(np.float64))
        nonempty = lengths > 0
        out[nonempty] = np.add.reduceat(terms, np.concatenate(([0], np.cumsum(lengths)[:-1]))[nonempty])
        return out

    def _add(self, j: int) -> None:
        cols, vals = row(self.features, j)
        self._sums[cols] += vals

    def _add_rows(self, rows: Any) -> float:
        x = as_features(rows, "rows")
        if x.shape[1] != self.features.shape[1]:
            raise ValueError(f"rows have {x.shape[1]} features but the function has {self.features.shape[1]}")
        total = np.asarray(x.sum(axis=0, dtype=np.float64)).ravel()
        gain = float(self._inc(self._sums, total).sum())
        self._sums += total
        return gain

    def _evaluate(self, idx: np.ndarray) -> float:
        sums = np.asarray(self.features[idx].sum(axis=0, dtype=np.float64)).ravel()
        return float(self._inc(np.zeros_like(sums), sums).sum())


class MaxCoverage(FeatureBased):
    """Maximum coverage ``f(S) = sum_f min(sum_{x in S} features[x, f], threshold)``: every
    feature counts up to ``threshold`` (apricot's ``MaxCoverageSelection``, same default
    ``threshold = 1``; with binary features and threshold 1, the number of features S
    covers). :class:`FeatureBased` with ``concave="min"``.

    Example
    -------
    >>> import numpy as np
    >>> x = np.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    >>> f = MaxCoverage(x)
    >>> f.gains([0, 1, 2]).tolist()
    [2.0, 1.0, 1.0]
    >>> f.add(0)
    2.0
    >>> f.gains([1, 2]).tolist()
    [0.0, 1.0]
    """

    def __init__(self, features: Any, threshold: float = 1.0) -> None:
        if (
            isinstance(threshold, (bool, np.bool_))
            or not isinstance(threshold, (int, float, np.integer, np.floating))
            or not np.isfinite(threshold)
            or not threshold > 0
        ):
            raise ValueError(f"threshold must be a finite number > 0, got {threshold!r}")
        super().__init__(features, "min", saturation=float(threshold))
        self.threshold = float(threshold)
