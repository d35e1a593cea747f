"""What the sampler adds to a short training step: the digits MLP at B = 32.

The fast tier's ``digits-mlp`` task of ``bench_quality.py`` (scikit-learn's digits, 1077
training examples, MLP 64-64-10, SGD 0.05 momentum 0.9, B = 32: a step of 0.2-0.8 ms,
by machine), and the same with two hidden layers of 256 (``digits-mlp-256x2``, a step
about twice as long), trained with the README's loop, no DataLoader, through
``SelectionBatchSampler`` (one rank, every option at its default)::

    for ib in sampler:                       # next(): timed
        losses = F.cross_entropy(model(x[ib]), y[ib], reduction="none")
        opt.zero_grad(); losses.mean().backward(); opt.step()
        sampler.observe(ib, losses=losses.detach())      # timed

for RandomSelector (the anchor), LossRankSelector and AutoSelector(labels=y), each with its
own model; and, with 40 % of the labels replaced by wrong ones (seed 0), RandomSelector
(``random-noisy``, the anchor of the next) and AutoSelector once it has fallen back to
random batches for good (``auto-noisy``: its warm-up runs until ``mode == "noisy"``). One untimed warm-up epoch per configuration first (numba's kernels load, and
AutoSelector leaves its warm-up phase: its timed batches are loss-rank's, ``select`` mode),
then rounds of ``--epochs`` epochs, every configuration in every round in a fresh order.
Reported, medians over rounds: the wall per step, its ratio to random's (same threads,
same round), and per step the time the loop spent inside ``next(sampler)`` and inside
``sampler.observe`` (``time.perf_counter`` around the two calls, the same for every
selector), at torch's default threads and at 1 (``torch.set_num_threads(1)``). The load
average is printed beside them. The wall's excess over random's also counts what the
sampler costs the step itself (``rest of step``: the step's own work runs slower after
numpy-heavy feedback code, whose caches it has to win back); ``x random at 0.5 ms`` is
that excess over a 0.5 ms step.

The targets: the feedback path (``observe``, and what ``next`` adds over random's)
at most 0.05 ms a step, so that a 0.5 ms step with loss-rank or AutoSelector is <= 1.10x
random's; after AutoSelector's fallback its step costs <= 1.01x random's.

Run: ``python benchmarks/bench_short_step.py`` (``--quick``: 3 rounds of 2 epochs;
``--profile``: also cProfile the sampler alone, fed constant losses, and print where its
time goes per step). Writes ``benchmarks/results/speed/bench_short_step.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

import batchsel
from batchsel import AutoSelector, LossRankSelector, RandomSelector, SelectionBatchSampler
from batchsel.core.io import atomic_write

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_quality  # noqa: E402  (its digits data and digits-mlp task)

METHODS = ("random", "loss-rank", "auto", "random-noisy", "auto-noisy")
NOISE = 0.4  # the share of wrong labels in the ``-noisy`` configurations
TASK = bench_quality.TASKS["digits-mlp"]
# hidden widths: the task's own model, and one with a step about twice as long
MODELS = {"digits-mlp": (64,), "digits-mlp-256x2": (256, 256)}
RESULTS = Path(__file__).parent / "results" / "speed" / "bench_short_step"
TARGET_MS = 0.05  # the feedback path's budget per step
TARGET_RATIO = 1.10
TARGET_FALLEN_RATIO = 1.01  # AutoSelector after its fallback, against random on the same labels
MAX_WARMUP_EPOCHS = 30


def load() -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """The digits training split: inputs, labels (tensors) and the labels as numpy."""
    train = bench_quality.load_dataset(TASK.dataset).train
    return torch.from_numpy(train.x), torch.from_numpy(train.y), train.y


def with_wrong_labels(data: tuple, share: float = NOISE, seed: int = 0) -> tuple:
    """``data`` with ``share`` of its labels replaced by another class, drawn uniformly."""
    labels = data[2].copy()
    rng = np.random.default_rng(seed)
    wrong = rng.random(len(labels)) < share
    classes = int(labels.max()) + 1
    labels[wrong] = (labels[wrong] + rng.integers(1, classes, int(wrong.sum()))) % classes
    return data[0], torch.from_numpy(labels), labels


def anchor_of(method: str) -> str:
    """The random configuration a method is compared with: the one on the same labels."""
    return "random-noisy" if method.endswith("-noisy") else "random"


def make_sampler(method: str, labels: np.ndarray, batch: int) -> SelectionBatchSampler:
    """The method's selector at its defaults, seed 0, in a one-rank sampler."""
    n = len(labels)
    method = method.removesuffix("-noisy")
    if method == "random":
        selector: batchsel.Selector = RandomSelector(n, batch, seed=0)
    elif method == "loss-rank":
        selector = LossRankSelector(n, batch, seed=0)
    elif method == "auto":
        selector = AutoSelector(n, batch, labels=labels, seed=0)
    else:
        raise ValueError(f"unknown method {method!r}; choose from {METHODS}")
    return SelectionBatchSampler(selector, rank=0, world_size=1)


def make_config(method: str, data: tuple, model_name: str = "digits-mlp") -> dict[str, Any]:
    """A sampler, a model (seed 0) and its optimizer for one configuration."""
    torch.manual_seed(0)
    model = bench_quality.mlp(*MODELS[model_name])(data[0].shape[1], int(data[2].max()) + 1)
    return dict(
        sampler=make_sampler(method, data[2], TASK.batch_size), model=model, opt=TASK.optimizer(model.parameters())
    )


def run_epochs(cfg: dict[str, Any], data: tuple, first: int, epochs: int) -> dict[str, float]:
    """``epochs`` epochs of the README's loop from epoch ``first``; seconds and steps."""
    sampler, model, opt = cfg["sampler"], cfg["model"], cfg["opt"]
    x, y = data[0], data[1]
    clock = time.perf_counter
    nxt = obs = 0.0
    steps = 0
    start = clock()
    for epoch in range(first, first + epochs):
        sampler.set_epoch(epoch)
        it = iter(sampler)
        while True:
            t = clock()
            ib = next(it, None)
            nxt += clock() - t
            if ib is None:
                break
            losses = F.cross_entropy(model(x[ib]), y[ib], reduction="none")
            opt.zero_grad()
            losses.mean().backward()
            opt.step()
            t = clock()
            sampler.observe(ib, losses=losses.detach())
            obs += clock() - t
            steps += 1
    return {"wall": clock() - start, "next": nxt, "observe": obs, "steps": steps}


def warm_up(cfg: dict[str, Any], data: tuple, method: str) -> int:
    """The untimed epochs before the timed ones: one (numba's kernels load, AutoSelector
    leaves its warm-up phase), or for ``auto-noisy`` as many as it takes to fall back to
    random batches; returns their number."""
    selector = cfg["sampler"].selector
    for epoch in range(MAX_WARMUP_EPOCHS):
        run_epochs(cfg, data, epoch, 1)
        if method != "auto-noisy" or selector.mode == "noisy":
            return epoch + 1
    raise RuntimeError(f"AutoSelector did not fall back in {MAX_WARMUP_EPOCHS} epochs at {NOISE:.0%} wrong labels")


def thread_counts(text: str) -> list[int]:
    default = torch.get_num_threads()
    counts = [default if t.strip() == "default" else int(t) for t in text.split(",")]
    return list(dict.fromkeys(counts))


def measure(
    rounds: int, epochs: int, threads: list[int], models: list[str], methods: tuple[str, ...] = METHODS
) -> dict[str, Any]:
    """Every (threads, model, method) configuration in every round, in a fresh order each round."""
    default = torch.get_num_threads()
    clean = load()
    datasets = {m: with_wrong_labels(clean) if m.endswith("-noisy") else clean for m in methods}
    batchsel.warmup(LossRankSelector)
    configs = {(th, name, m): make_config(m, datasets[m], name) for th in threads for name in models for m in methods}
    load_before = os.getloadavg()
    warmup_epochs = {}
    for (th, name, m), cfg in configs.items():  # the warm-up: untimed
        torch.set_num_threads(th)
        warmup_epochs[f"{th}/{name}/{m}"] = warm_up(cfg, datasets[m], m)
    samples: dict[tuple[int, str, str], list[dict[str, float]]] = {key: [] for key in configs}
    loads = []
    order = list(configs)
    for r in range(rounds):
        np.random.default_rng(r).shuffle(order)
        for key in order:
            torch.set_num_threads(key[0])
            first = warmup_epochs[f"{key[0]}/{key[1]}/{key[2]}"] + r * epochs
            samples[key].append(run_epochs(configs[key], datasets[key[2]], first, epochs))
        loads.append(os.getloadavg()[0])
        print(f"round {r + 1}/{rounds} done, load {loads[-1]:.2f}", file=sys.stderr, flush=True)
    torch.set_num_threads(default)
    rows = []
    for (th, name, method), runs in samples.items():
        anchor = samples[(th, name, anchor_of(method))] if anchor_of(method) in methods else runs
        per = lambda field, rs=runs: 1e3 * statistics.median(s[field] / s["steps"] for s in rs)  # noqa: E731
        rows.append(
            dict(
                threads=th,
                model=name,
                method=method,
                steps=runs[0]["steps"],
                ms_per_step=per("wall"),
                ratio=statistics.median(
                    s["wall"] / s["steps"] / (a["wall"] / a["steps"]) for s, a in zip(runs, anchor)
                ),
                extra_ms=1e3
                * statistics.median(s["wall"] / s["steps"] - a["wall"] / a["steps"] for s, a in zip(runs, anchor)),
                next_ms=per("next"),
                observe_ms=per("observe"),
                # the selector's part of next(): what it adds over random's (same round)
                next_over_random_ms=1e3
                * statistics.median((s["next"] / s["steps"]) - (a["next"] / a["steps"]) for s, a in zip(runs, anchor)),
                rest_ms=1e3 * statistics.median((s["wall"] - s["next"] - s["observe"]) / s["steps"] for s in runs),
                mode=getattr(configs[(th, name, method)]["sampler"].selector, "mode", None),
            )
        )
    return {
        "rows": rows,
        "rounds": rounds,
        "epochs_per_round": epochs,
        "default_threads": default,
        "warmup_epochs": warmup_epochs,
        "wrong_labels": NOISE,
        "load_before": [round(v, 2) for v in load_before],
        "load_per_round": [round(v, 2) for v in loads],
        "load_after": [round(v, 2) for v in os.getloadavg()],
        "cpus": os.cpu_count(),
        "n": len(clean[2]),
        "batch_size": TASK.batch_size,
        "torch": torch.__version__,
        "measured": {"date": time.strftime("%Y-%m-%d"), "version": batchsel.__version__},
    }


def table(res: dict[str, Any]) -> str:
    """The results as a Markdown table, one row per (threads, model, method)."""
    lines = [
        "| threads | model | method | ms / step | x random | next ms / step | observe ms / step | next over random ms "
        "| feedback ms / step | rest of step ms | extra ms / step | x random at 0.5 ms | feedback <= 0.05 ms "
        "| x random <= target |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in res["rows"]:
        feedback = r["observe_ms"] + r["next_over_random_ms"]
        target = verdict = at_half = ""
        if not r["method"].startswith("random"):
            target = "met" if feedback <= TARGET_MS else "MISSED"
            goal = TARGET_FALLEN_RATIO if r["method"] == "auto-noisy" else TARGET_RATIO
            verdict = f"{'met' if r['ratio'] <= goal else 'MISSED'} ({goal:.2f})"
            at_half = f"{(0.5 + r['extra_ms']) / 0.5:.3f}"
        lines.append(
            f"| {r['threads']} | {r['model']} | {r['method']} | {r['ms_per_step']:.3f} | {r['ratio']:.3f} "
            f"| {r['next_ms']:.4f} | {r['observe_ms']:.4f} | {r['next_over_random_ms']:+.4f} | {feedback:.4f} "
            f"| {r['rest_ms']:.3f} | {r['extra_ms']:+.4f} | {at_half} | {target} | {verdict} |"
        )
    return "\n".join(lines)


def header(res: dict[str, Any], command: str) -> list[str]:
    return [
        f"# The sampler on a short step: `{command}`",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M')} (batchsel {res['measured']['version']}, torch {res['torch']}), "
        f"digits (N = {res['n']}, B = {res['batch_size']}), {res['rounds']} rounds of {res['epochs_per_round']} "
        f"epochs after a warm-up epoch, medians over rounds; torch default threads {res['default_threads']} on "
        f"{res['cpus']} CPUs; load average before {res['load_before']}, per round {res['load_per_round']}.",
        "",
        *([f"Sources measured: {res['label']}.", ""] if res.get("label") else []),
        "`next` / `observe`: the loop's time inside `next(sampler)` and `sampler.observe(...)` per step; "
        "`next over random`: the first less random's in the same round; `feedback`: `observe` plus `next over "
        "random`, the budget of 0.05 ms; `rest of step`: the wall less both (forward, backward, the "
        "optimizer, indexing); `x random`: wall per step over random's (same threads, same round); `extra`: "
        "the wall per step less random's (same round), the sampler's cost to the step included; `x random at "
        "0.5 ms`: `(0.5 + extra) / 0.5`. AutoSelector is past its warm-up (loss-rank batches) in every timed epoch; "
        f"`-noisy`: {res['wrong_labels']:.0%} of the labels wrong, `auto-noisy` timed after its fallback to random "
        "batches (`mode` noisy), against `random-noisy`; its target is 1.01x.",
        "",
    ]


# -- profile ------------------------------------------------------------------------
def profile(method: str, epochs: int = 60, model_name: str = "digits-mlp") -> str:
    """cProfile of ``epochs`` epochs of the training loop (after a warm-up epoch), each
    function's own time per step, for batchsel's functions and what they call directly
    (numpy, numba's dispatchers, builtins); torch's step is left out. cProfile's own cost
    per call is in every figure: small functions read high, compare them with the unprofiled
    ``next`` and ``observe`` printed first."""
    import cProfile
    import pstats

    data = load()
    cfg = make_config(method, data, model_name)
    run_epochs(cfg, data, 0, 1)
    plain = run_epochs(cfg, data, 1, epochs)
    prof = cProfile.Profile()
    prof.enable()
    steps = run_epochs(cfg, data, 1 + epochs, epochs)["steps"]
    prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]

    def ours(file: str) -> bool:
        return f"{os.sep}batchsel{os.sep}" in file

    rows = []
    for (file, line, fn), (_, calls, own, cumulative, callers) in stats.items():
        if ours(file) or any(ours(caller[0]) for caller in callers):
            name = f"{Path(file).parent.name}/{Path(file).name}:{line} {fn}" if line else fn
            rows.append((own, cumulative, calls, name))
    rows.sort(reverse=True)
    per_step = 1e6 / steps
    out = [
        f"### {method}, {model_name}, {torch.get_num_threads()} threads: unprofiled next "
        f"{1e6 * plain['next'] / plain['steps']:.1f} us and observe "
        f"{1e6 * plain['observe'] / plain['steps']:.1f} us per step; cProfile",
        "",
        "| function | calls / step | own us / step | cumulative us / step |",
        "| --- | --- | --- | --- |",
    ]
    for own, cumulative, calls, name in rows[:30]:
        out.append(f"| `{name}` | {calls / steps:.2f} | {per_step * own:.2f} | {per_step * cumulative:.2f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the benchmark; returns the results written to ``--out``'s JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 rounds of 2 epochs (tests)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--epochs", type=int, default=10, help="epochs per round (34 steps each)")
    ap.add_argument("--threads", default="default,1", help="torch thread counts, e.g. 'default,1' or '1'")
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated subset of {', '.join(MODELS)}")
    ap.add_argument("--profile", action="store_true", help="also cProfile the loop with loss-rank and auto (1 thread)")
    ap.add_argument("--out", default=str(RESULTS), help=f"results stem, .md and .json (default {RESULTS})")
    ap.add_argument("--label", default="", help="what was measured (e.g. the sources before a change), in the results")
    args = ap.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        raise ValueError(f"unknown models {unknown}; choose from {list(MODELS)}")
    rounds, epochs = (3, 2) if args.quick else (args.rounds, args.epochs)
    command = "python benchmarks/bench_short_step.py " + " ".join(argv if argv is not None else sys.argv[1:])
    res = measure(rounds, epochs, thread_counts(args.threads), models)
    res["label"] = args.label
    text = table(res)
    sections = header(res, command.strip()) + [text]
    print(f"load average before {res['load_before']}, after {res['load_after']}")
    print(text)
    if args.profile:
        default = torch.get_num_threads()
        torch.set_num_threads(1)
        for method in ("loss-rank", "auto"):
            prof = profile(method, epochs=4 if args.quick else 30, model_name=models[0])
            res.setdefault("profile", {})[method] = prof
            sections += ["", prof]
            print("\n" + prof)
        torch.set_num_threads(default)
        res["load_after"] = [round(v, 2) for v in os.getloadavg()]
    sections += ["", f"Load average after: {res['load_after']}."]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(str(out) + ".md", "w") as f:
        f.write("\n".join(sections) + "\n")
    with atomic_write(str(out) + ".json", "w") as f:
        json.dump(res, f, indent=1)
    return res


if __name__ == "__main__":
    main()
