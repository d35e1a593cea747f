"""Facility location: f(S) = sum_v max_{s in S} sim(s, v), over a dense or a sparse (CSR)
similarity matrix, or built from embeddings."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import numpy as np
import scipy.sparse as sp

from batchsel.core.blas import one_blas_thread
from batchsel.core.checks import check_int, check_scale, load_embeddings
from batchsel.submodular import kernels
from batchsel.submodular.functions.base import SetFunction, as_similarity, check_symmetric_flag, row, symmetric_drops

logger = logging.getLogger(__name__)

METRICS = ("euclidean", "cosine", "corr")
PRECISIONS = ("single", "double")

# from_embeddings(neighbors=None) builds a dense N x N float32 similarity up to this many
# points (1.6 GB at 20 000) and a sparse k-NN similarity beyond.
DENSE_MAX = 20_000
# Neighbours per point of the sparse similarity when it is chosen automatically.
DEFAULT_NEIGHBORS = 20
# Rows per block of the in-place transforms (keeps a block in cache) and of the float64
# Gram blocks (bounds the float64 temporary to BLOCK_ROWS x N).
_TRANSFORM_ROWS = 64
_GRAM_ROWS = 1024
# Gram products of at most this many multiply-adds (N^2 d; 2048^2 x 64) run on one BLAS
# thread (batchsel.core.blas): the small similarities of SMDL pools and per-class coresets are
# bound by writing the N x N output, and two threads gained nothing at 1024 x 64 and
# 4096 x 64 on 2 cores while oversubscribing the cores next to a training step; larger
# products (4096 x 512) gain from more threads and keep every thread.
_ONE_THREAD_MACS = 1 << 28


def _blas_threads_for(n: int, d: int) -> contextlib.AbstractContextManager:
    """One BLAS thread for a small ``n x n x d`` Gram product, the default otherwise."""
    return one_blas_thread() if n * n * d <= _ONE_THREAD_MACS else contextlib.nullcontext()


class FacilityLocation(SetFunction):
    """Facility location ``f(S) = sum_v max_{s in S} S[s, v]`` (0 for an empty S).

    Picks items that represent the ground set well: each item v is "covered" by its most
    similar selected item. Row ``j`` of the similarity is item j's similarity to every v;
    the similarity must be non-negative (a ``ValueError`` says so otherwise: shift it, or
    use a non-negative kernel). A sparse similarity treats missing entries as 0, so store
    the self-similarities on the diagonal (:meth:`from_embeddings` does).

    Parameters
    ----------
    similarity:
        Dense ``n x n`` array (float32 and float64 arrays are used without a copy) or a
        scipy sparse matrix (kept as CSR, int64 indices, float32 values; float64 kept).
    symmetric:
        Sparse similarity only: whether it is symmetric, which lets lazy greedy update
        exactly the gains an add lowers instead of re-evaluating stale ones (several
        times faster on large k-NN graphs). None checks it (one transposition); True is
        trusted (a wrong True makes lazy greedy's result wrong).

    Attributes
    ----------
    similarity:
        The stored matrix.
    floor:
        The similarity an uncovered item counts with (0). ``from_embeddings`` with
        ``metric="euclidean"`` stores ``-d^2`` (squared euclidean distance) with
        ``floor = -max d^2``: the same function as apricot's ``max d^2 - d^2`` with floor 0,
        and in float32 the small distances, which decide the late gains, keep their precision.
    sparse:
        Whether the similarity is CSR.
    symmetric:
        Whether it is a symmetric CSR matrix.

    Example
    -------
    >>> import numpy as np
    >>> sim = np.array([[1.0, 0.9, 0.1], [0.9, 1.0, 0.2], [0.1, 0.2, 1.0]])
    >>> f = FacilityLocation(sim)
    >>> f.gains([0, 1, 2]).round(2).tolist()
    [2.0, 2.1, 1.3]
    >>> f.add(1)
    2.1
    >>> f.gains([0, 2]).round(2).tolist()
    [0.1, 0.8]
    >>> round(f.evaluate([1, 2]), 2)
    2.9
    """

    def __init__(self, similarity: Any, symmetric: bool | None = None) -> None:
        self._setup(as_similarity(similarity, "similarity"), 0.0, symmetric)

    def _setup(self, similarity: np.ndarray | sp.csr_matrix, floor: float, symmetric: bool | None = None) -> None:
        self.similarity = similarity
        self.floor = float(floor)
        self.sparse = not isinstance(similarity, np.ndarray)
        # With a symmetric sparse similarity the rows of the covered items tell whose gains
        # an add lowers, and by how much (_decrements): lazy greedy then re-evaluates little.
        self.symmetric = self.sparse and check_symmetric_flag(similarity, symmetric)
        super().__init__(similarity.shape[0])

    @classmethod
    def _from_checked(
        cls, similarity: np.ndarray | sp.csr_matrix, floor: float, symmetric: bool | None = None
    ) -> "FacilityLocation":
        self = cls.__new__(cls)
        self._setup(similarity, floor, symmetric)
        return self

    @classmethod
    def from_embeddings(
        cls,
        embeddings: Any,
        metric: str = "euclidean",
        neighbors: int | None = None,
        *,
        precision: str = "single",
        kernel: str | None = None,
        dense_max: int = DENSE_MAX,
        progress: bool = False,
        **index_kwargs: Any,
    ) -> "FacilityLocation":
        """Facility location over the similarity of ``N x d`` embeddings.

        Dense (``neighbors=None`` and ``N <= dense_max``, default 20 000): apricot's
        similarity, so results compare one to one with ``apricot.FacilityLocationSelection``
        — ``"euclidean"``: ``max d^2 - d^2`` with d^2 the squared euclidean distance;
        ``"cosine"``: the squared cosine similarity; ``"corr"``: the squared Pearson
        correlation of the rows (the cosine of the row-centered embeddings; apricot's
        ``"corr"``). It costs one ``N x N`` float32 matrix,
        computed with one BLAS product of the centered embeddings plus the norms, in place
        (float64 with ``precision="double"``).

        Sparse (``neighbors=k``, or ``N > dense_max`` with ``neighbors=None``, then k = 20):
        the k-NN affinity graph of :class:`batchsel.EmbeddingIndex` (``kernel``: ``"rbf"``
        for euclidean, ``"cosine"`` for cosine, or any kernel of ``knn_graph``) with 1 on
        the diagonal (every item covers itself; ``"corr"``: the cosine graph of the
        row-centered embeddings); ``index_kwargs`` go to ``EmbeddingIndex``.

        Scale: ``"euclidean"`` in single precision raises ``ValueError`` when squared
        distances would overflow or underflow float32 (row norms beyond about 6e18 or all
        below 1e-15 after centering; the k-NN graph: before centering): rescale the
        embeddings, or use ``precision="double"`` (dense). ``"cosine"`` normalizes in
        float64 and gives the same result at any scale.

        ``precision``: ``"single"`` computes the dense Gram matrix in float32 (the fast
        path, one float32 BLAS product). Its rounding error is about 1e-7 of the squared
        norms (after centering), which is large next to the distances when the points form
        tight clusters far from their mean, or when distances concentrate (high
        dimension): gains are then only good to ~1e-3 relative and near-tied picks may
        come in another order than apricot's float64 (the objective value stays within
        ~1e-6). ``"double"`` computes the Gram blocks in float64 (slower than the float32
        product) and keeps a float64 similarity (twice the memory and twice
        the memory traffic of the greedy passes): apricot's arithmetic, and its selections.

        >>> import numpy as np
        >>> x = np.random.default_rng(0).normal(size=(100, 8)).astype(np.float32)
        >>> f = FacilityLocation.from_embeddings(x)
        >>> f.sparse, f.n
        (False, 100)
        >>> FacilityLocation.from_embeddings(x, neighbors=5).sparse
        True
        """
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        x = load_embeddings(embeddings)
        n = x.shape[0]
        dense_max = check_int(dense_max, "dense_max", minimum=0)
        if neighbors is None and n > dense_max:
            neighbors = min(DEFAULT_NEIGHBORS, n - 1)
            logger.info("%d points > dense_max=%d: sparse %d-NN similarity", n, dense_max, neighbors)
        if metric == "corr":
            x = _center_rows(x)  # the correlation is the cosine of the row-centered vectors
        if neighbors is not None:
            return cls._from_knn(
                np.ascontiguousarray(x, dtype=np.float32), metric, neighbors, kernel, progress, index_kwargs
            )
        if kernel is not None or index_kwargs:
            raise ValueError("kernel and index arguments apply to the sparse similarity (neighbors=k) only")
        if metric == "euclidean":
            sim = _neg_sq_euclidean(x, precision)
            floor = float(sim.min())
        else:
            sim = _sq_cosine(x, precision)
            floor = 0.0
        return cls._from_checked(sim, floor)

    @classmethod
    def _from_knn(
        cls, x: np.ndarray, metric: str, neighbors: int, kernel: str | None, progress: bool, index_kwargs: dict
    ) -> "FacilityLocation":
        from batchsel.index import EmbeddingIndex  # the dense path does not need faiss

        n = x.shape[0]
        neighbors = check_int(neighbors, "neighbors", minimum=1, maximum=n - 1)
        index = EmbeddingIndex(
            x, metric="euclidean" if metric == "euclidean" else "cosine", progress=progress, **index_kwargs
        )
        # 1 on the diagonal: every item covers itself
        sim = index.knn_graph(
            k=neighbors, kernel=kernel or ("rbf" if metric == "euclidean" else "cosine"), self_weight=1.0
        )
        del index
        return cls._from_checked(sim, 0.0, symmetric=True)  # knn_graph symmetrizes

    # -- state -------------------------------------------------------------------------
    def _reset_state(self) -> None:
        # Coverage of every item: a max of stored values and the floor, hence exact in the
        # similarity's dtype (float32 halves the memory the gain kernels gather from).
        self._cur = np.full(self.n, self.floor, dtype=self.similarity.dtype)

    def _gains(self, idx: np.ndarray) -> np.ndarray:
        return kernels.facility_gains(self.similarity, self._cur, idx)

    def _decrements(self, j: int) -> tuple[np.ndarray, np.ndarray] | None:
        return symmetric_drops(self.similarity, self.symmetric, kernels.facility_drops, self._cur, j)

    def _add(self, j: int) -> None:
        cols, vals = row(self.similarity, j)
        if self.sparse:
            self._cur[cols] = np.maximum(self._cur[cols], vals)
        else:
            np.maximum(self._cur, vals, out=self._cur)

    def _evaluate(self, idx: np.ndarray) -> float:
        cur = np.full(self.n, self.floor, dtype=np.float64)
        if self.sparse:
            s = self.similarity
            kernels.fl_sparse_cover(s.indptr, s.indices, s.data, idx, cur)
        else:
            for start in range(0, idx.size, _TRANSFORM_ROWS):
                np.maximum(cur, self.similarity[idx[start : start + _TRANSFORM_ROWS]].max(axis=0), out=cur)
        return float((cur - self.floor).sum())


class CoverRows(FacilityLocation):
    """Facility location whose items are the rows of a dense ``m x N`` similarity (m
    candidates) covering the N columns: GreeDi's merge step, which needs the similarity of
    the gathered candidates only, not the ``N x N`` matrix."""

    def __init__(self, similarity: np.ndarray, floor: float) -> None:
        self.similarity = similarity
        self.floor = float(floor)
        self.sparse = False
        self.symmetric = False
        SetFunction.__init__(self, similarity.shape[0])

    def _reset_state(self) -> None:
        self._cur = np.full(self.similarity.shape[1], self.floor, dtype=self.similarity.dtype)

    def _evaluate(self, idx: np.ndarray) -> float:
        cur = np.full(self.similarity.shape[1], self.floor, dtype=np.float64)
        for start in range(0, idx.size, _TRANSFORM_ROWS):
            np.maximum(cur, self.similarity[idx[start : start + _TRANSFORM_ROWS]].max(axis=0), out=cur)
        return float((cur - self.floor).sum())


def similarity_from_embeddings(
    embeddings: Any, metric: str = "euclidean", neighbors: int | None = None, **kwargs: Any
) -> np.ndarray | sp.csr_matrix:
    """apricot's similarity of ``N x d`` embeddings, for the functions whose values and not
    only their differences matter (graph cut, sum redundancy, saturated coverage): the
    similarity of :meth:`FacilityLocation.from_embeddings` (same arguments) shifted by its
    floor, so dense euclidean is ``max d^2 - d^2 >= 0`` (cosine, corr and the k-NN graph
    have floor 0 and are returned as they are).

    >>> import numpy as np
    >>> x = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32)
    >>> sim = similarity_from_embeddings(x)
    >>> sim.shape, bool(sim.min() >= 0), bool((np.diagonal(sim) == sim.max()).all())
    ((50, 50), True, True)
    """
    f = FacilityLocation.from_embeddings(embeddings, metric, neighbors, **kwargs)
    sim = f.similarity
    if f.floor:
        sim -= sim.dtype.type(f.floor)  # in place: f is not returned
    return sim


def _center_rows(x: np.ndarray) -> np.ndarray:
    """Each row minus its own mean, in float64 (the input of the correlation)."""
    return x - x.mean(axis=1, keepdims=True, dtype=np.float64)


def rows_similarity(x: np.ndarray, rows: np.ndarray, metric: str) -> np.ndarray:
    """The ``len(rows) x N`` float32 block of ``from_embeddings``' dense similarity
    (``-d^2`` of the centered embeddings for euclidean, squared cosine for cosine and, of
    the row-centered embeddings, for corr)."""
    if metric == "corr":
        x, metric = _center_rows(x), "cosine"
    if metric == "euclidean":
        mean = x.mean(axis=0, dtype=np.float64)
        check_scale(x, "embeddings", center=mean)
        xc = x - mean.astype(np.float32)
        sq = np.einsum("ij,ij->i", xc, xc)
        with _blas_threads_for(int(np.sqrt(rows.size * x.shape[0])), x.shape[1]):
            sim = xc[rows] @ xc.T
        sim *= 2
        sim -= sq
        sim -= sq[rows, None]
        np.minimum(sim, 0, out=sim)
        sim[np.arange(rows.size), rows] = 0
        return sim
    norms = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64))
    xn = (x * (1.0 / np.where(norms > 0, norms, 1.0))[:, None]).astype(np.float32)
    with _blas_threads_for(int(np.sqrt(rows.size * x.shape[0])), x.shape[1]):
        sim = xn[rows] @ xn.T
    np.clip(sim, -1, 1, out=sim)
    np.square(sim, out=sim)
    sim[np.arange(rows.size), rows] = 1
    return sim


# -- dense similarities from embeddings -------------------------------------------------
def _neg_sq_euclidean(x: np.ndarray, precision: str) -> np.ndarray:
    """``-|x_i - x_j|^2`` as an ``N x N`` float32 array (diagonal 0, clipped at 0 like
    scikit-learn's ``euclidean_distances``), from the Gram matrix of the centered
    embeddings (centering changes no distance and shrinks the norms that the formula
    ``|a|^2 + |b|^2 - 2 a.b`` subtracts). ``"single"``: one float32 BLAS product (syrk),
    transformed in place, float32; ``"double"``: float64 Gram blocks, float64."""
    n = x.shape[0]
    mean = x.mean(axis=0, dtype=np.float64)
    if precision == "single":
        # float32 squared distances of data too large overflow (inf - inf = NaN: lazy greedy
        # never settles), of data too small underflow to 0 (every pick ties); say so
        check_scale(x, "embeddings", center=mean)
        xc = x - mean.astype(np.float32)
        with _blas_threads_for(n, x.shape[1]):
            sim = xc @ xc.T  # the one N x N product; becomes the result in place
        del xc
        sq = np.diagonal(sim).copy()  # |a|^2 from the Gram itself: the diagonal ends at 0
        for start in range(0, n, _TRANSFORM_ROWS):
            block = sim[start : start + _TRANSFORM_ROWS]
            block *= 2
            block -= sq
            block -= sq[start : start + _TRANSFORM_ROWS, None]
            np.minimum(block, 0, out=block)
    else:
        xc = x.astype(np.float64) - mean
        sq = np.einsum("ij,ij->i", xc, xc)
        sim = np.empty((n, n), dtype=np.float64)
        for start in range(0, n, _GRAM_ROWS):
            stop = min(n, start + _GRAM_ROWS)
            # Upper block row only (half the flops); the lower part is its transpose.
            with _blas_threads_for(n, x.shape[1]):  # decided on the whole product
                gram = xc[start:stop] @ xc[start:].T
            gram *= 2
            gram -= sq[start:]
            gram -= sq[start:stop, None]
            np.minimum(gram, 0, out=gram)
            sim[start:stop, start:] = gram
            sim[stop:, start:stop] = gram[:, stop - start :].T
            del gram
        del xc
    np.fill_diagonal(sim, 0)
    return sim


def _sq_cosine(x: np.ndarray, precision: str) -> np.ndarray:
    """Squared cosine similarity ``N x N`` (float32; float64 for ``"double"``), diagonal 1
    (apricot's cosine similarity, ``1 - (1 - cos)^2`` turned back into a similarity);
    zero vectors have similarity 0 to every other point."""
    n = x.shape[0]
    dtype = np.float32 if precision == "single" else np.float64
    xn = x.astype(dtype, copy=True)
    # norms in float64 (computed and applied): float32 squares overflow at ~1e19 and
    # underflow at ~1e-23, and the cosine must not depend on the scale
    norms = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64))
    xn *= (1.0 / np.where(norms > 0, norms, 1.0))[:, None]
    with _blas_threads_for(n, x.shape[1]):
        sim = xn @ xn.T
    del xn
    for start in range(0, n, _TRANSFORM_ROWS):
        block = sim[start : start + _TRANSFORM_ROWS]
        np.clip(block, -1, 1, out=block)
        np.square(block, out=block)
    np.fill_diagonal(sim, 1)
    return sim
