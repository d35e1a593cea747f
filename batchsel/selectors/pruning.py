"""Data pruning with epoch lengths known before the run: dynamic (InfoBatch; Qin et al.,
ICLR 2024: each epoch skips part of the examples the model has already learnt) and
score-based (EL2N or forgetting scores from the first epochs, then coverage-centric
selection of the examples kept; Paul et al. 2021, Toneva et al. 2019, Zheng et al. 2023)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from batchsel.core.checks import (
    check_indices,
    check_int,
    check_labels,
    check_number,
    check_rows,
    check_seed,
    tensor_to_numpy,
)
from batchsel.core.state import from_portable, to_portable
from batchsel.plans.plan import EpochPlan
from batchsel.selectors.base import Selector, epoch_rng, even_split, shard_length, split_batches
from batchsel.selectors.scores import check_class_ids, gradnorm_scores


def _epoch_plan(
    keep: np.ndarray, weights: np.ndarray | None, selector: Selector, epoch: int, world_size: int, method: str
) -> EpochPlan:
    """The plan of an epoch that trains on ``keep`` (all ranks, in order; with per-example
    ``weights`` or None), split as DistributedSampler splits and cut into batches."""

    def cut(values: np.ndarray) -> list[list[np.ndarray]]:  # views, no copies: once per epoch
        return [split_batches(p, selector.batch_size) for p in even_split(values, world_size, selector.drop_last)]

    batches = cut(keep)
    rank_weights = None if weights is None else cut(weights)
    return EpochPlan(
        batches, rank_weights, num_examples=selector.num_examples, epoch=epoch, seed=selector.seed, method=method
    )


def _first_of_each(sizes: np.ndarray, firsts: np.ndarray) -> np.ndarray:
    """Runs of ``sizes[g]`` slots, one after the other, the first ``firsts[g]`` of each True."""
    starts = np.cumsum(sizes) - sizes
    return np.arange(int(sizes.sum())) - np.repeat(starts, sizes) < np.repeat(firsts, sizes)


class _PrunedRun(Selector):
    """A run of ``epochs`` epochs whose lengths differ but are known before it starts:
    subclasses give :meth:`epoch_size`, the examples (over all ranks) of each epoch."""

    epoch_lengths_vary = True
    feedback_per_epoch = True  # read when the next epoch is planned
    epochs: int

    def epoch_size(self, epoch: int) -> int:
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
        self.check_world(world_size)
        size = self.epoch_size(epoch)
        if world_size > size:
            raise ValueError(f"world_size must be <= the examples of epoch {epoch} ({size}), got {world_size}")
        return -(-shard_length(size, world_size, self.drop_last) // self.batch_size)

    def total_batches(self, world_size: int = 1, epochs: int | None = None) -> int:
        """Batches per rank over the whole run: the ``total_steps`` of its learning-rate
        schedule. ``epochs``, when given, must be the selector's."""
        if epochs is not None and check_int(epochs, "epochs", minimum=1) != self.epochs:
            raise ValueError(
                f"epochs={epochs} disagrees with this selector's run of epochs={self.epochs}: "
                f"its pruning schedule is for {self.epochs} epochs"
            )
        return sum(self.num_batches(world_size, e) for e in range(self.epochs))

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


#: :class:`InfoBatchSelector`'s ``anneal_rule``: InfoBatch's code's annealing, or the paper's
ANNEAL_RULES = ("reference", "paper")


class InfoBatchSelector(_PrunedRun):
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

    weighted_plans = True
    feedback_fields = ("losses",)

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
        #: epoch -> share of the examples skipped, for every epoch planned
        self.pruned_share_: dict[int, float] = {}
        self._frozen: tuple[int, np.ndarray] | None = None  # (epoch, losses its plan was drawn from)

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

    # -- the plan ---------------------------------------------------------------------
    def _kept(self, epoch: int, losses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """This epoch's examples (all ranks, shuffled) and their weights."""
        rng = epoch_rng(self.seed, epoch, 1)
        keep = np.arange(self.num_examples, dtype=np.int64)
        weights = np.ones(self.num_examples, dtype=np.float32)
        if self.prunes(epoch):
            # by group, then loss, ties by index (both sorts stable): each group's lowest
            # half sits in the fixed learnt slots
            order = np.argsort(losses, kind="stable")
            if self.labels is not None:
                order = order[np.argsort(self._group[order], kind="stable")]
            learnt = order[self._learnt_slots]
            # each group skips its share of its learnt examples, drawn at random: shuffled,
            # then (stably) back into group order, the first skipped_g of group g
            shuffled = rng.permutation(len(learnt))
            shuffled = shuffled[np.argsort(self._learnt_group[shuffled], kind="stable")]
            weights[learnt] = self._learnt_weight
            mask = np.ones(self.num_examples, dtype=bool)
            mask[learnt[shuffled[self._skip_slots]]] = False
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
        return _epoch_plan(keep, weights, self, epoch, world_size, "infobatch")

    # -- resume -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The losses observed and the ones the latest planned epoch was drawn from."""
        epoch, frozen = self._frozen if self._frozen is not None else (-1, np.empty(0))
        return to_portable(
            {
                "class": type(self).__name__,
                "num_examples": self.num_examples,
                "losses": self.losses_,
                "frozen_epoch": int(epoch),
                "frozen_losses": frozen,
                "pruned_epochs": list(self.pruned_share_),
                "pruned_shares": list(self.pruned_share_.values()),
            }
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = from_portable(state)
        self._check_state(
            state,
            {"class", "num_examples", "losses", "frozen_epoch", "frozen_losses", "pruned_epochs", "pruned_shares"},
        )
        losses = np.asarray(state["losses"], dtype=np.float64)
        if losses.shape != (self.num_examples,):
            raise ValueError(f"state holds {losses.shape} losses, expected ({self.num_examples},)")
        self.losses_ = losses.copy()
        epoch = int(state["frozen_epoch"])
        self._frozen = None if epoch < 0 else (epoch, np.asarray(state["frozen_losses"], dtype=np.float64).copy())
        self.pruned_share_ = {int(e): float(s) for e, s in zip(state["pruned_epochs"], state["pruned_shares"])}


SCORES = ("el2n", "forgetting")


def _strata(values: np.ndarray, strata: int) -> np.ndarray:
    """The stratum of each of ``values`` (finite): ``strata`` bins of equal width
    from ``min(0, values)`` to ``max(0, values)``, the top edge in the last bin."""
    low, high = values.min(initial=0.0), values.max(initial=0.0)
    with np.errstate(over="ignore"):
        width = (high - low) / strata
    scale = 1.0
    if not np.isfinite(width):
        # high - low overflows float64 (scores near +-1e308): the same bins from the halves,
        # whose differences are exact halves and stay finite
        scale = 0.5
        width = (high * scale - low * scale) / strata
    if not width > 0:  # all tie (or a range too narrow to cut): one stratum
        return np.zeros(len(values), dtype=np.int64)
    return np.minimum(((values * scale - low * scale) / width).astype(np.int64), strata - 1)


def coverage_centric_selection(
    scores: Any, count: int, *, strata: int = 50, hard_cut: float = 0.0, seed: int = 0
) -> np.ndarray:
    """Coverage-centric selection (CCS; Zheng et al., ICLR 2023): ``count`` examples chosen
    over the whole range of difficulty ``scores`` (higher: harder) rather than only the
    hardest, which collapse at high pruning rates.

    The ``hard_cut`` share of the hardest examples is dropped first (at high pruning rates
    they are mostly mislabelled or ambiguous); the rest are cut into ``strata`` bins of equal
    score width, and the budget is spread evenly: the least populated bin takes all of its
    examples or its even share of what is left, whichever is smaller, then the next, each
    bin's examples drawn at random. Returns the chosen indices, sorted. It costs a sort of
    the scores and a pass over them, whatever ``strata``; any finite scores are binned (up
    to +-1.8e308: their range is not taken as one difference, which would overflow).

    >>> picked = coverage_centric_selection(np.arange(100.0), 20, strata=4, hard_cut=0.2)
    >>> len(picked), int(picked.max()) < 80, np.bincount(picked // 20).tolist()
    (20, True, [5, 5, 5, 5])
    """
    s = np.asarray(tensor_to_numpy(scores), dtype=np.float64)
    if s.ndim != 1 or not np.isfinite(s).all():
        raise ValueError(
            f"scores must be a 1-D array of finite numbers, got shape {s.shape}"
            + ("" if s.ndim != 1 else " with NaN or inf")
        )
    strata = check_int(strata, "strata", minimum=1)
    hard_cut = check_number(hard_cut, "hard_cut", 0.0, 1.0)
    if hard_cut >= 1.0:
        raise ValueError(f"hard_cut must be in [0, 1), got {hard_cut!r}")
    order = np.argsort(s, kind="stable")  # easiest first; ties by index
    pool = order[: len(s) - int(math.floor(hard_cut * len(s)))]
    count = check_int(count, "count", minimum=0, maximum=len(pool))
    rng = np.random.default_rng([check_seed(seed), 7])
    stratum = _strata(s[pool], strata)
    # pool is in score order, so every stratum is a run of it: cut where the stratum changes
    # (the non-empty strata, in order, with no pass over the empty ones)
    bins = np.split(pool, np.flatnonzero(np.diff(stratum)) + 1) if len(pool) else []
    picked, left = [], count
    for i, b in enumerate(sorted(bins, key=len)):  # stable: equal sizes stay in score order
        take = min(len(b), left // (len(bins) - i))
        picked.append(rng.choice(b, size=take, replace=False))
        left -= take
    return np.sort(np.concatenate(picked)) if picked else np.zeros(0, dtype=np.int64)


class ScorePruningSelector(_PrunedRun):
    """Score-based pruning of the training set: score every example during the first
    ``score_epochs`` epochs, which train on all of it, then train on the ``keep`` share chosen
    by coverage-centric selection for the rest of the run.

    The scores come from the training forward (``sampler.observe(idx, logits=...)``; no
    extra pass), averaged over the scoring epochs:

    - ``"el2n"`` (Paul et al. 2021): ``|softmax(logits) - onehot(y)|_2``, the error's norm;
    - ``"forgetting"`` (Toneva et al. 2019): how often an example went from classified
      correctly to incorrectly; never classified correctly counts as the most forgotten.
      It needs at least 2 scoring epochs.

    The kept set is drawn by :func:`coverage_centric_selection` (``strata`` bins, the
    ``hard_cut`` hardest share dropped first) once, when the first pruned epoch is planned,
    from the scores observed until then, identically on every rank (the sampler shares the
    feedback every ``sync_every`` steps and after each epoch's last batch). Every epoch's
    length is known before the run: :meth:`num_batches` and :meth:`total_batches` size a
    learning-rate schedule.

    Parameters
    ----------
    labels:
        The training labels (class ids), one per example.
    batch_size:
        Examples per batch.
    epochs:
        The run's number of epochs.
    keep:
        The share of the examples trained on after the scoring epochs, in (0, 1].
    score:
        ``"el2n"`` or ``"forgetting"``.
    score_epochs:
        The epochs that train on every example and score it (>= 1, < ``epochs``).
    strata, hard_cut:
        :func:`coverage_centric_selection`'s.
    seed, drop_last:
        As for every selector.

    Example
    -------
    >>> y = np.arange(100) % 2
    >>> sel = ScorePruningSelector(y, batch_size=10, epochs=4, keep=0.6, seed=0)
    >>> [sel.num_batches(epoch=e) for e in range(4)], sel.total_batches()
    ([10, 6, 6, 6], 28)
    >>> logits = np.stack([np.linspace(-2, 2, 100), np.zeros(100)], 1)
    >>> sel.observe(np.arange(100), logits=logits)
    >>> plan = sel.plan(epoch=1)
    >>> len(plan.indices()), sel.pruned_share_[1]
    (60, 0.4)
    """

    feedback_fields = ("logits",)

    def __init__(
        self,
        labels: Any,
        batch_size: int,
        *,
        epochs: int,
        keep: float = 0.5,
        score: str = "el2n",
        score_epochs: int = 1,
        strata: int = 50,
        hard_cut: float = 0.0,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        y = np.asarray(tensor_to_numpy(labels))
        if y.ndim != 1:
            raise ValueError(f"labels must be 1-D, got shape {y.shape}")
        super().__init__(len(y), batch_size, seed=seed, drop_last=drop_last)
        self.labels = check_labels(y, self.num_examples)
        self.epochs = check_int(epochs, "epochs", minimum=2)
        self.keep = check_number(keep, "keep", 0.0, 1.0)
        if self.keep <= 0.0 or round(self.keep * self.num_examples) < 1:
            raise ValueError(
                f"keep must be in (0, 1] and keep at least one of the {self.num_examples} examples, got {keep!r}"
            )
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {score!r}")
        self.score = score
        self.score_epochs = check_int(
            score_epochs, "score_epochs", minimum=1 if score == "el2n" else 2, maximum=self.epochs - 1
        )
        self.strata = check_int(strata, "strata", minimum=1)
        self.hard_cut = check_number(hard_cut, "hard_cut", 0.0, 1.0)
        if self.hard_cut >= 1.0 or self.kept_count() > self.num_examples - math.floor(
            self.hard_cut * self.num_examples
        ):
            raise ValueError(f"hard_cut={hard_cut!r} leaves fewer examples than keep={keep!r} asks for")
        #: per example: the sum of its scores and how many were observed (el2n), or
        #: its forgetting events and whether its latest forward was correct (forgetting)
        self.score_sum_ = np.zeros(self.num_examples)
        self.observed_ = np.zeros(self.num_examples, dtype=np.int64)
        self.correct_ = np.zeros(self.num_examples, dtype=bool)
        self.learnt_ = np.zeros(self.num_examples, dtype=bool)  # ever classified correctly
        self.kept_: np.ndarray | None = None  # the examples of the pruned epochs, once drawn
        #: epoch -> share of the examples skipped, for every epoch planned
        self.pruned_share_: dict[int, float] = {}

    def kept_count(self) -> int:
        """Examples trained on in every pruned epoch."""
        return max(1, round(self.keep * self.num_examples))

    def prunes(self, epoch: int) -> bool:
        """Whether ``epoch`` trains on the kept share (every epoch after the scoring ones)."""
        return self._check_epoch(epoch) >= self.score_epochs

    def epoch_size(self, epoch: int) -> int:
        """Examples trained on in ``epoch`` (over all ranks, before padding)."""
        return self.kept_count() if self.prunes(epoch) else self.num_examples

    # -- feedback ---------------------------------------------------------------------
    def observe(self, indices: Any, losses: Any = None, logits: Any = None, embeddings: Any = None) -> None:
        """Score ``indices`` from their training ``logits`` (until the kept set is drawn)."""
        if logits is None or self.kept_ is not None:
            return
        idx = check_indices(indices, self.num_examples)
        z = check_rows(logits, len(idx), "logits", ndim=2)
        y = self.labels[idx]
        if self.score == "el2n":
            np.add.at(self.score_sum_, idx, gradnorm_scores(z, y))
        else:
            # el2n's check (in gradnorm_scores): a label past the logits' columns is never
            # the argmax, and its example would score as never learnt
            check_class_ids(y, z.shape)
            correct = z.argmax(axis=1) == y
            forgot = self.correct_[idx] & ~correct  # (an index twice in one batch: the last counts)
            np.add.at(self.score_sum_, idx, forgot)
            self.correct_[idx] = correct
            self.learnt_[idx] |= correct
        np.add.at(self.observed_, idx, 1)

    def scores_(self) -> np.ndarray:
        """Every example's difficulty so far (higher: harder); never observed: harder than
        every observed one."""
        if self.score == "el2n":
            seen = self.observed_ > 0
            mean = self.score_sum_ / np.maximum(self.observed_, 1)
            return np.where(seen, mean, mean[seen].max(initial=0.0) + 1.0)
        # never learnt: more forgotten than any example can be (Toneva et al.)
        return np.where(self.learnt_, self.score_sum_, self.observed_.max(initial=0) + 1.0)

    # -- the plan ---------------------------------------------------------------------
    def plan(self, epoch: int = 0, world_size: int = 1) -> EpochPlan:
        epoch = self._check_epoch(epoch)
        self.check_world(world_size)
        rng = epoch_rng(self.seed, epoch, 2)
        if not self.prunes(epoch):
            keep = np.arange(self.num_examples, dtype=np.int64)
        else:
            if self.kept_ is None:
                self.kept_ = coverage_centric_selection(
                    self.scores_(), self.kept_count(), strata=self.strata, hard_cut=self.hard_cut, seed=self.seed
                )
            keep = self.kept_
        self.pruned_share_[epoch] = 1.0 - len(keep) / self.num_examples
        return _epoch_plan(keep[rng.permutation(len(keep))], None, self, epoch, world_size, "score-pruning")

    # -- resume -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The scores observed and the kept set, once drawn."""
        kept = np.full(0, -1, dtype=np.int64) if self.kept_ is None else self.kept_.copy()
        return to_portable(
            {
                "class": type(self).__name__,
                "num_examples": self.num_examples,
                "score_sum": self.score_sum_,
                "observed": self.observed_,
                "correct": self.correct_,
                "learnt": self.learnt_,
                "drawn": self.kept_ is not None,
                "kept": kept,
                "pruned_epochs": list(self.pruned_share_),
                "pruned_shares": list(self.pruned_share_.values()),
            }
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = from_portable(state)
        self._check_state(
            state,
            {
                "class",
                "num_examples",
                "score_sum",
                "observed",
                "correct",
                "learnt",
                "drawn",
                "kept",
                "pruned_epochs",
                "pruned_shares",
            },
        )
        arrays = {k: np.asarray(state[k]) for k in ("score_sum", "observed", "correct", "learnt")}
        if any(a.shape != (self.num_examples,) for a in arrays.values()):
            raise ValueError(
                f"state holds per-example arrays of shapes {[a.shape for a in arrays.values()]}, "
                f"expected ({self.num_examples},)"
            )
        self.score_sum_ = arrays["score_sum"].astype(np.float64)
        self.observed_ = arrays["observed"].astype(np.int64)
        self.correct_, self.learnt_ = arrays["correct"].astype(bool), arrays["learnt"].astype(bool)
        kept = np.asarray(state["kept"], dtype=np.int64)
        self.kept_ = check_indices(kept, self.num_examples, "kept").copy() if bool(state["drawn"]) else None
        self.pruned_share_ = {int(e): float(s) for e, s in zip(state["pruned_epochs"], state["pruned_shares"])}


__all__ = ["InfoBatchSelector", "ScorePruningSelector", "coverage_centric_selection"]
