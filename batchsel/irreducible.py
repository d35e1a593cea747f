"""Irreducible losses for RHO-LOSS (Mindermann et al., ICML 2022): per-example losses of a
small model that was *not* trained on the example.

``reducible loss = training loss - irreducible loss``: a mislabeled example keeps a high
loss under any model that generalizes (high irreducible loss: skipped), a learnt one has a
low training loss (skipped); what remains are the examples the model can still learn.
The irreducible-loss (IL) model decides whether this works, so this module fits it and
reports its accuracy (``accuracy_``), from the embeddings (input features, or features of
a pretrained network):

- cross-fitted (default): the data are split into ``folds`` random folds and each fold's
  losses come from a model fit on the other folds, so every example gets an irreducible
  loss and none is lost to a holdout;
- ``holdout``: the paper's setting, a model fit on a random holdout split scores the rest;
  the holdout examples get NaN and must not be trained on (``train_indices_`` are the
  others).

Models: ``"knn"`` (default; distance-weighted votes of the ``neighbors`` nearest
neighbours, exact search with faiss), ``"logistic"`` and ``"mlp"`` (scikit-learn), or any
scikit-learn classifier with ``predict_proba``. Features are standardized with the
statistics of the data each model is fit on. On mnist1d with 25 % symmetric label noise
the k-NN and MLP models separate the mislabeled examples best (ROC AUC of the
irreducible loss as a detector of the wrong labels 0.87 for both, logistic regression
0.77; out-of-fold accuracy against the true labels 0.48, 0.48 and 0.28; the k-NN fit takes
0.2 s, the MLP 14 s): a linear model of mnist1d's raw features is too weak, and RHO-LOSS
on it trains no better than random. On digits all three are good (AUC 0.98-0.996).
"""
from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np

from ._checks import check_int, check_labels, check_seed, load_embeddings

logger = logging.getLogger(__name__)

MODELS = ("knn", "logistic", "mlp")


class IrreducibleLoss:
    """Fits the irreducible-loss model and holds every example's irreducible loss.

    Parameters
    ----------
    model:
        ``"knn"``, ``"logistic"``, ``"mlp"`` (``MLPClassifier((512,), alpha=1.0,
        early_stopping=True)``) or a scikit-learn classifier (cloned for every fold).
    balanced:
        Divide the model's class probabilities by the class frequencies of the data it was
        fit on (and renormalize): the posterior under balanced classes. On long-tailed
        data this keeps RHO-LOSS from skipping the rare classes; on balanced data it
        changes nothing.
    folds:
        K >= 2 of the cross-fitting (ignored with ``holdout``).
    holdout:
        None (cross-fit), a fraction in (0, 1) or a number of examples: the IL model is
        fit on a random holdout of that size and scores the other examples. Train on
        those only: build the selector over ``len(train_indices_)`` examples and map its
        positions to dataset indices with ``train_indices_[positions]`` (or wrap the
        dataset in ``torch.utils.data.Subset(dataset, train_indices_)`` and pass the
        filter ``irreducible_losses=losses_[train_indices_]``).
    neighbors:
        k of the ``"knn"`` model.
    standardize:
        Standardize the features (per fit, with the statistics of the data fit on).
    min_prob:
        Probabilities are clipped to at least this, so irreducible losses are at most
        ``-log(min_prob)`` (6.9 for the default 1e-3).
    seed:
        Seeds the fold / holdout split and the scikit-learn models.

    Attributes
    ----------
    losses_:
        ``-log p(y_i | x_i)`` under a model not fit on example i (float64, length N; NaN
        on the holdout).
    predictions_:
        That model's class for every example (-1 on the holdout).
    accuracy_:
        Accuracy of ``predictions_`` against the labels given to :meth:`fit` (noisy
        labels included), over the scored examples.
    fold_:
        The fold of every example (cross-fitting), -1 on the holdout.
    train_indices_, holdout_indices_:
        The examples to train on (all of them when cross-fitting) and the holdout.
    n_classes_:
        ``max(labels) + 1``.
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

    def __init__(self, model: Any = "knn", folds: int = 5, holdout: float | int | None = None, *,
                 neighbors: int = 25, standardize: bool = True, balanced: bool = True, min_prob: float = 1e-3,
                 seed: int = 0) -> None:
        if isinstance(model, str) and model not in MODELS:
            raise ValueError(f"model must be one of {MODELS} or a scikit-learn classifier, got {model!r}")
        if not isinstance(model, str) and not (hasattr(model, "fit") and hasattr(model, "predict_proba")):
            raise TypeError(f"model must be one of {MODELS} or a classifier with fit and predict_proba, "
                            f"got {type(model).__name__}")
        self.model = model
        self.folds = check_int(folds, "folds", minimum=2)
        if holdout is not None:
            if isinstance(holdout, (bool, np.bool_)) or not isinstance(holdout, (int, float, np.integer, np.floating)) \
                    or not math.isfinite(holdout) or holdout <= 0 or (isinstance(holdout, (float, np.floating))
                                                                      and holdout >= 1):
                raise ValueError(f"holdout must be a fraction in (0, 1) or a number of examples >= 1, got {holdout!r}")
        self.holdout = holdout
        self.neighbors = check_int(neighbors, "neighbors", minimum=1)
        self.standardize = bool(standardize)
        self.balanced = bool(balanced)
        if not (isinstance(min_prob, (int, float)) and 0 < min_prob < 1):
            raise ValueError(f"min_prob must be in (0, 1), got {min_prob!r}")
        self.min_prob = float(min_prob)
        self.seed = check_seed(seed)

    def fit(self, embeddings: Any, labels: Any) -> "IrreducibleLoss":
        """Fit the IL model(s) on ``embeddings`` (N x d array, tensor or ``.npy`` path)
        and integer ``labels`` (length N); returns ``self``."""
        start = time.perf_counter()
        x = load_embeddings(embeddings)
        n = x.shape[0]
        y = check_labels(labels, n)
        self.n_classes_ = int(y.max()) + 1
        rng = np.random.default_rng([self.seed, 0x1055])
        perm = rng.permutation(n)
        self.fold_ = np.full(n, -1, dtype=np.int64)
        if self.holdout is None:
            if self.folds > n:
                raise ValueError(f"folds={self.folds} is more than the {n} examples")
            self.fold_[perm] = np.arange(n) % self.folds
            splits = [(np.flatnonzero(self.fold_ != f), np.flatnonzero(self.fold_ == f)) for f in range(self.folds)]
            self.train_indices_, self.holdout_indices_ = np.arange(n, dtype=np.int64), np.empty(0, np.int64)
        else:
            count = int(self.holdout) if isinstance(self.holdout, (int, np.integer)) else round(self.holdout * n)
            if count >= n:
                raise ValueError(f"holdout={self.holdout!r} ({count} examples) leaves nothing to train on: "
                                 f"the data has {n} examples")
            if count < 1:
                raise ValueError(f"holdout={self.holdout!r} is less than one of the {n} examples")
            self.holdout_indices_ = np.sort(perm[:count]).astype(np.int64)
            self.train_indices_ = np.sort(perm[count:]).astype(np.int64)
            splits = [(self.holdout_indices_, self.train_indices_)]
        self.losses_ = np.full(n, np.nan)
        self.predictions_ = np.full(n, -1, dtype=np.int64)
        for fit_on, score_on in splits:
            proba = self._fit_predict(x[fit_on], y[fit_on], x[score_on])
            p = proba[np.arange(len(score_on)), y[score_on]]
            self.losses_[score_on] = -np.log(np.clip(p, self.min_prob, 1.0))
            self.predictions_[score_on] = proba.argmax(axis=1)
        scored = self.train_indices_
        self.accuracy_ = float(np.mean(self.predictions_[scored] == y[scored]))
        self.fit_seconds_ = time.perf_counter() - start
        logger.info("irreducible-loss model %s: accuracy %.3f on %d examples, mean IL %.3f (%.1f s)",
                    self.model if isinstance(self.model, str) else type(self.model).__name__, self.accuracy_,
                    len(scored), float(np.nanmean(self.losses_)), self.fit_seconds_)
        return self

    def _fit_predict(self, x_fit: np.ndarray, y_fit: np.ndarray, x_score: np.ndarray) -> np.ndarray:
        """Class probabilities (len(x_score) x n_classes_) of a model fit on (x_fit, y_fit)."""
        if self.standardize:
            mean, std = x_fit.mean(axis=0), x_fit.std(axis=0)
            std[std == 0] = 1.0
            x_fit, x_score = (x_fit - mean) / std, (x_score - mean) / std
        if self.model == "knn":
            proba = self._knn(np.ascontiguousarray(x_fit, np.float32), y_fit,
                              np.ascontiguousarray(x_score, np.float32))
        else:
            estimator = self._estimator()
            estimator.fit(x_fit, y_fit)
            proba = np.zeros((len(x_score), self.n_classes_))
            proba[:, np.asarray(estimator.classes_, dtype=np.int64)] = estimator.predict_proba(x_score)
        if self.balanced:
            # Divide out the fit set's class prior (prior-shift correction): on long-tailed
            # data the plain posterior gives every rare-class example a high irreducible
            # loss, and RHO-LOSS then skips the rare classes (balanced accuracy on digits
            # with imbalance 10: 5-10 points below random batches). No effect on balanced data.
            prior = np.bincount(y_fit, minlength=self.n_classes_).astype(np.float64)
            proba = proba / np.maximum(prior, 1.0)
            proba /= np.maximum(proba.sum(axis=1, keepdims=True), 1e-300)
        return proba

    def _knn(self, x_fit: np.ndarray, y_fit: np.ndarray, x_score: np.ndarray) -> np.ndarray:
        from .index import EmbeddingIndex

        k = min(self.neighbors, len(x_fit))
        dist2, nn = EmbeddingIndex(x_fit, metric="l2", progress=False, seed=self.seed).search(x_score, k)
        weights = 1.0 / np.maximum(np.sqrt(np.maximum(dist2, 0.0)), 1e-6)  # sklearn's weights="distance"
        votes = np.zeros((len(x_score), self.n_classes_))
        np.add.at(votes, (np.repeat(np.arange(len(x_score)), k), y_fit[nn].reshape(-1)), weights.reshape(-1))
        return votes / votes.sum(axis=1, keepdims=True)

    def _estimator(self) -> Any:
        from sklearn.base import clone

        if self.model == "logistic":
            from sklearn.linear_model import LogisticRegression

            return LogisticRegression(max_iter=1000)
        if self.model == "mlp":
            from sklearn.neural_network import MLPClassifier

            return MLPClassifier((512,), alpha=1.0, early_stopping=True, max_iter=300, random_state=self.seed)
        return clone(self.model)

    def __repr__(self) -> str:
        model = self.model if isinstance(self.model, str) else type(self.model).__name__
        how = f"holdout={self.holdout!r}" if self.holdout is not None else f"folds={self.folds}"
        return f"IrreducibleLoss(model={model!r}, {how}, seed={self.seed})"


__all__ = ["IrreducibleLoss", "MODELS"]
