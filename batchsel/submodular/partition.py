"""Submodular partitioning of the data across workers: GreedMax (Wei, Iyer, Wang, Bai,
Bilmes, NeurIPS 2015).

Split the N examples into W shards that are each representative of the whole data set,
by (approximately) maximizing the worst shard's value ``min_i f(A_i)``. GreedMax repeats:
the shard with the lowest current value takes the example of largest marginal gain for
it. ``f`` is the facility location of a shard over *all* examples,

    f(A) = sum_{i in V} max_{a in A} sim(i, a),   sim(i, i) = 1,

with ``sim`` a sparse k-NN affinity graph (``EmbeddingIndex.knn_graph``), so that a
marginal gain touches only an example's neighbours. Shards are capped so their sizes
differ by at most one (data-parallel ranks need equal work). The greedy search is lazy per
shard (a heap of stale upper bounds, plus the examples in decreasing order of their
singleton gain) and runs compiled with numba: about N * k work, O(W * N) memory for the
shards' coverage.

Every rank computes the same partition from the same data and seed (the seed only breaks
ties between examples of equal gain, which duplicates and unweighted graphs produce).
"""

from __future__ import annotations

import logging
from typing import Any

import numba
import numpy as np
import scipy.sparse as sp

from batchsel.core.checks import check_graph, check_int, check_seed, to_int64
from batchsel.core.graph import symmetrized, without_self_loops
from batchsel.core.heap import heap_pop, heap_push

logger = logging.getLogger(__name__)


@numba.njit(cache=True)
def _greedmax(
    indptr: np.ndarray,
    indices: np.ndarray,
    weights: np.ndarray,
    order: np.ndarray,
    singleton: np.ndarray,
    num_parts: int,
) -> tuple[np.ndarray, np.ndarray]:
    n = indptr.shape[0] - 1
    base = n // num_parts
    n_big = n % num_parts  # this many shards get base + 1 examples
    cover = np.zeros((num_parts, n), dtype=np.float32)
    owner = np.full(n, -1, dtype=np.int64)
    size = np.zeros(num_parts, dtype=np.int64)
    value = np.zeros(num_parts, dtype=np.float64)
    full = np.zeros(num_parts, dtype=np.bool_)
    ptr = np.zeros(num_parts, dtype=np.int64)  # next unread position of ``order`` per shard
    cap = max(64, 2 * (base + 1))
    hkeys = np.empty((num_parts, cap), dtype=np.float64)
    hitems = np.empty((num_parts, cap), dtype=np.int64)
    hsize = np.zeros(num_parts, dtype=np.int64)
    big_done = 0
    for _ in range(n):
        s = -1
        for w in range(num_parts):
            if not full[w] and (s < 0 or value[w] < value[s]):
                s = w
        while True:
            # drop entries taken by any shard since they were pushed / listed
            while hsize[s] > 0 and owner[hitems[s, 0]] >= 0:
                hsize[s] = heap_pop(hkeys[s], hitems[s], hsize[s])
            while ptr[s] < n and owner[order[ptr[s]]] >= 0:
                ptr[s] += 1
            ub_heap = hkeys[s, 0] if hsize[s] > 0 else -1.0
            ub_seq = singleton[order[ptr[s]]] if ptr[s] < n else -1.0
            if ub_seq > ub_heap:
                c = order[ptr[s]]
                ptr[s] += 1
            else:
                c = hitems[s, 0]
                hsize[s] = heap_pop(hkeys[s], hitems[s], hsize[s])
            gain = max(0.0, 1.0 - cover[s, c])
            for e in range(indptr[c], indptr[c + 1]):
                diff = weights[e] - cover[s, indices[e]]
                if diff > 0.0:
                    gain += diff
            # the fresh gain wins if no stale upper bound is above it
            while hsize[s] > 0 and owner[hitems[s, 0]] >= 0:
                hsize[s] = heap_pop(hkeys[s], hitems[s], hsize[s])
            while ptr[s] < n and owner[order[ptr[s]]] >= 0:
                ptr[s] += 1
            bound = hkeys[s, 0] if hsize[s] > 0 else -1.0
            if ptr[s] < n and singleton[order[ptr[s]]] > bound:
                bound = singleton[order[ptr[s]]]
            if gain >= bound:
                break
            if hsize[s] == hkeys.shape[1]:  # grow every heap (rare)
                new_cap = 2 * hkeys.shape[1]
                k2 = np.empty((num_parts, new_cap), dtype=np.float64)
                i2 = np.empty((num_parts, new_cap), dtype=np.int64)
                k2[:, : hkeys.shape[1]] = hkeys
                i2[:, : hkeys.shape[1]] = hitems
                hkeys, hitems = k2, i2
            hsize[s] = heap_push(hkeys[s], hitems[s], hsize[s], gain, c)
        owner[c] = s
        value[s] += gain
        cover[s, c] = 1.0
        for e in range(indptr[c], indptr[c + 1]):
            j = indices[e]
            if weights[e] > cover[s, j]:
                cover[s, j] = weights[e]
        size[s] += 1
        if size[s] == base + 1:
            full[s] = True
            big_done += 1
        if big_done >= n_big:
            for w in range(num_parts):
                if size[w] >= base:
                    full[w] = True
    return owner, value


def _similarity_graph(data: Any, neighbors: int, num_examples: int | None = None) -> sp.csr_matrix:
    """A symmetric sparse similarity in [0, 1] without self loops: the given graph, or
    the RBF k-NN graph of the given embeddings."""
    if sp.issparse(data):
        g = without_self_loops(check_graph(data, num_examples))
        if g.nnz and g.data.min() < 0:
            raise ValueError(f"graph weights must be >= 0, found {float(g.data.min())}")
        top = float(g.data.max()) if g.nnz else 1.0
        if top > 1.0:  # similarities are compared with sim(i, i) = 1
            g = g / top
        return to_int64(symmetrized(g))
    from batchsel.index import EmbeddingIndex

    index = EmbeddingIndex(data, metric="euclidean", progress=False)
    if num_examples is not None and index.num_examples != num_examples:
        raise ValueError(f"embeddings have {index.num_examples} rows but the data has {num_examples} examples")
    k = min(check_int(neighbors, "neighbors", minimum=1), index.num_examples - 1)
    if k < 1:
        return sp.csr_matrix((index.num_examples, index.num_examples), dtype=np.float32)
    return index.knn_graph(k=k, kernel="rbf")


def shard_of_each(parts: list[np.ndarray], num_examples: int) -> np.ndarray:
    """The shard (index into ``parts``) of every one of ``num_examples`` examples.

    >>> shard_of_each([np.array([0, 3]), np.array([1, 2])], 4).tolist()
    [0, 1, 1, 0]
    """
    owner = np.empty(num_examples, dtype=np.int64)
    for r, part in enumerate(parts):
        owner[part] = r
    return owner


# the k of the k-NN graph GreedMax builds from embeddings (also the sharded CLI path's)
DEFAULT_NEIGHBORS = 10


def submodular_partition(
    data: Any, num_parts: int, *, neighbors: int = DEFAULT_NEIGHBORS, seed: int = 0
) -> list[np.ndarray]:
    """Split the examples into ``num_parts`` representative shards with GreedMax.

    Parameters
    ----------
    data:
        ``N x d`` embeddings (array, torch tensor or ``.npy`` path: a k-NN RBF graph is
        built with :class:`~batchsel.EmbeddingIndex`) or an ``N x N`` sparse similarity
        graph (weights >= 0, scaled to at most 1; symmetrized by max if needed).
    num_parts:
        Number of shards W (1 <= W <= N).
    neighbors:
        k of the k-NN graph built from embeddings.
    seed:
        Breaks ties between examples of equal gain.

    Returns
    -------
    ``num_parts`` sorted int64 index arrays; sizes differ by at most one.

    Example
    -------
    >>> import numpy as np
    >>> x = np.random.default_rng(0).normal(size=(100, 4)).astype(np.float32)
    >>> parts = submodular_partition(x, 4, neighbors=5)
    >>> [len(p) for p in parts], sorted(np.concatenate(parts).tolist()) == list(range(100))
    ([25, 25, 25, 25], True)
    """
    seed = check_seed(seed)
    graph = _similarity_graph(data, neighbors)
    n = graph.shape[0]
    num_parts = check_int(num_parts, "num_parts", minimum=1, maximum=n)
    if num_parts == 1:
        return [np.arange(n, dtype=np.int64)]
    singleton = 1.0 + np.asarray(graph.sum(axis=1), dtype=np.float64).ravel()
    priority = np.random.default_rng(seed).permutation(n)
    order = np.lexsort((priority, -singleton)).astype(np.int64)
    owner, values = _greedmax(graph.indptr, graph.indices, graph.data.astype(np.float32), order, singleton, num_parts)
    logger.info(
        "GreedMax: %d examples into %d shards, shard values %.4g..%.4g (of %d)",
        n,
        num_parts,
        values.min(),
        values.max(),
        n,
    )
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(num_parts + 1))
    return [order[bounds[r] : bounds[r + 1]].astype(np.int64) for r in range(num_parts)]


def partition_values(graph: Any, parts: list[np.ndarray]) -> np.ndarray:
    """The facility-location value ``f(A_i)`` of every shard over the graph's similarity
    (with ``sim(i, i) = 1``): how well each shard represents the whole data set.

    >>> import numpy as np, scipy.sparse as sp
    >>> g = sp.csr_matrix(np.array([[0, .5], [.5, 0]], dtype=np.float32))
    >>> partition_values(g, [np.array([0]), np.array([1])]).tolist()
    [1.5, 1.5]
    """
    if not sp.issparse(graph):
        raise TypeError(f"graph must be a scipy.sparse matrix, got {type(graph).__name__}")
    g = _similarity_graph(graph, 1)
    n = g.shape[0]
    values = np.empty(len(parts), dtype=np.float64)
    for r, part in enumerate(parts):
        part = np.asarray(part, dtype=np.int64)
        cover = np.zeros(n, dtype=np.float64)
        if part.size:
            cover = np.asarray(g[:, part].max(axis=1).todense(), dtype=np.float64).ravel()
            cover[part] = 1.0
        values[r] = cover.sum()
    return values


__all__ = ["submodular_partition", "partition_values", "shard_of_each"]
