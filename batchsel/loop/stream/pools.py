"""How a pool of streamed examples becomes batches (numpy in, index arrays out), by mode:

- ``"random"``: the pool shuffled (a block shuffle: what a shuffle buffer of that size
  gives, each example once an epoch);
- ``"loss-rank"``: the never-trained examples of the pool once each, and the pool's
  other slots drawn with replacement among the rest by rank: rank ``i`` of ``n`` by
  last loss with probability proportional to ``pressure ** (-i / (n - 1))``, the loss-rank
  selector's rule;
- ``"prune"``: InfoBatch's rule as examples are read (:class:`LearntSkipping`): one whose
  last loss is below the mean of the last losses is skipped with probability
  ``prune_ratio`` and, kept, weighted ``1 / (1 - prune_ratio)``.

With costs the pool's order is sorted by cost and cut into batches that come in a random
order (:func:`group_by_cost`): batches of similar length, the same examples.

Every function is deterministic given its ``rng`` (a ``numpy.random.Generator`` seeded
from seed, epoch, rank, worker and pool number by the caller), so a pool read again on
resume gives the same batches.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import numpy as np

from batchsel.core.checks import check_int
from batchsel.selectors.loss_rank import selection_probabilities


def rank_probabilities(losses: np.ndarray, pressure: float, rng: np.random.Generator) -> np.ndarray:
    """Loshchilov & Hutter's rank-based selection probabilities of one pool.

    The examples are ranked by loss, highest first (a missing loss, ``nan``, counts as
    the highest: never-trained examples come first; ties in a random order), and rank
    ``i`` of ``n`` gets probability proportional to ``pressure ** (-i / (n - 1))``: the
    first rank ``pressure`` times the last's, as in the loss-rank selector
    (:func:`~batchsel.selectors.loss_rank.selection_probabilities`).

    Parameters
    ----------
    losses : numpy.ndarray
        The pool's last observed losses, ``nan`` where none was observed.
    pressure : float
        The ratio of the first rank's probability to the last's, ``>= 1``.
    rng : numpy.random.Generator
        Breaks ties.

    Returns
    -------
    numpy.ndarray
        One probability per example, summing to 1.

    Example
    -------
    >>> p = rank_probabilities(np.array([0.1, 5.0, np.nan]), 100.0, np.random.default_rng(0))
    >>> [int(i) for i in np.argsort(-p)]    # unseen first, then the highest loss
    [2, 1, 0]
    """
    n = len(losses)
    key = np.where(np.isnan(losses), np.inf, losses)
    shuffled = rng.permutation(n)
    order = shuffled[np.argsort(-key[shuffled], kind="stable")]
    probabilities = np.empty(n, dtype=np.float64)
    probabilities[order] = selection_probabilities(n, float(pressure))
    return probabilities


def pool_order(count: int, losses: np.ndarray | None, pressure: float, rng: np.random.Generator) -> np.ndarray:
    """The order in which a pool's ``count`` examples are trained.

    A shuffle when ``losses`` is None or ``pressure`` 1. Otherwise the examples without a
    loss (``nan``: never trained) come once each, and the pool's other slots are
    rank-based draws with replacement among those with one (:func:`rank_probabilities`):
    high-loss examples several times, low-loss ones perhaps not at all; shuffled together.

    Example
    -------
    >>> sorted(pool_order(4, None, 1.0, np.random.default_rng(0)).tolist())
    [0, 1, 2, 3]
    >>> order = pool_order(4, np.array([np.nan, 9.0, 0.1, 0.2]), 1e6, np.random.default_rng(0))
    >>> sorted(order.tolist())    # the unseen one once, the top loss drawn for the rest
    [0, 1, 1, 1]
    """
    if losses is None or pressure == 1.0:
        return rng.permutation(count)
    unseen = np.isnan(losses)
    seen = np.flatnonzero(~unseen)
    if len(seen) == 0:
        return rng.permutation(count)
    probabilities = rank_probabilities(losses[seen], pressure, rng)
    draws = seen[rng.choice(len(seen), size=count - int(unseen.sum()), replace=True, p=probabilities)]
    return rng.permutation(np.concatenate([np.flatnonzero(unseen), draws]))


def group_by_cost(
    order: np.ndarray, costs: np.ndarray | None, batch_size: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Cut ``order`` into batches of ``batch_size`` (the last may be short).

    With ``costs`` (one per pool position) the order is first sorted by cost (stable: ties
    keep the order's randomness), so each batch holds examples of similar cost (less
    padding), and the batches come in a random order.

    Example
    -------
    >>> costs = np.array([3.0, 90.0, 4.0, 80.0])
    >>> batches = group_by_cost(np.arange(4), costs, 2, np.random.default_rng(0))
    >>> sorted(sorted(b.tolist()) for b in batches)
    [[0, 2], [1, 3]]
    """
    if costs is not None:
        order = order[np.argsort(costs[order], kind="stable")]
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    if costs is not None:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def id_uniform(example_id: Any, seed: int, epoch: int) -> float:
    """A uniform number in [0, 1) fixed by (id, seed, epoch): whether a learnt example is
    skipped is decided where it is read, identically on resume, in any worker.

    The id's ``repr`` is hashed by BLAKE2b keyed by seed and epoch, so the numbers of one
    id in two epochs (or two seeds) are independent, as are those of two ids. (A CRC is
    affine in its input: every seed and epoch then skipped one of two complementary sets.)

    Example
    -------
    >>> id_uniform("shard-3/17", 0, 1) == id_uniform("shard-3/17", 0, 1)
    True
    >>> id_uniform("shard-3/17", 0, 1) == id_uniform("shard-3/17", 0, 2)
    False
    """
    return _uniform(example_id, _key(seed, epoch))


def _key(seed: int, epoch: int) -> bytes:
    """The hash key of (seed, epoch): 32 bytes whatever the seed's size."""
    return hashlib.blake2b(f"{seed}:{epoch}".encode(), digest_size=32).digest()


def _uniform(example_id: Any, key: bytes) -> float:
    digest = hashlib.blake2b(repr(example_id).encode(), digest_size=8, key=key).digest()
    return int.from_bytes(digest, "little") * 2.0**-64


class LearntSkipping:
    """InfoBatch's pruning rule for a stream: an example whose last loss is below the
    mean of the last losses (the *well-learnt* ones) is skipped with probability
    ``prune_ratio``; a kept well-learnt example is trained with weight
    ``1 / (1 - prune_ratio)``, so the expected gradient is the full epoch's.

    Parameters
    ----------
    threshold : float or None
        The mean loss below which an example counts as learnt; None: nothing is skipped
        (the first epoch, the annealing epochs).
    prune_ratio : float
        The share of the learnt examples skipped, in [0, 1).
    seed, epoch : int
        Fix which examples are skipped (:func:`id_uniform`).

    Example
    -------
    >>> rule = LearntSkipping(threshold=1.0, prune_ratio=0.5, seed=0, epoch=1)
    >>> rule.weight("a", 2.0)          # above the mean: always kept, weight 1
    1.0
    >>> sorted({rule.weight(i, 0.1) for i in range(50)})    # learnt: skipped (0) or 2x
    [0.0, 2.0]
    """

    def __init__(self, threshold: float | None, prune_ratio: float, seed: int, epoch: int) -> None:
        self.threshold, self.prune_ratio, self.seed, self.epoch = threshold, prune_ratio, seed, epoch
        self._key = _key(seed, epoch)

    def weight(self, example_id: Any, loss: float) -> float:
        """0.0 for an example skipped, its training weight otherwise."""
        if self.threshold is None or not loss < self.threshold:  # nan (never trained): kept
            return 1.0
        if _uniform(example_id, self._key) < self.prune_ratio:
            return 0.0
        return 1.0 / (1.0 - self.prune_ratio)


def split_count(total: int, parts: int, part: int) -> int:
    """Part ``part``'s share of ``total`` split into ``parts`` as evenly as possible (the
    first ``total % parts`` get one more).

    >>> [split_count(10, 4, p) for p in range(4)]
    [3, 3, 2, 2]
    """
    check_int(parts, "parts", minimum=1)
    return total // parts + (1 if part < total % parts else 0)


def first_repeat(ids: Sequence[Any]) -> tuple[int, int] | None:
    """The positions of the first id that appears twice, or None.

    >>> first_repeat(["a", "b", "a"])
    (0, 2)
    """
    seen: dict[Any, int] = {}
    for i, example_id in enumerate(ids):
        first = seen.setdefault(example_id, i)
        if first != i:
            return first, i
    return None


__all__ = [
    "LearntSkipping",
    "first_repeat",
    "group_by_cost",
    "id_uniform",
    "pool_order",
    "rank_probabilities",
    "split_count",
]
