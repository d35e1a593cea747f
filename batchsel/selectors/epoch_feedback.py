"""The per-epoch-feedback kind of selector: :class:`EpochFeedbackSelector` plans each epoch
of a run of known length at once, from the feedback of the epochs before (dynamic and
score-based pruning); every epoch's length is known before the run starts."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchsel.core.checks import check_int
from batchsel.core.state import from_portable, to_portable
from batchsel.core.world import World
from batchsel.plans.plan import EpochPlan
from batchsel.selectors.offline import OfflineSelector
from batchsel.selectors.sharding import even_split, shard_length, split_batches


class EpochFeedbackSelector(
    OfflineSelector,
    uses_feedback=True,
    epoch_lengths_vary=True,
    feedback_per_epoch=True,  # read when the next epoch is planned
):
    """A run of ``epochs`` epochs, each planned at once when it starts from the feedback
    observed until then, whose lengths differ but are known before the run: subclasses
    give :meth:`epoch_size` (the examples, over all ranks, of each epoch) and
    ``_plan(epoch, world)``.

    The sampler holds an epoch's feedback back until the next epoch is planned and hands
    it over in one call (``feedback_per_epoch``); ``num_batches(world_size, epoch)`` and
    :meth:`total_batches` size a learning-rate schedule (``epoch_lengths_vary``).

    Parameters
    ----------
    num_examples, batch_size, seed, drop_last
        As :class:`~batchsel.selectors.selector.Selector`.

    See Also
    --------
    batchsel.InfoBatchSelector, batchsel.ScorePruningSelector : the two of this kind.

    Example
    -------
    >>> class Halves(EpochFeedbackSelector):
    ...     epochs = 2
    ...     def epoch_size(self, epoch):
    ...         return self.num_examples // (1 + self._check_epoch(epoch))
    >>> [Halves(8, 2).num_batches(epoch=e) for e in range(2)], Halves(8, 2).total_batches()
    ([4, 2], 6)
    """

    epochs: int
    #: epoch -> share of the examples skipped, for every epoch planned (set by subclasses)
    pruned_share_: dict[int, float]

    def epoch_size(self, epoch: int) -> int:
        """Examples trained on in ``epoch`` (over all ranks, before padding)."""
        raise NotImplementedError

    def _check_epoch(self, epoch: int) -> int:
        epoch = check_int(epoch, "epoch", minimum=0)
        if epoch >= self.epochs:
            raise ValueError(
                f"epoch {epoch} is past this run's epochs={self.epochs} (epochs 0 to {self.epochs - 1}): "
                f"build the selector with the run's number of epochs"
            )
        return epoch

    def num_batches(self, world_size: int = 1, epoch: int = 0) -> int:
        """Batches per rank in ``epoch`` (the same on every rank)."""
        return self._num_batches(self.world(world_size), epoch)

    def _num_batches(self, world: World, epoch: int = 0) -> int:
        size = self.epoch_size(epoch)
        if world.size > size:  # the epoch's own limit: one example per rank
            raise ValueError(f"world_size must be <= the examples of epoch {epoch} ({size}), got {world.size}")
        return -(-shard_length(size, world.size, self.drop_last) // self.batch_size)

    def total_batches(self, world_size: int = 1, epochs: int | None = None) -> int:
        """Batches per rank over the whole run: the ``total_steps`` of its learning-rate
        schedule. ``epochs``, when given, must be the selector's."""
        if epochs is not None and check_int(epochs, "epochs", minimum=1) != self.epochs:
            raise ValueError(
                f"epochs={epochs} disagrees with this selector's run of epochs={self.epochs}: "
                f"its pruning schedule is for {self.epochs} epochs"
            )
        world = self.world(world_size)
        return sum(self._num_batches(world, e) for e in range(self.epochs))

    def _epoch_plan(
        self, keep: np.ndarray, weights: np.ndarray | None, epoch: int, world: World, method: str
    ) -> EpochPlan:
        """The plan of an epoch that trains on ``keep`` (all ranks, in order; with
        per-example ``weights`` or None), split as DistributedSampler splits and cut into
        batches."""

        def cut(values: np.ndarray) -> list[list[np.ndarray]]:  # views, no copies: once per epoch
            return [split_batches(p, self.batch_size) for p in even_split(values, world.size, self.drop_last)]

        batches = cut(keep)
        rank_weights = None if weights is None else cut(weights)
        return EpochPlan(
            batches, rank_weights, num_examples=self.num_examples, epoch=epoch, seed=self.seed, method=method
        )

    def _portable_state(self, fields: dict[str, Any], copy: bool = True) -> dict[str, Any]:
        """The :meth:`state_dict` of a pruning selector: its class and number of examples,
        ``fields``, then :attr:`pruned_share_`, made portable
        (:func:`batchsel.core.state.to_portable`; ``copy=False``: ``fields``' arrays are
        never written after, the state may share them)."""
        return to_portable(
            {
                "class": type(self).__name__,
                "num_examples": self.num_examples,
                **fields,
                "pruned_epochs": list(self.pruned_share_),
                "pruned_shares": list(self.pruned_share_.values()),
            },
            copy=copy,
        )

    def _loaded_state(self, state: Any, fields: set[str]) -> dict[str, Any]:
        """A state made by :meth:`_portable_state` with these ``fields``, read back
        (:func:`batchsel.core.state.from_portable`) and checked (:meth:`_check_state`)."""
        state = from_portable(state)
        self._check_state(state, {"class", "num_examples", *fields, "pruned_epochs", "pruned_shares"})
        return state

    def _restore_pruned_shares(self, state: dict[str, Any]) -> None:
        """:attr:`pruned_share_` from a state that :meth:`_loaded_state` read back."""
        self.pruned_share_ = {int(e): float(s) for e, s in zip(state["pruned_epochs"], state["pruned_shares"])}

    def _check_state(self, state: Any, expected: set[str]) -> None:
        """Refuse a state that is not this class's, of this many examples, with these keys
        (tensors or arrays: see :func:`batchsel.core.state.to_portable`)."""
        if not isinstance(state, dict) or set(state) != expected:
            got = set(state) if isinstance(state, dict) else set()
            raise ValueError(
                f"not a {type(self).__name__} state: missing keys {sorted(expected - got)}, "
                f"unexpected keys {sorted(got - expected)}"
            )
        if state["class"] != type(self).__name__ or int(state["num_examples"]) != self.num_examples:
            raise ValueError(
                f"state is from a {state['class']} of {state['num_examples']} examples, not a "
                f"{type(self).__name__} of {self.num_examples}"
            )


__all__ = ["EpochFeedbackSelector"]
