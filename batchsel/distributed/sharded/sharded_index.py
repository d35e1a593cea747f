"""The index sharded over ranks: :class:`ShardedIndex`, an
:class:`~batchsel.index.EmbeddingIndex` of which every rank holds and searches its own
rows, every search answered by all shards (docs: design/sharded.md).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import faiss
import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from batchsel.core.checks import check_int, check_metric, check_seed, tensor_to_numpy, to_int64
from batchsel.core.communicator import Communicator, check_ranks_agree
from batchsel.distributed.sharded.exchange import ShardSearch
from batchsel.distributed.sharded.graph import global_median_sigma2, symmetrized_rows, with_self_loops
from batchsel.distributed.sharded.leader import RankZeroIndex, check_node_work, resolve_node_work
from batchsel.distributed.sharded.rows import (
    checked_shard,
    drop_pages,
    open_source,
    shard_bounds,
    shard_range,
)
from batchsel.index import AUTO_EXACT_MAX, BLOCK_ROWS, IVF_TRAIN_PER_LIST, KINDS, METRICS, EmbeddingIndex
from batchsel.index.affinity import check_kernel, check_self_weight, empty_graph_error, neighbour_csr
from batchsel.index.ivf import ivf_list_blocks

# the logger of batchsel.distributed.sharded, as before it became a package
logger = logging.getLogger("batchsel.distributed.sharded")


def _check_kind_and_comm(kind: str, comm: Any) -> None:
    """``ValueError`` unless ``kind`` can be sharded exactly, ``TypeError`` unless ``comm``
    is a :class:`~batchsel.core.communicator.Communicator`."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if kind == "hnsw":
        raise ValueError(
            "kind='hnsw' cannot be sharded exactly (one graph index per shard searches differently "
            "from one over all rows); use 'flat' or 'ivf'"
        )
    if not isinstance(comm, Communicator):
        raise TypeError(f"comm must be a Communicator (rank, size, broadcast, allgather, gather, ...), got {comm!r}")


class ShardedIndex(EmbeddingIndex):
    """An :class:`~batchsel.index.EmbeddingIndex` whose rows are split over the ranks of
    ``comm``: rank r indexes rows ``row_range = shard_range(N, r, W)`` only.

    Construction, :meth:`search`, :meth:`neighbors` and :meth:`knn_graph` are collective
    (every rank calls them, in the same order). ``search`` answers each rank's own
    queries against all rows; ``neighbors`` and ``knn_graph`` return this rank's rows
    (``hi - lo`` of them), with global indices. Results equal the single-process index's
    (same neighbours up to distance ties), for ``kind="flat"`` and ``kind="ivf"``.

    Parameters
    ----------
    embeddings : array-like, torch.Tensor or path
        The full array or ``.npy`` path, the same on every rank; a rank reads its own
        rows, rank 0 also the IVF training sample, every rank the few rows of the
        ``nprobe`` tuning sample (and, for the ``"cosine"`` kernel of non-cosine metrics,
        its neighbours' rows).
    comm : Communicator
        Any :class:`~batchsel.core.communicator.Communicator`.
    metric, kind, nprobe, progress, seed
        As :class:`EmbeddingIndex` (defaults ``"cosine"``, ``"auto"``, None, True, 0);
        ``kind="hnsw"`` is refused.
    block_rows : int, default BLOCK_ROWS
        Queries per exchange round, all ranks together: ``block_rows / W`` per rank.
    node_work : str, default "auto"
        ``"auto"`` lets rank 0 do the faiss work alone, with every core of the machine,
        when all ranks run on one machine (sharding on one node costs exchanges and
        splits cores that one process uses as well; docs: design/sharded.md); the other
        ranks wait without spinning and get their rows of the results. ``"leader"`` does
        so wherever the ranks run, ``"shard"`` never. Ranks on several machines shard as
        described above.

    See Also
    --------
    batchsel.distributed.sharded.gather_graph : the ``N x N`` graph from every rank's rows.

    Examples
    --------
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
        node_work: str = "auto",
    ) -> None:
        metric = check_metric(metric, METRICS)
        check_node_work(node_work)
        _check_kind_and_comm(kind, comm)
        self.comm = comm
        # a .npy file is reopened for scattered reads (the IVF training sample, neighbours'
        # rows): a short-lived map, so that the pages they touch leave this rank's RSS
        self._path = os.fspath(embeddings) if isinstance(embeddings, (str, os.PathLike)) else None
        self._source = open_source(embeddings)
        n, d = self._source.shape
        # ranks with different N would cut different shards (the CSR assembly then crashed)
        check_ranks_agree(comm, "the embeddings", shape=(n, d), dtype=str(self._source.dtype))
        if n < comm.size:
            raise ValueError(f"embeddings have {n} rows, fewer than the {comm.size} ranks")
        self.row_range = shard_range(n, comm.rank, comm.size)
        self._bounds = shard_bounds(n, comm.size)
        self.first_row = self.row_range[0]
        self.metric = metric
        self.num_examples, self.dim = n, d
        self.nprobe = None if nprobe is None else check_int(nprobe, "nprobe", minimum=1)
        self.progress = progress
        self.seed = check_seed(seed)
        self.block_rows = check_int(block_rows, "block_rows", minimum=1)
        self._round_rows = max(1, self.block_rows // comm.size)  # queries per rank and exchange round
        self.kind = kind if kind != "auto" else ("flat" if n <= AUTO_EXACT_MAX else "ivf")
        self.node_work = resolve_node_work(node_work, comm)
        #: rank 0's index of all rows (``node_work="leader"``), None elsewhere
        self.whole: EmbeddingIndex | None = None
        self._leader = RankZeroIndex(comm, self._bounds) if self.node_work == "leader" else None
        if self._leader is not None:
            self.index = None
            # rank 0's index checks every row (its error reaches every rank); this rank's
            # rows stay unread until a kernel needs them
            self.embeddings = self._source[self.row_range[0] : self.row_range[1]]
            self.__dict__.update(self._leader.build(self._index_of_all_rows))
            self.whole = self._leader.whole
        else:
            self.embeddings = checked_shard(self._source, self.row_range, metric, comm)
            self.index = self._build()

    # -- construction -----------------------------------------------------------------
    def _index_of_all_rows(self) -> EmbeddingIndex:
        source = self._source if self._path is None else self._path
        return EmbeddingIndex(
            source, metric=self.metric, kind=self.kind, nprobe=self.nprobe, progress=self.progress, seed=self.seed
        )

    def _build(self) -> Any:  # a flat or IVF faiss index: their attributes differ
        faiss_metric = faiss.METRIC_L2 if self.metric == "euclidean" else faiss.METRIC_INNER_PRODUCT
        if self.kind == "flat":
            index: Any = faiss.IndexFlat(self.dim, faiss_metric)
        else:
            blob = None
            if self.comm.rank == 0:
                # rank 0 reads the training sample (of all rows) and trains the quantizer
                # exactly as EmbeddingIndex does; every rank then adds its rows to a copy
                blob = faiss.serialize_index(self._trained_ivf(self._scattered_source(), faiss_metric))
            index = faiss.deserialize_index(self.comm.broadcast(blob, root=0))
            self.train_size_ = min(self.num_examples, index.nlist * IVF_TRAIN_PER_LIST)
        self._add_rows(index)
        drop_pages(self._source)  # the index holds its own copy
        self._shards = ShardSearch(self.comm, index, self.kind == "ivf", self.row_range[0])
        if self.kind == "ivf":
            self.index = index  # _tune_nprobe searches through self.index on every rank
            self.nprobe_ = self._tune_nprobe(index) if self.nprobe is None else min(self.nprobe, index.nlist)
            index.nprobe = self.nprobe_
        return index

    def _add_rows(self, index: Any) -> None:
        """This rank's rows into ``index`` (an IVF index gets their global ids)."""
        lo, hi = self.row_range
        logger.info(
            "rank %d: adding rows %d..%d of %d x %d to a %s index (%s)",
            self.comm.rank,
            lo,
            hi,
            self.num_examples,
            self.dim,
            self.kind,
            self.metric,
        )
        bar = self._shard_rows_bar("index add", "pt")
        for start in range(0, hi - lo, self.block_rows):
            stop = min(hi - lo, start + self.block_rows)
            block = self._prepared(self.embeddings[start:stop])
            if self.kind == "ivf":
                index.add_with_ids(block, np.arange(lo + start, lo + stop, dtype=np.int64))
            else:
                index.add(block)
            bar.update(stop - start)
        bar.close()

    def _shard_rows_bar(self, desc: str, unit: str) -> tqdm:
        """A progress bar over this shard's rows, shown when ``progress`` is on and the
        shard has more than one block of rows."""
        lo, hi = self.row_range
        return tqdm(
            total=hi - lo, desc=desc, unit=unit, leave=False, disable=not self.progress or hi - lo <= self.block_rows
        )

    def _scattered_source(self) -> np.ndarray:
        return np.load(self._path, mmap_mode="r") if self._path is not None else self._source

    def rows_of(self, indices: np.ndarray) -> np.ndarray:
        return np.asarray(self._scattered_source()[indices], dtype=np.float32)

    # -- search -----------------------------------------------------------------------
    def _search_same(self, index: faiss.Index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Search queries that are the same on every rank: each shard answers, merged."""
        return self._shards.same(queries, k)

    def _search_blocks(self, q: np.ndarray, k: int, desc: str) -> tuple[np.ndarray, np.ndarray]:
        m, b = q.shape[0], self._round_rows
        distances = np.empty((m, k), dtype=np.float32)
        indices = np.empty((m, k), dtype=np.int64)
        bar = tqdm(total=m, desc=desc, unit="q", disable=not self.progress or m <= b, leave=False)
        for r in range(self._shards.rounds(-(-m // b))):
            start, stop = min(m, r * b), min(m, (r + 1) * b)
            distances[start:stop], indices[start:stop] = self._shards.exchange(self._prepared(q[start:stop]), k)
            bar.update(stop - start)
        bar.close()
        return distances, indices

    def search(self, queries: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Collective: the ``k`` nearest points (of all shards) of this rank's ``queries``.

        Parameters
        ----------
        queries : array-like, torch.Tensor or path
            This rank's ``M x d`` queries, any number per rank, zero included.
        k : int
            Neighbours per query, at most ``N``.

        Returns
        -------
        tuple[numpy.ndarray, numpy.ndarray]
            ``(distances, indices)``, ``M x k``, as :meth:`EmbeddingIndex.search`.
        """
        if self._leader is not None:
            return self._leader.search(queries, k, self.dim, self.num_examples)
        q = tensor_to_numpy(queries)
        if isinstance(q, np.ndarray) and q.ndim == 2 and q.shape[0] == 0:  # a rank without queries takes part
            if q.shape[1] != self.dim:
                raise ValueError(f"queries have dimension {q.shape[1]} but the index has dimension {self.dim}")
            k = check_int(k, "k", minimum=1, maximum=self.num_examples)
            return self._search_blocks(np.empty((0, self.dim), dtype=np.float32), k, desc="search")
        return super().search(queries, k)

    def _ivf_self_search(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Every row of this shard searched against all shards, the queries taken list by
        list from the local IVF index (see EmbeddingIndex._ivf_self_search)."""
        lo, hi = self.row_range
        distances = np.empty((hi - lo, k), dtype=np.float32)
        indices = np.empty((hi - lo, k), dtype=np.int64)
        bar = self._shard_rows_bar("knn graph", "q")
        blocks = ivf_list_blocks(self.index, self.dim, self._round_rows)
        nothing = (np.empty(0, np.int64), np.empty((0, self.dim), np.float32))
        while True:
            rows, queries = next(blocks, nothing)
            if not self._shards.any_left(len(rows)):
                break  # every rank is done
            distances[rows - lo], indices[rows - lo] = self._shards.exchange(queries, k)
            bar.update(len(rows))
        bar.close()
        return distances, indices

    def neighbors(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Collective: the ``k`` nearest other points of every row of this shard, ``(D, I)``,
        ``(hi - lo) x k``, global indices (as :meth:`EmbeddingIndex.neighbors`)."""
        if self._leader is not None:
            return self._leader.neighbors(k)
        return super().neighbors(k)

    # -- the k-NN graph ---------------------------------------------------------------
    def _rbf_sigma2(self, sq: np.ndarray, valid: np.ndarray) -> float:
        return global_median_sigma2(sq, valid, self.comm)

    def knn_graph(
        self,
        k: int = 10,
        kernel: str = "rbf",
        symmetrize: bool = True,
        sigma: float | None = None,
        self_weight: float | None = None,
    ) -> sp.csr_matrix:
        """Collective: this rank's rows of the k-NN affinity graph.

        Parameters
        ----------
        k, kernel, symmetrize, sigma, self_weight
            As :meth:`EmbeddingIndex.knn_graph` (sigma is the median over all points).

        Returns
        -------
        scipy.sparse.csr_matrix
            An ``(hi - lo) x N`` CSR matrix (float32 weights, global int64 column
            indices): rows ``lo..hi-1`` of what :meth:`EmbeddingIndex.knn_graph` returns
            with the same arguments. :func:`~batchsel.distributed.sharded.gather_graph`
            assembles the ``N x N`` graph.
        """
        check_kernel(kernel, self.metric)
        check_self_weight(self_weight)
        # node_work="leader": rank 0 searches (neighbors), then every rank weighs and
        # symmetrizes its own rows, in parallel (single-threaded scipy work)
        lo, hi = self.row_range
        n = self.num_examples
        start = time.perf_counter()
        D, I = self.neighbors(k)
        logger.info("rank %d: %d-NN of rows %d..%d in %.1f s", self.comm.rank, k, lo, hi, time.perf_counter() - start)
        valid = I >= 0
        w = self._edge_weights(D, I, valid, kernel, sigma)
        if not self.comm.allreduce(np.array([valid.sum()], dtype=np.int64))[0]:
            raise empty_graph_error(k, n)
        rows = to_int64(neighbour_csr(w, I, valid, (hi - lo, n)))
        del D, I, w, valid
        if symmetrize:
            start = time.perf_counter()
            rows = symmetrized_rows(rows, self.comm, self._bounds, self.row_range)
            logger.info("rank %d: symmetrized in %.1f s", self.comm.rank, time.perf_counter() - start)
        rows.sort_indices()
        rows = to_int64(rows)
        if self_weight is not None:  # no self loops so far: add the diagonal
            rows = with_self_loops(rows, self_weight, self.row_range)
        return rows

    def __repr__(self) -> str:
        return (
            f"ShardedIndex(N={self.num_examples}, d={self.dim}, metric={self.metric!r}, kind={self.kind!r}, "
            f"rows={self.row_range}, rank={self.comm.rank}/{self.comm.size})"
        )


__all__ = ["ShardedIndex"]
