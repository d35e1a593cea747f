"""CandidateFilter's ``diversity`` pick: greedy score-plus-facility-location over the
candidates' embeddings (docs: design/filters.md)."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchsel.core.checks import check_scale, load_embeddings


def similarity(x: np.ndarray) -> np.ndarray:
    """``exp(-|x_i - x_j|^2 / sigma^2)`` (float32), sigma^2 the mean squared distance of
    distinct points (1 for every pair when all points coincide).

    Parameters
    ----------
    x : numpy.ndarray
        The candidates' embeddings (n x d).

    Returns
    -------
    numpy.ndarray
        The n x n similarities (1 on the diagonal).

    Example
    -------
    >>> import numpy as np
    >>> similarity(np.array([[0.0], [1.0]], dtype=np.float32)).astype(np.float64).round(3).tolist()
    [[1.0, 0.368], [0.368, 1.0]]
    """
    x = x - x.mean(axis=0)  # centered: the Gram trick loses less precision
    sq = np.einsum("ij,ij->i", x, x)
    d2 = x @ x.T
    d2 *= -2.0
    d2 += sq[:, None]
    d2 += sq[None, :]
    np.maximum(d2, 0.0, out=d2)
    np.fill_diagonal(d2, 0.0)
    n = len(x)
    sigma2 = float(d2.sum(dtype=np.float64)) / max(n * (n - 1), 1)
    if sigma2 <= 0:
        return np.ones((n, n), dtype=np.float32)
    d2 *= -1.0 / sigma2
    return np.exp(d2, out=d2)


def check_embeddings(embeddings: Any, count: int, diversity: float) -> np.ndarray:
    """The candidates' embeddings for the ``diversity`` pick, as float32.

    Parameters
    ----------
    embeddings : array-like, tensor or None
        One row per candidate (``ValueError`` when missing or of another length).
    count : int
        The number of candidates.
    diversity : float
        The filter's ``diversity`` (named in the message when ``embeddings`` is None).

    Returns
    -------
    numpy.ndarray
        ``count x d`` float32 (``ValueError`` naming ``embeddings`` for rows so large
        that their distances overflow float32).

    Example
    -------
    >>> check_embeddings([[0.0, 1.0], [1.0, 0.0]], 2, 1.0).shape
    (2, 2)
    """
    if embeddings is None:
        raise ValueError(f"diversity={diversity} needs the candidates' embeddings")
    emb = load_embeddings(embeddings, "embeddings")
    if emb.shape[0] != count:
        raise ValueError(f"embeddings has {emb.shape[0]} rows, expected {count} (one per candidate)")
    # distances of huge embeddings overflow float32: name the input, not the similarity
    check_scale(emb, "embeddings", center=emb.mean(axis=0, dtype=np.float64), underflow=False)
    return emb


def diverse_pick(s: np.ndarray, emb: np.ndarray, uniform: np.ndarray, k: int, diversity: float) -> np.ndarray:
    """The positions the greedy adds to ``uniform`` to keep ``k``: it maximizes
    ``sum_{i in S} r_i + diversity * (k / n) * FL(S)``, ``r`` the scores' ranks scaled to
    [0, 1] and ``FL`` the facility location of :func:`similarity` over the candidates,
    with the uniform draws counted as already chosen.

    Parameters
    ----------
    s : numpy.ndarray
        One score per candidate.
    emb : numpy.ndarray
        The candidates' embeddings (:func:`check_embeddings`).
    uniform : numpy.ndarray of int
        The positions drawn uniformly.
    k : int
        Examples kept in all (``len(uniform)`` of them uniform).
    diversity : float
        lambda > 0, the weight of the facility-location term.

    Returns
    -------
    numpy.ndarray of int64
        ``k - len(uniform)`` positions, in the order the greedy picked them.

    Example
    -------
    >>> import numpy as np
    >>> emb = np.array([[0.0], [0.1], [5.0], [5.1]], dtype=np.float32)
    >>> sorted(diverse_pick(np.array([1.0, 0.9, 0.0, 0.1]), emb, np.empty(0, np.int64), 2, 1.0).tolist())
    [0, 3]
    """
    from scipy.stats import rankdata

    from batchsel.submodular.functions import FacilityLocation, Mixture, Modular
    from batchsel.submodular.optimizers import maximize

    n = len(s)
    scaled = (rankdata(s) - 1.0) / max(n - 1, 1)  # score ranks in [0, 1], ties share a rank
    f = Mixture([Modular(scaled), FacilityLocation(similarity(emb))], weights=[1.0, diversity * k / n])
    # naive greedy: one vectorized gain pass over the |C| candidates per pick beats the lazy
    # queue's Python bookkeeping at these sizes (same picks: ties go to the smaller index)
    return maximize(f, k - len(uniform), "naive", initial=uniform if len(uniform) else None).indices


__all__ = ["similarity", "check_embeddings", "diverse_pick"]
