"""The selector interface and the random baseline.

A selector turns the data it was built from into each rank's batches for an epoch. Every
selector is seeded; an epoch's plan depends only on (inputs, seed, epoch, world size) and,
for online selectors, on the scores observed so far. Randomness comes from a local
``numpy.random.Generator`` seeded from ``(seed, epoch, ...)``, never the global RNG.
"""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from .._checks import check_int, check_seed
from ..plan import EpochPlan


def epoch_rng(seed: int, epoch: int, *stream: int) -> np.random.Generator:
    """The local generator for (seed, epoch, stream...): independent streams for
    independent uses, identical on every rank."""
    return np.random.default_rng([int(seed), int(epoch), *map(int, stream)])


def split_batches(indices: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Consecutive batches of ``batch_size`` (the last one may be smaller)."""
    return [indices[i:i + batch_size] for i in range(0, len(indices), batch_size)]


def even_split(indices: np.ndarray, world_size: int, drop_last: bool) -> list[np.ndarray]:
    """DistributedSampler's split: pad by wrapping around (or drop the tail) to a multiple
    of ``world_size``, then rank r takes ``indices[r::world_size]``."""
    n = len(indices)
    if drop_last:
        indices = indices[: (n // world_size) * world_size]
    else:
        total = -(-n // world_size) * world_size
        if total > n:
            indices = np.concatenate([indices, np.resize(indices, total - n)])
    return [indices[r::world_size] for r in range(world_size)]


class Selector:
    """Base class of all selectors.

    Subclasses implement :meth:`plan` (offline selectors) or :meth:`iter_batches`
    (online selectors, which draw batch after batch from the scores observed so far and
    set ``online = True``). ``drop_last`` is DistributedSampler's: ``False`` pads ranks to
    equal size by repeating examples, ``True`` drops the tail.
    """

    online: bool = False

    def __init__(self, num_examples: int, batch_size: int, *, seed: int = 0, drop_last: bool = False) -> None:
        self.num_examples = check_int(num_examples, "num_examples", minimum=1)
        self.batch_size = check_int(batch_size, "batch_size", minimum=1)
        if self.batch_size > self.num_examples:
            raise ValueError(f"batch_size must be <= the number of examples ({self.num_examples}), got {batch_size}")
        self.seed = check_seed(seed)
        self.drop_last = bool(drop_last)

    # -- argument checks shared by subclasses -----------------------------------------
    def _check_world(self, world_size: int, rank: int | None = None) -> None:
        check_int(world_size, "world_size", minimum=1)
        if world_size > self.num_examples:
            raise ValueError(f"world_size must be <= the number of examples ({self.num_examples}), got {world_size}")
        if rank is not None:
            check_int(rank, "rank", minimum=0)
            if rank >= world_size:
                raise ValueError(f"rank must be in [0, {world_size}), got {rank}")

    # -- the interface ----------------------------------------------------------------
    def plan(self, epoch: int = 0, world_size: int = 1) -> EpochPlan:
        """Every rank's batches for ``epoch`` (online selectors: as drawn with the scores
        known now)."""
        self._check_world(world_size)
        per_rank = [list(self.iter_batches(epoch, r, world_size)) for r in range(world_size)]
        return EpochPlan.from_rank_batches(per_rank, drop_last=self.drop_last, num_examples=self.num_examples,
                                           epoch=epoch, seed=self.seed, method=type(self).__name__)

    def iter_batches(self, epoch: int, rank: int = 0, world_size: int = 1) -> Iterator[np.ndarray]:
        """This rank's batches for ``epoch``, one at a time."""
        yield from self.plan(epoch, world_size).batches(rank)

    def num_batches(self, world_size: int = 1) -> int:
        """Batches per rank per epoch (the same on every rank and every epoch)."""
        return self.plan(0, world_size).num_batches

    def observe(self, indices: Any, losses: Any = None, logits: Any = None, embeddings: Any = None) -> None:
        """Feedback from the training loop; offline selectors ignore it."""

    def state_dict(self) -> dict[str, Any]:
        """What an online selector needs to resume (scores); empty for offline ones."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_examples={self.num_examples}, batch_size={self.batch_size}, seed={self.seed})"


class RandomSelector(Selector):
    """Random batches: the same distribution and per-rank coverage as torch's
    ``DistributedSampler(shuffle=True)`` followed by ``BatchSampler(drop_last=False)``.

    Each epoch shuffles all examples with a generator seeded from (seed, epoch), pads by
    wrapping (or drops the tail, ``drop_last=True``) to a multiple of the world size, gives
    rank r every world_size-th example from r on, and cuts that into batches; the last
    batch of a rank may be smaller.

    Example
    -------
    >>> sel = RandomSelector(10, batch_size=3, seed=0)
    >>> plan = sel.plan(epoch=0, world_size=2)
    >>> plan.num_batches, sorted(plan.indices().tolist())
    (2, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    """

    def plan(self, epoch: int = 0, world_size: int = 1) -> EpochPlan:
        self._check_world(world_size)
        perm = epoch_rng(self.seed, epoch).permutation(self.num_examples).astype(np.int64)
        shards = even_split(perm, world_size, self.drop_last)
        return EpochPlan([split_batches(s, self.batch_size) for s in shards], num_examples=self.num_examples,
                         epoch=epoch, seed=self.seed, method="random")

    def num_batches(self, world_size: int = 1) -> int:
        self._check_world(world_size)
        per_rank = self.num_examples // world_size if self.drop_last else -(-self.num_examples // world_size)
        return -(-per_rank // self.batch_size)


__all__ = ["Selector", "RandomSelector", "epoch_rng", "split_batches", "even_split"]
