"""A DDP training loop whose batches batchsel chooses.

The same script runs in one process, under torchrun and under mpiexec:

    python examples/train_ddp.py --method submodular
    torchrun --nproc-per-node 2 examples/train_ddp.py --method loss
    mpiexec -n 2 python examples/train_ddp.py --method random

Data: scikit-learn's digits (standardized pixels; a fixed stratified 75/25 train/test
split). Model: a small MLP wrapped in DistributedDataParallel over gloo. The batch sampler
is batchsel's SelectionBatchSampler; after each step the loop hands the per-example losses
and logits back to it (``observe``), which online selectors (submodular, loss-rank) use.
``--metrics-json`` writes (on rank 0) the test accuracy curve and timings.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset

import batchsel
from batchsel.core.io import atomic_write
from batchsel.integrations import SelectionBatchSampler, WeightedDataset, init_torch_distributed_from_mpi

METHODS = ("random", "submodular", "loss", "coreset")


def load_data(num_examples: int | None = None, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Digits, standardized with train statistics, split 75/25 stratified (fixed seed)."""
    digits = load_digits()
    x, y = digits.data.astype(np.float32), digits.target.astype(np.int64)
    if num_examples is not None and num_examples < len(x):
        x, _, y, _ = train_test_split(x, y, train_size=num_examples, stratify=y, random_state=seed)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, stratify=y, random_state=0)
    mean, std = x_train.mean(0), x_train.std(0) + 1e-3
    return (x_train - mean) / std, y_train, (x_test - mean) / std, y_test


def make_model(d_in: int, n_classes: int, hidden: int = 64) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(d_in, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, n_classes))


def make_selector(
    method: str, x: np.ndarray, y: np.ndarray, batch_size: int, seed: int, args: argparse.Namespace
) -> batchsel.Selector:
    if method == "random":
        return batchsel.RandomSelector(len(x), batch_size, seed=seed)
    if method == "submodular":
        return batchsel.SubmodularSelector(x, batch_size, seed=seed, pool_size=args.pool_size)
    if method == "loss":
        return batchsel.LossRankSelector(len(x), batch_size, seed=seed, pressure=args.pressure)
    if method == "coreset":
        return batchsel.CoresetSelector(x, y, batch_size, fraction=args.fraction, seed=seed)
    raise ValueError(f"unknown method {method!r}; choose from {METHODS}")


def train(args: argparse.Namespace) -> dict:
    torch.manual_seed(args.seed)  # identical initial weights on every rank (DDP also broadcasts them)
    torch.set_num_threads(args.threads)
    rank, world = init_torch_distributed_from_mpi()
    x_train, y_train, x_test, y_test = load_data(args.num_examples)
    selector = make_selector(args.method, x_train, y_train, args.batch_size, args.seed, args)
    weighted = args.method == "coreset"
    sampler = SelectionBatchSampler(selector, weighted=weighted)
    index = torch.arange(len(x_train))
    dataset = TensorDataset(torch.from_numpy(x_train), torch.from_numpy(y_train), index)
    loader = DataLoader(WeightedDataset(dataset) if weighted else dataset, batch_sampler=sampler)

    model = torch.nn.parallel.DistributedDataParallel(make_model(x_train.shape[1], 10, args.hidden))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    xt, yt = torch.from_numpy(x_test), torch.from_numpy(y_test)

    # the online selectors' numba kernels compile here (or load from numba's disk cache), not
    # in the timed run; rank 0 first, so the other ranks load what it wrote instead of
    # compiling alongside. Random batches and offline plans compile nothing: no warmup.
    compile_seconds = 0.0
    if selector.online:
        compile_seconds = batchsel.warmup(selector) if rank == 0 else 0.0
        torch.distributed.barrier()
        if rank != 0:
            batchsel.warmup(selector)
    history, step = [], 0
    start = time.perf_counter()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        if epoch == 0:
            sampler.verify()  # every rank computed the same plan
        for item in loader:
            xb, yb, ib, wb = item if weighted else (*item, None)  # WeightedDataset appends w
            logits = model(xb)
            losses = F.cross_entropy(logits, yb, reduction="none")
            loss = (losses * wb).sum() / wb.sum() if wb is not None else losses.mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            sampler.observe(ib, losses=losses.detach(), logits=logits.detach())
            step += 1
            if step % args.eval_every == 0:
                history.append((step, evaluate(model, xt, yt)))
    wall = time.perf_counter() - start
    if not history or history[-1][0] != step:
        history.append((step, evaluate(model, xt, yt)))
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return {
        "method": args.method,
        "world_size": world,
        "rank": rank,
        "steps": step,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "final_accuracy": history[-1][1],
        "history": history,
        "wall_seconds": wall,
        # what the training thread spent in the sampler (selection it did not hide, the
        # feedback's all-gathers), compilation apart; the DataLoader's fetch is not selection
        "select_seconds": sampler.cost()["training_thread"],
        "compile_seconds": compile_seconds + sampler.cost()["compile"],
        "label_fraction": 1.0,
        "param_checksum": float(params.double().sum()),
    }


@torch.no_grad()
def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    return float((model(x).argmax(1) == y).float().mean())


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--method", choices=METHODS, default="random")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pool-size", type=int, default=256, help="submodular: candidate pool per step")
    parser.add_argument("--pressure", type=float, default=100.0, help="loss: selection pressure s_e")
    parser.add_argument("--fraction", type=float, default=0.5, help="coreset: fraction of data per epoch")
    parser.add_argument("--num-examples", type=int, default=None, help="a stratified subset of digits")
    parser.add_argument("--eval-every", type=int, default=10, help="steps between test evaluations")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--metrics-json", default=None, help="rank 0 writes the metrics here")
    parser.add_argument("--quick", action="store_true", help="2 epochs on 600 examples (for tests)")
    args = parser.parse_args(argv)
    if args.quick:
        args.epochs, args.num_examples = 2, 600
    result = train(args)
    if result["rank"] == 0:
        print(
            f"{args.method}: {result['steps']} steps on {result['world_size']} rank(s), "
            f"test accuracy {result['final_accuracy']:.4f}, {result['wall_seconds']:.1f} s "
            f"({100 * result['select_seconds'] / max(result['wall_seconds'], 1e-9):.1f}% selecting)"
        )
        if args.metrics_json:
            with atomic_write(args.metrics_json, "w") as f:
                json.dump(result, f)
    torch.distributed.destroy_process_group()
    return result


if __name__ == "__main__":
    main()
