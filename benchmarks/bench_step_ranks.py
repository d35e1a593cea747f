"""Step-random micro-batches trained on two ranks: wall to random's accuracy.

``StepBalancedSelector`` keeps every optimizer step's examples those of random batches (the
global batch of ``2 x B``) and splits them over the ranks and ``accumulation`` micro-batches
each, sorted by length, so that each rank pads little and the two wait little for each other.
This trains ``bench_buckets.py``'s tasks (T1, a transformer over padded tokens whose label
follows the length; T2, a GRU) on two gloo processes of one torch thread each, the gradients
averaged over the ranks after each step (DDP's all-reduce, written out), and compares, per
seed (the same initial weights and the same random steps for both methods of a seed):

- ``shuffle``: random batches of B a rank (``RandomSelector``, ``DistributedSampler``'s
  split), random's full run (``Task.epochs`` epochs of its steps);
- ``step-balanced``: the same steps, ``StepBalancedSelector(RandomSelector(...),
  accumulation=4)``: its gradient at every step is random's global batch's mean, so at equal
  steps its accuracy is random's up to the float sums' order;
- ``shuffle@matched``: random batches for as many steps as fit in that seed's step-balanced
  wall (the budget-fair anchor: random given the same wall, its learning rate decayed over
  its own, shorter run);
- ``shuffle-aa``: random batches of another data order (the A/A control: how far two random
  runs of the same initial weights differ by chance).

Each run's learning rate warms up and decays over its own steps (``bench_quality``'s
schedule). Reported: mean accuracy on the split, the paired difference to random's full run
(mean +- s.e. over seeds), the wall (the slower rank's, set-up and every batch drawn and
padded included; evaluation not timed) as a fraction of random's full run, and the wall
saved: 1 - the step-balanced wall fraction where it is within 2 s.e. of random's accuracy.

Run: ``python benchmarks/bench_step_ranks.py`` (``--quick``: the tiny tasks, 2 seeds).
Writes ``benchmarks/results/buckets/bench_step_ranks.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_buckets as bb  # noqa: E402  (its tasks, data, collates and batch makers)

from batchsel.core.io import atomic_write  # noqa: E402

RESULTS = Path(__file__).parent / "results" / "buckets" / "bench_step_ranks"
WORLD = 2
METHODS = ("shuffle", "shuffle-aa", "step-balanced", "shuffle@matched")


def average_gradients(params: list[torch.nn.Parameter]) -> None:
    """DDP's all-reduce of the gradients, averaged over the ranks."""
    import torch.distributed as dist

    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat)
    torch.nn.utils.vector_to_parameters(flat / WORLD, [p.grad for p in params])


def run(task: bb.Task, method: str, seed: int, steps: int, split: str, rank: int) -> dict[str, Any]:
    """``steps`` optimizer steps of ``method`` on this rank; the slower rank's wall."""
    import torch.distributed as dist

    data = bb.load(task)
    train = data["train"]
    torch.manual_seed(seed)  # the same initial weights on both ranks and for every method
    model = task.model()
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=task.lr)
    schedule = bb.lr_schedule(opt, steps)
    dist.barrier()
    t0 = time.perf_counter()
    balanced = method == "step-balanced"
    sampler, selector = bb.make_batches(method, train.lengths, task.batch_size, seed, rank, WORLD)
    if balanced:
        dataset: Any = bb.WeightedDataset(bb.Indices(len(train.y)))
        collate: Any = bb.WeightedPadCollate(train)
    else:
        dataset, collate = bb.Indices(len(train.y)), bb.PadCollate(train)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler, collate_fn=collate)
    per_step = bb.ACCUMULATION if balanced else 1
    step, micro, epoch, real, padded = 0, 0, 0, 0, 0
    opt.zero_grad()
    while step < steps:
        sampler.set_epoch(epoch)
        for batch in loader:
            tokens, mask, y = batch[1], batch[2], batch[3]
            losses = F.cross_entropy(model(tokens, mask), y, reduction="none")
            # step-balanced: the plan's weights make the micro-batches' sum the global batch's
            # mean over WORLD (the average below); random: each rank's mean, averaged
            (selector.weighted_loss(losses, batch[4]) if balanced else losses.mean()).backward()
            real += int(mask.sum())
            padded += mask.numel()
            micro += 1
            if micro % per_step:
                continue
            average_gradients(params)
            opt.step()
            schedule.step()
            opt.zero_grad()
            step += 1
            if step == steps:
                break
        epoch += 1
    wall = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(wall, op=dist.ReduceOp.MAX)
    return {
        "final": bb.accuracy(model, data[split]) if rank == 0 else None,
        "wall_seconds": float(wall),
        "steps": step,
        "padding_share": 1.0 - real / padded,
    }


def worker(rank: int, args: argparse.Namespace, port: int, path: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        tasks = bb.make_tasks(args.quick)
        out: dict[str, Any] = {}
        for name in args.tasks:
            task = tasks[name]
            full = task.epochs * (-(-task.sizes[0] // (WORLD * task.batch_size)))  # random's steps
            run(task, "shuffle", 10_000, 2, args.split, rank)  # warm-up: kernels, allocator
            runs: dict[str, list] = {m: [] for m in METHODS}
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                shuffle = run(task, "shuffle", seed, full, args.split, rank)
                balanced = run(task, "step-balanced", seed, full, args.split, rank)
                matched = max(1, round(full * balanced["wall_seconds"] / shuffle["wall_seconds"]))
                runs["shuffle"].append(shuffle)
                runs["step-balanced"].append(balanced)
                runs["shuffle@matched"].append(run(task, "shuffle", seed, matched, args.split, rank))
                runs["shuffle-aa"].append(run(task, "shuffle-aa", seed, full, args.split, rank))
                if rank == 0:
                    print(
                        f"  {name} seed {seed}: shuffle {100 * shuffle['final']:.2f} % {shuffle['wall_seconds']:.1f} s, "
                        f"step-balanced {100 * balanced['final']:.2f} % {balanced['wall_seconds']:.1f} s, "
                        f"shuffle@{matched} steps {100 * runs['shuffle@matched'][-1]['final']:.2f} %",
                        flush=True,
                    )
            out[name] = {"full_steps": full, "runs": runs}
        if rank == 0:
            with open(path, "w") as f:
                json.dump(out, f)
    finally:
        dist.destroy_process_group()


def summarize(out: dict[str, Any]) -> dict[str, Any]:
    summary = {}
    for name, res in out.items():
        runs = res["runs"]
        anchor = np.array([r["final"] for r in runs["shuffle"]])
        anchor_wall = np.array([r["wall_seconds"] for r in runs["shuffle"]])
        rows = {}
        for m in METHODS:
            acc = np.array([r["final"] for r in runs[m]])
            diff = 100 * (acc - anchor)
            se = float(diff.std(ddof=1) / np.sqrt(len(diff))) if len(diff) > 1 else 0.0
            fraction = np.array([r["wall_seconds"] for r in runs[m]]) / anchor_wall
            rows[m] = {
                "accuracy": float(100 * acc.mean()),
                "diff": float(diff.mean()),
                "diff_se": se,
                "wall_fraction": float(fraction.mean()),
                "steps": int(np.median([r["steps"] for r in runs[m]])),
                "padding_share": float(np.mean([r["padding_share"] for r in runs[m]])),
            }
        sb = rows["step-balanced"]
        reaches = sb["diff"] >= -2 * max(sb["diff_se"], 1e-9)
        summary[name] = {"rows": rows, "wall_saved": 1.0 - sb["wall_fraction"] if reaches else None}
    return summary


def markdown(payload: dict[str, Any]) -> str:
    lines = [
        "# Step-random micro-batches on two ranks: `benchmarks/bench_step_ranks.py`",
        "",
        f"Measured {payload['when']} (torch {torch.__version__}), {WORLD} gloo processes of 1 torch thread "
        f"on {os.cpu_count()} CPUs, {payload['seeds']} seeds from {payload['first_seed']}, split "
        f"`{payload['split']}`; load average before {payload['load_before']}, after {payload['load_after']}. "
        f"B = 32 a rank (a global batch of 64), `accumulation=4`, each run's learning rate decayed over its own steps. "
        "Accuracy: mean over seeds; vs random: the paired difference to random's full run (points, mean +- s.e.); "
        "wall: the slower rank's, over random's full run (mean of the seeds' ratios).",
        "",
    ]
    for name, s in payload["summary"].items():
        saved = s["wall_saved"]
        lines += [
            f"### {name}",
            "",
            "| method | steps | padding % | accuracy % | vs random (pt) | wall (x random) |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for m, row in s["rows"].items():
            lines.append(
                f"| {m} | {row['steps']} | {100 * row['padding_share']:.1f} | {row['accuracy']:.2f} | "
                f"{row['diff']:+.2f} ± {row['diff_se']:.2f} | {row['wall_fraction']:.2f} |"
            )
        lines += [
            "",
            "Wall saved at random's accuracy: "
            + ("not reached" if saved is None else f"{100 * saved:.0f} %" if saved > 0 else "none (it costs more)")
            + ".",
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; returns what it writes to ``--out``'s JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the tiny tasks, 2 seeds (a smoke run)")
    ap.add_argument("--seeds", type=int, default=None, help="default 5 (--quick: 2)")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--split", choices=("val", "test"), default="test")
    ap.add_argument("--tasks", default="t1-transformer,t2-gru", help="comma-separated")
    ap.add_argument("--out", default=str(RESULTS), help=f"results stem, .md and .json (default {RESULTS})")
    args = ap.parse_args(argv)
    args.seeds = args.seeds or (2 if args.quick else 5)
    args.tasks = args.tasks.split(",")
    unknown = [t for t in args.tasks if t not in bb.make_tasks(args.quick)]
    if unknown:
        ap.error(f"unknown task {unknown[0]!r}")
    load_before = bb.load_avg()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "out.json")
        torch.multiprocessing.spawn(worker, args=(args, bb.free_port(), path), nprocs=WORLD, join=True)
        with open(path) as f:
            out = json.load(f)
    payload = {
        "when": time.strftime("%Y-%m-%d %H:%M"),
        "seeds": args.seeds,
        "first_seed": args.first_seed,
        "split": args.split,
        "load_before": load_before,
        "load_after": bb.load_avg(),
        "summary": summarize(out),
        "runs": out,
    }
    stem = Path(args.out)
    stem.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(str(stem) + ".json", "w") as f:
        json.dump(payload, f, indent=1)
    with atomic_write(str(stem) + ".md", "w") as f:
        f.write(markdown(payload) + "\n")
    print(markdown(payload))
    return payload


if __name__ == "__main__":
    main()
