"""Graph utilities shared by the selectors that work on a sparse similarity graph
(GreedMax partitioning, METIS blocks): CSR in, CSR with int64 indices out (see
:func:`batchsel.core.checks.check_graph`, which makes a user's graph canonical first)."""

from __future__ import annotations

import logging

import numpy as np
import scipy.sparse as sp
from numba import njit

from batchsel.core.checks import known_symmetric, to_int64
from batchsel.core.io import c_stdout_to_stderr

logger = logging.getLogger(__name__)


def without_self_loops(graph: sp.csr_matrix) -> sp.csr_matrix:
    """The graph without its diagonal (unchanged, not copied, when it has none).

    Parameters
    ----------
    graph : scipy.sparse.csr_matrix
        A square graph; it is not modified.

    Returns
    -------
    scipy.sparse.csr_matrix
        ``graph`` itself when its diagonal is all zero, else a new CSR matrix (int64
        indices) holding its other entries.

    See Also
    --------
    symmetrized : every edge in both directions.

    Examples
    --------
    >>> import numpy as np
    >>> without_self_loops(sp.csr_matrix(np.eye(2) + np.eye(2)[::-1])).toarray().tolist()
    [[0.0, 1.0], [1.0, 0.0]]
    """
    if not graph.diagonal().any():
        return graph
    coo = graph.tocoo()
    keep = coo.row != coo.col
    g = sp.csr_matrix((coo.data[keep], (coo.row[keep], coo.col[keep])), shape=graph.shape, dtype=graph.dtype)
    return to_int64(g)


def symmetrized(graph: sp.csr_matrix) -> sp.csr_matrix:
    """``max(graph, graph.T)``: every edge in both directions with the larger weight
    (unchanged, not copied, when the graph is symmetric already).

    Parameters
    ----------
    graph : scipy.sparse.csr_matrix
        A square graph; it is not modified. A graph marked by
        :func:`~batchsel.core.checks.mark_symmetric` is taken as symmetric unchecked.

    Returns
    -------
    scipy.sparse.csr_matrix
        ``graph`` itself when symmetric, else a new CSR matrix with int64 indices.

    See Also
    --------
    without_self_loops : drop the diagonal.

    Examples
    --------
    >>> import numpy as np
    >>> symmetrized(sp.csr_matrix(np.array([[0, 2], [1, 0]], dtype=np.float32))).toarray().tolist()
    [[0.0, 2.0], [2.0, 0.0]]
    """
    if known_symmetric(graph) or not (graph != graph.T).nnz:
        return graph
    return to_int64(graph.maximum(graph.T).tocsr())


# METIS edge weights are integers > 0: float weights are scaled to 1..EDGE_SCALE.
EDGE_SCALE = 1000


def metis_blocks(graph: sp.csr_matrix, num_blocks: int, seed: int = 0, recursive: bool = True) -> np.ndarray:
    """Block id of every node (int64): METIS recursive bisection (much faster than k-way
    for thousands of parts, and as balanced; ``recursive=False``: k-way), then empty blocks
    are filled by halving the largest ones so that every block id is used. Edge weights
    are scaled to integers 1..``EDGE_SCALE``; the graph is made symmetric without self loops.

    Parameters
    ----------
    graph : scipy.sparse.csr_matrix
        A square graph with finite weights >= 0 (when all are 0, every edge counts
        alike); it is not modified.
    num_blocks : int
        The number of blocks, >= 1 (checked by the callers); with ``num_blocks >= N``
        every node is its own block.
    seed : int, default 0
        METIS's seed (taken modulo ``2**31 - 1``).
    recursive : bool, default True
        Recursive bisection; ``False``: k-way partitioning.

    Returns
    -------
    numpy.ndarray
        ``N`` block ids (int64) in ``[0, num_blocks)``, every id used when
        ``num_blocks <= N``.

    Raises
    ------
    ImportError
        pymetis is not installed (``pip install 'batchsel[graph]'``).
    ValueError
        An edge weight is negative or not finite.

    Examples
    --------
    >>> import numpy as np
    >>> ring = sp.csr_matrix(np.roll(np.eye(8, dtype=np.float32), 1, axis=1))
    >>> np.bincount(metis_blocks(ring, 2)).tolist()
    [4, 4]
    """
    try:
        import pymetis
    except ImportError as exc:
        raise ImportError("graph blocks partition with METIS: pip install 'batchsel[graph]' (pymetis)") from exc

    n = graph.shape[0]
    if num_blocks >= n:
        return np.arange(n, dtype=np.int64)
    if num_blocks == 1:
        return np.zeros(n, dtype=np.int64)
    # METIS wants no self loops, and both directions of every edge
    g = to_int64(symmetrized(without_self_loops(graph)))
    top = float(g.data.max()) if g.nnz else 0.0
    if not (np.isfinite(top) and top >= 0):  # NaN / negative weights reach METIS as garbage ints: a segfault
        raise ValueError(f"graph edge weights must be finite and >= 0, found a largest weight of {top}")
    if top > 0:
        weights = np.maximum(1, np.rint(g.data / top * EDGE_SCALE)).astype(np.int64)
    else:
        weights = None
    dtype = pymetis.zero_copy_dtype()
    adjacency = pymetis.CSRAdjacency(g.indptr.astype(dtype, copy=False), g.indices.astype(dtype, copy=False))
    logger.info("METIS: %d nodes, %d edges into %d blocks", n, g.nnz // 2, num_blocks)
    with c_stdout_to_stderr():  # METIS printf()s diagnostics: keep them out of stdout (--json)
        _, membership = pymetis.part_graph(
            num_blocks,
            adjacency,
            eweights=weights,
            recursive=bool(recursive),
            options=pymetis.Options(seed=int(seed) % (2**31 - 1)),
        )
    blocks = np.asarray(membership, dtype=np.int64)
    sizes = np.bincount(blocks, minlength=num_blocks)
    for empty in np.flatnonzero(sizes == 0):  # rare (tiny or edgeless graphs)
        largest = int(np.argmax(sizes))
        members = np.flatnonzero(blocks == largest)
        moved = members[len(members) // 2 :]
        blocks[moved] = empty
        sizes[largest] -= len(moved)
        sizes[empty] = len(moved)
    return blocks


__all__ = ["without_self_loops", "symmetrized", "metis_blocks", "EDGE_SCALE"]


# -- CSR with a constant diagonal inserted (k-NN graphs have no self loops) ---------------
@njit(cache=True, nogil=True)
def insert_diagonal(indptr, indices, data, value):
    """A CSR matrix with sorted indices -> the same matrix with ``value`` on the diagonal
    (existing diagonal entries are replaced); one pass, no other temporaries."""
    n = indptr.shape[0] - 1
    new_indptr = np.empty(n + 1, dtype=np.int64)
    new_indices = np.empty(indices.shape[0] + n, dtype=np.int64)
    new_data = np.empty(data.shape[0] + n, dtype=data.dtype)
    q = 0
    new_indptr[0] = 0
    for i in range(n):
        placed = False
        for p in range(indptr[i], indptr[i + 1]):
            c = indices[p]
            if not placed and c >= i:
                new_indices[q] = i
                new_data[q] = value
                q += 1
                placed = True
                if c == i:  # an existing diagonal entry is replaced
                    continue
            new_indices[q] = c
            new_data[q] = data[p]
            q += 1
        if not placed:
            new_indices[q] = i
            new_data[q] = value
            q += 1
        new_indptr[i + 1] = q
    if q < new_indices.shape[0]:
        return new_indptr, new_indices[:q].copy(), new_data[:q].copy()
    return new_indptr, new_indices, new_data
