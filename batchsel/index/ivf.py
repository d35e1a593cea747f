"""The IVF index's shape, its training and the tuning of ``nprobe``.

:class:`~batchsel.index.EmbeddingIndex` (``kind="ivf"``) and
:class:`~batchsel.distributed.sharded.ShardedIndex` (which trains once, on rank 0, and
shares the quantizer) both build their inverted lists with :func:`train_ivf`, choose
``nprobe`` with :func:`tune_nprobe` (through their own search, local or sharded) and take
the k-NN graph's queries list by list with :func:`ivf_list_blocks`.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable, Iterator

import faiss
import numpy as np
from faiss.contrib.inspect_tools import get_invlist

from batchsel.index.vectors import BLOCK_ROWS, prepared

# the package's logger, as before the index became a package
logger = logging.getLogger("batchsel.index")

# IVF shape: nlist = IVF_LISTS_PER_SQRT_N * sqrt(N) lists, k-means on IVF_TRAIN_PER_LIST
# points per list for IVF_TRAIN_ITERATIONS rounds. Building a k-NN graph costs about
# N * (nlist + nprobe * N / nlist) distances plus nlist^2 * IVF_TRAIN_PER_LIST *
# IVF_TRAIN_ITERATIONS for training; 2 sqrt(N) lists balance the two for the nprobe we
# use, where 4 sqrt(N) lists and faiss' 25 rounds made training alone slow at 1M points
# (benchmarks/bench_index.py measures both).
IVF_LISTS_PER_SQRT_N = 2.0
IVF_TRAIN_PER_LIST = 40  # faiss asks for >= 39
IVF_TRAIN_ITERATIONS = 10

# nprobe=None tunes nprobe on the data: the first of NPROBE_STEPS whose recall@10 on
# NPROBE_SAMPLE indexed points (against exhaustive search) reaches NPROBE_TARGET. A fixed
# nprobe cannot serve all data: at N = 50k, d = 128, nprobe = 8 gave recall@10 1.000 on
# well separated clusters, 0.84 on overlapping ones and 0.37 on weakly clustered data
# (benchmarks/bench_index.py). The target has a margin over 0.95 for the sampling error.
NPROBE_STEPS = (4, 8, 16, 32, 64)
NPROBE_SAMPLE = 200
NPROBE_TARGET = 0.97

#: ``search(index, queries, k) -> (D, I)``: a search of prepared queries through the
#: caller's index (one process's, or every shard's merged)
Search = Callable[[Any, np.ndarray, int], "tuple[np.ndarray, np.ndarray]"]


def train_ivf(data: np.ndarray, metric: str, faiss_metric: int, seed: int) -> tuple[faiss.IndexIVFFlat, int]:
    """An empty IVF index over ``data``'s shape, its quantizer trained on a seeded sample
    of ``data``.

    Parameters
    ----------
    data : numpy.ndarray
        All ``N x d`` rows (a memory-mapped array is fine: only the sample is read).
    metric : str
        The index's metric (``"cosine"`` normalizes the sample).
    faiss_metric : int
        ``faiss.METRIC_L2`` or ``faiss.METRIC_INNER_PRODUCT``.
    seed : int
        Seed of the training sample and of k-means.

    Returns
    -------
    tuple[faiss.IndexIVFFlat, int]
        The trained, empty index (``2 sqrt(N)`` lists, at most ``N / 40``) and the size
        of its training sample.

    Examples
    --------
    >>> x = np.random.default_rng(0).normal(size=(400, 4)).astype(np.float32)
    >>> index, sample_size = train_ivf(x, "euclidean", faiss.METRIC_L2, seed=0)
    >>> index.nlist, sample_size, index.ntotal
    (10, 400, 0)
    """
    n, d = data.shape
    nlist = max(1, min(round(IVF_LISTS_PER_SQRT_N * math.sqrt(n)), n // IVF_TRAIN_PER_LIST))
    quantizer = faiss.IndexFlat(d, faiss_metric)
    index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss_metric)
    # We draw the training sample ourselves: faiss would otherwise subsample (or
    # print a warning on stderr for a small N).
    sample_size = min(n, nlist * IVF_TRAIN_PER_LIST)
    index.cp.niter = IVF_TRAIN_ITERATIONS
    index.cp.seed = seed % 2**31  # a C int
    index.cp.min_points_per_centroid = 1
    index.cp.max_points_per_centroid = max(1, sample_size // nlist + 1)
    rng = np.random.default_rng(seed)
    sample = np.sort(rng.choice(n, size=sample_size, replace=False))
    logger.info("training IVF index: nlist=%d on %d points", nlist, sample_size)
    index.train(prepared(data[sample], metric))
    return index, sample_size


def tune_nprobe(
    index: faiss.IndexIVF, num_examples: int, seed: int, queries_of: Callable[[np.ndarray], np.ndarray], search: Search
) -> tuple[int, float]:
    """The first nprobe of ``NPROBE_STEPS`` reaching ``NPROBE_TARGET`` recall@10 on a
    sample of the indexed points (the k-NN graph's queries), against all lists.

    Parameters
    ----------
    index : faiss.IndexIVF
        The filled IVF index; its ``nprobe`` is left at the last value tried.
    num_examples : int
        The number of indexed points (all shards together).
    seed : int
        The index's seed (the sample is drawn from a stream of its own).
    queries_of : callable
        ``queries_of(rows)``: the prepared vectors of the given global rows.
    search : callable
        ``search(index, queries, k) -> (D, I)`` (a sharded index searches every shard).

    Returns
    -------
    tuple[int, float]
        The chosen nprobe and its recall@10. A warning is logged when it stays below
        0.95 at the largest step.

    Examples
    --------
    >>> x = np.random.default_rng(0).normal(size=(400, 4)).astype(np.float32)
    >>> index, _ = train_ivf(x, "euclidean", faiss.METRIC_L2, seed=0)
    >>> index.add(x)
    >>> nprobe, recall = tune_nprobe(index, 400, 0, lambda rows: x[rows], lambda i, q, k: i.search(q, k))
    >>> nprobe in NPROBE_STEPS + (index.nlist,), recall >= NPROBE_TARGET
    (True, True)
    """
    n = num_examples
    rng = np.random.default_rng([seed, 1])  # not the training sample's stream
    sample = np.sort(rng.choice(n, size=min(n, NPROBE_SAMPLE), replace=False))
    queries = queries_of(sample)
    k = min(10, n - 1) + 1  # the point itself is found too; it does not count
    index.nprobe = index.nlist  # all lists: exact
    _, truth = search(index, queries, k)
    steps = [p for p in NPROBE_STEPS if p < index.nlist] + [index.nlist]
    for nprobe in steps:
        index.nprobe = nprobe
        _, found = search(index, queries, k)
        hits = [
            np.intersect1d(f[f != i], t[t != i]).size / max(1, (t != i).sum()) for i, f, t in zip(sample, found, truth)
        ]
        recall = float(np.mean(hits))
        if recall >= NPROBE_TARGET or nprobe >= NPROBE_STEPS[-1]:
            break
    if recall < 0.95:
        logger.warning(
            "IVF recall@10 is only %.2f at nprobe=%d on this data; pass a larger nprobe or use kind='hnsw'",
            recall,
            nprobe,
        )
    logger.info("nprobe=%d of %d lists: recall@10 %.3f on %d sampled points", nprobe, index.nlist, recall, len(sample))
    return nprobe, recall


def ivf_list_blocks(
    index: faiss.IndexIVF, dim: int, block: int = BLOCK_ROWS
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(ids, vectors) of consecutive inverted lists of ``index``, about ``block`` points
    at a time: the vectors as the index holds them (already prepared), so that searching
    them in this order probes the same lists one after another, which stay in cache.

    Parameters
    ----------
    index : faiss.IndexIVF
        A filled IVF index of flat (float32) codes.
    dim : int
        The vectors' dimension.
    block : int, default BLOCK_ROWS
        Points per block (whole lists: a block may hold more).

    Returns
    -------
    Iterator[tuple[numpy.ndarray, numpy.ndarray]]
        The ids (int64) and vectors (float32, ``len(ids) x dim``) of every block.

    Examples
    --------
    >>> x = np.random.default_rng(0).normal(size=(400, 4)).astype(np.float32)
    >>> index, _ = train_ivf(x, "euclidean", faiss.METRIC_L2, seed=0)
    >>> index.add(x)
    >>> sorted(np.concatenate([ids for ids, _ in ivf_list_blocks(index, 4, 100)]).tolist()) == list(range(400))
    True
    """
    ids: list[np.ndarray] = []
    vecs: list[np.ndarray] = []
    pending = 0
    for lst in range(index.nlist):
        list_ids, codes = get_invlist(index.invlists, lst)
        ids.append(list_ids)
        vecs.append(codes.view(np.float32).reshape(len(list_ids), dim))
        pending += len(list_ids)
        if pending >= block or lst == index.nlist - 1:
            if pending:
                yield np.concatenate(ids), np.concatenate(vecs)
            ids, vecs, pending = [], [], 0


__all__ = [
    "IVF_LISTS_PER_SQRT_N",
    "IVF_TRAIN_PER_LIST",
    "IVF_TRAIN_ITERATIONS",
    "NPROBE_STEPS",
    "NPROBE_SAMPLE",
    "NPROBE_TARGET",
    "train_ivf",
    "tune_nprobe",
    "ivf_list_blocks",
]
