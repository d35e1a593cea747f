"""k-nearest-neighbour search and k-NN affinity graphs over embeddings, with faiss.

numpy in, ``(distances, indices)`` out, as in faiss. Embeddings may be a memory-mapped
``.npy`` file: they are read in blocks and never copied whole by this module (faiss keeps
its own copy inside a flat or IVF index, as it must).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Iterator

import faiss
import numpy as np
import scipy.sparse as sp
from faiss.contrib.inspect_tools import get_invlist
from tqdm.auto import tqdm

from batchsel.core.checks import (
    check_int,
    check_metric,
    check_scale,
    check_seed,
    load_embeddings,
    mark_symmetric,
    to_int64,
)

logger = logging.getLogger(__name__)

METRICS = ("cosine", "euclidean", "ip")
KINDS = ("auto", "flat", "ivf", "hnsw")
KERNELS = ("rbf", "cosine", "connectivity")

# kind="auto" switches from exact to IVF search above this many points. Measured with
# benchmarks/bench_index.py (2 shared cores, d = 128, k = 10, gaussian mixture): the exact
# k-NN graph took 0.29 / 1.97 / 7.2 / 30.8 s at N = 10k / 25k / 50k / 100k (it grows as
# N^2 d), the IVF graph (tuned nprobe, build included) 0.13 / 0.46 / 1.29 / 4.46 s with
# recall@10 1.000. IVF is faster from 10k on, but only exact search is right on every
# data set (IVF needed nprobe 32-64 and still fell short on weakly clustered data), so
# exact search is kept while it costs seconds: up to 50k points.
AUTO_EXACT_MAX = 50_000

# IVF shape: nlist = IVF_LISTS_PER_SQRT_N * sqrt(N) lists, k-means on IVF_TRAIN_PER_LIST
# points per list for IVF_TRAIN_ITERATIONS rounds. Building a k-NN graph costs about
# N * (nlist + nprobe * N / nlist) distances plus nlist^2 * IVF_TRAIN_PER_LIST *
# IVF_TRAIN_ITERATIONS for training; 2 sqrt(N) lists balance the two for the nprobe we
# use, where 4 sqrt(N) lists and faiss' 25 rounds made training alone cost 70 s at 1M.
IVF_LISTS_PER_SQRT_N = 2.0
IVF_TRAIN_PER_LIST = 40  # faiss asks for >= 39
IVF_TRAIN_ITERATIONS = 10

# nprobe=None tunes nprobe on the data: the first of NPROBE_STEPS whose recall@10 on
# NPROBE_SAMPLE indexed points (against exhaustive search) reaches NPROBE_TARGET. A fixed
# nprobe cannot serve all data: at N = 50k, d = 128, nprobe = 8 gave recall@10 1.000 on
# well separated clusters, 0.84 on overlapping ones and 0.37 on weakly clustered data
# (benchmarks/bench_index.py). The target has a margin over 0.95 for the sampling error.
NPROBE_STEPS = (4, 8, 16, 32, 64)
NPROBE_SAMPLE = 200
NPROBE_TARGET = 0.97

# Rows per block when adding to and searching the index (bounds temporary memory).
BLOCK_ROWS = 1 << 15


def _blocks(n: int, block: int = BLOCK_ROWS) -> Iterator[tuple[int, int]]:
    for start in range(0, n, block):
        yield start, min(n, start + block)


class EmbeddingIndex:
    """A faiss index over ``N x d`` embeddings, for k-NN search and k-NN graphs.

    Parameters
    ----------
    embeddings:
        ``N x d`` array (any float dtype; float32 C-contiguous input is used without a
        copy), torch tensor, or the path of a ``.npy`` file (opened memory-mapped).
    metric:
        ``"cosine"`` (vectors normalized, inner product), ``"euclidean"`` (distances
        are *squared* euclidean, as faiss returns them; ``"l2"``, faiss's name, is a
        synonym) or ``"ip"`` (raw inner product, larger is closer). faiss computes in
        float32: for ``"euclidean"`` and ``"ip"``,
        embeddings whose squared norms overflow or underflow float32 (row norms beyond
        about 6e18, or all below 1e-15) raise ``ValueError`` (rescale them); ``"cosine"``
        normalizes in float64 and takes any scale.
    kind:
        ``"flat"`` exact search; ``"ivf"`` inverted lists (``nlist = 2 sqrt(N)``, search
        ``nprobe`` lists); ``"hnsw"`` graph index; ``"auto"`` exact up to
        ``AUTO_EXACT_MAX`` points, IVF beyond.
    nprobe:
        IVF lists searched per query; search time grows linearly with it. ``None``
        (default): the smallest of ``NPROBE_STEPS`` (4 .. 64) whose recall@10, measured on
        a sample of the indexed points against exhaustive search, reaches
        ``NPROBE_TARGET`` (0.97); the choice is ``nprobe_``, its recall ``recall_``. A
        warning is logged when 64 stays below 0.95 (use ``kind="hnsw"`` for such data).
    hnsw_m, ef_search:
        HNSW graph degree and search breadth.
    seed:
        Seed of the IVF training sample and k-means.
    progress:
        tqdm progress bars on long work.

    Example
    -------
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

    _first_row = 0  # global index of the first row searched by neighbors() (a shard's offset)

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
        """The block as the index sees it: float32 C-contiguous, normalized for cosine."""
        if self.metric != "cosine":
            return np.ascontiguousarray(x, dtype=np.float32)
        # Norms in float64: in float32 the squares of ~1e20 overflow (NaN vectors) and those
        # of ~1e-30 underflow (zero vectors), so the result would depend on the scale.
        norms = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64))
        out = np.array(x, dtype=np.float32, order="C", copy=True)  # never normalize the caller's data
        out *= (1.0 / np.where(norms > 0, norms, 1.0))[:, None]  # computed in float64, stored in float32
        return out

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
        for start, stop in _blocks(n):
            index.add(self._prepared(self.embeddings[start:stop]))
            bar.update(stop - start)
        bar.close()
        if self.kind == "ivf":
            self.nprobe_ = self._tune_nprobe(index) if self.nprobe is None else min(self.nprobe, index.nlist)
            index.nprobe = self.nprobe_
        return index

    def _trained_ivf(self, data: np.ndarray, faiss_metric: int) -> faiss.IndexIVFFlat:
        """An empty IVF index over ``data``'s shape, its quantizer trained on a seeded
        sample of ``data`` (batchsel.distributed.sharded trains it once and shares it)."""
        n, d = data.shape
        nlist = max(1, min(round(IVF_LISTS_PER_SQRT_N * math.sqrt(n)), n // IVF_TRAIN_PER_LIST))
        quantizer = faiss.IndexFlat(d, faiss_metric)
        index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss_metric)
        # We draw the training sample ourselves: faiss would otherwise subsample (or
        # print a warning on stderr for a small N).
        sample_size = min(n, nlist * IVF_TRAIN_PER_LIST)
        index.cp.niter = IVF_TRAIN_ITERATIONS
        index.cp.seed = self.seed % 2**31  # a C int
        index.cp.min_points_per_centroid = 1
        index.cp.max_points_per_centroid = max(1, sample_size // nlist + 1)
        rng = np.random.default_rng(self.seed)
        sample = np.sort(rng.choice(n, size=sample_size, replace=False))
        logger.info("training IVF index: nlist=%d on %d points", nlist, sample_size)
        index.train(self._prepared(data[sample]))
        self.train_size_ = sample_size
        return index

    def _search_same(self, index: faiss.Index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Search prepared ``queries`` (the same on every rank of a sharded index)."""
        return index.search(queries, k)

    def _tune_nprobe(self, index: faiss.IndexIVF) -> int:
        """The first nprobe of NPROBE_STEPS reaching NPROBE_TARGET recall@10 on a sample of
        the indexed points (the k-NN graph's queries); sets ``recall_``."""
        n = self.num_examples
        rng = np.random.default_rng([self.seed, 1])  # not the training sample's stream
        sample = np.sort(rng.choice(n, size=min(n, NPROBE_SAMPLE), replace=False))
        queries = self._prepared(self._rows_of(sample))
        k = min(10, n - 1) + 1  # the point itself is found too; it does not count
        index.nprobe = index.nlist  # all lists: exact
        _, truth = self._search_same(index, queries, k)
        steps = [p for p in NPROBE_STEPS if p < index.nlist] + [index.nlist]
        for nprobe in steps:
            index.nprobe = nprobe
            _, found = self._search_same(index, queries, k)
            hits = [
                np.intersect1d(f[f != i], t[t != i]).size / max(1, (t != i).sum())
                for i, f, t in zip(sample, found, truth)
            ]
            self.recall_ = float(np.mean(hits))
            if self.recall_ >= NPROBE_TARGET or nprobe >= NPROBE_STEPS[-1]:
                break
        if self.recall_ < 0.95:
            logger.warning(
                "IVF recall@10 is only %.2f at nprobe=%d on this data; pass a larger nprobe or use kind='hnsw'",
                self.recall_,
                nprobe,
            )
        logger.info(
            "nprobe=%d of %d lists: recall@10 %.3f on %d sampled points", nprobe, index.nlist, self.recall_, len(sample)
        )
        return nprobe

    # -- search -----------------------------------------------------------------------
    def search(self, queries: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest indexed points of each query: ``(distances, indices)``, both
        ``len(queries) x k``, nearest first (squared L2 for ``"euclidean"``, similarity for
        ``"cosine"`` / ``"ip"``)."""
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
        for start, stop in _blocks(m):
            distances[start:stop], indices[start:stop] = self.index.search(self._prepared(q[start:stop]), k)
            bar.update(stop - start)
        bar.close()
        return distances, indices

    def neighbors(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest *other* points of every indexed point: ``(D, I)``, ``N x k``.

        Self matches are removed (also when duplicates make faiss return another point
        at distance 0 first); a missing neighbour of an approximate index is -1."""
        k = check_int(k, "k", minimum=1)
        if k >= self.num_examples:
            raise ValueError(f"k must be smaller than the number of points ({self.num_examples}), got {k}")
        if self.kind == "ivf":
            D, I = self._ivf_self_search(k + 1)
        else:
            D, I = self._search_blocks(self.embeddings, k + 1, desc="knn graph")
        missing = I < 0
        if self.kind == "flat" and missing.any():
            # exact search finds k neighbours of every point unless distances were NaN
            raise ValueError(
                f"exact search found no neighbour for {int(missing.any(axis=1).sum())} of "
                f"{self.num_examples} points: the distances are not finite; check and rescale "
                f"the embeddings"
            )
        if not np.isfinite(D[~missing]).all():
            raise ValueError(
                "k-NN distances are not finite (the embeddings overflow float32); rescale the "
                "embeddings (e.g. divide them by their standard deviation)"
            )
        rows = np.arange(self._first_row, self._first_row + I.shape[0])[:, None]
        is_self = I == rows
        # Keep the first k columns that are not the point itself.
        keep = (np.cumsum(~is_self, axis=1) <= k) & ~is_self
        order = np.argsort(~keep, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(D, order, axis=1), np.take_along_axis(I, order, axis=1)

    def _ivf_self_search(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Search every indexed point, taking the queries list by list from the IVF
        index itself: consecutive queries then probe the same lists, which stay in cache
        (faster than data order), the vectors are
        already prepared (normalized for cosine), and a memory-mapped file is not read
        again."""
        n = self.num_examples
        distances = np.empty((n, k), dtype=np.float32)
        indices = np.empty((n, k), dtype=np.int64)
        bar = tqdm(total=n, desc="knn graph", unit="q", disable=not self.progress or n <= BLOCK_ROWS, leave=False)
        for rows, queries in self._ivf_list_blocks():
            distances[rows], indices[rows] = self.index.search(queries, k)
            bar.update(len(rows))
        bar.close()
        return distances, indices

    def _ivf_list_blocks(self, block: int = BLOCK_ROWS) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(ids, vectors) of consecutive inverted lists, about ``block`` points at a time."""
        ids: list[np.ndarray] = []
        vecs: list[np.ndarray] = []
        pending = 0
        for lst in range(self.index.nlist):
            list_ids, codes = get_invlist(self.index.invlists, lst)
            ids.append(list_ids)
            vecs.append(codes.view(np.float32).reshape(len(list_ids), self.dim))
            pending += len(list_ids)
            if pending >= block or lst == self.index.nlist - 1:
                if pending:
                    yield np.concatenate(ids), np.concatenate(vecs)
                ids, vecs, pending = [], [], 0

    def knn_graph(
        self,
        k: int = 10,
        kernel: str = "rbf",
        symmetrize: bool = True,
        sigma: float | None = None,
        self_weight: float | None = None,
    ) -> sp.csr_matrix:
        """The k-NN affinity graph: ``N x N`` CSR, float32 weights in (0, 1], int64
        indices, no self loops unless ``self_weight`` (in (0, 1]) is given: then every
        point has that weight to itself on the diagonal (a sparse facility location needs
        it: each item covers itself).

        A symmetrized graph is marked as symmetric, so that the sparse set functions
        (``FacilityLocation(graph)``, ...) skip their symmetry check; replacing its arrays
        drops the mark, but an in-place edit that breaks the symmetry must be followed by
        ``symmetric=False`` (or None) where the graph is used.

        ``kernel``: ``"rbf"`` w = exp(-d^2 / sigma^2) with d the euclidean distance (of
        the normalized vectors for ``metric="cosine"``) and, unless given, sigma^2 = the
        median over points of the squared distance to the k-th neighbour (so the typical
        k-th neighbour gets weight 1/e); ``"cosine"`` w = cosine similarity, clipped to
        (0, 1]; ``"connectivity"`` w = 1. ``symmetrize`` keeps an edge when either end
        lists the other, with the larger weight (w = max(W, W^T)). An exact index that
        misses neighbours (non-finite distances) or a graph with no edge at all raises
        ``ValueError``.
        """
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
        if kernel == "rbf" and self.metric == "ip":
            raise ValueError("kernel='rbf' needs a distance: use metric='euclidean' or 'cosine', or kernel='cosine'")
        D, I = self.neighbors(k)
        n = self.num_examples
        valid = I >= 0  # an approximate index may find fewer than k neighbours
        w = self._edge_weights(D, I, valid, kernel, sigma)
        # Row i holds its neighbours in order: build the CSR arrays directly (a COO
        # conversion would sort all N k entries again).
        indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(valid.sum(axis=1), out=indptr[1:])
        if not valid.any():
            raise ValueError(
                f"the {k}-NN graph of {n} points is empty: the index found no neighbours; rescale "
                f"the embeddings or use kind='flat'"
            )
        graph = sp.csr_matrix((w[valid], I[valid], indptr), shape=(n, n))
        if symmetrize:
            graph = graph.maximum(graph.T).tocsr()
        graph.sort_indices()
        graph = to_int64(graph)
        if self_weight is not None:
            if not 0 < self_weight <= 1:
                raise ValueError(f"self_weight must be in (0, 1] or None, got {self_weight!r}")
            from batchsel.core.graph import insert_diagonal

            indptr, indices, data = insert_diagonal(graph.indptr, graph.indices, graph.data, np.float32(self_weight))
            graph = sp.csr_matrix((data, indices, indptr), shape=(n, n))
            graph.indices, graph.indptr = indices, indptr  # scipy may downcast them
        return mark_symmetric(graph) if symmetrize else graph

    def _edge_weights(
        self, D: np.ndarray, I: np.ndarray, valid: np.ndarray, kernel: str, sigma: float | None
    ) -> np.ndarray:
        """float32 kernel weights in (0, 1] of the neighbour lists ``(D, I)``."""
        if kernel == "connectivity":
            w = np.ones_like(D)
        elif kernel == "rbf":
            sq = D if self.metric == "euclidean" else np.maximum(2.0 - 2.0 * D, 0.0)  # |a-b|^2 of unit vectors
            if sigma is None:
                sigma2 = self._rbf_sigma2(sq, valid)
            else:
                if not sigma > 0:
                    raise ValueError(f"sigma must be > 0, got {sigma}")
                sigma2 = float(sigma) ** 2
            self.sigma_ = math.sqrt(sigma2)
            w = np.exp(-sq / sigma2)
        else:
            w = D if self.metric == "cosine" else self._cosine_of_pairs(I)
        return np.clip(w, np.finfo(np.float32).tiny, 1.0).astype(np.float32, copy=False)

    def _rbf_sigma2(self, sq: np.ndarray, valid: np.ndarray) -> float:
        """The default sigma^2: the median squared distance to the k-th neighbour."""
        kth = sq[valid[:, -1], -1]
        sigma2 = float(np.median(kth)) if kth.size else 0.0
        if sigma2 <= 0:  # more than half the points have k duplicates
            positive = sq[valid & (sq > 0)]
            sigma2 = float(positive.mean()) if positive.size else 1.0
        return sigma2

    def _rows_of(self, indices: np.ndarray) -> np.ndarray:
        """The embeddings of the given (global) point indices."""
        return self.embeddings[indices]

    def _cosine_of_pairs(self, cols: np.ndarray) -> np.ndarray:
        """Cosine similarity of every point i and each of its neighbours cols[i]."""
        out = np.empty(cols.shape, dtype=np.float32)
        for start, stop in _blocks(cols.shape[0]):
            # float64: float32 dots and norms of large vectors overflow
            a = self.embeddings[start:stop].astype(np.float64)
            b = self._rows_of(np.where(cols[start:stop] >= 0, cols[start:stop], 0)).astype(np.float64)
            dots = np.einsum("id,ikd->ik", a, b)
            norms = np.linalg.norm(a, axis=1)[:, None] * np.linalg.norm(b, axis=2)
            out[start:stop] = dots / np.maximum(norms, 1e-12)
        return out

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
    """Shortcut: ``EmbeddingIndex(embeddings, metric, **index_kwargs).knn_graph(k, kernel,
    symmetrize, sigma, self_weight)``."""
    index = EmbeddingIndex(embeddings, metric=metric, **index_kwargs)
    return index.knn_graph(k=k, kernel=kernel, symmetrize=symmetrize, sigma=sigma, self_weight=self_weight)


__all__ = ["EmbeddingIndex", "knn_graph", "AUTO_EXACT_MAX"]
