"""Sum redundancy: f(S) = -sum_{s, t in S} sim(s, t)."""

from __future__ import annotations

from typing import Any

from batchsel.submodular.functions.facility_location import similarity_from_embeddings
from batchsel.submodular.functions.graph_cut import GraphCut


class SumRedundancy(GraphCut):
    """Sum redundancy ``f(S) = -sum_{s, t in S} S[s, t]`` (ordered pairs, ``s = t``
    included): a pure penalty on similarity inside S. The marginal gain of j is
    ``-(S[j, j] + 2 sum_{s in S} S[s, j])``, the gain of apricot's
    ``SumRedundancySelection``; apricot's function adds the constant ``sum_{u, v} S[u, v]``,
    left out here so that ``f({}) = 0`` (gains and selections are the same). Gains are
    negative, so use it in a :class:`Mixture` with a representativeness term, or to pick
    the k least redundant items. The similarity must be symmetric and non-negative.

    Example
    -------
    >>> import numpy as np
    >>> sim = np.array([[1.0, 0.9, 0.1], [0.9, 1.0, 0.2], [0.1, 0.2, 1.0]])
    >>> f = SumRedundancy(sim)
    >>> f.add(0)
    -1.0
    >>> f.gains([1, 2]).round(2).tolist()
    [-2.8, -1.2]
    >>> round(f.evaluate([0, 2]), 2)
    -2.2
    """

    def __init__(self, similarity: Any) -> None:
        # GraphCut without its representativeness term: the same state and updates.
        super().__init__(similarity, lam=0.0)

    @classmethod
    def from_embeddings(
        cls, embeddings: Any, metric: str = "euclidean", neighbors: int | None = None, **kwargs: Any
    ) -> "SumRedundancy":
        """Sum redundancy over the similarity of ``N x d`` embeddings (apricot's
        ``SumRedundancySelection(metric=...)`` similarity; arguments as in
        :meth:`GraphCut.from_embeddings`).

        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(60, 4)).astype(np.float32)
        >>> bool(SumRedundancy.from_embeddings(x).gains([0, 1]).max() <= 0)
        True
        """
        return cls(similarity_from_embeddings(embeddings, metric, neighbors, **kwargs))
