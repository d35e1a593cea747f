"""Graph utilities shared by the selectors that work on a sparse similarity graph
(GreedMax partitioning, METIS blocks): CSR in, CSR with int64 indices out (see
:func:`batchsel._checks.check_graph`, which makes a user's graph canonical first)."""
from __future__ import annotations

import scipy.sparse as sp

from ._checks import known_symmetric, to_int64


def without_self_loops(graph: sp.csr_matrix) -> sp.csr_matrix:
    """The graph without its diagonal (unchanged, not copied, when it has none).

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

    >>> import numpy as np
    >>> symmetrized(sp.csr_matrix(np.array([[0, 2], [1, 0]], dtype=np.float32))).toarray().tolist()
    [[0.0, 2.0], [2.0, 0.0]]
    """
    if known_symmetric(graph) or not (graph != graph.T).nnz:
        return graph
    return to_int64(graph.maximum(graph.T).tocsr())


__all__ = ["without_self_loops", "symmetrized"]
