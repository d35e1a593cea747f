"""Agreement across ranks: every rank must work from the same plan.

:class:`PlanAgreement` gives the sampler :meth:`~PlanAgreement.fingerprint` (what
identifies an epoch's plan) and :meth:`~PlanAgreement.verify` (all ranks' fingerprints
compared, a collective): different seeds, data or selector settings on different ranks
would give overlapping or missing batches.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from batchsel.core.checks import check_int
from batchsel.distributed.comm import Communicator
from batchsel.loop.sampler.exchange import FeedbackExchange
from batchsel.loop.sampler.profile import SelectorProfile
from batchsel.selectors.hashing import digest
from batchsel.selectors.selector import Selector


class PlanAgreement:
    """The sampler's checks that every rank works from the same plan.

    A mixin of :class:`~batchsel.loop.sampler.SelectionBatchSampler`, which sets the
    attributes declared here.

    Example
    -------
    >>> from batchsel import RandomSelector, SelectionBatchSampler
    >>> sampler = SelectionBatchSampler(RandomSelector(10, 2, seed=0), rank=0, world_size=1)
    >>> sampler.verify() == sampler.fingerprint(), len(sampler.fingerprint())
    (True, 16)
    """

    selector: Selector
    epoch: int
    _profile: SelectorProfile
    _feedback: FeedbackExchange

    if TYPE_CHECKING:  # the sampler's

        @property
        def world_size(self) -> int: ...

        @property
        def comm(self) -> Communicator | None: ...

        def __len__(self) -> int: ...

    def fingerprint(self, epoch: int | None = None) -> str:
        """16 hex digits identifying the epoch's plan: the plan's own fingerprint for an
        offline selector. An online selector draws its batches as training goes, and part
        of its state (the examples this rank used) differs between ranks by design; its
        fingerprint covers what must agree: epoch, world size, batches per rank and
        :meth:`Selector.fingerprint <batchsel.selectors.Selector.fingerprint>` (class,
        settings such as seed and weights, and a digest of the data: embeddings, shards)."""
        epoch = self.epoch if epoch is None else check_int(epoch, "epoch", minimum=0)
        if not self._profile.online:
            self._feedback.background.apply_held_back()  # a plan drawn now must see the feedback so far
            return self.selector.plan(epoch, self.world_size).fingerprint()
        h = hashlib.sha256()
        digest([epoch, self.world_size, len(self), self.selector.fingerprint(self.world_size)], h)
        return h.hexdigest()[:16]

    def verify(self, epoch: int | None = None) -> str:
        """All-gather every rank's :meth:`fingerprint` (collective) and raise
        ``RuntimeError`` if they differ (different seeds, data or selector settings on
        different ranks would give overlapping or missing batches). Returns the
        fingerprint."""
        mine = self.fingerprint(epoch)
        if self.comm is None or self.world_size == 1:
            return mine
        prints = self.comm.allgather(mine)
        if len(set(prints)) != 1:
            raise RuntimeError(
                f"ranks disagree on the plan of epoch {self.epoch if epoch is None else epoch}: "
                f"fingerprints by rank {prints}"
            )
        return mine


__all__ = ["PlanAgreement"]
