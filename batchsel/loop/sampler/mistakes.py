"""The training-loop mistakes a sampler warns of, each once (docs: guide/training-loop.md,
"Common mistakes").

A weighted plan yielded without its weights, a pass without ``set_epoch``, a feedback
selector given no feedback, weighted keys into a dataset that cannot take them, a
DataLoader whose workers ask for more batches ahead than the sampler's ``prefetch``. (One
that fetches ahead other than ``workers_ahead`` says is refused by the checkpoint's count.)
Each warning names the fix.
"""

from __future__ import annotations

import warnings
from typing import Any

from batchsel.core.callers import user_stacklevel
from batchsel.loop.sampler.frameworks import hands_out_in_order, saves_sampler_at_dispatch
from batchsel.loop.sampler.profile import SelectorProfile
from batchsel.loop.sampler.resume import IterationRecord


class LoopChecks:
    """Warns of the training loop's mistakes, once per sampler and kind.

    Parameters
    ----------
    profile : SelectorProfile
        The selector's answers (its name, what it reads, whether it is online).

    Example
    -------
    >>> import warnings
    >>> from batchsel import InfoBatchSelector
    >>> checks = LoopChecks(SelectorProfile(InfoBatchSelector(100, 10, epochs=2)))
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     checks.weights_dropped(weighted=None)
    >>> "pass weighted=True" in str(caught[0].message)
    True
    """

    def __init__(self, profile: SelectorProfile) -> None:
        self.profile = profile
        self.warned: set[str] = set()  # the kinds warned of

    def warn_once(self, kind: str, message: str) -> None:
        """Warn of ``message`` unless a warning of this ``kind`` came already.

        Parameters
        ----------
        kind : str
            The mistake (``"set_epoch"``, ``"observe"``, ``"weighted_keys"``, ``"num_workers"``).
        message : str
            What happens and the fix.
        """
        if kind not in self.warned:
            self.warned.add(kind)
            # the user's loop, also where a DataLoader drives the sampler
            warnings.warn(f"SelectionBatchSampler: {message}", UserWarning, stacklevel=user_stacklevel())

    def weights_dropped(self, weighted: bool | None) -> None:
        """At construction: a selector whose plans carry weights, and a sampler not told
        whether to yield them (``weighted=None``), would train without them silently.

        Parameters
        ----------
        weighted : bool or None
            The sampler's ``weighted`` as given.
        """
        if weighted is None and self.profile.weighted_plans:
            warnings.warn(
                f"{self.profile.name}'s batches carry weights (the loss's up-weights) and this "
                f"sampler yields plain indices, so training drops them: pass weighted=True (batches "
                f"with indices and weights; wrap the dataset in WeightedDataset), or weighted=False "
                f"to train unweighted knowingly",
                UserWarning,
                stacklevel=3,  # this method, the sampler's __init__: the level above builds it
            )

    def previous_pass(self, record: IterationRecord, epoch: int, fed: int) -> None:
        """Warn of the mistakes the iteration before this one shows: it ran to its end and
        the epoch was not set anew (DistributedSampler repeats the epoch's batches then,
        silently), or it handed out batches and the loop gave no feedback.

        Parameters
        ----------
        record : IterationRecord
            The previous iteration's record (and a loaded restart point, if any).
        epoch : int
            The epoch the new iteration is over.
        fed : int
            The previous iteration's ``observe`` calls that carried what the selector needs.
        """
        if not record.passed or record.epoch is None:
            return
        if record.resume is None and record.epoch == epoch:
            self.warn_once(
                "set_epoch",
                f"this pass repeats epoch {epoch}'s batches: call sampler.set_epoch(epoch) before each "
                f"epoch (DistributedSampler's contract; Lightning, accelerate and BatchselTrainer call it)",
            )
        if self.profile.needed_fields and record.history and not fed and self.profile.selector.wants_feedback():
            self.unfed(record.epoch, len(record.history))

    def unfed(self, epoch: int, batches: int) -> None:
        """Warn that ``batches`` batches of ``epoch`` came without the feedback the
        selector chooses from.

        Parameters
        ----------
        epoch : int
            The epoch.
        batches : int
            Batches handed out without feedback.
        """
        needed = self.profile.needed_fields
        self.warn_once(
            "observe",
            f"{self.profile.name} chooses batches from the {' or '.join(sorted(needed))} the loop hands to "
            f"sampler.observe(...), and none came in {batches} batches of epoch {epoch}: its batches do not "
            f"follow the training. Call sampler.observe(batch, {sorted(needed)[0]}=...) after each step",
        )

    def loader(self, loader: Any, weighted: bool, prefetch: int, stated: int) -> tuple[int, str | None]:
        """Warn of what a DataLoader iterating the sampler changes, and compare its
        look-ahead with the one the sampler was told (``workers_ahead``).

        The loader is found from torch's frames and private attributes, which only warn
        or refuse: the batches and a checkpoint's count follow the stated look-ahead, and
        where the loader is seen to differ, :meth:`SelectionBatchSampler.state_dict`
        refuses to count (a loop that never checkpoints is not warned).

        Parameters
        ----------
        loader : DataLoader iterator or None
            The iterator asking for batches (None: a loop of its own, or not found).
        weighted : bool
            Whether the sampler yields ``(index, weight)`` keys.
        prefetch : int
            The sampler's ``prefetch``.
        stated : int
            The sampler's ``workers_ahead``.

        Returns
        -------
        tuple
            ``(seen, mismatch)``: the larger of the stated look-ahead and the loader's
            ``num_workers * prefetch_factor``, and why they differ (None where they agree
            or no loader was seen).
        """
        if loader is None:
            return stated, None
        dataset = getattr(loader, "_dataset", None)
        if weighted and dataset is not None and not getattr(dataset, "accepts_weighted_keys", False):
            self.warn_once(
                "weighted_keys",
                f"weighted=True hands the DataLoader (index, weight) pairs as keys, which "
                f"{type(dataset).__name__} does not take: wrap the dataset, "
                f"DataLoader(WeightedDataset(dataset), batch_sampler=sampler), for (x, y, w) items (a dataset "
                f"that takes such keys itself says so with accepts_weighted_keys = True)",
            )
        workers = int(getattr(loader, "_num_workers", 0) or 0)
        window = workers * int(getattr(loader, "_prefetch_factor", None) or 0)
        mismatch = None
        if window != stated and not saves_sampler_at_dispatch(loader):
            mismatch = (
                f"the DataLoader (num_workers={workers}) fetches {window} batches ahead of the training loop and the "
                f"sampler was told workers_ahead={stated}: build it with SelectionBatchSampler(..., "
                f"workers_ahead={window}) (num_workers x prefetch_factor), or pass your step count, "
                "sampler.state_dict(batches_done=step)"
            )
        if workers and self.profile.uses_feedback and saves_sampler_at_dispatch(loader):
            # it snapshots the sampler when a batch is dispatched, before the losses of the
            # batches in flight are observed: those losses are missing from the checkpoint
            self.warn_once(
                "stateful_workers",
                f"torchdata's StatefulDataLoader(num_workers={workers}) saves the sampler's state when each batch "
                f"is sent to a worker, before the losses of the {window} batches in flight are observed, so "
                f"{self.profile.name} does not resume exactly from its state_dict: checkpoint "
                "sampler.state_dict(batches_done=step) beside a torch DataLoader (exact with workers), or use "
                "num_workers=0, or stream the data (batchsel.StreamBatches resumes exactly with workers)",
            )
        if workers and not hands_out_in_order(loader):
            self.warn_once(
                "in_order",
                f"DataLoader(num_workers={workers}, in_order=False) hands batches to the loop in the order the "
                "workers finish them, so no checkpoint can say which of them were trained: a resume mid-epoch "
                "repeats some and skips others (sampler.state_dict() refuses the epoch's position). Keep "
                "in_order=True (the default) where you resume mid-epoch",
            )
        lag = window + max(prefetch - stated, 0)  # the loader's window and the sampler's own selections ahead
        if lag != prefetch and self.profile.lag_matters:  # offline: plans at the epoch start
            self.warn_once(
                "num_workers",
                f"DataLoader(num_workers={workers}) asks for batches {window} ahead of the training step, so "
                f"{self.profile.name} sees the feedback {lag} batches late, not {prefetch} "
                f"(prefetch={prefetch}, workers_ahead={stated}): its batches are those of num_workers=0 with "
                f"prefetch={lag}. Pass SelectionBatchSampler(prefetch={max(prefetch, window)}, "
                f"workers_ahead={window}) for batches that do not depend on num_workers, or load in the main "
                f"process (num_workers=0) where loading is cheap",
            )
        return max(window, stated), mismatch


__all__ = ["LoopChecks"]
