"""The selector interface, its kinds and the random baseline, under their first import
path (``from batchsel.selectors.base import Selector``): each lives in a module of its own.

- :class:`Selector` (:mod:`~batchsel.selectors.selector`), with its capability flags
  (:mod:`~batchsel.selectors.capabilities`) and :func:`digest`
  (:mod:`~batchsel.selectors.hashing`);
- the kinds :class:`OfflineSelector` (:mod:`~batchsel.selectors.offline`) and
  :class:`OnlineSelector` (:mod:`~batchsel.selectors.online`, its runs in
  :mod:`~batchsel.selectors.runs`);
- :class:`RandomSelector` (:mod:`~batchsel.selectors.random_batches`);
- how an epoch is dealt to ranks and cut into batches (:mod:`~batchsel.selectors.sharding`).

A selector turns the data it was built from into each rank's batches for an epoch. Every
selector is seeded; an epoch's plan depends only on (inputs, seed, epoch, world size) and,
for online selectors, on the scores observed so far. Randomness comes from a local
``numpy.random.Generator`` seeded from ``(seed, epoch, ...)``, never the global RNG.
"""

from __future__ import annotations

from batchsel.selectors.hashing import DIGEST_FULL_BYTES, digest
from batchsel.selectors.offline import OfflineSelector
from batchsel.selectors.online import STATE_VERSION, OnlineSelector
from batchsel.selectors.random_batches import RandomSelector
from batchsel.selectors.selector import PARTITIONS, Selector, weighted_sum
from batchsel.selectors.sharding import batch_sizes, epoch_rng, even_split, shard_length, split_batches

__all__ = [
    "Selector",
    "OfflineSelector",
    "OnlineSelector",
    "RandomSelector",
    "digest",
    "epoch_rng",
    "split_batches",
    "batch_sizes",
    "even_split",
    "shard_length",
    "weighted_sum",
    "PARTITIONS",
    "STATE_VERSION",
    "DIGEST_FULL_BYTES",
]
