"""Which examples each irreducible-loss model is fit on and which it scores: cross-fitting
folds (every example scored by a model not fit on it) or one random holdout."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Folds(NamedTuple):
    """The split of :func:`split_folds`.

    Attributes
    ----------
    fold : numpy.ndarray of int64
        The fold of every example (cross-fitting), -1 on the holdout.
    train_indices, holdout_indices : numpy.ndarray of int64
        The examples to train on (all of them when cross-fitting) and the holdout.
    splits : list of (numpy.ndarray, numpy.ndarray)
        Per model: the examples it is fit on and those it scores.
    """

    fold: np.ndarray
    train_indices: np.ndarray
    holdout_indices: np.ndarray
    splits: list[tuple[np.ndarray, np.ndarray]]


def split_folds(n: int, folds: int, holdout: float | int | None, seed: int) -> Folds:
    """Split ``n`` examples for :class:`~batchsel.loop.irreducible.IrreducibleLoss`.

    Parameters
    ----------
    n : int
        The examples.
    folds : int
        K of the cross-fitting (ignored with ``holdout``).
    holdout : float, int or None
        None (cross-fit), a fraction in (0, 1) or a number of examples: one model fit on
        a random holdout of that size scores the others.
    seed : int
        Seeds the random split.

    Returns
    -------
    Folds
        (``ValueError`` when there are fewer examples than folds, or when the holdout
        leaves nothing to train on or holds less than one example.)

    Example
    -------
    >>> folds = split_folds(6, 3, None, 0)
    >>> sorted(folds.fold.tolist()), len(folds.splits), folds.holdout_indices.tolist()
    ([0, 0, 1, 1, 2, 2], 3, [])
    >>> split_folds(6, 3, 2, 0).train_indices.size
    4
    """
    rng = np.random.default_rng([seed, 0x1055])
    perm = rng.permutation(n)
    fold = np.full(n, -1, dtype=np.int64)
    if holdout is None:
        if folds > n:
            raise ValueError(f"folds={folds} is more than the {n} examples")
        fold[perm] = np.arange(n) % folds
        splits = [(np.flatnonzero(fold != f), np.flatnonzero(fold == f)) for f in range(folds)]
        return Folds(fold, np.arange(n, dtype=np.int64), np.empty(0, np.int64), splits)
    count = int(holdout) if isinstance(holdout, (int, np.integer)) else round(holdout * n)
    if count >= n:
        raise ValueError(
            f"holdout={holdout!r} ({count} examples) leaves nothing to train on: the data has {n} examples"
        )
    if count < 1:
        raise ValueError(f"holdout={holdout!r} is less than one of the {n} examples")
    holdout_indices = np.sort(perm[:count]).astype(np.int64)
    train_indices = np.sort(perm[count:]).astype(np.int64)
    return Folds(fold, train_indices, holdout_indices, [(holdout_indices, train_indices)])


__all__ = ["Folds", "split_folds"]
