"""Submodular batch selection (SMDL; Joseph, Teja R, Singh, Balasubramanian, IJCAI 2019).

Each step picks a batch S of size B from a candidate pool P of this rank's unused examples
(``pool_size`` of them, see "Order within the epoch" below) by greedily maximizing

    F(S) = l_u U(S) + l_r R(S) + l_m M(S) + l_f Fm(S)

- ``U(S) = sum_{x in S} H(softmax(logits(x)))`` uncertainty, from the latest logits given to
  :meth:`SubmodularSelector.observe`;
- ``R(S) = sum_{i in Q} max_{s in S} sim(i, s)``: facility location of S over the pool, a
  properly submodular diversity term (the paper's sum of minimum distances is not), with
  ``sim(i, j) = exp(-|x_i - x_j|^2 / sigma^2)``, sigma^2 the pool's mean pairwise squared
  distance. Q is the pool (``coverage_size=None``) or a random subset of it of
  ``coverage_size`` examples, which keeps the similarity matrix at ``|P| x |Q|``; then the
  points of Q do not cover themselves (``sim(i, i) = 0``), so R estimates how well S
  covers the pool rather than rewarding picks of Q's own members. Coverage of the whole
  pool improves with |Q| (B = 128 from 1024 clustered points: random batches 845, Q = 256
  922, Q = 512 940, the whole pool 945) and so does the cost (the similarity is half of a
  batch's time at the default 256);
- ``M(S) = sum_{x in S} (c - |x - mu|)``: closeness to the data mean mu, with c the largest
  distance in the pool (so M >= 0 and closer is better);
- ``Fm(S) = sum_f sqrt(sum_{x in S} m_f(x))``: feature match, m = softmax of the embedding.

Unlike the reference code, every term is divided by a *fixed* constant per pool (not by
its own sum at every step, which cancelled the weights): its value on a random batch of
B pool examples. The weights are thus each term's share of a typical batch's objective:
the scales are comparable and every weight changes the result. (Dividing by the largest
singleton gain instead, as DESIGN suggests, makes the facility location irrelevant after a
few picks: its gains saturate while the modular terms keep their full size.) Stochastic
greedy draws a fresh sample of ``ceil(|P| / B * ln(1 / epsilon))`` candidates at every
pick; ``optimizer="lazy"`` is exact greedy. Ties go to the smallest example index. The
cost per batch is ``O(|P| |Q| d + B * sample * (|Q| + d))``, bounded by the pool, never by N.

A batch is one compiled call (numba, without the GIL, without BLAS): the terms, the
similarity product, greedy, the run's bookkeeping and the read of the pool's embeddings;
Python only draws the batch's random numbers. So it neither oversubscribes the cores
with BLAS threads next to other processes nor holds the GIL a sampler's prefetch thread
needs. Its float32 arithmetic is numpy's and OpenBLAS's, operation for operation
(:mod:`batchsel.functions._kernels`), so the picks are those of the numpy implementation it
replaced (tests/test_smdl_kernel.py). B = 128 from a pool of 1024, d = 64, on one core: about
0.3 ms for the similarity product (the core's FMA peak), 0.15 ms for its exp, 0.1-0.15 ms
for greedy, 1.0-2.0 ms per batch in all, the higher figures next to a training step that
evicts the caches (``benchmarks/bench_selectors.py``; the numpy implementation, same runs:
1.3-2.6 ms, and 6 ms with two processes on two cores and default BLAS threads).

With the paper's weights, ``l_m = 0.5`` makes half of the objective closeness to the mean:
batches avoid outliers but are *less* diverse than random ones when classes lie at
different distances from the mean (raw pixels); diversity-leaning weights such as
``(0.2, 0.5, 0.1, 0.2)`` give batches with higher coverage and label entropy than random.

Order within the epoch. A rank uses every example of its shard once per epoch, so
selection decides *when* an example is trained on, not whether. Drawing each pool from all
unused examples let greedy pass over the same examples again and again (with
``l_m = 0.5``, those far from the mean) until the end of the epoch, which then trained on
batches of nothing else: on digits (1347 examples, B = 32) the 10% farthest from the mean
had a mean position of 0.94 in the epoch (0: first batch, 1: last; random 0.47), the last
batches were all of them, and the last one held 3 examples; that step cost the model 35
points of test accuracy. Now the pool is the first ``pool_size`` unused examples of the
shard in its random order, a window that moves through the shard. An example's *turn* is
the batch a random order would put it in, and ``max_delay`` batches later it is *due*:
due examples are in the batch from the start and greedy fills the rest (counting them in
S, so its picks complement them). No example is used more than ``max_delay`` batches after
its turn. Near the end of the epoch the pool gets no new examples and the last batch would
be greedy's leftovers, so over the last ``ceil(pool_size / B)`` batches the share of each
batch taken in turn order grows linearly to all of it. Batch sizes differ by at most one
(:func:`~batchsel.selectors.base.balanced_sizes`).

Measured over 8 epochs, digits (B = 32) / 2000 clustered points with 10% scattered
outliers (B = 64), default settings, before -> now (random batches):

- mean position of the farthest decile: 0.94 -> 0.53 / 0.93 -> 0.54 (0.47 / 0.47);
- its share of the last batch: 1.0 -> 0.19 / 1.0 -> 0.20 (about 0.1), of the worst batch:
  1.0 -> 0.28 / 1.0 -> 0.30 (0.33 / 0.25);
- smallest batch: 3 -> 31 / 16 -> 62 (3 / 16).

The price: about 70% of a batch is due examples; greedy picks the rest from the fresh part
of the pool. ``max_delay=4`` leaves greedy half of the batch, with a mean position of the
farthest decile of 0.57 / 0.60 and a last batch of 0.26 / 0.27 of them; ``max_delay=0`` is
random batches.

Defaults chosen on a validation split (``benchmarks/bench_quality.py --split val``; digits
MLP, mnist1d MLP and 1-D CNN; clean, 25 % label noise, long-tailed, redundant; 3 seeds,
random batches in the same run; the inputs as embeddings). Mean over the 12 cases of the
final-accuracy difference to random, and the worst case:

- paper weights (0.2, 0.1, 0.5, 0.2), ``max_delay=2`` (default): -0.08 pt, worst -0.63 pt,
  never below random by 2 standard errors; steps to random's accuracy 0.97x on average;
- paper weights, ``max_delay=8``: +0.27 pt, worst -0.88 pt;
- diversity-leaning (0.2, 0.5, 0.1, 0.2), ``max_delay=2``: -0.22 pt, worst -2.19 pt;
- the same with ``max_delay=8``: -0.40 pt, worst -3.14 pt (twice below random by > 2 s.e.).

No setting is faster than random beyond seed noise on these tasks; the defaults are the
ones that never hurt. (Before the repair, the paper's weights ended 5.3 points below random
on mnist1d's MLP, and 21 below on digits (76.0 vs 97.2 %), whose last batch held 3 outliers.)
"""
from __future__ import annotations

import logging
import math
from typing import Any, Sequence

import numba
import numpy as np

from .._checks import check_indices, check_int, check_rows, check_scale, load_embeddings
from .._heap import before, heap_pop, heap_push
from ..functions._kernels import einsum_dot, exp_f32, exp_f32_clipped, gemm_fma, pairwise_sum
from .base import OnlineSelector

logger = logging.getLogger(__name__)

OPTIMIZERS = ("stochastic", "lazy")
DEFAULT_WEIGHTS = (0.2, 0.1, 0.5, 0.2)
# Rows of the embeddings read at a time when computing the mean (bounds memory on memmaps).
_MEAN_BLOCK = 1 << 16


@numba.njit(cache=True, fastmath=True, nogil=True)
def _gain(c: int, sim_t: np.ndarray, cover: np.ndarray, modular: np.ndarray, feats: np.ndarray,
          acc: np.ndarray, root: np.ndarray, w_r: float, w_f: float) -> float:
    g = modular[c]
    if w_r != 0.0:
        rf = np.float32(0.0)
        for i in range(sim_t.shape[1]):
            rf += max(sim_t[c, i] - cover[i], np.float32(0.0))
        g += w_r * rf
    if w_f != 0.0:
        f = np.float32(0.0)
        for j in range(feats.shape[1]):
            f += np.sqrt(acc[j] + feats[c, j]) - root[j]
        g += w_f * f
    return g


@numba.njit(cache=True, fastmath=True, nogil=True)
def _add(c: int, sim_t: np.ndarray, cover: np.ndarray, feats: np.ndarray, acc: np.ndarray, root: np.ndarray) -> None:
    for i in range(sim_t.shape[1]):
        cover[i] = max(cover[i], sim_t[c, i])
    for j in range(feats.shape[1]):
        acc[j] += feats[c, j]
        root[j] = np.sqrt(acc[j])


# nogil: a sampler with prefetch runs this in a background thread next to the training step
@numba.njit(cache=True, nogil=True)
def _smdl_greedy(sim_t: np.ndarray, modular: np.ndarray, feats: np.ndarray, w_r: float, w_f: float, k: int,
                 sample_size: int, uniforms: np.ndarray, fixed: np.ndarray) -> np.ndarray:
    """Greedy maximization of the normalized SMDL objective over a pool of p items.

    ``sim_t`` is p x q (similarity of each candidate to the coverage set), ``modular`` the
    weighted, normalized modular terms, ``feats`` p x d non-negative features, ``w_r`` and
    ``w_f`` the normalized weights of R and Fm. ``fixed`` (pool positions) are in the set
    from the start; greedy adds ``k`` more. ``sample_size`` > 0: stochastic greedy with
    ``uniforms`` (k x sample_size, in [0, 1)) drawing the samples, each sample searched
    lazily (the best of the sample, with fewer evaluations); 0: exact lazy greedy. Returns
    the k picks (pool positions) in selection order.
    """
    p = sim_t.shape[0]
    cover = np.zeros(sim_t.shape[1], dtype=np.float32)
    acc = np.zeros(feats.shape[1], dtype=np.float32)
    root = np.zeros(feats.shape[1], dtype=np.float32)
    taken = np.zeros(p, dtype=np.bool_)
    for c in fixed:
        taken[c] = True
        _add(c, sim_t, cover, feats, acc, root)
    picks = np.empty(k, dtype=np.int64)
    if sample_size > 0:
        rest = np.empty(p - len(fixed), dtype=np.int64)
        m = 0
        for c in range(p):
            if not taken[c]:
                rest[m] = c
                m += 1
        # stale gains bound the current ones (submodularity): inside each sample, candidates
        # are evaluated by decreasing bound until no bound can beat the best fresh gain
        bound = np.full(p, np.inf)
        # the sample's slots by decreasing bound, ties by slot (a stable sort's order): a
        # heap, since the search usually stops after a few (sorting every sample cost more
        # than the gains)
        keys = np.empty(sample_size, dtype=np.float64)
        slots = np.empty(sample_size, dtype=np.int64)
        for t in range(k):
            s = min(sample_size, m)
            size = 0
            for i in range(s):
                # partial Fisher-Yates: rest[:s] becomes a uniform sample of rest[:m]
                j = i + int(uniforms[t, i] * (m - i))
                if j >= m:
                    j = m - 1
                rest[i], rest[j] = rest[j], rest[i]
                size = heap_push(keys, slots, size, bound[rest[i]], i)
            best, best_gain, best_slot = -1, 0.0, -1
            while size > 0:
                i = slots[0]
                size = heap_pop(keys, slots, size)
                c = rest[i]
                if best >= 0 and bound[c] < best_gain:
                    break
                g = _gain(c, sim_t, cover, modular, feats, acc, root, w_r, w_f)
                bound[c] = g
                if best < 0 or before(g, c, best_gain, best):
                    best, best_gain, best_slot = c, g, i
            picks[t] = best
            rest[best_slot] = rest[m - 1]
            m -= 1
            _add(best, sim_t, cover, feats, acc, root)
    else:
        # lazy greedy: a max-heap of stale upper bounds (gains only shrink)
        keys = np.empty(p, dtype=np.float64)
        items = np.empty(p, dtype=np.int64)
        size = 0
        for c in range(p):
            if not taken[c]:
                size = heap_push(keys, items, size, _gain(c, sim_t, cover, modular, feats, acc, root, w_r, w_f), c)
        for t in range(k):
            while True:
                c = items[0]
                size = heap_pop(keys, items, size)
                g = _gain(c, sim_t, cover, modular, feats, acc, root, w_r, w_f)
                if size == 0 or before(g, c, keys[0], items[0]):
                    break
                size = heap_push(keys, items, size, g, c)
            picks[t] = c
            _add(c, sim_t, cover, feats, acc, root)
    return picks


# -- one SMDL batch in one compiled call ---------------------------------------------------
# Everything a batch computes from its pool (the terms, their normalization, the similarity
# to the coverage set, greedy) runs in _smdl_select, without the GIL and without BLAS: the
# small pool GEMM oversubscribed the cores under default BLAS threads, and dozens of numpy
# calls per batch each gave up and re-took the GIL, which starved a sampler's prefetch
# thread next to a Python-bound training loop. The arithmetic is numpy's and OpenBLAS's,
# operation for operation (batchsel.functions._kernels), so the picks are the ones the numpy
# implementation made (tests/test_smdl_kernel.py keeps that implementation as the reference).
@numba.njit(cache=True, nogil=True)
def _scaled_into(out: np.ndarray, values: np.ndarray, scale: float) -> None:
    """``out += values * (scale / mean(values))`` (nothing when the mean is not > 0): the
    module's fixed normalization, with numpy's mean."""
    mean = pairwise_sum(values, 0, values.shape[0]) / values.shape[0]
    if mean > 0:
        factor = scale / mean
        for i in range(out.shape[0]):
            out[i] += values[i] * factor


# fastmath lets the maximum vectorize; a maximum does not depend on the order (a NaN,
# which the embeddings' checks exclude, would give NaN features either way: refused)
@numba.njit(cache=True, nogil=True, fastmath=True)
def _row_max(row: np.ndarray) -> float:
    top = row[0]
    for j in range(1, row.shape[0]):
        top = max(top, row[j])
    return top


@numba.njit(cache=True, nogil=True)
def _similarity_kernel(x: np.ndarray, sq: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, int]:
    """``exp(-|x_i - x_c|^2 / sigma^2)`` for every pool row i (``x``, squared norms ``sq``)
    and coverage row c (positions ``cov``), with sigma^2 the pool's mean pairwise squared
    distance; one GEMM on augmented rows gives ``-|x_i - x_c|^2 / sigma^2`` directly (no
    p x q temporaries), clipped at 0 (rounding can make a squared distance negative).
    Returns them and how many are NaN."""
    p, d = x.shape
    q = cov.shape[0]
    sq_sum = np.float32(pairwise_sum(sq, 0, p))
    sq_mean = np.float64(np.float32(np.float64(sq_sum) / p))
    col = np.zeros(d, dtype=np.float64)  # numpy's axis-0 mean: rows added in order
    for i in range(p):
        for j in range(d):
            col[j] += np.float64(x[i, j])
    for j in range(d):
        col[j] = col[j] / p
        col[j] = col[j] * col[j]
    sigma2 = 2.0 * (sq_mean - pairwise_sum(col, 0, d))
    scale = np.float32(1.0 / sigma2 if sigma2 > 1e-12 else 1.0)
    two_scale = np.float32(2.0) * scale
    left = np.empty((p, d + 2), dtype=np.float32)
    for i in range(p):
        for j in range(d):
            left[i, j] = x[i, j] * two_scale
        left[i, d] = -scale * sq[i]
        left[i, d + 1] = -scale
    right_t = np.empty((d + 2, q), dtype=np.float32)
    for c in range(q):
        for j in range(d):
            right_t[j, c] = x[cov[c], j]
        right_t[d, c] = 1.0
        right_t[d + 1, c] = sq[cov[c]]
    sim_t = np.empty((p, q), dtype=np.float32)
    gemm_fma(left, right_t, sim_t)
    nans = exp_f32_clipped(sim_t.ravel())  # clipped at 0: rounding can make a squared distance negative
    return sim_t, nans


@numba.njit(cache=True, nogil=True)
def _smdl_select(x: np.ndarray, source: np.ndarray, entropy: np.ndarray, pool: np.ndarray, mean: np.ndarray,
                 weights: np.ndarray, log_classes: float, k: int, typical: np.ndarray, cov: np.ndarray,
                 sample_size: int, uniforms: np.ndarray, fixed: np.ndarray) -> tuple[np.ndarray, bool]:
    """Greedy's picks for a pool (see :meth:`SubmodularSelector.select_from_pool`): the
    weighted, normalized terms, then :func:`_smdl_greedy`. ``x`` holds the pool's
    embeddings (rows in ``pool`` order), or has no rows and they are read here from
    ``source`` (all the embeddings); ``entropy`` holds every example's, ``log_classes`` the
    entropy of an unobserved example (< 0: no logits yet, uniform), ``typical`` the random
    batch that fixes the scales, ``cov`` the coverage positions (empty: no R term).
    Returns the picks and whether every term was finite (greedy is skipped if not)."""
    if x.shape[0] != pool.shape[0]:
        x = np.empty((pool.shape[0], source.shape[1]), dtype=np.float32)
        for i in range(pool.shape[0]):
            x[i] = source[pool[i]]
    p, d = x.shape
    l_u, l_r, l_m, l_f = weights[0], weights[1], weights[2], weights[3]
    free = k - fixed.shape[0]
    modular = np.zeros(p, dtype=np.float64)
    if l_u > 0:
        u = np.empty(p, dtype=np.float64)
        for i in range(p):
            e = np.float64(entropy[pool[i]])
            u[i] = 1.0 if log_classes < 0 else (log_classes if np.isnan(e) else e)
        _scaled_into(modular, u, l_u / k)
    sq = np.empty(p, dtype=np.float32)
    if l_m > 0 or l_r > 0:
        for i in range(p):
            sq[i] = einsum_dot(x[i], x[i])
    if l_m > 0:
        mu = np.empty(d, dtype=np.float32)
        for j in range(d):
            mu[j] = np.float32(mean[j])
        diff = np.empty(d, dtype=np.float32)
        dist = np.empty(p, dtype=np.float64)
        for i in range(p):
            for j in range(d):
                diff[j] = x[i, j] - mu[j]
            dist[i] = np.float64(np.sqrt(einsum_dot(diff, diff)))
        far = dist.max()
        for i in range(p):
            dist[i] = far - dist[i]
        _scaled_into(modular, dist, l_m / k)
    w_r = 0.0
    nans = 0
    q = cov.shape[0]
    sim_t = np.zeros((p, 0), dtype=np.float32)
    if l_r > 0:
        sim_t, nans = _similarity_kernel(x, sq, cov)
        if q < p:  # coverage points do not cover themselves: see the module docstring
            for c in range(q):
                sim_t[cov[c], c] = 0.0
        best = sim_t[typical[0]].copy()
        for t in range(1, k):
            row = sim_t[typical[t]]
            for c in range(q):
                if not row[c] <= best[c]:  # numpy's max: NaN wins
                    best[c] = row[c]
        covered = np.float64(pairwise_sum(best, 0, q))
        w_r = l_r / covered if covered > 0 else 0.0
    w_f = 0.0
    feats = np.zeros((p, 0), dtype=np.float32)
    if l_f > 0:
        feats = np.empty((p, d), dtype=np.float32)
        for i in range(p):
            top = _row_max(x[i])
            for j in range(d):
                feats[i, j] = x[i, j] - top
        exp_f32(feats.ravel())  # one vectorized pass (64 at a time pays its setup 1024 times)
        for i in range(p):
            row = feats[i]
            total = pairwise_sum(row, 0, d)
            for j in range(d):
                f = row[j] / total
                row[j] = f
                nans += f != f
        acc = feats[typical[0]].copy()  # numpy's axis-0 sum: rows added in order
        for t in range(1, k):
            row = feats[typical[t]]
            for j in range(d):
                acc[j] += row[j]
        for j in range(d):
            acc[j] = np.sqrt(acc[j])
        w_f = l_f / np.float64(pairwise_sum(acc, 0, d))
    # NaN gains would leave the greedy heap unordered (and its loop unbounded). The
    # similarities and features come out of exp of values <= 0 (and a division by a sum
    # >= 1): finite unless NaN, counted where they were computed.
    finite = nans == 0 and np.isfinite(w_r) and np.isfinite(w_f)
    for i in range(p):
        finite = finite and np.isfinite(modular[i])
    if not finite:
        return np.empty(0, dtype=np.int64), False
    return _smdl_greedy(sim_t, modular, feats, w_r, w_f, free, sample_size, uniforms, fixed), True


# Without nogil: a few microseconds, less than what giving up the GIL costs next to a
# Python-bound thread (taking it back waits for that thread's switch interval, 5 ms).
@numba.njit(cache=True)
def _count_below(order: np.ndarray, m: int, bound: int) -> int:
    """How many of the unused positions ``order[:m]`` (descending) are below ``bound``."""
    lo, hi = 0, m  # order[:lo] >= bound > order[hi:m]
    while lo < hi:
        mid = (lo + hi) // 2
        if order[mid] >= bound:
            lo = mid + 1
        else:
            hi = mid
    return m - lo


@numba.njit(cache=True)
def _smdl_pool(order: np.ndarray, m: int, p: int, shard: np.ndarray,
               due: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A batch's pool: the first ``p`` unused positions ``order[m-1], order[m-2], ...``
    (ascending), as example indices in increasing order (``pool``; ties -> smallest index),
    ``srt`` mapping the pool back to those positions, and the pool positions of the first
    ``due`` of them (``fixed``, in the batch from the start)."""
    examples = np.empty(p, dtype=np.int64)
    for i in range(p):
        examples[i] = shard[order[m - 1 - i]]
    srt = np.argsort(examples, kind="mergesort")  # stable, as numpy's kind="stable"
    where = np.empty(p, dtype=np.int64)
    for i in range(p):
        where[srt[i]] = i
    return examples[srt], srt, where[:due].copy()


@numba.njit(cache=True, nogil=True)
def _smdl_step(x: np.ndarray, source: np.ndarray, entropy: np.ndarray, pool: np.ndarray, mean: np.ndarray,
               weights: np.ndarray, log_classes: float, k: int, typical: np.ndarray, cov: np.ndarray,
               sample_size: int, uniforms: np.ndarray, fixed: np.ndarray, order: np.ndarray, m: int,
               srt: np.ndarray, shard: np.ndarray) -> tuple[np.ndarray, bool]:
    """One online batch: :func:`_smdl_select` on the pool of :func:`_smdl_pool`, then the
    run's bookkeeping: ``order[m-p:m-k]`` gets the pool's unused positions (descending),
    ``order[m-k:m]`` the batch's. Returns the batch (example indices) and whether the
    terms were finite (nothing is changed if not)."""
    picks, finite = _smdl_select(x, source, entropy, pool, mean, weights, log_classes, k, typical, cov,
                                 sample_size, uniforms, fixed)
    if not finite:
        return np.empty(0, dtype=np.int64), False
    p = pool.shape[0]
    pool_pos = np.empty(p, dtype=np.int64)  # ascending unused positions: order[m-1], order[m-2], ...
    for i in range(p):
        pool_pos[i] = order[m - 1 - i]
    keep = np.ones(p, dtype=np.bool_)
    chosen = np.empty(k, dtype=np.int64)
    nf = fixed.shape[0]
    for t in range(k):
        chosen[t] = srt[fixed[t] if t < nf else picks[t - nf]]
        keep[chosen[t]] = False
    top = m - k  # order[m-p:m-k]: the pool's other positions, descending
    for i in range(p):
        if keep[i]:
            top -= 1
            order[top] = pool_pos[i]
    batch = np.empty(k, dtype=np.int64)
    for t in range(k):
        order[m - k + t] = pool_pos[chosen[t]]
        batch[t] = shard[pool_pos[chosen[t]]]
    return batch, True


_NOT_FINITE = ("the SMDL terms of this pool are not finite (the embeddings' distances overflow float32); "
               "rescale the embeddings (e.g. divide them by their standard deviation)")


def entropy_of_logits(logits: np.ndarray) -> np.ndarray:
    """Entropy (nats) of softmax(logits) per row, computed stably.

    >>> entropy_of_logits(np.zeros((1, 4))).round(4).tolist()
    [1.3863]
    """
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -(np.exp(log_p) * log_p).sum(axis=1)


class SubmodularSelector(OnlineSelector):
    """Submodular mini-batch selection (SMDL, DESIGN section 2.1), online.

    Parameters
    ----------
    embeddings:
        ``N x d`` embeddings (array, torch tensor, ``.npy`` path opened memory-mapped, or
        an :class:`~batchsel.EmbeddingIndex`); refresh rows with
        ``observe(indices, embeddings=...)``.
    batch_size:
        B.
    seed:
        Seeds pools, stochastic greedy and the shards.
    weights:
        ``(l_u, l_r, l_m, l_f)``: uncertainty, diversity (facility location), closeness to
        the mean, feature match. Defaults are the paper's (0.2, 0.1, 0.5, 0.2).
    pool_size:
        Candidates per step: the first ``pool_size`` unused examples of the rank's shard in
        its random order, those due included (default ``8 * B``; see the module docstring).
    coverage_size:
        Examples of the pool whose coverage R measures (default 256; ``None``: the whole
        pool, best coverage, ``|P|^2 d`` work per batch). Keep it well above B.
    optimizer, epsilon:
        ``"stochastic"`` greedy with ``ceil(pool / B * ln(1 / epsilon))`` candidates per
        pick, or exact ``"lazy"`` greedy.
    warmup_epochs:
        Epochs ``< warmup_epochs`` draw random batches (without replacement).
    partition:
        ``"random"`` (a fresh split every epoch) or ``"submodular"`` (GreedMax shards).
    drop_last:
        DistributedSampler's: pad ranks by repeating examples, or drop the tail.
    max_delay:
        No example is used more than ``max_delay`` batches after the batch a random order
        would put it in (default 2; 0 gives random batches). Larger values give greedy more
        of each batch to choose and defer the examples it does not want for longer (see the
        module docstring).

    Uncertainty uses the latest logits of each example. Before any logits were observed it
    is uniform (it does not change the choice); afterwards, examples never observed count as
    maximally uncertain (entropy ``ln C``), so they are explored first. Losses are ignored.
    ``partition="submodular"`` computes the GreedMax shards once per world size, from the
    embeddings at that moment; they are kept in :meth:`state_dict`.
    Within an epoch a rank never repeats an example (except the padding of
    ``drop_last=False``); every rank has ``ceil(shard / B)`` batches, whose sizes differ by
    at most one (smaller ones first).

    Example
    -------
    >>> import numpy as np
    >>> x = np.random.default_rng(0).normal(size=(300, 8)).astype(np.float32)
    >>> sel = SubmodularSelector(x, batch_size=32, seed=0, pool_size=128)
    >>> batches = list(sel.iter_batches(epoch=0))
    >>> len(batches), len(np.unique(np.concatenate(batches))), {len(b) for b in batches}
    (10, 300, {30})
    >>> sel.observe(batches[0], logits=np.zeros((len(batches[0]), 10)))
    """

    partitions = ("random", "submodular")
    uses_feedback = True
    supports_start = True

    def __init__(
        self,
        embeddings: Any,
        batch_size: int,
        *,
        seed: int = 0,
        weights: Sequence[float] = DEFAULT_WEIGHTS,
        pool_size: int | None = None,
        coverage_size: int | None = 256,
        optimizer: str = "stochastic",
        epsilon: float = 0.01,
        warmup_epochs: int = 0,
        partition: str = "random",
        drop_last: bool = False,
        max_delay: int = 2,
    ) -> None:
        if hasattr(embeddings, "embeddings") and hasattr(embeddings, "knn_graph"):  # EmbeddingIndex
            embeddings = embeddings.embeddings
        self.embeddings = load_embeddings(embeddings)
        # the similarity and the distances to the mean are computed in float32
        check_scale(self.embeddings, "embeddings")
        super().__init__(self.embeddings.shape[0], batch_size, seed=seed, drop_last=drop_last, partition=partition)
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (4,):
            raise ValueError(f"weights must be 4 numbers (l_u, l_r, l_m, l_f), got {weights!r}")
        if not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
            raise ValueError(f"weights must be finite, >= 0 and not all 0, got {weights!r}")
        self.weights = tuple(float(v) for v in w)
        self.pool_size = 8 * self.batch_size if pool_size is None else check_int(pool_size, "pool_size", minimum=1)
        if self.pool_size < self.batch_size:
            raise ValueError(f"pool_size must be >= batch_size ({self.batch_size}), got {pool_size}")
        self.coverage_size = None if coverage_size is None else check_int(coverage_size, "coverage_size", minimum=1)
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
        self.optimizer = optimizer
        if not 0 < epsilon < 1:
            raise ValueError(f"epsilon must be in (0, 1), got {epsilon!r}")
        self.epsilon = float(epsilon)
        self.warmup_epochs = check_int(warmup_epochs, "warmup_epochs", minimum=0)
        self.max_delay = check_int(max_delay, "max_delay", minimum=0)
        self.entropy_ = np.full(self.num_examples, np.nan, dtype=np.float32)
        self.num_classes_: int | None = None
        self._refreshed = False
        self.mean_ = self._mean()

    def _mean(self) -> np.ndarray:
        total = np.zeros(self.embeddings.shape[1], dtype=np.float64)
        for start in range(0, self.num_examples, _MEAN_BLOCK):
            total += self.embeddings[start:start + _MEAN_BLOCK].sum(axis=0, dtype=np.float64)
        return total / self.num_examples

    def _partition_data(self) -> np.ndarray:
        return self.embeddings

    # -- feedback ---------------------------------------------------------------------
    def observe(self, indices: Any, losses: Any = None, logits: Any = None, embeddings: Any = None) -> None:
        """Record the latest logits (their entropy) and/or refreshed embeddings of
        ``indices``; losses are not used by SMDL."""
        idx = check_indices(indices, self.num_examples)
        if logits is not None:
            z = check_rows(logits, len(idx), "logits", ndim=2)
            if self.num_classes_ is not None and z.shape[1] != self.num_classes_:
                raise ValueError(f"logits have {z.shape[1]} classes, earlier logits had {self.num_classes_}")
            self.num_classes_ = int(z.shape[1])
            self.entropy_[idx] = entropy_of_logits(z)
        if embeddings is not None:
            e = check_rows(embeddings, len(idx), "embeddings", ndim=2)
            if e.shape[1] != self.embeddings.shape[1]:
                raise ValueError(f"embeddings have dimension {e.shape[1]}, expected {self.embeddings.shape[1]}")
            check_scale(e, "embeddings", underflow=False)  # a few rows may be tiny; none may overflow
            if not self._refreshed:  # the caller's array or memmap is never written
                logger.info("copying the %d x %d embeddings to refresh them", *self.embeddings.shape)
                self.embeddings = np.array(self.embeddings, dtype=np.float32, order="C")
                self._refreshed = True
            idx, last = np.unique(idx[::-1], return_index=True)  # the last row wins for repeats
            e = e[::-1][last]
            self.mean_ += (e.astype(np.float64) - self.embeddings[idx]).sum(axis=0) / self.num_examples
            self.embeddings[idx] = e

    def _scores_state(self) -> dict[str, Any]:
        state = {"entropy": self.entropy_.copy(), "num_classes": self.num_classes_, "mean": self.mean_.copy()}
        if self._refreshed:
            state["embeddings"] = self.embeddings.copy()
        return state

    def _load_scores(self, state: dict[str, Any]) -> None:
        entropy = np.asarray(state["entropy"], dtype=np.float32)
        if entropy.shape != (self.num_examples,):
            raise ValueError(f"state has entropies for {entropy.shape} examples, expected {self.num_examples}")
        self.entropy_ = entropy.copy()
        self.num_classes_ = state["num_classes"]
        self.mean_ = np.asarray(state["mean"], dtype=np.float64).copy()
        if "embeddings" in state:
            self.embeddings = np.array(state["embeddings"], dtype=np.float32, order="C")
            self._refreshed = True

    # -- selection --------------------------------------------------------------------
    def _due(self, sizes: np.ndarray, t: int, length: int) -> int:
        """Positions (into the shard) below this are due at batch ``t``: a position's turn
        is the batch that cutting the shard in order into ``sizes`` puts it in, and it is
        due ``max_delay`` batches later; at the last batch every position is."""
        if t >= len(sizes) - 1:
            return length
        turn = t + 1 - self.max_delay
        return int(sizes[:turn].sum()) if turn > 0 else 0

    def _next_batch(self, run: dict[str, Any], rng: np.random.Generator) -> np.ndarray:
        order, m, sizes, shard = run["order"], run["m"], run["sizes"], run["shard"]
        t = len(run["drawn"])
        k = min(int(sizes[t]), m) if t < len(sizes) else min(self.batch_size, m)
        due = _count_below(order, m, self._due(sizes, t, len(shard)))
        # hand over to the turn order over the last ceil(pool / B) batches (module docstring)
        handover = -(-self.pool_size // self.batch_size)
        left = len(sizes) - t
        if left <= handover:
            due = max(due, k * (handover - left + 1) // handover)
        if run["epoch"] < self.warmup_epochs or due >= k:
            # random batch (the shard is shuffled), or more due than fit: earliest first
            pool_pos = order[m - k:m][::-1].copy()  # the first k unused positions, ascending
            order[m - k:m] = pool_pos
            run["m"] = m - k
            return shard[pool_pos]
        # the pool: the first pool_size unused positions; the due ones are among them
        p = min(self.pool_size, m)
        pool, srt, fixed = _smdl_pool(order, m, p, shard, due)
        batch, finite = _smdl_step(*self._kernel_args(pool, k, rng, fixed), order, m, srt, shard)
        if not finite:
            raise ValueError(_NOT_FINITE)
        run["m"] = m - k
        return batch

    def _new_run(self, epoch: int, rank: int, world_size: int) -> dict[str, Any]:
        run = super()._new_run(epoch, rank, world_size)
        run["order"] = run["order"][::-1].copy()  # descending: the pool is a suffix of order[:m]
        return run

    def _restore_run(self, run: dict[str, Any]) -> None:
        super()._restore_run(run)
        m = run["m"]
        run["order"][:m] = np.sort(run["order"][:m])[::-1]  # a no-op for states written here

    def select_from_pool(self, pool: np.ndarray, k: int, rng: np.random.Generator | None = None,
                         fixed: np.ndarray | None = None) -> np.ndarray:
        """Positions (into ``pool``, a sorted array of example indices) of the ``k``
        examples of the batch greedy builds from the pool: the positions ``fixed`` (in the
        batch from the start), then greedy's picks in selection order."""
        rng = np.random.default_rng(self.seed) if rng is None else rng
        pool = np.asarray(pool, dtype=np.int64)
        p = len(pool)
        k = check_int(k, "k", minimum=1, maximum=p)
        fixed = np.zeros(0, dtype=np.int64) if fixed is None else np.asarray(fixed, dtype=np.int64)
        outside = fixed.size and (fixed.min() < 0 or fixed.max() >= p)
        if fixed.ndim != 1 or len(np.unique(fixed)) != len(fixed) or len(fixed) > k or outside:
            raise ValueError(f"fixed must be at most k={k} distinct positions in [0, {p}), got {fixed!r}")
        free = k - len(fixed)
        if free == 0:
            return fixed.copy()
        picks, finite = _smdl_select(*self._kernel_args(pool, k, rng, fixed))
        if not finite:
            raise ValueError(_NOT_FINITE)
        return np.concatenate([fixed, picks])

    def _kernel_args(self, pool: np.ndarray, k: int, rng: np.random.Generator, fixed: np.ndarray) -> tuple:
        """The arguments of :func:`_smdl_select` for a pool (sorted example indices) with
        ``fixed`` pool positions in the batch and ``k - len(fixed) >= 1`` to pick: the
        batch's random draws, in the order they have always been made (the batch that
        fixes the scales, the coverage set, stochastic greedy's uniforms), and the
        embeddings: a plain array (or memmap) whole, its pool rows read in the kernel; any
        other array type's pool rows, read once through its indexing."""
        p, free = len(pool), k - len(fixed)
        typical = rng.choice(p, size=k, replace=False)
        cov = np.zeros(0, dtype=np.int64)
        if self.weights[1] > 0:
            q = p if self.coverage_size is None else min(self.coverage_size, p)
            cov = np.arange(p) if q == p else np.sort(rng.choice(p, size=q, replace=False))
        if self.optimizer == "stochastic":
            rest = p - len(fixed)
            sample = min(rest, max(1, math.ceil(rest / free * math.log(1.0 / self.epsilon))))
            uniforms = rng.random((free, sample))
        else:
            sample, uniforms = 0, np.zeros((0, 0))
        emb = self.embeddings
        if type(emb) in (np.ndarray, np.memmap):  # float32 C-contiguous (load_embeddings): read in the kernel
            x, source = np.empty((0, emb.shape[1]), dtype=np.float32), emb
        else:  # a subclass may read its rows its own way: through its indexing, once
            x = np.ascontiguousarray(emb[pool], dtype=np.float32)
            source = x
        log_classes = -1.0 if self.num_classes_ is None else math.log(self.num_classes_)
        return (x, source, self.entropy_, pool, self.mean_, np.asarray(self.weights), log_classes, int(k),
                typical.astype(np.int64, copy=False), cov.astype(np.int64, copy=False), int(sample), uniforms, fixed)

    def __repr__(self) -> str:
        return (f"SubmodularSelector(num_examples={self.num_examples}, batch_size={self.batch_size}, "
                f"weights={self.weights}, pool_size={self.pool_size}, optimizer={self.optimizer!r}, "
                f"partition={self.partition!r}, seed={self.seed})")


__all__ = ["SubmodularSelector", "entropy_of_logits"]
