"""Online batch selection in a DDP loop: score a candidate batch, train on the best B.

The same script runs in one process, under torchrun and under mpiexec:

    python examples/train_filter.py --score rho --label-noise 0.25
    torchrun --nproc-per-node 2 examples/train_filter.py --score rho --diversity 1
    mpiexec -n 2 python examples/train_filter.py --score loss

Each step the sampler yields ``ratio x B`` candidates per rank (a RandomSelector built with
``batch_size=filt.candidate_size``), the loop scores them with a no-grad forward and trains
on the B that batchsel's CandidateFilter keeps; ``--score none`` trains on random batches
of B. ``rho`` (RHO-LOSS) subtracts the irreducible losses of a model cross-fitted on the
input features (``--il-model``: k-NN, or ``net``, a small torch MLP with early stopping),
times ``--irreducible-weight`` (``auto``: 1 when the IL model confidently contradicts
enough labels, else 0.5); when that model is near chance or unsure of most examples the
filter falls back to random batches (``--min-il-skill``, ``--min-il-decisive``). Data: scikit-learn's digits or
mnist1d, optionally with a share of labels replaced by a wrong class (``--label-noise``);
an MLP; Adam.
"""

from __future__ import annotations

import argparse
import json
import logging
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from batchsel import CandidateFilter, IrreducibleLoss, RandomSelector
from batchsel.core.io import atomic_write
from batchsel.integrations import SelectionBatchSampler, init_torch_distributed_from_mpi

logger = logging.getLogger("train_filter")


def load_data(name: str, noise: float, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Standardized features; a share ``noise`` of the training labels replaced by another class."""
    if name == "mnist1d":
        from mnist1d.data import get_dataset_args, make_dataset

        d = make_dataset(get_dataset_args())
        x, y, xt, yt = d["x"], d["y"], d["x_test"], d["y_test"]
    else:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        digits = load_digits()
        x, xt, y, yt = train_test_split(
            digits.data, digits.target, test_size=0.25, stratify=digits.target, random_state=0
        )
    mean, std = x.mean(0), x.std(0) + 1e-3
    x, xt = ((x - mean) / std).astype(np.float32), ((xt - mean) / std).astype(np.float32)
    rng = np.random.default_rng(seed)
    flip = rng.random(len(y)) < noise
    y = np.where(flip, (y + rng.integers(1, 10, len(y))) % 10, y).astype(np.int64)
    return x, y, xt, yt.astype(np.int64)


def train(args: argparse.Namespace) -> dict:
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    rank, world = init_torch_distributed_from_mpi()
    if rank == 0:  # the irreducible-loss model's summary once, not once per rank
        logging.getLogger("batchsel.loop.irreducible").setLevel(logging.INFO)
    x, y, xt, yt = load_data(args.data, args.label_noise)
    filt = None
    if args.score != "none":
        il = IrreducibleLoss(args.il_model, seed=args.seed).fit(x, y) if args.score == "rho" else None
        filt = CandidateFilter(
            args.batch_size,
            args.ratio,
            args.score,
            irreducible_losses=il,
            irreducible_weight=args.irreducible_weight,
            min_il_skill=args.min_il_skill,
            min_il_decisive=args.min_il_decisive,
            diversity=args.diversity,
            uniform_fraction=args.uniform_fraction,
            warmup_steps=args.warmup_steps,
            seed=args.seed,
        )
    if filt is not None and filt.guard_ == "uniform":
        filt = None  # the IL model is near chance (warned): plain random batches of B
    sampler = SelectionBatchSampler(
        RandomSelector(len(x), filt.candidate_size if filt else args.batch_size, seed=args.seed)
    )
    loader = DataLoader(
        TensorDataset(torch.from_numpy(x), torch.from_numpy(y), torch.arange(len(x))), batch_sampler=sampler
    )
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(
            torch.nn.Linear(x.shape[1], args.hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(args.hidden, args.hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(args.hidden, 10),
        )
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    xt_, yt_ = torch.from_numpy(xt), torch.from_numpy(yt)
    history, eval_seconds = [], 0.0
    step, epoch, start = 0, 0, time.perf_counter()
    while step < args.steps:
        sampler.set_epoch(epoch)
        for xb, yb, ib in loader:
            if filt is not None:  # the filter: score the candidates, keep B of them
                with torch.no_grad(), filt.timed():
                    logits = model.module(xb)
                keep = torch.from_numpy(filt(ib, logits, yb, embeddings=xb if args.diversity else None))
                xb, yb = xb[keep], yb[keep]
            optimizer.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            optimizer.step()
            step += 1
            if step % args.eval_every == 0 or step == args.steps:
                t0 = time.perf_counter()
                history.append((step, evaluate(model.module, xt_, yt_)))
                eval_seconds += time.perf_counter() - t0
            if step == args.steps:
                break
        epoch += 1
    wall = time.perf_counter() - start - eval_seconds
    accuracy = history[-1][1]
    cost = filt.cost() if filt else {"forward_fraction": 0.0, "select_fraction": 0.0}
    return {
        "score": args.score,
        "world_size": world,
        "rank": rank,
        "steps": step,
        "epochs": epoch,
        "test_accuracy": accuracy,
        "final_accuracy": accuracy,
        "history": history,
        "label_fraction": 1.0,
        "select_seconds": (cost["forward_fraction"] + cost["select_fraction"]) * wall,
        "wall_seconds": wall,
        "forward_fraction": cost["forward_fraction"],
        "select_fraction": cost["select_fraction"],
        "filter": repr(filt) if filt else "random batches",
    }


@torch.no_grad()
def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    return float((model(x).argmax(1) == y).float().mean())


def _weight(text: str) -> float | str:
    return text if text == "auto" else float(text)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", choices=("digits", "mnist1d"), default="digits")
    parser.add_argument("--label-noise", type=float, default=0.0, help="share of training labels made wrong")
    parser.add_argument("--score", choices=("none", "loss", "gradnorm", "rho"), default="rho")
    parser.add_argument("--ratio", type=float, default=4.0, help="candidates per kept example")
    parser.add_argument(
        "--irreducible-weight",
        type=_weight,
        default="auto",
        help="rho: score = loss - weight * irreducible loss (1 = RHO-LOSS as published; "
        "auto: from the IL model's confident disagreement with the labels)",
    )
    parser.add_argument(
        "--il-model",
        choices=("knn", "net", "logistic", "mlp"),
        default="knn",
        help="rho: the irreducible-loss model, cross-fitted on the input features",
    )
    parser.add_argument(
        "--min-il-skill",
        type=float,
        default=0.3,
        help="rho: random batches when the IL model's skill over chance is below this (0: off)",
    )
    parser.add_argument(
        "--min-il-decisive",
        type=float,
        default=0.5,
        help="rho: random batches when the IL model is decisive on fewer examples than this (0: off)",
    )
    parser.add_argument("--diversity", type=float, default=0.0, help="lambda of the facility-location term")
    parser.add_argument("--uniform-fraction", type=float, default=0.25, help="share of each batch drawn uniformly")
    parser.add_argument("--warmup-steps", type=int, default=0)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=32, help="kept examples per rank and step")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-every", type=int, default=100, help="steps between test evaluations")
    parser.add_argument("--metrics-json", default=None, help="rank 0 writes the result here")
    parser.add_argument("--quick", action="store_true", help="200 steps (for tests)")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps = 200
    logging.basicConfig(format="%(message)s")
    logging.getLogger("train_filter").setLevel(logging.INFO)
    result = train(args)
    if result["rank"] == 0:
        logger.info(
            "%s: %d steps on %d rank(s), test accuracy %.4f, %.1f s (scoring forward %.0f%%, filter %.0f%%)",
            result["filter"],
            result["steps"],
            result["world_size"],
            result["test_accuracy"],
            result["wall_seconds"],
            100 * result["forward_fraction"],
            100 * result["select_fraction"],
        )
        if args.metrics_json:
            with atomic_write(args.metrics_json, "w") as f:
                json.dump(result, f)
    torch.distributed.destroy_process_group()
    return result


if __name__ == "__main__":
    main()
