"""Sum redundancy: f(S) = -sum_{s, t in S} sim(s, t)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .base import SetFunction, as_similarity, diagonal, row
from .graph_cut import _block_sum


class SumRedundancy(SetFunction):
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
        self.similarity = as_similarity(similarity, "similarity")
        self._diag = diagonal(self.similarity)
        super().__init__(self.similarity.shape[0])

    def _reset_state(self) -> None:
        self._penalty = self._diag.copy()

    def _gains(self, idx):
        return -self._penalty[idx]

    def _decrements(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        cols, vals = row(self.similarity, j)
        if isinstance(cols, slice):
            cols = np.arange(self.n)
        return cols, 2.0 * vals.astype(np.float64)

    def _add(self, j: int) -> None:
        cols, vals = row(self.similarity, j)
        self._penalty[cols] += 2.0 * vals

    def _evaluate(self, idx) -> float:
        return -_block_sum(self.similarity, idx)
