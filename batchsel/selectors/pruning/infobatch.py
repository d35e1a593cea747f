"""InfoBatch (Qin et al., ICLR 2024): dynamic pruning that skips, every epoch, part of the
examples the model has already learnt and up-weights the rest of them, with every epoch's
length known before the run (:class:`InfoBatchSelector`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchsel.core.checks import check_indices, check_int, check_labels, check_number, check_rows
from batchsel.core.journal import WriteJournal, saved_parts, saved_values
from batchsel.core.permutation import permutation
from batchsel.core.sorting import stable_argsort
from batchsel.core.world import World
from batchsel.plans.plan import EpochPlan
from batchsel.selectors.epoch_feedback import EpochFeedbackSelector
from batchsel.selectors.sharding import epoch_rng


def _first_of_each(sizes: np.ndarray, firsts: np.ndarray) -> np.ndarray:
    """Runs of ``sizes[g]`` slots, one after the other, the first ``firsts[g]`` of each True."""
    starts = np.cumsum(sizes) - sizes
    return np.arange(int(sizes.sum())) - np.repeat(starts, sizes) < np.repeat(firsts, sizes)


#: :class:`InfoBatchSelector`'s ``anneal_rule``: InfoBatch's code's annealing, or the paper's
ANNEAL_RULES = ("reference", "paper")


class InfoBatchSelector(EpochFeedbackSelector, weighted_plans=True, feedback_fields=("losses",)):
    """InfoBatch's dynamic pruning, with epoch lengths known before the run.

    Each epoch e (from 0) of a run of ``epochs`` epochs:

    - epoch 0 and the annealing epochs train on every example with weight 1. With the
      default ``anneal_rule="reference"`` (InfoBatch's code, ``infobatch/infobatch.py``)
      epoch e >= 1 prunes while ``e + 1 <= anneal * epochs``: at the default 0.875 a run
      of 2 to 8 epochs prunes every epoch but its first and last, and a run of 10 prunes
      epochs 1-7. ``anneal_rule="paper"`` prunes while ``e < anneal * epochs`` (the
      paper's "the first delta x epochs"; batchsel's earlier default): one epoch more
      wherever ``anneal * epochs`` is not whole, so at 0.875 a run of up to 7 epochs
      never anneals;
    - every other epoch ranks the examples by their last observed loss; the C =
      ``floor(N/2)`` lowest (never observed counts as highest) are the *well-learnt* ones,
      of which ``int(keep * C)`` chosen at random are kept (``keep = 1 - prune_ratio``, at
      least 0.1: InfoBatch's cap, a ratio above 0.9 prunes 0.9) and the rest skipped; the
      kept well-learnt examples get weight ``1 / keep`` (InfoBatch's rescaling), so every
      example's expected weight is 1 up to the rounding down of the count kept (it is
      ``int(keep * C) / (keep * C)``) and the expected gradient that of the full epoch.
    - With ``labels``, the same within every class (the lower half of each class's
      losses), class c skipping ``round(r_c * C_c)`` of its C_c candidates, ``r_c =
      prune_ratio * n_c / n_largest`` (at most 0.9), and its kept ones weighted
      ``C_c / (C_c - P_c)`` (P_c skipped: expected weight exactly 1): on balanced data
      InfoBatch's share in every class, on a long tail the rare classes hardly pruned (to
      the nearest, so a rare class's few candidates are not rounded into pruning).
      Without labels InfoBatch's rule prunes the rare classes' examples once they are
      learnt, and their recall falls
      (``benchmarks/results/quality/budget/pruning_val_longtail.md``): pass labels.

    Without labels the epochs that prune, the number skipped, the weights and so every
    epoch's length are InfoBatch's (its single-process sampler; tested against its rules
    for 1-24 epochs, six deltas and five prune ratios), but for these documented
    differences:

    - InfoBatch draws its candidates below the *mean* loss, a number that changes from
      epoch to epoch (an example never observed counts as loss 3 there); the median used
      here prunes the same number of examples every pruned epoch, so every epoch's length,
      and the run's total (:meth:`total_batches`), are known before the run: a
      ``OneCycleLR`` or cosine schedule sized from it ends where the run ends. Where the
      mean splits the losses in halves (as it does symmetric ones) the candidates are the
      same;
    - after the last pruned epoch InfoBatch resets the weights to 1 only when
      ``anneal * epochs`` is a whole number; otherwise its annealing epochs keep the last
      pruned epoch's ``1 / keep`` on the examples it kept (a bug of its code: the paper
      trains them on the full data unweighted). Here they always have weight 1;
    - which examples are skipped is drawn from batchsel's seed, not NumPy's global one.

    Feed it the per-example, *unweighted* losses of each batch (``sampler.observe(idx,
    losses=...)``); the batches carry the weights: use
    ``SelectionBatchSampler(selector, weighted=True)``, whose batches carry ``indices``
    and ``weights`` arrays, and train on :meth:`weighted_loss` of the losses. The
    examples kept in epoch e are fixed when its plan is first asked for (the sampler asks
    when epoch e's iteration starts), from the losses observed until then, identically on
    every rank (the sampler shares the feedback; it hands the selector an epoch's feedback
    in one call when the next epoch is planned: :attr:`feedback_per_epoch`; across ranks
    every ``sync_every`` steps and after the epoch's last batch).
    :attr:`pruned_share_` records, per epoch planned, the share of the examples skipped.

    Parameters
    ----------
    num_examples, batch_size:
        The data set's size and the batch size.
    epochs:
        The run's number of epochs (the annealing phase depends on it).
    prune_ratio:
        The share of the well-learnt examples skipped per pruned epoch, in [0, 1)
        (InfoBatch's default, 0.5, skips a quarter of the data); above 0.9 it prunes 0.9,
        as InfoBatch does.
    anneal:
        InfoBatch's delta (0.875): pruning stops after about this share of the epochs
        (exactly when: ``anneal_rule``).
    anneal_rule:
        ``"reference"`` (InfoBatch's code: epoch e prunes while ``e + 1 <= anneal *
        epochs``) or ``"paper"`` (while ``e < anneal * epochs``); epoch 0 never prunes.
    rescale:
        Up-weight the kept well-learnt examples (InfoBatch's rescaling); False trains on
        the kept ones with weight 1 (the unweighted ablation).
    labels:
        Class ids, one per example: prune within every class, in proportion to its size
        (None: over all examples, InfoBatch's rule).
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
    >>> [InfoBatchSelector(100, 10, epochs=10, anneal_rule=rule).prunes(8) for rule in ("reference", "paper")]
    [False, True]
    """

    def __init__(
        self,
        num_examples: int,
        batch_size: int,
        *,
        epochs: int,
        prune_ratio: float = 0.5,
        anneal: float = 0.875,
        anneal_rule: str = "reference",
        rescale: bool = True,
        labels: Any = None,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        super().__init__(num_examples, batch_size, seed=seed, drop_last=drop_last)
        #: class ids: the well-learnt half is taken within every class (None: over all examples)
        self.labels = None if labels is None else check_labels(labels, self.num_examples)
        # every example's group: its class (one group of all examples without labels)
        _, group, sizes = np.unique(
            np.zeros(self.num_examples, np.int64) if self.labels is None else self.labels,
            return_inverse=True,
            return_counts=True,
        )
        self.epochs = check_int(epochs, "epochs", minimum=1)
        self.prune_ratio = check_number(prune_ratio, "prune_ratio", 0.0)
        if self.prune_ratio >= 1.0:  # nothing left of the well-learnt half
            raise ValueError(f"prune_ratio must be in [0, 1), got {prune_ratio!r}")
        self.anneal = check_number(anneal, "anneal", 0.0, 1.0)
        if anneal_rule not in ANNEAL_RULES:
            raise ValueError(f"anneal_rule must be one of {ANNEAL_RULES}, got {anneal_rule!r}")
        self.anneal_rule = anneal_rule
        candidates = sizes // 2
        if self.labels is None:
            # InfoBatch's counts (infobatch/infobatch.py, InfoBatch.__init__ and prune): keep =
            # 1 - prune_ratio, at least 0.1 (a share above 0.9 prunes 0.9); int(keep x the
            # candidates) of them kept, each with weight 1 / keep
            keep = min(1.0, max(0.1, 1.0 - self.prune_ratio))
            skipped = candidates - (keep * candidates).astype(np.int64)  # int() rounds down
            up: Any = 1.0 / keep
        else:
            # a class skips prune_ratio x (its size / the largest class's) of its well-learnt
            # half, capped at 0.9 as InfoBatch caps it: InfoBatch's share on balanced data, the
            # rare classes of a long tail hardly pruned. Rounded to the nearest (a rare class's
            # few candidates are not rounded into pruning), the kept ones at C / (C - P): every
            # expected weight exactly 1
            share = np.minimum(self.prune_ratio * sizes / sizes.max(), 0.9)
            skipped = np.rint(share * candidates).astype(np.int64)  # as round()
            up = np.where(skipped > 0, candidates / np.maximum(candidates - skipped, 1), 1.0)
        if not isinstance(rescale, (bool, np.bool_)):
            raise TypeError(f"rescale must be a bool, got {rescale!r}")
        self.rescale = bool(rescale)
        # Sorted by group, then loss, group g holds the positions [start_g, start_g + size_g),
        # its learnt candidates the first candidates_g of them: fixed slots, computed once.
        # A small dtype lets numpy's stable sort by group run as a radix sort.
        self._group = group.reshape(-1).astype(np.int16 if len(sizes) < 2**15 else np.int64)
        self._learnt_slots = _first_of_each(sizes, candidates)
        #: per learnt slot: its group, whether it is among the group's skipped (the first
        #: skipped_g once the group's candidates are shuffled), the weight it keeps otherwise
        self._learnt_group = np.repeat(np.arange(len(sizes), dtype=self._group.dtype), candidates)
        self._skip_slots = _first_of_each(candidates, skipped)
        if not self.rescale:
            up = 1.0
        self._learnt_weight = np.repeat(np.broadcast_to(up, sizes.shape), candidates).astype(np.float32)
        self._skipped_total = int(skipped.sum())
        #: the latest loss observed of every example (inf: never observed)
        self.losses_ = np.full(self.num_examples, np.inf)
        self._journal = WriteJournal()  # states share what observe did not write
        self._journal.filled({"losses": self.losses_})
        #: epoch -> share of the examples skipped, for every epoch planned
        self.pruned_share_: dict[int, float] = {}
        # (epoch, its examples over all ranks in order, their weights): drawn once, when the
        # epoch is first planned; a resume reads them back instead of sorting the losses anew
        self._frozen: tuple[int, np.ndarray, np.ndarray] | None = None

    # -- the schedule -----------------------------------------------------------------
    def prunes(self, epoch: int) -> bool:
        """Whether ``epoch`` skips examples (not the first, nor the annealing epochs).

        InfoBatch's sampler prunes while its counter ``<= num_epochs * delta``; the counter
        is 1 in epoch 0 (the sampler resets once when it is built), so epoch e >= 1 prunes
        while ``e + 1 <= epochs * anneal`` (the same float product). The paper's rule:
        while ``e < epochs * anneal``."""
        epoch = self._check_epoch(epoch)
        if epoch == 0 or self._skipped_total == 0:
            return False
        stop = self.epochs * self.anneal  # InfoBatch's stop_prune
        return epoch + 1 <= stop if self.anneal_rule == "reference" else epoch < stop

    def epoch_size(self, epoch: int) -> int:
        """Examples trained on in ``epoch`` (over all ranks, before padding)."""
        return self.num_examples - (self._skipped_total if self.prunes(epoch) else 0)

    # -- feedback ---------------------------------------------------------------------
    def observe(self, indices: Any, losses: Any = None, logits: Any = None, embeddings: Any = None) -> None:
        """Record the latest (unweighted) per-example ``losses`` of ``indices``."""
        if losses is None:
            return
        idx = check_indices(indices, self.num_examples)
        self.losses_[idx] = check_rows(losses, len(idx), "losses", ndim=1)
        self._journal.wrote(idx)

    # -- the plan ---------------------------------------------------------------------
    def _kept(self, epoch: int, losses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """This epoch's examples (all ranks, shuffled) and their weights."""
        rng = epoch_rng(self.seed, epoch, 1)
        keep = np.arange(self.num_examples, dtype=np.int64)
        weights = np.ones(self.num_examples, dtype=np.float32)
        if self.prunes(epoch):
            # by group, then loss, ties by index (both sorts stable): each group's lowest
            # half sits in the fixed learnt slots
            order = stable_argsort(losses)  # (by radix: numpy's stable order, faster at millions)
            if self.labels is not None:
                order = order[np.argsort(self._group[order], kind="stable")]
            learnt = order[self._learnt_slots]
            # each group skips its share of its learnt examples, drawn at random: shuffled,
            # then (stably) back into group order, the first skipped_g of group g
            shuffled = permutation(rng, len(learnt))
            shuffled = shuffled[np.argsort(self._learnt_group[shuffled], kind="stable")]
            weights[learnt] = self._learnt_weight
            mask = np.ones(self.num_examples, dtype=bool)
            mask[learnt[shuffled[self._skip_slots]]] = False
            keep, weights = keep[mask], weights[mask]
        order = permutation(rng, len(keep))
        return keep[order], weights[order]

    def _plan(self, epoch: int, world: World) -> EpochPlan:
        if self._frozen is None or self._frozen[0] != epoch:
            keep, weights = self._kept(epoch, self.losses_)
            # every rank and every replan of the epoch (a resume's, another world's) cuts
            # the same examples; int32 halves what a state carries
            self._frozen = (epoch, keep.astype(self._index_dtype), weights)
        _, keep, weights = self._frozen
        self.pruned_share_[epoch] = 1.0 - len(keep) / self.num_examples
        return self._epoch_plan(keep, weights, epoch, world, "infobatch")

    @property
    def _index_dtype(self) -> type:
        return np.int32 if self.num_examples < 2**31 else np.int64

    # -- resume -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The losses observed, and the latest planned epoch's examples and weights."""
        kept: np.ndarray
        weights: np.ndarray
        if self._frozen is None:
            epoch, kept, weights = -1, np.empty(0, self._index_dtype), np.empty(0, np.float32)
        else:
            epoch, kept, weights = self._frozen
        # the losses as a shared base and the batches observed since; the epoch's examples
        # are never written (a new epoch replaces them): a state every step copies neither
        losses = self._journal.state({"losses": self.losses_})["losses"]
        fields = {"losses": losses, "frozen_epoch": int(epoch), "frozen_kept": kept, "frozen_weights": weights}
        return self._portable_state(fields, copy=False)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # 0.1.0's states hold the losses the epoch was drawn from instead of its examples
        drawn_from_losses = isinstance(state, dict) and "frozen_losses" in state
        frozen_keys = {"frozen_losses"} if drawn_from_losses else {"frozen_kept", "frozen_weights"}
        state = self._loaded_state(state, {"losses", "frozen_epoch", *frozen_keys})
        losses = saved_parts(state["losses"], np.float64)[0]
        if losses.shape != (self.num_examples,):
            raise ValueError(f"state holds {losses.shape} losses, expected ({self.num_examples},)")
        epoch = int(state["frozen_epoch"])
        frozen: tuple[int, np.ndarray, np.ndarray] | None = None
        if epoch >= 0 and drawn_from_losses:
            drawn = np.asarray(state["frozen_losses"], dtype=np.float64)
            if drawn.shape != (self.num_examples,):
                raise ValueError(f"state holds {drawn.shape} losses of its epoch, expected ({self.num_examples},)")
            kept, weights = self._kept(epoch, np.ascontiguousarray(drawn))
            frozen = (epoch, kept.astype(self._index_dtype), weights)
        elif epoch >= 0:
            frozen = (epoch, *self._checked_kept(epoch, state["frozen_kept"], state["frozen_weights"]))
        self.losses_ = saved_values(state["losses"], self.losses_, np.float64)
        self._journal.rewrote_all()
        self._frozen = frozen
        self._restore_pruned_shares(state)

    def _checked_kept(self, epoch: int, kept: Any, weights: Any) -> tuple[np.ndarray, np.ndarray]:
        """A state's examples of ``epoch`` and their weights, as this selector's arrays,
        once checked: as many as the epoch trains, each example at most once."""
        kept = np.asarray(kept)
        weights = np.asarray(weights, dtype=np.float32)
        if kept.ndim != 1 or not np.issubdtype(kept.dtype, np.integer) or weights.shape != kept.shape:
            raise ValueError(
                f"state holds the epoch's examples as {kept.dtype} {kept.shape} with weights {weights.shape}: "
                f"expected as many int examples as weights"
            )
        if len(kept) != self.epoch_size(epoch):
            raise ValueError(
                f"state holds {len(kept)} examples of epoch {epoch}, which trains {self.epoch_size(epoch)}"
            )
        seen = np.zeros(self.num_examples, np.bool_)
        if len(kept) and (int(kept.min()) < 0 or int(kept.max()) >= self.num_examples):
            raise ValueError(f"state holds examples of epoch {epoch} outside 0..{self.num_examples - 1}")
        seen[kept] = True
        if int(np.count_nonzero(seen)) != len(kept):
            raise ValueError(f"state holds examples of epoch {epoch} more than once")
        return np.array(kept, dtype=self._index_dtype), np.array(weights)  # copies: the caller keeps the state's


__all__ = ["InfoBatchSelector", "ANNEAL_RULES"]
