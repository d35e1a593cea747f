"""Semi-supervised training with a graph-regularized loss on graph-consistent batches.

Digits (8x8 images, 10 classes) with a stratified 5% of the training labels kept; a
k-NN graph on the raw pixels; a small MLP trained with ``GraphRegularizedLoss``
(cross-entropy on the labeled examples + mu * KL along the graph edges inside each batch
- nu * entropy) on batches drawn by a selector through a ``DataLoader``:

    python examples/semi_supervised.py                       # graph-block batches
    python examples/semi_supervised.py --method random       # random batches
    python examples/semi_supervised.py --method supervised   # labeled examples only
    mpiexec -n 2 python examples/semi_supervised.py          # DDP over gloo, 2 ranks

Under ``mpiexec`` (or ``torchrun``) each rank trains on its own batches of the same
selector plan; the loss only uses edges inside a rank's batch, so it decomposes over
ranks and DDP's gradient average is all the communication needed.

The model kept is the one with the best accuracy on a validation split held out of the
training data (test accuracy is only reported, never used to choose anything).
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from typing import Any

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import batchsel
from batchsel import EmbeddingIndex, GraphBlockSelector, GraphRegularizedLoss, RandomSelector, SelectionBatchSampler
from batchsel.core.io import atomic_write
from batchsel.distributed.comm import launched_by_mpi, launched_by_torchrun
from batchsel.integrations import init_torch_distributed_from_mpi

METHODS = ("blocks", "random", "supervised")


def load_data(
    seed: int,
    label_fraction: float = 0.05,
    val_fraction: float = 0.2,
    test_fraction: float = 0.25,
    num_examples: int | None = None,
) -> dict[str, np.ndarray]:
    """Stratified test / validation / train splits of digits; in the train split only a
    stratified ``label_fraction`` keeps its label (at least one per class), the rest get
    -1. ``num_examples`` takes a stratified subset first (for quick runs)."""
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    if num_examples is not None and num_examples < len(y):
        x, _, y, _ = train_test_split(x, y, train_size=num_examples, stratify=y, random_state=seed)
    x_rest, x_test, y_rest, y_test = train_test_split(x, y, test_size=test_fraction, stratify=y, random_state=seed)
    x_train, x_val, y_train, y_val = train_test_split(
        x_rest, y_rest, test_size=val_fraction, stratify=y_rest, random_state=seed + 1
    )
    rng = np.random.default_rng(seed)
    observed = np.full(len(y_train), -1, dtype=np.int64)
    for c in np.unique(y_train):  # stratified: the same fraction of every class
        members = np.flatnonzero(y_train == c)
        keep = rng.choice(members, size=max(1, round(label_fraction * len(members))), replace=False)
        observed[keep] = c
    return {
        "x_train": x_train,
        "y_train": y_train.astype(np.int64),
        "y_observed": observed,
        "x_val": x_val,
        "y_val": y_val.astype(np.int64),
        "x_test": x_test,
        "y_test": y_test.astype(np.int64),
    }


class IndexedDataset(torch.utils.data.Dataset):
    """(x, observed label, index) triples: the loss needs each example's graph node."""

    def __init__(self, x: np.ndarray, labels: np.ndarray) -> None:
        self.x = torch.as_tensor(x)
        self.labels = torch.as_tensor(labels)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        return self.x[i], self.labels[i], i


def make_selector(
    method: str, graph: Any, data: dict[str, np.ndarray], batch_size: int, seed: int, blocks_per_batch: int | None
) -> tuple[batchsel.Selector, np.ndarray | None]:
    """The selector of ``method`` and the dataset indices it draws from (None = all)."""
    n = len(data["y_observed"])
    if method == "supervised":  # the selector draws positions in the labeled subset
        labeled = np.flatnonzero(data["y_observed"] >= 0)
        return RandomSelector(len(labeled), min(batch_size, len(labeled)), seed=seed), labeled
    if method == "random":
        return RandomSelector(n, batch_size, seed=seed), None
    return GraphBlockSelector(graph, batch_size, seed=seed, blocks_per_batch=blocks_per_batch), None


def accuracy(model: torch.nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    with torch.no_grad():
        return float((model(torch.as_tensor(x)).argmax(1).numpy() == y).mean())


def run(
    method: str = "blocks",
    *,
    seed: int = 0,
    mu: float = batchsel.loop.losses.DEFAULT_MU,
    nu: float = batchsel.loop.losses.DEFAULT_NU,
    steps: int = 1500,
    batch_size: int = 64,
    blocks_per_batch: int | None = None,
    k: int = 10,
    hidden: int = 128,
    lr: float = 3e-3,
    weight_decay: float = 1e-4,
    eval_every: int = 25,
    label_fraction: float = 0.05,
    num_examples: int | None = None,
    data: dict[str, np.ndarray] | None = None,
    graph: Any = None,
    verbose: bool = False,
) -> dict[str, Any]:
    """Train one model; return validation/test accuracy of the best-validation model,
    edge statistics of the batches and the wall time."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    start = time.perf_counter()
    data = data if data is not None else load_data(seed, label_fraction, num_examples=num_examples)
    if graph is None:  # k-NN graph on the raw pixels, training split only (inductive)
        graph = EmbeddingIndex(data["x_train"], metric="euclidean", progress=False).knn_graph(k=k)
    if method == "supervised":
        mu = nu = 0.0
    torch.manual_seed(seed)  # the same initial weights on every rank
    net = torch.nn.Sequential(
        torch.nn.Linear(data["x_train"].shape[1], hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10)
    )
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    # DDP averages the gradients of the ranks' batch losses: the loss decomposes over batches
    model = torch.nn.parallel.DistributedDataParallel(net) if distributed else net
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    loss_fn = GraphRegularizedLoss(graph, mu=mu, nu=nu, reduction="mean", num_examples=len(data["y_observed"]))
    selector, subset = make_selector(method, graph, data, batch_size, seed, blocks_per_batch)
    sampler = SelectionBatchSampler(selector)  # rank and world size from torch.distributed / MPI
    dataset = IndexedDataset(data["x_train"], data["y_observed"])
    if subset is not None:
        dataset = torch.utils.data.Subset(dataset, subset)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler)

    best = (-1.0, 0, None)
    step, epoch, edges_seen, history = 0, 0, [], []
    while step < steps:
        sampler.set_epoch(epoch)
        for xb, yb, ib in loader:
            loss = loss_fn(model(xb), ib, yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            edges_seen.append(loss_fn.last_parts["num_edges"] / len(ib))
            step += 1
            if step % eval_every == 0 or step == steps:
                # every rank holds the same weights, so every rank keeps the same best model
                val = accuracy(net, data["x_val"], data["y_val"])
                history.append((step, accuracy(net, data["x_test"], data["y_test"])))
                if val > best[0]:
                    best = (val, step, copy.deepcopy(net.state_dict()))
                if verbose and sampler.rank == 0:
                    parts = loss_fn.last_parts
                    print(
                        f"step {step:5d}  loss {parts['total']:.4f}  ce {parts['ce']:.4f}  graph {parts['graph']:.4f}"
                        f"  entropy {parts['entropy']:.4f}  val acc {val:.4f}"
                    )
            if step >= steps:
                break
        epoch += 1
    final_test = accuracy(net, data["x_test"], data["y_test"])
    net.load_state_dict(best[2])
    return {
        "method": method,
        "seed": seed,
        "mu": mu,
        "nu": nu,
        "val_acc": best[0],
        "best_step": best[1],
        "test_acc": accuracy(net, data["x_test"], data["y_test"]),
        "final_test_acc": final_test,
        "edges_per_example": float(np.mean(edges_seen)),
        "graph_degree": graph.nnz / graph.shape[0],
        "num_labeled": int((data["y_observed"] >= 0).sum()),
        "num_train": len(data["y_observed"]),
        "rank": sampler.rank,
        "world_size": sampler.world_size,
        "seconds": time.perf_counter() - start,
        # the same keys as examples/train_ddp.py, for the demo's table and plot
        "steps": step,
        "final_accuracy": final_test,
        "history": history,
        "wall_seconds": time.perf_counter() - start,
        "select_seconds": sampler.cost()["training_thread"],  # the training thread's time in the sampler
        "label_fraction": label_fraction,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", choices=METHODS, default="blocks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mu", type=float, default=batchsel.loop.losses.DEFAULT_MU)
    parser.add_argument("--nu", type=float, default=batchsel.loop.losses.DEFAULT_NU)
    parser.add_argument("--steps", type=int, default=1500, help="optimizer steps")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--blocks-per-batch",
        type=int,
        default=None,
        help="METIS blocks per batch (default: GraphBlockSelector's, blocks of ~32)",
    )
    parser.add_argument("--k", type=int, default=10, help="neighbours of the k-NN graph")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--label-fraction", type=float, default=0.05)
    parser.add_argument("--num-examples", type=int, default=None, help="use a stratified subset of digits")
    parser.add_argument("--eval-every", type=int, default=25)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads per process (1 is fastest for this small MLP)"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--metrics-json", default=None, help="rank 0 writes the result here (atomically)")
    parser.add_argument("--quick", action="store_true", help="200 steps on 600 examples (for tests)")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.num_examples = 200, 600
    torch.set_num_threads(args.threads)
    if launched_by_mpi() or launched_by_torchrun():  # mpiexec -n 2 ...: DDP over gloo
        init_torch_distributed_from_mpi(backend="gloo")
    result = run(
        args.method,
        seed=args.seed,
        mu=args.mu,
        nu=args.nu,
        steps=args.steps,
        batch_size=args.batch_size,
        blocks_per_batch=args.blocks_per_batch,
        k=args.k,
        lr=args.lr,
        eval_every=args.eval_every,
        label_fraction=args.label_fraction,
        num_examples=args.num_examples,
        verbose=args.verbose,
    )
    if result["rank"] == 0 and args.metrics_json:
        with atomic_write(args.metrics_json, "w") as f:
            json.dump(result, f)
    if result["rank"] != 0:
        pass
    elif args.json:
        print(json.dumps(result))
    else:
        # the final model's accuracy first: the demo's table shows the same number
        print(
            f"{result['method']}: test accuracy {result['final_test_acc']:.4f} after {result['steps']} steps "
            f"({result['test_acc']:.4f} at the best validation step {result['best_step']}, validation "
            f"{result['val_acc']:.4f}), {result['num_labeled']} of {result['num_train']} labels, "
            + (
                ""
                if result["method"] == "supervised"
                else f"{result['edges_per_example']:.2f} of {result['graph_degree']:.1f} edges per example in its batch, "
            )
            + f"{result['world_size']} process(es), {result['seconds']:.1f} s"
        )
    return result


if __name__ == "__main__":
    main()
