"""The torch side: a batch sampler for ``DataLoader(batch_sampler=...)`` and a weighted
dataset wrapper.

:class:`SelectionBatchSampler` is a drop-in for ``DistributedSampler`` + ``BatchSampler``
whose batches come from a batchsel :class:`~batchsel.selectors.Selector`. It adds what
DistributedSampler lacks: exact mid-epoch resume, feedback from the training loop
(per-example losses / logits / embeddings, shared across ranks), and a check that every
rank works from the same plan. Its selection ahead of the training step (``prefetch``)
is :class:`~batchsel.loop.prefetch.BackgroundSelection`. torch itself is imported
only where a tensor is touched, so ``import batchsel`` stays light.

The sampler keeps DistributedSampler's contract, its feedback, the ranks' agreement and
resume (:mod:`.batch_sampler`), and hands the work to its parts: what kind of selector it
drives (:mod:`.profile`), ranks (:mod:`.world`, over the one detection in
:mod:`batchsel.distributed.world`), epoch lengths (:mod:`.lengths`), the iteration's
record and the typed resume state (:mod:`.resume`), feedback across ranks
(:mod:`.exchange`), the loop's mistakes (:mod:`.mistakes`), frameworks
(:mod:`.frameworks`); weighted batches and datasets are in :mod:`.weighted`.
"""

from batchsel.loop.sampler.batch_sampler import SelectionBatchSampler
from batchsel.loop.sampler.weighted import WeightedBatch, WeightedDataset

__all__ = ["SelectionBatchSampler", "WeightedBatch", "WeightedDataset"]
