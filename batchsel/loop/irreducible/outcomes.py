"""What a fold's irreducible-loss model says about the examples it scores: their
irreducible losses, its class, its confidence and whether it is decisive."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

# A model is decisive about an example when its top class is at least this many times as
# likely as the runner-up. A ratio, not a probability level: a model fit on noisy labels
# caps its top probability near 1 - noise rate (k-NN: the share of neighbours labelled
# right), so a fixed level refused good models under noise on 2-class data, where 2x
# (top >= 2/3) still holds at 25 % noise (3x) and fails at 40 % (1.5x).
DECISIVE_RATIO = 2.0


class Outcomes(NamedTuple):
    """Per scored example (:func:`fold_outcomes`).

    Attributes
    ----------
    losses : numpy.ndarray
        ``-log p(label)``, ``p`` clipped to at least ``min_prob``.
    predictions : numpy.ndarray of int64
        The model's class (a position 0..C-1).
    confidence : numpy.ndarray
        Its probability.
    decisive : numpy.ndarray of bool
        Whether it is at least ``DECISIVE_RATIO`` times as likely as the runner-up.
    confident : numpy.ndarray of bool
        Decisive, and not the label.
    """

    losses: np.ndarray
    predictions: np.ndarray
    confidence: np.ndarray
    decisive: np.ndarray
    confident: np.ndarray


def fold_outcomes(proba: np.ndarray, labels: np.ndarray, min_prob: float) -> Outcomes:
    """The outcomes of a model's class probabilities on the examples it scores.

    Parameters
    ----------
    proba : numpy.ndarray
        ``n x C`` class probabilities.
    labels : numpy.ndarray of int
        The examples' class positions 0..C-1.
    min_prob : float
        Probabilities are clipped to at least this in the losses.

    Returns
    -------
    Outcomes

    Example
    -------
    >>> import numpy as np
    >>> out = fold_outcomes(np.array([[0.9, 0.1], [0.55, 0.45]]), np.array([1, 0]), 1e-3)
    >>> out.losses.round(3).tolist(), out.decisive.tolist(), out.confident.tolist()
    ([2.303, 0.598], [True, False], [True, False])
    """
    rows = np.arange(len(labels))
    p = proba[rows, labels]
    predictions = proba.argmax(axis=1)
    ranked = np.sort(proba, axis=1)
    runner_up = ranked[:, -2] if proba.shape[1] > 1 else np.zeros(len(labels))
    decisive = ranked[:, -1] >= DECISIVE_RATIO * runner_up
    return Outcomes(
        losses=-np.log(np.clip(p, min_prob, 1.0)),
        predictions=predictions,
        confidence=ranked[:, -1],
        decisive=decisive,
        confident=decisive & (predictions != labels),
    )


__all__ = ["DECISIVE_RATIO", "Outcomes", "fold_outcomes"]
