"""Benchmark of batchsel.integrations.pyg: Cluster-GCN and GraphSAINT batches for a GCN,
pip-only, next to torch_geometric's RandomNodeLoader (the loader a pip-only PyG has) and
full-batch training (the ceiling).

1. Training: a 2-layer GCN on two generated graphs, every loader for the same number of
   epochs (full-batch for as many optimizer steps as Cluster-GCN takes), test accuracy by
   full-graph inference, mean +- standard error over seeds, training wall time, and the
   share of the graph's edges inside the batches of one epoch.
   - ``sbm``: a stochastic block model (10 blocks = classes, node ids shuffled) whose node
     features are weak on their own (an MLP is near chance): the edges carry the signal.
   - ``knn``: the 10-NN graph (:class:`batchsel.EmbeddingIndex`) of noisy embeddings of a
     10-component Gaussian mixture, classes = components.
2. Scale: ``ClusterData`` of a generated 1M-node, 10M-edge graph (time and peak memory in a
   child process), and one epoch of ``ClusterLoader`` next to one of ``RandomNodeLoader``
   (the anchor) over the same graph.
3. GraphSAINT on graphs of N nodes of which only 7 have edges (issue 46): the node
   sampler's normalization (``sample_coverage=50``) and the random-walk sampler's batches,
   whose cost should not grow with N.

Run: ``python benchmarks/bench_pyg.py`` (``--quick``: smaller, about a minute;
``--saint-only``: section 3 alone).
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
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sbm(n: int, classes: int, degree: float, inside: float, seed: int):
    """Edges: ``degree`` per node on average, a share ``inside`` of them within the node's
    block; ids shuffled; features: the class's one-hot scaled by 0.4 plus unit noise."""
    from torch_geometric.data import Data

    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    order = np.argsort(y, kind="stable")
    starts = np.searchsorted(y[order], np.arange(classes))
    sizes = np.bincount(y, minlength=classes)
    m = int(n * degree / 2)
    src = rng.integers(0, n, m)
    same = rng.random(m) < inside
    c = y[src]
    dst = np.where(same, order[starts[c] + (rng.random(m) * sizes[c]).astype(np.int64)], rng.integers(0, n, m))
    keep = src != dst
    src, dst = src[keep], dst[keep]
    edge_index = np.concatenate([np.stack([src, dst]), np.stack([dst, src])], axis=1)  # undirected
    x = 0.4 * np.eye(classes, 16)[y] + rng.standard_normal((n, 16))
    return _with_masks(
        Data(x=torch.from_numpy(x).float(), y=torch.from_numpy(y), edge_index=torch.from_numpy(edge_index)), rng
    )


def knn(n: int, classes: int, seed: int):
    from torch_geometric.data import Data

    from batchsel import EmbeddingIndex

    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    centers = rng.standard_normal((classes, 16)) * 0.8
    emb = (centers[y] + rng.standard_normal((n, 16))).astype(np.float32)
    graph = EmbeddingIndex(emb, metric="euclidean", progress=False).knn_graph(k=10).tocoo()
    x = emb + 3.0 * rng.standard_normal(emb.shape).astype(np.float32)  # features noisier than the graph
    edge_index = np.stack([graph.row, graph.col]).astype(np.int64)
    return _with_masks(Data(x=torch.from_numpy(x), y=torch.from_numpy(y), edge_index=torch.from_numpy(edge_index)), rng)


def _with_masks(data, rng):
    split = rng.random(data.num_nodes)
    data.train_mask = torch.from_numpy(split < 0.5)
    data.val_mask = torch.from_numpy((split >= 0.5) & (split < 0.6))
    data.test_mask = torch.from_numpy(split >= 0.6)
    return data


class GCN(torch.nn.Module):
    def __init__(self, d_in: int, hidden: int, classes: int) -> None:
        from torch_geometric.nn import GCNConv

        super().__init__()
        self.conv1, self.conv2 = GCNConv(d_in, hidden), GCNConv(hidden, classes)

    def forward(self, x, edge_index):
        h = torch.relu(self.conv1(x, edge_index))
        return self.conv2(torch.nn.functional.dropout(h, 0.5, self.training), edge_index)


def loaders(data, kind: str, parts: int, per_batch: int, seed: int):
    from torch_geometric.loader import RandomNodeLoader

    from batchsel.integrations.pyg import ClusterData, ClusterLoader, GraphSAINTRandomWalkSampler

    steps = parts // per_batch
    if kind == "cluster-gcn":
        return ClusterLoader(
            ClusterData(data, parts, log=False, seed=seed),
            batch_size=per_batch,
            shuffle=True,
            seed=seed,
            rank=0,
            world_size=1,
        )
    if kind == "graphsaint":  # about as many nodes per batch as a Cluster-GCN batch
        roots = max(1, data.num_nodes // steps // 4)
        return GraphSAINTRandomWalkSampler(
            data, batch_size=roots, walk_length=3, num_steps=steps, log=False, seed=seed, rank=0
        )
    if kind == "random-nodes":
        torch.manual_seed(seed)
        return RandomNodeLoader(data, num_parts=steps, shuffle=True)
    raise ValueError(kind)


def train(data, kind: str, epochs: int, parts: int, per_batch: int, seed: int) -> dict:
    torch.manual_seed(seed)
    model = GCN(data.num_features, 64, int(data.y.max()) + 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    loader = None if kind == "full-batch" else loaders(data, kind, parts, per_batch, seed)
    steps = parts // per_batch if kind == "full-batch" else None
    kept = []
    start = time.perf_counter()
    for epoch in range(epochs):
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        batches = [data] * steps if loader is None else loader
        edges = 0
        for batch in batches:
            model.train()
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)
            mask = batch.train_mask
            if mask.any():
                torch.nn.functional.cross_entropy(out[mask], batch.y[mask]).backward()
                opt.step()
            edges += batch.edge_index.size(1)
        kept.append(edges / (data.edge_index.size(1) * (steps if loader is None else 1)))
    wall = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(1)
    acc = float((pred[data.test_mask] == data.y[data.test_mask]).float().mean())
    return {"acc": acc, "wall": wall, "edges_kept": float(np.mean(kept))}


def mean_se(values: list[float]) -> str:
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0
    return f"{100 * statistics.mean(values):5.1f} +- {100 * se:.1f}"


def bench_training(args) -> dict:
    n = 5000 if args.quick else 20000
    seeds = range(3 if args.quick else 5)
    epochs = 5 if args.quick else 10
    kinds = ["cluster-gcn", "graphsaint", "random-nodes", "full-batch"]
    results = {}
    for task in ("sbm", "knn"):
        print(
            f"\n== 1. {task}: N = {n:,}, 2-layer GCN, {epochs} epochs, seeds {len(seeds)} "
            f"(test accuracy, mean +- s.e.) =="
        )
        print(
            f"{'loader':14}{'test acc %':>16}{'diff vs random-nodes':>24}{'train wall s':>14}{'edges in batches':>18}"
        )
        per = {k: [] for k in kinds}
        for seed in seeds:
            data = sbm(n, 10, 10, 0.7, seed) if task == "sbm" else knn(n, 10, seed)
            for kind in kinds:
                per[kind].append(train(data, kind, epochs, parts=100, per_batch=10, seed=seed))
        for kind in kinds:
            accs = [r["acc"] for r in per[kind]]
            diff = [a - r["acc"] for a, r in zip(accs, per["random-nodes"])]
            print(
                f"{kind:14}{mean_se(accs):>16}{mean_se(diff):>24}{statistics.mean(r['wall'] for r in per[kind]):14.2f}"
                f"{statistics.mean(r['edges_kept'] for r in per[kind]):18.3f}"
            )
        results[task] = per
    return results


def scale_child(n: int, degree: int, parts: int) -> None:
    """In a child process: peak memory is this partition's, not the parent's training runs'."""
    from torch_geometric.data import Data
    from torch_geometric.loader import RandomNodeLoader

    from batchsel.integrations.pyg import ClusterData, ClusterLoader

    rng = np.random.default_rng(0)
    blocks = max(1, n // 1000)
    y = rng.integers(0, blocks, n)
    order = np.argsort(y, kind="stable")
    starts, sizes = np.searchsorted(y[order], np.arange(blocks)), np.bincount(y, minlength=blocks)
    src = np.repeat(np.arange(n), degree)
    inside = order[starts[y[src]] + (rng.random(src.size) * sizes[y[src]]).astype(np.int64)]
    dst = np.where(rng.random(src.size) < 0.8, inside, rng.integers(0, n, src.size))
    data = Data(edge_index=torch.from_numpy(np.stack([src, dst])), num_nodes=n)
    del src, dst, inside
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    cluster_data = ClusterData(data, parts, log=False)
    partition = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    loader = ClusterLoader(cluster_data, batch_size=parts // 100, shuffle=True, rank=0, world_size=1)
    t = time.perf_counter()
    kept = sum(b.edge_index.size(1) for b in loader)
    epoch = time.perf_counter() - t
    t = time.perf_counter()
    random_kept = sum(b.edge_index.size(1) for b in RandomNodeLoader(data, num_parts=100, shuffle=True))
    anchor = time.perf_counter() - t
    print(
        "RESULT "
        + json.dumps(
            {
                "partition_s": partition,
                "peak_gb": peak / 1e6,
                "before_gb": base / 1e6,
                "epoch_s": epoch,
                "random_epoch_s": anchor,
                "kept": kept / (n * degree),
                "random_kept": random_kept / (n * degree),
            }
        ),
        flush=True,
    )


def bench_scale(args) -> dict:
    n = 100_000 if args.quick else 1_000_000
    degree, parts = 10, 1500
    print(f"\n== 2. scale: ClusterData of {n:,} nodes, {n * degree:,} edges into {parts} clusters (a child process) ==")
    out = subprocess.run(
        [sys.executable, __file__, "--scale-child", str(n), str(degree), str(parts)],
        capture_output=True,
        text=True,
        timeout=1800,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(out.stdout[-2000:] + out.stderr[-2000:])
    r = json.loads(line[7:])
    print(
        f"partition (METIS, pymetis): {r['partition_s']:.1f} s (target <= 60 s at 1M nodes); peak RSS "
        f"{r['peak_gb']:.2f} GB ({r['before_gb']:.2f} GB held before: the graph and its generation)"
    )
    print(
        f"one epoch of batches (100 batches): ClusterLoader {r['epoch_s']:.2f} s, RandomNodeLoader (anchor) "
        f"{r['random_epoch_s']:.2f} s, ratio {r['epoch_s'] / r['random_epoch_s']:.2f}; edges inside batches "
        f"{r['kept']:.3f} vs {r['random_kept']:.3f} ({r['kept'] / r['random_kept']:.1f}x)"
    )
    return r


def bench_saint(args) -> dict:
    from torch_geometric.data import Data

    from batchsel.integrations.pyg import GraphSAINTNodeSampler, GraphSAINTRandomWalkSampler

    sizes = (10_000, 100_000) if args.quick else (10_000, 100_000, 1_000_000)
    print("\n== 3. GraphSAINT on N nodes of which 7 have edges (a ring): cost per N ==")
    print(f"{'N':>10}{'node sampler norm s':>22}{'walk batches ms / batch':>26}")
    ring = torch.arange(7)
    out = {}
    for n in sizes:
        data = Data(x=torch.zeros(n, 4), edge_index=torch.stack([ring, (ring + 1) % 7]), num_nodes=n)
        t = time.perf_counter()
        GraphSAINTNodeSampler(data, batch_size=100, sample_coverage=50, log=False)
        norm = time.perf_counter() - t
        walks = GraphSAINTRandomWalkSampler(data, batch_size=100, walk_length=2, num_steps=500, log=False, rank=0)
        t = time.perf_counter()
        for _ in walks:
            pass
        batch = (time.perf_counter() - t) / 500
        print(f"{n:>10,}{norm:>22.3f}{1e3 * batch:>26.3f}")
        out[n] = {"norm_s": norm, "batch_s": batch}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--saint-only", action="store_true", help="only section 3 (GraphSAINT cost per N)")
    parser.add_argument("--scale-child", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.scale_child:
        scale_child(*args.scale_child)
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch threads: {torch.get_num_threads()}")
    results: dict = {"threads": torch.get_num_threads()}
    if not args.saint_only:
        results.update(training=bench_training(args), scale=bench_scale(args))
    results["saint"] = bench_saint(args)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
