"""The irreducible-loss estimator: :class:`IrreducibleLoss`, cross-fitted (or holdout) models on
embeddings and every example's irreducible loss. Its parts are this package's other modules
(:mod:`batchsel.loop.irreducible`)."""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np

from batchsel.core.checks import check_int, check_labels, check_number, check_seed, load_embeddings
from batchsel.loop.irreducible.folds import split_folds
from batchsel.loop.irreducible.models import MODELS, FoldModel, model_name
from batchsel.loop.irreducible.net import NetTraining
from batchsel.loop.irreducible.outcomes import fold_outcomes

logger = logging.getLogger(__name__)


class IrreducibleLoss:
    """Fits the irreducible-loss model and holds every example's irreducible loss.

    Keyword groups: the models (`neighbors`, `standardize`, `balanced`, `min_prob`), the
    torch models' architecture and budget (`hidden`, `epochs`, `patience`, `batch_size`,
    `lr`, `weight_decay`, `stop_fraction`) and the draws (`seed`).

    Parameters
    ----------
    model : {"knn", "logistic", "mlp", "net"}, classifier or callable, default "knn"
        ``"knn"``, ``"logistic"``, ``"mlp"`` (``MLPClassifier((512,), alpha=1.0,
        early_stopping=True)``) or a scikit-learn classifier (cloned for every fold);
        ``"net"``: a torch MLP on the (standardized) features with ``hidden`` layers; or a
        factory ``model_fn() -> torch.nn.Module`` mapping an (n x d) float32 batch of the
        embeddings to (n x classes) logits: the user's own small architecture (a new
        instance per fold). Torch models train with Adam (``lr``, ``weight_decay``,
        batches of ``batch_size``) for at most ``epochs`` epochs and keep the epoch with
        the lowest loss on ``stop_fraction`` of their fit set, stopping after ``patience``
        epochs without improvement: the budget is at most ``epochs x (K - 1) / K x N``
        example-gradients per fold (30 epochs over 80 % of the data: about 24 passes over
        the data per fold, 120 for the 5 folds; early stopping usually halves it).
    balanced : bool, default True
        Divide the model's class probabilities by the class frequencies of the data it was
        fit on (and renormalize): the posterior under balanced classes. On long-tailed
        data this keeps RHO-LOSS from skipping the rare classes; on balanced data it
        changes nothing.
    folds : int, default 5
        K >= 2 of the cross-fitting (ignored with ``holdout``).
    holdout : float, int or None, default None
        None (cross-fit), a fraction in (0, 1) or a number of examples: the IL model is
        fit on a random holdout of that size and scores the other examples. Train on
        those only: build the selector over ``len(train_indices_)`` examples and map its
        positions to dataset indices with ``train_indices_[positions]`` (or wrap the
        dataset in ``torch.utils.data.Subset(dataset, train_indices_)`` and pass the
        filter ``irreducible_losses=losses_[train_indices_]``).
    neighbors : int, default 25
        k of the ``"knn"`` model.
    standardize : bool, default True
        Standardize the features (per fit, with the statistics of the data fit on).
    min_prob : float, default 1e-3
        Probabilities are clipped to at least this, so irreducible losses are at most
        ``-log(min_prob)`` (6.9 for the default 1e-3).
    hidden, epochs, patience, batch_size, lr, weight_decay, stop_fraction : tuple of int, int, float
        The torch models' architecture (``"net"`` only) and training budget (above);
        defaults ``(256,)``, 30, 4, 64, 1e-3, 1e-4 and 0.15.
    seed : int, default 0
        Seeds the fold / holdout split, the scikit-learn models and the torch models
        (initial weights and batch order from ``(seed, fold)``; torch's global generator
        is left as it was).

    Attributes
    ----------
    losses_:
        ``-log p(y_i | x_i)`` under a model not fit on example i (float64, length N; NaN
        on the holdout).
    predictions_:
        That model's class for every example (-1 on the holdout).
    confidence_:
        That model's probability of its class (``predictions_``) for every example (NaN
        on the holdout).
    decisive_mask_:
        Where that model is *decisive*: its class is at least ``DECISIVE_RATIO`` = 2 times
        as likely as the runner-up (False on the holdout).
    accuracy_:
        Accuracy of ``predictions_`` against the labels given to :meth:`fit` (noisy
        labels included), over the scored examples: the held-out accuracy of the IL model.
    fold_accuracy_:
        The same per fold (one entry with ``holdout``).
    chance_:
        The share of the most frequent label among the scored examples: the accuracy of
        a model that knows nothing. :class:`~batchsel.loop.filters.CandidateFilter` compares
        ``accuracy_`` with it (its guard).
    decisive_:
        The share of the scored examples on which the model is decisive
        (``decisive_mask_``). A weak model is rarely decisive (figures: docs/design/irreducible.md).
        :class:`~batchsel.loop.filters.CandidateFilter`'s guard reads it.
    confident_disagreement_:
        The share of the scored examples on which the model is decisive for *another*
        class than their label: an estimate of the label noise this model can see. A weak
        model disagrees often but rarely decisively, so this separates noise from the
        model's own errors where ``1 - accuracy_`` cannot (figures:
        docs/design/irreducible.md). :class:`~batchsel.loop.filters.CandidateFilter`'s
        ``irreducible_weight="auto"`` reads it.
    epochs_:
        Per fold, the epoch a torch model was kept at (0 for the other models).
    fold_:
        The fold of every example (cross-fitting), -1 on the holdout.
    train_indices_, holdout_indices_:
        The examples to train on (all of them when cross-fitting) and the holdout.
    classes_, n_classes_:
        The labels' distinct values (sorted) and their number C. The models see class
        positions 0..C-1 (a torch model must return C logits, in ``classes_`` order);
        ``predictions_`` holds the labels' own values.
    fit_seconds_:
        Time :meth:`fit` took.

    Example
    -------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 3, 600)
    >>> x = (np.eye(3)[y] * 4 + rng.normal(size=(600, 3))).astype(np.float32)
    >>> noisy = y.copy(); noisy[:60] = (y[:60] + 1) % 3          # 10 % wrong labels
    >>> il = IrreducibleLoss(folds=5).fit(x, noisy)
    >>> bool(il.accuracy_ > 0.85), bool(il.losses_[:60].mean() > 3 * il.losses_[60:].mean())
    (True, True)
    """

    def __init__(
        self,
        model: Any = "knn",
        folds: int = 5,
        holdout: float | int | None = None,
        *,
        neighbors: int = 25,
        standardize: bool = True,
        balanced: bool = True,
        min_prob: float = 1e-3,
        hidden: tuple[int, ...] = (256,),
        epochs: int = 30,
        patience: int = 4,
        batch_size: int = 64,
        lr: float = 1e-3,
        weight_decay: float = 1e-4,
        stop_fraction: float = 0.15,
        seed: int = 0,
    ) -> None:
        if isinstance(model, str) and model not in MODELS:
            raise ValueError(
                f"model must be one of {MODELS}, a scikit-learn classifier or a torch model factory, got {model!r}"
            )
        if (
            not isinstance(model, str)
            and not (hasattr(model, "fit") and hasattr(model, "predict_proba"))
            and not callable(model)
        ):
            raise TypeError(
                f"model must be one of {MODELS}, a classifier with fit and predict_proba or a "
                f"callable returning a torch.nn.Module, got {type(model).__name__}"
            )
        self.model = model
        self.folds = check_int(folds, "folds", minimum=2)
        if holdout is not None:
            if (
                isinstance(holdout, (bool, np.bool_))
                or not isinstance(holdout, (int, float, np.integer, np.floating))
                or not math.isfinite(holdout)
                or holdout <= 0
                or (isinstance(holdout, (float, np.floating)) and holdout >= 1)
            ):
                raise ValueError(f"holdout must be a fraction in (0, 1) or a number of examples >= 1, got {holdout!r}")
        self.holdout = holdout
        self.neighbors = check_int(neighbors, "neighbors", minimum=1)
        self.standardize = bool(standardize)
        self.balanced = bool(balanced)
        if not (isinstance(min_prob, (int, float)) and 0 < min_prob < 1):
            raise ValueError(f"min_prob must be in (0, 1), got {min_prob!r}")
        self.min_prob = float(min_prob)
        self.hidden = tuple(check_int(h, "hidden", minimum=1) for h in hidden)
        self.epochs = check_int(epochs, "epochs", minimum=1)
        self.patience = check_int(patience, "patience", minimum=1)
        self.batch_size = check_int(batch_size, "batch_size", minimum=1)
        self.lr = check_number(lr, "lr", low=0.0)
        self.weight_decay = check_number(weight_decay, "weight_decay", low=0.0)
        self.stop_fraction = check_number(stop_fraction, "stop_fraction", low=0.0, high=0.5)
        if not 0 < self.stop_fraction:
            raise ValueError(f"stop_fraction must be in (0, 0.5], got {stop_fraction!r}")
        self.seed = check_seed(seed)

    def fit(self, embeddings: Any, labels: Any) -> "IrreducibleLoss":
        """Fit the IL model(s) on ``embeddings`` and ``labels``.

        Parameters
        ----------
        embeddings : array-like, tensor or str
            N x d features (a ``.npy`` path is loaded).
        labels : array-like of int
            One label per example.

        Returns
        -------
        IrreducibleLoss
            ``self``, fitted (see Attributes).
        """
        start = time.perf_counter()
        x = load_embeddings(embeddings)
        n = x.shape[0]
        # the models work on class positions 0..C-1 (large or sparse ids cost no memory);
        # predictions_ are given back as the caller's ids
        self.classes_, y = np.unique(check_labels(labels, n), return_inverse=True)
        y = y.astype(np.int64).reshape(-1)
        self.n_classes_ = len(self.classes_)
        folds = split_folds(n, self.folds, self.holdout, self.seed)
        self.fold_, self.train_indices_, self.holdout_indices_ = folds.fold, folds.train_indices, folds.holdout_indices
        self.losses_ = np.full(n, np.nan)
        self.predictions_ = np.full(n, -1, dtype=np.int64)
        self.confidence_ = np.full(n, np.nan)
        self.fold_accuracy_ = np.zeros(len(folds.splits))
        self.epochs_ = np.zeros(len(folds.splits), dtype=np.int64)
        decisive = np.zeros(n, dtype=bool)
        confident = np.zeros(n, dtype=bool)  # ... and it is not the label
        model = self._fold_model()
        for fold, (fit_on, score_on) in enumerate(folds.splits):
            proba, self.epochs_[fold] = model.fit_predict(x[fit_on], y[fit_on], x[score_on], fold)
            out = fold_outcomes(proba, y[score_on], self.min_prob)
            self.losses_[score_on], self.predictions_[score_on] = out.losses, out.predictions
            self.confidence_[score_on], decisive[score_on], confident[score_on] = (
                out.confidence,
                out.decisive,
                out.confident,
            )
            self.fold_accuracy_[fold] = float(np.mean(self.predictions_[score_on] == y[score_on]))
        scored = self.train_indices_
        self.accuracy_ = float(np.mean(self.predictions_[scored] == y[scored]))
        scored_rows = self.predictions_ >= 0
        self.predictions_[scored_rows] = self.classes_[self.predictions_[scored_rows]]
        self.decisive_mask_ = decisive
        self.decisive_ = float(np.mean(decisive[scored]))
        self.confident_disagreement_ = float(np.mean(confident[scored]))
        self.chance_ = float(np.bincount(y[scored]).max() / len(scored))
        self.fit_seconds_ = time.perf_counter() - start
        logger.info(
            "irreducible-loss model %s: held-out accuracy %.3f (folds %s; chance %.3f; decisive %.3f, confident "
            "disagreement %.3f) on %d examples, mean IL %.3f (%.1f s)",
            model_name(self.model),
            self.accuracy_,
            " ".join(f"{a:.3f}" for a in self.fold_accuracy_),
            self.chance_,
            self.decisive_,
            self.confident_disagreement_,
            len(scored),
            float(np.nanmean(self.losses_)),
            self.fit_seconds_,
        )
        return self

    def _fold_model(self) -> FoldModel:
        """The IL model of this estimator's settings (read at :meth:`fit`, as scikit-learn does)."""
        training = NetTraining(
            self.hidden, self.epochs, self.patience, self.batch_size, self.lr, self.weight_decay, self.stop_fraction
        )
        return FoldModel(
            self.model, self.classes_, self.neighbors, self.standardize, self.balanced, self.seed, training
        )

    def __repr__(self) -> str:
        model = model_name(self.model)
        how = f"holdout={self.holdout!r}" if self.holdout is not None else f"folds={self.folds}"
        return f"IrreducibleLoss(model={model!r}, {how}, seed={self.seed})"
