"""Near-duplicate removal by embedding similarity (semantic deduplication, after SemDeDup,
Abbas et al. 2023).

Two rows are near-duplicates when the cosine similarity of their embeddings is at least
``threshold``. The pairs come from the k nearest neighbours of every row
(:class:`~batchsel.EmbeddingIndex`, exact up to 50k rows, IVF beyond; sharded over MPI ranks
with :class:`~batchsel.distributed.sharded.ShardedIndex`, which returns the same neighbours). Groups are
the connected components of those pairs, and each group keeps its row of smallest index:
a deterministic rule that needs no order of processing, so one process and any number of
ranks keep the same rows. Every removed row saves a step in every epoch. All-zero rows,
whose cosine similarity is undefined, are exact duplicates of one another (with a warning).
Raw non-negative features (pixels, counts) all point one way, so random pairs of them are
alike and most rows pass a cosine threshold: a warning then says so and names the fix
(centre the features, or use an embedding).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from batchsel.core.checks import check_int, check_number
from batchsel.core.communicator import Communicator
from batchsel.index import EmbeddingIndex

logger = logging.getLogger(__name__)

#: cosine similarities of identical rows come out of float32 arithmetic a little below 1
SIMILARITY_SLACK = 1e-5
#: lists probed per query by the IVF index (N > 50k): near-duplicates share a list or a
#: neighbouring one far more often than ordinary neighbours do (planted pairs at cosine
#: >= 0.97 among 1M x 128 rows: recall 1.0000 at 4 lists, 0.9997 at 2, 1.0000 at 8, the
#: time growing with the lists; benchmarks/bench_dedup.py)
NPROBE = 4
#: cosine >= threshold singles out near-duplicates only where random pairs of rows are far
#: less alike: when nine in ten random pairs are positively similar (one direction) and their
#: median dissimilarity (1 - cosine) is under this many times the threshold's (1 - threshold),
#: the "near-duplicates" are mostly that direction (raw pixels and counts; not centred
#: features, nor an embedding, whose random pairs sit near 0: tests/data/test_audit_baseline.py)
CROWDED_RATIO = 8.0
#: ... and at least this share of rows is removed (below it, nothing to warn about)
CROWDED_REMOVED = 0.05


@dataclass
class Deduplication:
    """The result of :func:`deduplicate`.

    Attributes
    ----------
    keep : numpy.ndarray
        The rows kept, sorted (int64): one per group, its smallest index.
    group : numpy.ndarray
        For every row, the row its group keeps (itself when kept), int64.
    pairs : tuple of numpy.ndarray
        ``(i, j, similarity)`` of every near-duplicate pair found, ``i < j``, sorted
        (int64, int64, float32).
    threshold : float
        The similarity threshold used, in (0, 1].
    k : int
        The neighbours searched per row (at most ``N - 1``).
    seconds : float, default 0.0
        Wall time of the search and grouping.
    extra : dict, default {}
        Details of the search: the index's ``kind``, its ``nprobe``, and ``zero_rows``,
        the number of all-zero rows; when ``CROWDED_REMOVED`` or more of the rows are removed,
        ``random_similarity`` (the median cosine similarity of random pairs of rows) and
        ``warning`` (None, or the warning that the removed rows are mostly the rows' common
        direction: :func:`crowded_warning`).

    See Also
    --------
    deduplicate : what makes it.

    Examples
    --------
    >>> pairs = (np.array([0, 0]), np.array([1, 3]), np.ones(2, np.float32))
    >>> Deduplication(np.array([0, 2]), np.array([0, 0, 2, 0]), pairs, 0.9, 1)
    Deduplication(num_examples=4, kept=2, removed_fraction=0.500, threshold=0.9, pairs=2)
    """

    keep: np.ndarray
    group: np.ndarray
    pairs: tuple[np.ndarray, np.ndarray, np.ndarray]
    threshold: float
    k: int
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def num_examples(self) -> int:
        """The number of rows searched (kept or not)."""
        return int(self.group.size)

    @property
    def removed_fraction(self) -> float:
        """The share of rows that are near-duplicates of a kept row, in [0, 1)."""
        return 1.0 - self.keep.size / max(self.group.size, 1)

    def groups(self) -> list[np.ndarray]:
        """Every group of two or more rows (sorted rows; its first is the one kept).

        Returns
        -------
        list of numpy.ndarray
            One int64 array per group, in the order of the rows kept.

        Examples
        --------
        >>> pairs = (np.array([0, 0]), np.array([1, 3]), np.ones(2, np.float32))
        >>> result = Deduplication(np.array([0, 2]), np.array([0, 0, 2, 0]), pairs, 0.9, 1)
        >>> [g.tolist() for g in result.groups()]
        [[0, 1, 3]]
        """
        order = np.argsort(self.group, kind="stable")
        bounds = np.flatnonzero(np.diff(self.group[order])) + 1
        return [g for g in np.split(order, bounds) if g.size > 1]

    def __repr__(self) -> str:
        return (
            f"Deduplication(num_examples={self.num_examples}, kept={self.keep.size}, "
            f"removed_fraction={self.removed_fraction:.3f}, threshold={self.threshold}, pairs={self.pairs[0].size})"
        )


def neighbour_pairs(
    D: np.ndarray, I: np.ndarray, first_row: int, threshold: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(i, j, similarity)`` with ``i < j`` of the neighbour lists ``(D, I)`` of rows
    ``first_row ..`` at similarity >= threshold.

    A pair found from both ends appears twice (:func:`unique_pairs` keeps one);
    similarities down to ``SIMILARITY_SLACK`` below the threshold count (rounding).

    Parameters
    ----------
    D : numpy.ndarray
        Cosine similarities to the neighbours, ``rows x k``.
    I : numpy.ndarray
        The neighbours' global row ids, ``rows x k``; -1: no neighbour.
    first_row : int
        The global id of the first row of ``D`` and ``I`` (a shard's offset), >= 0.
    threshold : float
        The similarity threshold, in (0, 1].

    Returns
    -------
    tuple of numpy.ndarray
        ``(i, j, similarity)``: int64, int64, float32, in the order of the lists.

    Examples
    --------
    >>> D = np.array([[0.99, 0.5], [0.99, 0.2]]); I = np.array([[3, 1], [2, -1]])
    >>> i, j, s = neighbour_pairs(D, I, 2, 0.95)
    >>> i.tolist(), j.tolist()
    ([2, 2], [3, 3])
    """
    rows, cols = np.nonzero((D >= threshold - SIMILARITY_SLACK) & (I >= 0))
    a = rows.astype(np.int64) + first_row
    b = I[rows, cols].astype(np.int64)
    return np.minimum(a, b), np.maximum(a, b), D[rows, cols].astype(np.float32)


def unique_pairs(i: np.ndarray, j: np.ndarray, s: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each pair once (found from both ends), sorted by (i, j); the larger similarity of
    the two findings (they differ only by rounding).

    Parameters
    ----------
    i, j : numpy.ndarray
        The pairs' rows, int64, ``i < j``.
    s : numpy.ndarray
        The pairs' similarities.
    n : int
        The number of rows (every row id below it).

    Returns
    -------
    tuple of numpy.ndarray
        ``(i, j, s)`` without repeats, sorted by ``(i, j)``.

    Examples
    --------
    >>> i, j, s = unique_pairs(np.array([2, 2, 0]), np.array([3, 3, 1]), np.array([0.98, 0.99, 0.5]), 4)
    >>> i.tolist(), j.tolist(), s.tolist()
    ([0, 2], [1, 3], [0.5, 0.99])
    """
    if i.size == 0:
        return i, j, s
    key = i * n + j
    order = np.lexsort((-s, key))
    key, s = key[order], s[order]
    first = np.r_[True, key[1:] != key[:-1]]
    key, s = key[first], s[first]
    return key // n, key % n, s


def zero_rows(index: EmbeddingIndex, D: np.ndarray, I: np.ndarray, first_row: int) -> np.ndarray:
    """The all-zero rows (global ids, sorted) among rows ``first_row ..`` whose neighbour
    lists are ``(D, I)`` (cosine). The index leaves a zero row as it is, so its similarity
    to every row is 0: only the rows with no positive similarity are read back and checked.

    Parameters
    ----------
    index : EmbeddingIndex
        The cosine index the lists come from (its rows are read back).
    D, I : numpy.ndarray
        The neighbour lists of the rows ``first_row ..``, as for :func:`neighbour_pairs`.
    first_row : int
        The global id of the lists' first row.

    Returns
    -------
    numpy.ndarray
        The all-zero rows' global ids, int64, sorted.
    """
    maybe = np.flatnonzero(~((I >= 0) & (D > 0)).any(axis=1)) + first_row
    if not maybe.size:
        return maybe.astype(np.int64)
    rows = np.asarray(index.rows_of(maybe))  # float32, as the index saw them
    return maybe[~rows.any(axis=1)].astype(np.int64)


def with_zero_pairs(
    i: np.ndarray, j: np.ndarray, s: np.ndarray, zeros: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs ``(i, j, s)`` plus the all-zero rows ``zeros`` (sorted) as exact
    duplicates of one another: each paired with the next at similarity 1, so they form one
    group, kept by its first row, in the graph of pairs at every threshold.

    Parameters
    ----------
    i, j, s : numpy.ndarray
        The pairs (rows, rows, similarities).
    zeros : numpy.ndarray
        The all-zero rows, sorted (fewer than two: the pairs come back unchanged).

    Returns
    -------
    tuple of numpy.ndarray
        ``(i, j, s)`` with the zero rows' pairs appended.

    Examples
    --------
    >>> i, j, s = with_zero_pairs(np.array([0]), np.array([1]), np.array([0.97]), np.array([4, 6, 7]))
    >>> i.tolist(), j.tolist(), s.tolist()
    ([0, 4, 6], [1, 6, 7], [0.97, 1.0, 1.0])
    """
    if zeros.size < 2:
        return i, j, s
    return (
        np.concatenate([i, zeros[:-1]]),
        np.concatenate([j, zeros[1:]]),
        np.concatenate([s, np.ones(zeros.size - 1, np.float32)]),
    )


def warn_zero_rows(zeros: np.ndarray, n: int, caller: str) -> None:
    """Log a warning naming the all-zero rows ``zeros`` of ``n``, if any.

    Parameters
    ----------
    zeros : numpy.ndarray
        The all-zero rows, sorted; empty: no warning.
    n : int
        The number of rows, for the message.
    caller : str
        The function the message is from (``"deduplicate"``, ``"audit"``).
    """
    if zeros.size:
        logger.warning(
            "%s: %d of %d rows are all zero (rows %s%s): cosine similarity is undefined for them, so they "
            "count as exact duplicates of one another (row %d kept) and of no other row; drop them, or "
            "embed their inputs again if the zeros mark failed or empty ones",
            caller,
            zeros.size,
            n,
            zeros[:5].tolist(),
            ", ..." if zeros.size > 5 else "",
            int(zeros[0]),
        )


def random_pair_similarities(index: EmbeddingIndex, seed: int) -> np.ndarray:
    """The cosine similarities of seeded random pairs of rows of ``index`` (at most 20,000).

    Parameters
    ----------
    index : EmbeddingIndex
        The index whose rows are read back (a sharded one reads them from its source).
    seed : int
        The seed of the pairs.

    Returns
    -------
    numpy.ndarray
        The pairs' cosine similarities (an all-zero row's: 0).
    """
    n = index.num_examples
    rng = np.random.default_rng([seed, 0xA0D17])
    a, b = rng.integers(0, n, (2, min(20_000, n * 4)))
    x = index.rows_of(np.concatenate([a, b]))
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-30)
    return np.einsum("ij,ij->i", x[: a.size], x[a.size :])


def crowded_warning(similarities: np.ndarray, threshold: float, removed: float, caller: str) -> str | None:
    """The warning, logged and returned, when the share of rows ``removed`` as near-duplicates
    at ``threshold`` is mostly the rows' common direction: random pairs of rows point one way
    (nine in ten at a positive similarity) and their median is nearly as alike as the
    threshold (``CROWDED_RATIO``), as with raw non-negative features.

    Parameters
    ----------
    similarities : numpy.ndarray
        Cosine similarities of random pairs of rows (:func:`random_pair_similarities`).
    threshold : float
        The near-duplicate threshold.
    removed : float
        The share of rows removed at ``threshold``.
    caller : str
        The function the message is from (``"deduplicate"``, ``"audit"``).

    Returns
    -------
    str or None
        The warning naming the fix (centre the features, or use an embedding); None when the
        share is plausible or under ``CROWDED_REMOVED``.

    Examples
    --------
    >>> crowded_warning(np.array([-0.1, 0.0, 0.1]), 0.95, 0.2, "deduplicate") is None  # an embedding's
    True
    """
    if removed < CROWDED_REMOVED or similarities.size == 0:
        return None
    low, median = np.quantile(similarities, [0.1, 0.5])
    if low <= 0.0 or 1.0 - median >= CROWDED_RATIO * (1.0 - threshold):
        return None  # clusters apart from one another have dissimilar pairs: no common direction
    message = (
        f"random pairs of rows are already alike (median cosine similarity {median:.2f}, next to the "
        f"threshold {threshold:g}): the rows share one direction, as raw non-negative features (pixels, "
        f"counts) do, so the {removed:.0%} near-duplicates at cosine >= {threshold:g} are mostly that "
        f"direction, not duplicates; centre the features (subtract each column's mean) or use an embedding "
        f"(a trained model's) before removing rows"
    )
    logger.warning("%s: %s", caller, message)
    return message


def groups_of_pairs(i: np.ndarray, j: np.ndarray, n: int) -> np.ndarray:
    """For each of ``n`` rows, the smallest row of its connected component in the graph of
    pairs ``(i, j)``.

    Parameters
    ----------
    i, j : numpy.ndarray
        The pairs' rows (edges of the graph), integers in ``[0, n)``.
    n : int
        The number of rows.

    Returns
    -------
    numpy.ndarray
        For every row, the smallest row of its group (itself when alone), int64.

    Examples
    --------
    >>> groups_of_pairs(np.array([1, 3]), np.array([4, 4]), 5).tolist()
    [0, 1, 2, 1, 1]
    """
    graph = sp.csr_matrix((np.ones(i.size, np.int8), (i, j)), shape=(n, n))
    _, label = connected_components(graph, directed=False)
    # components are numbered in order of their first row: the first occurrence of each
    # label is its smallest row
    first_rows = np.unique(label, return_index=True)[1]
    return first_rows[label].astype(np.int64)


def check_threshold(threshold: Any, name: str = "threshold") -> float:
    """``threshold`` as a float in (0, 1] (a cosine similarity), else ``ValueError``.

    Parameters
    ----------
    threshold : Any
        The value to check.
    name : str, default "threshold"
        The argument's name, for the message.

    Returns
    -------
    float
        ``threshold`` as a float.

    Raises
    ------
    ValueError
        ``threshold`` is not a finite number in (0, 1].

    Examples
    --------
    >>> check_threshold(1)
    1.0
    >>> check_threshold(0)
    Traceback (most recent call last):
    ...
    ValueError: threshold must be in (0, 1], got 0.0 (every pair of rows would be a near-duplicate)
    """
    threshold = check_number(threshold, name, low=0.0, high=1.0)
    if threshold == 0.0:
        raise ValueError(f"{name} must be in (0, 1], got 0.0 (every pair of rows would be a near-duplicate)")
    return threshold


def cosine_index(
    embeddings: Any, comm: Communicator | None, nprobe: int | None, progress: bool, seed: int
) -> tuple[EmbeddingIndex, Communicator | None]:
    """The cosine index of ``embeddings``: sharded over ``comm``'s ranks when it has several
    (collective), else one process's; returned with the communicator in use (None for one).

    Parameters
    ----------
    embeddings : array-like, torch.Tensor or path
        ``N x d`` array, tensor or ``.npy`` path.
    comm : Communicator or None
        The ranks to shard over; ``None`` or one rank: one process's index.
    nprobe : int or None
        IVF lists searched per query (``None``: tuned), as for :func:`deduplicate`.
    progress : bool
        Whether the index shows progress bars.
    seed : int
        The index's seed.

    Returns
    -------
    tuple
        ``(index, comm)``: an :class:`~batchsel.EmbeddingIndex` or a
        :class:`~batchsel.distributed.sharded.ShardedIndex`, and ``comm`` when it has
        several ranks, else ``None``.
    """
    if comm is not None and int(comm.size) > 1:
        from batchsel.distributed.sharded import ShardedIndex

        return ShardedIndex(embeddings, comm, metric="cosine", nprobe=nprobe, progress=progress, seed=seed), comm
    return EmbeddingIndex(embeddings, metric="cosine", nprobe=nprobe, progress=progress, seed=seed), None


def deduplicate(
    embeddings: Any,
    threshold: float = 0.95,
    *,
    k: int = 8,
    nprobe: int | None = NPROBE,
    comm: Communicator | None = None,
    progress: bool = True,
    seed: int = 0,
) -> Deduplication:
    """Find the near-duplicates among the rows of ``embeddings`` and keep one per group.

    Parameters
    ----------
    embeddings : array-like, torch.Tensor or path
        ``N x d`` array, tensor or ``.npy`` path (memory-mapped; with ``comm`` each rank
        reads only its rows).
    threshold : float, default 0.95
        Cosine similarity at or above which two rows are near-duplicates, in (0, 1]
        (1: exact duplicates up to rounding). Groups are transitive: ``a ~ b`` and
        ``b ~ c`` put ``a``, ``b`` and ``c`` in one group even when ``a`` and ``c`` are
        below the threshold. All-zero rows have no direction (their cosine similarity
        is undefined): they are taken as exact duplicates of one another, one group whose
        first row is kept (pairs of consecutive zero rows, similarity 1.0, in ``pairs``),
        and of no other row; a warning gives their count (``extra["zero_rows"]``). Raw
        non-negative features (pixels, counts) get a warning naming the fix: :func:`crowded_warning`.
    k : int, default 8
        Neighbours searched per row: a row with more than ``k`` near-duplicates still
        joins their group through them, but the pairs listed are at most ``k`` per row.
    nprobe : int or None, default NPROBE
        IVF lists searched per query (over 50k rows); ``None`` tunes it for recall@10 of
        ordinary neighbours, which costs more than near-duplicates need.
    comm : Communicator or None, default None
        A communicator: the search runs sharded over its ranks (collective), and every
        rank returns the same result as one process would.
    progress, seed : bool, int, default True, 0
        The index's progress bars and seed (:class:`~batchsel.EmbeddingIndex`).

    Returns
    -------
    Deduplication
        The rows kept, every row's group and the pairs found.

    Examples
    --------
    >>> x = np.random.default_rng(0).normal(size=(100, 16)).astype(np.float32)
    >>> x[50:60] = x[:10] * 2.0          # rows 50-59 repeat rows 0-9 (scale does not matter)
    >>> result = deduplicate(x, 0.99, progress=False)
    >>> result.keep.size, int(result.group[55]), round(result.removed_fraction, 3)
    (90, 5, 0.1)
    """
    threshold = check_threshold(threshold)
    k = check_int(k, "k", minimum=1)
    start = time.perf_counter()
    index, comm = cosine_index(embeddings, comm, nprobe, progress, seed)
    n = index.num_examples
    k = min(k, n - 1)
    if k < 1:  # one row: nothing to compare
        rows = np.zeros(1, np.int64)
        empty = (np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float32))
        return Deduplication(rows, rows.copy(), empty, threshold, k, time.perf_counter() - start)
    i, j, s, zeros = _pairs_and_zero_rows(index, comm, k, threshold)
    warn_zero_rows(zeros, n, "deduplicate")
    i, j, s = unique_pairs(*with_zero_pairs(i, j, s, zeros), n)
    group = groups_of_pairs(i, j, n)
    keep = np.flatnonzero(group == np.arange(n)).astype(np.int64)
    seconds = time.perf_counter() - start
    logger.info(
        "deduplicate: %d of %d rows kept (%.1f %% near-duplicates at cosine >= %g), %d pairs, %.1f s",
        keep.size,
        n,
        100 * (1 - keep.size / n),
        threshold,
        i.size,
        seconds,
    )
    extra = {"kind": index.kind, "nprobe": getattr(index, "nprobe_", None), "zero_rows": int(zeros.size)}
    extra.update(_baseline(index, seed, threshold, 1 - keep.size / n))
    return Deduplication(keep, group, (i, j, s), threshold, k, seconds, extra=extra)


def _baseline(index: EmbeddingIndex, seed: int, threshold: float, removed: float) -> dict[str, Any]:
    """``random_similarity`` (the median of random pairs) and ``warning`` (:func:`crowded_warning`)
    when ``CROWDED_REMOVED`` or more of the rows are ``removed``; else nothing."""
    if removed < CROWDED_REMOVED:  # nothing worth a look: no extra reading of rows
        return {}
    similarities = random_pair_similarities(index, seed)
    return {
        "random_similarity": float(np.median(similarities)),
        "warning": crowded_warning(similarities, threshold, removed, "deduplicate"),
    }


def _pairs_and_zero_rows(
    index: EmbeddingIndex, comm: Communicator | None, k: int, threshold: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The near-duplicate pairs ``(i, j, s)`` found among every row's ``k`` neighbours and
    the all-zero rows, of all rows on every rank (collective with ``comm``)."""
    D, I = index.neighbors(k)
    i, j, s = neighbour_pairs(D, I, index.first_row, threshold)
    zeros = zero_rows(index, D, I, index.first_row)
    if comm is not None:  # every rank groups all pairs: the same result everywhere
        parts = comm.allgather((i, j, s, zeros))
        i, j, s, zeros = (np.concatenate([p[c] for p in parts]) for c in range(4))
    return i, j, s, zeros


__all__ = [
    "deduplicate",
    "Deduplication",
    "groups_of_pairs",
    "check_threshold",
    "cosine_index",
    "NPROBE",
    "SIMILARITY_SLACK",
    "CROWDED_RATIO",
]
