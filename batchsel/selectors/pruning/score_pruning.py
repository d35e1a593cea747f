"""Score-based pruning: score every example during the first epochs (EL2N, Paul et al.
2021, or forgetting events, Toneva et al. 2019), then train on the share kept by
coverage-centric selection (:class:`ScorePruningSelector`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from batchsel.core.checks import check_indices, check_int, check_labels, check_number, check_rows, tensor_to_numpy
from batchsel.core.permutation import permutation
from batchsel.core.world import World
from batchsel.plans.plan import EpochPlan
from batchsel.selectors.epoch_feedback import EpochFeedbackSelector
from batchsel.selectors.pruning.coverage import coverage_centric_selection
from batchsel.selectors.scores import check_class_ids, gradnorm_scores
from batchsel.selectors.sharding import epoch_rng

SCORES = ("el2n", "forgetting")


class ScorePruningSelector(EpochFeedbackSelector, feedback_fields=("logits",)):
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
    def _plan(self, epoch: int, world: World) -> EpochPlan:
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
        return self._epoch_plan(keep[permutation(rng, len(keep))], None, epoch, world, "score-pruning")

    # -- resume -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The scores observed and the kept set, once drawn."""
        kept = np.full(0, -1, dtype=np.int64) if self.kept_ is None else self.kept_.copy()
        return self._portable_state(
            {
                "score_sum": self.score_sum_,
                "observed": self.observed_,
                "correct": self.correct_,
                "learnt": self.learnt_,
                "drawn": self.kept_ is not None,
                "kept": kept,
            }
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = self._loaded_state(state, {"score_sum", "observed", "correct", "learnt", "drawn", "kept"})
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
        self._restore_pruned_shares(state)


__all__ = ["ScorePruningSelector", "SCORES"]
