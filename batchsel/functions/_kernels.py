"""numba kernels for the loops that are inherent to the set functions: a pass over each
candidate's row (dense or CSR) with a float64 accumulator and no temporaries.

Every kernel computes each candidate's value from that candidate's row alone, in a fixed
order, so a gain is bit-identical whichever batch it is computed in (lazy == naive), and,
the terms being monotone in the state, a gain computed later is never larger than one
computed earlier (stale gains are valid upper bounds for lazy greedy).
"""
from __future__ import annotations

import numpy as np
from numba import njit

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


def facility_gains(sim, cur: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """``sum_v max(sim[j, v] - cur[v], 0)`` for every ``j`` in ``cand`` (dense or CSR)."""
    out = np.empty(cand.shape[0], dtype=np.float64)
    if isinstance(sim, np.ndarray):
        fl_dense(sim, cur, cand, out)
    else:
        fl_sparse(sim.indptr, sim.indices, sim.data, cur, cand, out)
    return out


def saturated_gains(sim, room: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """``sum_v min(sim[j, v], room[v])`` for every ``j`` in ``cand`` (dense or CSR)."""
    out = np.empty(cand.shape[0], dtype=np.float64)
    if isinstance(sim, np.ndarray):
        sat_dense(sim, room, cand, out)
    else:
        sat_sparse(sim.indptr, sim.indices, sim.data, room, cand, out)
    return out


# -- CSR with a constant diagonal inserted (k-NN graphs have no self loops) ---------------
@njit(cache=True, nogil=True)
def insert_diagonal(indptr, indices, data, value):
    """A CSR matrix with sorted indices -> the same matrix with ``value`` on the diagonal
    (existing diagonal entries are replaced); one pass, no other temporaries."""
    n = indptr.shape[0] - 1
    new_indptr = np.empty(n + 1, dtype=np.int64)
    new_indices = np.empty(indices.shape[0] + n, dtype=np.int64)
    new_data = np.empty(data.shape[0] + n, dtype=data.dtype)
    q = 0
    new_indptr[0] = 0
    for i in range(n):
        placed = False
        for p in range(indptr[i], indptr[i + 1]):
            c = indices[p]
            if not placed and c >= i:
                new_indices[q] = i
                new_data[q] = value
                q += 1
                placed = True
                if c == i:  # an existing diagonal entry is replaced
                    continue
            new_indices[q] = c
            new_data[q] = data[p]
            q += 1
        if not placed:
            new_indices[q] = i
            new_data[q] = value
            q += 1
        new_indptr[i + 1] = q
    if q < new_indices.shape[0]:
        return new_indptr, new_indices[:q].copy(), new_data[:q].copy()
    return new_indptr, new_indices, new_data


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
