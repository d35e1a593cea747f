"""SMDL's compiled kernels (numba, GIL released): a batch's terms, similarities, greedy and draws.

:class:`~batchsel.selectors.submodular.SubmodularSelector` calls :func:`smdl_draws` (the
batch's random numbers) and :func:`smdl_step` (everything else) once per batch. Their
float32 arithmetic follows numpy's and OpenBLAS's operation for operation
(:mod:`batchsel.submodular.kernels`), so the picks equal those of a numpy implementation.
"""

from __future__ import annotations

import numba
import numpy as np

from batchsel.core.heap import before, heap_build, heap_pop, heap_push
from batchsel.core.rng import choice, substream, uniform
from batchsel.core.sorting import stable_argsort_int
from batchsel.submodular.kernels import einsum_dot, exp_f32, exp_f32_clipped, gemm_fma, pairwise_sum

# streams of a batch's key
_TYPICAL, _COVERAGE, _GREEDY = 1, 2, 3


@numba.njit(cache=True, fastmath=True, nogil=True)
def _gain(
    c: int,
    sim_t: np.ndarray,
    rs: int,
    cover: np.ndarray,
    modular: np.ndarray,
    feats: np.ndarray,
    rf: int,
    acc: np.ndarray,
    root: np.ndarray,
    w_r: float,
    w_f: float,
) -> float:
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
def _add(
    rs: int, sim_t: np.ndarray, cover: np.ndarray, rf: int, feats: np.ndarray, acc: np.ndarray, root: np.ndarray
) -> None:
    for i in range(sim_t.shape[1]):
        cover[i] = max(cover[i], sim_t[rs, i])
    for j in range(feats.shape[1]):
        acc[j] += feats[rf, j]
        root[j] = np.sqrt(acc[j])


# nogil: a sampler with prefetch runs this in a background thread next to the training step
@numba.njit(cache=True, nogil=True)
def _smdl_greedy(
    sim_t: np.ndarray,
    srows: np.ndarray,
    modular: np.ndarray,
    feats: np.ndarray,
    frows: np.ndarray,
    w_r: float,
    w_f: float,
    k: int,
    sample_size: int,
    uniforms: np.ndarray,
    fixed: np.ndarray,
) -> np.ndarray:
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
# to the coverage set, greedy) runs in smdl_select, without the GIL and without BLAS: the
# small pool GEMM oversubscribed the cores under default BLAS threads, and dozens of numpy
# calls per batch each gave up and re-took the GIL, which starved a sampler's prefetch
# thread next to a Python-bound training loop. The arithmetic is numpy's and OpenBLAS's,
# operation for operation (batchsel.submodular.kernels), so the picks are the ones the numpy
# implementation made (tests/selectors/test_smdl_kernel.py keeps that implementation as the reference).
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
def _add_uncertainty(
    modular: np.ndarray, entropy: np.ndarray, pool: np.ndarray, log_classes: float, scale: float
) -> None:
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
def smdl_select(
    x: np.ndarray,
    source: np.ndarray,
    entropy: np.ndarray,
    pool: np.ndarray,
    mean: np.ndarray,
    weights: tuple,
    log_classes: float,
    k: int,
    typical: np.ndarray,
    cov: np.ndarray,
    sample_size: int,
    uniforms: np.ndarray,
    fixed: np.ndarray,
) -> tuple[np.ndarray, bool]:
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
        for i in range(pool.shape[0]):  # element by element: a row slice assignment is slower
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
def count_below(order: np.ndarray, m: int, bound: int) -> int:
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
def _smdl_pool(
    order: np.ndarray, m: int, p: int, shard: np.ndarray, due: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A batch's pool: the first ``p`` unused positions ``order[m-1], order[m-2], ...``
    (ascending), as example indices in increasing order (``pool``; ties -> smallest index),
    ``srt`` mapping the pool back to those positions, and the pool positions of the first
    ``due`` of them (``fixed``, in the batch from the start)."""
    examples = np.empty(p, dtype=np.int64)
    for i in range(p):
        examples[i] = shard[order[m - 1 - i]]
    srt = stable_argsort_int(examples)
    where = np.empty(p, dtype=np.int64)
    for i in range(p):
        where[srt[i]] = i
    return examples[srt], srt, where[:due].copy()


# -- the pool's rows across batches ---------------------------------------------------------
# The pool is a window sliding through the shard: about B examples enter it per batch, the
# others stay. What a batch computes per row (the embedding, its squared norm, its distance
# to the mean, its features; with ``coverage_every > 1`` its similarities to the coverage
# set) is a function of that row alone (the kernels compute each output from its own row,
# in a fixed order), so it is kept per run in slots of a RowCache and computed only for the
# rows that enter: the values are those a fresh computation gives.
@numba.njit(cache=True, nogil=True)
def stretch_setup(source: np.ndarray, rows: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, float]:
    """The coverage side of a stretch of batches: for the pool ``source[rows]`` (in that
    order) and its coverage positions ``cov``, the right-hand matrix of the similarity
    product (:func:`_similarity_kernel`'s) and ``1 / sigma^2``, sigma^2 the pool's mean
    pairwise squared distance."""
    sq = np.empty(rows.shape[0], dtype=np.float32)
    for i in range(rows.shape[0]):
        sq[i] = einsum_dot(source[rows[i]], source[rows[i]])
    scale = _inverse_sigma2(source, rows, sq)
    right_t = _right_side(source, rows, sq, cov)
    return right_t, scale  # type: ignore[return-value]


@numba.njit(cache=True, nogil=True)
def smdl_step(
    source: np.ndarray,
    src_pool: np.ndarray,
    entropy: np.ndarray,
    mean: np.ndarray,
    weights: tuple,
    log_classes: float,
    k: int,
    typical: np.ndarray,
    cov: np.ndarray,
    sample_size: int,
    uniforms: np.ndarray,
    order: np.ndarray,
    m: int,
    p: int,
    shard: np.ndarray,
    due: int,
    c_pos: np.ndarray,
    c_slot: np.ndarray,
    c_count: np.ndarray,
    cx: np.ndarray,
    csq: np.ndarray,
    cdist: np.ndarray,
    cfeats: np.ndarray,
    cfnan: np.ndarray,
    csim: np.ndarray,
    cstamp: np.ndarray,
    stamp: int,
    right_t: np.ndarray,
    scale: float,
    cov_pos: np.ndarray,
    zero_self: bool,
) -> tuple[np.ndarray, bool]:
    """One online batch: :func:`smdl_select`'s terms and greedy on the pool of
    :func:`_smdl_pool`, then the run's bookkeeping: ``order[m-p:m-k]`` gets the pool's
    unused positions (descending), ``order[m-k:m]`` the batch's. Returns the batch (example
    indices) and whether the terms were finite (the run is not changed if not).

    The pool's rows are kept in the cache arrays ``c*`` (slots, see :class:`~batchsel.selectors.smdl_pool.RowCache`):
    ``c_pos[:c_count[0]]`` the cached pool positions (ascending), ``c_slot`` their slots.
    The rows of the pool not cached are read (``source[shard[position]]``, or
    ``source[src_pool[i]]`` for the i-th pool position in ascending order when
    ``src_pool`` is not empty) and their terms computed. ``stamp < 0``: the similarities
    are this batch's (coverage positions ``cov`` of the pool, sigma^2 of the pool), as
    :func:`smdl_select` computes them; ``stamp >= 0``: the stretch ``stamp``'s
    (:func:`stretch_setup`: ``right_t``, ``scale``; rows whose position is in ``cov_pos``
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
    # the terms, as smdl_select computes them
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


@numba.njit(cache=True, nogil=True)
def smdl_draws(key, p, k, q, free, sample):  # pragma: no cover - numba
    """A batch's draws: ``k`` distinct pool positions (the typical batch), ``q`` (the
    coverage set) and ``free x sample`` uniforms for stochastic greedy."""
    scratch = np.empty(p, dtype=np.int64)
    typical = np.empty(k, dtype=np.int64)
    choice(substream(key, _TYPICAL), p, k, scratch, typical)
    cov = np.empty(q, dtype=np.int64)
    if q > 0:
        choice(substream(key, _COVERAGE), p, q, scratch, cov)
    uniforms = np.empty((free, sample), dtype=np.float64)
    stream = substream(key, _GREEDY)
    for i in range(free):
        for j in range(sample):
            uniforms[i, j] = uniform(stream, i * sample + j)
    return typical, cov, uniforms


# what _draws passes when the coverage set is the whole pool / greedy is exact (never written)
