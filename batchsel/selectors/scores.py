"""Per-example scores from a forward pass: the cross-entropy and the gradient-norm bound,
shared by the candidate filters (:mod:`batchsel.loop.filters`) and score pruning
(:class:`batchsel.selectors.pruning.ScorePruningSelector`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchsel.core.checks import tensor_to_numpy


def check_logits(logits: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    """``logits`` as finite float64 (n x classes) and ``labels`` as their int64 class ids.

    Parameters
    ----------
    logits : array-like or tensor
        A non-empty n x classes array of numbers (``TypeError`` otherwise; ``ValueError``
        for another shape or a NaN / inf, naming its row).
    labels : array-like or tensor of int
        One class id per row (:func:`check_class_ids`).

    Returns
    -------
    logits, labels : numpy.ndarray
        float64 and int64.

    Example
    -------
    >>> z, y = check_logits([[1, 0], [0, 1]], [1, 0])
    >>> z.dtype, y.tolist()
    (dtype('float64'), [1, 0])
    """
    z = np.asarray(tensor_to_numpy(logits))
    if z.dtype == object or not (np.issubdtype(z.dtype, np.number)):
        raise TypeError(f"logits must be numeric, got dtype {z.dtype}")
    if z.ndim != 2 or z.shape[0] == 0 or z.shape[1] == 0:
        raise ValueError(f"logits must be a non-empty 2-D array (n x classes), got shape {z.shape}")
    z = z.astype(np.float64)
    if not np.isfinite(z).all():
        row = int(np.argwhere(~np.isfinite(z))[0, 0])
        raise ValueError(f"logits contain NaN or inf (first at row {row}): has training diverged?")
    return z, check_class_ids(labels, z.shape)


def check_class_ids(labels: Any, shape: tuple[int, ...]) -> np.ndarray:
    """``labels`` as int64 class ids of the rows of logits of ``shape`` (n x classes): one
    per row, each a column of the logits (``ValueError`` naming the shapes or the label
    out of range, ``TypeError`` for labels that are not integers).

    Parameters
    ----------
    labels : array-like or tensor of int
        The class ids.
    shape : tuple of int
        The logits' shape (n, classes).

    Returns
    -------
    numpy.ndarray
        The labels as int64.

    Example
    -------
    >>> check_class_ids([2, 0], (2, 3)).tolist()
    [2, 0]
    >>> check_class_ids([3, 0], (2, 3))
    Traceback (most recent call last):
    ...
    ValueError: labels must be in [0, 3) (the classes of logits of shape (2, 3)), found 3
    """
    y = np.asarray(tensor_to_numpy(labels))
    if y.ndim != 1 or y.shape[0] != shape[0]:
        raise ValueError(
            f"labels must be 1-D with one entry per row of logits (shape {tuple(shape)}), got shape {y.shape}"
        )
    if y.size and not np.issubdtype(y.dtype, np.integer):
        raise TypeError(f"labels must be integer class ids, got dtype {y.dtype}")
    # the range is checked before the int64 cast, which wraps uint64 ids >= 2**63 to negatives
    if y.size and (y.min() < 0 or y.max() >= shape[1]):
        bad = y[(y < 0) | (y >= shape[1])][0]
        raise ValueError(
            f"labels must be in [0, {shape[1]}) (the classes of logits of shape {tuple(shape)}), found {int(bad)}"
        )
    return y.astype(np.int64)


def log_softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise ``log softmax(z)``, shifted by each row's maximum so that no ``exp``
    overflows.

    Parameters
    ----------
    z : numpy.ndarray
        n x classes logits (finite).

    Returns
    -------
    numpy.ndarray
        Their log-probabilities, same shape.

    Example
    -------
    >>> import numpy as np
    >>> np.exp(log_softmax(np.array([[1000.0, 1000.0]]))).tolist()
    [[0.5, 0.5]]
    """
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def loss_scores(logits: Any, labels: Any) -> np.ndarray:
    """Per-example cross-entropy ``-log softmax(logits)[y]`` (float64), from numpy arrays
    or tensors.

    Parameters
    ----------
    logits : array-like or tensor
        n x classes logits (finite).
    labels : array-like or tensor of int
        One class id per row.

    Returns
    -------
    numpy.ndarray
        n losses (float64).

    See Also
    --------
    gradnorm_scores : the gradient-norm bound, from the same inputs.

    Example
    -------
    >>> import numpy as np
    >>> loss_scores(np.array([[2.0, 0.0], [0.0, 0.0]]), np.array([0, 1])).round(3).tolist()
    [0.127, 0.693]
    """
    z, y = check_logits(logits, labels)
    return -log_softmax(z)[np.arange(len(y)), y]


def gradnorm_scores(logits: Any, labels: Any, hidden: Any = None) -> np.ndarray:
    """Katharopoulos & Fleuret's per-example gradient-norm bound:
    ``|softmax(z) - onehot(y)|_2``, times ``|h|_2`` when the last hidden layer's
    activations ``hidden`` (n x d) are given (the gradient of the last linear layer's
    weights is their outer product).

    Parameters
    ----------
    logits, labels
        As in :func:`loss_scores`.
    hidden : array-like, tensor or None, default None
        The last hidden layer's activations, one row per example (finite).

    Returns
    -------
    numpy.ndarray
        n bounds (float64).

    See Also
    --------
    loss_scores : the cross-entropy, from the same inputs.

    Example
    -------
    >>> import numpy as np
    >>> z, y = np.array([[4.0, 0.0], [0.0, 0.0]]), np.array([0, 0])
    >>> gradnorm_scores(z, y).round(3).tolist()
    [0.025, 0.707]
    >>> gradnorm_scores(z, y, hidden=np.array([[1.0, 0.0], [3.0, 4.0]])).round(3).tolist()
    [0.025, 3.536]
    """
    z, y = check_logits(logits, labels)
    g = np.exp(log_softmax(z))
    g[np.arange(len(y)), y] -= 1.0
    norms = np.sqrt((g * g).sum(axis=1))
    if hidden is not None:
        h = np.asarray(tensor_to_numpy(hidden), dtype=np.float64)
        h = h.reshape(h.shape[0], -1) if h.ndim > 1 else h
        if h.ndim != 2 or h.shape[0] != len(y):
            raise ValueError(f"hidden must have one row per example ({len(y)}), got shape {h.shape}")
        if not np.isfinite(h).all():
            raise ValueError("hidden contains NaN or inf")
        norms = norms * np.sqrt((h * h).sum(axis=1))
    return norms
