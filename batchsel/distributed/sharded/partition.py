"""The GreedMax partition of a graph held in row shards: :mod:`batchsel.submodular.partition`'s
:func:`~batchsel.submodular.partition.submodular_partition`, run unchanged on the graph
gathered to one rank, its shards then broadcast to every rank.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import scipy.sparse as sp

from batchsel.core.checks import check_int, check_seed
from batchsel.core.communicator import Communicator
from batchsel.distributed.sharded.graph import gather_graph

# the logger of batchsel.distributed.sharded, as before it became a package
logger = logging.getLogger("batchsel.distributed.sharded")


def submodular_partition(
    rows: sp.csr_matrix, num_parts: int, comm: Communicator, *, seed: int = 0, root: int = 0, symmetric: bool = True
) -> list[np.ndarray]:
    """Collective: the GreedMax partition (:func:`batchsel.submodular.partition.submodular_partition`)
    of a graph held in row shards, on every rank, identical to the one-process function's.

    GreedMax is sequential (each of its N steps depends on all earlier ones: N collective
    rounds if distributed), so the graph is gathered to ``root``
    (:func:`~batchsel.distributed.sharded.gather_graph`), the single-process function runs
    there and the shard of every example is broadcast. The graph must fit on one node, as
    for the METIS blocks of the graph plan: at its peak the root holds the gathered graph
    (at most ``2 k N * 12`` bytes: 240 MB at N = 1M, k = 10) about three times (received
    parts, assembled graph, GreedMax's checked copy), plus GreedMax's coverage of
    ``num_parts * N * 4`` bytes (160 MB for 40 parts), and does about N * k work. The
    other ranks wait, holding only their rows. Beyond one node, partition a sample, or
    use ``partition="random"``.

    Parameters
    ----------
    rows : scipy.sparse.csr_matrix
        This rank's rows of ``W``, e.g. :meth:`ShardedIndex.knn_graph
        <batchsel.distributed.sharded.ShardedIndex.knn_graph>`.
    num_parts : int
        Shards, in ``[1, N]``.
    comm : Communicator
        The ranks.
    seed : int, default 0
        GreedMax's seed: ``submodular_partition(W, num_parts, seed=seed)`` in one process
        gives the same shards (so does ``submodular_partition(x, num_parts, seed=seed)``
        when ``W`` is the RBF 10-NN graph of ``x`` built with ``metric="euclidean"``).
    root : int, default 0
        The rank that gathers the graph and runs GreedMax.
    symmetric : bool, default True
        The rows are of a symmetric graph (``knn_graph(symmetrize=True)``, the default);
        with False the root checks and symmetrizes the gathered graph by max, as the
        one-process function does with any graph (one more transposed copy there).

    Returns
    -------
    list[numpy.ndarray]
        ``num_parts`` sorted int64 index arrays.

    Examples
    --------
    >>> from batchsel.distributed.sharded import ShardedIndex
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


__all__ = ["submodular_partition"]
