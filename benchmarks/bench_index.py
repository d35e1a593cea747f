"""Benchmark: the k-NN graph of a large memory-mapped embedding file, against plain faiss.

    python benchmarks/bench_index.py            # N = 1,000,000 x d = 128 (a few minutes)
    python benchmarks/bench_index.py --quick    # N = 100,000 (under a minute)

1. Writes clustered float32 embeddings (a gaussian mixture of ``--clusters`` clusters with a
   decaying spectrum, like real embeddings: clustered, low intrinsic dimension) to a
   temporary ``.npy`` file, in chunks.
2. ``batchsel``: ``EmbeddingIndex(path, metric="euclidean").knn_graph(k)`` on the memory-mapped
   file (kind="auto", default settings, so nprobe tuned on the data), the symmetrized rbf
   CSR graph included.
3. ``faiss``: the same faiss index type with the same parameters (nlist, the nprobe
   batchsel chose, training sample, k-means seed and rounds, flat quantizer) built with
   plain faiss calls, then one ``index.search`` of all N points for k + 1 neighbours; no
   graph, no tuning.
Each runs in its own subprocess: wall time, CPU time, peak RSS (VmHWM, the memory map's
resident pages included) and recall@k of 1000 sampled points against exact search
(for batchsel: the k strongest edges of the sampled rows of the graph).
4. Where ``kind="auto"`` should switch from exact to approximate search: exact vs IVF
   ``knn_graph`` at N = 10k, 25k, 50k, 100k (d = 128), with the IVF recall.
5. Recall@k of IVF (per nprobe) and HNSW (per efSearch) on three mixtures, from well
   separated to weakly clustered, at N = 50k (20k with --quick).

The machine is shared: the load average is printed next to every figure, and CPU seconds
next to wall seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

SAMPLE = 1000  # points whose neighbours are checked against exact search


# Gaussian mixtures: "separated" (the main benchmark's), "overlapping" and "weak" (centres
# ever closer, clusters wider: neighbours cross cluster borders, which is hard for IVF).
MIXTURES = {"separated": (1.0, 0.8), "overlapping": (0.25, 1.0), "weak": (0.15, 1.0)}  # (centre scale, spread)


def write_clustered(
    path: str, n: int, d: int, clusters: int, seed: int = 0, mixture: str = "separated", chunk: int = 1 << 16
) -> None:
    """A gaussian mixture written to ``path`` chunk by chunk (never all in memory); the
    spread inside a cluster decays over the dimensions (a low intrinsic dimension)."""
    from numpy.lib.format import open_memmap

    center_scale, spread0 = MIXTURES[mixture]
    rng = np.random.default_rng(seed)
    centers = (rng.standard_normal((clusters, d)) * center_scale).astype(np.float32)
    spread = (spread0 / np.sqrt(np.arange(1, d + 1))).astype(np.float32)
    out = open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d))
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        labels = rng.integers(0, clusters, stop - start)
        out[start:stop] = centers[labels] + rng.standard_normal((stop - start, d), dtype=np.float32) * spread
    out.flush()
    del out


def exact_neighbours(path: str, sample: np.ndarray, k: int) -> np.ndarray:
    """The k nearest other points of the sampled points, by exact (brute force) search."""
    import faiss

    x = np.load(path, mmap_mode="r")
    _, I = faiss.knn(np.ascontiguousarray(x[sample]), x, k + 1)
    return drop_self(I, sample, k)


def drop_self(I: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """The first k entries of each row that are not the row's own point."""
    keep = I != rows[:, None]
    order = np.argsort(~keep, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(I, order, axis=1)


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(np.intersect1d(f[f >= 0], t)) / len(t) for f, t in zip(found, truth)]))


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def peak_rss_mb() -> float:
    """Peak resident set size of this process, MiB: VmHWM, which starts afresh at exec
    (ru_maxrss would carry over the parent's peak into a subprocess)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux: KiB


# -- the measured parts, each run in a fresh subprocess ----------------------------------
def worker_batchsel(path: str, k: int, sample: np.ndarray, kind: str, nprobe: int | None) -> dict:
    import faiss

    import batchsel.index as bi

    base_rss = peak_rss_mb()
    t0, c0, l0 = time.perf_counter(), cpu_seconds(), os.getloadavg()[0]
    options = {} if nprobe is None else {"nprobe": nprobe}
    index = bi.EmbeddingIndex(path, metric="euclidean", kind=kind, progress=False, **options)
    t_index = time.perf_counter() - t0
    graph = index.knn_graph(k=k)
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    found = strongest_edges(graph, sample, k)
    params = {"kind": index.kind}
    if index.kind == "ivf":
        ivf = index.index
        params.update(
            nlist=int(ivf.nlist),
            nprobe=int(ivf.nprobe),
            recall_estimate=getattr(index, "recall_", None),
            niter=int(ivf.cp.niter),
            seed=int(ivf.cp.seed),
            train_size=int(index.train_size_),
            quantizer=type(faiss.downcast_index(ivf.quantizer)).__name__,
        )
    return {
        "wall": wall,
        "cpu": cpu,
        "index_wall": t_index,
        "rss": peak_rss_mb(),
        "base_rss": base_rss,
        "load": (l0 + os.getloadavg()[0]) / 2,
        "found": found.tolist(),
        "nnz": int(graph.nnz),
        "params": params,
    }


def worker_faiss(path: str, k: int, sample: np.ndarray, params: dict) -> dict:
    import faiss

    base_rss = peak_rss_mb()
    t0, c0, l0 = time.perf_counter(), cpu_seconds(), os.getloadavg()[0]
    x = np.load(path, mmap_mode="r")
    n, d = x.shape
    if params["kind"] == "ivf":
        assert params["quantizer"] in ("IndexFlat", "IndexFlatL2"), params
        quantizer = faiss.IndexFlatL2(d)
        index = faiss.IndexIVFFlat(quantizer, d, params["nlist"])
        index.cp.niter, index.cp.seed = params["niter"], params["seed"]
        train = np.random.default_rng(params["seed"]).choice(n, size=params["train_size"], replace=False)
        index.train(np.ascontiguousarray(x[np.sort(train)]))
        index.nprobe = params["nprobe"]
    else:
        index = faiss.IndexFlatL2(d)
    index.add(x)
    _, I = index.search(x, k + 1)
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    return {
        "wall": wall,
        "cpu": cpu,
        "rss": peak_rss_mb(),
        "base_rss": base_rss,
        "load": (l0 + os.getloadavg()[0]) / 2,
        "found": drop_self(I[sample], sample, k).tolist(),
    }


def worker_sweep(n: int, d: int, k: int, clusters: int) -> dict:
    """Exact vs IVF ``knn_graph`` at one N (in memory): build + graph, and IVF recall."""
    import batchsel.index as bi

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "x.npy")
        write_clustered(path, n, d, clusters, seed=1)
        x = np.array(np.load(path))
    sample = np.sort(np.random.default_rng(2).choice(n, size=min(SAMPLE, n), replace=False))
    out: dict = {"load": os.getloadavg()[0]}
    found = {}
    for kind in ("flat", "ivf"):
        t0, c0 = time.perf_counter(), cpu_seconds()
        index = bi.EmbeddingIndex(x, metric="euclidean", kind=kind, progress=False)
        graph = index.knn_graph(k=k)
        out[kind] = {
            "wall": time.perf_counter() - t0,
            "cpu": cpu_seconds() - c0,
            "nprobe": getattr(index, "nprobe_", None),
        }
        found[kind] = strongest_edges(graph, sample, k)
    out["recall"] = recall(found["ivf"], found["flat"])
    return out


def worker_recall(n: int, d: int, k: int, clusters: int, mixture: str) -> dict:
    """Recall@k of the approximate kinds against exact search, per setting, and the
    time of the k-NN graph at the default setting."""
    import faiss

    import batchsel.index as bi

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "x.npy")
        write_clustered(path, n, d, clusters, seed=3, mixture=mixture)
        x = np.array(np.load(path))
    sample = np.sort(np.random.default_rng(4).choice(n, size=min(SAMPLE, n), replace=False))
    truth = drop_self(faiss.knn(x[sample], x, k + 1)[1], sample, k)
    out: dict = {}
    for kind, knob, values in (("ivf", "nprobe", (1, 2, 4, 8, 16, 32, 64)), ("hnsw", "efSearch", (16, 32, 64, 128))):
        t0 = time.perf_counter()
        index = bi.EmbeddingIndex(x, metric="euclidean", kind=kind, progress=False)
        index.knn_graph(k=k)
        out[kind] = {
            "graph_wall": time.perf_counter() - t0,
            "default": index.nprobe_ if kind == "ivf" else index.ef_search,
        }
        for v in values:
            if kind == "ivf":
                index.index.nprobe = v
            else:
                index.index.hnsw.efSearch = v
            out[kind][v] = recall(drop_self(index.search(x[sample], k + 1)[1], sample, k), truth)
    return out


def strongest_edges(graph, rows: np.ndarray, k: int) -> np.ndarray:
    """The k largest-weight neighbours of each of ``rows`` (-1 where a row has fewer).
    With the rbf kernel these are the k nearest points a row has an edge to: its own k
    nearest neighbours when the graph is right (symmetrization only adds farther ones)."""
    sub = graph[rows]
    found = np.full((len(rows), k), -1, np.int64)
    for i in range(len(rows)):  # 1000 sampled rows
        lo, hi = sub.indptr[i], sub.indptr[i + 1]
        best = sub.indices[lo:hi][np.argsort(-sub.data[lo:hi], kind="stable")[:k]]
        found[i, : len(best)] = best
    return found


def run_worker(*args: str) -> dict:
    """Run this file as a worker subprocess and return its JSON result."""
    proc = subprocess.run([sys.executable, __file__, "--worker", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args[0]} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="N = 100,000 and a short sweep")
    parser.add_argument("--n", type=int, default=None, help="points (default 1,000,000; 100,000 with --quick)")
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--kind", default="auto", help="EmbeddingIndex kind for the large graph (default auto)")
    parser.add_argument("--nprobe", type=int, default=None, help="IVF lists searched (default: the library's)")
    parser.add_argument("--skip-sweep", action="store_true", help="only the large graph")
    parser.add_argument("--skip-graph", action="store_true", help="only the auto-threshold sweep")
    parser.add_argument("--skip-recall", action="store_true", help="no recall-per-setting table")
    parser.add_argument("--sweep-sizes", default=None, help="comma-separated N for the sweep")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        name, *rest = args.worker
        if name == "sweep":
            result = worker_sweep(*map(int, rest))
        elif name == "recall":
            result = worker_recall(*map(int, rest[:4]), rest[4])
        else:
            path, k, sample_path = rest[0], int(rest[1]), rest[2]
            sample = np.load(sample_path)
            result = (
                worker_batchsel(path, k, sample, rest[3], json.loads(rest[4]))
                if name == "batchsel"
                else worker_faiss(path, k, sample, json.loads(rest[3]))
            )
        print(json.dumps(result))
        return

    n = args.n or (100_000 if args.quick else 1_000_000)
    sizes = (
        [int(s) for s in args.sweep_sizes.split(",")]
        if args.sweep_sizes
        else ([10_000, 25_000] if args.quick else [10_000, 25_000, 50_000, 100_000])
    )
    import faiss

    print(
        f"bench_index: {os.cpu_count()} cores, faiss {faiss.__version__} with {faiss.omp_get_max_threads()} "
        f"threads, load average {os.getloadavg()[0]:.1f}"
    )
    if not args.skip_graph:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "embeddings.npy")
            t0 = time.perf_counter()
            write_clustered(path, n, args.d, args.clusters)
            print(
                f"data: N={n:,} d={args.d} float32, {args.clusters} gaussian clusters, "
                f"{os.path.getsize(path) / 2**20:.0f} MiB .npy written in {time.perf_counter() - t0:.1f} s"
            )
            sample = np.sort(np.random.default_rng(1).choice(n, size=min(SAMPLE, n), replace=False))
            sample_path = os.path.join(tmp, "sample.npy")
            np.save(sample_path, sample)
            t0 = time.perf_counter()
            truth = exact_neighbours(path, sample, args.k)
            print(f"exact neighbours of {len(sample)} sampled points: {time.perf_counter() - t0:.1f} s")

            ours = run_worker("batchsel", path, str(args.k), sample_path, args.kind, json.dumps(args.nprobe))
            plain = run_worker("faiss", path, str(args.k), sample_path, json.dumps(ours["params"]))
            print(f"index parameters: {ours['params']}")
            print(f"{'k-NN graph, k=' + str(args.k):<24}{'batchsel':>12}{'plain faiss':>14}{'ratio':>8}")
            rows = [
                ("wall time [s]", ours["wall"], plain["wall"]),
                ("CPU time [s]", ours["cpu"], plain["cpu"]),
                ("peak RSS [MiB]", ours["rss"], plain["rss"]),
                ("  of which imports", ours["base_rss"], plain["base_rss"]),
                (f"recall@{args.k}", recall(np.array(ours["found"]), truth), recall(np.array(plain["found"]), truth)),
                ("load average", ours["load"], plain["load"]),
            ]
            for label, a, b in rows:
                print(
                    f"{label:<24}{a:>12.3f}{b:>14.3f}{a / b:>8.2f}"
                    if "recall" in label
                    else f"{label:<24}{a:>12.1f}{b:>14.1f}{a / b:>8.2f}"
                )
            print(
                f"batchsel: index built in {ours['index_wall']:.1f} s; graph {ours['nnz']:,} stored entries "
                f"(symmetrized rbf CSR); plain faiss returns only the (N, k+1) arrays"
            )
            ok = ours["wall"] <= 180 and ours["rss"] <= 4096 and ours["wall"] <= 1.2 * plain["wall"]
            print(f"targets (<= 180 s, <= 4096 MiB, <= 1.2x plain faiss): {'met' if ok else 'NOT met'}")

    if not args.skip_sweep:
        print(
            f"\nkind='auto' threshold: exact (flat) vs IVF knn_graph(k={args.k}), d={args.d}, {args.clusters} clusters"
        )
        print(f"{'N':>9}{'exact [s]':>11}{'ivf [s]':>10}{'exact/ivf':>11}{'ivf recall':>12}{'nprobe':>8}{'load':>7}")
        for size in sizes:
            r = run_worker("sweep", str(size), str(args.d), str(args.k), str(min(args.clusters, size // 50)))
            print(
                f"{size:>9,}{r['flat']['wall']:>11.2f}{r['ivf']['wall']:>10.2f}"
                f"{r['flat']['wall'] / r['ivf']['wall']:>11.2f}{r['recall']:>12.3f}{r['ivf']['nprobe']:>8}"
                f"{r['load']:>7.1f}"
            )

    if not args.skip_recall:
        size = 20_000 if args.quick else 50_000
        print(
            f"\nrecall@{args.k} per setting (N={size:,}, d={args.d}, {size // 50} clusters, 1000 sampled queries "
            f"against exact search); graph [s] = build + knn_graph at the default setting"
        )
        for mixture in MIXTURES:
            r = run_worker("recall", str(size), str(args.d), str(args.k), str(size // 50), mixture)
            for kind, knob in (("ivf", "nprobe"), ("hnsw", "efSearch")):
                res = r[kind]
                cells = "  ".join(f"{v}:{res[v]:.3f}" for v in res if v not in ("graph_wall", "default"))
                default = "tuned" if kind == "ivf" else "default"
                print(
                    f"  {mixture:<12}{kind:<5} {knob:<9}{cells}   ({default} {res['default']}, graph "
                    f"{res['graph_wall']:.1f} s)"
                )


if __name__ == "__main__":
    main()
