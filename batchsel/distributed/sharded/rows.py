"""Which rows each rank holds, and how a rank reads them: contiguous shards, the
embeddings opened unread (a ``.npy`` file memory-mapped), this rank's rows checked with
the same error on every rank, and the file's pages given back once indexed.
"""

from __future__ import annotations

import mmap
import os
from typing import Any

import numpy as np

from batchsel.core.checks import check_int, check_scale, load_embeddings, tensor_to_numpy
from batchsel.core.communicator import Communicator


def shard_range(num_examples: int, rank: int, size: int) -> tuple[int, int]:
    """Rows ``[lo, hi)`` of rank ``rank`` of ``size``: contiguous, sizes differ by at most one.

    Parameters
    ----------
    num_examples : int
        The number of rows, all ranks together.
    rank : int
        The rank, in ``[0, size)``.
    size : int
        The number of ranks, at least 1.

    Returns
    -------
    tuple[int, int]
        ``(lo, hi)``.

    Examples
    --------
    >>> [shard_range(10, r, 3) for r in range(3)]
    [(0, 3), (3, 6), (6, 10)]
    """
    size = check_int(size, "size", minimum=1)
    rank = check_int(rank, "rank", minimum=0, maximum=size - 1)
    return num_examples * rank // size, num_examples * (rank + 1) // size


def shard_bounds(num_examples: int, size: int) -> np.ndarray:
    """Where every rank's rows start, then ``num_examples``: rank r holds
    ``bounds[r]:bounds[r + 1]`` (int64, ``size + 1`` entries).

    Examples
    --------
    >>> shard_bounds(10, 3).tolist()
    [0, 3, 6, 10]
    """
    return np.array([shard_range(num_examples, r, size)[0] for r in range(size)] + [num_examples], dtype=np.int64)


def rows_by_rank(arrays: tuple[np.ndarray, ...], bounds: np.ndarray) -> list[tuple[np.ndarray, ...]]:
    """Each rank's rows ``bounds[r]:bounds[r + 1]`` of every array.

    Examples
    --------
    >>> rows_by_rank((np.arange(4),), np.array([0, 1, 4]))
    [(array([0]),), (array([1, 2, 3]),)]
    """
    return [tuple(a[bounds[r] : bounds[r + 1]] for a in arrays) for r in range(len(bounds) - 1)]


def open_source(embeddings: Any) -> np.ndarray:
    """The full ``N x d`` array, unchecked and not read: a ``.npy`` path is memory-mapped.

    Parameters
    ----------
    embeddings : array-like, torch.Tensor or path
        As :class:`~batchsel.index.EmbeddingIndex` takes them.

    Returns
    -------
    numpy.ndarray
        The array (a memory map for a ``.npy`` path); ``ValueError`` unless 2-D.

    Examples
    --------
    >>> open_source([[1.0, 2.0]]).shape
    (1, 2)
    """
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


def checked_shard(source: np.ndarray, row_range: tuple[int, int], metric: str, comm: Communicator) -> np.ndarray:
    """Collective: this rank's rows of ``source``, checked (finite; float32 range for the
    metrics that do not normalize), with the same error on every rank.

    Parameters
    ----------
    source : numpy.ndarray
        All rows (:func:`open_source`).
    row_range : tuple[int, int]
        This rank's rows ``[lo, hi)``.
    metric : str
        The index's metric: ``"cosine"`` takes any scale.
    comm : Communicator
        The ranks; an error on one rank is raised on all. Underflow is an error only
        when every shard underflows.

    Returns
    -------
    numpy.ndarray
        The rows, float32 C-contiguous.

    Examples
    --------
    >>> from batchsel.distributed.comm import SingleProcessComm
    >>> checked_shard(np.ones((4, 2)), (1, 3), "euclidean", SingleProcessComm()).shape
    (2, 2)
    """
    lo, hi = row_range
    error, underflow = "", False
    try:
        shard = load_embeddings(source[lo:hi], first_row=lo)
        if metric != "cosine":
            check_scale(shard, "embeddings", underflow=False)
            try:
                check_scale(shard, "embeddings")
            except ValueError as exc:  # an error only if every shard underflows
                error, underflow = str(exc), True
    except (ValueError, TypeError) as exc:
        error = f"{exc} (rows {lo}..{hi - 1}, rank {comm.rank})"
    reports = comm.allgather((error, underflow))
    fatal = [e for e, u in reports if e and not u]
    if fatal:
        raise ValueError(fatal[0])
    if all(u for _, u in reports):
        raise ValueError(reports[0][0])
    return shard


def drop_pages(source: np.ndarray) -> None:
    """Give back the pages of a memory-mapped ``source`` read so far: clean file pages,
    which count in this rank's RSS while mapped; a later read faults them back in. Does
    nothing for an array in memory."""
    mm = getattr(source, "_mmap", None)
    if mm is not None and hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
        mm.madvise(mmap.MADV_DONTNEED)


__all__ = ["shard_range", "shard_bounds", "rows_by_rank", "open_source", "checked_shard", "drop_pages"]
