"""What resume costs at scale: the sampler's state at 1M and 10M examples.

For each selector kind that selects at that size in seconds (random batches, loss rank,
AutoSelector, InfoBatch, BucketSelector, CostGroupedSelector over random batches) and each
``N``: one rank, ``B = 256``, 20 steps of epoch 0 with per-example losses fed back, then,
medians over ``--repeats``:

- ``state_dict ms``: one ``sampler.state_dict()`` mid-epoch, the whole state (a lone
  checkpoint; the target: <= 50 ms at 1M);
- ``every step ms``: a state taken before each of 320 steps (a batch drawn, its losses fed
  back), as torchdata's ``StatefulDataLoader`` takes one at every batch, each dropped once
  taken: the mean over the last 300 (the median beside it), over a 10 ms step: ``% of 10
  ms step`` (the target: <= 3 %). The first states of a run take the journals' first two
  bases whole, each about a lone ``state_dict``; later bases are the former ones written
  at the positions they lack (every 8 steps or so at B = 256), included in the mean;
- ``MB``: the state's size written by ``torch.save``; ``save s`` / ``torch.load s``:
  writing it to memory and reading it back with ``weights_only=True``;
- ``load s`` and ``first batch s``: ``load_state_dict`` into a fresh sampler, then its
  first batch; ``restore s`` their sum (the target: <= 1 s at 10M);
- ``epoch start s``: the anchor, measured in the same run: the first batch of an epoch
  started without a state (what every epoch costs the selector: a permutation of N, and
  loss rank's sort of its shard), so ``restore / start`` is what a resume costs beyond it;
- ``elastic restore s``: ``load_state_dict`` plus the first batch for an all-ranks state of
  4 ranks (each rank's sampler in this process, 20 steps each) loaded on 3 ranks (rank 0);
- ``epoch 1 restore s``: the restore of a state taken 20 steps into epoch 1 with every
  example's loss known (the rest of epoch 0's fed at once): a preemption past the first
  epoch, where loss rank sorts every loss and InfoBatch prunes;
- ``fresh array s``: writing a fresh array of ``N`` float64 in the same process, the page
  faults any new array of that size costs (on a virtual machine whose memory the host maps
  on first touch, up to ten times a copy's time): the floor under a restore's new arrays.

The selector's own construction and its first plan are not counted (they are the run's,
not the resume's). SMDL, graph blocks and coresets are left out: selecting at 10M takes
minutes of their own, whatever the resume costs.

Run: ``python benchmarks/bench_resume_scale.py`` (``--quick``: 100k and 1M, 1 repeat).
Writes ``benchmarks/results/speed/bench_resume_scale.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

import batchsel
from batchsel import SelectionBatchSampler
from batchsel.core.io import atomic_write

RESULTS = Path(__file__).parent / "results" / "speed" / "bench_resume_scale"
B, STEPS, STEP_MS = 256, 20, 10.0
EVERY_STEP = 320  # steps with a state before each
JOURNAL_WARMUP = 20  # the first states of a run, which take the journals' first two bases whole
TARGETS = {"state_dict_ms_1m": 50.0, "step_share": 0.03, "restore_s_10m": 1.0}


def kinds(n: int) -> dict[str, Callable[[], batchsel.Selector]]:
    lengths = (np.arange(n, dtype=np.int64) * 7919 % 97 + 3).astype(np.int64)
    return {
        "random": lambda: batchsel.RandomSelector(n, B, seed=0),
        "loss-rank": lambda: batchsel.LossRankSelector(n, B, seed=0),
        "auto": lambda: batchsel.AutoSelector(n, B, seed=0),
        "infobatch": lambda: batchsel.InfoBatchSelector(n, B, epochs=3, seed=0),
        "bucket": lambda: batchsel.BucketSelector(lengths, batch_size=B, seed=0),
        "cost-grouped": lambda: batchsel.CostGroupedSelector(batchsel.RandomSelector(n, B, seed=0), lengths),
    }


def new_sampler(selector: batchsel.Selector, rank: int = 0, world_size: int = 1) -> SelectionBatchSampler:
    """A sampler of plain indices (InfoBatch's weights left out knowingly: they cost the
    restore nothing)."""
    weighted = False if selector.capabilities().weighted_plans else None
    return SelectionBatchSampler(selector, rank=rank, world_size=world_size, weighted=weighted)


def trained(make: Callable[[], batchsel.Selector], rank: int = 0, world_size: int = 1) -> SelectionBatchSampler:
    """A sampler ``STEPS`` steps into epoch 0, losses fed back."""
    sampler = new_sampler(make(), rank, world_size)
    sampler.set_epoch(0)
    it = iter(sampler)
    rng = np.random.default_rng(rank)
    for _ in range(STEPS):
        batch = next(it)
        sampler.observe(batch, losses=rng.random(len(batch)))
    return sampler


def later(make: Callable[[], batchsel.Selector], n: int) -> SelectionBatchSampler:
    """A sampler ``STEPS`` steps into epoch 1, every example's loss known: a state of a
    run past its first epoch (InfoBatch prunes epoch 1; loss rank sorts every loss)."""
    sampler = trained(make)
    rng = np.random.default_rng(2)
    if sampler.selector.wants_feedback():
        sampler.selector.observe(np.arange(n), losses=rng.random(n))  # the rest of epoch 0's feedback
    sampler.set_epoch(1)
    it = iter(sampler)
    for _ in range(STEPS):
        batch = next(it)
        sampler.observe(batch, losses=rng.random(len(batch)))
    return sampler


def fresh_array_s(n: int) -> float:
    """Seconds to write a fresh array of ``n`` float64 (its page faults): what any array of
    the size costs a restore the first time, in this process on this machine."""
    start = time.perf_counter()
    np.ones(n)
    return time.perf_counter() - start


def restore(
    make: Callable[[], batchsel.Selector], state: dict, rank: int = 0, world_size: int = 1, epoch: int = 0
) -> tuple[float, float]:
    """Seconds of ``load_state_dict`` and of the first batch after it."""
    sampler = new_sampler(make(), rank, world_size)
    sampler.set_epoch(epoch)
    len(sampler)  # the epoch's length: the run's own planning, not the resume's
    start = time.perf_counter()
    sampler.load_state_dict(state)
    loaded = time.perf_counter()
    next(iter(sampler))
    return loaded - start, time.perf_counter() - loaded


def epoch_start(make: Callable[[], batchsel.Selector]) -> float:
    """Seconds to an epoch's first batch without a state: the anchor."""
    sampler = new_sampler(make())
    sampler.set_epoch(1)
    len(sampler)
    start = time.perf_counter()
    next(iter(sampler))
    return time.perf_counter() - start


def every_step(sampler: SelectionBatchSampler, steps: int) -> list[float]:
    """Seconds of ``state_dict()`` taken before each of ``steps`` more steps (a batch drawn,
    its losses fed back), as torchdata's StatefulDataLoader takes one at every batch."""
    it = iter(sampler)
    rng = np.random.default_rng(1)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        sampler.state_dict()
        times.append(time.perf_counter() - start)
        batch = next(it, None)
        if batch is None:
            break
        sampler.observe(batch, losses=rng.random(len(batch)))
    return times


def measure_kind(name: str, make: Callable[[], batchsel.Selector], n: int, repeats: int) -> dict[str, Any]:
    sampler = trained(make)
    start = time.perf_counter()
    state = sampler.state_dict()  # a lone checkpoint: the whole state
    first_ms = 1e3 * (time.perf_counter() - start)
    times = every_step(trained(make), EVERY_STEP)
    buffer = io.BytesIO()
    start = time.perf_counter()
    torch.save(state, buffer)
    save_s = time.perf_counter() - start
    size = buffer.tell()
    buffer.seek(0)
    start = time.perf_counter()
    loaded = torch.load(buffer, weights_only=True)
    load_s = time.perf_counter() - start
    restores = [restore(make, loaded) for _ in range(repeats)]
    starts = [epoch_start(make) for _ in range(repeats)]
    old = [trained(make, r, 4) for r in range(4)]
    every = {"version": 1, "world_size": 4, "ranks": [s.state_dict() for s in old]}
    del old
    elastic = [sum(restore(make, every, 0, 3)) for _ in range(repeats)]
    del every
    state_later = later(make, n).state_dict()
    restores_later = [sum(restore(make, state_later, epoch=1)) for _ in range(repeats)]
    del state_later
    fresh = [fresh_array_s(n) for _ in range(repeats)]
    times = times[JOURNAL_WARMUP:]  # the run's first states take whole bases (the column before, twice)
    ms = 1e3 * statistics.fmean(times)
    load = statistics.median(r[0] for r in restores)
    first = statistics.median(r[1] for r in restores)
    row = {
        "n": n,
        "method": name,
        "state_dict_ms": first_ms,
        "every_step_ms": ms,
        "every_step_median_ms": 1e3 * statistics.median(times),
        "step_share": ms / STEP_MS,
        "mb": size / 1e6,
        "save_s": save_s,
        "torch_load_s": load_s,
        "load_s": load,
        "first_batch_s": first,
        "restore_s": load + first,
        "epoch_start_s": statistics.median(starts),
        "elastic_restore_s": statistics.median(elastic),
        "later_restore_s": statistics.median(restores_later),
        "fresh_array_s": statistics.median(fresh),
    }
    print(
        f"N={n:>9,} {name:<12} state_dict {first_ms:7.2f} ms, every step {ms:6.3f} ms "
        f"({100 * row['step_share']:5.1f} % of a 10 ms step) "
        f"{row['mb']:7.1f} MB restore {row['restore_s']:.3f} s (epoch start {row['epoch_start_s']:.3f} s) "
        f"elastic {row['elastic_restore_s']:.3f} s, epoch 1 {row['later_restore_s']:.3f} s "
        f"(fresh array {row['fresh_array_s']:.3f} s)",
        file=sys.stderr,
        flush=True,
    )
    return row


def table(res: dict[str, Any]) -> str:
    lines = [
        "| N | method | state_dict ms | every step ms (median) | % of 10 ms step | MB | save s | torch.load s | load s | first batch s "
        "| restore s | epoch start s | restore / start | elastic restore s | epoch 1 restore s | fresh array s "
        "| state_dict <= 50 ms at 1M | <= 3 % of step | restore <= 1 s at 10M |",
        "|" + " --- |" * 19,
    ]
    for r in res["rows"]:
        ok_sd = ("met" if r["state_dict_ms"] <= TARGETS["state_dict_ms_1m"] else "MISSED") if r["n"] == 10**6 else ""
        ok_share = "met" if r["step_share"] <= TARGETS["step_share"] else "MISSED"
        worst = max(r["restore_s"], r["elastic_restore_s"], r["later_restore_s"])
        ok_restore = ("met" if worst <= TARGETS["restore_s_10m"] else "MISSED") if r["n"] == 10**7 else ""
        lines.append(
            f"| {r['n']:,} | {r['method']} | {r['state_dict_ms']:.2f} "
            f"| {r['every_step_ms']:.3f} ({r['every_step_median_ms']:.3f}) | {100 * r['step_share']:.1f} | {r['mb']:.1f} "
            f"| {r['save_s']:.3f} | {r['torch_load_s']:.3f} | {r['load_s']:.3f} | {r['first_batch_s']:.3f} "
            f"| {r['restore_s']:.3f} | {r['epoch_start_s']:.3f} | {r['restore_s'] / max(r['epoch_start_s'], 1e-9):.2f} "
            f"| {r['elastic_restore_s']:.3f} | {r['later_restore_s']:.3f} | {r['fresh_array_s']:.3f} "
            f"| {ok_sd} | {ok_share} | {ok_restore} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100k and 1M examples, 1 repeat")
    ap.add_argument("--sizes", default=None, help="comma-separated N (default 1000000,10000000)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--methods", default=None, help="comma-separated subset of the methods")
    ap.add_argument("--out", default=str(RESULTS), help="results stem, .md and .json")
    args = ap.parse_args(argv)
    sizes = [100_000, 1_000_000] if args.quick else [10**6, 10**7]
    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    repeats = 1 if args.quick else args.repeats
    load_before = os.getloadavg()
    rows = []
    for n in sizes:
        for name, make in kinds(n).items():
            if args.methods and name not in args.methods.split(","):
                continue
            rows.append(measure_kind(name, make, n, repeats))
    res = {
        "rows": rows,
        "batch_size": B,
        "steps": STEPS,
        "repeats": repeats,
        "torch_threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "load_before": [round(v, 2) for v in load_before],
        "load_after": [round(v, 2) for v in os.getloadavg()],
        "torch": torch.__version__,
        "measured": {"date": time.strftime("%Y-%m-%d %H:%M"), "version": batchsel.__version__},
    }
    text = (
        "# Resume at scale: `python benchmarks/bench_resume_scale.py`\n\n"
        f"Measured {res['measured']['date']} (batchsel {batchsel.__version__}, torch {torch.__version__}), one rank, "
        f"B = {B}, {STEPS} steps of epoch 0 with losses fed back, medians of {repeats}; {os.cpu_count()} CPUs, torch "
        f"threads {res['torch_threads']}; load average before {res['load_before']}, after {res['load_after']}.\n\n"
        "`restore s`: `load_state_dict` into a fresh sampler and its first batch; `epoch start s`: an epoch's first "
        "batch without a state (the anchor: every epoch pays it); `elastic restore s`: the restore of every rank's "
        "state of 4 ranks on 3 (rank 0); `epoch 1 restore s`: a state 20 steps into epoch 1, every example's loss "
        "known; `fresh array s`: a new array of N float64 written once (its page faults); `state_dict ms`: one "
        "whole state mid-epoch; `every step ms`: the mean "
        "(median) of a state taken before each of "
        f"{EVERY_STEP} steps, the first {JOURNAL_WARMUP} left out (they take the journals' first two bases whole, each "
        "about a lone `state_dict`), later new bases included. The targets: `state_dict()` <= 50 ms at 1M, a "
        "checkpoint every step <= 3 % of a 10 ms step, restore <= 1 s at 10M (the worst of the three restores).\n\n"
        + table(res)
        + "\n"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(str(out) + ".md", "w") as f:
        f.write(text)
    with atomic_write(str(out) + ".json", "w") as f:
        json.dump(res, f, indent=1)
    print(text)
    return res


if __name__ == "__main__":
    main()
