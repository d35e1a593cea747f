"""The k-NN graph held in row shards: each rank's rows as an ``(hi - lo) x N`` CSR
matrix with global int64 column indices, symmetrized across ranks, assembled into the
``N x N`` graph (:func:`gather_graph`) or kept in one file per rank
(:func:`save_graph_shard`, :func:`load_graph_shards`).
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp

from batchsel.core.checks import mark_symmetric, to_int64
from batchsel.core.communicator import Communicator, check_ranks_agree
from batchsel.core.io import atomic_write


def symmetrized_rows(
    rows: sp.csr_matrix, comm: Communicator, bounds: np.ndarray, row_range: tuple[int, int]
) -> sp.csr_matrix:
    """Collective: max(W, W^T) restricted to this rank's rows of W.

    The transpose of this rank's rows (an ``N x (hi - lo)`` CSR) is cut by row owner and
    each piece sent to its owner (``W - 1`` rounds of all-gathers), which puts the pieces
    side by side.

    Parameters
    ----------
    rows : scipy.sparse.csr_matrix
        This rank's rows of W, ``(hi - lo) x N``, int64 indices.
    comm : Communicator
        The ranks.
    bounds : numpy.ndarray
        Where every rank's rows start, then N (:func:`~batchsel.distributed.sharded.rows.shard_bounds`).
    row_range : tuple[int, int]
        This rank's rows ``[lo, hi)``.

    Returns
    -------
    scipy.sparse.csr_matrix
        This rank's rows of max(W, W^T).

    Examples
    --------
    >>> from batchsel.distributed.comm import SingleProcessComm
    >>> w = sp.csr_matrix(np.array([[0, 1], [0, 0]], dtype=np.float32))
    >>> symmetrized_rows(w, SingleProcessComm(), np.array([0, 2]), (0, 2)).toarray().tolist()
    [[0.0, 1.0], [1.0, 0.0]]
    """
    lo, hi = row_range
    size, rank, b = comm.size, comm.rank, bounds
    transposed = to_int64(rows.T.tocsr())  # row j: the rows of this shard listing j
    pieces: list[Any] = [None] * size  # (indptr, indices, data) of each rank's columns
    for step in range(size):
        dest, src = (rank + step) % size, (rank - step) % size
        cut = transposed[b[dest] : b[dest + 1]]
        if step == 0:
            pieces[rank] = (cut.indptr, cut.indices, cut.data)
            continue
        got = [comm.allgather(a)[src] for a in (cut.indptr, cut.indices, np.ascontiguousarray(cut.data))]
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


def global_median_sigma2(sq: np.ndarray, valid: np.ndarray, comm: Communicator) -> float:
    """Collective: the RBF kernel's default sigma^2 over all ranks' points, as
    :func:`batchsel.index.affinity.median_sigma2` gives it for all points in one process.

    Parameters
    ----------
    sq, valid : numpy.ndarray
        As :func:`~batchsel.index.affinity.median_sigma2`, for this rank's rows.
    comm : Communicator
        The ranks.

    Returns
    -------
    float
        sigma^2 > 0, the same on every rank.

    Examples
    --------
    >>> from batchsel.distributed.comm import SingleProcessComm
    >>> global_median_sigma2(np.array([[1.0, 4.0], [1.0, 9.0], [2.0, 2.0]]), np.ones((3, 2), bool), SingleProcessComm())
    4.0
    """
    kth = np.concatenate(comm.allgather(np.ascontiguousarray(sq[valid[:, -1], -1])))
    sigma2 = float(np.median(kth)) if kth.size else 0.0
    if sigma2 <= 0:  # more than half the points have k duplicates
        positive = sq[valid & (sq > 0)]
        total, count = comm.allreduce(np.array([positive.sum(dtype=np.float64), positive.size]))
        sigma2 = float(total / count) if count else 1.0
    return sigma2


def with_self_loops(rows: sp.csr_matrix, self_weight: float, row_range: tuple[int, int]) -> sp.csr_matrix:
    """This rank's rows (no self loops so far) with ``self_weight`` on the global
    diagonal, sorted, int64 indices.

    Examples
    --------
    >>> w = sp.csr_matrix(np.array([[0, 1, 0]], dtype=np.float32))
    >>> with_self_loops(w, 0.5, (2, 3)).toarray().tolist()
    [[0.0, 1.0, 0.5]]
    """
    lo, hi = row_range
    diag = sp.csr_matrix(
        (np.full(hi - lo, self_weight, dtype=np.float32), np.arange(lo, hi), np.arange(hi - lo + 1)),
        shape=rows.shape,
    )
    rows = to_int64((rows + diag).tocsr())
    rows.sort_indices()
    return rows


def gather_graph(
    rows: sp.csr_matrix, comm: Communicator, symmetric: bool = True, root: int | None = None
) -> sp.csr_matrix | None:
    """Collective: the ``N x N`` graph from every rank's rows (by rank).

    Every rank that receives the graph needs its memory, about ``2 k N * 12`` bytes for a
    symmetrized k-NN graph (240 MB at N = 1M, k = 10), and about as much again while it is
    assembled.

    Parameters
    ----------
    rows : scipy.sparse.csr_matrix
        This rank's rows (e.g. :meth:`ShardedIndex.knn_graph
        <batchsel.distributed.sharded.ShardedIndex.knn_graph>`), ``(hi - lo) x N``.
    comm : Communicator
        The ranks; rank r holds the r-th block of rows.
    symmetric : bool, default True
        Mark the result as symmetric (true of ``knn_graph(symmetrize=True)``).
    root : int or None, default None
        ``None`` returns the graph on every rank (all-gathers); ``root=r`` on rank ``r``
        only (``comm.gather``), ``None`` on the others, which then hold nothing beyond
        their own rows: use it when one rank consumes the graph (METIS, GreedMax,
        writing a file).

    Returns
    -------
    scipy.sparse.csr_matrix or None
        The graph, int64 indices (None on the ranks other than ``root``).

    Examples
    --------
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
    """Write this rank's rows (and where they start) to ``path`` (``.npz``, atomically).

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    rows : scipy.sparse.csr_matrix
        This rank's rows of the graph.
    row_start : int
        The global index of the first row.

    See Also
    --------
    load_graph_shards : the graph from every rank's file.

    Examples
    --------
    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     save_graph_shard(os.path.join(folder, "0.npz"), sp.identity(2, format="csr"), 0)
    ...     load_graph_shards([os.path.join(folder, "0.npz")]).nnz
    2
    """
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
    """The ``N x N`` graph from the files :func:`save_graph_shard` wrote (any order).

    Parameters
    ----------
    paths : sequence of str or os.PathLike
        Every rank's file; their rows must tile the graph's (``ValueError`` otherwise).
    symmetric : bool, default True
        Mark the result as symmetric.

    Returns
    -------
    scipy.sparse.csr_matrix
        The graph, int64 indices.

    Examples
    --------
    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     files = [os.path.join(folder, f"{r}.npz") for r in range(2)]
    ...     save_graph_shard(files[1], sp.csr_matrix((1, 2)), 1)
    ...     save_graph_shard(files[0], sp.csr_matrix(np.array([[0.0, 1.0]])), 0)
    ...     load_graph_shards(files).shape
    (2, 2)
    """
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


def check_shards(comm: Communicator, shape: tuple[int, int], row_start: int) -> np.ndarray:
    """Collective: every rank's rows are of one N-column graph and tile its rows in rank
    order; returns where each rank's rows end (rank r holds ``ends[r-1] .. ends[r]-1``).

    Parameters
    ----------
    comm : Communicator
        The ranks.
    shape : tuple[int, int]
        This rank's ``(rows, N)``.
    row_start : int
        The global index of this rank's first row.

    Returns
    -------
    numpy.ndarray
        int64 ends, one per rank; ``ValueError`` (one process) or ``RuntimeError``
        (ranks that disagree) when the rows do not tile the graph.

    Examples
    --------
    >>> from batchsel.distributed.comm import SingleProcessComm
    >>> check_shards(SingleProcessComm(), (3, 3), 0).tolist()
    [3]
    """
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


__all__ = [
    "symmetrized_rows",
    "global_median_sigma2",
    "with_self_loops",
    "gather_graph",
    "save_graph_shard",
    "load_graph_shards",
    "check_shards",
]
