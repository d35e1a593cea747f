"""CandidateFilter's input checks: the candidates' indices, their scores and the
irreducible losses, each refused with a message that names the input."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchsel.core.checks import tensor_to_numpy


def check_candidates(indices: Any, count: int | None = None) -> np.ndarray:
    """The candidates' dataset indices as a 1-D int64 array.

    Parameters
    ----------
    indices : array-like or tensor of int
        The candidates' dataset indices (non-empty, 1-D, >= 0).
    count : int or None, default None
        When given, the number of rows of the candidates' logits: ``indices`` must hold as
        many (``ValueError`` naming both counts otherwise).

    Returns
    -------
    numpy.ndarray
        ``indices`` as int64 (no copy when they already are).

    Example
    -------
    >>> check_candidates([4, 2, 9]).tolist()
    [4, 2, 9]
    >>> check_candidates([4, 2], count=3)
    Traceback (most recent call last):
    ...
    ValueError: logits has 3 rows but 2 indices were given: one row per candidate
    """
    idx = np.asarray(tensor_to_numpy(indices))
    if idx.ndim != 1 or idx.size == 0:
        raise ValueError(f"indices must be a non-empty 1-D array of dataset indices, got shape {idx.shape}")
    if not np.issubdtype(idx.dtype, np.integer):
        raise TypeError(f"indices must be integers, got dtype {idx.dtype}")
    if idx.min() < 0:
        raise ValueError(f"indices must be >= 0, found {int(idx.min())}")
    if count is not None and len(idx) != count:
        raise ValueError(f"logits has {count} rows but {len(idx)} indices were given: one row per candidate")
    return idx.astype(np.int64, copy=False)


def check_scores(scores: Any, count: int) -> np.ndarray:
    """One finite float64 score per candidate.

    Parameters
    ----------
    scores : array-like or tensor of numbers
        The candidates' scores, larger = more worth training on.
    count : int
        The number of candidates.

    Returns
    -------
    numpy.ndarray
        ``scores`` as a float64 array of shape ``(count,)`` (``TypeError`` for scores
        that are not numbers, ``ValueError`` for another shape or a NaN / inf).

    Example
    -------
    >>> check_scores([1, 2.5], 2).tolist()
    [1.0, 2.5]
    """
    s = np.asarray(tensor_to_numpy(scores))
    if s.dtype == object or not np.issubdtype(s.dtype, np.number):
        raise TypeError(f"scores must be numeric, got dtype {s.dtype}")
    s = s.astype(np.float64).reshape(-1) if s.ndim <= 1 else s
    if s.shape != (count,):
        raise ValueError(f"scores has shape {s.shape}, expected ({count},): one score per candidate")
    if not np.isfinite(s).all():
        pos = int(np.flatnonzero(~np.isfinite(s))[0])
        raise ValueError(f"scores contain NaN or inf (first at position {pos}: {s[pos]})")
    return s


def check_irreducible(values: Any) -> np.ndarray:
    """Every example's irreducible loss as a 1-D float64 array.

    Parameters
    ----------
    values : array-like, tensor or fitted IrreducibleLoss
        One irreducible loss per example (NaN allowed: an example not to train on), or a
        fitted :class:`~batchsel.loop.irreducible.IrreducibleLoss`, whose ``losses_``
        are taken.

    Returns
    -------
    numpy.ndarray
        The losses as float64 (``TypeError`` when not numbers, ``ValueError`` for
        another shape or an inf).

    Example
    -------
    >>> check_irreducible([0.5, float("nan"), 2]).tolist()
    [0.5, nan, 2.0]
    """
    values = getattr(values, "losses_", values)  # a fitted IrreducibleLoss
    il = np.asarray(tensor_to_numpy(values))
    if il.dtype == object or not np.issubdtype(il.dtype, np.number):
        raise TypeError(f"irreducible_losses must be numeric, got dtype {il.dtype}")
    il = il.astype(np.float64)
    if il.ndim != 1 or il.size == 0:
        raise ValueError(f"irreducible_losses must be a non-empty 1-D array (one per example), got shape {il.shape}")
    if np.isinf(il).any():
        raise ValueError(f"irreducible_losses contain inf (first at example {int(np.flatnonzero(np.isinf(il))[0])})")
    return il


__all__ = ["check_candidates", "check_scores", "check_irreducible"]
