"""The index and the k-NN graph sharded over ranks (MPI, torch.distributed).

Each rank reads only its rows ``[lo, hi)`` of the embeddings (an ``.npy`` file is opened
memory-mapped) and indexes them; every search is answered by all shards and merged, so
the results equal those of one :class:`~batchsel.index.EmbeddingIndex` over all rows:

- ``kind="flat"``: exact search of every shard, top-k merged.
- ``kind="ivf"``: ONE coarse quantizer, trained on rank 0 exactly as the single-process
  index trains it (same seeded sample, same k-means), broadcast; every rank adds its rows
  to an IVF index with that quantizer. The owner of a query computes its ``nprobe``
  nearest lists once and ships them with the query (faiss ``search_preassigned``), so the
  shards scan the same lists one process would scan, each its part of them. ``nprobe``
  is tuned as the single-process index tunes it, over the sharded search: same choice.
- ``kind="hnsw"`` is refused (a graph index per shard would not give the same results).

Queries travel in blocks of ``block_rows`` per rank: all-gathered, searched by every
shard, the ``(D, I)`` all-gathered back and merged by (distance, global index). Memory per
block is ``W * block_rows * (d * 4 + k * 12 * W)`` bytes; the all-gathers move ``W`` times
what an all-to-all would (the :class:`~batchsel.communicator.Communicator` protocol has
none), which matters little for the handful of ranks of a CPU cluster job.

The k-NN graph (:meth:`ShardedIndex.knn_graph`) stays distributed: each rank holds its
rows as an ``(hi - lo) x N`` CSR matrix with global int64 column indices, weighted by the
kernels of :meth:`EmbeddingIndex.knn_graph` (sigma from the global median), symmetrized
across ranks (the transpose's entries are sent to the rank owning their row).
:func:`gather_graph` assembles the ``N x N`` graph (on every rank), equal to the
single-process ``EmbeddingIndex.knn_graph``; :func:`save_graph_shard` /
:func:`load_graph_shards` keep it in one file per rank.

Example
-------
>>> import numpy as np
>>> from batchsel.integrations import SingleProcessComm
>>> from batchsel.index import EmbeddingIndex
>>> x = np.random.default_rng(0).normal(size=(300, 8)).astype(np.float32)
>>> comm = SingleProcessComm()
>>> index = ShardedIndex(x, comm, metric="euclidean", progress=False)
>>> index.row_range
(0, 300)
>>> rows = index.knn_graph(k=5)          # this rank's rows, global columns
>>> g = gather_graph(rows, comm)
>>> ref = EmbeddingIndex(x, metric="euclidean", progress=False).knn_graph(k=5)
>>> (g != ref).nnz, g.indices.dtype
(0, dtype('int64'))
"""
from __future__ import annotations

import logging
import math
import os
from typing import Any, Sequence

import faiss
import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from ._checks import check_int, check_metric, check_scale, check_seed, load_embeddings, mark_symmetric, \
    tensor_to_numpy, to_int64
from .communicator import Communicator
from .index import AUTO_EXACT_MAX, BLOCK_ROWS, IVF_TRAIN_PER_LIST, KERNELS, KINDS, METRICS, EmbeddingIndex
from .io import atomic_write

logger = logging.getLogger(__name__)

__all__ = ["ShardedIndex", "shard_range", "gather_graph", "save_graph_shard", "load_graph_shards"]


def shard_range(num_examples: int, rank: int, size: int) -> tuple[int, int]:
    """Rows ``[lo, hi)`` of rank ``rank`` of ``size``: contiguous, sizes differ by at most one.

    >>> [shard_range(10, r, 3) for r in range(3)]
    [(0, 3), (3, 6), (6, 10)]
    """
    size = check_int(size, "size", minimum=1)
    rank = check_int(rank, "rank", minimum=0, maximum=size - 1)
    return num_examples * rank // size, num_examples * (rank + 1) // size


def _open_source(embeddings: Any) -> np.ndarray:
    """The full ``N x d`` array, unchecked and not read: a ``.npy`` path is memory-mapped."""
    if isinstance(embeddings, (str, os.PathLike)):
        path = os.fspath(embeddings)
        if not (path.endswith(".npy") and os.path.isfile(path)):
            return load_embeddings(path)  # raises the ValueError that names the problem
        embeddings = np.load(path, mmap_mode="r")
    x = tensor_to_numpy(embeddings)
    if not isinstance(x, np.ndarray):
        x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"embeddings must be 2-D (N x d), got {x.ndim}-D shape {x.shape}")
    return x


def _merge(Ds: Sequence[np.ndarray], Is: Sequence[np.ndarray], k: int,
           larger_is_closer: bool) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of several ``(D, I)`` answers to the same queries: nearest first, ties to the
    smaller global index, missing neighbours (-1) last."""
    D = np.concatenate(Ds, axis=1)
    I = np.concatenate(Is, axis=1)
    missing = I < 0
    key = np.where(missing, np.inf, -D if larger_is_closer else D)
    order = np.lexsort((np.where(missing, np.iinfo(np.int64).max, I), key), axis=1)[:, :k]
    return np.take_along_axis(D, order, axis=1), np.take_along_axis(I, order, axis=1)


class ShardedIndex(EmbeddingIndex):
    """An :class:`~batchsel.index.EmbeddingIndex` whose rows are split over the ranks of
    ``comm``: rank r indexes rows ``row_range = shard_range(N, r, W)`` only.

    Construction, :meth:`search`, :meth:`neighbors` and :meth:`knn_graph` are collective
    (every rank calls them, in the same order). ``search`` answers each rank's own
    queries against all rows; ``neighbors`` and ``knn_graph`` return this rank's rows
    (``hi - lo`` of them), with global indices. Results equal the single-process index's
    (same neighbours up to distance ties), for ``kind="flat"`` and ``kind="ivf"``.

    Parameters are those of :class:`EmbeddingIndex` (``kind="hnsw"`` excepted), plus
    ``comm`` (any :class:`~batchsel.communicator.Communicator`) and ``block_rows``
    (queries per rank and exchange). ``embeddings`` is the full array or ``.npy`` path, the
    same on every rank; a rank reads its own rows, rank 0 also the IVF training sample,
    every rank the few rows of the ``nprobe`` tuning sample (and, for the ``"cosine"``
    kernel of non-cosine metrics, its neighbours' rows).

    Example
    -------
    >>> import numpy as np
    >>> from batchsel.integrations import SingleProcessComm
    >>> x = np.random.default_rng(0).normal(size=(400, 8)).astype(np.float32)
    >>> index = ShardedIndex(x, SingleProcessComm(), kind="ivf", nprobe=4, progress=False)
    >>> D, I = index.search(x[:2], k=3)
    >>> I[:, 0].tolist(), index.kind
    ([0, 1], 'ivf')
    """

    def __init__(
        self,
        embeddings: Any,
        comm: Communicator,
        metric: str = "cosine",
        kind: str = "auto",
        *,
        nprobe: int | None = None,
        progress: bool = True,
        seed: int = 0,
        block_rows: int = BLOCK_ROWS,
    ) -> None:
        metric = check_metric(metric, METRICS)
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if kind == "hnsw":
            raise ValueError("kind='hnsw' cannot be sharded exactly (one graph index per shard searches differently "
                             "from one over all rows); use 'flat' or 'ivf'")
        if not isinstance(comm, Communicator):
            raise TypeError(f"comm must be a Communicator (rank, size, broadcast, allgather, ...), got {comm!r}")
        self.comm = comm
        self._source = _open_source(embeddings)
        n, d = self._source.shape
        if n < comm.size:
            raise ValueError(f"embeddings have {n} rows, fewer than the {comm.size} ranks")
        self.row_range = shard_range(n, comm.rank, comm.size)
        self._bounds = np.array([shard_range(n, r, comm.size)[0] for r in range(comm.size)] + [n], dtype=np.int64)
        self._first_row = self.row_range[0]
        self.metric = metric
        self.num_examples, self.dim = n, d
        self.nprobe = None if nprobe is None else check_int(nprobe, "nprobe", minimum=1)
        self.progress = progress
        self.seed = check_seed(seed)
        self.block_rows = check_int(block_rows, "block_rows", minimum=1)
        self.kind = kind if kind != "auto" else ("flat" if n <= AUTO_EXACT_MAX else "ivf")
        self.embeddings = self._checked_shard()
        self.index = self._build()

    # -- construction -----------------------------------------------------------------
    def _checked_shard(self) -> np.ndarray:
        """This rank's rows, checked (finite; float32 range), the same error on every rank."""
        lo, hi = self.row_range
        error, underflow = "", False
        try:
            shard = load_embeddings(self._source[lo:hi])
            if self.metric != "cosine":
                check_scale(shard, "embeddings", underflow=False)
                try:
                    check_scale(shard, "embeddings")
                except ValueError as exc:  # an error only if every shard underflows
                    error, underflow = str(exc), True
        except (ValueError, TypeError) as exc:
            error = f"{exc} (rows {lo}..{hi - 1}, rank {self.comm.rank})"
        reports = self.comm.allgather((error, underflow))
        fatal = [e for e, u in reports if e and not u]
        if fatal:
            raise ValueError(fatal[0])
        if all(u for _, u in reports):
            raise ValueError(reports[0][0])
        return shard

    def _build(self) -> faiss.Index:
        lo, hi = self.row_range
        faiss_metric = faiss.METRIC_L2 if self.metric == "euclidean" else faiss.METRIC_INNER_PRODUCT
        if self.kind == "flat":
            index = faiss.IndexFlat(self.dim, faiss_metric)
        else:
            blob = None
            if self.comm.rank == 0:
                # rank 0 reads the training sample (of all rows) and trains the quantizer
                # exactly as EmbeddingIndex does; every rank then adds its rows to a copy
                blob = faiss.serialize_index(self._trained_ivf(self._source, faiss_metric))
            index = faiss.deserialize_index(self.comm.broadcast(blob, root=0))
            self.train_size_ = min(self.num_examples, index.nlist * IVF_TRAIN_PER_LIST)
        logger.info("rank %d: adding rows %d..%d of %d x %d to a %s index (%s)", self.comm.rank, lo, hi,
                    self.num_examples, self.dim, self.kind, self.metric)
        bar = tqdm(total=hi - lo, desc="index add", unit="pt", leave=False,
                   disable=not self.progress or hi - lo <= self.block_rows)
        for start in range(0, hi - lo, self.block_rows):
            stop = min(hi - lo, start + self.block_rows)
            block = self._prepared(self.embeddings[start:stop])
            if self.kind == "ivf":
                index.add_with_ids(block, np.arange(lo + start, lo + stop, dtype=np.int64))
            else:
                index.add(block)
            bar.update(stop - start)
        bar.close()
        if self.kind == "ivf":
            self.index = index  # _tune_nprobe searches through self.index on every rank
            self.nprobe_ = self._tune_nprobe(index) if self.nprobe is None else min(self.nprobe, index.nlist)
            index.nprobe = self.nprobe_
        return index

    def _rows_of(self, indices: np.ndarray) -> np.ndarray:
        return np.asarray(self._source[indices], dtype=np.float32)

    # -- search -----------------------------------------------------------------------
    def _shard_search(self, queries: np.ndarray, k: int, coarse: tuple | None) -> tuple[np.ndarray, np.ndarray]:
        """This shard's top-k of prepared ``queries`` (global indices)."""
        if queries.shape[0] == 0:
            return np.empty((0, k), dtype=np.float32), np.empty((0, k), dtype=np.int64)
        if self.kind == "ivf":
            if coarse is None:
                return self.index.search(queries, k)
            return self.index.search_preassigned(queries, k, coarse[1], coarse[0])
        D, I = self.index.search(queries, k)
        return D, np.where(I >= 0, I + self.row_range[0], -1)

    def _search_same(self, index: faiss.Index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Search queries that are the same on every rank: each shard answers, merged."""
        D, I = self._shard_search(queries, k, None)
        Ds, Is = self.comm.allgather(D), self.comm.allgather(I)
        return _merge(Ds, Is, k, self.index.metric_type == faiss.METRIC_INNER_PRODUCT)

    def _exchange_search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """One round: every rank's prepared query block is searched by every shard; returns
        the merged top-k of this rank's block."""
        coarse = None
        if self.kind == "ivf":  # the owner assigns its queries to lists, once
            Dq, Iq = (self.index.quantizer.search(queries, self.index.nprobe) if len(queries) else
                      (np.empty((0, self.index.nprobe), np.float32), np.empty((0, self.index.nprobe), np.int64)))
            coarse = (np.concatenate(self.comm.allgather(Dq)), np.concatenate(self.comm.allgather(Iq)))
        blocks = self.comm.allgather(queries)
        sizes = np.cumsum([0] + [len(b) for b in blocks])
        D, I = self._shard_search(np.concatenate(blocks), k, coarse)
        mine = slice(int(sizes[self.comm.rank]), int(sizes[self.comm.rank + 1]))
        Ds = [d[mine] for d in self.comm.allgather(D)]
        Is = [i[mine] for i in self.comm.allgather(I)]
        return _merge(Ds, Is, k, self.index.metric_type == faiss.METRIC_INNER_PRODUCT)

    def _rounds(self, count: int) -> int:
        """The number of exchange rounds: the most any rank needs."""
        return int(self.comm.allreduce(np.array([count], dtype=np.int64), op="max")[0])

    def _search_blocks(self, q: np.ndarray, k: int, desc: str) -> tuple[np.ndarray, np.ndarray]:
        m, b = q.shape[0], self.block_rows
        distances = np.empty((m, k), dtype=np.float32)
        indices = np.empty((m, k), dtype=np.int64)
        bar = tqdm(total=m, desc=desc, unit="q", disable=not self.progress or m <= b, leave=False)
        for r in range(self._rounds(-(-m // b))):
            start, stop = min(m, r * b), min(m, (r + 1) * b)
            distances[start:stop], indices[start:stop] = self._exchange_search(self._prepared(q[start:stop]), k)
            bar.update(stop - start)
        bar.close()
        return distances, indices

    def search(self, queries: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Collective: the ``k`` nearest points (of all shards) of this rank's ``queries``
        (any number per rank, zero included), as :meth:`EmbeddingIndex.search`."""
        return super().search(queries, k)

    def _ivf_self_search(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Every row of this shard searched against all shards, the queries taken list by
        list from the local IVF index (see EmbeddingIndex._ivf_self_search)."""
        lo, hi = self.row_range
        distances = np.empty((hi - lo, k), dtype=np.float32)
        indices = np.empty((hi - lo, k), dtype=np.int64)
        blocks = list(self._ivf_list_block_bounds())
        bar = tqdm(total=hi - lo, desc="knn graph", unit="q", leave=False,
                   disable=not self.progress or hi - lo <= self.block_rows)
        gen = self._ivf_list_blocks()
        for r in range(self._rounds(len(blocks))):
            if r < len(blocks):
                rows, queries = next(gen)
            else:
                rows, queries = np.empty(0, np.int64), np.empty((0, self.dim), np.float32)
            distances[rows - lo], indices[rows - lo] = self._exchange_search(queries, k)
            bar.update(len(rows))
        bar.close()
        return distances, indices

    def _ivf_list_block_bounds(self):
        """The blocks _ivf_list_blocks yields, counted without copying vectors."""
        sizes = np.array([self.index.invlists.list_size(i) for i in range(self.index.nlist)])
        pending = 0
        for lst, size in enumerate(sizes):
            pending += size
            if pending >= BLOCK_ROWS or lst == len(sizes) - 1:
                if pending:
                    yield pending
                pending = 0

    def neighbors(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Collective: the ``k`` nearest other points of every row of this shard, ``(D, I)``,
        ``(hi - lo) x k``, global indices (as :meth:`EmbeddingIndex.neighbors`)."""
        return super().neighbors(k)

    # -- the k-NN graph ---------------------------------------------------------------
    def _rbf_sigma2(self, sq: np.ndarray, valid: np.ndarray) -> float:
        kth = np.concatenate(self.comm.allgather(np.ascontiguousarray(sq[valid[:, -1], -1])))
        sigma2 = float(np.median(kth)) if kth.size else 0.0
        if sigma2 <= 0:  # more than half the points have k duplicates
            positive = sq[valid & (sq > 0)]
            total, count = self.comm.allreduce(np.array([positive.sum(dtype=np.float64), positive.size]))
            sigma2 = float(total / count) if count else 1.0
        return sigma2

    def knn_graph(self, k: int = 10, kernel: str = "rbf", symmetrize: bool = True, sigma: float | None = None,
                  self_weight: float | None = None) -> sp.csr_matrix:
        """Collective: this rank's rows of the k-NN affinity graph, an ``(hi - lo) x N`` CSR
        matrix (float32 weights, global int64 column indices): rows ``lo..hi-1`` of what
        :meth:`EmbeddingIndex.knn_graph` returns with the same arguments (sigma is the
        median over all points). :func:`gather_graph` assembles the ``N x N`` graph."""
        if kernel not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
        if kernel == "rbf" and self.metric == "ip":
            raise ValueError("kernel='rbf' needs a distance: use metric='euclidean' or 'cosine', or kernel='cosine'")
        if self_weight is not None and not 0 < self_weight <= 1:
            raise ValueError(f"self_weight must be in (0, 1] or None, got {self_weight!r}")
        lo, hi = self.row_range
        n = self.num_examples
        D, I = self.neighbors(k)
        valid = I >= 0
        w = self._edge_weights(D, I, valid, kernel, sigma)
        indptr = np.zeros(hi - lo + 1, dtype=np.int64)
        np.cumsum(valid.sum(axis=1), out=indptr[1:])
        if not self.comm.allreduce(np.array([valid.sum()], dtype=np.int64))[0]:
            raise ValueError(f"the {k}-NN graph of {n} points is empty: the index found no neighbours; rescale "
                             f"the embeddings or use kind='flat'")
        rows = to_int64(sp.csr_matrix((w[valid], I[valid], indptr), shape=(hi - lo, n)))
        del D, I, w, valid
        if symmetrize:
            rows = self._symmetrized(rows)
        rows.sort_indices()
        rows = to_int64(rows)
        if self_weight is not None:  # no self loops so far: add the diagonal
            diag = sp.csr_matrix((np.full(hi - lo, self_weight, dtype=np.float32), np.arange(lo, hi),
                                  np.arange(hi - lo + 1)), shape=rows.shape)
            rows = to_int64((rows + diag).tocsr())
            rows.sort_indices()
        return rows

    def _symmetrized(self, rows: sp.csr_matrix) -> sp.csr_matrix:
        """max(W, W^T) restricted to this rank's rows: each entry (i, j, w) is sent, as
        (j, i, w), to the rank owning row j (W - 1 rounds of all-gathers)."""
        lo, hi = self.row_range
        size, rank = self.comm.size, self.comm.rank
        coo = rows.tocoo()
        src_rows = coo.row.astype(np.int64) + lo
        cols = coo.col.astype(np.int64)
        data = coo.data
        del coo
        owner = np.searchsorted(self._bounds, cols, side="right") - 1
        t_rows, t_cols, t_data = [cols[owner == rank]], [src_rows[owner == rank]], [data[owner == rank]]
        for step in range(1, size):
            dest, src = (rank + step) % size, (rank - step) % size
            sel = owner == dest
            pairs = self.comm.allgather(np.stack([cols[sel], src_rows[sel]]))[src]
            t_rows.append(pairs[0])
            t_cols.append(pairs[1])
            t_data.append(self.comm.allgather(np.ascontiguousarray(data[sel]))[src])
        del src_rows, cols, data, owner
        transpose = sp.csr_matrix((np.concatenate(t_data), (np.concatenate(t_rows) - lo, np.concatenate(t_cols))),
                                  shape=rows.shape)
        return rows.maximum(transpose).tocsr()

    def __repr__(self) -> str:
        return (f"ShardedIndex(N={self.num_examples}, d={self.dim}, metric={self.metric!r}, kind={self.kind!r}, "
                f"rows={self.row_range}, rank={self.comm.rank}/{self.comm.size})")


def gather_graph(rows: sp.csr_matrix, comm: Communicator, symmetric: bool = True) -> sp.csr_matrix:
    """Collective: the ``N x N`` graph from every rank's rows (by rank), on every rank.

    ``symmetric`` marks the result as symmetric (true of :meth:`ShardedIndex.knn_graph`
    with ``symmetrize=True``). Needs the whole graph's memory on every rank: about
    ``2 k N * 12`` bytes for a symmetrized k-NN graph (240 MB at N = 1M, k = 10).

    >>> from batchsel.integrations import SingleProcessComm
    >>> g = gather_graph(sp.identity(3, format="csr", dtype=np.float32), SingleProcessComm())
    >>> g.shape, g.nnz
    ((3, 3), 3)
    """
    rows = to_int64(sp.csr_matrix(rows))
    indptrs = comm.allgather(rows.indptr)
    indices = np.concatenate(comm.allgather(rows.indices)).astype(np.int64, copy=False)
    data = np.concatenate(comm.allgather(np.ascontiguousarray(rows.data)))
    offsets = np.cumsum([0] + [int(p[-1]) for p in indptrs])
    indptr = np.concatenate([[0]] + [p[1:] + o for p, o in zip(indptrs, offsets)]).astype(np.int64)
    n = indptr.size - 1
    if n != rows.shape[1]:
        raise ValueError(f"the ranks hold {n} rows of a graph with {rows.shape[1]} columns")
    graph = sp.csr_matrix((data, indices, indptr), shape=(n, n))
    graph = to_int64(graph)
    return mark_symmetric(graph) if symmetric else graph


def save_graph_shard(path: str | os.PathLike, rows: sp.csr_matrix, row_start: int) -> None:
    """Write this rank's rows (and where they start) to ``path`` (``.npz``, atomically)."""
    with atomic_write(path) as f:
        np.savez(f, indptr=rows.indptr.astype(np.int64), indices=rows.indices.astype(np.int64), data=rows.data,
                 shape=np.array(rows.shape, dtype=np.int64), row_start=np.array(row_start, dtype=np.int64))


def load_graph_shards(paths: Sequence[str | os.PathLike], symmetric: bool = True) -> sp.csr_matrix:
    """The ``N x N`` graph from the files :func:`save_graph_shard` wrote (any order)."""
    parts = []
    for p in paths:
        with np.load(p) as z:
            parts.append((int(z["row_start"]), sp.csr_matrix((z["data"], z["indices"], z["indptr"]),
                                                             shape=tuple(z["shape"]))))
    parts.sort(key=lambda t: t[0])
    expected = 0
    for start, part in parts:
        if start != expected:
            raise ValueError(f"graph shards do not tile the rows: a shard starts at row {start}, expected {expected}")
        expected += part.shape[0]
    graph = to_int64(sp.vstack([part for _, part in parts], format="csr"))
    if graph.shape[0] != graph.shape[1]:
        raise ValueError(f"graph shards hold {graph.shape[0]} rows of a graph with {graph.shape[1]} columns")
    return mark_symmetric(graph) if symmetric else graph
