"""The compiled loops of sieve-streaming: a row's gain against a sieve's state
(:func:`gain`), every row's singleton value (:func:`singletons`) and one sieve's pass over a
run of rows (:func:`scan`), for the feature-based concave functions and for facility
location over a reference (the objective ``kind``: :data:`KINDS`, :data:`FACILITY`).

The sieve is sequential row by row (a row's gain depends on the rows the sieve took
before it): one compiled pass per sieve and block, no temporaries. No fastmath: the sums
run in a fixed order whatever the row's address, so any chunking gives the same result.
"""

from __future__ import annotations

import numpy as np
from numba import njit

SQRT, LOG, INVERSE, MIN, FACILITY = 0, 1, 2, 3, 4
# the kernel's kind for each concave function of FeatureBased (a callable has none)
KINDS = {"sqrt": SQRT, "log": LOG, "inverse": INVERSE, "sigmoid": INVERSE, "min": MIN}


@njit(cache=True, nogil=True, inline="always")
def gain(kind, param, row, state):
    """The gain of ``row`` against a sieve's ``state`` (float64 feature sums, or the
    reference's coverage for ``FACILITY``): ``sum_f increment(state[f], row[f])`` for the
    objective ``kind`` (``param``: the saturation of ``MIN``)."""
    acc = 0.0
    tiny = 2.2250738585072014e-308
    for f in range(row.shape[0]):
        x = np.float64(row[f])
        if x == 0.0:  # every term is 0 there (ReLU features are half zeros); the sum is unchanged
            continue
        c = state[f]
        if kind == FACILITY:  # max(sim - coverage, 0)
            acc += max(x - c, 0.0)
        elif kind == SQRT:  # sqrt(c + x) - sqrt(c), in a form monotone in c
            acc += x / max(np.sqrt(c + x) + np.sqrt(c), tiny)
        elif kind == LOG:
            acc += np.log1p(x / (1.0 + c))
        elif kind == INVERSE:
            acc += x / ((1.0 + c) * (1.0 + c + x))
        else:  # min(c + x, a) - min(c, a)
            acc += max(min(x, param - c), 0.0)
    return acc


@njit(cache=True, nogil=True)
def singletons(kind, param, block, zero, out):
    """Every row's singleton value (its gain against the all-zero state ``zero``) into ``out``."""
    for t in range(block.shape[0]):
        out[t] = gain(kind, param, block[t], zero)


@njit(cache=True, nogil=True)
def scan(kind, param, block, single, start, stop, k, v, state, indices, gains, size, value, base, added):
    """Sieve ``v`` over rows ``start .. stop - 1``: returns (size, value, evaluations,
    rows added); ``added`` gets the positions of the rows taken."""
    evaluations = 0
    n_added = 0
    for t in range(start, stop):
        if size >= k:
            break
        threshold = (v / 2.0 - value) / (k - size)
        s = single[t]
        # a gain never exceeds the singleton value (the terms are monotone in the state)
        if s <= 0.0 or s < threshold:
            continue
        g = gain(kind, param, block[t], state)
        evaluations += 1
        if g > 0.0 and g >= threshold:
            row = block[t]
            if kind == FACILITY:
                for f in range(row.shape[0]):
                    state[f] = max(state[f], np.float64(row[f]))
            else:
                for f in range(row.shape[0]):
                    state[f] += np.float64(row[f])
            indices[size] = base + t
            gains[size] = g
            value += g
            size += 1
            added[n_added] = t
            n_added += 1
    return size, value, evaluations, n_added
