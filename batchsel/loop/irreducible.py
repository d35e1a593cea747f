"""Irreducible losses for RHO-LOSS (Mindermann et al., ICML 2022).

A small model *not* trained on an example gives its irreducible loss; ``training loss -
irreducible loss`` is the reducible loss the filter ranks by. :class:`IrreducibleLoss` fits
that model on embeddings (k-NN, logistic regression or an MLP), cross-fitted so that no
example is lost to a holdout (or on a holdout, as in the paper), corrects for class priors
and reports how decisive and how accurate it is.

The models, the guard and the measurements: docs/design/irreducible.md.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np

from batchsel.core.checks import check_int, check_labels, check_number, check_seed, load_embeddings

logger = logging.getLogger(__name__)

MODELS = ("knn", "logistic", "mlp", "net")


# A model is decisive about an example when its top class is at least this many times as
# likely as the runner-up. A ratio, not a probability level: a model fit on noisy labels
# caps its top probability near 1 - noise rate (k-NN: the share of neighbours labelled
# right), so a fixed level refused good models under noise on 2-class data, where 2x
# (top >= 2/3) still holds at 25 % noise (3x) and fails at 40 % (1.5x).
DECISIVE_RATIO = 2.0


class IrreducibleLoss:
    """Fits the irreducible-loss model and holds every example's irreducible loss.

    Parameters
    ----------
    model:
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
    hidden, epochs, patience, batch_size, lr, weight_decay, stop_fraction:
        The torch models' architecture (``"net"`` only) and training budget (above).
    seed:
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
        """Fit the IL model(s) on ``embeddings`` (N x d array, tensor or ``.npy`` path)
        and integer ``labels`` (length N); returns ``self``."""
        start = time.perf_counter()
        x = load_embeddings(embeddings)
        n = x.shape[0]
        # the models work on class positions 0..C-1 (large or sparse ids cost no memory);
        # predictions_ are given back as the caller's ids
        self.classes_, y = np.unique(check_labels(labels, n), return_inverse=True)
        y = y.astype(np.int64).reshape(-1)
        self.n_classes_ = len(self.classes_)
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
                raise ValueError(
                    f"holdout={self.holdout!r} ({count} examples) leaves nothing to train on: the data has {n} examples"
                )
            if count < 1:
                raise ValueError(f"holdout={self.holdout!r} is less than one of the {n} examples")
            self.holdout_indices_ = np.sort(perm[:count]).astype(np.int64)
            self.train_indices_ = np.sort(perm[count:]).astype(np.int64)
            splits = [(self.holdout_indices_, self.train_indices_)]
        self.losses_ = np.full(n, np.nan)
        self.predictions_ = np.full(n, -1, dtype=np.int64)
        self.confidence_ = np.full(n, np.nan)
        self.fold_accuracy_ = np.zeros(len(splits))
        self.epochs_ = np.zeros(len(splits), dtype=np.int64)
        decisive = np.zeros(n, dtype=bool)
        confident = np.zeros(n, dtype=bool)  # ... and it is not the label
        for fold, (fit_on, score_on) in enumerate(splits):
            proba, self.epochs_[fold] = self._fit_predict(x[fit_on], y[fit_on], x[score_on], fold)
            p = proba[np.arange(len(score_on)), y[score_on]]
            self.losses_[score_on] = -np.log(np.clip(p, self.min_prob, 1.0))
            self.predictions_[score_on] = proba.argmax(axis=1)
            self.fold_accuracy_[fold] = float(np.mean(self.predictions_[score_on] == y[score_on]))
            ranked = np.sort(proba, axis=1)
            self.confidence_[score_on] = ranked[:, -1]
            runner_up = ranked[:, -2] if proba.shape[1] > 1 else np.zeros(len(score_on))
            decisive[score_on] = ranked[:, -1] >= DECISIVE_RATIO * runner_up
            confident[score_on] = decisive[score_on] & (self.predictions_[score_on] != y[score_on])
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
            self._name(),
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

    def _name(self) -> str:
        if isinstance(self.model, str):
            return self.model
        return getattr(self.model, "__name__", type(self.model).__name__)

    def _fit_predict(
        self, x_fit: np.ndarray, y_fit: np.ndarray, x_score: np.ndarray, fold: int = 0
    ) -> tuple[np.ndarray, int]:
        """Class probabilities (len(x_score) x n_classes_) of a model fit on (x_fit, y_fit),
        and the epochs it trained (0 for the non-torch models)."""
        if self.standardize:
            mean, std = x_fit.mean(axis=0), x_fit.std(axis=0)
            std[std == 0] = 1.0
            x_fit, x_score = (x_fit - mean) / std, (x_score - mean) / std
        epochs = 0
        if self.model == "knn":
            proba = self._knn(np.ascontiguousarray(x_fit, np.float32), y_fit, np.ascontiguousarray(x_score, np.float32))
        elif self._is_torch():
            proba, epochs = self._net(
                np.ascontiguousarray(x_fit, np.float32), y_fit, np.ascontiguousarray(x_score, np.float32), fold
            )
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
        return proba, epochs

    def _is_torch(self) -> bool:
        return self.model == "net" or (not isinstance(self.model, str) and not hasattr(self.model, "predict_proba"))

    def _net(self, x_fit: np.ndarray, y_fit: np.ndarray, x_score: np.ndarray, fold: int) -> tuple[np.ndarray, int]:
        """Train a torch model on (x_fit, y_fit) with Adam, stopping early on a random
        ``stop_fraction`` of x_fit (never on x_score: its examples stay unseen, labels
        included), and return its softmax on x_score at the best epoch."""
        import torch
        import torch.nn.functional as F

        rng = np.random.default_rng([self.seed, 0x11E7, fold])
        perm = rng.permutation(len(y_fit))
        n_stop = max(1, int(round(self.stop_fraction * len(y_fit))))
        if n_stop >= len(y_fit):
            raise ValueError(
                f"stop_fraction={self.stop_fraction!r} leaves no example to fit the irreducible-loss "
                f"model on ({len(y_fit)} examples in a fold's fit set)"
            )
        stop, fit = perm[:n_stop], perm[n_stop:]
        xs, ys = torch.from_numpy(x_fit[stop]), torch.from_numpy(y_fit[stop])
        xf, yf = torch.from_numpy(x_fit[fit]), torch.from_numpy(y_fit[fit])
        # a fork of torch's global generator: initial weights seeded from (seed, fold) without
        # disturbing the caller's random stream
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(rng.integers(2**62)))
            net = self._build_net(x_fit.shape[1])
            self._check_outputs(net, xf[:1])
            opt = torch.optim.Adam(net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
            best, best_state, best_epoch, bad = math.inf, None, 0, 0
            for epoch in range(1, self.epochs + 1):
                net.train()
                order = torch.from_numpy(rng.permutation(len(fit)))
                for b in range(0, len(fit), self.batch_size):
                    ib = order[b : b + self.batch_size]
                    opt.zero_grad()
                    F.cross_entropy(net(xf[ib]), yf[ib]).backward()
                    opt.step()
                net.eval()
                with torch.no_grad():
                    loss = float(F.cross_entropy(net(xs), ys))
                if loss < best - 1e-4:
                    best, best_epoch, bad = loss, epoch, 0
                    best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
                else:
                    bad += 1
                    if bad >= self.patience:
                        break
            net.load_state_dict(best_state)
            net.eval()
            with torch.no_grad():
                logits = net(torch.from_numpy(x_score))
        if logits.ndim != 2 or logits.shape != (len(x_score), self.n_classes_):
            raise ValueError(
                f"the irreducible-loss model returned logits of shape {tuple(logits.shape)}, "
                f"expected ({len(x_score)}, {self.n_classes_}) (examples x classes)"
            )
        return torch.softmax(logits.double(), dim=1).numpy(), best_epoch

    def _check_outputs(self, net: Any, x: Any) -> None:
        """Refuse a model with one output per class of another label set before training
        (torch would fail mid-training with "Target ... is out of bounds")."""
        import torch

        with torch.no_grad():
            out = net(x)
        if out.ndim != 2 or out.shape[1] != self.n_classes_:
            raise ValueError(
                f"the irreducible-loss model returns logits of shape {tuple(out.shape)} for one example; "
                f"it needs one output per class: {self.n_classes_} (the labels' classes "
                f"{self.classes_[:10].tolist()}{' ...' if self.n_classes_ > 10 else ''}, in that order)"
            )

    def _build_net(self, d_in: int) -> Any:
        import torch

        if self.model != "net":
            net = self.model()
            if not isinstance(net, torch.nn.Module):
                raise TypeError(f"model() must return a torch.nn.Module, got {type(net).__name__}")
            return net.float()
        layers, d = [], d_in
        for width in self.hidden:
            layers += [torch.nn.Linear(d, width), torch.nn.ReLU()]
            d = width
        return torch.nn.Sequential(*layers, torch.nn.Linear(d, self.n_classes_))

    def _knn(self, x_fit: np.ndarray, y_fit: np.ndarray, x_score: np.ndarray) -> np.ndarray:
        from batchsel.index import EmbeddingIndex

        k = min(self.neighbors, len(x_fit))
        dist2, nn = EmbeddingIndex(x_fit, metric="euclidean", progress=False, seed=self.seed).search(x_score, k)
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
        model = self._name()
        how = f"holdout={self.holdout!r}" if self.holdout is not None else f"folds={self.folds}"
        return f"IrreducibleLoss(model={model!r}, {how}, seed={self.seed})"


__all__ = ["IrreducibleLoss", "MODELS"]
