"""How rows reach faiss: in blocks of :data:`BLOCK_ROWS` (bounded temporary memory, a
memory-mapped file never read whole), as float32 C-contiguous arrays, normalized for the
cosine metric (in float64, so that the result does not depend on the scale).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

# Rows per block when adding to and searching the index (bounds temporary memory).
BLOCK_ROWS = 1 << 15


def row_blocks(n: int, block: int = BLOCK_ROWS) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` of consecutive blocks of at most ``block`` of ``n`` rows.

    Parameters
    ----------
    n : int
        The number of rows.
    block : int, default BLOCK_ROWS
        Rows per block.

    Returns
    -------
    Iterator[tuple[int, int]]
        The half-open row ranges, in order.

    Examples
    --------
    >>> list(row_blocks(5, 2))
    [(0, 2), (2, 4), (4, 5)]
    """
    for start in range(0, n, block):
        yield start, min(n, start + block)


def prepared(x: np.ndarray, metric: str) -> np.ndarray:
    """The block ``x`` as the index sees it: float32 C-contiguous, normalized for cosine.

    Parameters
    ----------
    x : numpy.ndarray
        Rows of embeddings (any float dtype); never modified.
    metric : str
        ``"cosine"`` normalizes every row (a zero row stays zero); ``"euclidean"`` and
        ``"ip"`` only convert.

    Returns
    -------
    numpy.ndarray
        float32 C-contiguous rows (``x`` itself when it already is one and the metric
        does not normalize).

    Examples
    --------
    >>> prepared(np.array([[3.0, 4.0], [0.0, 0.0]]), "cosine").tolist()
    [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    if metric != "cosine":
        return np.ascontiguousarray(x, dtype=np.float32)
    # Norms in float64: in float32 the squares of ~1e20 overflow (NaN vectors) and those
    # of ~1e-30 underflow (zero vectors), so the result would depend on the scale.
    norms = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64))
    out = np.array(x, dtype=np.float32, order="C", copy=True)  # never normalize the caller's data
    out *= (1.0 / np.where(norms > 0, norms, 1.0))[:, None]  # computed in float64, stored in float32
    return out


__all__ = ["BLOCK_ROWS", "row_blocks", "prepared"]
