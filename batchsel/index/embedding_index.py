"""The k-NN index over embeddings: :class:`EmbeddingIndex` (faiss: flat, IVF or HNSW) and the
:func:`knn_graph` shortcut. How rows reach faiss, the IVF index and the affinity graphs are
this package's other modules (:mod:`batchsel.index`)."""

from __future__ import annotations

import logging
import math
from typing import Any

import faiss
import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from batchsel.core.checks import (
    check_int,
    check_metric,
    check_scale,
    check_seed,
    load_embeddings,
)
from batchsel.index.affinity import (
    check_kernel,
    clipped_weights,
    cosine_of_pairs,
    graph_of_neighbours,
    median_sigma2,
    sigma_squared,
    squared_distances,
)
from batchsel.index.ivf import (
    ivf_list_blocks,
    train_ivf,
    tune_nprobe,
)
from batchsel.index.neighbor_lists import check_found, without_self
from batchsel.index.vectors import BLOCK_ROWS, prepared, row_blocks

logger = logging.getLogger(__name__)

METRICS = ("cosine", "euclidean", "ip")
KINDS = ("auto", "flat", "ivf", "hnsw")

# kind="auto" switches from exact to IVF search above this many points. The exact k-NN
# graph costs N^2 d, the IVF graph (tuned nprobe, build included) far less, and IVF is
# faster from about 10k points on (benchmarks/bench_index.py measures both). But only
# exact search is right on every data set (IVF needed nprobe 32-64 and still fell short on
# weakly clustered data), so exact search is kept while it costs seconds: up to 50k points.
AUTO_EXACT_MAX = 50_000


class EmbeddingIndex:
    """A faiss index over ``N x d`` embeddings, for k-NN search and k-NN graphs.

    Parameters
    ----------
    embeddings : array-like, torch.Tensor or path
        ``N x d`` array (any float dtype; float32 C-contiguous input is used without a
        copy), torch tensor, or the path of a ``.npy`` file (opened memory-mapped).
    metric : str, default "cosine"
        ``"cosine"`` (vectors normalized, inner product), ``"euclidean"`` (distances
        are *squared* euclidean, as faiss returns them; ``"l2"``, faiss's name, is a
        synonym) or ``"ip"`` (raw inner product, larger is closer). faiss computes in
        float32: for ``"euclidean"`` and ``"ip"``,
        embeddings whose squared norms overflow or underflow float32 (row norms beyond
        about 6e18, or all below 1e-15) raise ``ValueError`` (rescale them); ``"cosine"``
        normalizes in float64 and takes any scale.
    kind : str, default "auto"
        ``"flat"`` exact search; ``"ivf"`` inverted lists (``nlist = 2 sqrt(N)``, search
        ``nprobe`` lists); ``"hnsw"`` graph index; ``"auto"`` exact up to
        ``AUTO_EXACT_MAX`` points, IVF beyond.
    nprobe : int or None, default None
        IVF lists searched per query; search time grows linearly with it. ``None``
        (default): the smallest of ``NPROBE_STEPS`` (4 .. 64) whose recall@10, measured on
        a sample of the indexed points against exhaustive search, reaches
        ``NPROBE_TARGET`` (0.97); the choice is ``nprobe_``, its recall ``recall_``. A
        warning is logged when 64 stays below 0.95 (use ``kind="hnsw"`` for such data).
    hnsw_m, ef_search : int, default 32, 64
        HNSW graph degree and search breadth.
    progress : bool, default True
        tqdm progress bars on long work.
    seed : int, default 0
        Seed of the IVF training sample and k-means.

    See Also
    --------
    knn_graph : the k-NN graph in one call.
    batchsel.distributed.sharded.ShardedIndex : the same index sharded over ranks.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.random.default_rng(0).normal(size=(200, 8)).astype(np.float32)
    >>> index = EmbeddingIndex(x, metric="euclidean", progress=False)
    >>> D, I = index.search(x[:3], k=2)
    >>> I[:, 0].tolist()
    [0, 1, 2]
    >>> g = index.knn_graph(k=5)
    >>> g.shape, (g != g.T).nnz
    ((200, 200), 0)
    """

    #: the global index of the first row :meth:`neighbors` searches (a shard's offset; 0 for a whole index)
    first_row = 0

    def __init__(
        self,
        embeddings: Any,
        metric: str = "cosine",
        kind: str = "auto",
        *,
        nprobe: int | None = None,
        hnsw_m: int = 32,
        ef_search: int = 64,
        progress: bool = True,
        seed: int = 0,
    ) -> None:
        metric = check_metric(metric, METRICS)
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        self.embeddings = load_embeddings(embeddings)
        if metric != "cosine":
            # faiss computes (squared) distances and inner products of the raw vectors in
            # float32: out of range they overflow or underflow and the neighbours are
            # garbage or missing (-1). Cosine normalizes first and takes any scale.
            check_scale(self.embeddings, "embeddings")
        self.metric = metric
        self.num_examples, self.dim = self.embeddings.shape
        self.kind = kind if kind != "auto" else ("flat" if self.num_examples <= AUTO_EXACT_MAX else "ivf")
        self.nprobe = None if nprobe is None else check_int(nprobe, "nprobe", minimum=1)
        self.hnsw_m = check_int(hnsw_m, "hnsw_m", minimum=2)
        self.ef_search = check_int(ef_search, "ef_search", minimum=1)
        self.progress = progress
        self.seed = check_seed(seed)
        self.index: Any = self._build()

    # -- construction -----------------------------------------------------------------
    def _prepared(self, x: np.ndarray) -> np.ndarray:
        """The block as the index sees it (:func:`batchsel.index.vectors.prepared`)."""
        return prepared(x, self.metric)

    def _build(self) -> Any:  # a flat, IVF or HNSW faiss index: their attributes differ
        n, d = self.num_examples, self.dim
        faiss_metric = faiss.METRIC_L2 if self.metric == "euclidean" else faiss.METRIC_INNER_PRODUCT
        if self.kind == "flat":
            index: Any = faiss.IndexFlat(d, faiss_metric)
        elif self.kind == "ivf":
            index = self._trained_ivf(self.embeddings, faiss_metric)
        else:
            index = faiss.IndexHNSWFlat(d, self.hnsw_m, faiss_metric)
            index.hnsw.efSearch = self.ef_search
        logger.info("adding %d x %d vectors to a %s index (%s)", n, d, self.kind, self.metric)
        bar = tqdm(total=n, desc="index add", unit="pt", disable=not self.progress or n <= BLOCK_ROWS, leave=False)
        for start, stop in row_blocks(n):
            index.add(self._prepared(self.embeddings[start:stop]))
            bar.update(stop - start)
        bar.close()
        if self.kind == "ivf":
            self.nprobe_ = self._tune_nprobe(index) if self.nprobe is None else min(self.nprobe, index.nlist)
            index.nprobe = self.nprobe_
        return index

    def _trained_ivf(self, data: np.ndarray, faiss_metric: int) -> faiss.IndexIVFFlat:
        """An empty IVF index over ``data``'s shape, its quantizer trained on a seeded
        sample of ``data`` (:func:`batchsel.index.ivf.train_ivf`; batchsel.distributed.sharded
        trains it once and shares it)."""
        index, self.train_size_ = train_ivf(data, self.metric, faiss_metric, self.seed)
        return index

    def _search_same(self, index: faiss.Index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Search prepared ``queries`` (the same on every rank of a sharded index)."""
        return index.search(queries, k)

    def _tune_nprobe(self, index: faiss.IndexIVF) -> int:
        """The nprobe :func:`batchsel.index.ivf.tune_nprobe` chooses, through this index's
        own search (every shard's, for a sharded index); sets ``recall_``."""
        nprobe, self.recall_ = tune_nprobe(
            index, self.num_examples, self.seed, lambda rows: self._prepared(self.rows_of(rows)), self._search_same
        )
        return nprobe

    # -- search -----------------------------------------------------------------------
    def search(self, queries: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest indexed points of each query.

        Parameters
        ----------
        queries : array-like, torch.Tensor or path
            ``M x d`` query vectors (as ``embeddings``).
        k : int
            Neighbours per query, at most ``N``.

        Returns
        -------
        tuple[numpy.ndarray, numpy.ndarray]
            ``(distances, indices)``, both ``M x k``, nearest first (squared L2 for
            ``"euclidean"``, similarity for ``"cosine"`` / ``"ip"``).

        Examples
        --------
        >>> x = np.eye(3, dtype=np.float32)
        >>> EmbeddingIndex(x, progress=False).search(x[:1], k=1)[1].tolist()
        [[0]]
        """
        q = load_embeddings(queries, name="queries")
        if q.shape[1] != self.dim:
            raise ValueError(f"queries have dimension {q.shape[1]} but the index has dimension {self.dim}")
        k = check_int(k, "k", minimum=1, maximum=self.num_examples)
        return self._search_blocks(q, k, desc="search")

    def _search_blocks(self, q: np.ndarray, k: int, desc: str) -> tuple[np.ndarray, np.ndarray]:
        m = q.shape[0]
        distances = np.empty((m, k), dtype=np.float32)
        indices = np.empty((m, k), dtype=np.int64)
        bar = tqdm(total=m, desc=desc, unit="q", disable=not self.progress or m <= BLOCK_ROWS, leave=False)
        for start, stop in row_blocks(m):
            distances[start:stop], indices[start:stop] = self.index.search(self._prepared(q[start:stop]), k)
            bar.update(stop - start)
        bar.close()
        return distances, indices

    def neighbors(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest *other* points of every indexed point.

        Self matches are removed (also when duplicates make faiss return another point
        at distance 0 first: :func:`batchsel.index.neighbor_lists.without_self`); a
        missing neighbour of an approximate index is -1.

        Parameters
        ----------
        k : int
            Neighbours per point, fewer than ``N``.

        Returns
        -------
        tuple[numpy.ndarray, numpy.ndarray]
            ``(D, I)``, ``N x k``, nearest first.

        Examples
        --------
        >>> x = np.array([[0.0], [1.0], [3.0]], dtype=np.float32)
        >>> EmbeddingIndex(x, metric="euclidean", progress=False).neighbors(1)[1].tolist()
        [[1], [0], [1]]
        """
        k = check_int(k, "k", minimum=1)
        if k >= self.num_examples:
            raise ValueError(f"k must be smaller than the number of points ({self.num_examples}), got {k}")
        if self.kind == "ivf":
            D, I = self._ivf_self_search(k + 1)
        else:
            D, I = self._search_blocks(self.embeddings, k + 1, desc="knn graph")
        check_found(D, I, self.kind == "flat", self.num_examples)
        return without_self(D, I, self.first_row, k)

    def _ivf_self_search(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Search every indexed point, taking the queries list by list from the IVF
        index itself (:func:`batchsel.index.ivf.ivf_list_blocks`): consecutive queries
        then probe the same lists, which stay in cache (faster than data order), the
        vectors are already prepared (normalized for cosine), and a memory-mapped file is
        not read again."""
        n = self.num_examples
        distances = np.empty((n, k), dtype=np.float32)
        indices = np.empty((n, k), dtype=np.int64)
        bar = tqdm(total=n, desc="knn graph", unit="q", disable=not self.progress or n <= BLOCK_ROWS, leave=False)
        for rows, queries in ivf_list_blocks(self.index, self.dim):
            distances[rows], indices[rows] = self.index.search(queries, k)
            bar.update(len(rows))
        bar.close()
        return distances, indices

    # -- the k-NN graph ---------------------------------------------------------------
    def knn_graph(
        self,
        k: int = 10,
        kernel: str = "rbf",
        symmetrize: bool = True,
        sigma: float | None = None,
        self_weight: float | None = None,
    ) -> sp.csr_matrix:
        """The k-NN affinity graph: ``N x N`` CSR, float32 weights in (0, 1], int64
        indices, no self loops unless ``self_weight`` is given.

        A symmetrized graph is marked as symmetric, so that the sparse set functions
        (``FacilityLocation(graph)``, ...) skip their symmetry check; replacing its arrays
        drops the mark, but an in-place edit that breaks the symmetry must be followed by
        ``symmetric=False`` (or None) where the graph is used. An exact index that
        misses neighbours (non-finite distances) or a graph with no edge at all raises
        ``ValueError``.

        Parameters
        ----------
        k : int, default 10
            Neighbours per point.
        kernel : str, default "rbf"
            ``"rbf"`` w = exp(-d^2 / sigma^2) with d the euclidean distance (of the
            normalized vectors for ``metric="cosine"``); ``"cosine"`` w = cosine
            similarity, clipped to (0, 1]; ``"connectivity"`` w = 1.
        symmetrize : bool, default True
            Keep an edge when either end lists the other, with the larger weight
            (w = max(W, W^T)).
        sigma : float or None, default None
            The RBF width; ``None``: sigma^2 = the median over points of the squared
            distance to the k-th neighbour (so the typical k-th neighbour gets weight
            1/e; :func:`batchsel.index.affinity.median_sigma2`). The width used is
            ``sigma_``.
        self_weight : float or None, default None
            In (0, 1]: every point has that weight to itself on the diagonal (a sparse
            facility location needs it: each item covers itself).

        Returns
        -------
        scipy.sparse.csr_matrix
            The ``N x N`` graph.

        Examples
        --------
        >>> x = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32)
        >>> g = EmbeddingIndex(x, metric="euclidean", progress=False).knn_graph(k=3, self_weight=1.0)
        >>> g.shape, float(g.diagonal().min()), g.indices.dtype
        ((50, 50), 1.0, dtype('int64'))
        """
        check_kernel(kernel, self.metric)
        D, I = self.neighbors(k)
        valid = I >= 0  # an approximate index may find fewer than k neighbours
        w = self._edge_weights(D, I, valid, kernel, sigma)
        return graph_of_neighbours(w, I, valid, k, symmetrize, self_weight)

    def _edge_weights(
        self, D: np.ndarray, I: np.ndarray, valid: np.ndarray, kernel: str, sigma: float | None
    ) -> np.ndarray:
        """float32 kernel weights in (0, 1] of the neighbour lists ``(D, I)``."""
        if kernel == "connectivity":
            w = np.ones_like(D)
        elif kernel == "rbf":
            sq = squared_distances(D, self.metric)
            sigma2 = self._rbf_sigma2(sq, valid) if sigma is None else sigma_squared(sigma)
            self.sigma_ = math.sqrt(sigma2)
            w = np.exp(-sq / sigma2)
        else:
            w = D if self.metric == "cosine" else cosine_of_pairs(self.embeddings, I, self.rows_of)
        return clipped_weights(w)

    def _rbf_sigma2(self, sq: np.ndarray, valid: np.ndarray) -> float:
        """The default sigma^2 (:func:`batchsel.index.affinity.median_sigma2`)."""
        return median_sigma2(sq, valid)

    def rows_of(self, indices: np.ndarray) -> np.ndarray:
        """The embeddings of the given points, as the index holds them.

        Parameters
        ----------
        indices : numpy.ndarray
            Global point indices (int).

        Returns
        -------
        numpy.ndarray
            ``len(indices) x d`` float32, not normalized (the input's rows).
        """
        return self.embeddings[indices]

    def __repr__(self) -> str:
        return f"EmbeddingIndex(N={self.num_examples}, d={self.dim}, metric={self.metric!r}, kind={self.kind!r})"


def knn_graph(
    embeddings: Any,
    k: int = 10,
    metric: str = "euclidean",
    kernel: str = "rbf",
    symmetrize: bool = True,
    sigma: float | None = None,
    self_weight: float | None = None,
    **index_kwargs: Any,
) -> sp.csr_matrix:
    """The k-NN affinity graph of ``embeddings`` in one call.

    Shortcut: ``EmbeddingIndex(embeddings, metric, **index_kwargs).knn_graph(k, kernel,
    symmetrize, sigma, self_weight)``.

    Parameters
    ----------
    embeddings : array-like, torch.Tensor or path
        ``N x d`` embeddings (as :class:`EmbeddingIndex`).
    k, kernel, symmetrize, sigma, self_weight
        As :meth:`EmbeddingIndex.knn_graph` (defaults 10, ``"rbf"``, True, None, None).
    metric : str, default "euclidean"
        As :class:`EmbeddingIndex` (note the default differs from the class's).
    **index_kwargs
        Other arguments of :class:`EmbeddingIndex` (``kind``, ``nprobe``, ``progress``, ...).

    Returns
    -------
    scipy.sparse.csr_matrix
        The ``N x N`` graph, as :meth:`EmbeddingIndex.knn_graph` returns it.

    Examples
    --------
    >>> x = np.random.default_rng(0).normal(size=(40, 4)).astype(np.float32)
    >>> knn_graph(x, k=3, progress=False).shape
    (40, 40)
    """
    index = EmbeddingIndex(embeddings, metric=metric, **index_kwargs)
    return index.knn_graph(k=k, kernel=kernel, symmetrize=symmetrize, sigma=sigma, self_weight=self_weight)
