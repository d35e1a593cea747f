"""The k-NN affinity graph from neighbour lists: kernel weights, the RBF kernel's default
sigma, and the CSR matrix.

:meth:`EmbeddingIndex.knn_graph <batchsel.index.EmbeddingIndex.knn_graph>` builds the
whole ``N x N`` graph with these pieces, and
:meth:`ShardedIndex.knn_graph <batchsel.distributed.sharded.ShardedIndex.knn_graph>` a
rank's rows of it (its sigma the median over all ranks).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import scipy.sparse as sp

from batchsel.core.checks import mark_symmetric, to_int64
from batchsel.index.vectors import row_blocks

KERNELS = ("rbf", "cosine", "connectivity")


def check_kernel(kernel: str, metric: str) -> None:
    """``ValueError`` unless ``kernel`` is one of :data:`KERNELS` and works with ``metric``.

    Parameters
    ----------
    kernel : str
        ``"rbf"``, ``"cosine"`` or ``"connectivity"``.
    metric : str
        The index's metric: ``"rbf"`` needs a distance (``"euclidean"`` or ``"cosine"``).

    Examples
    --------
    >>> check_kernel("rbf", "euclidean")
    >>> check_kernel("rbf", "ip")
    Traceback (most recent call last):
    ...
    ValueError: kernel='rbf' needs a distance: use metric='euclidean' or 'cosine', or kernel='cosine'
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    if kernel == "rbf" and metric == "ip":
        raise ValueError("kernel='rbf' needs a distance: use metric='euclidean' or 'cosine', or kernel='cosine'")


def check_self_weight(self_weight: float | None) -> None:
    """``ValueError`` unless ``self_weight`` is None or in (0, 1].

    Examples
    --------
    >>> check_self_weight(1.0)
    >>> check_self_weight(0)
    Traceback (most recent call last):
    ...
    ValueError: self_weight must be in (0, 1] or None, got 0
    """
    if self_weight is not None and not 0 < self_weight <= 1:
        raise ValueError(f"self_weight must be in (0, 1] or None, got {self_weight!r}")


def empty_graph_error(k: int, n: int) -> ValueError:
    """The error of a k-NN graph in which the index found no neighbour at all."""
    return ValueError(
        f"the {k}-NN graph of {n} points is empty: the index found no neighbours; rescale "
        f"the embeddings or use kind='flat'"
    )


def squared_distances(D: np.ndarray, metric: str) -> np.ndarray:
    """Squared euclidean distances from the index's scores ``D``: themselves for
    ``"euclidean"``, ``2 - 2 cos`` (of the unit vectors) for ``"cosine"``.

    Examples
    --------
    >>> squared_distances(np.array([[1.0, 0.5]]), "cosine").tolist()
    [[0.0, 1.0]]
    """
    return D if metric == "euclidean" else np.maximum(2.0 - 2.0 * D, 0.0)  # |a-b|^2 of unit vectors


def sigma_squared(sigma: float) -> float:
    """``sigma ** 2`` of a given RBF width, checked (``ValueError`` unless > 0)."""
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    return float(sigma) ** 2


def median_sigma2(sq: np.ndarray, valid: np.ndarray) -> float:
    """The RBF kernel's default sigma^2: the median squared distance to the k-th
    neighbour (the typical k-th neighbour then gets weight 1/e); when more than half the
    points have k duplicates, the mean positive squared distance (1 if there is none).

    Parameters
    ----------
    sq : numpy.ndarray
        Squared distances to the neighbours, ``N x k``.
    valid : numpy.ndarray
        Which neighbours exist (an approximate index may miss some).

    Returns
    -------
    float
        sigma^2 > 0.

    Examples
    --------
    >>> median_sigma2(np.array([[1.0, 4.0], [1.0, 9.0], [2.0, 2.0]]), np.ones((3, 2), bool))
    4.0
    """
    kth = sq[valid[:, -1], -1]
    sigma2 = float(np.median(kth)) if kth.size else 0.0
    if sigma2 <= 0:  # more than half the points have k duplicates
        positive = sq[valid & (sq > 0)]
        sigma2 = float(positive.mean()) if positive.size else 1.0
    return sigma2


def clipped_weights(w: np.ndarray) -> np.ndarray:
    """Kernel weights as float32 in (0, 1] (a weight 0 would drop the edge)."""
    return np.clip(w, np.finfo(np.float32).tiny, 1.0).astype(np.float32, copy=False)


def cosine_of_pairs(
    embeddings: np.ndarray, cols: np.ndarray, rows_of: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """Cosine similarity of every row i of ``embeddings`` and each of its neighbours
    ``cols[i]`` (``-1``: none, any value), in float64, in blocks.

    Parameters
    ----------
    embeddings : numpy.ndarray
        The rows whose neighbours ``cols`` lists (a shard's rows, for a sharded index).
    cols : numpy.ndarray
        Global indices of the neighbours, ``len(embeddings) x k``.
    rows_of : callable
        ``rows_of(indices)``: the embeddings of global row indices.

    Returns
    -------
    numpy.ndarray
        float32 similarities, the shape of ``cols``.

    Examples
    --------
    >>> x = np.array([[1.0, 0.0], [1.0, 1.0]])
    >>> cosine_of_pairs(x, np.array([[1], [0]]), lambda i: x[i]).astype(float).round(3).tolist()
    [[0.707], [0.707]]
    """
    out = np.empty(cols.shape, dtype=np.float32)
    for start, stop in row_blocks(cols.shape[0]):
        # float64: float32 dots and norms of large vectors overflow
        a = embeddings[start:stop].astype(np.float64)
        b = rows_of(np.where(cols[start:stop] >= 0, cols[start:stop], 0)).astype(np.float64)
        dots = np.einsum("id,ikd->ik", a, b)
        norms = np.linalg.norm(a, axis=1)[:, None] * np.linalg.norm(b, axis=2)
        out[start:stop] = dots / np.maximum(norms, 1e-12)
    return out


def neighbour_csr(w: np.ndarray, I: np.ndarray, valid: np.ndarray, shape: tuple[int, int]) -> sp.csr_matrix:
    """The CSR matrix whose row i holds the valid neighbours ``I[i]`` with weights
    ``w[i]``, in their order: built directly (a COO conversion would sort all entries
    again), not symmetrized.

    Parameters
    ----------
    w, I : numpy.ndarray
        Weights and global column indices of every row's neighbours, ``rows x k``.
    valid : numpy.ndarray
        Which entries exist.
    shape : tuple[int, int]
        ``(rows, N)``.

    Returns
    -------
    scipy.sparse.csr_matrix
        The graph's rows.

    Examples
    --------
    >>> g = neighbour_csr(np.ones((2, 1)), np.array([[1], [-1]]), np.array([[True], [False]]), (2, 2))
    >>> g.toarray().tolist()
    [[0.0, 1.0], [0.0, 0.0]]
    """
    indptr = np.zeros(shape[0] + 1, dtype=np.int64)
    np.cumsum(valid.sum(axis=1), out=indptr[1:])
    return sp.csr_matrix((w[valid], I[valid], indptr), shape=shape)


def with_diagonal(graph: sp.csr_matrix, self_weight: float) -> sp.csr_matrix:
    """``graph`` (square, int64 indices, sorted, no self loops) with ``self_weight`` on
    the diagonal (float32), indices kept int64.

    Examples
    --------
    >>> g = sp.csr_matrix(np.array([[0, 1], [1, 0]], dtype=np.float32))
    >>> g.indices, g.indptr = g.indices.astype(np.int64), g.indptr.astype(np.int64)
    >>> with_diagonal(g, 0.5).toarray().tolist()
    [[0.5, 1.0], [1.0, 0.5]]
    """
    from batchsel.core.graph import insert_diagonal  # numba: loaded when a diagonal is asked for

    n = graph.shape[0]
    indptr, indices, data = insert_diagonal(graph.indptr, graph.indices, graph.data, np.float32(self_weight))
    out = sp.csr_matrix((data, indices, indptr), shape=(n, n))
    out.indices, out.indptr = indices, indptr  # scipy may downcast them
    return out


def graph_of_neighbours(
    w: np.ndarray, I: np.ndarray, valid: np.ndarray, k: int, symmetrize: bool, self_weight: float | None
) -> sp.csr_matrix:
    """The ``N x N`` k-NN graph of every point's neighbour lists, as
    :meth:`EmbeddingIndex.knn_graph <batchsel.index.EmbeddingIndex.knn_graph>` returns it.

    Parameters
    ----------
    w, I : numpy.ndarray
        Kernel weights and indices of every point's neighbours, ``N x k``.
    valid : numpy.ndarray
        Which neighbours exist; none at all raises ``ValueError``.
    k : int
        The neighbours per point, for the message.
    symmetrize : bool
        w = max(W, W^T), and the result marked as symmetric.
    self_weight : float or None
        In (0, 1]: that weight on the diagonal (:func:`with_diagonal`).

    Returns
    -------
    scipy.sparse.csr_matrix
        Sorted indices, int64.

    Examples
    --------
    >>> g = graph_of_neighbours(np.ones((2, 1)), np.array([[1], [0]]), np.ones((2, 1), bool), 1, True, None)
    >>> g.toarray().tolist(), g.indices.dtype
    ([[0.0, 1.0], [1.0, 0.0]], dtype('int64'))
    """
    n = I.shape[0]
    if not valid.any():
        raise empty_graph_error(k, n)
    graph = neighbour_csr(w, I, valid, (n, n))
    if symmetrize:
        graph = graph.maximum(graph.T).tocsr()
    graph.sort_indices()
    graph = to_int64(graph)
    if self_weight is not None:
        check_self_weight(self_weight)
        graph = with_diagonal(graph, self_weight)
    return mark_symmetric(graph) if symmetrize else graph


__all__ = [
    "KERNELS",
    "check_kernel",
    "check_self_weight",
    "empty_graph_error",
    "squared_distances",
    "sigma_squared",
    "median_sigma2",
    "clipped_weights",
    "cosine_of_pairs",
    "neighbour_csr",
    "with_diagonal",
    "graph_of_neighbours",
]
