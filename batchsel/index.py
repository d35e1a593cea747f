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
from tqdm.auto import tqdm

from ._checks import check_int, load_embeddings, to_int64

logger = logging.getLogger(__name__)

METRICS = ("cosine", "l2", "ip")
KINDS = ("auto", "flat", "ivf", "hnsw")
KERNELS = ("rbf", "cosine", "connectivity")

# kind="auto" switches from exact to IVF search above this many points. Measured on
# 2 cores, d = 128 (benchmarks/bench_index.py): the exact k-NN graph costs ~N^2 d flops,
# about 10 s at N = 50k and 40 s at 100k, while IVF builds the 50k graph in ~3 s with
# recall@10 >= 0.97 on clustered data.
AUTO_EXACT_MAX = 50_000

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
        ``"cosine"`` (vectors normalized, inner product), ``"l2"`` (distances are
        *squared* euclidean, as faiss returns them) or ``"ip"`` (raw inner product,
        larger is closer).
    kind:
        ``"flat"`` exact search; ``"ivf"`` inverted lists (``nlist = 4 sqrt(N)``, search
        ``nprobe`` lists); ``"hnsw"`` graph index; ``"auto"`` exact up to
        ``AUTO_EXACT_MAX`` points, IVF beyond.
    nprobe, hnsw_m, ef_search:
        Accuracy knobs of the approximate kinds.
    progress:
        tqdm progress bars on long work.

    Example
    -------
    >>> import numpy as np
    >>> x = np.random.default_rng(0).normal(size=(200, 8)).astype(np.float32)
    >>> index = EmbeddingIndex(x, metric="l2", progress=False)
    >>> D, I = index.search(x[:3], k=2)
    >>> I[:, 0].tolist()
    [0, 1, 2]
    >>> g = index.knn_graph(k=5)
    >>> g.shape, (g != g.T).nnz
    ((200, 200), 0)
    """

    def __init__(
        self,
        embeddings: Any,
        metric: str = "cosine",
        kind: str = "auto",
        *,
        nprobe: int = 16,
        hnsw_m: int = 32,
        ef_search: int = 64,
        progress: bool = True,
        seed: int = 0,
    ) -> None:
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        self.embeddings = load_embeddings(embeddings)
        self.metric = metric
        self.num_examples, self.dim = self.embeddings.shape
        self.kind = kind if kind != "auto" else ("flat" if self.num_examples <= AUTO_EXACT_MAX else "ivf")
        self.nprobe = check_int(nprobe, "nprobe", minimum=1)
        self.hnsw_m = check_int(hnsw_m, "hnsw_m", minimum=2)
        self.ef_search = check_int(ef_search, "ef_search", minimum=1)
        self.progress = progress
        self.seed = seed
        self.index = self._build()

    # -- construction -----------------------------------------------------------------
    def _prepared(self, x: np.ndarray) -> np.ndarray:
        """The block as the index sees it: float32 C-contiguous, normalized for cosine."""
        if self.metric != "cosine":
            return np.ascontiguousarray(x, dtype=np.float32)
        x = np.array(x, dtype=np.float32, order="C", copy=True)  # never normalize the caller's data
        faiss.normalize_L2(x)
        return x

    def _build(self) -> faiss.Index:
        n, d = self.num_examples, self.dim
        faiss_metric = faiss.METRIC_L2 if self.metric == "l2" else faiss.METRIC_INNER_PRODUCT
        if self.kind == "flat":
            index = faiss.IndexFlat(d, faiss_metric)
        elif self.kind == "ivf":
            nlist = max(1, min(int(4 * math.sqrt(n)), n // 39))
            quantizer = faiss.IndexFlat(d, faiss_metric)
            index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss_metric)
            # faiss wants ~39..256 points per list to train; a sample keeps training cheap.
            sample_size = min(n, nlist * 64)
            rng = np.random.default_rng(self.seed)
            sample = np.sort(rng.choice(n, size=sample_size, replace=False))
            logger.info("training IVF index: nlist=%d on %d points", nlist, sample_size)
            index.train(self._prepared(self.embeddings[sample]))
            index.nprobe = min(self.nprobe, nlist)
        else:
            index = faiss.IndexHNSWFlat(d, self.hnsw_m, faiss_metric)
            index.hnsw.efSearch = self.ef_search
        logger.info("adding %d x %d vectors to a %s index (%s)", n, d, self.kind, self.metric)
        bar = tqdm(total=n, desc="index add", unit="pt", disable=not self.progress or n <= BLOCK_ROWS, leave=False)
        for start, stop in _blocks(n):
            index.add(self._prepared(self.embeddings[start:stop]))
            bar.update(stop - start)
        bar.close()
        return index

    # -- search -----------------------------------------------------------------------
    def search(self, queries: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` nearest indexed points of each query: ``(distances, indices)``, both
        ``len(queries) x k``, nearest first (squared L2 for ``"l2"``, similarity for
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
        D, I = self._search_blocks(self.embeddings, k + 1, desc="knn graph")
        rows = np.arange(self.num_examples)[:, None]
        is_self = I == rows
        # Keep the first k columns that are not the point itself.
        keep = (np.cumsum(~is_self, axis=1) <= k) & ~is_self
        order = np.argsort(~keep, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(D, order, axis=1), np.take_along_axis(I, order, axis=1)

    def knn_graph(self, k: int = 10, kernel: str = "rbf", symmetrize: bool = True, sigma: float | None = None) -> sp.csr_matrix:
        """The k-NN affinity graph: ``N x N`` CSR, float32 weights in (0, 1], int64
        indices, no self loops.

        ``kernel``: ``"rbf"`` w = exp(-d^2 / sigma^2) with d the euclidean distance (of
        the normalized vectors for ``metric="cosine"``) and, unless given, sigma^2 = the
        median over points of the squared distance to the k-th neighbour (so the typical
        k-th neighbour gets weight 1/e); ``"cosine"`` w = cosine similarity, clipped to
        (0, 1]; ``"connectivity"`` w = 1. ``symmetrize`` keeps an edge when either end
        lists the other, with the larger weight (w = max(W, W^T)).
        """
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
        if kernel == "rbf" and self.metric == "ip":
            raise ValueError("kernel='rbf' needs a distance: use metric='l2' or 'cosine', or kernel='cosine'")
        D, I = self.neighbors(k)
        n = self.num_examples
        valid = I >= 0
        rows = np.repeat(np.arange(n, dtype=np.int64), k).reshape(n, k)
        tiny = np.finfo(np.float32).tiny
        if kernel == "connectivity":
            w = np.ones_like(D)
        elif kernel == "rbf":
            sq = D if self.metric == "l2" else np.maximum(2.0 - 2.0 * D, 0.0)  # |a-b|^2 of unit vectors
            if sigma is None:
                sigma2 = float(np.median(sq[:, -1]))
                if sigma2 <= 0:
                    sigma2 = float(sq[sq > 0].mean()) if (sq > 0).any() else 1.0
            else:
                if not sigma > 0:
                    raise ValueError(f"sigma must be > 0, got {sigma}")
                sigma2 = float(sigma) ** 2
            self.sigma_ = math.sqrt(sigma2)
            w = np.exp(-sq / sigma2)
        else:
            w = D if self.metric == "cosine" else self._cosine_of_pairs(rows, I)
        w = np.clip(w, tiny, 1.0).astype(np.float32)
        graph = sp.csr_matrix((w[valid], (rows[valid], I[valid])), shape=(n, n), dtype=np.float32)
        if symmetrize:
            graph = graph.maximum(graph.T).tocsr()
        graph.sort_indices()
        return to_int64(graph)

    def _cosine_of_pairs(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        out = np.empty(rows.shape, dtype=np.float32)
        for start, stop in _blocks(rows.shape[0]):
            a = self.embeddings[start:stop]
            b = self.embeddings[np.where(cols[start:stop] >= 0, cols[start:stop], 0)]
            dots = np.einsum("id,ikd->ik", a, b)
            norms = np.linalg.norm(a, axis=1)[:, None] * np.linalg.norm(b, axis=2)
            out[start:stop] = dots / np.maximum(norms, 1e-12)
        return out

    def __repr__(self) -> str:
        return f"EmbeddingIndex(N={self.num_examples}, d={self.dim}, metric={self.metric!r}, kind={self.kind!r})"


def knn_graph(embeddings: Any, k: int = 10, metric: str = "l2", kernel: str = "rbf", **index_kwargs: Any) -> sp.csr_matrix:
    """Shortcut: ``EmbeddingIndex(embeddings, metric, **index_kwargs).knn_graph(k, kernel)``."""
    return EmbeddingIndex(embeddings, metric=metric, **index_kwargs).knn_graph(k=k, kernel=kernel)


__all__ = ["EmbeddingIndex", "knn_graph", "AUTO_EXACT_MAX"]
