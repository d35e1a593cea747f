"""Training-quality benchmark: random vs SMDL vs loss-rank vs CRAIG coreset batches.

Trains the small MLP of ``examples/train_ddp.py`` on digits (one process, a 1-rank gloo
group) with each batch selector over several seeds, and reports side by side with random
batches (the anchor, measured in the same run):

1. test accuracy at an equal number of SGD steps (mean +- std over seeds);
2. steps to reach random's mean final accuracy (per seed, the first evaluation step whose
   test accuracy reaches it; mean over the seeds that reach it, and how many do not);
3. wall time including selection, and the share of it spent selecting.

The coreset selector trains on ``--fraction`` of the data per epoch, so it runs
``ceil(epochs / fraction)`` epochs to take about as many steps as the others; accuracy
"at equal steps" is read from each curve at the smallest step count any method reached
(every curve is evaluated every ``--eval-every`` steps). Nothing is tuned here: every
method runs with the defaults of ``train_ddp.py``.

Run: ``python benchmarks/bench_quality.py`` (5 seeds, 5 epochs, batch 32; a few minutes)
or ``--quick`` (2 seeds, 2 epochs, < 1 minute). Writes ``benchmarks/out/bench_quality.json``.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import train_ddp  # noqa: E402

from batchsel.io import atomic_write  # noqa: E402

LABELS = {"random": "random", "submodular": "SMDL", "loss": "loss-rank", "coreset": "CRAIG coreset"}


def run(method: str, seed: int, epochs: int, args: argparse.Namespace) -> dict:
    """One training run through ``train_ddp.main`` (which sets up and tears down the
    1-process group itself, so repeated calls in one process are fine)."""
    argv = ["--method", method, "--seed", str(seed), "--epochs", str(epochs),
            "--batch-size", str(args.batch_size), "--eval-every", str(args.eval_every),
            "--fraction", str(args.fraction)]
    with contextlib.redirect_stdout(io.StringIO()):  # train_ddp prints one line per run
        return train_ddp.main(argv)


def accuracy_at(history: list, step: int) -> float:
    """Test accuracy of the last evaluation at or before ``step``."""
    return [acc for s, acc in history if s <= step][-1]


def first_reaching(history: list, target: float) -> int | None:
    return next((s for s, acc in history if acc >= target), None)


def mean_std(values: list[float]) -> tuple[float, float]:
    return float(np.mean(values)), (float(statistics.stdev(values)) if len(values) > 1 else 0.0)


def summarize(runs: dict, methods: list[str]) -> dict:
    steps_common = min(r["steps"] for rs in runs.values() for r in rs)
    acc = {m: [accuracy_at(r["history"], steps_common) for r in runs[m]] for m in methods}
    target = float(np.mean(acc["random"]))
    rows = {}
    for m in methods:
        reached = [first_reaching(r["history"], target) for r in runs[m]]
        hit = [s for s in reached if s is not None]
        wall = [r["wall_seconds"] for r in runs[m]]
        select = [r["select_seconds"] for r in runs[m]]
        mean, std = mean_std(acc[m])
        rows[m] = {"accuracy_mean": mean, "accuracy_std": std, "accuracy_per_seed": acc[m],
                   "steps_taken": [r["steps"] for r in runs[m]], "epochs": runs[m][0]["epochs"],
                   "steps_to_target_per_seed": reached,
                   "steps_to_target_mean": float(np.mean(hit)) if hit else None,
                   "not_reached": len(reached) - len(hit),
                   "wall_seconds_mean": float(np.mean(wall)),
                   "select_share": float(np.sum(select) / max(np.sum(wall), 1e-12))}
    base = rows["random"]
    for m in methods:
        r = rows[m]
        r["steps_ratio"] = (r["steps_to_target_mean"] / base["steps_to_target_mean"]
                            if r["steps_to_target_mean"] and base["steps_to_target_mean"] else None)
        r["wall_ratio"] = r["wall_seconds_mean"] / base["wall_seconds_mean"]
        # Seed noise: standard error of the difference of the two means (Welch).
        n, nb = len(acc[m]), len(acc["random"])
        se = math.sqrt(r["accuracy_std"] ** 2 / n + base["accuracy_std"] ** 2 / nb)
        r["accuracy_diff"] = r["accuracy_mean"] - base["accuracy_mean"]
        r["accuracy_diff_se"] = se
    return {"steps_common": steps_common, "target_accuracy": target, "rows": rows}


def print_table(summary: dict, methods: list[str], seeds: int) -> None:
    rows = summary["rows"]
    print(f"\ndigits, {seeds} seeds; accuracy at {summary['steps_common']} steps; "
          f"target = random's mean accuracy there = {summary['target_accuracy']:.4f}")
    head = (f"{'method':<14}{'epochs':>7}{'steps':>11}{'test acc (mean+-std)':>23}{'diff vs random':>18}"
            f"{'steps to target':>17}{'x random':>10}{'not reached':>13}{'wall s':>9}{'x random':>10}{'selecting':>11}")
    print(head)
    print("-" * len(head))
    for m in methods:
        r = rows[m]
        steps = f"{min(r['steps_taken'])}-{max(r['steps_taken'])}" if len(set(r["steps_taken"])) > 1 \
            else str(r["steps_taken"][0])
        to_target = f"{r['steps_to_target_mean']:.0f}" if r["steps_to_target_mean"] is not None else "-"
        ratio = f"{r['steps_ratio']:.2f}" if r["steps_ratio"] is not None else "-"
        diff = f"{100 * r['accuracy_diff']:+.2f}+-{100 * r['accuracy_diff_se']:.2f} pt"
        print(f"{LABELS[m]:<14}{r['epochs']:>7}{steps:>11}"
              f"{100 * r['accuracy_mean']:>14.2f} +- {100 * r['accuracy_std']:.2f}"
              f"{diff:>18}{to_target:>17}{ratio:>10}{r['not_reached']:>8}/{seeds:<4}"
              f"{r['wall_seconds_mean']:>9.2f}{r['wall_ratio']:>10.2f}{100 * r['select_share']:>10.1f}%")
    smdl = rows.get("submodular")
    if smdl is not None:
        faster = smdl["steps_ratio"] is not None and smdl["steps_ratio"] <= 0.7 and smdl["not_reached"] == 0
        better = smdl["accuracy_diff"] > 2 * smdl["accuracy_diff_se"]
        print(f"\ngoal (SMDL reaches random's accuracy in <= 0.7x the steps, or beats it by > 2 s.e.): "
              f"{'MET' if faster or better else 'NOT MET'} "
              f"(steps ratio {smdl['steps_ratio'] if smdl['steps_ratio'] is None else round(smdl['steps_ratio'], 2)}, "
              f"{smdl['not_reached']}/{seeds} seeds not reaching; accuracy diff "
              f"{100 * smdl['accuracy_diff']:+.2f} +- {100 * smdl['accuracy_diff_se']:.2f} pt)")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=5, help="epochs for the full-data methods")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--eval-every", type=int, default=5, help="steps between test evaluations")
    parser.add_argument("--fraction", type=float, default=0.5, help="coreset fraction of the data per epoch")
    parser.add_argument("--methods", default=",".join(train_ddp.METHODS))
    parser.add_argument("--quick", action="store_true", help="2 seeds, 2 epochs (< 1 minute)")
    parser.add_argument("--out", default=None, help="JSON output (default benchmarks/out/bench_quality[_quick].json)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.epochs = 2, 2
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if "random" not in methods:
        raise ValueError(f"--methods must include the anchor 'random', got {methods!r}")
    unknown = sorted(set(methods) - set(train_ddp.METHODS))
    if unknown:
        raise ValueError(f"unknown methods {unknown!r}; choose from {train_ddp.METHODS}")
    out = args.out or str(ROOT / "benchmarks" / "out" / f"bench_quality{'_quick' if args.quick else ''}.json")

    start = time.perf_counter()
    runs = {m: [] for m in methods}
    for seed in range(args.seeds):
        for m in methods:  # interleaved so that machine-load drift hits every method alike
            epochs = math.ceil(args.epochs / args.fraction) if m == "coreset" else args.epochs
            runs[m].append(run(m, seed, epochs, args))
        print(f"seed {seed}: " + ", ".join(f"{LABELS[m]} {runs[m][-1]['final_accuracy']:.4f}" for m in methods),
              flush=True)
    summary = summarize(runs, methods)
    print_table(summary, methods, args.seeds)
    total = time.perf_counter() - start
    print(f"\ntotal {total:.0f} s")

    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with atomic_write(out, "w") as f:
        json.dump({"args": vars(args), "summary": summary,
                   "histories": {m: [r["history"] for r in runs[m]] for m in methods},
                   "total_seconds": total}, f, indent=1)
    print(f"wrote {out}")
    return summary


if __name__ == "__main__":
    main()
