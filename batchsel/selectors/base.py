"""Deprecated: the selector interface's first import path (``from batchsel.selectors.base
import Selector``, 0.1.0); import each name from its own module. Importing this module warns
(``DeprecationWarning``).

:class:`Selector`, :class:`OfflineSelector`, :class:`OnlineSelector` and
:class:`RandomSelector` are in :mod:`batchsel.selectors`; ``digest`` in
:mod:`batchsel.selectors.hashing`; ``epoch_rng``, ``split_batches``, ``batch_sizes``,
``even_split`` and ``shard_length`` in :mod:`batchsel.selectors.sharding`; ``weighted_sum``
and ``PARTITIONS`` in :mod:`batchsel.selectors.selector`; ``STATE_VERSION`` in
:mod:`batchsel.selectors.online`. The names are those modules' own objects.
"""

import warnings

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

warnings.warn(
    "batchsel.selectors.base moved to batchsel.selectors (Selector, OfflineSelector, OnlineSelector, "
    "RandomSelector) and batchsel.selectors.sharding (epoch_rng, split_batches, batch_sizes, even_split, "
    "shard_length): import them from there (the old path will be removed)",
    DeprecationWarning,
    stacklevel=2,  # warnings skips importlib's frames: 2 is the import statement
)
