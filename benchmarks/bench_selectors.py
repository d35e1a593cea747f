"""Benchmark of the selectors.

1. One SMDL batch, B = 128 from a pool of 1024, d = 64 (target <= 2 ms), next to the
   forward + backward + SGD step of a small torch MLP on that batch (the anchor; target:
   selection <= 5% of the step). Two MLPs are shown: one on the 64-d embeddings themselves
   (64-256-256-10, tiny) and one on CIFAR-sized inputs (3072-512-512-10). Then the same
   SMDL batch in child processes, interleaved there with the 3072 MLP step, with the
   default threads (BLAS and torch) and with one thread, one process alone and two at
   once (as two ranks of a job on one machine): a batch is one compiled call that uses
   no BLAS, so the columns should agree. Every SMDL row is also measured for the numpy +
   OpenBLAS implementation the compiled kernel replaced ("numpy", the reference kept in
   tests/selectors/test_smdl_kernel.py; same picks) in the same run, and for ``coverage_every=8``
   ("cov8": the similarities of the rows still in the pool reused across batches; other
   picks).
2. A graph-block plan for N = 1M (k-NN graph + METIS partition + plan): wall time of each
   part and peak RSS, next to a RandomSelector plan of the same N (the anchor). Runs in a
   child process so its peak RSS is its own.
3. GreedMax (partition="submodular") for N = 100k, W = 8, next to a random split: time
   and the worst shard's facility-location value.
4. One loss-rank batch (B = 128, pressure 100) at N = 3200, 1M and 10M, half the
   examples unseen and every loss known (each batch's losses fed back before the next),
   next to one RandomSelector batch of the same N (the anchor: its epoch's permutation and
   slicing, per batch), with one BLAS thread and the default threads.

Run: ``python benchmarks/bench_selectors.py`` (``--quick``: N = 20k, < 1 minute).
Part 1 runs selection (numpy BLAS) and the MLP (torch) on one thread each, calls
interleaved so both see the same machine load; median and 10th percentile are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np


def clustered(n: int, d: int, seed: int = 0, clusters: int = 100) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(clusters, d)).astype(np.float32) * 3
    x = centers[rng.integers(0, clusters, n)]
    x += rng.normal(size=(n, d)).astype(np.float32)
    return x


# -- 1. SMDL batch vs an MLP step -------------------------------------------------------------
def paired(fns: dict, repeats: int) -> dict:
    """Median and 10th-percentile wall milliseconds of each function, the functions called
    in turn so that they share the machine's load alike (on a busy machine the 10th
    percentile is closer to the uncontended cost)."""
    for fn in fns.values():
        fn()  # warm-up (numba cache load, allocator)
    wall = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            wall[name].append(time.perf_counter() - t)
    return {k: (1e3 * statistics.median(v), 1e3 * float(np.percentile(v, 10))) for k, v in wall.items()}


# SubmodularSelector settings measured besides the defaults ("kernel")
IMPL_OPTIONS = {"kernel": {}, "cov8": {"coverage_every": 8}}


def smdl_class(impl: str):
    """``"kernel"``: batchsel's SubmodularSelector (one compiled call per batch);
    ``"cov8"``: the same with ``coverage_every=8`` (the coverage set and sigma^2 kept for 8
    batches, the similarities of the rows still in the pool reused: other picks);
    ``"numpy"``: the numpy + OpenBLAS implementation it replaced, kept as the reference in
    tests/selectors/test_smdl_kernel.py (same picks as "kernel"), measured in the same run as the "before"."""
    from batchsel import SubmodularSelector

    if impl in IMPL_OPTIONS:
        return SubmodularSelector
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from test_smdl_kernel import NumpySMDL

    return NumpySMDL


def smdl_stepper(n: int, impl: str = "kernel", optimizer: str = "stochastic"):
    """A function drawing one online SMDL batch (B = 128, pool 1024, d = 64) per call: a
    full online step (pool draw, gather, the terms, greedy, bookkeeping)."""
    x = clustered(n, 64)
    sel = smdl_class(impl)(x, 128, seed=0, pool_size=1024, optimizer=optimizer, **IMPL_OPTIONS.get(impl, {}))
    sel.observe(np.arange(n), logits=np.random.default_rng(0).normal(size=(n, 10)))
    state = {"it": sel.iter_batches(0), "epoch": 0}

    def one_batch():
        for b in state["it"]:
            return b
        state["epoch"] += 1
        state["it"] = sel.iter_batches(state["epoch"])
        return next(state["it"])

    return one_batch


def mlp_stepper(dim: int = 3072, width: int = 512, batch: int = 128, inputs=None):
    """A function running one forward + backward + SGD step of a dim-width-width-10 MLP."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(dim, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    xb = torch.randn(batch, dim) if inputs is None else inputs
    yb = torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()

    return step


def smdl_thread_worker(n: int, repeats: int, start_at: float, impl: str) -> None:
    """One SMDL batch and one 3072-512-512-10 MLP step, interleaved in this process, with
    the threads its environment gives (torch and BLAS read OMP / OPENBLAS_NUM_THREADS)."""
    step, mlp = smdl_stepper(n, impl), mlp_stepper()
    for _ in range(5):  # numba cache load, first allocations
        step()
        mlp()
    time.sleep(max(0.0, start_at - time.time()))  # concurrent workers measure at the same time
    res = paired({"smdl": step, "mlp": mlp}, repeats)
    print(
        "RESULT "
        + json.dumps(
            {"median": res["smdl"][0], "p10": res["smdl"][1], "mlp": res["mlp"][0], "load": os.getloadavg()[0]}
        )
    )


def bench_smdl_threads(n: int, repeats: int) -> None:
    """One SMDL batch in child processes: {alone, two at once} x {default threads, one
    thread (OPENBLAS_NUM_THREADS = OMP_NUM_THREADS = 1)}, next to the MLP step measured in
    the same processes; the compiled kernel and the numpy implementation it replaced."""
    default_env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    }
    one_env = dict(default_env, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    print(
        f"\n   One SMDL batch (stochastic) in separate processes, {repeats} batches each, interleaved with a "
        f"3072-512-512-10 MLP step (B=128) in the same process; SMDL median / p10 ms, MLP median ms, "
        f"SMDL / MLP; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs before the runs"
    )
    print(f"   {'':<10} {'':<22} {'default threads (BLAS, torch)':>44} {'1 thread (BLAS, torch)':>44}")
    for impl in ("kernel", "cov8", "numpy"):
        for procs in (1, 2):
            cells, loads = [], []
            for env in (default_env, one_env):
                cmd = [
                    sys.executable,
                    __file__,
                    "--smdl-thread-worker",
                    str(n),
                    str(repeats),
                    str(time.time() + 8),
                    "--impl",
                    impl,
                ]
                children = [
                    subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    for _ in range(procs)
                ]
                outs = [c.communicate() for c in children]
                for c, (_, err) in zip(children, outs):
                    if c.returncode != 0:
                        raise RuntimeError(err[-3000:])
                rs = [
                    json.loads([ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1][7:]) for out, _ in outs
                ]
                loads += [r["load"] for r in rs]
                cells.append(
                    ", ".join(
                        f"{r['median']:.2f} / {r['p10']:.2f}, {r['mlp']:.1f}, {100 * r['median'] / r['mlp']:.1f}%"
                        for r in rs
                    )
                )
            label = "alone" if procs == 1 else "two processes at once"
            print(f"   {impl:<10} {label:<22} {cells[0]:>44} {cells[1]:>44}   (load {max(loads):.1f})")
    print("   targets: SMDL <= 2 ms in every cell; <= 5% of the MLP step")


def bench_smdl(n: int, repeats: int) -> None:
    import torch
    from threadpoolctl import threadpool_limits

    x = clustered(n, 64)
    batch, pool_size = 128, 1024
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread each: selection and training share nothing else
    fns = {
        "MLP 64-256-256-10": mlp_stepper(64, 256, batch, torch.from_numpy(x[:batch])),
        "MLP 3072-512-512-10": mlp_stepper(3072, 512, batch),
    }
    suffix = {"kernel": "", "cov8": " (coverage_every=8)", "numpy": " (numpy)"}
    for impl in ("kernel", "cov8", "numpy"):
        for optimizer in ("stochastic", "lazy"):
            fns[f"SMDL {optimizer}{suffix[impl]}"] = smdl_stepper(n, impl, optimizer)
    with threadpool_limits(limits=1, user_api="blas"):
        res = paired(fns, repeats)
    torch.set_num_threads(threads)
    mlps = [k for k in fns if k.startswith("MLP")]
    print(
        f"\n1. One SMDL batch (B={batch}, pool={pool_size}, d=64, N={n:,}, coverage_size=256) next to one "
        f"forward+backward+SGD step of an MLP on a batch of {batch}; 1 thread each, calls interleaved, "
        f"{repeats} repeats; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs. "
        f"(numpy): the implementation the compiled kernel replaced (same picks), in the same run"
    )
    print(
        f"   {'':<36} {'median ms':>9} {'p10 ms':>8}   "
        + "   ".join(f"{'% of ' + m + ' (median/p10)':>36}" for m in mlps)
    )
    for name, (med, p10) in res.items():
        ratios = "   ".join(f"{100 * med / res[m][0]:>27.1f}% / {100 * p10 / res[m][1]:5.1f}%" for m in mlps)
        print(f"   {name:<36} {med:>9.3f} {p10:>8.3f}   {ratios if name.startswith('SMDL') else ''}")
    for optimizer in ("stochastic", "lazy"):
        new, old = res[f"SMDL {optimizer}"][0], res[f"SMDL {optimizer} (numpy)"][0]
        print(
            f"   SMDL {optimizer}: compiled kernel / numpy = {new / old:.2f}; coverage_every=8 / default = "
            f"{res[f'SMDL {optimizer} (coverage_every=8)'][0] / new:.2f}"
        )
    print("   targets: <= 2 ms per batch; <= 5% of the training step")
    bench_smdl_threads(n, max(repeats, 100))


# -- 2. graph blocks at 1M ---------------------------------------------------------------------
def graph_worker(n: int, d: int, batch: int) -> None:
    from batchsel import EmbeddingIndex, GraphBlockSelector, RandomSelector

    x = clustered(n, d, clusters=1000)
    out = {"n": n, "d": d, "batch": batch}
    t = time.perf_counter()
    graph = EmbeddingIndex(x, metric="euclidean", progress=False).knn_graph(k=10)
    out["graph_s"] = time.perf_counter() - t
    out["edges"] = int(graph.nnz // 2)
    del x
    sel = GraphBlockSelector(graph, batch, seed=0, blocks_per_batch=4)
    t = time.perf_counter()
    blocks = sel.blocks_
    out["metis_s"] = time.perf_counter() - t
    out["blocks"] = int(sel.num_blocks)
    t = time.perf_counter()
    plan = sel.plan(0, world_size=8)
    out["plan_s"] = time.perf_counter() - t
    sizes = np.array([len(b) for r in range(8) for b in plan.batches(r)])
    out["batch_min"], out["batch_max"] = int(sizes.min()), int(sizes.max())
    t = time.perf_counter()
    anchor = RandomSelector(n, batch, seed=0).plan(0, world_size=8)
    out["random_plan_s"] = time.perf_counter() - t

    # in-batch edge weight of 200 batches, ours vs random
    def inside(p):
        bs = p.batches(0)[:200]
        idx = np.concatenate(bs)
        bid = np.repeat(np.arange(len(bs)), [len(b) for b in bs])
        where = np.full(n, -1)
        where[idx] = bid
        sub = graph[idx].tocoo()
        return float(sub.data[where[sub.col] == bid[sub.row]].sum() / sub.data.sum())

    out["in_batch_frac"], out["random_in_batch_frac"] = inside(plan), inside(anchor)
    del blocks
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(out))


def bench_graph(n: int, d: int, batch: int) -> None:
    cmd = [sys.executable, __file__, "--graph-worker", str(n), str(d), str(batch)]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    r = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1][7:])
    total = r["graph_s"] + r["metis_s"] + r["plan_s"]
    print(
        f"\n2. Graph-block plan, N={r['n']:,}, d={r['d']}, k=10 graph ({r['edges']:,} edges), "
        f"B={r['batch']}, q=4 ({r['blocks']:,} METIS blocks), 8 ranks"
    )
    print(f"   k-NN graph (faiss)   {r['graph_s']:8.1f} s")
    print(f"   METIS partition      {r['metis_s']:8.1f} s   (once; cached, reused every epoch)")
    print(
        f"   plan of one epoch    {r['plan_s']:8.2f} s   vs RandomSelector plan {r['random_plan_s']:.2f} s "
        f"(ratio {r['plan_s'] / r['random_plan_s']:.1f}x)"
    )
    print(f"   total                {total:8.1f} s   (child process wall {wall:.1f} s incl. data generation)")
    print(f"   peak RSS             {r['peak_rss_mb']:8.0f} MB")
    print(
        f"   batch sizes {r['batch_min']}..{r['batch_max']} (target {r['batch']}); in-batch edge weight "
        f"{100 * r['in_batch_frac']:.1f}% vs random {100 * r['random_in_batch_frac']:.2f}% "
        f"({r['in_batch_frac'] / max(r['random_in_batch_frac'], 1e-12):.0f}x)"
    )


# -- 3. GreedMax -------------------------------------------------------------------------------
def bench_greedmax(n: int, world: int) -> None:
    from batchsel import EmbeddingIndex, submodular_partition
    from batchsel.selectors import partition_values

    x = clustered(n, 32)
    t = time.perf_counter()
    graph = EmbeddingIndex(x, metric="euclidean", progress=False).knn_graph(k=10)
    graph_s = time.perf_counter() - t
    submodular_partition(graph[:1000][:, :1000], 2)  # numba compile / cache load, not timed
    t = time.perf_counter()
    parts = submodular_partition(graph, world, seed=0)
    greedmax_s = time.perf_counter() - t
    t = time.perf_counter()
    perm = np.random.default_rng(0).permutation(n)
    rand = [perm[r::world] for r in range(world)]
    random_s = time.perf_counter() - t
    ours, theirs = partition_values(graph, parts), partition_values(graph, rand)
    print(f"\n3. GreedMax partition, N={n:,}, W={world}, k=10 graph ({graph_s:.1f} s to build)")
    print(f"   GreedMax {greedmax_s:7.2f} s   random split {random_s:.3f} s")
    print(
        f"   worst shard's facility location: GreedMax {ours.min():.1f}, random {theirs.min():.1f} "
        f"(x{ours.min() / theirs.min():.3f}); max possible {n}"
    )


# -- 4. loss-rank batch ------------------------------------------------------------------------
def bench_loss_rank(sizes: tuple[int, ...], batch: int = 128) -> None:
    from threadpoolctl import threadpool_limits

    from batchsel import LossRankSelector, RandomSelector

    print(
        f"\n4. One loss-rank batch (B={batch}, pressure 100, its losses fed back) vs one RandomSelector "
        f"batch (epoch permutation + slicing, per batch); median ms; load average {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} CPUs"
    )
    print(f"   {'N':>10} {'known':>6} {'threads':>8} {'loss-rank ms':>13} {'random ms':>10} {'ratio':>8}")
    for n, known in ((n, known) for n in sizes for known in (0.5, 1.0)):
        sel = LossRankSelector(n, batch, seed=0, pressure=100)
        seen = int(known * n)
        sel.observe(np.arange(seen), losses=np.random.default_rng(0).random(seen))
        rand = RandomSelector(n, batch, seed=0)
        per_call = max(20, min(200, 2_000_000 // n))  # loss-rank batches per timed call
        state = {"it": sel.iter_batches(0), "epoch": 0, "rng": np.random.default_rng(1)}
        next(state["it"])  # the run's first batch sorts its shard: not a batch's cost

        def loss_batches(sel=sel, state=state, per_call=per_call):
            for _ in range(per_call):
                b = next(state["it"], None)
                if b is None:
                    state["epoch"] += 1
                    state["it"] = sel.iter_batches(state["epoch"])
                    b = next(state["it"])
                sel.observe(b, losses=state["rng"].random(len(b)))

        def random_epoch(rand=rand):
            return sum(1 for _ in rand.iter_batches(0))

        batches = rand.num_batches()
        for label, limit in (("1", 1), ("default", None)):
            with threadpool_limits(limits=limit, user_api="blas"):
                res = paired({"loss": loss_batches, "random": random_epoch}, 5 if n > 100_000 else 30)
            loss_ms, rand_ms = res["loss"][0] / per_call, res["random"][0] / batches
            print(f"   {n:>10,} {known:>6.0%} {label:>8} {loss_ms:>13.4f} {rand_ms:>10.4f} {loss_ms / rand_ms:>7.0f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (< 1 minute)")
    ap.add_argument("--smdl-only", action="store_true", help="only part 1 (the SMDL batch)")
    ap.add_argument("--loss-rank-only", action="store_true", help="only part 4 (the loss-rank batch)")
    ap.add_argument("--graph-worker", nargs=3, type=int, help=argparse.SUPPRESS)
    ap.add_argument("--smdl-thread-worker", nargs=3, type=float, help=argparse.SUPPRESS)
    ap.add_argument("--impl", default="kernel", choices=("kernel", "cov8", "numpy"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.graph_worker:
        graph_worker(*args.graph_worker)
        return
    if args.smdl_thread_worker:
        n, repeats, start_at = args.smdl_thread_worker
        smdl_thread_worker(int(n), int(repeats), start_at, args.impl)
        return
    if args.loss_rank_only:
        bench_loss_rank((3200, 1_000_000, 10_000_000))
        return
    if args.smdl_only:
        bench_smdl(20_000 if args.quick else 100_000, 30 if args.quick else 200)
        return
    if args.quick:
        bench_smdl(20_000, 30)
        bench_graph(20_000, 32, 128)
        bench_greedmax(20_000, 8)
        bench_loss_rank((3200, 100_000))
    else:
        bench_smdl(100_000, 200)
        bench_graph(1_000_000, 32, 128)
        bench_greedmax(100_000, 8)
        bench_loss_rank((3200, 1_000_000, 10_000_000))


if __name__ == "__main__":
    main()
