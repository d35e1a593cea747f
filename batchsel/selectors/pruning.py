"""Dynamic data pruning (InfoBatch; Qin et al., ICLR 2024): each epoch skips part of the
examples the model has already learnt and up-weights the rest of them, so the expected
gradient is unchanged and an epoch costs fewer steps."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._checks import check_indices, check_int, check_number, check_rows
from ..plan import EpochPlan
from .base import Selector, epoch_rng, even_split, shard_length, split_batches


class InfoBatchSelector(Selector):
    """InfoBatch's dynamic pruning, with epoch lengths known before the run.

    Each epoch e of a run of ``epochs`` epochs:

    - epoch 0 and the last epochs (from ``ceil(anneal * epochs)`` on) train on every
      example with weight 1 (InfoBatch's annealing: no pruning while the model settles);
    - every other epoch ranks the examples by their last observed loss; the ``floor(N/2)``
      lowest (never observed counts as highest) are the *well-learnt* ones, of which
      ``round(prune_ratio * floor(N/2))`` chosen at random are skipped, and the kept
      well-learnt examples get weight ``C / (C - P)`` (C candidates, P skipped), so every
      example's expected weight is 1 and the expected gradient that of the full epoch.

    InfoBatch draws its candidates below the *mean* loss, a number that changes from epoch
    to epoch; the median used here prunes the same number of examples every pruned epoch,
    so every epoch's length, and the run's total (:meth:`total_batches`), are known before
    the run: a ``OneCycleLR`` or cosine schedule sized from it ends where the run ends.

    Feed it the per-example, *unweighted* losses of each batch (``sampler.observe(idx,
    losses=...)``); the batches carry the weights: use
    ``SelectionBatchSampler(selector, weighted=True)`` and weight each example's loss. The
    examples kept in epoch e are fixed when its plan is first asked for (the sampler asks
    when epoch e's iteration starts), from the losses observed until then, identically on
    every rank (the sampler shares the feedback). :attr:`pruned_share_` records, per epoch
    planned, the share of the examples skipped.

    Parameters
    ----------
    num_examples, batch_size:
        The data set's size and the batch size.
    epochs:
        The run's number of epochs (the annealing phase depends on it).
    prune_ratio:
        The share of the well-learnt examples skipped per pruned epoch, in [0, 1)
        (InfoBatch's default, 0.5, skips a quarter of the data).
    anneal:
        The share of the epochs after which pruning stops (InfoBatch's delta, 0.875).
    seed, drop_last:
        As for every selector (``drop_last``: DistributedSampler's, pad or drop).

    Example
    -------
    >>> sel = InfoBatchSelector(100, batch_size=10, epochs=8, seed=0)
    >>> [sel.num_batches(epoch=e) for e in range(8)], sel.total_batches(epochs=8)
    ([10, 8, 8, 8, 8, 8, 8, 10], 68)
    >>> sel.observe(np.arange(100), losses=np.linspace(0, 1, 100))
    >>> plan = sel.plan(epoch=1)
    >>> len(plan.indices()), sel.pruned_share_[1], sorted(set(np.concatenate(plan.weights(0)).tolist()))
    (75, 0.25, [1.0, 2.0])
    """

    epoch_lengths_vary = True
    weighted_plans = True
    feedback_fields = ("losses",)

    def __init__(self, num_examples: int, batch_size: int, *, epochs: int, prune_ratio: float = 0.5,
                 anneal: float = 0.875, seed: int = 0, drop_last: bool = False) -> None:
        super().__init__(num_examples, batch_size, seed=seed, drop_last=drop_last)
        self.epochs = check_int(epochs, "epochs", minimum=1)
        self.prune_ratio = check_number(prune_ratio, "prune_ratio", 0.0)
        if self.prune_ratio >= 1.0:  # nothing left of the well-learnt half
            raise ValueError(f"prune_ratio must be in [0, 1), got {prune_ratio!r}")
        self.anneal = check_number(anneal, "anneal", 0.0, 1.0)
        #: the latest loss observed of every example (inf: never observed)
        self.losses_ = np.full(self.num_examples, np.inf)
        #: epoch -> share of the examples skipped, for every epoch planned
        self.pruned_share_: dict[int, float] = {}
        self._frozen: tuple[int, np.ndarray] | None = None  # (epoch, losses its plan was drawn from)

    # -- the schedule -----------------------------------------------------------------
    def _check_epoch(self, epoch: int) -> int:
        epoch = check_int(epoch, "epoch", minimum=0)
        if epoch >= self.epochs:
            raise ValueError(f"epoch {epoch} is past this run's epochs={self.epochs} (epochs 0 to {self.epochs - 1}): "
                             f"build the selector with the run's number of epochs")
        return epoch

    def prunes(self, epoch: int) -> bool:
        """Whether ``epoch`` skips examples (not the first, nor the annealing epochs)."""
        epoch = self._check_epoch(epoch)
        return 0 < epoch < math.ceil(self.anneal * self.epochs) and self._skipped() > 0

    def _candidates(self) -> int:
        return self.num_examples // 2

    def _skipped(self) -> int:
        return round(self.prune_ratio * self._candidates())

    def epoch_size(self, epoch: int) -> int:
        """Examples trained on in ``epoch`` (over all ranks, before padding)."""
        return self.num_examples - (self._skipped() if self.prunes(epoch) else 0)

    def num_batches(self, world_size: int = 1, epoch: int = 0) -> int:
        """Batches per rank in ``epoch`` (the same on every rank)."""
        self.check_world(world_size)
        size = self.epoch_size(epoch)
        if world_size > size:
            raise ValueError(f"world_size must be <= the examples of epoch {epoch} ({size}), got {world_size}")
        return -(-shard_length(size, world_size, self.drop_last) // self.batch_size)

    def total_batches(self, world_size: int = 1, epochs: int | None = None) -> int:
        """Batches per rank over the whole run: the ``total_steps`` of its learning-rate
        schedule. ``epochs``, when given, must be the selector's."""
        if epochs is not None and check_int(epochs, "epochs", minimum=1) != self.epochs:
            raise ValueError(f"epochs={epochs} disagrees with this selector's run of epochs={self.epochs}: "
                             f"its pruning schedule (annealing from epoch {math.ceil(self.anneal * self.epochs)}) "
                             f"is for {self.epochs} epochs")
        return sum(self.num_batches(world_size, e) for e in range(self.epochs))

    # -- feedback ---------------------------------------------------------------------
    def observe(self, indices: Any, losses: Any = None, logits: Any = None, embeddings: Any = None) -> None:
        """Record the latest (unweighted) per-example ``losses`` of ``indices``."""
        if losses is None:
            return
        idx = check_indices(indices, self.num_examples)
        self.losses_[idx] = check_rows(losses, len(idx), "losses", ndim=1)

    # -- the plan ---------------------------------------------------------------------
    def _kept(self, epoch: int, losses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """This epoch's examples (all ranks, shuffled) and their weights."""
        rng = epoch_rng(self.seed, epoch, 1)
        keep = np.arange(self.num_examples, dtype=np.int64)
        weights = np.ones(self.num_examples, dtype=np.float32)
        if self.prunes(epoch):
            candidates, skipped = self._candidates(), self._skipped()
            # the lowest losses, ties by index (a stable sort: the same on every platform)
            learnt = np.argsort(losses, kind="stable")[:candidates]
            dropped = rng.choice(learnt, size=skipped, replace=False)
            weights[learnt] = candidates / (candidates - skipped)
            mask = np.ones(self.num_examples, dtype=bool)
            mask[dropped] = False
            keep, weights = keep[mask], weights[mask]
        order = rng.permutation(len(keep))
        return keep[order], weights[order]

    def plan(self, epoch: int = 0, world_size: int = 1) -> EpochPlan:
        epoch = self._check_epoch(epoch)
        self.check_world(world_size)
        if self._frozen is None or self._frozen[0] != epoch:
            self._frozen = (epoch, self.losses_.copy())
        keep, weights = self._kept(epoch, self._frozen[1])
        self.pruned_share_[epoch] = 1.0 - len(keep) / self.num_examples
        positions = even_split(np.arange(len(keep), dtype=np.int64), world_size, self.drop_last)
        batches = [[keep[b] for b in split_batches(p, self.batch_size)] for p in positions]
        rank_weights = [[weights[b] for b in split_batches(p, self.batch_size)] for p in positions]
        return EpochPlan(batches, rank_weights, num_examples=self.num_examples, epoch=epoch, seed=self.seed,
                         method="infobatch")

    # -- resume -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The losses observed and the ones the latest planned epoch was drawn from."""
        epoch, frozen = self._frozen if self._frozen is not None else (-1, np.empty(0))
        return {"class": type(self).__name__, "num_examples": self.num_examples, "losses": self.losses_.copy(),
                "frozen_epoch": int(epoch), "frozen_losses": frozen.copy(),
                "pruned_epochs": list(self.pruned_share_), "pruned_shares": list(self.pruned_share_.values())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        expected = {"class", "num_examples", "losses", "frozen_epoch", "frozen_losses", "pruned_epochs",
                    "pruned_shares"}
        if not isinstance(state, dict) or set(state) != expected:
            got = set(state) if isinstance(state, dict) else set()
            raise ValueError(f"not an {type(self).__name__} state: missing keys {sorted(expected - got)}, "
                             f"unexpected keys {sorted(got - expected)}")
        if state["class"] != type(self).__name__ or int(state["num_examples"]) != self.num_examples:
            raise ValueError(f"state is from a {state['class']} of {state['num_examples']} examples, not an "
                             f"{type(self).__name__} of {self.num_examples}")
        losses = np.asarray(state["losses"], dtype=np.float64)
        if losses.shape != (self.num_examples,):
            raise ValueError(f"state holds {losses.shape} losses, expected ({self.num_examples},)")
        self.losses_ = losses.copy()
        epoch = int(state["frozen_epoch"])
        self._frozen = None if epoch < 0 else (epoch, np.asarray(state["frozen_losses"], dtype=np.float64).copy())
        self.pruned_share_ = {int(e): float(s) for e, s in zip(state["pruned_epochs"], state["pruned_shares"])}


__all__ = ["InfoBatchSelector"]
