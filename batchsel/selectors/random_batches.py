"""The random baseline: :class:`RandomSelector`, torch's ``DistributedSampler`` followed
by ``BatchSampler``, as a selector."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from batchsel.core.checks import check_int
from batchsel.core.world import World
from batchsel.plans.plan import EpochPlan
from batchsel.selectors.offline import OfflineSelector
from batchsel.selectors.sharding import even_split, shard_length, split_batches


class RandomSelector(OfflineSelector, full_batches=True):
    """Random batches: the same distribution and per-rank coverage as torch's
    ``DistributedSampler(shuffle=True)`` followed by ``BatchSampler(drop_last=False)``.

    Each epoch shuffles all examples with a generator seeded from (seed, epoch), pads by
    wrapping (or drops the tail, ``drop_last=True``) to a multiple of the world size, gives
    rank r every world_size-th example from r on, and cuts that into batches; the last
    batch of a rank may be smaller. ``shuffle=False`` keeps the examples in order
    (``DistributedSampler(shuffle=False)``: the same batches as torch's). As with torch, a
    batch larger than the data and more ranks than examples (padded by repetition) are
    fine.

    Parameters
    ----------
    num_examples : int
        N.
    batch_size : int
        B (may exceed N: one short batch per rank, as ``BatchSampler``).
    seed : int, default 0
        Seeds the shuffles.
    drop_last : bool, default False
        DistributedSampler's padding (False) or dropping (True).
    partition : str, default "random"
        Only ``"random"``.
    shuffle : bool, default True
        Shuffle every epoch (False: the examples in order).

    Example
    -------
    >>> sel = RandomSelector(10, batch_size=3, seed=0)
    >>> plan = sel.plan(epoch=0, world_size=2)
    >>> plan.num_batches, sorted(plan.indices().tolist())
    (2, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    """

    def __init__(
        self,
        num_examples: int,
        batch_size: int,
        *,
        seed: int = 0,
        drop_last: bool = False,
        partition: str = "random",
        shuffle: bool = True,
    ) -> None:
        # BatchSampler takes a batch larger than the data (one short batch per rank)
        batch_size = check_int(batch_size, "batch_size", minimum=1)
        super().__init__(
            num_examples,
            min(batch_size, check_int(num_examples, "num_examples", minimum=1)),
            seed=seed,
            drop_last=drop_last,
            partition=partition,
        )
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)

    def world_error(self, world_size: int) -> str | None:
        return None  # DistributedSampler pads by repetition: more ranks than examples is allowed

    def _check_epoch(self, epoch: int) -> int:
        return epoch  # any epoch numpy seeds with, as before

    def _rank_shards(self, epoch: int, world: World) -> list[np.ndarray]:
        if self.shuffle:
            return super()._rank_shards(epoch, world)
        return even_split(np.arange(self.num_examples, dtype=np.int64), world.size, self.drop_last)

    def _plan(self, epoch: int, world: World) -> EpochPlan:
        shards = self._rank_shards(epoch, world)
        return EpochPlan(
            [split_batches(s, self.batch_size) for s in shards],
            num_examples=self.num_examples,
            epoch=epoch,
            seed=self.seed,
            method="random",
            copy=False,  # views of the epoch's split, read-only (the cached order): kept as they are
        )

    def _iter_batches(self, epoch: int, world: World, start: int) -> Iterator[np.ndarray]:
        # Only this rank's shard: building every rank's plan per epoch made the sampler
        # slower than DistributedSampler + BatchSampler at small batches.
        shard = self._rank_shards(epoch, world)[world.rank]
        for begin in range(start * self.batch_size, len(shard), self.batch_size):
            yield shard[begin : begin + self.batch_size]

    def _num_batches(self, world: World) -> int:
        return -(-shard_length(self.num_examples, world.size, self.drop_last) // self.batch_size)


__all__ = ["RandomSelector"]
