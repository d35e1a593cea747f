"""Saturated coverage: f(S) = sum_v min(sum_{s in S} sim(s, v), alpha * sum_u sim(v, u))."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchsel.submodular import kernels
from batchsel.submodular.functions.base import (
    SetFunction,
    as_similarity,
    check_symmetric_flag,
    row,
    row_sums,
    symmetric_drops,
)
from batchsel.submodular.functions.facility_location import similarity_from_embeddings


class SaturatedCoverage(SetFunction):
    """Saturated coverage ``f(S) = sum_v min(sum_{s in S} S[s, v], alpha * sum_u S[v, u])``.

    Each item v is covered by the summed similarity of S, up to a cap of ``alpha`` times
    its total similarity; once covered it stops contributing (apricot's
    ``SaturatedCoverageSelection``, same default ``alpha = 0.1``). The similarity must be
    symmetric and non-negative. ``symmetric`` (sparse only): as in :class:`FacilityLocation`,
    lets lazy greedy update exactly the gains an add lowers; None checks it.

    Example
    -------
    >>> import numpy as np
    >>> sim = np.array([[1.0, 0.9, 0.1], [0.9, 1.0, 0.2], [0.1, 0.2, 1.0]])
    >>> f = SaturatedCoverage(sim, alpha=0.5)
    >>> f.gains([0, 1, 2]).round(2).tolist()
    [2.0, 2.1, 0.95]
    >>> round(f.add(1), 2)
    2.1
    >>> f.gains([0, 2]).round(2).tolist()
    [0.25, 0.6]
    """

    def __init__(self, similarity: Any, alpha: float = 0.1, symmetric: bool | None = None) -> None:
        if not np.isfinite(alpha) or alpha <= 0:
            raise ValueError(f"alpha must be finite and > 0, got {alpha!r}")
        self.similarity = as_similarity(similarity, "similarity")
        self.sparse = not isinstance(self.similarity, np.ndarray)
        self.symmetric = self.sparse and check_symmetric_flag(self.similarity, symmetric)
        self.alpha = float(alpha)
        self._cap = self.alpha * row_sums(self.similarity)
        super().__init__(self.similarity.shape[0])

    @classmethod
    def from_embeddings(
        cls,
        embeddings: Any,
        metric: str = "euclidean",
        neighbors: int | None = None,
        *,
        alpha: float = 0.1,
        **kwargs: Any,
    ) -> "SaturatedCoverage":
        """Saturated coverage over the similarity of ``N x d`` embeddings (apricot's
        ``SaturatedCoverageSelection(metric=...)`` similarity; arguments as in
        :meth:`GraphCut.from_embeddings`).

        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(60, 4)).astype(np.float32)
        >>> SaturatedCoverage.from_embeddings(x, neighbors=5).sparse
        True
        """
        return cls(similarity_from_embeddings(embeddings, metric, neighbors, **kwargs), alpha=alpha)

    def _reset_state(self) -> None:
        # Coverage still to gain per item, cap - coverage >= 0: it only shrinks, and the
        # gain sum_v min(S[j, v], room[v]) with it.
        self._room = self._cap.copy()

    def _gains(self, idx: np.ndarray) -> np.ndarray:
        return kernels.saturated_gains(self.similarity, self._room, idx)

    def _decrements(self, j: int) -> tuple[np.ndarray, np.ndarray] | None:
        return symmetric_drops(self.similarity, self.symmetric, kernels.saturated_drops, self._room, j)

    def _add(self, j: int) -> None:
        cols, vals = row(self.similarity, j)
        self._room[cols] = np.maximum(self._room[cols] - vals, 0.0)

    def _evaluate(self, idx: np.ndarray) -> float:
        cover = np.asarray(self.similarity[idx].sum(axis=0, dtype=np.float64)).ravel()
        return float(np.minimum(cover, self._cap).sum())
