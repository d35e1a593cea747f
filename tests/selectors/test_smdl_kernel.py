"""SMDL's one-call compiled batch (issue 13, item 1) against the numpy implementation it
replaced: the primitives round exactly as numpy / OpenBLAS, and the picks are the same.

``NumpySMDL`` below is the implementation as it was before the kernel (kept here as the
reference, also run by the benchmarks as "before"): numpy + OpenBLAS terms, its own
``_next_batch`` bookkeeping and ``_greedy_before``, greedy with every sample sorted by
bound (the kernel pops them from a heap instead, in the same order). The compiled path
must reproduce it bit for bit, so that plans, resumed runs and fingerprints computed
before the change stay valid.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from batchsel import SubmodularSelector
from batchsel.core.blas import one_blas_thread
from batchsel.core.heap import before, heap_pop, heap_push
from batchsel.selectors import _smdl_kernels
from batchsel.submodular import kernels


@numba.njit(cache=True, fastmath=True, nogil=True)
def _gain(c, sim_t, cover, modular, feats, acc, root, w_r, w_f):
    """greedy's gain as it was (rows indexed by candidate), for the reference."""
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
def _add(c, sim_t, cover, feats, acc, root):
    for i in range(sim_t.shape[1]):
        cover[i] = max(cover[i], sim_t[c, i])
    for j in range(feats.shape[1]):
        acc[j] += feats[c, j]
        root[j] = np.sqrt(acc[j])


@numba.njit(cache=True, nogil=True)
def _greedy_before(
    sim_t: np.ndarray,
    modular: np.ndarray,
    feats: np.ndarray,
    w_r: float,
    w_f: float,
    k: int,
    sample_size: int,
    uniforms: np.ndarray,
    fixed: np.ndarray,
) -> np.ndarray:
    """greedy as it was (each sample sorted by bound), for the reference."""
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
        for t in range(k):
            s = min(sample_size, m)
            for i in range(s):
                # partial Fisher-Yates: rest[:s] becomes a uniform sample of rest[:m]
                j = i + int(uniforms[t, i] * (m - i))
                if j >= m:
                    j = m - 1
                rest[i], rest[j] = rest[j], rest[i]
            by_bound = np.argsort(-bound[rest[:s]], kind="mergesort")
            best, best_gain, best_slot = -1, 0.0, -1
            for i in by_bound:
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


def _numpy_similarity(x: np.ndarray, cov: np.ndarray) -> np.ndarray:
    sq = np.einsum("ij,ij->i", x, x)
    sigma2 = 2.0 * (float(sq.mean()) - float(np.square(x.mean(axis=0, dtype=np.float64)).sum()))
    scale = np.float32(1.0 / sigma2 if sigma2 > 1e-12 else 1.0)
    p, d = x.shape
    left = np.empty((p, d + 2), dtype=np.float32)
    np.multiply(x, 2 * scale, out=left[:, :d])
    left[:, d] = -scale * sq
    left[:, d + 1] = -scale
    right = np.empty((len(cov), d + 2), dtype=np.float32)
    right[:, :d] = x[cov]
    right[:, d] = 1.0
    right[:, d + 1] = sq[cov]
    sim_t = reference_product(left, right)
    np.minimum(sim_t, 0.0, out=sim_t)
    return np.exp(sim_t, out=sim_t)


def _scaled(values: np.ndarray, scale: float) -> np.ndarray:
    mean = float(values.mean())
    return values * (scale / mean) if mean > 0 else np.zeros_like(values)


class NumpySMDL(SubmodularSelector):
    """The numpy implementation of a batch, as it was before the compiled kernel."""

    def _next_batch(self, run, rng):
        order, m, sizes, shard = run["order"], run["m"], run["sizes"], run["shard"]
        t = len(run["drawn"])
        k = min(int(sizes[t]), m) if t < len(sizes) else min(self.batch_size, m)
        unused = order[:m][::-1]
        due = int(np.searchsorted(unused, self._due(sizes, t, len(shard))))
        due = max(due, self._handed_over(k, m, len(sizes) - t))
        if run["epoch"] < self.warmup_epochs or due >= k:
            p = k
            chosen = np.arange(k)
        else:
            p = min(self.pool_size, m)
            examples = shard[unused[:p]]
            srt = np.argsort(examples, kind="stable")
            where = np.empty(p, dtype=np.int64)
            where[srt] = np.arange(p)
            chosen = srt[self.select_from_pool(examples[srt], k, rng, fixed=where[:due])]
        pool_pos = unused[:p].copy()
        keep = np.ones(p, dtype=bool)
        keep[chosen] = False
        order[m - p : m - k] = pool_pos[keep][::-1]
        order[m - k : m] = pool_pos[chosen]
        run["m"] = m - k
        return shard[pool_pos[chosen]]

    def select_from_pool(self, pool, k, rng=None, fixed=None):
        rng = np.random.default_rng(self.seed) if rng is None else rng
        pool = np.asarray(pool, dtype=np.int64)
        p = len(pool)
        fixed = np.zeros(0, dtype=np.int64) if fixed is None else np.asarray(fixed, dtype=np.int64)
        free = k - len(fixed)
        if free == 0:
            return fixed.copy()
        # the batch's random numbers are the selector's own (counter-based, compiled)
        typical, cov_drawn, sample, uniforms = self._draws(p, k, len(fixed), rng)
        l_u, l_r, l_m, l_f = self.weights
        x = np.asarray(self.embeddings[pool], dtype=np.float32)
        modular = np.zeros(p, dtype=np.float64)
        if l_u > 0:
            u = self.entropy_[pool].astype(np.float64)
            if self.num_classes_ is None:
                u[:] = 1.0
            else:
                u[np.isnan(u)] = math.log(self.num_classes_)
            modular += _scaled(u, l_u / k)
        if l_m > 0:
            diff = x - self.mean_.astype(np.float32)
            dist = np.sqrt(np.einsum("ij,ij->i", diff, diff)).astype(np.float64)
            modular += _scaled(dist.max() - dist, l_m / k)
        w_r = w_f = 0.0
        sim_t = np.zeros((p, 0), dtype=np.float32)
        feats = np.zeros((p, 0), dtype=np.float32)
        if l_r > 0:
            q = p if self.coverage_size is None else min(self.coverage_size, p)
            cov = np.arange(p) if q == p else np.sort(cov_drawn)
            sim_t = _numpy_similarity(x, cov)
            if q < p:
                sim_t[cov, np.arange(q)] = 0.0
            covered = float(sim_t[typical].max(axis=0).sum())
            w_r = l_r / covered if covered > 0 else 0.0
        if l_f > 0:
            feats = x - x.max(axis=1, keepdims=True)
            np.exp(feats, out=feats)
            feats /= feats.sum(axis=1, keepdims=True)
            w_f = l_f / float(np.sqrt(feats[typical].sum(axis=0)).sum())
        picks = _greedy_before(sim_t, modular, feats, w_r, w_f, int(free), int(sample), uniforms, fixed)
        return np.concatenate([fixed, picks])


def _numpy_rounds_as_the_kernels() -> dict[str, bool]:
    """Which primitives of this numpy / BLAS build round as the kernels reproduce them:
    OpenBLAS sgemm as one FMA chain per output (it picks its kernel by CPU), numpy's SIMD
    float32 exp, its pairwise sum and einsum order."""
    rng = np.random.default_rng(123)
    a = rng.normal(size=(64, 66)).astype(np.float32)
    b = rng.normal(size=(40, 66)).astype(np.float32)
    out = np.empty((64, 40), dtype=np.float32)
    kernels.gemm_fma(a, np.ascontiguousarray(b.T), out)
    x = rng.uniform(-100, 80, 10_000).astype(np.float32)
    e = x.copy()
    kernels.exp_f32(e)
    v = rng.normal(size=1000).astype(np.float32)
    dots = np.einsum("ij,ij->i", a, a)
    with one_blas_thread():
        product = a @ b.T
    return {
        "sgemm": bool(np.array_equal(out, product)),
        "exp": bool(np.array_equal(e, np.exp(x))),
        "sum": bool(kernels.pairwise_sum(v, 0, 1000) == v.sum()),
        "einsum": all(kernels.einsum_dot(a[i], a[i]) == dots[i] for i in range(len(a))),
    }


# Bit-identity with the numpy code is a property of the numpy / BLAS build and the CPU (the
# numpy code itself rounded differently on other CPUs). Where OpenBLAS's sgemm is not the
# kernels' FMA chain, the reference takes the kernels' product, so the rest (exp, sums, the
# greedy's bookkeeping, the picks) is still checked bit for bit; the product itself is then
# checked to float32 rounding. A primitive whose numpy rounding differs otherwise skips its
# tests, which `make test` refuses (tests/conftest.py): a build no test covers is said.
ROUNDS_AS = _numpy_rounds_as_the_kernels()
SAME_BUILD = ROUNDS_AS["exp"] and ROUNDS_AS["sum"] and ROUNDS_AS["einsum"]
bit_for_bit = pytest.mark.skipif(
    not SAME_BUILD,
    reason=f"this numpy build rounds differently from the one the kernels reproduce ({ROUNDS_AS}): "
    "picks may differ at near-ties",
)


def reference_product(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``left @ right.T`` as the numpy implementation ran it (one BLAS thread), or the
    kernels' FMA-chain product where this BLAS rounds otherwise."""
    if ROUNDS_AS["sgemm"]:
        with one_blas_thread():
            return left @ right.T
    out = np.empty((len(left), len(right)), dtype=np.float32)
    kernels.gemm_fma(left, np.ascontiguousarray(right.T), out)
    return out


def clustered(n, d, seed=0, clusters=20):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(clusters, d)).astype(np.float32) * 3
    return (centers[rng.integers(0, clusters, n)] + rng.normal(size=(n, d)).astype(np.float32)).astype(np.float32)


# -- the primitives round as numpy / OpenBLAS do ---------------------------------------------
@pytest.mark.parametrize("shape", [(1024, 66, 256), (1001, 10, 77), (3, 5, 40), (64, 130, 33), (1, 1, 1)])
def test_gemm_fma_is_openblas_sgemm_bit_for_bit(shape):
    """Bit for bit where OpenBLAS's sgemm is one FMA chain per output (its kernel for the
    CPU); elsewhere to the float32 rounding of a depth-long sum."""
    p, depth, q = shape
    rng = np.random.default_rng(p)
    a = rng.normal(size=(p, depth)).astype(np.float32)
    b = rng.normal(size=(q, depth)).astype(np.float32)
    out = np.empty((p, q), dtype=np.float32)
    kernels.gemm_fma(a, np.ascontiguousarray(b.T), out)
    for threads in (1, None):  # OpenBLAS splits the outputs over threads, never a sum
        with threadpool_limits(limits=threads, user_api="blas"):
            product = a @ b.T
        if ROUNDS_AS["sgemm"]:
            assert np.array_equal(out, product)
        else:
            bound = depth * np.finfo(np.float32).eps * (np.abs(a) @ np.abs(b.T))
            assert np.all(np.abs(out - product) <= bound)


@pytest.mark.parametrize("shape", [(1001, 66, 250), (7, 5, 31), (64, 130, 33), (9, 3, 1)])
def test_gemm_fma_edges_are_the_tiles_chains(shape):
    """The rows and columns beyond whole 8 x 32 tiles go through the tile on zero-padded
    copies: every output is the value the padded, tile-aligned product gives it."""
    p, depth, q = shape
    rng = np.random.default_rng(q)
    a = rng.normal(size=(p, depth)).astype(np.float32)
    b_t = rng.normal(size=(depth, q)).astype(np.float32)
    out = np.full((p, q), np.nan, dtype=np.float32)
    kernels.gemm_fma(a, b_t, out)
    padded = np.zeros((-(-p // 8) * 8, depth), dtype=np.float32)
    padded[:p] = a
    right = np.zeros((depth, -(-q // 32) * 32), dtype=np.float32)
    right[:, :q] = b_t
    full = np.empty((padded.shape[0], right.shape[1]), dtype=np.float32)
    kernels.gemm_fma(padded, right, full)
    assert np.array_equal(out, full[:p, :q])
    assert np.allclose(out, a.astype(np.float64) @ b_t.astype(np.float64), rtol=1e-4, atol=1e-4)


@bit_for_bit
def test_exp_f32_is_numpys_exp_bit_for_bit():
    rng = np.random.default_rng(1)
    x = np.concatenate(
        [
            rng.uniform(-110, 0, 500_000),
            rng.uniform(-1, 90, 100_000),
            -rng.exponential(1e-3, 10_000),
            [
                0.0,
                -0.0,
                np.nan,
                np.inf,
                -np.inf,
                88.72283935546875,
                -103.97208404541015625,
                88.7,
                -87.4,
                -126 * math.log(2),
                -150 * math.log(2),
            ],
        ]
    ).astype(np.float32)
    out = x.copy()
    kernels.exp_f32(out)
    with np.errstate(over="ignore"):
        assert np.array_equal(out, np.exp(x), equal_nan=True)
        clipped = x.copy()
        assert kernels.exp_f32_clipped(clipped) == 1  # the one NaN
        assert np.array_equal(clipped, np.exp(np.minimum(x, 0)), equal_nan=True)


@bit_for_bit
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pairwise_sum_is_numpys_sum(dtype):
    rng = np.random.default_rng(2)
    for n in [1, 2, 7, 8, 9, 63, 64, 127, 128, 129, 255, 256, 1000, 1024, 3000, 70_001]:
        for _ in range(5):
            v = (rng.normal(size=n) * 10 ** rng.uniform(-3, 3, n)).astype(dtype)
            assert kernels.pairwise_sum(v, 0, n) == v.sum(), n
            assert kernels.pairwise_sum(v, 3, n - 3) == v[3:].sum() if n > 3 else True


@bit_for_bit
@pytest.mark.parametrize("d", [1, 3, 4, 8, 15, 16, 17, 64, 100])
def test_einsum_dot_is_numpys_einsum(d):
    x = np.random.default_rng(d).normal(size=(300, d)).astype(np.float32) * 7
    ref = np.einsum("ij,ij->i", x, x)
    assert all(kernels.einsum_dot(x[i], x[i]) == ref[i] for i in range(len(x)))


@bit_for_bit
def test_similarity_kernel_is_the_numpy_similarity_bit_for_bit():
    x = clustered(1024, 64)
    cov = np.sort(np.random.default_rng(0).choice(1024, 256, replace=False))
    sq = np.array([kernels.einsum_dot(r, r) for r in x], dtype=np.float32)
    sim, nans = _smdl_kernels._similarity_kernel(x, sq, cov)
    assert nans == 0 and np.array_equal(sim, _numpy_similarity(x, cov))


# -- the picks are the numpy implementation's -----------------------------------------------
CONFIGS = [
    dict(),
    dict(optimizer="lazy"),
    dict(coverage_size=None),
    dict(weights=(0.2, 0.5, 0.1, 0.2)),
    dict(weights=(1, 0, 0, 0)),
    dict(weights=(0, 1, 0, 0), optimizer="lazy"),
    dict(weights=(0, 0, 1, 0)),
    dict(weights=(0, 0, 0, 1)),
    dict(weights=(0.5, 0, 1, 2), epsilon=0.1),
]


@bit_for_bit
@pytest.mark.parametrize("kwargs", CONFIGS)
@pytest.mark.parametrize("d", [8, 64])
def test_select_from_pool_picks_what_numpy_picked(kwargs, d):
    x = clustered(3000, d, seed=d)
    new = SubmodularSelector(x, 64, seed=0, **kwargs)
    ref = NumpySMDL(x, 64, seed=0, **kwargs)
    logits = np.random.default_rng(1).normal(size=(2000, 10)) * 2
    rng = np.random.default_rng(5)
    for trial in range(6):
        if trial == 3:  # observed logits: uncertainty varies (and unseen examples are maximal)
            for sel in (new, ref):
                sel.observe(np.arange(2000), logits=logits)
        pool = np.sort(rng.choice(len(x), size=int(rng.integers(64, 700)), replace=False))
        fixed = rng.choice(len(pool), size=int(rng.integers(0, 40)), replace=False)
        a = new.select_from_pool(pool, 64, np.random.default_rng(trial), fixed=fixed)
        b = ref.select_from_pool(pool, 64, np.random.default_rng(trial), fixed=fixed)
        assert np.array_equal(a, b), (trial, kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(),
        dict(pool_size=1024, batch_size=128),
        dict(optimizer="lazy"),
        dict(weights=(0.2, 0.5, 0.1, 0.2), max_delay=8),
    ],
)
@bit_for_bit
def test_online_batches_and_fingerprints_are_the_numpy_implementations(kwargs):
    x = clustered(4000, 64, seed=3, clusters=100)
    kwargs = dict(dict(batch_size=64, seed=2), **kwargs)
    new, ref = SubmodularSelector(x, **kwargs), NumpySMDL(x, **kwargs)
    for epoch in range(2):
        for sel in (new, ref):
            batches = list(sel.iter_batches(epoch))
            sel.observe(np.concatenate(batches), logits=np.random.default_rng(epoch).normal(size=(len(x), 10)))
        assert all(np.array_equal(a, b) for a, b in zip(new._runs[(0, 1)]["drawn"], ref._runs[(0, 1)]["drawn"]))
    assert new.plan(2, 2).fingerprint() == ref.plan(2, 2).fingerprint()


def test_primitives_are_numpys_to_rounding_on_any_build():
    rng = np.random.default_rng(4)
    a = rng.normal(size=(300, 66)).astype(np.float32)
    b = rng.normal(size=(77, 66)).astype(np.float32)
    out = np.empty((300, 77), dtype=np.float32)
    kernels.gemm_fma(a, np.ascontiguousarray(b.T), out)
    assert np.allclose(out, a.astype(np.float64) @ b.T.astype(np.float64), rtol=1e-5, atol=1e-4)
    x = rng.uniform(-87, 80, 100_000).astype(np.float32)  # normal float32 results (subnormals lose digits)
    e = x.copy()
    kernels.exp_f32(e)
    assert np.allclose(e, np.exp(x.astype(np.float64)), rtol=4e-7, atol=0)
    x = clustered(512, 32)
    cov = np.sort(rng.choice(512, 128, replace=False))
    sq = np.array([kernels.einsum_dot(r, r) for r in x], dtype=np.float32)
    sim, nans = _smdl_kernels._similarity_kernel(x, sq, cov)
    assert nans == 0 and np.allclose(sim, _numpy_similarity(x, cov), rtol=1e-5, atol=1e-6)


def test_non_finite_terms_are_refused_without_running_greedy():
    x = np.zeros((64, 4), dtype=np.float32)
    x[:, 0] = np.float32(1e30) * np.arange(64, dtype=np.float32)  # squared distances overflow float32
    sel = SubmodularSelector.__new__(SubmodularSelector)
    SubmodularSelector.__init__(sel, np.ones((64, 4), dtype=np.float32), 8, seed=0)
    sel.embeddings = x  # past the constructor's scale check, as a refreshed row could be
    with pytest.raises(ValueError, match="not finite"):
        sel.select_from_pool(np.arange(64), 8, np.random.default_rng(0))


def test_one_batch_is_one_gil_free_kernel():
    for kernel in (_smdl_kernels.smdl_select, _smdl_kernels._similarity_kernel, kernels.gemm_fma, kernels.exp_f32):
        assert kernel.targetoptions.get("nogil"), kernel.__name__


@pytest.mark.parametrize(
    "p,d,k,coverage",
    [
        (1, 1, 1, None),
        (2, 1, 1, 1),
        (5, 3, 2, None),
        (9, 2, 4, 3),
        (17, 5, 8, 16),
        (33, 64, 16, None),
        (100, 7, 40, 99),
    ],
)
@bit_for_bit
def test_small_and_odd_pools_pick_what_numpy_picked(p, d, k, coverage):
    # shapes off the kernels' tiles and blocks: rows not a multiple of 8, columns not of 32,
    # sums shorter than numpy's 8-way unrolling, one-example pools
    x = clustered(200, d, seed=p)
    rng = np.random.default_rng(p)
    for optimizer in ("stochastic", "lazy"):
        for weights in ((0.2, 0.1, 0.5, 0.2), (0, 1, 0, 0), (1, 1, 1, 1)):
            new = SubmodularSelector(x, k, seed=0, coverage_size=coverage, optimizer=optimizer, weights=weights)
            ref = NumpySMDL(x, k, seed=0, coverage_size=coverage, optimizer=optimizer, weights=weights)
            pool = np.sort(rng.choice(len(x), size=p, replace=False))
            fixed = rng.choice(p, size=int(rng.integers(0, k)), replace=False)
            assert np.array_equal(
                new.select_from_pool(pool, k, np.random.default_rng(1), fixed=fixed),
                ref.select_from_pool(pool, k, np.random.default_rng(1), fixed=fixed),
            )


def test_memory_mapped_embeddings_give_the_same_batches(tmp_path):
    x = clustered(2000, 16, seed=9)
    np.save(tmp_path / "emb.npy", x)
    mapped = SubmodularSelector(str(tmp_path / "emb.npy"), 32, seed=1, pool_size=256)
    assert isinstance(mapped.embeddings, np.memmap)
    inmem = SubmodularSelector(x, 32, seed=1, pool_size=256)
    assert all(np.array_equal(a, b) for a, b in zip(mapped.iter_batches(0), inmem.iter_batches(0)))


def test_compiled_draws_are_distinct_uniform_and_keyed():
    """A batch's draws (typical batch, coverage set, greedy's uniforms): distinct positions
    of the pool, each position as likely as any other, uniforms in [0, 1), the same for the
    same key and independent streams for different keys."""
    from batchsel.selectors._smdl_kernels import smdl_draws

    counts = np.zeros(12)
    for key in range(3000):
        typical, cov, u = smdl_draws(key, 12, 4, 6, 3, 5)
        assert len(set(typical.tolist())) == 4 and len(set(cov.tolist())) == 6
        assert typical.min() >= 0 and typical.max() < 12 and u.shape == (3, 5)
        assert (u >= 0).all() and (u < 1).all()
        counts[typical] += 1
    expected = 3000 * 4 / 12
    assert np.abs(counts - expected).max() < 5 * np.sqrt(expected)  # 1000 +- 5 sd
    a, b = smdl_draws(7, 100, 10, 20, 4, 8), smdl_draws(7, 100, 10, 20, 4, 8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    c = smdl_draws(8, 100, 10, 20, 4, 8)
    assert not np.array_equal(a[0], c[0]) and not np.array_equal(a[2], c[2])
