"""Facility location maximized over a graph held in row shards: the distributed
counterpart of ``maximize(FacilityLocation(W), k)`` (:func:`batchsel.submodular.maximize`'s
lazy greedy), with the same picks, gains and tie rule.

The single-process pieces are reused, not repeated: the gains come from
:func:`batchsel.submodular.kernels.facility_gains` and the result is a
:class:`batchsel.Selection`. What is distributed is the bookkeeping: every rank
keeps a lazy heap of its own rows' gains, and each step the ranks agree on the winner.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from batchsel.core.checks import check_int, to_int64
from batchsel.core.communicator import Communicator
from batchsel.distributed.sharded.graph import check_shards

if TYPE_CHECKING:
    from batchsel.submodular.optimizers import Selection


class _ShardHeap:
    """This rank's lazy max-heap of its own rows' gains: ``(-bound, item, step evaluated)``,
    so ties go to the smaller item; ``cur`` is the coverage, updated by the caller."""

    def __init__(self, rows: sp.csr_matrix, cur: np.ndarray, row_start: int) -> None:
        from batchsel.submodular.kernels import facility_gains  # numba: loaded when used

        self.gains_of = facility_gains
        self.rows, self.cur, self.row_start = rows, cur, row_start
        local = np.arange(rows.shape[0], dtype=np.int64)
        gains = facility_gains(rows, cur, local)
        self.heap = [(-g, row_start + j, 0) for j, g in enumerate(gains.tolist())]
        heapq.heapify(self.heap)
        self.evaluations = len(local)

    def best(self, step: int, n: int) -> tuple[float, int]:
        """(gain, item) of this rank's best item at pick ``step``, the top refreshed until
        its gain is current (lazy greedy); ``(-inf, n)`` when no item is left."""
        heap = self.heap
        while heap and heap[0][2] != step:  # refresh the top until it is current
            _, j, _ = heapq.heappop(heap)
            g = float(self.gains_of(self.rows, self.cur, np.array([j - self.row_start]))[0])
            self.evaluations += 1
            heapq.heappush(heap, (-g, j, step))
        return (-heap[0][0], heap[0][1]) if heap else (-np.inf, n)

    def take(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Remove item ``j`` (this rank's best) and return its row: (columns, weights)."""
        heapq.heappop(self.heap)
        lo_p, hi_p = self.rows.indptr[j - self.row_start], self.rows.indptr[j - self.row_start + 1]
        return self.rows.indices[lo_p:hi_p], self.rows.data[lo_p:hi_p]


def facility_location(rows: sp.csr_matrix, k: int, comm: Communicator, row_start: int) -> "Selection":
    """Collective: exact lazy greedy facility location ``f(S) = sum_v max_{s in S} W[s, v]``
    over a graph held in row shards: the same picks as ``maximize(FacilityLocation(W), k)``
    in one process, on every rank.

    Every rank keeps the coverage of all N items (N float32) and a lazy heap of its own
    rows' gains (a gain is computed from the item's row, which its owner holds); each step
    the ranks all-gather their best fresh gain, the largest wins (ties to the smaller
    index, the greedy order of :func:`batchsel.core.heap.before`), and its owner
    broadcasts the winner's row. Two small collectives per pick.

    Parameters
    ----------
    rows : scipy.sparse.csr_matrix
        This rank's rows ``row_start ..`` of the non-negative similarity ``W`` (``N``
        columns), e.g. :meth:`ShardedIndex.knn_graph
        <batchsel.distributed.sharded.ShardedIndex.knn_graph>` with ``self_weight=1.0``.
    k : int
        Items to pick, in ``[1, N]``.
    comm : Communicator
        The ranks; their rows must tile ``W`` in rank order.
    row_start : int
        The global index of this rank's first row.

    Returns
    -------
    Selection
        The picks in order, their gains, ``f(S)``, ``optimizer="sharded-lazy"`` and the
        gain evaluations of all ranks together.

    See Also
    --------
    batchsel.submodular.maximize : the single-process optimizers.
    batchsel.FacilityLocation : the set function.

    Examples
    --------
    >>> from batchsel.integrations import SingleProcessComm
    >>> w = sp.csr_matrix(np.array([[1, .9, 0], [.9, 1, .2], [0, .2, 1]], dtype=np.float32))
    >>> facility_location(w, 2, SingleProcessComm(), 0).indices.tolist()
    [1, 2]
    """
    from batchsel.submodular.optimizers import Selection

    rows = to_int64(sp.csr_matrix(rows, dtype=np.float32))
    n = rows.shape[1]
    k = check_int(k, "k", minimum=1, maximum=n)
    ends = check_shards(comm, rows.shape, int(row_start))
    if rows.nnz and rows.data.min() < 0:
        raise ValueError(f"facility location needs non-negative weights, got {rows.data.min()}")
    rows.sort_indices()
    cur = np.zeros(n, dtype=np.float32)
    shard = _ShardHeap(rows, cur, row_start)
    picks, picked_gains = [], []
    for step in range(k):
        offers = comm.allgather(np.array(shard.best(step, n), dtype=np.float64))
        g, j = max(((o[0], -o[1]) for o in offers))  # largest gain, then smallest index
        j = int(-j)
        if j >= n:
            break  # no candidate left anywhere
        mine = row_start <= j < row_start + rows.shape[0]
        payload = shard.take(j) if mine else None
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
        evaluations=int(comm.allreduce(np.array([shard.evaluations]))[0]),
    )


__all__ = ["facility_location"]
