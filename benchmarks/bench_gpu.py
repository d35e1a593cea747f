"""Benchmark: what each selector adds to a training step, on a CUDA device or the CPU.

    python benchmarks/bench_gpu.py                       # CUDA if there is one, else the CPU
    python benchmarks/bench_gpu.py --device cpu --steps 20 --warmup 5 --models mlp

Two models, the data resident on the device (N = 50,000 examples, 64-d embeddings for the
selectors that read them), every selector at its defaults through
``SelectionBatchSampler`` (the default ``prefetch``: one batch ahead for online selectors),
with the feedback each one reads handed to ``observe()`` every step as device tensors:

- ``resnet18``: a CIFAR ResNet-18 on 3 x 32 x 32 inputs, B = 256 (bf16 autocast on CUDA);
- ``mlp``: a 3-layer MLP (64 -> 512 -> 512 -> 10), B = 64.

Methods: random batches, loss-rank (per-example losses observed), SMDL (logits observed,
which its default weights do not read: the selection on the fixed 64-d embeddings), the loss filter at ratio 4 (a no-grad
scoring forward of 4B candidates, the B of largest loss trained on), graph blocks with
``GraphRegularizedLoss`` (10-NN graph of the embeddings, a tenth of the labels), and
InfoBatch. ``--warmup`` untimed steps (compilation, cuDNN autotuning, ``batchsel.warmup()``
before them), then ``--steps`` timed ones, the device synchronized at both ends. Reported:
ms per step, the ratio to random's step, the sampler's :meth:`cost` (what the training
thread spent in the sampler per batch) and the distinct batch shapes seen. On the CPU the
torch step releases the GIL, so a selection ahead runs beside it where a core is free.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import batchsel
from batchsel import (
    CandidateFilter,
    EmbeddingIndex,
    GraphBlockSelector,
    GraphRegularizedLoss,
    InfoBatchSelector,
    LossRankSelector,
    RandomSelector,
    SelectionBatchSampler,
    SubmodularSelector,
)

HERE = os.path.dirname(os.path.abspath(__file__))
METHODS = ("random", "loss-rank", "smdl", "loss-filter-4", "graph-blocks", "infobatch")


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.b2(self.c2(F.relu(self.b1(self.c1(x))))) + self.skip(x))


class ResNet18(nn.Module):
    """CIFAR ResNet-18 (He et al. 2016's 3x3 stem): features() is the 512-d pooled vector."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(512, classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1).flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class MLP(nn.Module):
    def __init__(self, d: int = 64, width: int = 512, classes: int = 10) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(d, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU())
        self.head = nn.Linear(width, classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def make_data(model: str, n: int, device: torch.device, seed: int = 0) -> dict:
    """Inputs and labels on the device; 64-d embeddings (the selectors' input) on the host."""
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(n, 64, generator=g)
    y = (emb[:, :10].argmax(1) + (torch.rand(n, generator=g) < 0.1).long() * 3) % 10
    if model == "mlp":
        x = emb.clone()
    else:  # images whose mean colour carries the embedding's first coordinates
        x = torch.randn(n, 3, 32, 32, generator=g) * 0.5 + emb[:, :3, None, None]
    return {"x": x.to(device), "y": y.to(device), "y_host": y.numpy(), "emb": emb.numpy()}


def make_run(method: str, data: dict, batch: int, graph: object) -> tuple:
    """(sampler, filter or None, loss function or None) for one method at its defaults."""
    n = len(data["y_host"])
    filt, loss_fn = None, None
    if method == "random":
        selector = RandomSelector(n, batch)
    elif method == "loss-rank":
        selector = LossRankSelector(n, batch)
    elif method == "smdl":
        selector = SubmodularSelector(data["emb"], batch)
    elif method == "loss-filter-4":
        filt = CandidateFilter(batch, ratio=4)
        selector = RandomSelector(n, filt.candidate_size)
    elif method == "graph-blocks":
        selector = GraphBlockSelector(graph, batch)
        loss_fn = GraphRegularizedLoss(graph)
    elif method == "infobatch":
        selector = InfoBatchSelector(n, batch, epochs=10, labels=data["y_host"])
    else:
        raise ValueError(method)
    return SelectionBatchSampler(selector, rank=0, world_size=1, weighted=selector.weighted_plans), filt, loss_fn


def time_method(method: str, model_name: str, data: dict, batch: int, graph: object, args: argparse.Namespace) -> dict:
    device = data["x"].device
    torch.manual_seed(0)
    model = (ResNet18() if model_name == "resnet18" else MLP()).to(device)
    if device.type == "cuda":
        model = model.to(memory_format=torch.channels_last) if model_name == "resnet18" else model
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    sampler, filt, loss_fn = make_run(method, data, batch, graph)
    labels_seen = np.full(len(data["y_host"]), -1)
    labels_seen[::10] = data["y_host"][::10]  # graph blocks: a tenth labelled
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu", enabled=False)
    )
    shapes: set[int] = set()
    total, step, start = args.warmup + args.steps, 0, None
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    epoch = 0
    while step < total:
        sampler.set_epoch(epoch)
        for ib in sampler:
            if step == args.warmup:
                sync()
                start, cost0 = time.perf_counter(), sampler.cost()
            if step >= total:
                break
            weights = None
            if sampler.weighted:  # InfoBatch: a WeightedBatch, the kept low-loss examples up-weighted
                weights = torch.from_numpy(ib.weights).to(device, non_blocking=True)
                ib = ib.indices
            idx = torch.as_tensor(ib, device=device)
            if filt is not None:
                with torch.no_grad(), autocast:
                    scores_logits = model(data["x"][idx])
                keep = filt(np.asarray(ib), scores_logits.float(), data["y"][idx])
                idx = idx[torch.as_tensor(keep, device=device)]
            xb, yb = data["x"][idx], data["y"][idx]
            shapes.add(int(idx.shape[0]))
            with autocast:
                feats = model.features(xb)
                logits = model.head(feats).float()
            if loss_fn is not None:
                lab = labels_seen[np.asarray(ib)]
                loss = loss_fn(logits, np.asarray(ib), lab)
                per_example = None
            else:
                per_example = F.cross_entropy(logits, yb, reduction="none")
                loss = per_example.mean() if weights is None else (per_example * weights).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if method == "loss-rank" or method == "infobatch":
                sampler.observe(idx, losses=per_example.detach())
            elif method == "smdl":  # its default weights read embeddings (64-d here), the paper's logits
                sampler.observe(idx, logits=logits.detach())
            step += 1
        epoch += 1
    sync()
    wall = time.perf_counter() - start
    cost = sampler.cost()
    exposed = cost["training_thread"] - cost0["training_thread"]
    return {
        "model": model_name,
        "method": method,
        "ms_per_step": 1e3 * wall / args.steps,
        "sampler_ms_per_step": 1e3 * exposed / args.steps,
        "compile_s": cost["compile"],
        "shapes": sorted(shapes),
    }


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--models", default="resnet18,mlp")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--out", default=None, help="write the table (.md) and rows (.json) to this stem")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    batchsel.warmup()
    rows = []
    for model_name in args.models.split(","):
        batch = 256 if model_name == "resnet18" else 64
        data = make_data(model_name, args.n, device)
        graph = None
        if "graph-blocks" in args.methods:
            graph = EmbeddingIndex(data["emb"], metric="euclidean", progress=False).knn_graph(k=10)
        for method in args.methods.split(","):
            rows.append(time_method(method, model_name, data, batch, graph, args))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    name = (
        torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, torch {torch.get_num_threads()} threads"
    )
    lines = [
        f"### {name}, N = {args.n:,}, {args.steps} timed steps after {args.warmup} "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, batchsel {batchsel.__version__})",
        "",
        "| model | method | ms / step | x random | sampler ms / step | compile s | batch sizes |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        base = next(b for b in rows if b["model"] == r["model"] and b["method"] == "random")
        sizes = (
            r["shapes"] if len(r["shapes"]) <= 3 else f"{len(r['shapes'])} sizes, {r['shapes'][0]}-{r['shapes'][-1]}"
        )
        lines.append(
            f"| {r['model']} | {r['method']} | {r['ms_per_step']:.1f} | {r['ms_per_step'] / base['ms_per_step']:.2f}x | "
            f"{r['sampler_ms_per_step']:.2f} | {r['compile_s']:.1f} | {sizes} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out + ".md", "a") as f:
            f.write(text + "\n")
        with open(args.out + ".json", "w") as f:
            json.dump(rows, f, indent=1)
    return rows


if __name__ == "__main__":
    main()
