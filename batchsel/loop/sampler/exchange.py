"""The sampler's feedback path: from ``observe`` across the ranks to the selector.

:class:`FeedbackExchange` keeps what a sampler knows of the loop's feedback: the calls
of the running iteration (which the ranks must agree on), whether any carried what the
selector needs, the observations buffered for the next all-gather, and the
:class:`~batchsel.loop.prefetch.BackgroundSelection` that hands them to the selector, in
call order, before the selections ahead that must see them. It also sets the lag: how many
batches the sampler selects ahead beside what a DataLoader's workers already ask for.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from batchsel.core.checks import check_number
from batchsel.loop.feedback import exchange, merged, observation, settle
from batchsel.loop.prefetch import BackgroundSelection, Observation
from batchsel.loop.sampler.profile import SelectorProfile
from batchsel.loop.sampler.resume import IterationRecord
from batchsel.loop.sampler.world import RankWorld

logger = logging.getLogger(__name__)

# batches a feedback selector may hand out beyond its lag before a loop that gave no
# feedback is told that it forgot observe()
UNFED_GRACE = 8


def gather_timeout(timeout: float | None) -> float | None:
    """A feedback all-gather's ``timeout``, checked: seconds > 0, or None (no limit).

    Parameters
    ----------
    timeout : float or None
        Seconds an all-gather waits for every rank.

    Returns
    -------
    float or None
        ``timeout`` as a float; ``ValueError`` for 0 or less.

    Example
    -------
    >>> gather_timeout(60), gather_timeout(None)
    (60.0, None)
    """
    timeout = None if timeout is None else check_number(timeout, "timeout", low=0.0)
    if timeout == 0:
        raise ValueError("timeout must be > 0 seconds (or None: wait as long as it takes), got 0")
    return timeout


class FeedbackExchange:
    """Feedback from the training loop to the selector, shared across ranks.

    Parameters
    ----------
    profile : SelectorProfile
        The selector's answers (what it reads; whether it reads it once an epoch).
    world : RankWorld
        The ranks and their communicator (None: feedback stays local).
    record : IterationRecord
        The running iteration's place in its epoch (observations are tagged with it).
    batches_of : callable
        ``batches_of(epoch)``: the rank's batches in an epoch.
    deferred : list of Observation, optional
        Feedback held back by a prefetch run, not handed to the selector yet.

    Example
    -------
    >>> import numpy as np
    >>> from batchsel import LossRankSelector
    >>> selector = LossRankSelector(8, 2)
    >>> feedback = FeedbackExchange(SelectorProfile(selector), RankWorld(0, 1), IterationRecord(), lambda e: 4)
    >>> feedback.observe([0, 1], losses=np.array([1.0, 2.0]), sync_every=4, timeout=None)
    >>> selector.losses_[:2].tolist(), feedback.fed
    ([1.0, 2.0], 1)
    """

    def __init__(
        self,
        profile: SelectorProfile,
        world: RankWorld,
        record: IterationRecord,
        batches_of: Callable[[int], int],
        deferred: list[Observation] | None = None,
    ) -> None:
        self.profile, self.world, self.record, self.batches_of = profile, world, record, batches_of
        self.buffer: list[Observation] = []  # feedback not yet all-gathered
        self.calls = 0  # buffered observe() calls of the latest iteration: ranks must agree
        self.fed = 0  # observe() calls of the latest iteration that carried what only it brings
        self.warned_local = False
        # gathered feedback goes to the selector through this; while an iteration with
        # prefetch runs, each selection ahead applies what came before it (call order decides)
        per_epoch = profile.feedback_per_epoch  # then handed over once an epoch, in one call
        self.background = BackgroundSelection(self.feed_selector, deferred or [], per_iteration=per_epoch)

    def __getstate__(self) -> dict[str, Any]:
        # a copy may load where the tensors' device is not: the feedback travels as numpy
        self.background.deferred = [settle(o) for o in self.background.deferred]
        return {**self.__dict__, "buffer": [settle(o) for o in self.buffer]}

    # -- one iteration ----------------------------------------------------------------------
    def restart(self) -> None:
        """An iteration starts: its ``observe`` calls are counted from zero."""
        self.calls = self.fed = 0

    @staticmethod
    def depth(prefetch: int, window: int) -> int:
        """The batches the sampler selects ahead itself: its lag, less the ``window`` a
        DataLoader's workers already ask for (so the batches are those of
        ``num_workers=0`` wherever ``prefetch`` covers the window)."""
        return max(prefetch - window, 0)

    def unfed_after(self, prefetch: int, window: int) -> int | None:
        """Batches handed out without feedback after which ``observe`` was forgotten (the
        DataLoader's and the sampler's own batches ahead come on top); None for a selector
        that needs none."""
        return window + prefetch + UNFED_GRACE if self.profile.needed_fields else None

    # -- observe and share ------------------------------------------------------------------
    def observe(
        self,
        indices: Any,
        losses: Any = None,
        logits: Any = None,
        embeddings: Any = None,
        *,
        sync_every: int,
        timeout: float | None,
    ) -> None:
        """Take one step's feedback (only what the selector reads), and share it across
        the ranks every ``sync_every`` calls or at the epoch's last batch.

        Parameters
        ----------
        indices : array-like or tensor
            The batch's example indices.
        losses, logits, embeddings : array-like or tensor, optional
            Per-example feedback (rows); tensors on an accelerator are copied without a wait.
        sync_every : int
            Buffered calls per all-gather.
        timeout : float or None
            Seconds an all-gather waits for every rank.
        """
        world = self.world
        size = world.world_size
        if size == 1 and self.background.applies_now():
            self.apply_now(indices, losses, logits, embeddings)  # the short step's path: few calls deep
            return
        obs = observation(indices, self.profile.feedback_fields, losses, logits, embeddings)
        if obs is None:
            return
        if not self.fed and any(obs.get(name) is not None for name in self.profile.needed_fields):
            self.fed = 1
        if world.comm is None or size == 1:
            if size > 1 and not self.warned_local:
                logger.warning("no communicator: rank %d's feedback is not shared with the other ranks", world.rank)
                self.warned_local = True
            self.background.observe([obs])
            return
        self.calls += 1
        # which call this is, checked across ranks when gathered: a rank that calls observe
        # once less fails there, naming the call, instead of pairing other steps' feedback
        epoch = -1 if self.record.epoch is None else self.record.epoch
        obs["step"] = (epoch, self.calls)  # type: ignore[assignment]
        self.buffer.append(obs)
        if len(self.buffer) >= sync_every or self.epoch_fed_back():
            self.sync(timeout)

    def apply_now(self, indices: Any, losses: Any, logits: Any, embeddings: Any) -> None:
        """One rank, nothing held back and no selection running: the step's feedback goes
        straight to the selector, which checks what it reads. No copy (nothing keeps it),
        no observation record: on a sub-millisecond step every numpy call counts.

        Parameters
        ----------
        indices : array-like or tensor
            The batch's example indices.
        losses, logits, embeddings : array-like or tensor, optional
            Per-example feedback; the kinds the selector does not read are dropped.
        """
        fields = self.profile.feedback_fields
        losses = losses if "losses" in fields else None
        logits = logits if "logits" in fields else None
        embeddings = embeddings if "embeddings" in fields else None
        if losses is None and logits is None and embeddings is None:
            observation(indices, fields)  # nothing the selector reads: the indices are still checked
            return
        if not self.fed and (losses is not None or logits is not None):  # what only observe() brings
            self.fed = 1
        self.background.clock.run(
            self.profile.selector.observe, indices, losses=losses, logits=logits, embeddings=embeddings
        )

    def epoch_fed_back(self) -> bool:
        """Whether a selector that reads feedback only when it plans an epoch has just got
        the feedback of the epoch's last batch: sharing it now (every rank is at the same
        call) puts the whole epoch in the next plan, not up to ``sync_every - 1`` batches an
        epoch later."""
        if not self.background.per_iteration or self.record.epoch is None:
            return False
        return self.record.base + self.calls >= self.batches_of(self.record.epoch)

    def sync(self, timeout: float | None) -> None:
        """All-gather the buffered feedback now (collective) and hand it to the selector:
        round by round (call order), rank by rank within a round."""
        world = self.world
        if world.comm is None or world.world_size == 1:
            self.background.observe(self.buffer)
            self.buffer = []
            return
        gathered = exchange(world.comm, self.buffer, world.rank, timeout)
        self.buffer = []
        self.background.observe(gathered)

    def feed_selector(self, observations: list[Observation]) -> None:
        """Hand ``observations`` to the selector (on the training thread, or on the prefetch
        thread right before a selection); one call per run of them for a selector that
        reads feedback once an epoch."""
        observations = [settle(obs) for obs in observations]
        if self.background.per_iteration:
            observations = merged(observations)
        for obs in observations:
            self.profile.selector.observe(
                obs["indices"], losses=obs["losses"], logits=obs["logits"], embeddings=obs["embeddings"]
            )

    # -- checkpoints ------------------------------------------------------------------------
    def held(self) -> tuple[list[Any], list[Observation]]:
        """Wait for the selections in flight, and read every observation not yet applied.

        Returns
        -------
        tuple
            The items selected ahead and not handed out (oldest first), and the feedback
            held back, settled into numpy arrays; the buffer is settled in place.
        """
        if self.background.per_iteration:
            # feedback read once an epoch goes in now (the plans are those of a selector fed
            # every step): the state carries it in the selector's journaled arrays, not as a
            # list that grows with the epoch (a state every step would copy it all each time)
            self.background.apply_held_back()
        ahead, deferred = self.background.state()
        deferred = [settle(o) for o in deferred]
        self.buffer = [settle(o) for o in self.buffer]
        return ahead, deferred

    def restore(self, observations: list[Observation], deferred: list[Observation]) -> None:
        """Take a saved state's feedback: the buffer and what a prefetch run held back
        (states written before prefetch existed have none)."""
        self.buffer = [dict(o) for o in observations]
        self.background.deferred = [dict(o) for o in deferred]


__all__ = ["FeedbackExchange", "UNFED_GRACE", "gather_timeout"]
