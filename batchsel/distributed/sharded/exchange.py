"""How a search reaches every shard: each rank searches its own rows, the answers are
all-gathered and merged into one top-k, as one process's index over all rows would give.

Queries travel in rounds: every rank's block is all-gathered, searched by every shard,
and the ``(D, I)`` all-gathered back (docs: design/sharded.md). For IVF, the owner of a
query assigns it to its ``nprobe`` lists once and ships the assignment with it, so every
shard scans the lists one process would scan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import faiss
import numpy as np

from batchsel.core.communicator import Communicator


def merge_topk(
    Ds: Sequence[np.ndarray], Is: Sequence[np.ndarray], k: int, larger_is_closer: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of several ``(D, I)`` answers to the same queries: nearest first, ties to the
    smaller global index, missing neighbours (-1) last.

    Parameters
    ----------
    Ds, Is : sequence of numpy.ndarray
        Every shard's distances and global indices, ``queries x k_s`` each.
    k : int
        Neighbours to keep.
    larger_is_closer : bool
        Scores are similarities (inner product), not distances.

    Returns
    -------
    tuple[numpy.ndarray, numpy.ndarray]
        ``(D, I)``, ``queries x k``.

    Examples
    --------
    >>> D, I = merge_topk([np.array([[1.0, 3.0]]), np.array([[1.0, 2.0]])], [np.array([[7, 1]]), np.array([[4, -1]])], 3, False)
    >>> I.tolist()
    [[4, 7, 1]]
    """
    D = np.concatenate(Ds, axis=1)
    I = np.concatenate(Is, axis=1)
    missing = I < 0
    key = np.where(missing, np.inf, -D if larger_is_closer else D)
    order = np.lexsort((np.where(missing, np.iinfo(np.int64).max, I), key), axis=1)[:, :k]
    return np.take_along_axis(D, order, axis=1), np.take_along_axis(I, order, axis=1)


@dataclass
class ShardSearch:
    """This rank's faiss index of its rows, searched together with every other rank's.

    Every method but :meth:`local` is collective.

    Parameters
    ----------
    comm : Communicator
        The ranks.
    index : faiss.Index
        This rank's index: flat (local row numbers) or IVF (global ids, a quantizer shared
        by all ranks).
    ivf : bool
        ``index`` is an IVF index.
    first_row : int
        The global index of this rank's first row.

    Examples
    --------
    >>> from batchsel.distributed.comm import SingleProcessComm
    >>> x = np.eye(3, dtype=np.float32)
    >>> flat = faiss.IndexFlat(3, faiss.METRIC_L2)
    >>> flat.add(x)
    >>> ShardSearch(SingleProcessComm(), flat, False, 10).same(x[:1], 1)[1].tolist()
    [[10]]
    """

    comm: Communicator
    index: Any
    ivf: bool
    first_row: int

    def local(self, queries: np.ndarray, k: int, coarse: tuple | None = None) -> tuple[np.ndarray, np.ndarray]:
        """This shard's top-k of prepared ``queries`` (global indices); ``coarse``: the
        queries' IVF list assignment ``(distances, lists)``, else the index assigns them."""
        if queries.shape[0] == 0:
            return np.empty((0, k), dtype=np.float32), np.empty((0, k), dtype=np.int64)
        if self.ivf:
            if coarse is None:
                return self.index.search(queries, k)
            return self.index.search_preassigned(queries, k, coarse[1], coarse[0])
        D, I = self.index.search(queries, k)
        return D, np.where(I >= 0, I + self.first_row, -1)

    def _larger_is_closer(self) -> bool:
        return self.index.metric_type == faiss.METRIC_INNER_PRODUCT

    def same(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Search queries that are the same on every rank: each shard answers, merged."""
        D, I = self.local(queries, k, None)
        Ds, Is = self.comm.allgather(D), self.comm.allgather(I)
        return merge_topk(Ds, Is, k, self._larger_is_closer())

    def exchange(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """One round: every rank's prepared query block is searched by every shard;
        returns the merged top-k of this rank's block."""
        coarse = None
        if self.ivf:  # the owner assigns its queries to lists, once
            Dq, Iq = (
                self.index.quantizer.search(queries, self.index.nprobe)
                if len(queries)
                else (np.empty((0, self.index.nprobe), np.float32), np.empty((0, self.index.nprobe), np.int64))
            )
            coarse = (np.concatenate(self.comm.allgather(Dq)), np.concatenate(self.comm.allgather(Iq)))
        blocks = self.comm.allgather(queries)
        sizes = np.cumsum([0] + [len(b) for b in blocks])
        D, I = self.local(np.concatenate(blocks), k, coarse)
        mine = slice(int(sizes[self.comm.rank]), int(sizes[self.comm.rank + 1]))
        Ds = [d[mine] for d in self.comm.allgather(D)]
        Is = [i[mine] for i in self.comm.allgather(I)]
        return merge_topk(Ds, Is, k, self._larger_is_closer())

    def rounds(self, count: int) -> int:
        """The number of exchange rounds: the most any rank needs (``count`` here)."""
        return int(self.comm.allreduce(np.array([count], dtype=np.int64), op="max")[0])

    def any_left(self, count: int) -> bool:
        """Whether some rank still has queries (``count`` here)."""
        return self.rounds(count) > 0


__all__ = ["merge_topk", "ShardSearch"]
