"""How one fold's irreducible-loss model is fit and asked for class probabilities: k-NN,
scikit-learn classifiers and the torch models (:mod:`batchsel.loop.irreducible.net`), with
the features standardized and the fit set's class prior divided out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from batchsel.loop.irreducible.net import NetTraining, train_net

MODELS = ("knn", "logistic", "mlp", "net")


def model_name(model: Any) -> str:
    """The name of an IL model: the string itself, or the factory's or class's name.

    Example
    -------
    >>> model_name("knn"), model_name(dict)
    ('knn', 'dict')
    """
    if isinstance(model, str):
        return model
    return getattr(model, "__name__", type(model).__name__)


@dataclass(frozen=True)
class FoldModel:
    """The IL model of :class:`~batchsel.loop.irreducible.IrreducibleLoss`, for one fold at a time.

    Parameters
    ----------
    model : str, classifier or callable
        ``"knn"``, ``"logistic"``, ``"mlp"``, ``"net"``, a scikit-learn classifier (cloned
        per fold) or a torch model factory.
    classes : numpy.ndarray
        The labels' distinct values (C); the models see class positions 0..C-1.
    neighbors : int
        k of ``"knn"``.
    standardize : bool
        Standardize the features with the statistics of the fit set.
    balanced : bool
        Divide the probabilities by the fit set's class frequencies (and renormalize).
    seed : int
        Seeds the scikit-learn and torch models and the k-NN search.
    training : NetTraining
        The torch models' architecture and budget.

    Example
    -------
    >>> import numpy as np
    >>> fm = FoldModel("knn", np.arange(2), 1, True, True, 0, NetTraining((8,), 1, 1, 8, 1e-3, 0.0, 0.2))
    >>> x, y = np.array([[0.0], [1.0], [10.0], [11.0]]), np.array([0, 0, 1, 1])
    >>> proba, epochs = fm.fit_predict(x, y, np.array([[0.5], [10.5]]))
    >>> proba.argmax(axis=1).tolist(), epochs
    ([0, 1], 0)
    """

    model: Any
    classes: np.ndarray
    neighbors: int
    standardize: bool
    balanced: bool
    seed: int
    training: NetTraining

    def is_torch(self) -> bool:
        """Whether the model is a torch one (``"net"`` or a factory)."""
        return self.model == "net" or (not isinstance(self.model, str) and not hasattr(self.model, "predict_proba"))

    def fit_predict(
        self, x_fit: np.ndarray, y_fit: np.ndarray, x_score: np.ndarray, fold: int = 0
    ) -> tuple[np.ndarray, int]:
        """Class probabilities of a model fit on ``(x_fit, y_fit)``.

        Parameters
        ----------
        x_fit, y_fit : numpy.ndarray
            The fit set: features and class positions 0..C-1.
        x_score : numpy.ndarray
            The examples to score.
        fold : int, default 0
            The fold (seeds a torch model).

        Returns
        -------
        proba : numpy.ndarray
            ``len(x_score) x C``.
        epochs : int
            The epochs a torch model trained (0 for the other models).
        """
        n_classes = len(self.classes)
        if self.standardize:
            mean, std = x_fit.mean(axis=0), x_fit.std(axis=0)
            std[std == 0] = 1.0
            x_fit, x_score = (x_fit - mean) / std, (x_score - mean) / std
        epochs = 0
        if self.model == "knn":
            proba = self._knn(np.ascontiguousarray(x_fit, np.float32), y_fit, np.ascontiguousarray(x_score, np.float32))
        elif self.is_torch():
            proba, epochs = train_net(
                self.model,
                self.training,
                np.ascontiguousarray(x_fit, np.float32),
                y_fit,
                np.ascontiguousarray(x_score, np.float32),
                classes=self.classes,
                seed=self.seed,
                fold=fold,
            )
        else:
            estimator = self._estimator()
            estimator.fit(x_fit, y_fit)
            proba = np.zeros((len(x_score), n_classes))
            proba[:, np.asarray(estimator.classes_, dtype=np.int64)] = estimator.predict_proba(x_score)
        if self.balanced:
            # Divide out the fit set's class prior (prior-shift correction): on long-tailed
            # data the plain posterior gives every rare-class example a high irreducible
            # loss, and RHO-LOSS then skips the rare classes (balanced accuracy on digits
            # with imbalance 10: 5-10 points below random batches). No effect on balanced data.
            prior = np.bincount(y_fit, minlength=n_classes).astype(np.float64)
            proba = proba / np.maximum(prior, 1.0)
            proba /= np.maximum(proba.sum(axis=1, keepdims=True), 1e-300)
        return proba, epochs

    def _knn(self, x_fit: np.ndarray, y_fit: np.ndarray, x_score: np.ndarray) -> np.ndarray:
        from batchsel.index import EmbeddingIndex

        k = min(self.neighbors, len(x_fit))
        dist2, nn = EmbeddingIndex(x_fit, metric="euclidean", progress=False, seed=self.seed).search(x_score, k)
        weights = 1.0 / np.maximum(np.sqrt(np.maximum(dist2, 0.0)), 1e-6)  # sklearn's weights="distance"
        votes = np.zeros((len(x_score), len(self.classes)))
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


__all__ = ["MODELS", "FoldModel", "model_name"]
