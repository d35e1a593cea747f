"""numba kernels for the loops that are inherent to the set functions: a pass over each
candidate's row (dense or CSR) with a float64 accumulator and no temporaries.

Every kernel computes each candidate's value from that candidate's row alone, in a fixed
order, so a gain is bit-identical whichever batch it is computed in (lazy == naive), and,
the terms being monotone in the state, a gain computed later is never larger than one
computed earlier (stale gains are valid upper bounds for lazy greedy).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir as llvm_ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic


# -- facility location: sum_v max(S[j, v] - cur[v], 0) ------------------------------------
def _fl_dense(sim, cur, cand, out):
    n = sim.shape[1]
    for i in range(cand.shape[0]):
        row = sim[cand[i]]
        acc = 0.0
        for v in range(n):
            acc += max(np.float64(row[v]) - cur[v], 0.0)
        out[i] = acc


def _fl_sparse(indptr, indices, data, cur, cand, out):
    for i in range(cand.shape[0]):
        j = cand[i]
        acc = 0.0
        for p in range(indptr[j], indptr[j + 1]):
            acc += max(np.float64(data[p]) - cur[indices[p]], 0.0)
        out[i] = acc


# -- saturated coverage: sum_v min(S[j, v], room[v]), room = cap - cur >= 0 ---------------
def _sat_dense(sim, room, cand, out):
    n = sim.shape[1]
    for i in range(cand.shape[0]):
        row = sim[cand[i]]
        acc = 0.0
        for v in range(n):
            acc += min(np.float64(row[v]), room[v])
        out[i] = acc


def _sat_sparse(indptr, indices, data, room, cand, out):
    for i in range(cand.shape[0]):
        j = cand[i]
        acc = 0.0
        for p in range(indptr[j], indptr[j + 1]):
            acc += min(np.float64(data[p]), room[indices[p]])
        out[i] = acc


# -- facility location value: running max of selected rows (sparse) -----------------------
def _fl_sparse_cover(indptr, indices, data, rows, cur):
    for r in range(rows.shape[0]):
        j = rows[r]
        for p in range(indptr[j], indptr[j + 1]):
            v = indices[p]
            if data[p] > cur[v]:
                cur[v] = data[p]


def _jit(fn):
    # fastmath lets the reductions vectorize. The summation order then depends only on the
    # row's length and address, both fixed per row, so a gain is still reproducible and
    # monotone in the state. One serial variant only: a parallel one would be compiled to
    # a different order (and the passes are memory-bound anyway).
    return njit(cache=True, nogil=True, fastmath=True)(fn)


fl_dense = _jit(_fl_dense)
fl_sparse = _jit(_fl_sparse)
sat_dense = _jit(_sat_dense)
sat_sparse = _jit(_sat_sparse)
fl_sparse_cover = _jit(_fl_sparse_cover)


def _row_pass(dense, sparse, sim, state: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """One value per ``j`` in ``cand`` from row j of ``sim`` and ``state``: the kernel
    ``dense`` for an ndarray, ``sparse`` for a CSR matrix."""
    out = np.empty(cand.shape[0], dtype=np.float64)
    if isinstance(sim, np.ndarray):
        dense(sim, state, cand, out)
    else:
        sparse(sim.indptr, sim.indices, sim.data, state, cand, out)
    return out


def facility_gains(sim, cur: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """``sum_v max(sim[j, v] - cur[v], 0)`` for every ``j`` in ``cand`` (dense or CSR)."""
    return _row_pass(fl_dense, fl_sparse, sim, cur, cand)


def saturated_gains(sim, room: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """``sum_v min(sim[j, v], room[v])`` for every ``j`` in ``cand`` (dense or CSR)."""
    return _row_pass(sat_dense, sat_sparse, sim, room, cand)


# -- how an add lowers the gains of sparse symmetric functions ------------------------------
@njit(cache=True, nogil=True)
def facility_drops(indptr, indices, data, cur, j):
    """Facility location over a symmetric CSR: adding j raises the coverage of each v of
    row j with S[j, v] > cur[v] from c0 = cur[v] to c1 = S[j, v]; the gain of every u in
    row v (S[u, v] = S[v, u]) with S[u, v] > c0 drops by (S[u, v] - c0) - max(S[u, v] - c1, 0).
    Items whose terms stay 0 keep bit-identical gains and are not listed."""
    total = 0
    for p in range(indptr[j], indptr[j + 1]):
        v = indices[p]
        if data[p] > cur[v]:
            total += indptr[v + 1] - indptr[v]
    items = np.empty(total, dtype=np.int64)
    drops = np.empty(total, dtype=np.float64)
    q = 0
    for p in range(indptr[j], indptr[j + 1]):
        v = indices[p]
        c1 = np.float64(data[p])
        c0 = np.float64(cur[v])
        if c1 <= c0:
            continue
        for r in range(indptr[v], indptr[v + 1]):
            s = np.float64(data[r])
            if s > c0:
                items[q] = indices[r]
                drops[q] = (s - c0) - max(s - c1, 0.0)
                q += 1
    return items[:q], drops[:q]


@njit(cache=True, nogil=True)
def saturated_drops(indptr, indices, data, room, j):
    """Saturated coverage over a symmetric CSR: adding j lowers room[v] from r0 to
    r1 = max(r0 - S[j, v], 0) for v in row j; the gain of every u in row v drops by
    min(S[u, v], r0) - min(S[u, v], r1)."""
    total = 0
    for p in range(indptr[j], indptr[j + 1]):
        v = indices[p]
        if data[p] > 0 and room[v] > 0:
            total += indptr[v + 1] - indptr[v]
    items = np.empty(total, dtype=np.int64)
    drops = np.empty(total, dtype=np.float64)
    q = 0
    for p in range(indptr[j], indptr[j + 1]):
        v = indices[p]
        r0 = room[v]
        if not (data[p] > 0 and r0 > 0):
            continue
        r1 = max(r0 - np.float64(data[p]), 0.0)
        for r in range(indptr[v], indptr[v + 1]):
            s = np.float64(data[r])
            d = min(s, r0) - min(s, r1)
            if d > 0:
                items[q] = indices[r]
                drops[q] = d
                q += 1
    return items[:q], drops[:q]


# -- float32 arithmetic in numpy's and OpenBLAS's order ------------------------------------
# SMDL's per-batch terms (batchsel.selectors.submodular) were computed with numpy and
# OpenBLAS; computed here in one compiled call (no GIL, no BLAS threads) they must round
# exactly as before, or greedy's picks would change wherever two gains are within a few
# ulps. Each primitive below reproduces one numpy / OpenBLAS routine operation for
# operation (tests/selectors/test_smdl_kernel.py compares them with numpy on this machine):
# - ``gemm_fma``: OpenBLAS sgemm (Haswell / SkylakeX kernels), one FMA chain per output in
#   k order; ``fma32`` is that fused multiply-add (a single rounding);
# - ``exp_f32``: numpy's AVX2 / AVX512F float32 exp (Cody-Waite reduction, a 5/2 rational
#   approximation with FMAs, scaling by 2^k);
# - ``pairwise_sum``: numpy's pairwise summation of ``sum`` / ``mean`` over a contiguous axis;
# - ``einsum_dot``: numpy's ``einsum("ij,ij->i")`` row loop on the wheels' x86-64 baseline
#   (4 float32 lanes, unrolled 4 times, multiply then add).
@intrinsic
def fma32(typingctx, a, b, c):
    """``a * b + c`` in float32 with one rounding (``llvm.fma``)."""
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):
        return builder.fma(*args)

    return sig, codegen


@intrinsic
def _bits_to_f32(typingctx, bits):
    """The float32 whose bit pattern is the int32 ``bits``."""
    sig = types.float32(types.int32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], llvm_ir.FloatType())

    return sig, codegen


# one register tile of gemm_fma: _TILE_ROWS rows x _TILE_VECS vectors of _TILE_LANES floats,
# 16 independent FMA chains, enough to hide the FMA latency and few enough for AVX-512's 32
# registers (on par with OpenBLAS on one thread, and faster than a 4 x 2 tile)
_TILE_ROWS, _TILE_VECS, _TILE_LANES = 8, 2, 16


@intrinsic
def _gemm_tile(typingctx, left, right_t, out, i, j):
    """``out[i:i+8, j:j+32] = left[i:i+8] @ right_t[:, j:j+32]`` (C-contiguous float32),
    each output one FMA chain over k in order. LLVM's vectorizers do not keep a tile of
    accumulators in registers for a loop written in Python, so the tile is written in IR
    with explicit vectors (about OpenBLAS's single-thread speed)."""
    sig = types.void(left, right_t, out, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        a = context.make_array(signature.args[0])(context, builder, args[0])
        b = context.make_array(signature.args[1])(context, builder, args[1])
        c = context.make_array(signature.args[2])(context, builder, args[2])
        i, j = args[3], args[4]
        vec = llvm_ir.VectorType(llvm_ir.FloatType(), _TILE_LANES)
        i32, i64 = llvm_ir.IntType(32), llvm_ir.IntType(64)
        vfma = cgutils.get_or_insert_function(
            builder.module, llvm_ir.FunctionType(vec, [vec, vec, vec]), f"llvm.fma.v{_TILE_LANES}f32"
        )
        depth = builder.extract_value(a.shape, 1)
        b_cols = builder.extract_value(b.shape, 1)
        c_cols = builder.extract_value(c.shape, 1)
        accs = [
            cgutils.alloca_once_value(builder, llvm_ir.Constant(vec, [0.0] * _TILE_LANES))
            for _ in range(_TILE_ROWS * _TILE_VECS)
        ]
        splat = llvm_ir.Constant(llvm_ir.VectorType(i32, _TILE_LANES), [0] * _TILE_LANES)
        undef = llvm_ir.Constant(vec, llvm_ir.Undefined)
        with cgutils.for_range(builder, depth) as loop:
            k = loop.index
            row = builder.gep(b.data, [builder.add(builder.mul(k, b_cols), j)])
            bv = [
                builder.load(
                    builder.bitcast(builder.gep(row, [llvm_ir.Constant(i64, _TILE_LANES * v)]), vec.as_pointer()),
                    align=4,
                )
                for v in range(_TILE_VECS)
            ]
            for r in range(_TILE_ROWS):
                at = builder.add(builder.mul(builder.add(i, llvm_ir.Constant(i64, r)), depth), k)
                av = builder.insert_element(undef, builder.load(builder.gep(a.data, [at])), llvm_ir.Constant(i32, 0))
                av = builder.shuffle_vector(av, undef, splat)
                for v in range(_TILE_VECS):
                    acc = accs[r * _TILE_VECS + v]
                    builder.store(builder.call(vfma, [av, bv[v], builder.load(acc)]), acc)
        for r in range(_TILE_ROWS):
            row = builder.gep(c.data, [builder.add(builder.mul(builder.add(i, llvm_ir.Constant(i64, r)), c_cols), j)])
            for v in range(_TILE_VECS):
                ptr = builder.bitcast(builder.gep(row, [llvm_ir.Constant(i64, _TILE_LANES * v)]), vec.as_pointer())
                builder.store(builder.load(accs[r * _TILE_VECS + v]), ptr, align=4)
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True)
def gemm_fma(left, right_t, out):
    """``out = left @ right_t`` for C-contiguous float32 arrays, rounded as OpenBLAS's sgemm
    rounds it: every output is one fused multiply-add chain over k in increasing order."""
    p, depth = left.shape
    q = right_t.shape[1]
    width = _TILE_VECS * _TILE_LANES
    p_end = p - p % _TILE_ROWS
    q_end = q - q % width
    for i in range(0, p_end, _TILE_ROWS):
        for j in range(0, q_end, width):
            _gemm_tile(left, right_t, out, i, j)
    # The edges the tiles leave (the last q % 32 columns of every row, the last p % 8
    # rows) go through the same tile on zero-padded copies: the same chains (a zero row or
    # column changes no other output), where a scalar loop over them cost far more per
    # output than the tiles.
    rows, cols = p - p_end, q - q_end
    if cols > 0:
        right_edge = np.zeros((depth, width), dtype=np.float32)
        right_edge[:, :cols] = right_t[:, q_end:]
        edge = np.empty((p_end, width), dtype=np.float32)
        for i in range(0, p_end, _TILE_ROWS):
            _gemm_tile(left, right_edge, edge, i, 0)
        out[:p_end, q_end:] = edge[:, :cols]
    if rows > 0:
        left_edge = np.zeros((_TILE_ROWS, depth), dtype=np.float32)
        left_edge[:rows] = left[p_end:]
        bottom = np.empty((_TILE_ROWS, q_end), dtype=np.float32)
        for j in range(0, q_end, width):
            _gemm_tile(left_edge, right_t, bottom, 0, j)
        out[p_end:, :q_end] = bottom[:rows]
        if cols > 0:
            corner = np.empty((_TILE_ROWS, width), dtype=np.float32)
            _gemm_tile(left_edge, right_edge, corner, 0, 0)
            out[p_end:, q_end:] = corner[:rows, :cols]


_EXP_XMAX = np.float32(88.72283935546875)
_EXP_XMIN = np.float32(-103.97208404541015625)
_LOG2E = np.float32(1.442695040888963407359924681001892137)
_LN2_HI = np.float32(-6.93145752e-1)
_LN2_LO = np.float32(-1.42860677e-6)
_RINT_MAGIC = np.float32(12582912.0)  # 1.5 * 2^23: adding and subtracting it rounds to an integer
_EXP_P = tuple(
    np.float32(v)
    for v in (
        9.999999999980870924916e-01,
        7.257664613233124478488e-01,
        2.473615434895520810817e-01,
        5.114512081637298353406e-02,
        6.757896990527504603057e-03,
        5.082762527590693718096e-04,
    )
)
_EXP_Q = tuple(np.float32(v) for v in (1.0, -2.742335390411667452936e-01, 2.159509375685829852307e-02))
_P0, _P1, _P2, _P3, _P4, _P5 = _EXP_P
_Q0, _Q1, _Q2 = _EXP_Q
_TWO_M64 = np.float32(2.0**-64)
_TWO_P64 = np.float32(2.0**64)


@njit(cache=True, nogil=True, inline="always")
def _exp1(v):
    inside = v > _EXP_XMIN and v < _EXP_XMAX
    x = v if inside else np.float32(0.0)
    q = x * _LOG2E
    q = (q + _RINT_MAGIC) - _RINT_MAGIC
    y = fma32(q, _LN2_HI, x)
    y = fma32(q, _LN2_LO, y)
    num = fma32(fma32(fma32(fma32(fma32(_P5, y, _P4), y, _P3), y, _P2), y, _P1), y, _P0)
    den = fma32(fma32(_Q2, y, _Q1), y, _Q0)
    # poly * 2^k with one rounding (AVX512's scalef): 2^k from its exponent bits, split in
    # two exact factors where 2^k alone is not a normal float32
    k = np.int32(q)
    low = k < -126
    high = k > 127
    kk = k + np.int32(64) if low else (k - np.int32(64) if high else k)
    extra = _TWO_M64 if low else (_TWO_P64 if high else np.float32(1.0))
    r = (num / den) * _bits_to_f32((kk + np.int32(127)) << np.int32(23)) * extra
    if not inside:
        r = v if v != v else (np.float32(np.inf) if v >= _EXP_XMAX else np.float32(0.0))
    return r


# error_model="numpy": a division by zero gives inf instead of raising, which lets LLVM
# vectorize the loop (the check would be a branch per element). In place: with separate
# source and destination, a call on one array fails LLVM's overlap check and runs the
# scalar loop, several times slower.
@njit(cache=True, nogil=True, error_model="numpy")
def exp_f32(a):
    """``a[:] = np.exp(a)`` for a 1-D float32 array, rounded as numpy's AVX2 / AVX512F
    loop rounds it."""
    for t in range(a.shape[0]):
        a[t] = _exp1(a[t])


@njit(cache=True, nogil=True, error_model="numpy")
def exp_f32_clipped(a):
    """``a[:] = np.exp(np.minimum(a, 0))`` for a 1-D float32 array, rounded as numpy does;
    returns how many results are NaN (the others are finite, in [0, 1]). The count is a
    second pass: counted in the exp's loop, it kept that loop from vectorizing."""
    for t in range(a.shape[0]):
        a[t] = _exp1(min(a[t], np.float32(0.0)))  # numba's min, as Python's, keeps a NaN first argument
    nans = 0
    for t in range(a.shape[0]):
        nans += a[t] != a[t]
    return nans


@njit(cache=True, nogil=True)
def _pairwise_block(a, lo, n):
    """numpy's sum of a block of at most 128: 8 accumulators, then the rest in order."""
    if n < 8:
        res = a[lo]
        for t in range(lo + 1, lo + n):
            res += a[t]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    t = 8
    while t < n - n % 8:
        s = lo + t
        r0 += a[s]
        r1 += a[s + 1]
        r2 += a[s + 2]
        r3 += a[s + 3]
        r4 += a[s + 4]
        r5 += a[s + 5]
        r6 += a[s + 6]
        r7 += a[s + 7]
        t += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while t < n:
        res += a[lo + t]
        t += 1
    return res


@njit(cache=True, nogil=True)
def pairwise_sum(a, lo, n):
    """``a[lo:lo + n].sum()`` of a 1-D array in numpy's order (``n >= 1``): blocks of at
    most 128 by :func:`_pairwise_block`, longer runs split in two (the first half a multiple
    of 8) and the halves' sums added. The recursion runs on an explicit stack (numba's
    cache does not keep recursive functions)."""
    if n <= 128:
        return _pairwise_block(a, lo, n)
    starts = np.empty(64, dtype=np.int64)
    sizes = np.empty(64, dtype=np.int64)
    stage = np.empty(64, dtype=np.int64)
    sums = np.empty(64, dtype=a.dtype)
    top, filled = 0, 0
    starts[0], sizes[0], stage[0] = lo, n, 0
    while top >= 0:
        start, size = starts[top], sizes[top]
        if size <= 128:
            sums[filled] = _pairwise_block(a, start, size)
            filled += 1
            top -= 1
            continue
        half = size // 2
        half -= half % 8
        if stage[top] == 2:  # both halves summed: add them
            sums[filled - 2] = sums[filled - 2] + sums[filled - 1]
            filled -= 1
            top -= 1
            continue
        stage[top] += 1
        first = stage[top] == 1
        top += 1
        starts[top] = start if first else start + half
        sizes[top] = half if first else size - half
        stage[top] = 0
    return sums[0]


@njit(cache=True, nogil=True)
def einsum_dot(a, b):
    """``np.einsum("i,i->", a, b)`` of 1-D float32 arrays in numpy's order (its SSE loop:
    4 lanes, 16 products per step multiplied then added, the lanes summed pairwise)."""
    n = a.shape[0]
    l0 = l1 = l2 = l3 = np.float32(0.0)
    t = 0
    while n - t >= 16:
        l0 = a[t] * b[t] + (a[t + 4] * b[t + 4] + (a[t + 8] * b[t + 8] + (a[t + 12] * b[t + 12] + l0)))
        l1 = a[t + 1] * b[t + 1] + (a[t + 5] * b[t + 5] + (a[t + 9] * b[t + 9] + (a[t + 13] * b[t + 13] + l1)))
        l2 = a[t + 2] * b[t + 2] + (a[t + 6] * b[t + 6] + (a[t + 10] * b[t + 10] + (a[t + 14] * b[t + 14] + l2)))
        l3 = a[t + 3] * b[t + 3] + (a[t + 7] * b[t + 7] + (a[t + 11] * b[t + 11] + (a[t + 15] * b[t + 15] + l3)))
        t += 16
    while t < n:  # the tail, 4 lanes at a time (lanes past the end add nothing)
        l0 = a[t] * b[t] + l0
        if t + 1 < n:
            l1 = a[t + 1] * b[t + 1] + l1
        if t + 2 < n:
            l2 = a[t + 2] * b[t + 2] + l2
        if t + 3 < n:
            l3 = a[t + 3] * b[t + 3] + l3
        t += 4
    return (l0 + l1) + (l2 + l3)
