"""Benchmark of near-duplicate removal (batchsel.data.dedup) on planted near-duplicates.

N rows of a 128-d Gaussian mixture; a share of them replaced by rescaled, noisy copies of
other rows (cosine >= 0.97 to their original; several copies of one row form a group). A
method's groups give its pairs (every two rows of a group); recall and precision are over
the planted pairs. Each run is a child process, so its peak memory is its own.

- ``batchsel``: :func:`batchsel.deduplicate` (k-NN pairs, connected components), torch's
  default threads and 1 thread, and ``mpiexec -n 2 batchsel dedup`` (sharded; its output
  must equal one process's);
- anchor, SemDeDup as in the paper (Abbas et al. 2023): spherical k-means (faiss) into
  N / 1000 clusters, all pairs within each cluster compared (a matrix product), pairs at
  the threshold grouped the same way.

Run: ``python benchmarks/bench_dedup.py`` (N = 1M; ``--quick``: N = 100k).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = Path(sys.executable).parent / "mpiexec"
if not MPIEXEC.exists():
    MPIEXEC = Path(shutil.which("mpiexec") or "mpiexec")


def planted(n: int, d: int, share: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((1000, d)).astype(np.float32)
    x = centers[rng.integers(0, 1000, n)] + rng.standard_normal((n, d), dtype=np.float32)
    copies = rng.choice(n, int(share * n), replace=False)
    root = np.arange(n)
    root[copies] = rng.choice(np.setdiff1d(np.arange(n), copies), copies.size)
    scale = rng.uniform(0.5, 2.0, (copies.size, 1)).astype(np.float32)
    x[copies] = (x[root[copies]] + 0.2 * rng.standard_normal((copies.size, d), dtype=np.float32)) * scale
    return x, root


def pair_keys(group: np.ndarray) -> np.ndarray:
    """Every pair of rows in one group, as i * N + j (i < j)."""
    n = group.size
    order = np.argsort(group, kind="stable")
    g = group[order]
    bounds = np.flatnonzero(np.r_[True, g[1:] != g[:-1], True])
    keys = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b - a > 1:
            members = np.sort(order[a:b])
            i, j = np.triu_indices(members.size, 1)
            keys.append(members[i] * n + members[j])
    return np.concatenate(keys) if keys else np.empty(0, np.int64)


def semdedup_groups(x: np.ndarray, threshold: float, seed: int = 0) -> np.ndarray:
    """SemDeDup's search: spherical k-means, then every pair within a cluster; groups as
    connected components, each labelled by its smallest row."""
    import faiss
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    n, d = x.shape
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    clusters = max(1, n // 1000)
    km = faiss.Kmeans(d, clusters, niter=10, spherical=True, seed=seed, max_points_per_centroid=64, verbose=False)
    km.train(xn)
    _, assign = km.index.search(xn, 1)
    assign = assign.ravel()
    order = np.argsort(assign, kind="stable")
    bounds = np.searchsorted(assign[order], np.arange(clusters + 1))
    rows, cols = [], []
    for c in range(clusters):
        members = order[bounds[c] : bounds[c + 1]]
        if members.size < 2:
            continue
        sim = xn[members] @ xn[members].T
        i, j = np.nonzero(np.triu(sim >= threshold - 1e-5, 1))
        rows.append(members[i])
        cols.append(members[j])
    i, j = (np.concatenate(rows), np.concatenate(cols)) if rows else (np.empty(0, np.int64),) * 2
    graph = sp.csr_matrix((np.ones(i.size, np.int8), (i, j)), shape=(n, n))
    _, label = connected_components(graph, directed=False)
    first = np.unique(label, return_index=True)[1]
    return first[label]


def worker(method: str, path: str, threshold: float, out: str, threads: int) -> None:
    if threads:
        import faiss

        faiss.omp_set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)
    x = np.load(path)
    start = time.perf_counter()
    if method == "semdedup":
        group = semdedup_groups(x, threshold)
    else:
        from batchsel import deduplicate

        group = deduplicate(x, threshold, progress=False).group
    seconds = time.perf_counter() - start
    np.save(out, group)
    print(
        "RESULT "
        + json.dumps({"seconds": seconds, "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}),
        flush=True,
    )


def child(cmd: list[str], env: dict | None = None) -> dict:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return json.loads(line[7:])


def score(group: np.ndarray, truth: set) -> tuple[float, float, int]:
    found = set(pair_keys(group).tolist())
    hit = len(found & truth)
    return hit / max(len(truth), 1), hit / max(len(found), 1), len(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threshold", type=float, default=0.95)
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        method, path, threshold, out, threads = args.worker
        worker(method, path, float(threshold), out, int(threads))
        return
    n, d = (100_000 if args.quick else 1_000_000), 128
    with tempfile.TemporaryDirectory() as tmp:
        x, root = planted(n, d, share=0.1)
        path = os.path.join(tmp, "emb.npy")
        np.save(path, x)
        truth = set(pair_keys(root).tolist())
        del x
        print(
            f"== planted near-duplicates: N = {n:,}, d = {d}, {int(0.1 * n):,} copies, {len(truth):,} planted pairs, "
            f"threshold {args.threshold} =="
        )
        print(f"{'method':40}{'seconds':>9}{'peak GB':>9}{'recall':>8}{'precision':>11}{'pairs':>10}")
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        results = {}
        runs = [
            ("batchsel, default threads", "batchsel", 0),
            ("batchsel, 1 thread", "batchsel", 1),
            ("SemDeDup (k-means + pairs in clusters)", "semdedup", 0),
        ]
        groups = {}
        for name, method, threads in runs:
            out = os.path.join(tmp, f"{method}{threads}.npy")
            r = child([sys.executable, __file__, "--worker", method, path, str(args.threshold), out, str(threads)], env)
            groups[name] = np.load(out)
            r["recall"], r["precision"], r["pairs"] = score(groups[name], truth)
            results[name] = r
            print(
                f"{name:40}{r['seconds']:9.1f}{r['peak_gb']:9.2f}{r['recall']:8.4f}{r['precision']:11.4f}{r['pairs']:10,}"
            )
        # 2 MPI ranks, as users run it: the command line (its time includes start-up and writing)
        keep = os.path.join(tmp, "keep.npy")
        group_file = os.path.join(tmp, "groups.npy")
        cmd = [
            str(MPIEXEC),
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            "2",
            sys.executable,
            "-m",
            "batchsel",
            "dedup",
            path,
            "--threshold",
            str(args.threshold),
            "--out",
            keep,
            "--groups",
            group_file,
            "--json",
            "--quiet",
        ]
        start = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=dict(env, OMP_NUM_THREADS="1"))
        wall = time.perf_counter() - start
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-3000:])
        report = json.loads(out.stdout.strip().splitlines()[-1])
        g2 = np.load(group_file)
        same = bool(np.array_equal(g2, groups["batchsel, default threads"]))
        r = {"seconds": report["seconds"], "wall_with_startup": wall, "same_as_one_process": same}
        r["recall"], r["precision"], r["pairs"] = score(g2, truth)
        results["batchsel, mpiexec -n 2"] = r
        print(
            f"{'batchsel, mpiexec -n 2 (1 thread each)':40}{r['seconds']:9.1f}{'':>9}{r['recall']:8.4f}"
            f"{r['precision']:11.4f}{r['pairs']:10,}   (command {wall:.1f} s with start-up; groups equal to one "
            f"process's: {same})"
        )
        a, b = results["batchsel, default threads"], results["SemDeDup (k-means + pairs in clusters)"]
        print(f"time ratio batchsel / SemDeDup anchor: {a['seconds'] / b['seconds']:.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"n": n, "d": d, "threshold": args.threshold, "results": results}, fh, indent=1)


if __name__ == "__main__":
    main()
