"""AutoSelector's per-step kernels: the losses stored and the signal's counts kept, in one
pass; a batch's examples marked (no numpy fancy indexing on every step)."""

from __future__ import annotations

import numpy as np
from numba import njit

from batchsel.selectors.feedback_checks import in_range_and_finite


@njit(cache=True, nogil=True)
def record_losses(
    raw, ranking, pending, counts, idx, values, threshold, fitted_below, cut, num_examples, log, at
):  # pragma: no cover - numba
    """Store ``values`` at ``idx``, keep ``counts`` (seen, misfit, fitted) exact and write
    ``idx`` to the change log; where an index is out of range or a loss not finite, write
    nothing and return False.

    Parameters
    ----------
    raw : numpy.ndarray of float64, shape (N,)
        The losses as observed, +inf for an example not seen yet; updated in place.
    ranking : numpy.ndarray of float64, shape (N,)
        What the ranking sees; updated in place (the raw loss, or 0 for a misfit one when
        ``cut``).
    pending : numpy.ndarray of bool, shape (N,)
        Loss-rank's pending marks; cleared at ``idx``.
    counts : numpy.ndarray of int64, shape (3,)
        Examples seen, misfit (raw loss above ``threshold``) and fitted (below
        ``fitted_below``).
    idx : numpy.ndarray of int64
        The examples, in the order observed (a repeated index: its last loss counts).
    values : numpy.ndarray of float64
        Their losses.
    threshold : float
        The misfit threshold (+inf while unknown: nothing is misfit).
    fitted_below : float
        The fitted cut, at most ``threshold`` so that no loss counts as both (-inf while
        unknown: nothing is fitted).
    cut : bool
        Rank the misfit examples as learnt (loss 0).
    num_examples : int
        ``N``: the indices must be in ``[0, N)``.
    log : numpy.ndarray of int64
        The change log's buffer, written from ``at`` on (``ChangeLog.room``).
    at : int
        Where ``idx`` goes in ``log``.

    Returns
    -------
    bool
        Whether the batch was stored (every index in range, every loss finite).

    Examples
    --------
    >>> import numpy as np
    >>> raw, ranking = np.full(4, np.inf), np.full(4, np.inf)
    >>> counts = np.zeros(3, np.int64)
    >>> log = np.empty(3, np.int64)
    >>> record_losses(raw, ranking, np.zeros(4, np.bool_), counts, np.array([0, 1, 1]),
    ...               np.array([3.0, 0.1, 0.5]), 2.0, 1.0, False, 4, log, 0)
    True
    >>> counts.tolist(), raw.tolist(), log.tolist()
    ([2, 1, 1], [3.0, 0.5, inf, inf], [0, 1, 1])
    """
    if not in_range_and_finite(idx, values, num_examples):
        return False
    for i in range(idx.size):
        j = idx[i]
        log[at + i] = j
        old = raw[j]
        if old < np.inf:
            counts[0] -= 1
            counts[1] -= old > threshold
            counts[2] -= old < fitted_below
        v = values[i]
        raw[j] = v
        counts[0] += 1
        counts[1] += v > threshold
        counts[2] += v < fitted_below
        ranking[j] = 0.0 if cut and v > threshold else v
        pending[j] = False
    return True


@njit(cache=True, nogil=True)
def mark(flags, idx):  # pragma: no cover - numba
    """``flags[idx] = True`` in one pass.

    Examples
    --------
    >>> import numpy as np
    >>> flags = np.zeros(4, np.bool_)
    >>> mark(flags, np.array([3, 1]))
    >>> flags.tolist()
    [False, True, False, True]
    """
    for i in range(idx.size):
        flags[idx[i]] = True
