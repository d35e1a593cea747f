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

A batch is two compiled calls (numba, without the GIL, without BLAS): its random numbers,
from a counter-based stream keyed by (seed, epoch, rank, batch) (loss-rank's,
:mod:`batchsel.selectors._counter_rng`; no numpy Generator per batch), then the terms, the
similarity product, greedy, the run's bookkeeping and the read of the pool's embeddings.
So it neither oversubscribes the cores with BLAS threads next to other processes nor
holds the GIL a sampler's prefetch thread needs. Its float32 arithmetic is numpy's and
OpenBLAS's, operation for operation (:mod:`batchsel.functions._kernels`), so given the same
random numbers the picks are those of the numpy implementation it replaced
(tests/test_smdl_kernel.py). The pool is a window sliding through the shard (see
"Order within the epoch"), so only about B of its rows are new at each batch: a run keeps
each pool row's embedding, squared norm, distance to the mean and features, computed once
(functions of the row alone, so the values and the picks are those of computing them
afresh; tests/test_smdl_cache.py). The similarities to the coverage set change with the
set at every batch; ``coverage_every=n`` keeps the set and sigma^2 for ``n`` batches and
reuses the similarities of the rows still in the pool too (other picks). B = 128 from a
pool of 1024, d = 64, on one core: about 0.3 ms for the similarity product of the whole pool
(the core's FMA peak) and 0.17 ms for its exp; per batch at the default weights,
interleaved with a training step (``benchmarks/bench_selectors.py``, 2 cores, load 1.2-1.7,
one and two processes, one and default threads): 0.94-1.05 ms median (the numpy
implementation, same runs: 1.5-2.0 ms; with numpy's Generator for the draws, before:
1.18-1.46 ms), with ``coverage_every=8`` 0.52-0.66 ms. After the training step the caches
are cold: the product and exp take 0.6 ms, greedy 0.2 ms, and every Python-level numpy
call costs ten times what it costs warm (building a numpy Generator took about 0.18 ms and
its three draws 0.15-0.2 ms, hence the compiled draws).

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

Measured over 8 epochs, digits (1347 examples, B = 32) / 2000 clustered points with 10%
scattered outliers (B = 64), before the repair -> the paper's weights now -> the default,
coverage alone (random batches):

- mean position of the farthest decile: 0.94 -> 0.56 -> 0.53 / 0.93 -> 0.54 -> 0.52
  (0.50 / 0.47);
- its share of the last batch: 1.0 -> 0.18 -> 0.06 / 1.0 -> 0.20 -> 0.00 (0.04 / 0.13), of
  the worst batch: 1.0 -> 0.28 -> 0.23 / 1.0 -> 0.30 -> 0.51 (0.33 / 0.25);
- smallest batch: 3 -> 31 / 16 -> 62 (3 / 16).

Coverage alone takes the scattered outliers among greedy's picks together (clustered set:
worst batch 40 % of them on average over the epochs): once a batch's due examples cover
the clusters, the outliers are what is left uncovered. It defers none of them. In training
this cost nothing measurable: in bench_quality's ``outliers`` regime (10 % of the inputs
moved by 3 standard deviations, labels kept), where its worst batch holds 48-58 % of them,
coverage alone reads +0.30 +- 0.19 (digits MLP), +0.41 +- 0.37 (mnist1d MLP) and
+0.70 +- 0.98 (CNN) points against random (validation, 10 seeds).

The price of the window: about 70% of a batch is due examples; greedy picks the rest from
the fresh part of the pool. ``max_delay=4`` leaves greedy half of the batch (paper weights:
mean position of the farthest decile 0.57 / 0.60, last batch 0.26 / 0.27 of them);
``max_delay=0`` is random batches.

Defaults, chosen on a validation split (``benchmarks/bench_quality.py --split val``: digits
MLP, mnist1d MLP and 1-D CNN; clean, 25 % label noise, long-tailed, redundant; 10 seeds,
random batches in the same run; the inputs as embeddings). Paired difference of the final
accuracy to random, mean over the 12 cases, the worst case, and the cases beyond 2
standard errors (``benchmarks/results/smdl_default/``):

- **coverage alone, (0, 1, 0, 0) (default)**: +0.27 pt, worst -0.30 pt, better in 2
  (label noise: digits +1.22 +- 0.41, mnist1d MLP +1.43 +- 0.20), never worse;
- (0, 0.8, 0, 0.2): +0.05 pt, worst -0.35; (0, 0.9, 0, 0.1): -0.00 pt, worst -0.88; a
  feature term cuts the outlier bunching (worst batch 27-31 % on the clustered set) and
  the gain under label noise with it;
- the paper's (0.2, 0.1, 0.5, 0.2), the default before: +0.01 pt, worst -1.29 pt
  (redundant CNN; on its test split -0.97 +- 0.33 at 20 seeds, worse than random).
- coverage alone with a coverage set kept across batches (a hashed 1 in 4 of the examples,
  similarities reused while both stay in the pool: 0.96 -> 0.76 ms a batch; not kept):
  -0.12 pt, worst -1.59, worse in 2 (clean mnist1d MLP, redundant CNN): batches covering
  the same set are alike (``benchmarks/results/smdl_sliding_coverage/``).

Checks besides the validation search: the ``outliers`` regime and a 2-class task
(digits parity, 5 regimes), validation, 10 seeds: coverage alone never below random by 2
standard errors (worst -0.15 +- 0.11); the test split, 10 seeds, with the compiled draws:
within noise in 11 cases, better in 1 (clean digits +0.18 +- 0.06), worst -0.54 +- 0.55
(redundant CNN), steps to random's accuracy 0.90-1.34x (with numpy's draws: all 12 within
noise, -1.1 +- 1.0 to +0.5); 20 seeds on the two CNN cases the paper weights lost (numpy's
draws): long-tailed +0.12 +- 0.61, redundant -0.32 +- 0.39. The search itself ran with
numpy's draws (the same distributions).
No setting reaches random's accuracy in fewer steps beyond seed noise on these tasks.

``max_delay=2`` is from the earlier search (paper weights, 3 seeds: ``max_delay=8`` +0.27
pt but worst -0.88; diversity-leaning (0.2, 0.5, 0.1, 0.2) -0.22 pt, worst -2.19 at
``max_delay=2`` and -3.14 at 8). Before the repair the paper's weights ended 5.3 points
below random on mnist1d's MLP and 21 below on digits (76.0 vs 97.2 %), whose last batch
held 3 outliers.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Sequence

import numba
import numpy as np

from .._checks import check_indices, check_int, check_rows, check_scale, load_embeddings
from .._heap import before, heap_build, heap_pop, heap_push
from ..functions._kernels import einsum_dot, exp_f32, exp_f32_clipped, gemm_fma, pairwise_sum
from ._counter_rng import CounterKeyedBatches, _choice, _stream_key, _substream, _uniform
from .base import OnlineSelector, epoch_rng

logger = logging.getLogger(__name__)

OPTIMIZERS = ("stochastic", "lazy")
DEFAULT_WEIGHTS = (0.0, 1.0, 0.0, 0.0)
# Rows of the embeddings read at a time when computing the mean (bounds memory on memmaps).
_MEAN_BLOCK = 1 << 16


@numba.njit(cache=True, fastmath=True, nogil=True)
def _gain(c: int, sim_t: np.ndarray, rs: int, cover: np.ndarray, modular: np.ndarray, feats: np.ndarray, rf: int,
          acc: np.ndarray, root: np.ndarray, w_r: float, w_f: float) -> float:
    """Candidate ``c``'s gain; its similarities are row ``rs`` of ``sim_t``, its features
    row ``rf`` of ``feats``."""
    g = modular[c]
    if w_r != 0.0:
        r = np.float32(0.0)
        for i in range(sim_t.shape[1]):
            r += max(sim_t[rs, i] - cover[i], np.float32(0.0))
        g += w_r * r
    if w_f != 0.0:
        f = np.float32(0.0)
        for j in range(feats.shape[1]):
            f += np.sqrt(acc[j] + feats[rf, j]) - root[j]
        g += w_f * f
    return g


@numba.njit(cache=True, fastmath=True, nogil=True)
def _add(rs: int, sim_t: np.ndarray, cover: np.ndarray, rf: int, feats: np.ndarray, acc: np.ndarray,
         root: np.ndarray) -> None:
    for i in range(sim_t.shape[1]):
        cover[i] = max(cover[i], sim_t[rs, i])
    for j in range(feats.shape[1]):
        acc[j] += feats[rf, j]
        root[j] = np.sqrt(acc[j])


# nogil: a sampler with prefetch runs this in a background thread next to the training step
@numba.njit(cache=True, nogil=True)
def _smdl_greedy(sim_t: np.ndarray, srows: np.ndarray, modular: np.ndarray, feats: np.ndarray, frows: np.ndarray,
                 w_r: float, w_f: float, k: int, sample_size: int, uniforms: np.ndarray,
                 fixed: np.ndarray) -> np.ndarray:
    """Greedy maximization of the normalized SMDL objective over a pool of p items.

    ``sim_t`` holds the similarity of each candidate to the coverage set (candidate c's in
    row ``srows[c]``), ``modular`` the weighted, normalized modular terms, ``feats`` the
    non-negative features (c's in row ``frows[c]``), ``w_r`` and
    ``w_f`` the normalized weights of R and Fm. ``fixed`` (pool positions) are in the set
    from the start; greedy adds ``k`` more. ``sample_size`` > 0: stochastic greedy with
    ``uniforms`` (k x sample_size, in [0, 1)) drawing the samples, each sample searched
    lazily (the best of the sample, with fewer evaluations); 0: exact lazy greedy. Returns
    the k picks (pool positions) in selection order.
    """
    p = modular.shape[0]
    cover = np.zeros(sim_t.shape[1], dtype=np.float32)
    acc = np.zeros(feats.shape[1], dtype=np.float32)
    root = np.zeros(feats.shape[1], dtype=np.float32)
    taken = np.zeros(p, dtype=np.bool_)
    for c in fixed:
        taken[c] = True
        _add(srows[c], sim_t, cover, frows[c], feats, acc, root)
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
        # the sample's slots by decreasing bound, ties by slot: those never evaluated
        # (bound inf) first, in slot order, then the others from a heap, since the search
        # usually stops after a few (sorting every sample cost more than the gains)
        keys = np.empty(sample_size, dtype=np.float64)
        slots = np.empty(sample_size, dtype=np.int64)
        for t in range(k):
            s = min(sample_size, m)
            for i in range(s):
                # partial Fisher-Yates: rest[:s] becomes a uniform sample of rest[:m]
                j = i + int(uniforms[t, i] * (m - i))
                if j >= m:
                    j = m - 1
                rest[i], rest[j] = rest[j], rest[i]
            best, best_gain, best_slot = -1, 0.0, -1
            size = 0
            for i in range(s):
                c = rest[i]
                if bound[c] == np.inf:  # an infinite bound is never below the best gain
                    g = _gain(c, sim_t, srows[c], cover, modular, feats, frows[c], acc, root, w_r, w_f)
                    bound[c] = g
                    if best < 0 or before(g, c, best_gain, best):
                        best, best_gain, best_slot = c, g, i
                else:
                    keys[size] = bound[c]
                    slots[size] = i
                    size += 1
            heap_build(keys, slots, size)
            while size > 0:
                i = slots[0]
                size = heap_pop(keys, slots, size)
                c = rest[i]
                if best >= 0 and bound[c] < best_gain:
                    break
                g = _gain(c, sim_t, srows[c], cover, modular, feats, frows[c], acc, root, w_r, w_f)
                bound[c] = g
                if best < 0 or before(g, c, best_gain, best):
                    best, best_gain, best_slot = c, g, i
            picks[t] = best
            rest[best_slot] = rest[m - 1]
            m -= 1
            _add(srows[best], sim_t, cover, frows[best], feats, acc, root)
    else:
        # lazy greedy: a max-heap of stale upper bounds (gains only shrink)
        keys = np.empty(p, dtype=np.float64)
        items = np.empty(p, dtype=np.int64)
        size = 0
        for c in range(p):
            if not taken[c]:
                g = _gain(c, sim_t, srows[c], cover, modular, feats, frows[c], acc, root, w_r, w_f)
                size = heap_push(keys, items, size, g, c)
        for t in range(k):
            while True:
                c = items[0]
                size = heap_pop(keys, items, size)
                g = _gain(c, sim_t, srows[c], cover, modular, feats, frows[c], acc, root, w_r, w_f)
                if size == 0 or before(g, c, keys[0], items[0]):
                    break
                size = heap_push(keys, items, size, g, c)
            picks[t] = c
            _add(srows[c], sim_t, cover, frows[c], feats, acc, root)
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
def _add_uncertainty(modular: np.ndarray, entropy: np.ndarray, pool: np.ndarray, log_classes: float,
                     scale: float) -> None:
    """U's gains: the entropy of each pool example's latest logits (ln C when it has none
    yet, 1 for all when no logits were ever seen)."""
    p = pool.shape[0]
    u = np.empty(p, dtype=np.float64)
    for i in range(p):
        e = np.float64(entropy[pool[i]])
        u[i] = 1.0 if log_classes < 0 else (log_classes if np.isnan(e) else e)
    _scaled_into(modular, u, scale)


@numba.njit(cache=True, nogil=True)
def _add_closeness(modular: np.ndarray, dist: np.ndarray, scale: float) -> None:
    """M's gains from the distances to the mean (``dist`` is overwritten): c - |x - mu|."""
    far = dist.max()
    for i in range(dist.shape[0]):
        dist[i] = far - dist[i]
    _scaled_into(modular, dist, scale)


@numba.njit(cache=True, nogil=True)
def _coverage_weight(sim: np.ndarray, srows: np.ndarray, typical: np.ndarray, k: int, l_r: float) -> float:
    """l_r divided by R of the typical batch (rows ``srows[typical]`` of ``sim``)."""
    q = sim.shape[1]
    best = sim[srows[typical[0]]].copy()
    for t in range(1, k):
        row = sim[srows[typical[t]]]
        for c in range(q):
            if not row[c] <= best[c]:  # numpy's max: NaN wins
                best[c] = row[c]
    covered = np.float64(pairwise_sum(best, 0, q))
    return l_r / covered if covered > 0 else 0.0


@numba.njit(cache=True, nogil=True)
def _feature_weight(feats: np.ndarray, frows: np.ndarray, typical: np.ndarray, k: int, l_f: float) -> float:
    """l_f divided by Fm of the typical batch (rows ``frows[typical]`` of ``feats``)."""
    d = feats.shape[1]
    acc = feats[frows[typical[0]]].copy()  # numpy's axis-0 sum: rows added in order
    for t in range(1, k):
        row = feats[frows[typical[t]]]
        for j in range(d):
            acc[j] += row[j]
    for j in range(d):
        acc[j] = np.sqrt(acc[j])
    return l_f / np.float64(pairwise_sum(acc, 0, d))


@numba.njit(cache=True, nogil=True)
def _all_finite(nans: int, w_r: float, w_f: float, modular: np.ndarray) -> bool:
    """NaN gains would leave the greedy heap unordered (and its loop unbounded)."""
    finite = nans == 0 and np.isfinite(w_r) and np.isfinite(w_f)
    for i in range(modular.shape[0]):
        finite = finite and np.isfinite(modular[i])
    return finite


# The similarity product's sides. Pool row i is ``x[rows[i]]`` with squared norm ``sq[i]``:
# the batch kernel reads the rows where the run's cache keeps them, without gathering them.
@numba.njit(cache=True, nogil=True)
def _inverse_sigma2(x: np.ndarray, rows: np.ndarray, sq: np.ndarray) -> np.float32:
    """``1 / sigma^2`` (1 if sigma^2 is not > 1e-12), sigma^2 the pool's mean pairwise
    squared distance ``2 (mean(sq) - |mean(x)|^2)``, rounded as numpy computed it."""
    p, d = rows.shape[0], x.shape[1]
    sq_mean = np.float64(np.float32(np.float64(np.float32(pairwise_sum(sq, 0, p))) / p))
    col = np.zeros(d, dtype=np.float64)  # numpy's axis-0 mean: rows added in order
    for i in range(p):
        r = rows[i]
        for j in range(d):
            col[j] += np.float64(x[r, j])
    for j in range(d):
        col[j] = col[j] / p
        col[j] = col[j] * col[j]
    sigma2 = 2.0 * (sq_mean - pairwise_sum(col, 0, d))
    return np.float32(1.0 / sigma2 if sigma2 > 1e-12 else 1.0)


@numba.njit(cache=True, nogil=True)
def _left_side(x: np.ndarray, rows: np.ndarray, sq: np.ndarray, scale: np.float32) -> np.ndarray:
    """The pool rows' side of the product: ``[2 x_i / sigma^2, -|x_i|^2 / sigma^2, -1 / sigma^2]``."""
    n, d = rows.shape[0], x.shape[1]
    two_scale = np.float32(2.0) * scale
    left = np.empty((n, d + 2), dtype=np.float32)
    for i in range(n):
        r = rows[i]
        for j in range(d):
            left[i, j] = x[r, j] * two_scale
        left[i, d] = -scale * sq[i]
        left[i, d + 1] = -scale
    return left


@numba.njit(cache=True, nogil=True)
def _right_side(x: np.ndarray, rows: np.ndarray, sq: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """The coverage rows' side, transposed: columns ``[x_c, 1, |x_c|^2]`` for pool positions ``cov``."""
    d, q = x.shape[1], cov.shape[0]
    right_t = np.empty((d + 2, q), dtype=np.float32)
    for c in range(q):
        r = rows[cov[c]]
        for j in range(d):
            right_t[j, c] = x[r, j]
        right_t[d, c] = 1.0
        right_t[d + 1, c] = sq[cov[c]]
    return right_t


@numba.njit(cache=True, nogil=True)
def _similarity_rows(x: np.ndarray, rows: np.ndarray, sq: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, int]:
    """:func:`_similarity_kernel` for the pool rows ``x[rows]``."""
    left = _left_side(x, rows, sq, _inverse_sigma2(x, rows, sq))
    right_t = _right_side(x, rows, sq, cov)
    sim_t = np.empty((rows.shape[0], cov.shape[0]), dtype=np.float32)
    gemm_fma(left, right_t, sim_t)
    nans = exp_f32_clipped(sim_t.ravel())  # clipped at 0: rounding can make a squared distance negative
    return sim_t, nans


@numba.njit(cache=True, nogil=True)
def _similarity_kernel(x: np.ndarray, sq: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, int]:
    """``exp(-|x_i - x_c|^2 / sigma^2)`` for every pool row i (``x``, squared norms ``sq``)
    and coverage row c (positions ``cov``), with sigma^2 the pool's mean pairwise squared
    distance; one GEMM on augmented rows gives ``-|x_i - x_c|^2 / sigma^2`` directly (no
    p x q temporaries), clipped at 0 (rounding can make a squared distance negative).
    Returns them and how many are NaN."""
    return _similarity_rows(x, np.arange(x.shape[0]), sq, cov)


@numba.njit(cache=True, nogil=True)
def _coverage_similarity(x: np.ndarray, rows: np.ndarray, sq: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, int]:
    """Similarities of the pool rows ``x[rows]`` (squared norms ``sq``) to the coverage
    positions ``cov`` (drawn, in any order; none drawn: the whole pool) and their NaN count;
    coverage points do not cover themselves (see the module docstring)."""
    p = rows.shape[0]
    cov = np.arange(p) if cov.shape[0] == 0 else np.sort(cov)
    q = cov.shape[0]
    sim, nans = _similarity_rows(x, rows, sq, cov)
    if q < p:
        for c in range(q):
            sim[cov[c], c] = 0.0
    return sim, nans


@numba.njit(cache=True, nogil=True)
def _smdl_select(x: np.ndarray, source: np.ndarray, entropy: np.ndarray, pool: np.ndarray, mean: np.ndarray,
                 weights: tuple, log_classes: float, k: int, typical: np.ndarray, cov: np.ndarray,
                 sample_size: int, uniforms: np.ndarray, fixed: np.ndarray) -> tuple[np.ndarray, bool]:
    """Greedy's picks for a pool (see :meth:`SubmodularSelector.select_from_pool`): the
    weighted, normalized terms, then :func:`_smdl_greedy`. ``x`` holds the pool's
    embeddings (rows in ``pool`` order), or has no rows and they are read here from
    ``source`` (all the embeddings); ``entropy`` holds every example's, ``log_classes`` the
    entropy of an unobserved example (< 0: no logits yet, uniform), ``typical`` the random
    batch that fixes the scales, ``cov`` the coverage positions in any order (empty: the
    whole pool; unused without an R term).
    Returns the picks and whether every term was finite (greedy is skipped if not)."""
    if x.shape[0] != pool.shape[0]:
        x = np.empty((pool.shape[0], source.shape[1]), dtype=np.float32)
        for i in range(pool.shape[0]):  # element by element: a row slice assignment is 5x slower
            r = pool[i]
            for j in range(source.shape[1]):
                x[i, j] = source[r, j]
    p, d = x.shape
    l_u, l_r, l_m, l_f = weights[0], weights[1], weights[2], weights[3]
    free = k - fixed.shape[0]
    modular = np.zeros(p, dtype=np.float64)
    if l_u > 0:
        _add_uncertainty(modular, entropy, pool, log_classes, l_u / k)
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
        _add_closeness(modular, dist, l_m / k)
    w_r = 0.0
    nans = 0
    sim_t = np.zeros((p, 0), dtype=np.float32)
    if l_r > 0:
        sim_t, nans = _coverage_similarity(x, np.arange(p), sq, cov)
        w_r = _coverage_weight(sim_t, np.arange(p), typical, k, l_r)
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
        w_f = _feature_weight(feats, np.arange(p), typical, k, l_f)
    # NaN gains would leave the greedy heap unordered (and its loop unbounded). The
    # similarities and features come out of exp of values <= 0 (and a division by a sum
    # >= 1): finite unless NaN, counted where they were computed.
    if not _all_finite(nans, w_r, w_f, modular):
        return np.empty(0, dtype=np.int64), False
    rows = np.arange(p)
    return _smdl_greedy(sim_t, rows, modular, feats, rows, w_r, w_f, free, sample_size, uniforms, fixed), True


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


@numba.njit(cache=True, nogil=True)
def _stable_argsort(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` for non-negative integers: an LSD radix sort, a
    byte a pass (a pool of 1024: 8 us, numba's merge sort 35 us). A stable sort's order is
    unique, so it is the merge sort's."""
    n = keys.shape[0]
    top = 0
    for i in range(n):
        top = max(top, keys[i])
    idx = np.arange(n)
    tmp = np.empty(n, dtype=np.int64)
    count = np.empty(257, dtype=np.int64)
    shift = 0
    while shift == 0 or (top >> shift) > 0:
        for b in range(257):
            count[b] = 0
        for i in range(n):
            count[((keys[idx[i]] >> shift) & 255) + 1] += 1
        for b in range(256):
            count[b + 1] += count[b]
        for i in range(n):
            b = (keys[idx[i]] >> shift) & 255
            tmp[count[b]] = idx[i]
            count[b] += 1
        idx, tmp = tmp, idx
        shift += 8
    return idx


@numba.njit(cache=True, nogil=True)
def _smdl_pool(order: np.ndarray, m: int, p: int, shard: np.ndarray,
               due: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A batch's pool: the first ``p`` unused positions ``order[m-1], order[m-2], ...``
    (ascending), as example indices in increasing order (``pool``; ties -> smallest index),
    ``srt`` mapping the pool back to those positions, and the pool positions of the first
    ``due`` of them (``fixed``, in the batch from the start)."""
    examples = np.empty(p, dtype=np.int64)
    for i in range(p):
        examples[i] = shard[order[m - 1 - i]]
    srt = _stable_argsort(examples)
    where = np.empty(p, dtype=np.int64)
    for i in range(p):
        where[srt[i]] = i
    return examples[srt], srt, where[:due].copy()


# -- the pool's rows across batches ---------------------------------------------------------
# The pool is a window sliding through the shard: about B examples enter it per batch, the
# others stay. What a batch computes per row (the embedding, its squared norm, its distance
# to the mean, its features; with ``coverage_every > 1`` its similarities to the coverage
# set) is a function of that row alone (the kernels compute each output from its own row,
# in a fixed order), so it is kept per run in slots of a _RowCache and computed only for the
# rows that enter: the values are those a fresh computation gives.
@numba.njit(cache=True, nogil=True)
def _stretch_setup(source: np.ndarray, rows: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, float]:
    """The coverage side of a stretch of batches: for the pool ``source[rows]`` (in that
    order) and its coverage positions ``cov``, the right-hand matrix of the similarity
    product (:func:`_similarity_kernel`'s) and ``1 / sigma^2``, sigma^2 the pool's mean
    pairwise squared distance."""
    sq = np.empty(rows.shape[0], dtype=np.float32)
    for i in range(rows.shape[0]):
        sq[i] = einsum_dot(source[rows[i]], source[rows[i]])
    scale = _inverse_sigma2(source, rows, sq)
    right_t = _right_side(source, rows, sq, cov)
    return right_t, scale


@numba.njit(cache=True, nogil=True)
def _smdl_step(source: np.ndarray, src_pool: np.ndarray, entropy: np.ndarray, mean: np.ndarray,
                      weights: tuple, log_classes: float, k: int, typical: np.ndarray, cov: np.ndarray,
                      sample_size: int, uniforms: np.ndarray, order: np.ndarray, m: int, p: int,
                      shard: np.ndarray, due: int, c_pos: np.ndarray, c_slot: np.ndarray, c_count: np.ndarray,
                      cx: np.ndarray, csq: np.ndarray, cdist: np.ndarray, cfeats: np.ndarray, cfnan: np.ndarray,
                      csim: np.ndarray, cstamp: np.ndarray, stamp: int, right_t: np.ndarray, scale: float,
                      cov_pos: np.ndarray, zero_self: bool) -> tuple[np.ndarray, bool]:
    """One online batch: :func:`_smdl_select`'s terms and greedy on the pool of
    :func:`_smdl_pool`, then the run's bookkeeping: ``order[m-p:m-k]`` gets the pool's
    unused positions (descending), ``order[m-k:m]`` the batch's. Returns the batch (example
    indices) and whether the terms were finite (the run is not changed if not).

    The pool's rows are kept in the cache arrays ``c*`` (slots, see :class:`_RowCache`):
    ``c_pos[:c_count[0]]`` the cached pool positions (ascending), ``c_slot`` their slots.
    The rows of the pool not cached are read (``source[shard[position]]``, or
    ``source[src_pool[i]]`` for the i-th pool position in ascending order when
    ``src_pool`` is not empty) and their terms computed. ``stamp < 0``: the similarities
    are this batch's (coverage positions ``cov`` of the pool, sigma^2 of the pool), as
    :func:`_smdl_select` computes them; ``stamp >= 0``: the stretch ``stamp``'s
    (:func:`_stretch_setup`: ``right_t``, ``scale``; rows whose position is in ``cov_pos``
    do not cover themselves if ``zero_self``), kept in ``csim`` for the rows whose
    ``cstamp`` is ``stamp`` and computed for the others."""
    d = source.shape[1]
    l_u, l_r, l_m, l_f = weights[0], weights[1], weights[2], weights[3]
    # the pool's positions (ascending) and their slots; rows not cached take free slots
    ppos = np.empty(p, dtype=np.int64)
    for i in range(p):
        ppos[i] = order[m - 1 - i]
    cap = c_pos.shape[0]
    used = np.zeros(cap, dtype=np.bool_)
    pslot = np.full(p, -1, dtype=np.int64)
    a, n_old = 0, c_count[0]
    for i in range(p):
        while a < n_old and c_pos[a] < ppos[i]:
            a += 1
        if a < n_old and c_pos[a] == ppos[i]:
            pslot[i] = c_slot[a]
            used[c_slot[a]] = True
            a += 1
    mu = np.empty(d, dtype=np.float32)
    for j in range(d):
        mu[j] = np.float32(mean[j])
    # the rows not cached take free slots and are read first: a loop of copies alone keeps
    # many of the (random) rows' reads in flight, one that also computed waited for each row
    new_slots = np.empty(p, dtype=np.int64)
    n_new, free_slot = 0, 0
    for i in range(p):
        if pslot[i] >= 0:
            continue
        while used[free_slot]:
            free_slot += 1
        sl = free_slot
        used[sl] = True
        pslot[i] = sl
        r = shard[ppos[i]] if src_pool.shape[0] == 0 else src_pool[i]
        row = cx[sl]
        for j in range(d):
            row[j] = source[r, j]
        new_slots[n_new] = sl
        n_new += 1
    for t in range(n_new):
        sl = new_slots[t]
        row = cx[sl]
        csq[sl] = einsum_dot(row, row)
        f = cfeats[sl]
        for j in range(d):
            f[j] = row[j] - mu[j]
        cdist[sl] = np.float64(np.sqrt(einsum_dot(f, f)))
        top = _row_max(row)
        for j in range(d):
            f[j] = row[j] - top
        exp_f32(f)
        total = pairwise_sum(f, 0, d)
        bad = 0
        for j in range(d):
            v = f[j] / total
            f[j] = v
            bad += v != v
        cfnan[sl] = bad
        cstamp[sl] = -1
    for i in range(p):
        c_pos[i] = ppos[i]
        c_slot[i] = pslot[i]
    c_count[0] = p
    pool, srt, fixed = _smdl_pool(order, m, p, shard, due)
    rows = np.empty(p, dtype=np.int64)  # pool index (by example) -> slot
    for c in range(p):
        rows[c] = pslot[srt[c]]
    free = k - fixed.shape[0]
    # the terms, as _smdl_select computes them
    modular = np.zeros(p, dtype=np.float64)
    if l_u > 0:
        _add_uncertainty(modular, entropy, pool, log_classes, l_u / k)
    if l_m > 0:
        dist = np.empty(p, dtype=np.float64)
        for i in range(p):
            dist[i] = cdist[rows[i]]
        _add_closeness(modular, dist, l_m / k)
    w_r = 0.0
    nans = 0
    sim = np.zeros((p, 0), dtype=np.float32)
    srows = rows
    if l_r > 0 and stamp < 0:
        sqp = np.empty(p, dtype=np.float32)
        for i in range(p):
            sqp[i] = csq[rows[i]]
        sim, nans = _coverage_similarity(cx, rows, sqp, cov)
        srows = np.arange(p)
    elif l_r > 0:
        sim = csim
        q = csim.shape[1]
        todo = np.empty(p, dtype=np.int64)
        todo_slots = np.empty(p, dtype=np.int64)
        todo_sq = np.empty(p, dtype=np.float32)
        r = 0
        for i in range(p):
            if cstamp[pslot[i]] != stamp:
                todo[r] = i
                todo_slots[r] = pslot[i]
                todo_sq[r] = csq[pslot[i]]
                r += 1
        if r > 0:
            left = _left_side(cx, todo_slots[:r], todo_sq, np.float32(scale))
            fresh = np.empty((r, q), dtype=np.float32)
            gemm_fma(left, right_t, fresh)
            bad = exp_f32_clipped(fresh.ravel())
            nans += bad
            for t in range(r):
                i = todo[t]
                sl = pslot[i]
                if zero_self:
                    c = np.searchsorted(cov_pos, ppos[i])
                    if c < cov_pos.shape[0] and cov_pos[c] == ppos[i]:
                        fresh[t, c] = 0.0
                for c in range(q):
                    csim[sl, c] = fresh[t, c]
                if bad == 0:
                    cstamp[sl] = stamp
    if l_r > 0:
        w_r = _coverage_weight(sim, srows, typical, k, l_r)
    w_f = 0.0
    if l_f > 0:
        for i in range(p):
            nans += cfnan[rows[i]]
        w_f = _feature_weight(cfeats, rows, typical, k, l_f)
    if not _all_finite(nans, w_r, w_f, modular):
        return np.empty(0, dtype=np.int64), False
    picks = _smdl_greedy(sim, srows, modular, cfeats, rows, w_r, w_f, free, sample_size, uniforms, fixed)
    # the run's bookkeeping
    keep = np.ones(p, dtype=np.bool_)
    chosen = np.empty(k, dtype=np.int64)
    nf = fixed.shape[0]
    for t in range(k):
        chosen[t] = srt[fixed[t] if t < nf else picks[t - nf]]
        keep[chosen[t]] = False
    top = m - k
    for i in range(p):
        if keep[i]:
            top -= 1
            order[top] = ppos[i]
    batch = np.empty(k, dtype=np.int64)
    for t in range(k):
        order[m - k + t] = ppos[chosen[t]]
        batch[t] = shard[ppos[chosen[t]]]
    return batch, True


class _RowCache:
    """A run's cached pool rows (see :func:`_smdl_step`), for the embeddings of one
    version; with ``coverage_every > 1``, also the current stretch's coverage side."""

    def __init__(self, capacity: int, d: int, version: int) -> None:
        self.version = version
        self.pos = np.empty(capacity, dtype=np.int64)
        self.slot = np.empty(capacity, dtype=np.int64)
        self.count = np.zeros(1, dtype=np.int64)
        self.x = np.empty((capacity, d), dtype=np.float32)
        self.sq = np.empty(capacity, dtype=np.float32)
        self.dist = np.empty(capacity, dtype=np.float64)
        self.feats = np.empty((capacity, d), dtype=np.float32)
        self.fnan = np.zeros(capacity, dtype=np.int64)
        self.sim = np.empty((capacity, 0), dtype=np.float32)
        self.stamp = np.full(capacity, -1, dtype=np.int64)
        self.stretch = -1
        self.right_t = np.empty((d + 2, 0), dtype=np.float32)
        self.scale = 1.0
        self.cov_pos = np.empty(0, dtype=np.int64)
        self.zero_self = False


# streams of a batch's key
_TYPICAL, _COVERAGE, _GREEDY = 1, 2, 3


@numba.njit(cache=True, nogil=True)
def _smdl_draws(key, p, k, q, free, sample):  # pragma: no cover - numba
    """A batch's draws: ``k`` distinct pool positions (the typical batch), ``q`` (the
    coverage set) and ``free x sample`` uniforms for stochastic greedy."""
    scratch = np.empty(p, dtype=np.int64)
    typical = np.empty(k, dtype=np.int64)
    _choice(_substream(key, _TYPICAL), p, k, scratch, typical)
    cov = np.empty(q, dtype=np.int64)
    if q > 0:
        _choice(_substream(key, _COVERAGE), p, q, scratch, cov)
    uniforms = np.empty((free, sample), dtype=np.float64)
    stream = _substream(key, _GREEDY)
    for i in range(free):
        for j in range(sample):
            uniforms[i, j] = _uniform(stream, i * sample + j)
    return typical, cov, uniforms


# what _draws passes when the coverage set is the whole pool / greedy is exact (never written)
_NO_POSITIONS = np.zeros(0, dtype=np.int64)
_NO_UNIFORMS = np.zeros((0, 0), dtype=np.float64)
_NOT_FINITE = ("the SMDL terms of this pool are not finite (the embeddings' distances overflow float32); "
               "rescale the embeddings (e.g. divide them by their standard deviation)")


def entropy_of_logits(logits: np.ndarray) -> np.ndarray:
    """Entropy (nats) of softmax(logits) per row, computed stably.

    >>> entropy_of_logits(np.zeros((1, 4))).round(4).tolist()
    [1.3863]
    """
    # z - max, log_p = z - log(sum(exp(z))), -sum(exp(log_p) * log_p), in two buffers
    # (the same operations, so the same values, with fewer temporaries and calls)
    z = np.array(logits, dtype=np.float64)
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    z -= np.log(p.sum(axis=1, keepdims=True))
    np.exp(z, out=p)
    p *= z
    h = p.sum(axis=1)
    return np.negative(h, out=h)


class SubmodularSelector(CounterKeyedBatches, OnlineSelector):
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
        the mean, feature match. Default: coverage alone, (0, 1, 0, 0), chosen on a
        validation split over 12 cases (module docstring); the paper's are
        (0.2, 0.1, 0.5, 0.2). Without ``l_u`` the logits given to :meth:`observe` change
        nothing.
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
    coverage_every:
        Batches for which the coverage set and sigma^2 of R are kept (default 1: drawn for
        every batch from its pool). With ``n > 1`` they are those of the pool at the first
        batch of each stretch of ``n`` batches (the coverage set drawn from a generator of
        its own, so a resumed run draws the same), and the similarities of the examples
        still in the pool are reused: about B examples enter the pool per batch, so only
        theirs are computed (``ceil(pool_size / B)``, 8 at the default pool, computes about
        a quarter of the similarities per batch on average). Other picks than the default's
        (with coverage alone, n = 8 lost to random on the clean mnist1d MLP, -0.45 +- 0.19
        points, validation, 10 seeds: ``benchmarks/results/smdl_default/val.md``);
        :meth:`select_from_pool` draws its coverage set per call whatever this is.

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
        coverage_every: int = 1,
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
        self.coverage_every = check_int(coverage_every, "coverage_every", minimum=1)
        self._version = 0  # of the embeddings: a run's cached rows are for one version
        self.entropy_ = np.full(self.num_examples, np.nan, dtype=np.float32)
        self.num_classes_: int | None = None
        self._refreshed = False
        self.mean_ = self._mean()

    @property
    def feedback_fields(self) -> tuple[str, ...]:  # type: ignore[override]
        # only U reads the logits: without it a sampler shares no logits (and, without
        # refreshed embeddings, no collective at all)
        return ("logits", "embeddings") if self.weights[0] > 0 else ("embeddings",)

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
            self._version += 1

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
        self._version += 1

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
        count = len(sizes)
        k = min(int(sizes[t]), m) if t < count else min(self.batch_size, m)
        # self._due(sizes, t, len(shard)), from the run's cumulative sizes
        turn = t + 1 - self.max_delay
        bound = len(shard) if t >= count - 1 else (run["ends"][turn - 1] if turn > 0 else 0)
        due = _count_below(order, m, bound)
        # hand over to the turn order over the last ceil(pool / B) batches (module docstring)
        handover = -(-self.pool_size // self.batch_size)
        left = count - t
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
        stretch = self.coverage_every > 1 and self.weights[1] > 0
        typical, cov, sample, uniforms = self._draws(p, k, due, rng, draw_coverage=not stretch)
        emb = self.embeddings
        if type(emb) in (np.ndarray, np.memmap):  # float32 C-contiguous (load_embeddings): read in the kernel
            source, src_pool = emb, _NO_POSITIONS
        else:  # the pool's rows, in ascending position order
            source, src_pool = self._read_rows(shard[order[m - p:m][::-1]]), np.arange(p)
        cache = run.get("cache")
        if cache is None or cache.version != self._version or cache.x.shape[0] < p:
            cache = run["cache"] = _RowCache(self.pool_size, emb.shape[1], self._version)
        stamp = -1
        if stretch:
            stamp = t // self.coverage_every
            if cache.stretch != stamp:
                self._new_stretch(run, cache, t, stamp)
        batch, finite = _smdl_step(
            source, src_pool, self.entropy_, self.mean_, self.weights, self._log_classes(), k, typical, cov,
            sample, uniforms, order, m, p, shard, due, cache.pos, cache.slot, cache.count, cache.x, cache.sq,
            cache.dist, cache.feats, cache.fnan, cache.sim, cache.stamp, stamp, cache.right_t, cache.scale,
            cache.cov_pos, cache.zero_self)
        if not finite:
            raise ValueError(_NOT_FINITE)
        run["m"] = m - k
        return batch

    def _new_stretch(self, run: dict[str, Any], cache: _RowCache, t: int, stamp: int) -> None:
        """The coverage side of stretch ``stamp`` (batches ``stamp * coverage_every`` on):
        the coverage set and sigma^2 of the pool at its first batch ``t0``, from the run's
        state alone (``order[:m0]`` were the unused positions then), so a resumed run
        computes the same; the coverage set is drawn from its own generator."""
        t0 = stamp * self.coverage_every
        order, m, shard = run["order"], run["m"], run["shard"]
        m0 = m + sum(len(b) for b in run["drawn"][t0:t])  # order[m:m0]: the batches t0..t-1
        p0 = min(self.pool_size, m0)
        pool0 = np.sort(np.concatenate([order[max(m - p0, 0):m], order[m:m0]]))[:p0]  # the first p0 unused then
        q0 = p0 if self.coverage_size is None else min(self.coverage_size, p0)
        cov0 = np.arange(p0)
        if q0 < p0:
            cov0 = np.sort(epoch_rng(self.seed, run["epoch"], run["rank"], t0, 1).choice(p0, size=q0, replace=False))
        emb = self.embeddings
        if type(emb) in (np.ndarray, np.memmap):
            source, rows = emb, shard[pool0]
        else:
            source, rows = self._read_rows(shard[pool0]), np.arange(p0)
        cache.right_t, scale = _stretch_setup(source, rows, cov0)
        cache.scale = float(scale)
        cache.cov_pos, cache.zero_self = pool0[cov0], q0 < p0
        if cache.sim.shape[1] != q0:
            cache.sim = np.empty((cache.x.shape[0], q0), dtype=np.float32)
        cache.stretch = stamp

    def _new_run(self, epoch: int, rank: int, world_size: int) -> dict[str, Any]:
        run = super()._new_run(epoch, rank, world_size)
        run["rank"] = int(rank)  # seeds the coverage sets of coverage_every > 1
        run["order"] = run["order"][::-1].copy()  # descending: the pool is a suffix of order[:m]
        run["ends"] = np.cumsum(run["sizes"]).tolist()  # where each batch's turn ends (see _due)
        return run

    def _restore_run(self, run: dict[str, Any]) -> None:
        super()._restore_run(run)  # may re-cut the sizes
        m = run["m"]
        run["order"][:m] = np.sort(run["order"][:m])[::-1]  # a no-op for states written here
        run["ends"] = np.cumsum(run["sizes"]).tolist()

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

    def _draws(self, p: int, k: int, nfixed: int, rng: Any, draw_coverage: bool = True) -> tuple:
        """A batch's random draws for a pool of ``p`` with ``nfixed`` examples in the batch
        from the start and ``k - nfixed >= 1`` to pick, from its key (an int, or 63 bits of
        a numpy Generator): the batch that fixes the scales, the coverage set (not drawn
        when it is the whole pool; the kernel sorts it), stochastic greedy's uniforms (and
        its sample size). Each comes from its own stream of the key, in one compiled call."""
        q = 0
        if draw_coverage and self.weights[1] > 0 and self.coverage_size is not None and self.coverage_size < p:
            q = self.coverage_size
        free, rest = k - nfixed, p - nfixed
        sample = 0
        if self.optimizer == "stochastic":
            sample = min(rest, max(1, math.ceil(rest / free * math.log(1.0 / self.epsilon))))
        typical, cov, uniforms = _smdl_draws(_stream_key(rng), p, k, q, free if sample else 0, sample)
        return typical, (cov if q else _NO_POSITIONS), sample, (uniforms if sample else _NO_UNIFORMS)

    def _read_rows(self, pool: np.ndarray) -> np.ndarray:
        """The pool's embeddings for an array type other than a plain array or memmap (a
        subclass may read its rows its own way): through its indexing, once."""
        return np.ascontiguousarray(self.embeddings[pool], dtype=np.float32)

    def _log_classes(self) -> float:
        """The entropy of an example whose logits were never observed (-1: no logits yet)."""
        return -1.0 if self.num_classes_ is None else math.log(self.num_classes_)

    def _kernel_args(self, pool: np.ndarray, k: int, rng: np.random.Generator, fixed: np.ndarray) -> tuple:
        """The arguments of :func:`_smdl_select` for a pool (sorted example indices) with
        ``fixed`` pool positions in the batch and ``k - len(fixed) >= 1`` to pick: the
        batch's random draws (:meth:`_draws`) and the embeddings: a plain array (or memmap)
        whole, its pool rows read in the kernel; any other array type's pool rows, read
        once through its indexing."""
        typical, cov, sample, uniforms = self._draws(len(pool), k, len(fixed), rng)
        emb = self.embeddings
        if type(emb) in (np.ndarray, np.memmap):
            x, source = np.empty((0, emb.shape[1]), dtype=np.float32), emb
        else:
            x = source = self._read_rows(pool)
        return (x, source, self.entropy_, pool, self.mean_, self.weights, self._log_classes(), int(k),
                typical, cov, int(sample), uniforms, fixed)

    def __repr__(self) -> str:
        return (f"SubmodularSelector(num_examples={self.num_examples}, batch_size={self.batch_size}, "
                f"weights={self.weights}, pool_size={self.pool_size}, optimizer={self.optimizer!r}, "
                f"partition={self.partition!r}, seed={self.seed})")


__all__ = ["SubmodularSelector", "entropy_of_logits"]
