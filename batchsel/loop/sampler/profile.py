"""What the training loop needs to know about a selector, asked in one place.

The sampler and the framework integrations (Hugging Face, Lightning) branch on what kind
of selector they drive: does it draw batches as training goes, which feedback does it
read, do its plans carry weights, do its epochs differ in length. :class:`SelectorProfile`
reads the selector's capabilities (``selector.capabilities()``: ``online``,
``uses_feedback``, ``feedback_fields``, ``weighted_plans``, ...) once and answers those
questions, so no caller combines the flags itself.
"""

from __future__ import annotations

import itertools
from typing import Iterator

import numpy as np

from batchsel.core.checks import check_seed
from batchsel.selectors.capabilities import SelectorCapabilities
from batchsel.selectors.selector import Selector


class SelectorProfile:
    """The answers the training loop needs about ``selector``.

    The selector's capabilities are read once, when the profile is made (a sampler reads
    them when it is built); its answers follow from them.

    Parameters
    ----------
    selector : Selector
        The selector a sampler or trainer drives (``TypeError`` for anything else).

    Attributes
    ----------
    capabilities : SelectorCapabilities
        ``selector.capabilities()``, as read when the profile was made.
    uses_feedback : bool
        Whether the loop's feedback changes the selector's batches (it is all-gathered
        across ranks only then).
    feedback_fields : frozenset of str
        The kinds of feedback it reads (``losses``, ``logits``, ``embeddings``); the rest
        is dropped by ``observe``.
    needed_fields : frozenset of str
        The feedback only ``observe`` brings (losses, logits: embeddings it was built
        with): a pass without any of it is a forgotten ``observe``. Empty for a selector
        that uses no feedback.

    Example
    -------
    >>> from batchsel import LossRankSelector, RandomSelector
    >>> loss_rank = SelectorProfile(LossRankSelector(100, 10))
    >>> loss_rank.lag_matters, sorted(loss_rank.needed_fields)
    (True, ['losses'])
    >>> random = SelectorProfile(RandomSelector(100, 10))
    >>> random.lag_matters, random.full_batches
    (False, True)
    """

    def __init__(self, selector: Selector) -> None:
        if not isinstance(selector, Selector):
            raise TypeError(f"selector must be a batchsel Selector, got {type(selector).__name__}")
        self.selector = selector
        #: ``selector.capabilities()``, read once
        self.capabilities: SelectorCapabilities = selector.capabilities()
        capabilities = self.capabilities
        self.uses_feedback = capabilities.uses_feedback
        self.feedback_fields: frozenset[str] = frozenset(capabilities.feedback_fields)
        self.needed_fields: frozenset[str] = (
            self.feedback_fields - {"embeddings"} if self.uses_feedback else frozenset()
        )

    @property
    def name(self) -> str:
        """The selector's class name, as messages name it."""
        return type(self.selector).__name__

    @property
    def online(self) -> bool:
        """Whether it draws its batches as training goes (no plan made in advance)."""
        return self.capabilities.online

    @property
    def records_batches(self) -> bool:
        """Whether the batches handed out are kept: an online selector's are replayed on
        resume, and feedback given by batch number needs the indices of the batch."""
        return self.online or self.uses_feedback

    @property
    def lag_matters(self) -> bool:
        """Whether the feedback lag (``prefetch``, a DataLoader's workers) changes the
        batches: an online selector that reads feedback. Offline plans are made at the
        epoch's start."""
        return self.uses_feedback and self.online

    @property
    def weighted_plans(self) -> bool:
        """Whether its plans carry weights (InfoBatch, coresets)."""
        return self.capabilities.weighted_plans

    @property
    def full_batches(self) -> bool:
        """Whether its batches are full but the last (BatchSampler's ``drop_last`` applies)."""
        return self.capabilities.full_batches

    @property
    def variable_batch_size(self) -> bool:
        """Whether its batches' sizes follow a cost budget (``batch_size``: the most a batch holds)."""
        return self.capabilities.variable_batch_size

    @property
    def epoch_lengths_vary(self) -> bool:
        """Whether its epochs differ in length (dynamic pruning): known before each epoch."""
        return self.capabilities.epoch_lengths_vary

    @property
    def epochs(self) -> int:
        """The run of epochs a selector whose epochs vary was built for."""
        return self.selector.epochs  # type: ignore[attr-defined]

    @property
    def supports_start(self) -> bool:
        """Whether ``iter_batches`` can start mid-epoch (else the first batches are skipped)."""
        return self.capabilities.supports_start

    @property
    def default_prefetch(self) -> int:
        """The batches selected ahead when the sampler is not told (``prefetch=None``)."""
        return self.capabilities.default_prefetch

    @property
    def feedback_per_epoch(self) -> bool:
        """Whether it reads its feedback only when it plans an epoch (pruning)."""
        return self.capabilities.feedback_per_epoch

    def check_seed(self, seed: int | None) -> None:
        """Refuse a seed other than the selector's (``ValueError``): DistributedSampler's
        ``seed`` lives in the selector, which may have used it already (coresets, GreedMax
        shards), so it is not overridden.

        Parameters
        ----------
        seed : int or None
            The seed a sampler was given; None: nothing to check.
        """
        if seed is not None and check_seed(seed) != self.selector.seed:
            raise ValueError(
                f"seed={seed} but the selector was built with seed={self.selector.seed}; build it with seed={seed}"
            )

    def check_options(self, weighted: bool, drop_last: bool) -> None:
        """Refuse a sampler's options this selector cannot honour (``ValueError``).

        Parameters
        ----------
        weighted : bool
            Yield the plan's weights: needs an offline selector.
        drop_last : bool
            BatchSampler's: drop a short last batch: needs batches that are full but the last.
        """
        if weighted and self.online:
            raise ValueError(f"weighted=True needs an offline selector (a plan with weights); {self.name} is online")
        if drop_last and not self.full_batches:
            # other selectors' batches differ in size by design (balanced sizes, graph
            # blocks): none is "the short last one", and dropping one could differ by rank
            raise ValueError(
                f"drop_last=True (BatchSampler's: drop a short last batch) needs a selector whose "
                f"batches are full but the last (full_batches: RandomSelector, CoresetSelector); "
                f"got {self.name}"
            )

    def num_batches(self, world_size: int, epoch: int) -> int:
        """A rank's batches in ``epoch`` (the same every epoch unless :attr:`epoch_lengths_vary`).

        Parameters
        ----------
        world_size : int
            The number of ranks.
        epoch : int
            The epoch; read only where epochs differ in length.

        Returns
        -------
        int
            The selector's ``num_batches``, before a sampler's ``drop_last``.
        """
        if self.epoch_lengths_vary:
            return self.selector.num_batches(world_size, epoch=epoch)  # type: ignore[call-arg]
        return self.selector.num_batches(world_size)

    def batches(
        self, epoch: int, rank: int, world_size: int, start: int = 0, weighted: bool = False
    ) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        """The rank's batches of ``epoch`` from batch number ``start`` on, drawn when asked.

        Parameters
        ----------
        epoch : int
            The epoch.
        rank : int
            This rank.
        world_size : int
            The number of ranks.
        start : int, default 0
            The first batch's number (a resumed epoch); a selector whose ``iter_batches``
            cannot start there skips the batches before it, which reproduces them.
        weighted : bool, default False
            Take the batches from the epoch's plan with its weights (1 where it has none).

        Returns
        -------
        iterator of (numpy.ndarray, numpy.ndarray or None)
            ``(indices, weights)`` pairs, int64 indices; weights None unless ``weighted``.
        """
        selector = self.selector
        if weighted:
            plan = selector.plan(epoch, world_size)
            batches, weights = plan.batches(rank), plan.weights(rank)
            for t in range(start, len(batches)):
                yield batches[t], (np.ones(len(batches[t]), np.float32) if weights is None else weights[t])
            return
        if self.supports_start:
            it = selector.iter_batches(epoch, rank, world_size, start=start)
        else:  # an offline selector without ``start``: skipping reproduces the same batches
            it = itertools.islice(selector.iter_batches(epoch, rank, world_size), start, None)
        for b in it:
            yield np.asarray(b, dtype=np.int64), None

    def __repr__(self) -> str:
        return f"SelectorProfile({self.name})"


__all__ = ["SelectorProfile"]
