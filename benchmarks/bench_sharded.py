"""Benchmark: the k-NN graph sharded over MPI ranks (batchsel.distributed.sharded) at 1M x 128.

    python benchmarks/bench_sharded.py                 # N = 1,000,000 x d = 128, k = 10
    python benchmarks/bench_sharded.py --n 200000      # quicker

1. Writes clustered float32 embeddings (bench_index.write_clustered: a gaussian mixture
   with a decaying spectrum) to a temporary ``.npy`` file, chunk by chunk.
2. ``reference``: ``EmbeddingIndex(path, metric="euclidean").knn_graph(k)`` in one plain
   process (the single-process library, kind="auto" = IVF, nprobe tuned), with
   OMP_NUM_THREADS=1 and again with faiss's default threads (every core: what a user on
   one node runs, the anchor the sharded runs have to beat).
3. ``W ranks``: ``mpiexec -n W``, every rank ``ShardedIndex(path, comm,
   metric="euclidean", node_work="shard").knn_graph(k)`` (its rows of the same graph),
   W = 1 and 2, with OMP_NUM_THREADS=1 (a rank per core: what W nodes would do);
4. ``node_work="auto"``, the default, for W > 1 as a user runs it (``--repeats R`` times, each run followed by a one-process run) (default threads, mpiexec's
   default binding): all ranks on this machine, so rank 0 does the faiss work with every
   core. Its anchor is the default-threads single process of 2.
Reported per run: wall time (slowest rank, from a barrier after start-up to the graph),
peak RSS per rank (``ru_maxrss``: the memory map's resident pages included), the load
average before-after, and SHA-256 digests of the graph's row blocks, which must agree
between all runs (the same graph, whichever the number of ranks). Ratios are against the
1-rank run of the same invocation. Results are appended to
``benchmarks/results/speed/bench_sharded.md`` with ``--write``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_index import write_clustered  # noqa: E402

DIGEST_BLOCKS = 4  # the graph's rows are digested in this many blocks (a multiple of every W run)


def _digests(rows, lo: int, n: int) -> dict:
    """SHA-256 of every digest block of rows lying inside this rank's rows [lo, lo + len)."""
    from batchsel.distributed.sharded import shard_range

    out = {}
    for b in range(DIGEST_BLOCKS):
        a, z = shard_range(n, b, DIGEST_BLOCKS)
        if lo <= a and z <= lo + rows.shape[0]:
            part = rows[a - lo : z - lo]
            h = hashlib.sha256()
            for arr in (part.indptr - part.indptr[0], part.indices.astype(np.int64), part.data):
                h.update(np.ascontiguousarray(arr).tobytes())
            out[str(b)] = h.hexdigest()[:16]
    return out


def worker(mode: str, path: str, k: int, node_work: str = "shard") -> None:
    """One rank (or the reference process): build, graph, report JSON on stdout (rank 0)."""
    import batchsel  # noqa: F401  (the import cost is start-up, not timed)

    if mode == "reference":
        from batchsel.index import EmbeddingIndex

        t = time.perf_counter()
        index = EmbeddingIndex(path, metric="euclidean", progress=False)
        build = time.perf_counter() - t
        graph = index.knn_graph(k=k)
        wall = time.perf_counter() - t
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        import faiss

        print(
            json.dumps(
                {
                    "mode": mode,
                    "ranks": 1,
                    "threads": faiss.omp_get_max_threads(),
                    "wall": wall,
                    "build": build,
                    "rss_mb": [rss],
                    "nprobe": getattr(index, "nprobe_", None),
                    "nnz": int(graph.nnz),
                    "digests": _digests(graph, 0, index.num_examples),
                }
            ),
            flush=True,
        )
        return
    from batchsel.distributed.sharded import ShardedIndex
    from batchsel.integrations import MPIComm

    comm = MPIComm()
    comm.barrier()
    t = time.perf_counter()
    index = ShardedIndex(path, comm, metric="euclidean", progress=False, node_work=node_work)
    build = time.perf_counter() - t
    rows = index.knn_graph(k=k)
    comm.barrier()
    wall = time.perf_counter() - t
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    reports = comm.allgather(
        {
            "rss": rss,
            "build": build,
            "nnz": int(rows.nnz),
            "digests": _digests(rows, index.row_range[0], index.num_examples),
        }
    )
    if comm.rank == 0:
        digests: dict = {}
        for r in reports:
            digests.update(r["digests"])
        print(
            json.dumps(
                {
                    "mode": mode,
                    "node_work": index.node_work,
                    "ranks": comm.size,
                    "wall": wall,
                    "build": max(r["build"] for r in reports),
                    "rss_mb": [r["rss"] for r in reports],
                    "nprobe": getattr(index, "nprobe_", None),
                    "nnz": sum(r["nnz"] for r in reports),
                    "digests": digests,
                }
            ),
            flush=True,
        )


def run(cmd: list[str], one_thread: bool = True) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if not one_thread:  # the library's default: faiss / BLAS use every core
        del env["OMP_NUM_THREADS"]
    load0 = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    line = [s for s in proc.stdout.splitlines() if s.startswith("{")][-1]
    result = json.loads(line)
    result.update(job_seconds=elapsed, load=(load0, os.getloadavg()[0]))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--ranks", default="1,2", help="comma-separated world sizes")
    parser.add_argument("--no-reference", action="store_true", help="skip the single-process EmbeddingIndex run")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="node_work='auto' runs per world size > 1, each followed by a one-process run (default 1)",
    )
    parser.add_argument("--dir", default=None, help="where the data file goes (default: a temporary directory)")
    parser.add_argument(
        "--write", action="store_true", help="append the table to benchmarks/results/speed/bench_sharded.md"
    )
    parser.add_argument("--worker", choices=["sharded", "reference"], help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--node-work", default="shard", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.path, args.k, args.node_work)
        return
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    root = ["--allow-run-as-root", "--oversubscribe"] if os.geteuid() == 0 else []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = os.path.join(tmp, "emb.npy")
        t = time.perf_counter()
        write_clustered(path, args.n, args.d, args.clusters)
        print(
            f"data: {args.n:,} x {args.d} float32 ({args.n * args.d * 4 / 2**20:,.0f} MiB), {args.clusters} "
            f"clusters, written in {time.perf_counter() - t:.1f} s",
            file=sys.stderr,
        )
        me = [sys.executable, os.path.abspath(__file__), "--path", path, "--k", str(args.k)]
        results, again = [], []
        if not args.no_reference:
            for one_thread in (True, False):
                results.append(run(me + ["--worker", "reference"], one_thread=one_thread))
                print(results[-1], file=sys.stderr)
        for w in [int(v) for v in args.ranks.split(",")]:
            results.append(run([mpiexec, *root, "-n", str(w), *me, "--worker", "sharded"]))
            print(results[-1], file=sys.stderr)
            for _ in range(args.repeats if w > 1 else 0):  # the default, as a user runs it
                cmd = [mpiexec, *root, "-n", str(w), *me, "--worker", "sharded", "--node-work", "auto"]
                results.append(run(cmd, one_thread=False))
                print(results[-1], file=sys.stderr)
                if not args.no_reference:  # the one-process anchor again, right after (the machine drifts)
                    again.append(run(me + ["--worker", "reference"], one_thread=False))
                    print(again[-1], file=sys.stderr)
    base = next((r for r in results if r["mode"] == "sharded" and r["ranks"] == 1), results[0])
    leaders = [r for r in results if r.get("node_work") == "leader"]
    # the default-threads anchor is left out: BLAS blocks its distance products by thread
    # count, so near-tied neighbours may come out the other way (reported on its own)
    anchor = next((r for r in results if r["mode"] == "reference" and r["threads"] > 1), None)
    digests = {json.dumps(r["digests"], sort_keys=True) for r in results if r is not anchor and r not in leaders}
    lines = [
        f"### N = {args.n:,} x d = {args.d}, k = {args.k}, {args.clusters} clusters "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        "| run | ranks | wall s (build) | job s | peak RSS per rank, MiB | speed-up vs 1 rank | "
        "RSS per rank / 1-rank | nprobe | graph nnz | load before-after |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        name = (
            f"EmbeddingIndex (1 process, {r['threads']} thread{'s' * (r['threads'] > 1)})"
            if r["mode"] == "reference"
            else f"ShardedIndex, mpiexec -n {r['ranks']}, node_work={r.get('node_work', 'shard')!r}"
            + (" (rank 0 works, default threads)" if r in leaders else "")
        )
        lines.append(
            f"| {name} | {r['ranks']} | {r['wall']:.1f} ({r['build']:.1f}) | {r['job_seconds']:.1f} | "
            f"{' / '.join(f'{v:,.0f}' for v in r['rss_mb'])} | {base['wall'] / r['wall']:.2f}x | "
            f"{max(r['rss_mb']) / max(base['rss_mb']):.2f} | {r['nprobe']} | {r['nnz']:,} | "
            f"{r['load'][0]:.1f}-{r['load'][1]:.1f} |"
        )
    lines += ["", f"Same graph in every 1-thread run (row-block digests agree): {'yes' if len(digests) == 1 else 'NO'}"]
    if anchor is not None:  # what a one-node user would otherwise run
        same = json.dumps(anchor["digests"], sort_keys=True) in digests
        lines.append(
            f"The default-threads graph is {'the same' if same else 'not the same'} ({anchor['nnz']:,} stored entries)."
        )
        lines.append(
            f"Against one process with default threads ({anchor['threads']}, {anchor['wall']:.1f} s, "
            f"{max(anchor['rss_mb']):,.0f} MiB): "
            + ", ".join(
                f"{r['ranks']} rank{'s' * (r['ranks'] > 1)}: speed-up {anchor['wall'] / r['wall']:.2f}x, "
                f"RSS per rank {max(r['rss_mb']) / max(anchor['rss_mb']):.2f}"
                for r in results
                if r["mode"] == "sharded"
            )
        )
        # the default on one machine computes one process's graph; each of its runs is set
        # against the mean of the one-process runs right before and after it (the machine drifts)
        anchors = [anchor] + again
        ratios = []
        for i, r in enumerate(leaders):
            same = json.dumps(r["digests"], sort_keys=True) == json.dumps(anchor["digests"], sort_keys=True)
            around = [a["wall"] for a in anchors[i : i + 2]]
            ratios.append(float(np.mean(around)) / r["wall"])
            lines.append(
                f"node_work='leader' (the default on one machine), {r['ranks']} ranks: {r['wall']:.1f} s against "
                f"{np.mean(around):.1f} s for one process (mean of {', '.join(f'{a:.1f}' for a in around)} s, "
                f"before and after) = {ratios[-1]:.2f}x its speed; "
                f"graph {'the same as' if same else 'not the same as'} the default-threads process's"
            )
        if len(ratios) > 1:
            lines.append(
                f"node_work='leader' over {len(ratios)} alternating runs: median {np.median(ratios):.2f}x one "
                f"process's speed (range {min(ratios):.2f}-{max(ratios):.2f}x)"
            )
    lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.write:
        out = os.path.join(HERE, "results", "speed", "bench_sharded.md")
        with open(out, "a") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
