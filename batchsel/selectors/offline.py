"""The offline kind of selector: :class:`OfflineSelector` plans a whole epoch at once,
from its data and seed; a rank's batches and their number come from that plan."""

from __future__ import annotations

from typing import Iterator

import numpy as np

from batchsel.core.checks import check_int
from batchsel.core.world import World
from batchsel.plans.plan import EpochPlan
from batchsel.selectors.selector import Selector


class OfflineSelector(Selector):
    """The kind of selector that plans a whole epoch at once, from its data and seed (and,
    for some, feedback that refreshes the data): subclasses implement
    ``_plan(epoch, world)`` (``epoch`` and ``world`` checked); ``iter_batches`` and
    ``num_batches`` come from it. Its capability flags are the defaults
    (:class:`~batchsel.selectors.capabilities.Capabilities`).

    Parameters
    ----------
    num_examples, batch_size, seed, drop_last, partition
        As :class:`~batchsel.selectors.selector.Selector` (``partition="submodular"``
        where the subclass supports it).

    Example
    -------
    >>> from batchsel.selectors.sharding import even_split, split_batches
    >>> class Ordered(OfflineSelector):
    ...     def _plan(self, epoch, world):
    ...         shards = even_split(np.arange(self.num_examples), world.size, self.drop_last)
    ...         return EpochPlan([split_batches(s, self.batch_size) for s in shards], num_examples=self.num_examples)
    >>> [b.tolist() for b in Ordered(6, 2).iter_batches(0, rank=1, world_size=2)]
    [[1, 3], [5]]
    """

    def _check_epoch(self, epoch: int) -> int:
        return check_int(epoch, "epoch", minimum=0)

    def _plan(self, epoch: int, world: World) -> EpochPlan:
        raise NotImplementedError(f"{type(self).__name__} implements _plan(epoch, world)")

    def _iter_batches(self, epoch: int, world: World, start: int) -> Iterator[np.ndarray]:
        yield from self._plan(epoch, world).batches(world.rank)[start:]

    def _num_batches(self, world: World) -> int:
        return self._plan(0, world).num_batches


__all__ = ["OfflineSelector"]
