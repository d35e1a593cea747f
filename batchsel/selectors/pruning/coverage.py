"""Coverage-centric selection (CCS; Zheng et al., ICLR 2023): a budget of examples drawn
evenly over the strata of a difficulty score instead of only the hardest."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from batchsel.core.checks import check_int, check_number, check_seed, tensor_to_numpy


def _strata(values: np.ndarray, strata: int) -> np.ndarray:
    """The stratum of each of ``values`` (finite): ``strata`` bins of equal width
    from ``min(0, values)`` to ``max(0, values)``, the top edge in the last bin."""
    low, high = values.min(initial=0.0), values.max(initial=0.0)
    with np.errstate(over="ignore"):
        width = (high - low) / strata
    scale = 1.0
    if not np.isfinite(width):
        # high - low overflows float64 (scores near +-1e308): the same bins from the halves,
        # whose differences are exact halves and stay finite
        scale = 0.5
        width = (high * scale - low * scale) / strata
    if not width > 0:  # all tie (or a range too narrow to cut): one stratum
        return np.zeros(len(values), dtype=np.int64)
    return np.minimum(((values * scale - low * scale) / width).astype(np.int64), strata - 1)


def coverage_centric_selection(
    scores: Any, count: int, *, strata: int = 50, hard_cut: float = 0.0, seed: int = 0
) -> np.ndarray:
    """Coverage-centric selection (CCS; Zheng et al., ICLR 2023): ``count`` examples chosen
    over the whole range of difficulty ``scores`` (higher: harder) rather than only the
    hardest, which collapse at high pruning rates.

    The ``hard_cut`` share of the hardest examples is dropped first (at high pruning rates
    they are mostly mislabelled or ambiguous); the rest are cut into ``strata`` bins of equal
    score width, and the budget is spread evenly: the least populated bin takes all of its
    examples or its even share of what is left, whichever is smaller, then the next, each
    bin's examples drawn at random. Returns the chosen indices, sorted. It costs a sort of
    the scores and a pass over them, whatever ``strata``; any finite scores are binned (up
    to +-1.8e308: their range is not taken as one difference, which would overflow).

    >>> picked = coverage_centric_selection(np.arange(100.0), 20, strata=4, hard_cut=0.2)
    >>> len(picked), int(picked.max()) < 80, np.bincount(picked // 20).tolist()
    (20, True, [5, 5, 5, 5])
    """
    s = np.asarray(tensor_to_numpy(scores), dtype=np.float64)
    if s.ndim != 1 or not np.isfinite(s).all():
        raise ValueError(
            f"scores must be a 1-D array of finite numbers, got shape {s.shape}"
            + ("" if s.ndim != 1 else " with NaN or inf")
        )
    strata = check_int(strata, "strata", minimum=1)
    hard_cut = check_number(hard_cut, "hard_cut", 0.0, 1.0)
    if hard_cut >= 1.0:
        raise ValueError(f"hard_cut must be in [0, 1), got {hard_cut!r}")
    order = np.argsort(s, kind="stable")  # easiest first; ties by index
    pool = order[: len(s) - int(math.floor(hard_cut * len(s)))]
    count = check_int(count, "count", minimum=0, maximum=len(pool))
    rng = np.random.default_rng([check_seed(seed), 7])
    stratum = _strata(s[pool], strata)
    # pool is in score order, so every stratum is a run of it: cut where the stratum changes
    # (the non-empty strata, in order, with no pass over the empty ones)
    bins = np.split(pool, np.flatnonzero(np.diff(stratum)) + 1) if len(pool) else []
    picked, left = [], count
    for i, b in enumerate(sorted(bins, key=len)):  # stable: equal sizes stay in score order
        take = min(len(b), left // (len(bins) - i))
        picked.append(rng.choice(b, size=take, replace=False))
        left -= take
    return np.sort(np.concatenate(picked)) if picked else np.zeros(0, dtype=np.int64)


__all__ = ["coverage_centric_selection"]
