"""How many batches a sampler yields in an epoch, and over a run.

The selector's own count, less a short last batch that BatchSampler's ``drop_last``
drops; epochs of one length are counted once (a count may cost a plan), epochs that
differ in length (dynamic pruning) each time, as the selector knows them before they
start.
"""

from __future__ import annotations

from batchsel.core.checks import check_int
from batchsel.loop.sampler.profile import SelectorProfile
from batchsel.selectors.sharding import shard_length


class EpochLengths:
    """A rank's batches per epoch for a sampler with BatchSampler's ``drop_last``.

    Parameters
    ----------
    profile : SelectorProfile
        The selector's answers.
    drop_last : bool, default False
        Drop each rank's short last batch (selectors with full batches only).

    Example
    -------
    >>> from batchsel import RandomSelector
    >>> lengths = EpochLengths(SelectorProfile(RandomSelector(10, 4)), drop_last=True)
    >>> lengths.of(0, world_size=1), lengths.total(5, world_size=1)
    (2, 10)
    """

    def __init__(self, profile: SelectorProfile, drop_last: bool = False) -> None:
        self.profile = profile
        self.drop_last = drop_last
        #: (world size, batches) of the epochs of one length, once counted
        self.cached: tuple[int, int] | None = None

    def of(self, epoch: int, world_size: int) -> int:
        """A rank's batches in ``epoch`` among ``world_size`` ranks.

        Parameters
        ----------
        epoch : int
            The epoch.
        world_size : int
            The number of ranks.

        Returns
        -------
        int
            The batches the sampler yields in that epoch.
        """
        if self.profile.epoch_lengths_vary:  # known before the epoch starts (dynamic pruning)
            return self.profile.num_batches(world_size, epoch)
        if self.cached is None or self.cached[0] != world_size:  # the same every epoch; may cost a plan
            total = self.profile.num_batches(world_size, epoch)
            if self.drop_last and total and self.last_batch_short(world_size):
                total -= 1
            self.cached = (world_size, total)
        return self.cached[1]

    def total(self, epochs: int, world_size: int) -> int:
        """A rank's batches over epochs ``0 .. epochs - 1``.

        Parameters
        ----------
        epochs : int
            The run's epochs; where epochs differ in length, the run the selector was
            built for (``ValueError`` otherwise).
        world_size : int
            The number of ranks.

        Returns
        -------
        int
            The optimizer steps of the run.
        """
        epochs = check_int(epochs, "epochs", minimum=1)
        if not self.profile.epoch_lengths_vary:
            return epochs * self.of(0, world_size)
        run = self.profile.epochs  # selectors whose epochs vary know their run
        if epochs != run:
            raise ValueError(
                f"epochs={epochs} disagrees with the run of epochs={run} that "
                f"{self.profile.name} was built for (its schedule depends on it)"
            )
        return sum(self.of(e, world_size) for e in range(epochs))

    def last_batch_short(self, world_size: int) -> bool:
        """Whether each rank's last batch is short: with full batches every rank's shard
        has the same length and is cut into full batches and a last one, as
        DistributedSampler + BatchSampler do.

        Parameters
        ----------
        world_size : int
            The number of ranks.

        Returns
        -------
        bool
            True where the shard's length is not a multiple of the batch size.
        """
        sel = self.profile.selector
        return shard_length(sel.epoch_examples, world_size, sel.drop_last) % sel.batch_size != 0


__all__ = ["EpochLengths"]
