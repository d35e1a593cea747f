"""Submodular selection: batchsel against apricot-select 0.6.1, measured in the same run.

(a) submodlib's published setup: 1024-d blobs (10 centers, std 2, centers in [0, 100]^d),
    budget n/10, facility location over the dense euclidean similarity, lazy greedy.
    Figures: batchsel / apricot time, identical selections (first divergence if not), and
    batchsel / the float32 ``X @ X.T`` alone (the floor of any dense method). batchsel is
    run in both precisions: "single" (float32 Gram, the default) and "double" (float64
    Gram blocks).
(b) sparse: n = 100 000, d = 64, the symmetric 20-NN rbf similarity of
    ``EmbeddingIndex.knn_graph(self_weight=1)`` (the diagonal included), k = 1000; apricot
    gets an int32 copy of the same CSR (its numba kernels are typed int32). Graph
    construction is not timed; batchsel's time includes ``FacilityLocation(sim)`` and the
    selection: by default (the graph is marked symmetric by ``knn_graph``: no check), on an
    unmarked copy of the same arrays (the symmetry check runs, as for a user's own CSR), and
    with ``symmetric=True`` declared. With one BLAS thread and with the default threads.
(c) n = 1 000 000, d = 128, ``FacilityLocation.from_embeddings`` (sparse 20-NN graph,
    chosen automatically above 20 000 points) and k = 1000, in a subprocess: time of the
    graph, of the selection, and the peak resident memory (VmHWM). apricot cannot run it
    (a dense 1M x 1M similarity is 8 TB; its sparse path needs sklearn's k-NN and int32).

Usage: ``python benchmarks/bench_select.py [--quick] [--parts a,b,c]``. ``--quick`` runs
small sizes (well under a minute). Targets: (a) at n = 10 000, <= 0.15 x apricot and
<= 2 x the floor; (b) <= 0.05 x apricot; (c) peak RSS <= 4 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from batchsel import EmbeddingIndex, FacilityLocation, maximize  # noqa: E402


def _apricot_fl(k, data, metric):
    import apricot

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return apricot.FacilityLocationSelection(k, metric=metric, optimizer="lazy").fit(data)


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def _divergence(f, ours, ref):
    """ "yes", or where the selections part and whether that step was an exact tie in
    batchsel's gains (batchsel takes the smallest index, apricot's lazy greedy the first
    one its heap returns)."""
    diff = np.flatnonzero(ours[: len(ref)] != ref)
    if diff.size == 0:
        return "yes"
    at = int(diff[0])
    f.reset()
    for j in ours[:at]:
        f.add(int(j))
    g = f.gains(np.array([ours[at], ref[at]], dtype=np.int64))
    f.reset()
    kind = "an exact tie" if g[0] == g[1] else f"gains {g[0]:.8g} vs {g[1]:.8g}"
    return f"no (from pick {at}: {kind})"


def _warm_up():
    """Load the numba kernels once (cached on disk) so that no run pays the compilation."""
    x = np.random.default_rng(0).normal(size=(300, 8)).astype(np.float32)
    maximize(FacilityLocation.from_embeddings(x), 5)
    maximize(FacilityLocation.from_embeddings(x, neighbors=5), 5)
    _apricot_fl(5, x.astype(np.float64), "euclidean")


def bench_dense(sizes):
    from sklearn.datasets import make_blobs

    print("\n(a) dense facility location, 1024-d blobs, k = n/10, lazy greedy")
    header = (
        f"{'n':>6} {'k':>5} {'threads':>8} {'floor s':>8} {'apricot s':>10} {'precision':>9} {'batchsel s':>10} "
        f"{'/apricot':>9} {'/floor':>7} {'value/apricot':>13}  identical"
    )
    print(header)
    rows = []
    for n in sizes:
        x, _ = make_blobs(n_samples=n, centers=10, n_features=1024, cluster_std=2, center_box=(0, 100), random_state=4)
        x = x.astype(np.float32)
        k = n // 10
        # float64 input: with float32 input, scikit-learn's distances and so apricot's
        # similarity are float32, whose rounding ties and reorders apricot's own picks.
        x64 = x.astype(np.float64)
        for threads in (1, None):
            with threadpool_limits(limits=threads, user_api="blas"):
                label = "1" if threads == 1 else "default"
                floor = min(_timed(lambda: x @ x.T)[1] for _ in range(2))
                ref, t_ref = _timed(lambda: _apricot_fl(k, x64, "euclidean"))
                for precision in ("single", "double"):

                    def run():
                        f = FacilityLocation.from_embeddings(x, precision=precision)
                        return f, maximize(f, k)

                    (f, sel), t = _timed(run)
                    value_ratio = sel.value / float(np.sum(ref.gains))
                    same = _divergence(f, sel.indices, ref.ranking)
                    del f
                    print(
                        f"{n:>6} {k:>5} {label:>8} {floor:>8.3f} {t_ref:>10.3f} {precision:>9} {t:>10.3f} "
                        f"{t / t_ref:>9.3f} {t / floor:>7.2f} {value_ratio:>13.7f}  {same}"
                    )
                    rows.append(
                        dict(
                            n=n,
                            threads=label,
                            precision=precision,
                            floor=floor,
                            apricot=t_ref,
                            batchsel=t,
                            identical=same,
                        )
                    )
    return rows


def _knn_similarity(x, k):
    # the graph with 1 on the diagonal, marked symmetric by knn_graph
    return EmbeddingIndex(x, metric="euclidean", progress=False).knn_graph(k=k, self_weight=1.0)


def bench_sparse(n, d=64, neighbors=20, k=1000):
    from sklearn.datasets import make_blobs

    print(f"\n(b) sparse facility location, n = {n}, d = {d}, {neighbors}-NN similarity, k = {k}, lazy greedy")
    x, _ = make_blobs(n_samples=n, centers=50, n_features=d, cluster_std=2.0, random_state=0)
    x = x.astype(np.float32)
    sim, t_graph = _timed(lambda: _knn_similarity(x, neighbors))
    print(f"  graph (not in the timings): {t_graph:.1f} s, {sim.nnz} entries, indices {sim.indices.dtype}")
    sim32 = sim.copy()
    sim32.indices, sim32.indptr = sim.indices.astype(np.int32), sim.indptr.astype(np.int32)
    result = dict(n=n)
    # The same CSR arrays in a matrix without knn_graph's symmetry mark: FacilityLocation
    # then checks the symmetry itself (one transposition), as for any user-built matrix.
    unmarked = sp.csr_matrix((sim.data, sim.indices, sim.indptr), shape=sim.shape)
    unmarked.indices, unmarked.indptr = sim.indices, sim.indptr
    for threads in (1, None):
        with threadpool_limits(limits=threads, user_api="blas"):
            ref, t_ref = _timed(lambda: _apricot_fl(k, sim32, "precomputed"))
            label = "1 BLAS thread" if threads == 1 else "default BLAS threads"
            print(f"  [{label}] apricot {t_ref:.3f} s")
            for name, matrix, symmetric in (
                ("default, knn_graph", sim, None),
                ("checked", unmarked, None),
                ("declared True", sim, True),
            ):
                f, t_build = _timed(lambda: FacilityLocation(matrix, symmetric=symmetric))
                sel, t_sel = _timed(lambda: maximize(f, k))
                t = t_build + t_sel
                same = _divergence(f, sel.indices, ref.ranking)
                rel = np.max(np.abs(sel.gains - ref.gains) / np.abs(ref.gains))
                print(
                    f"    batchsel, symmetry {name:18s}: {t:.3f} s (construction {t_build:.3f} + selection "
                    f"{t_sel:.3f})   ratio {t / t_ref:.4f}   identical {same}   max rel. gain difference "
                    f"{rel:.1e}   evaluations {sel.evaluations}"
                )
                result[(threads, name)] = t / t_ref
    return result


def _child_large(n, d, k):
    """Runs in a subprocess: the embeddings are made here, in blocks, so the peak memory
    is this workload's own."""
    rng = np.random.default_rng(0)
    centers = rng.normal(scale=4.0, size=(200, d)).astype(np.float32)
    x = np.empty((n, d), dtype=np.float32)
    for start in range(0, n, 1 << 16):
        stop = min(n, start + (1 << 16))
        x[start:stop] = centers[rng.integers(0, 200, stop - start)]
        x[start:stop] += rng.standard_normal((stop - start, d), dtype=np.float32)
    f, t_graph = _timed(lambda: FacilityLocation.from_embeddings(x))
    sel, t_sel = _timed(lambda: maximize(f, k))
    with open("/proc/self/status") as fh:
        hwm = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM"))
    print(
        json.dumps(
            dict(
                n=n,
                d=d,
                k=k,
                sparse=f.sparse,
                nnz=int(f.similarity.nnz),
                graph=t_graph,
                select=t_sel,
                value=sel.value,
                peak_gb=hwm / 2**20,
                picks=len(sel),
            )
        )
    )


def bench_large(n, d=128, k=1000):
    print(f"\n(c) facility location from embeddings, n = {n}, d = {d}, k = {k} (subprocess)")
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", f"{n},{d},{k}"], capture_output=True, text=True
    )
    if proc.returncode != 0:
        print(proc.stderr[-3000:])
        raise SystemExit(f"child failed with code {proc.returncode}")
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    print(
        f"  sparse={r['sparse']} ({r['nnz']} entries)   graph {r['graph']:.1f} s   selection {r['select']:.2f} s   "
        f"peak RSS {r['peak_gb']:.2f} GB (target <= 4 GB: {'met' if r['peak_gb'] <= 4 else 'MISSED'})"
    )
    print("  apricot: not run (dense 1M x 1M similarity = 8 TB; sparse path needs int32 and sklearn k-NN)")
    return r


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (< 1 minute)")
    parser.add_argument("--parts", default="a,b,c", help="which parts to run, e.g. a,b")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child_large(*map(int, args.child.split(",")))
        return
    parts = set(args.parts.split(","))
    _warm_up()
    if "a" in parts:
        bench_dense([1000, 2000] if args.quick else [1000, 5000, 10000])
    if "b" in parts:
        bench_sparse(20_000 if args.quick else 100_000, k=200 if args.quick else 1000)
    if "c" in parts:
        bench_large(30_000 if args.quick else 1_000_000, k=200 if args.quick else 1000)


if __name__ == "__main__":
    main()
