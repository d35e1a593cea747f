"""The index and the k-NN graph sharded over ranks (MPI, torch.distributed).

Each rank reads only its rows of the embeddings and indexes them; every search is answered
by all shards and merged, so results equal one process's :class:`~batchsel.index.EmbeddingIndex`
(flat: exact; IVF: one quantizer trained on rank 0 and broadcast, preassigned lists). The
k-NN graph stays distributed (CSR rows with global indices, symmetrized across ranks) or is
gathered to every rank or to one; facility location runs as a distributed lazy greedy.

Design and limits: docs/design/sharded.md.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import socket
import time
from typing import TYPE_CHECKING, Any, Iterator, Sequence

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
    mark_symmetric,
    tensor_to_numpy,
    to_int64,
)
from batchsel.core.communicator import Communicator, check_ranks_agree
from batchsel.core.io import atomic_write
from batchsel.index import AUTO_EXACT_MAX, BLOCK_ROWS, IVF_TRAIN_PER_LIST, KERNELS, KINDS, METRICS, EmbeddingIndex

if TYPE_CHECKING:
    from batchsel.submodular.optimizers import Selection

logger = logging.getLogger(__name__)

__all__ = [
    "ShardedIndex",
    "shard_range",
    "gather_graph",
    "save_graph_shard",
    "load_graph_shards",
    "facility_location",
    "submodular_partition",
]


def shard_range(num_examples: int, rank: int, size: int) -> tuple[int, int]:
    """Rows ``[lo, hi)`` of rank ``rank`` of ``size``: contiguous, sizes differ by at most one.

    >>> [shard_range(10, r, 3) for r in range(3)]
    [(0, 3), (3, 6), (6, 10)]
    """
    size = check_int(size, "size", minimum=1)
    rank = check_int(rank, "rank", minimum=0, maximum=size - 1)
    return num_examples * rank // size, num_examples * (rank + 1) // size


NODE_WORK = ("auto", "leader", "shard")


def _row_blocks(arrays: tuple[np.ndarray, ...], bounds: np.ndarray) -> list[tuple[np.ndarray, ...]]:
    """Each rank's rows ``bounds[r]:bounds[r + 1]`` of every array."""
    return [tuple(a[bounds[r] : bounds[r + 1]] for a in arrays) for r in range(len(bounds) - 1)]


@contextlib.contextmanager
def _all_cores() -> Iterator[None]:
    """Every core of the machine for faiss, for a while: a rank is often bound to one
    (mpiexec's default for few ranks) or started with OMP_NUM_THREADS=1."""
    cores = os.cpu_count() or 1
    before_threads = faiss.omp_get_max_threads()
    before_cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    try:
        if before_cpus is not None:
            try:
                os.sched_setaffinity(0, range(cores))
            except OSError:  # a cgroup that forbids it: the cores it allows
                pass
        faiss.omp_set_num_threads(len(os.sched_getaffinity(0)) if before_cpus is not None else cores)
        yield
    finally:
        faiss.omp_set_num_threads(before_threads)
        if before_cpus is not None:
            os.sched_setaffinity(0, before_cpus)


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


def _merge(
    Ds: Sequence[np.ndarray], Is: Sequence[np.ndarray], k: int, larger_is_closer: bool
) -> tuple[np.ndarray, np.ndarray]:
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
    ``comm`` (any :class:`~batchsel.core.communicator.Communicator`), ``block_rows``
    (queries per exchange round, all ranks together: ``block_rows / W`` per rank) and
    ``node_work``: ``"auto"`` (default) lets rank 0 do the faiss work alone, with every
    core of the machine, when all ranks run on one machine (sharding on one node costs
    exchanges and splits cores that one process uses as well: 2 ranks took 3.9 s where
    one process took 3.2 s for 300k x 32); the other ranks wait without spinning and get
    their rows of the results. ``"leader"`` does so wherever the ranks run, ``"shard"``
    never. Ranks on several machines shard as described above.
    ``embeddings`` is the full array or ``.npy`` path, the same on every rank; a rank
    reads its own rows, rank 0 also the IVF training sample, every rank the few rows of
    the ``nprobe`` tuning sample (and, for the ``"cosine"`` kernel of non-cosine metrics,
    its neighbours' rows).

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
        node_work: str = "auto",
    ) -> None:
        metric = check_metric(metric, METRICS)
        if node_work not in NODE_WORK:
            raise ValueError(f"node_work must be one of {NODE_WORK}, got {node_work!r}")
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if kind == "hnsw":
            raise ValueError(
                "kind='hnsw' cannot be sharded exactly (one graph index per shard searches differently "
                "from one over all rows); use 'flat' or 'ivf'"
            )
        if not isinstance(comm, Communicator):
            raise TypeError(
                f"comm must be a Communicator (rank, size, broadcast, allgather, gather, ...), got {comm!r}"
            )
        self.comm = comm
        # a .npy file is reopened for scattered reads (the IVF training sample, neighbours'
        # rows): a short-lived map, so that the pages they touch leave this rank's RSS
        self._path = os.fspath(embeddings) if isinstance(embeddings, (str, os.PathLike)) else None
        self._source = _open_source(embeddings)
        n, d = self._source.shape
        # ranks with different N would cut different shards (the CSR assembly then crashed)
        check_ranks_agree(comm, "the embeddings", shape=(n, d), dtype=str(self._source.dtype))
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
        self._round_rows = max(1, self.block_rows // comm.size)  # queries per rank and exchange round
        self.kind = kind if kind != "auto" else ("flat" if n <= AUTO_EXACT_MAX else "ivf")
        if node_work == "auto":
            node_work = "leader" if comm.size > 1 and len(set(comm.allgather(socket.gethostname()))) == 1 else "shard"
        self.node_work = node_work
        #: rank 0's index of all rows (``node_work="leader"``), None elsewhere
        self.whole: EmbeddingIndex | None = None
        if node_work == "leader":
            self.index = None
            # rank 0's index checks every row (its error reaches every rank); this rank's
            # rows stay unread until a kernel needs them
            self.embeddings = self._source[self.row_range[0] : self.row_range[1]]

            def build(_: Any) -> dict:
                source = self._source if self._path is None else self._path
                whole = EmbeddingIndex(
                    source, metric=metric, kind=self.kind, nprobe=self.nprobe, progress=progress, seed=seed
                )
                self.whole = whole
                return {k: getattr(whole, k) for k in ("nprobe_", "train_size_", "recall_") if hasattr(whole, k)}

            self.__dict__.update(self._from_rank0("ShardedIndex (rank 0 indexes all rows)", build))
        else:
            self.embeddings = self._checked_shard()
            self.index = self._build()

    def _from_rank0(self, what: str, compute: Any, per_rank: bool = False) -> Any:
        """``compute(self.whole)`` on rank 0, with every core of the machine; every rank
        gets the result (``per_rank``: a list, rank r gets its entry). The others wait in
        a sleeping poll (an MPI collective would spin on cores rank 0's threads use)."""
        result, error = None, None
        if self.comm.rank == 0:
            try:
                with _all_cores():
                    result = compute(self.whole)
            except (ValueError, TypeError) as exc:  # raised on every rank, not only here
                error = exc
        wait = getattr(self.comm, "wait_for_ranks", None)
        if wait is not None:
            wait(what, float("inf"))
        scatter = getattr(self.comm, "scatter", None)  # not in the Communicator protocol
        if per_rank and scatter is not None:
            failed = self.comm.broadcast(error, root=0)
            if failed is not None:
                raise failed
            return scatter(result, root=0)
        result, error = self.comm.broadcast((result, error), root=0)
        if error is not None:
            raise error
        return result[self.comm.rank] if per_rank else result

    # -- construction -----------------------------------------------------------------
    def _checked_shard(self) -> np.ndarray:
        """This rank's rows, checked (finite; float32 range), the same error on every rank."""
        lo, hi = self.row_range
        error, underflow = "", False
        try:
            shard = load_embeddings(self._source[lo:hi], first_row=lo)
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

    def _build(self) -> Any:  # a flat, IVF or HNSW faiss index: their attributes differ
        lo, hi = self.row_range
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
        bar = tqdm(
            total=hi - lo,
            desc="index add",
            unit="pt",
            leave=False,
            disable=not self.progress or hi - lo <= self.block_rows,
        )
        for start in range(0, hi - lo, self.block_rows):
            stop = min(hi - lo, start + self.block_rows)
            block = self._prepared(self.embeddings[start:stop])
            if self.kind == "ivf":
                index.add_with_ids(block, np.arange(lo + start, lo + stop, dtype=np.int64))
            else:
                index.add(block)
            bar.update(stop - start)
        bar.close()
        self._drop_pages()  # the index holds its own copy
        if self.kind == "ivf":
            self.index = index  # _tune_nprobe searches through self.index on every rank
            self.nprobe_ = self._tune_nprobe(index) if self.nprobe is None else min(self.nprobe, index.nlist)
            index.nprobe = self.nprobe_
        return index

    def _drop_pages(self) -> None:
        """Give back the pages of the memory-mapped file read so far: clean file pages,
        which count in this rank's RSS while mapped; a later read faults them back in."""
        mm = getattr(self._source, "_mmap", None)
        if mm is not None and hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
            mm.madvise(mmap.MADV_DONTNEED)

    def _scattered_source(self) -> np.ndarray:
        return np.load(self._path, mmap_mode="r") if self._path is not None else self._source

    def _rows_of(self, indices: np.ndarray) -> np.ndarray:
        return np.asarray(self._scattered_source()[indices], dtype=np.float32)

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
            Dq, Iq = (
                self.index.quantizer.search(queries, self.index.nprobe)
                if len(queries)
                else (np.empty((0, self.index.nprobe), np.float32), np.empty((0, self.index.nprobe), np.int64))
            )
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
        m, b = q.shape[0], self._round_rows
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
        if self.node_work == "leader":
            q = load_embeddings(queries, name="queries") if len(queries) else np.empty((0, self.dim), np.float32)
            if q.shape[1] != self.dim:
                raise ValueError(f"queries have dimension {q.shape[1]} but the index has dimension {self.dim}")
            k = check_int(k, "k", minimum=1, maximum=self.num_examples)
            blocks = self.comm.gather(q, root=0)

            def answer(whole: EmbeddingIndex) -> list:
                sizes = np.cumsum([0] + [len(b) for b in blocks])
                D, I = whole.search(np.concatenate(blocks), k) if sizes[-1] else (np.empty((0, k)), np.empty((0, k)))
                return [(D[a:z], I[a:z]) for a, z in zip(sizes[:-1], sizes[1:])]

            D, I = self._from_rank0("ShardedIndex.search (rank 0 answers)", answer, per_rank=True)
            return np.asarray(D, dtype=np.float32), np.asarray(I, dtype=np.int64)
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
        bar = tqdm(
            total=hi - lo,
            desc="knn graph",
            unit="q",
            leave=False,
            disable=not self.progress or hi - lo <= self.block_rows,
        )
        blocks = self._ivf_list_blocks(self._round_rows)
        nothing = (np.empty(0, np.int64), np.empty((0, self.dim), np.float32))
        while True:
            rows, queries = next(blocks, nothing)
            if not self.comm.allreduce(np.array([len(rows)], dtype=np.int64), op="max")[0]:
                break  # every rank is done
            distances[rows - lo], indices[rows - lo] = self._exchange_search(queries, k)
            bar.update(len(rows))
        bar.close()
        return distances, indices

    def neighbors(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Collective: the ``k`` nearest other points of every row of this shard, ``(D, I)``,
        ``(hi - lo) x k``, global indices (as :meth:`EmbeddingIndex.neighbors`)."""
        if self.node_work == "leader":
            b = self._bounds
            return self._from_rank0(
                "ShardedIndex.neighbors (rank 0 searches)",
                lambda whole: _row_blocks(whole.neighbors(k), b),
                per_rank=True,
            )
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

    def knn_graph(
        self,
        k: int = 10,
        kernel: str = "rbf",
        symmetrize: bool = True,
        sigma: float | None = None,
        self_weight: float | None = None,
    ) -> sp.csr_matrix:
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
        # node_work="leader": rank 0 searches (neighbors), then every rank weighs and
        # symmetrizes its own rows, in parallel (single-threaded scipy work)
        lo, hi = self.row_range
        n = self.num_examples
        start = time.perf_counter()
        D, I = self.neighbors(k)
        logger.info("rank %d: %d-NN of rows %d..%d in %.1f s", self.comm.rank, k, lo, hi, time.perf_counter() - start)
        valid = I >= 0
        w = self._edge_weights(D, I, valid, kernel, sigma)
        indptr = np.zeros(hi - lo + 1, dtype=np.int64)
        np.cumsum(valid.sum(axis=1), out=indptr[1:])
        if not self.comm.allreduce(np.array([valid.sum()], dtype=np.int64))[0]:
            raise ValueError(
                f"the {k}-NN graph of {n} points is empty: the index found no neighbours; rescale "
                f"the embeddings or use kind='flat'"
            )
        rows = to_int64(sp.csr_matrix((w[valid], I[valid], indptr), shape=(hi - lo, n)))
        del D, I, w, valid
        if symmetrize:
            start = time.perf_counter()
            rows = self._symmetrized(rows)
            logger.info("rank %d: symmetrized in %.1f s", self.comm.rank, time.perf_counter() - start)
        rows.sort_indices()
        rows = to_int64(rows)
        if self_weight is not None:  # no self loops so far: add the diagonal
            diag = sp.csr_matrix(
                (np.full(hi - lo, self_weight, dtype=np.float32), np.arange(lo, hi), np.arange(hi - lo + 1)),
                shape=rows.shape,
            )
            rows = to_int64((rows + diag).tocsr())
            rows.sort_indices()
        return rows

    def _symmetrized(self, rows: sp.csr_matrix) -> sp.csr_matrix:
        """max(W, W^T) restricted to this rank's rows: the transpose of this rank's rows
        (an ``N x (hi - lo)`` CSR) is cut by row owner and each piece sent to its owner
        (W - 1 rounds of all-gathers), which puts the pieces side by side."""
        lo, hi = self.row_range
        size, rank, b = self.comm.size, self.comm.rank, self._bounds
        transposed = to_int64(rows.T.tocsr())  # row j: the rows of this shard listing j
        pieces: list[Any] = [None] * size  # (indptr, indices, data) of each rank's columns
        for step in range(size):
            dest, src = (rank + step) % size, (rank - step) % size
            cut = transposed[b[dest] : b[dest + 1]]
            if step == 0:
                pieces[rank] = (cut.indptr, cut.indices, cut.data)
                continue
            got = [self.comm.allgather(a)[src] for a in (cut.indptr, cut.indices, np.ascontiguousarray(cut.data))]
            pieces[src] = tuple(got)
        del transposed
        # hstack of the pieces (columns of piece s are the rows of rank s): row by row,
        # piece after piece, which keeps every row's columns sorted
        counts = np.stack([np.diff(p[0]) for p in pieces])  # size x (hi - lo)
        indptr = np.zeros(hi - lo + 1, dtype=np.int64)
        np.cumsum(counts.sum(axis=0), out=indptr[1:])
        indices = np.empty(indptr[-1], dtype=np.int64)
        data = np.empty(indptr[-1], dtype=np.float32)
        starts = indptr[:-1].copy()
        for s, (p_indptr, p_indices, p_data) in enumerate(pieces):
            dest_pos = np.repeat(starts - p_indptr[:-1], counts[s]) + np.arange(p_indptr[-1])
            indices[dest_pos] = p_indices + b[s]
            data[dest_pos] = p_data
            starts += counts[s]
            pieces[s] = None
        transpose = sp.csr_matrix((data, indices, indptr), shape=rows.shape)
        return rows.maximum(transpose).tocsr()

    def __repr__(self) -> str:
        return (
            f"ShardedIndex(N={self.num_examples}, d={self.dim}, metric={self.metric!r}, kind={self.kind!r}, "
            f"rows={self.row_range}, rank={self.comm.rank}/{self.comm.size})"
        )


def gather_graph(
    rows: sp.csr_matrix, comm: Communicator, symmetric: bool = True, root: int | None = None
) -> sp.csr_matrix | None:
    """Collective: the ``N x N`` graph from every rank's rows (by rank).

    ``root=None`` returns it on every rank (all-gathers); ``root=r`` on rank ``r`` only
    (``comm.gather``), ``None`` on the others, which then hold nothing beyond their own
    rows: use it when one rank consumes the graph (METIS, GreedMax, writing a file).
    ``symmetric`` marks the result as symmetric (true of :meth:`ShardedIndex.knn_graph`
    with ``symmetrize=True``). Every rank that receives the graph needs its memory, about
    ``2 k N * 12`` bytes for a symmetrized k-NN graph (240 MB at N = 1M, k = 10), and
    about as much again while it is assembled.

    >>> from batchsel.integrations import SingleProcessComm
    >>> g = gather_graph(sp.identity(3, format="csr", dtype=np.float32), SingleProcessComm(), root=0)
    >>> g.shape, g.nnz
    ((3, 3), 3)
    """
    rows = to_int64(sp.csr_matrix(rows))
    check_ranks_agree(comm, "the graph's columns", columns=rows.shape[1])
    if root is None:
        collect = comm.allgather
    else:
        if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < comm.size:
            raise ValueError(f"root must be None or a rank in [0, {comm.size}), got {root!r}")

        def collect(a: np.ndarray) -> list | None:  # type: ignore[misc]
            return comm.gather(a, root=int(root))

    columns = rows.shape[1]
    indptrs = collect(rows.indptr)
    indices = collect(rows.indices)
    data = collect(np.ascontiguousarray(rows.data))
    if indptrs is None:  # not the root
        return None
    indices = np.concatenate(indices).astype(np.int64, copy=False)  # type: ignore[assignment]
    data = np.concatenate(data)  # type: ignore[assignment]
    offsets = np.cumsum([0] + [int(p[-1]) for p in indptrs])
    indptr = np.concatenate([[0]] + [p[1:] + o for p, o in zip(indptrs, offsets)]).astype(np.int64)
    n = indptr.size - 1
    if n != columns:
        raise ValueError(f"the ranks hold {n} rows of a graph with {columns} columns")
    graph = sp.csr_matrix((data, indices, indptr), shape=(n, n))
    graph = to_int64(graph)
    return mark_symmetric(graph) if symmetric else graph


def save_graph_shard(path: str | os.PathLike, rows: sp.csr_matrix, row_start: int) -> None:
    """Write this rank's rows (and where they start) to ``path`` (``.npz``, atomically)."""
    with atomic_write(path) as f:
        np.savez(
            f,
            indptr=rows.indptr.astype(np.int64),
            indices=rows.indices.astype(np.int64),
            data=rows.data,
            shape=np.array(rows.shape, dtype=np.int64),
            row_start=np.array(row_start, dtype=np.int64),
        )


def load_graph_shards(paths: Sequence[str | os.PathLike], symmetric: bool = True) -> sp.csr_matrix:
    """The ``N x N`` graph from the files :func:`save_graph_shard` wrote (any order)."""
    parts = []
    for p in paths:
        with np.load(p) as z:
            parts.append(
                (int(z["row_start"]), sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"])))
            )
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


def _check_shards(comm: Communicator, shape: tuple[int, int], row_start: int) -> np.ndarray:
    """Collective: every rank's rows are of one N-column graph and tile its rows in rank
    order; returns where each rank's rows end (rank r holds ``ends[r-1] .. ends[r]-1``)."""
    spans = comm.allgather((int(shape[1]), int(row_start), int(shape[0])))
    starts = [start for _, start, _ in spans]
    ends = [start + count for _, start, count in spans]
    if len({c for c, _, _ in spans}) > 1 or starts != [0] + ends[:-1] or ends[-1] != shape[1]:
        held = "; ".join(f"rank {r}: rows {s}..{s + c - 1} of {n} columns" for r, (n, s, c) in enumerate(spans))
        if comm.size == 1:  # one process: a bad argument, not ranks that disagree
            raise ValueError(
                f"row_start={row_start} and {shape[0]} rows do not make the {shape[1]} rows of the graph ({held})"
            )
        raise RuntimeError(f"the ranks' rows do not tile one graph in rank order ({held})")
    return np.asarray(ends, dtype=np.int64)


def facility_location(rows: sp.csr_matrix, k: int, comm: Communicator, row_start: int) -> "Selection":
    """Collective: exact lazy greedy facility location ``f(S) = sum_v max_{s in S} W[s, v]``
    over a graph held in row shards (this rank's rows ``row_start ..`` of ``W``, e.g.
    :meth:`ShardedIndex.knn_graph` with ``self_weight=1.0``): the same picks as
    ``maximize(FacilityLocation(W), k)`` in one process, on every rank.

    Every rank keeps the coverage of all N items (N float32) and a lazy heap of its own
    rows' gains (a gain is computed from the item's row, which its owner holds); each step
    the ranks all-gather their best fresh gain, the largest wins (ties to the smaller
    index), and its owner broadcasts the winner's row. Two small collectives per pick.

    >>> from batchsel.integrations import SingleProcessComm
    >>> w = sp.csr_matrix(np.array([[1, .9, 0], [.9, 1, .2], [0, .2, 1]], dtype=np.float32))
    >>> facility_location(w, 2, SingleProcessComm(), 0).indices.tolist()
    [1, 2]
    """
    import heapq

    from batchsel.submodular.kernels import facility_gains
    from batchsel.submodular.optimizers import Selection

    rows = to_int64(sp.csr_matrix(rows, dtype=np.float32))
    n = rows.shape[1]
    k = check_int(k, "k", minimum=1, maximum=n)
    ends = _check_shards(comm, rows.shape, int(row_start))
    if rows.nnz and rows.data.min() < 0:
        raise ValueError(f"facility location needs non-negative weights, got {rows.data.min()}")
    rows.sort_indices()
    cur = np.zeros(n, dtype=np.float32)
    local = np.arange(rows.shape[0], dtype=np.int64)
    gains = facility_gains(rows, cur, local)
    heap = [(-g, row_start + j, 0) for j, g in enumerate(gains.tolist())]  # (-bound, item, step evaluated)
    heapq.heapify(heap)
    picks, picked_gains, evaluations = [], [], len(local)
    for step in range(k):
        while heap and heap[0][2] != step:  # refresh the top until it is current
            _, j, _ = heapq.heappop(heap)
            g = float(facility_gains(rows, cur, np.array([j - row_start]))[0])
            evaluations += 1
            heapq.heappush(heap, (-g, j, step))
        best = (-heap[0][0], heap[0][1]) if heap else (-np.inf, n)
        offers = comm.allgather(np.array(best, dtype=np.float64))
        g, j = max(((o[0], -o[1]) for o in offers))  # largest gain, then smallest index
        j = int(-j)
        if j >= n:
            break  # no candidate left anywhere
        mine = row_start <= j < row_start + rows.shape[0]
        if mine:
            heapq.heappop(heap)
            lo_p, hi_p = rows.indptr[j - row_start], rows.indptr[j - row_start + 1]
            payload = (rows.indices[lo_p:hi_p], rows.data[lo_p:hi_p])
        else:
            payload = None
        owner = int(np.searchsorted(ends, j, side="right"))
        cols, vals = comm.broadcast(payload, root=owner)
        cur[cols] = np.maximum(cur[cols], vals)
        picks.append(j)
        picked_gains.append(g)
    value = float(cur.astype(np.float64).sum())
    return Selection(
        np.array(picks, dtype=np.int64),
        np.array(picked_gains),
        value,
        optimizer="sharded-lazy",
        evaluations=int(comm.allreduce(np.array([evaluations]))[0]),
    )


def submodular_partition(
    rows: sp.csr_matrix, num_parts: int, comm: Communicator, *, seed: int = 0, root: int = 0, symmetric: bool = True
) -> list[np.ndarray]:
    """Collective: the GreedMax partition (:func:`batchsel.selectors.submodular_partition`)
    of a graph held in row shards (this rank's rows of ``W``, e.g. :meth:`ShardedIndex.knn_graph`),
    on every rank: ``num_parts`` sorted int64 index arrays, identical to
    ``submodular_partition(W, num_parts, seed=seed)`` in one process (and so to
    ``submodular_partition(x, num_parts, seed=seed)`` when ``W`` is the RBF 10-NN graph of
    ``x`` that :class:`ShardedIndex` builds with ``metric="euclidean"``). ``symmetric``:
    the rows are of a symmetric graph (``knn_graph(symmetrize=True)``, the default); with
    False the root checks and symmetrizes the gathered graph by max, as the one-process
    function does with any graph (one more transposed copy there).

    GreedMax is sequential: every one of its N steps lets the worst shard take the best
    example for it, from gains that depend on all earlier steps, so a distributed run
    would need N collective rounds. Instead the graph is gathered to ``root``
    (:func:`gather_graph`), the single-process kernel runs there and the shard of every
    example is broadcast. Cost: the graph must fit on one node, as for the METIS blocks
    of the graph plan: at its peak the root holds the gathered graph (at most
    ``2 k N * 12`` bytes: 240 MB at N = 1M, k = 10) about three times (the received parts,
    the assembled graph, the copy GreedMax checks), plus GreedMax's coverage of
    ``num_parts * N * 4`` bytes (160 MB for 40 parts); and the root's GreedMax time
    (about N * k work). The other ranks wait, holding only their rows. Beyond one node,
    partition a sample, or use ``partition="random"``.

    >>> from batchsel.integrations import SingleProcessComm
    >>> from batchsel.submodular.partition import submodular_partition as one_process
    >>> x = np.random.default_rng(0).normal(size=(200, 4)).astype(np.float32)
    >>> comm = SingleProcessComm()
    >>> rows = ShardedIndex(x, comm, metric="euclidean", progress=False).knn_graph(k=10)
    >>> parts = submodular_partition(rows, 4, comm, seed=1)
    >>> all(np.array_equal(p, q) for p, q in zip(parts, one_process(x, 4, seed=1)))
    True
    """
    from batchsel.submodular.partition import submodular_partition as greedmax

    n = sp.csr_matrix(rows).shape[1]
    # checked on every rank before any collective: a bad value fails everywhere, no rank waits
    num_parts = check_int(num_parts, "num_parts", minimum=1, maximum=n)
    seed = check_seed(seed)
    graph = gather_graph(rows, comm, symmetric=symmetric, root=root)
    parts, error = None, ""
    if comm.rank == root:
        try:
            start = time.perf_counter()
            parts = greedmax(graph, num_parts, seed=seed)
            del graph
            logger.info(
                "rank %d: GreedMax of %d examples into %d shards in %.1f s",
                comm.rank,
                n,
                num_parts,
                time.perf_counter() - start,
            )
        except (ValueError, TypeError) as exc:  # bad weights: every rank raises it, none waits forever
            error = str(exc)
    parts, error = comm.broadcast((parts, error), root=root)
    if error:
        raise ValueError(error)
    return parts
