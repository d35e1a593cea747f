"""CandidateFilter's selection rules on the host (numpy): the uniform share's draw, the
top-B by score and Selective-Backprop's percentile draw. The torch versions for logits on
an accelerator are in :mod:`batchsel.loop.filters.device`."""

from __future__ import annotations

import math
import zlib
from typing import Any

import numpy as np

from batchsel.core.checks import check_int, check_number, tensor_to_numpy

PICKS = ("top", "percentile")


def check_pick(pick: str, beta: float, window: int, diversity: float) -> tuple[str, float, int]:
    """The filter's ``pick``, ``beta`` and ``window``, checked.

    Parameters
    ----------
    pick : {"top", "percentile"}
        The rule.
    beta : float
        ``"percentile"``'s exponent (> 0).
    window : int
        ``"percentile"``'s history length (>= 1).
    diversity : float
        The filter's ``diversity``: ``"percentile"`` draws by score alone, so it must be 0.

    Returns
    -------
    tuple
        ``(pick, beta, window)`` (``ValueError`` naming a setting out of range).

    Example
    -------
    >>> check_pick("percentile", 2, 64, 0.0)
    ('percentile', 2.0, 64)
    """
    if pick not in PICKS:
        raise ValueError(f"pick must be one of {PICKS}, got {pick!r}")
    if pick == "percentile" and diversity > 0:
        raise ValueError(f"pick='percentile' draws by score alone; diversity={diversity} needs pick='top'")
    checked = check_number(beta, "beta", low=0.0)
    if checked == 0:
        raise ValueError(f"beta must be > 0, got {beta!r}")
    return pick, checked, check_int(window, "window", minimum=1)


def uniform_draw(
    seed: int, step: int, idx: np.ndarray, share: float, kept: int
) -> tuple[int, np.random.Generator, np.ndarray]:
    """The uniform share of a kept batch: ``round(share * kept)`` candidate positions
    drawn without replacement, from the generator of ``(seed, step, crc32(idx))``.

    Seeded by the candidates, so ranks draw independently, and by the step, so a resumed
    run draws what the uninterrupted one did.

    Parameters
    ----------
    seed : int
        The filter's seed.
    step : int
        The step (the filter's ``steps_``).
    idx : numpy.ndarray of int64
        The candidates' dataset indices.
    share : float
        The uniform share in [0, 1] (the filter's ``uniform_share()``).
    kept : int
        The examples kept (<= ``len(idx)``).

    Returns
    -------
    count : int
        The positions drawn.
    rng : numpy.random.Generator
        The step's generator, after the draw (the percentile rule draws on from it).
    positions : numpy.ndarray of int64
        The drawn positions, sorted.

    Example
    -------
    >>> import numpy as np
    >>> count, _, pos = uniform_draw(0, 0, np.arange(10, 20), 0.5, 6)
    >>> count, len(pos), bool((np.diff(pos) > 0).all())
    (3, 3, True)
    """
    count = int(math.floor(share * kept + 0.5))
    rng = np.random.default_rng([seed, step, zlib.crc32(idx.astype("<i8").tobytes())])
    uniform = np.sort(rng.choice(len(idx), size=count, replace=False)) if count else np.empty(0, np.int64)
    return count, rng, uniform


def top_scores(s: np.ndarray, uniform: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` positions of largest score outside ``uniform`` (ties to the smaller).

    Parameters
    ----------
    s : numpy.ndarray
        One score per candidate.
    uniform : numpy.ndarray of int
        The positions already drawn uniformly.
    count : int
        Positions to pick.

    Returns
    -------
    numpy.ndarray of int64

    Example
    -------
    >>> import numpy as np
    >>> top_scores(np.array([0.1, 5.0, 2.0, 5.0]), np.array([1]), 2).tolist()
    [3, 2]
    """
    rest = np.setdiff1d(np.arange(len(s)), uniform)
    return rest[np.argsort(-s[rest], kind="stable")[:count]]


def percentile_draw(
    history: Any, s: np.ndarray, rest: np.ndarray, count: int, rng: np.random.Generator, beta: float, window: int
) -> tuple[np.ndarray, np.ndarray]:
    """Selective-Backprop's rule: ``count`` of the positions ``rest``, drawn without
    replacement with weights ``CDF(score) ** beta`` over the latest ``window`` scores
    (Efraimidis-Spirakis keys ``log(u) / w``).

    Parameters
    ----------
    history : array-like or tensor
        The scores seen before this batch, oldest first.
    s : numpy.ndarray
        This batch's scores (one per candidate).
    rest : numpy.ndarray of int
        The positions to draw from (those not drawn uniformly).
    count : int
        Positions to draw.
    rng : numpy.random.Generator
        The step's generator (:func:`uniform_draw`'s).
    beta : float
        The exponent (> 0).
    window : int
        The history's length (>= 1).

    Returns
    -------
    picked : numpy.ndarray of int64
        The drawn positions, in the order drawn.
    history : numpy.ndarray
        The latest ``window`` scores, this batch's included.

    Example
    -------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> picked, history = percentile_draw(np.empty(0), np.array([3.0, 1.0, 2.0]), np.arange(3), 2, rng, 1.0, 4)
    >>> len(picked), history.tolist()
    (2, [3.0, 1.0, 2.0])
    """
    history = np.concatenate([tensor_to_numpy(history), s])[-window:]
    cdf = np.searchsorted(np.sort(history), s[rest], side="right") / len(history)
    keys = np.log(rng.random(len(rest))) / np.maximum(cdf**beta, 1e-300)
    return rest[np.argsort(-keys, kind="stable")[:count]], history


def pick_rest(
    rule: str,
    s: np.ndarray,
    uniform: np.ndarray,
    count: int,
    rng: np.random.Generator,
    history: Any,
    beta: float,
    window: int,
) -> tuple[np.ndarray, Any]:
    """The ``count`` positions outside ``uniform`` that ``rule`` picks.

    Parameters
    ----------
    rule : {"top", "percentile"}
        :func:`top_scores` or :func:`percentile_draw`.
    s : numpy.ndarray
        One score per candidate.
    uniform : numpy.ndarray of int
        The positions drawn uniformly.
    count : int
        Positions to pick (0: none, and the history stays as it was).
    rng : numpy.random.Generator
        The step's generator.
    history, beta, window
        ``"percentile"``'s history (scores seen, oldest first), exponent and window.

    Returns
    -------
    picked : numpy.ndarray of int64
    history : numpy.ndarray
        The history after this batch.

    Example
    -------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> pick_rest("top", np.array([0.1, 5.0, 2.0]), np.empty(0, np.int64), 2, rng, np.empty(0), 1.0, 8)[0].tolist()
    [1, 2]
    """
    if count == 0:
        return np.empty(0, np.int64), history
    if rule == "percentile":
        rest = np.setdiff1d(np.arange(len(s)), uniform)
        return percentile_draw(history, s, rest, count, rng, beta, window)
    return top_scores(s, uniform, count), history


__all__ = ["PICKS", "check_pick", "uniform_draw", "top_scores", "percentile_draw", "pick_rest"]
