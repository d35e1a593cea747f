"""Graph cut: f(S) = lam * sum_{s in S} sum_v sim(s, v) - sum_{s, t in S} sim(s, t)."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchsel.submodular.functions.base import SetFunction, as_similarity, diagonal, row, row_sums
from batchsel.submodular.functions.facility_location import similarity_from_embeddings


class GraphCut(SetFunction):
    """Graph cut ``f(S) = lam * sum_{s in S} sum_v S[s, v] - sum_{s, t in S} S[s, t]``.

    The first term rewards items similar to the whole ground set (representative), the
    second penalizes similarity inside S (redundancy); the sum runs over ordered pairs,
    ``s = t`` included, as in apricot's ``GraphCutSelection`` (whose ``alpha`` is ``lam``).
    The marginal gain of j is ``lam * rowsum(j) - S[j, j] - 2 sum_{s in S} S[s, j]``.
    The similarity must be symmetric (not checked) and non-negative. f is submodular;
    it is monotone only when ``lam`` is large enough (``lam >= 2`` suffices).

    Parameters
    ----------
    similarity:
        Dense ``n x n`` array or sparse matrix (CSR).
    lam:
        Weight of the representativeness term.

    Example
    -------
    >>> import numpy as np
    >>> sim = np.array([[1.0, 0.9, 0.1], [0.9, 1.0, 0.2], [0.1, 0.2, 1.0]])
    >>> f = GraphCut(sim, lam=2.0)
    >>> f.gains([0, 1, 2]).round(2).tolist()
    [3.0, 3.2, 1.6]
    >>> round(f.add(1), 2)
    3.2
    >>> f.gains([0, 2]).round(2).tolist()
    [1.2, 1.2]
    """

    def __init__(self, similarity: Any, lam: float = 1.0) -> None:
        if not np.isfinite(lam) or lam < 0:
            raise ValueError(f"lam must be finite and >= 0, got {lam!r}")
        self.similarity = as_similarity(similarity, "similarity")
        self.lam = float(lam)
        self._rows = self.lam * row_sums(self.similarity)
        self._diag = diagonal(self.similarity)
        super().__init__(self.similarity.shape[0])

    @classmethod
    def from_embeddings(
        cls,
        embeddings: Any,
        metric: str = "euclidean",
        neighbors: int | None = None,
        *,
        lam: float = 1.0,
        **kwargs: Any,
    ) -> "GraphCut":
        """Graph cut over the similarity of ``N x d`` embeddings: apricot's
        ``GraphCutSelection(metric=...)`` similarity when dense (``"euclidean"``:
        ``max d^2 - d^2``; ``"cosine"``, ``"corr"``: squared cosine / correlation), the k-NN
        graph for large N or with ``neighbors``; ``kwargs`` (``precision``, ``kernel``,
        ``dense_max``, ``progress``, index arguments) as in
        :meth:`FacilityLocation.from_embeddings`.

        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(60, 4)).astype(np.float32)
        >>> GraphCut.from_embeddings(x, "cosine", lam=2.0).n
        60
        """
        return cls(similarity_from_embeddings(embeddings, metric, neighbors, **kwargs), lam=lam)

    def _reset_state(self) -> None:
        # S[j, j] + 2 * sum_{s in S} S[s, j]: grows with S, so gains only decrease.
        self._penalty = self._diag.copy()

    def _gains(self, idx: np.ndarray) -> np.ndarray:
        return self._rows[idx] - self._penalty[idx]

    def _decrements(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        cols, vals = row(self.similarity, j)
        if isinstance(cols, slice):
            cols = np.arange(self.n)
        return cols, 2.0 * vals.astype(np.float64)

    def _add(self, j: int) -> None:
        cols, vals = row(self.similarity, j)
        self._penalty[cols] += 2.0 * vals

    def _evaluate(self, idx: np.ndarray) -> float:
        return float(self._rows[idx].sum() - _block_sum(self.similarity, idx))


def _block_sum(sim: Any, idx: np.ndarray) -> float:
    """``sum_{s, t in idx} sim[s, t]`` in float64."""
    return float(sim[idx][:, idx].sum(dtype=np.float64))
