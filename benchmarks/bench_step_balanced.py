"""Step-balanced micro-batches against the peers, at plan level: how much of the
ranks' time is useful work, and how random is each optimizer step?

No training: every method's plan for the same lengths is made and measured under one cost
model. Methods (seed 0 for all; ``B`` examples per rank and step, the global batch
``world_size x B``):

- ``random``: ``RandomSelector(N, B)`` (torch's ``DistributedSampler`` + ``BatchSampler``),
  the anchor;
- ``grouped-random``: ``CostGroupedSelector(RandomSelector(N, B), lengths, window=2)``;
- ``buckets``: ``BucketSelector(lengths, batch_size=B)`` at its defaults (``bucket_width=1.5``,
  a budget of padded tokens whatever the cost model; each step one length range);
  ``buckets-model``: the same with ``cost_model=<the evaluated model>`` (each step's batches
  dealt to the ranks by the model's cost);
- ``step-balanced xA``: ``StepBalancedSelector(RandomSelector(N, B), lengths,
  accumulation=A, cost_model=<the evaluated model>)``, A = 1, 2, 4 micro-batches per rank;
- ``hf-length-grouped``: transformers' ``DistributedLengthGroupedSampler(B, lengths=...,
  num_replicas=world_size, rank=r)`` on each rank, cut into batches of B;
- ``hf-rebalance xA``: transformers' ``BatchRebalanceSampler(lengths, effective_batch_size=
  world_size x B, dp_size=world_size, grad_accum=A, seed=0, drop_last=False)``, balancing by
  its own fixed cost ``bs*Lmax + 0.001*bs*Lmax^2`` (as shipped); ``hf-rebalance-matched xA``:
  the same with ``QUADRATIC_COST_COEF`` set to the evaluated model's
  ``per_token_squared / per_token`` (what it would do told our cost). Every rank runs the same
  algorithm and keeps its own share, so one pass gives all ranks (a subclass yields
  ``_assign``'s every-rank split instead of rank r's); the first two world sizes are checked
  against each rank's own sampler;
- ``lhotse``: ``DynamicBucketingSampler`` over dummy cuts whose duration is the length
  (``max_duration = B x`` the mean example cost, ``quadratic_duration = per_token /
  per_token_squared`` under a quadratic model, else none; ``shuffle=True``, 10 buckets,
  ``sync_buckets`` on, ``drop_last=False``); ``lhotse-eqsteps``: ``max_duration`` rescaled
  (at most 4 times) until its steps per epoch are within 2 % of random's. lhotse draws every
  rank's batch of a step on every rank and keeps its own; a subclass records them. Run only
  where ``import lhotse`` works (the folder ``$BATCHSEL_LHOTSE_PATH``, default
  ``/tmp/lhotse_pkgs``, is put on ``sys.path`` when it exists).

Cost models (every method measured under each): padded tokens (``CostModel()``); Hugging
Face's own (``CostModel(per_token=1, per_token_squared=0.001)``, what ``hf-rebalance``
balances by: there ``-matched`` is the same and left out); and a heavier quadratic term
(``CostModel(per_token=1, per_token_squared=1/512)``).

Figures per (cost model, length mix, world size, method), over ``--epochs`` epochs: a rank's
step cost is the sum of its micro-batches' padded costs (``CostModel.batch_cost``);
**efficiency** = the examples' own costs (``CostModel.example_cost``, every trained
occurrence) over ``world_size x`` the sum over steps of the costliest rank's cost (padding and
waiting together); **padding share** = 1 - own costs / the micro-batches' costs; **wait
share** = 1 - the micro-batches' costs / (``world_size x`` the costliest ranks'); **step
imbalance** = the costliest rank's cost over the mean rank's, median and 95th percentile over
steps; **bound** = the efficiency no split of the method's steps can pass (a step's costliest
rank costs at least its longest example alone and the step's own costs over the ranks);
**steps per epoch**; **step randomness** = the mean over steps of the Kolmogorov-Smirnov
distance between the lengths of a step's examples (every rank's) and the whole set's (random
batches: about ``0.87 / sqrt(world_size x B)``); **once**: every example trained exactly once
in every epoch (else the missing and repeated counts).

Run ``python benchmarks/bench_step_balanced.py`` (N = 20480, world sizes 2, 8, 32, 64, 3
epochs; about 2.5 minutes on 2 cores; writes ``benchmarks/results/buckets/bench_step_balanced.
{json,md}``) or ``--quick`` (N = 2048, world sizes 2 and 8, 1 epoch: a smoke run to
``benchmarks/out/bench_step_balanced_quick.*``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import batchsel  # noqa: E402
from batchsel import BucketSelector, CostGroupedSelector, CostModel, RandomSelector, StepBalancedSelector  # noqa: E402
from batchsel.core.io import atomic_write  # noqa: E402

TITLE = "# Step-balanced micro-batches against the peers, plan level: `benchmarks/bench_step_balanced.py`\n"
LHOTSE_PATH = os.environ.get("BATCHSEL_LHOTSE_PATH", "/tmp/lhotse_pkgs")
ACCUMULATIONS = (1, 2, 4)
#: BatchRebalanceSampler.QUADRATIC_COST_COEF in transformers 5.25 (the run records the installed one)
HF_COEF = 0.001
#: cost models evaluated: name -> (model, what it is)
COST_MODELS = {
    "padded-tokens": (CostModel(), "padded tokens, `CostModel()`"),
    "hf-cost": (
        CostModel(per_token=1.0, per_token_squared=HF_COEF),
        "Hugging Face `BatchRebalanceSampler`'s own, `CostModel(per_token=1, per_token_squared=0.001)`",
    ),
    "quadratic": (
        CostModel(per_token=1.0, per_token_squared=1 / 512),
        "padded tokens plus attention's square, `CostModel(per_token=1, per_token_squared=1/512)`",
    ),
}
SEED = 0
# a step of the plan: every rank's micro-batches (index arrays) of that optimizer step
Steps = list[list[list[np.ndarray]]]


def load_avg() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


# -- the lengths -----------------------------------------------------------------------------
def make_mixes(n: int) -> dict[str, tuple[np.ndarray, str]]:
    """The length mixes: name -> (lengths, description)."""
    rng = np.random.default_rng(0)
    lognormal = np.clip(rng.lognormal(5.0, 0.8, n).round(), 1, None)
    rng = np.random.default_rng(1)
    long = rng.random(n) < 0.3
    bimodal = np.where(long, rng.lognormal(6.0, 0.25, n), rng.lognormal(3.4, 0.4, n))
    bimodal = np.clip(bimodal.round(), 1, None)
    return {
        "lognormal": (lognormal, "lognormal(mean=5, sigma=0.8) rounded, >= 1"),
        "bimodal": (bimodal, "70 % lognormal(3.4, 0.4) and 30 % lognormal(6.0, 0.25), rounded, >= 1"),
    }


# -- the methods' plans ------------------------------------------------------------------------
@dataclass
class Setting:
    lengths: np.ndarray
    world_size: int
    batch_size: int
    model: CostModel
    epochs: int
    #: lhotse-eqsteps' max_duration, once found
    lhotse_eqsteps_budget: float | None = None


def selector_steps(selector: Any, epoch: int, world_size: int, per_step: int = 1) -> Steps:
    """A batchsel plan as steps: rank r's micro-batches ``t*per_step .. (t+1)*per_step``."""
    plan = selector.plan(epoch, world_size)
    batches = [plan.batches(r) for r in range(world_size)]
    count = max(len(b) for b in batches)
    return [
        [list(batches[r][t * per_step : (t + 1) * per_step]) for r in range(world_size)]
        for t in range(-(-count // per_step))
    ]


def random_plan(s: Setting, epoch: int) -> Steps:
    return selector_steps(RandomSelector(len(s.lengths), s.batch_size, seed=SEED), epoch, s.world_size)


def grouped_plan(s: Setting, epoch: int) -> Steps:
    sel = CostGroupedSelector(RandomSelector(len(s.lengths), s.batch_size, seed=SEED), s.lengths, window=2)
    return selector_steps(sel, epoch, s.world_size)


def buckets_plan(s: Setting, epoch: int) -> Steps:
    return selector_steps(BucketSelector(s.lengths, batch_size=s.batch_size, seed=SEED), epoch, s.world_size)


def buckets_model_plan(s: Setting, epoch: int) -> Steps:
    sel = BucketSelector(s.lengths, batch_size=s.batch_size, cost_model=s.model, seed=SEED)
    return selector_steps(sel, epoch, s.world_size)


def step_balanced_plan(accumulation: int) -> Callable[[Setting, int], Steps]:
    def make(s: Setting, epoch: int) -> Steps:
        sel = StepBalancedSelector(
            RandomSelector(len(s.lengths), s.batch_size, seed=SEED),
            s.lengths,
            accumulation=accumulation,
            cost_model=s.model,
        )
        return selector_steps(sel, epoch, s.world_size, per_step=accumulation)

    return make


def chunks(indices: list[int], size: int) -> list[np.ndarray]:
    return [np.asarray(indices[i : i + size], dtype=np.int64) for i in range(0, len(indices), size)]


def hf_length_grouped_plan(s: Setting, epoch: int) -> Steps:
    from transformers.trainer_pt_utils import DistributedLengthGroupedSampler

    lengths = s.lengths.astype(int).tolist()
    per_rank = []
    for r in range(s.world_size):
        sampler = DistributedLengthGroupedSampler(
            s.batch_size, num_replicas=s.world_size, rank=r, seed=SEED, lengths=lengths
        )
        sampler.set_epoch(epoch)
        per_rank.append(chunks(list(sampler), s.batch_size))
    return [[[per_rank[r][t]] for r in range(s.world_size)] for t in range(len(per_rank[0]))]


def hf_rebalance_sampler(s: Setting, accumulation: int, coef: float | None, rank: int = 0, every_rank: bool = True):
    from transformers.trainer_pt_utils import BatchRebalanceSampler

    attrs: dict[str, Any] = {}
    if coef is not None:
        attrs["QUADRATIC_COST_COEF"] = coef
    if every_rank:
        # every rank runs the same split and yields its share; one pass yields all shares
        attrs["_yield_global_batch"] = lambda self, idx: iter([self._assign(idx, [self.lengths[i] for i in idx])])
    cls = type("BenchRebalance", (BatchRebalanceSampler,), attrs)
    sampler = cls(
        s.lengths.astype(int).tolist(),
        effective_batch_size=s.world_size * s.batch_size,
        dp_size=s.world_size,
        grad_accum=accumulation,
        seed=SEED,
        rank=rank,
        drop_last=False,
    )
    return sampler


def hf_rebalance_plan(accumulation: int, matched: bool) -> Callable[[Setting, int], Steps]:
    def make(s: Setting, epoch: int) -> Steps:
        coef = s.model.per_token_squared / s.model.per_token if matched else None
        sampler = hf_rebalance_sampler(s, accumulation, coef)
        sampler.set_epoch(epoch)
        return [[[np.asarray(mb, dtype=np.int64) for mb in rank] for rank in step] for step in sampler]

    return make


def lhotse_available() -> bool:
    if os.path.isdir(LHOTSE_PATH) and LHOTSE_PATH not in sys.path:
        sys.path.insert(0, LHOTSE_PATH)
    try:
        import lhotse  # noqa: F401
        from lhotse.dataset.sampling import DynamicBucketingSampler  # noqa: F401
    except Exception:  # noqa: BLE001 - any failure to import means: skip it
        return False
    return True


_CUTS: dict[int, Any] = {}


def lhotse_cuts(lengths: np.ndarray) -> Any:
    from lhotse import CutSet
    from lhotse.testing.dummies import dummy_cut

    key = id(lengths)
    if key not in _CUTS:
        _CUTS[key] = CutSet.from_cuts(dummy_cut(i, duration=float(v)) for i, v in enumerate(lengths))
    return _CUTS[key]


def cut_index(cut_id: str) -> int:
    # dummy-mono-cut-0042, or dummy-mono-cut-0042_dup0 for lhotse's tail repeats
    return int(cut_id.split("-")[3].split("_")[0])


def lhotse_sampler(s: Setting, max_duration: float, rank: int = 0, record: bool = True) -> Any:
    from lhotse.dataset.sampling import DynamicBucketingSampler

    class Recording(DynamicBucketingSampler):
        def _next_batch(self):  # type: ignore[no-untyped-def]
            batch = super()._next_batch()
            self.drawn.append(batch)
            return batch

    quadratic = s.model.per_token / s.model.per_token_squared if s.model.per_token_squared > 0 else None
    cls = Recording if record else DynamicBucketingSampler
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an eager CutSet: lhotse warns it is not lazy
        return cls(
            lhotse_cuts(s.lengths),
            max_duration=max_duration,
            quadratic_duration=quadratic,
            shuffle=True,
            seed=SEED,
            world_size=s.world_size,
            rank=rank,
            drop_last=False,
        )


def lhotse_steps(s: Setting, epoch: int, max_duration: float) -> Steps:
    from lhotse.dataset.sampling.base import combine, mark_as_duplicate

    sampler = lhotse_sampler(s, max_duration)
    sampler.set_epoch(epoch)
    sampler.drawn = []
    steps: Steps = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for mine in sampler:
            drawn, sampler.drawn = sampler.drawn, []
            if len(drawn) != s.world_size:  # the end of the data: lhotse's own redistribution
                together = combine(drawn)
                chunk = 0
                while (diff := s.world_size - len(together)) > 0:
                    together = together + together.subset(first=diff).modify_ids(mark_as_duplicate(chunk))
                    chunk += 1
                drawn = together.split(s.world_size)
            ranks = [[np.array([cut_index(c.id) for c in b], dtype=np.int64)] for b in drawn]
            if [c.id for c in mine] != [c.id for c in drawn[0]]:
                raise RuntimeError("the recorded lhotse batches are not those rank 0 received")
            steps.append(ranks)
    return steps


def lhotse_budget(s: Setting) -> float:
    """``B x`` the mean example cost, in lhotse's durations (``example_cost / per_token``)."""
    return s.batch_size * float(s.model.example_cost(s.lengths).mean()) / s.model.per_token


def lhotse_plan(s: Setting, epoch: int) -> Steps:
    return lhotse_steps(s, epoch, lhotse_budget(s))


def lhotse_eqsteps_plan(s: Setting, epoch: int) -> Steps:
    if s.lhotse_eqsteps_budget is None:
        target = len(random_plan(s, 0))
        budget = lhotse_budget(s)
        for _ in range(4):
            steps = len(lhotse_steps(s, 0, budget))
            if abs(steps / target - 1) <= 0.02:
                break
            budget *= steps / target
        s.lhotse_eqsteps_budget = budget
    return lhotse_steps(s, epoch, s.lhotse_eqsteps_budget)


def methods(with_lhotse: bool, hf_matched: bool) -> dict[str, tuple[Callable[[Setting, int], Steps], bool]]:
    """name -> (plan maker, whether its plan depends on the cost model)."""
    out: dict[str, tuple[Callable[[Setting, int], Steps], bool]] = {
        "random": (random_plan, False),
        "grouped-random": (grouped_plan, False),
        "buckets": (buckets_plan, False),
        "buckets-model": (buckets_model_plan, True),
        "hf-length-grouped": (hf_length_grouped_plan, False),
    }
    if with_lhotse:
        out["lhotse"] = (lhotse_plan, True)
        out["lhotse-eqsteps"] = (lhotse_eqsteps_plan, True)
    for a in ACCUMULATIONS:
        out[f"hf-rebalance x{a}"] = (hf_rebalance_plan(a, matched=False), False)
        if hf_matched:
            out[f"hf-rebalance-matched x{a}"] = (hf_rebalance_plan(a, matched=True), True)
        out[f"step-balanced x{a}"] = (step_balanced_plan(a), True)
    return out


# -- the figures ------------------------------------------------------------------------------
def ks_distance(step_lengths: np.ndarray, sorted_all: np.ndarray, points: np.ndarray, cdf_all: np.ndarray) -> float:
    """Kolmogorov-Smirnov distance of a step's lengths from the whole set's (both step
    functions jump only at the set's values, ``points``)."""
    mine = np.searchsorted(np.sort(step_lengths), points, side="right") / len(step_lengths)
    return float(np.abs(mine - cdf_all).max())


def measure(epochs: list[Steps], lengths: np.ndarray, model: CostModel, world_size: int) -> dict[str, Any]:
    sorted_all = np.sort(lengths)
    points = np.unique(sorted_all)
    cdf_all = np.searchsorted(sorted_all, points, side="right") / len(lengths)
    useful = padded = held = bound = 0.0
    imbalance, ks, steps, missing, repeated, micro, sizes = [], [], [], [], [], [], []
    for plan in epochs:
        counts = np.zeros(len(lengths), dtype=np.int64)
        steps.append(len(plan))
        for step in plan:
            rank_cost = np.zeros(world_size)
            for r, batches in enumerate(step):
                for b in batches:
                    if len(b) == 0:
                        continue
                    own = lengths[b]
                    rank_cost[r] += model.batch_cost(len(b), float(own.max()))
                    useful += float(model.example_cost(own).sum())
                    np.add.at(counts, b, 1)
                    micro.append(len(b))
            members = np.concatenate([b for batches in step for b in batches])
            sizes.append(len(members))
            # no split does better: the longest example trains whole on one rank, the rest spreads
            own_step = float(model.example_cost(lengths[members]).sum())
            bound += world_size * max(model.batch_cost(1, float(lengths[members].max())), own_step / world_size)
            padded += rank_cost.sum()
            held += world_size * rank_cost.max()
            imbalance.append(rank_cost.max() / rank_cost.mean())
            ks.append(ks_distance(lengths[members], sorted_all, points, cdf_all))
        missing.append(int((counts == 0).sum()))
        repeated.append(int((counts - 1).clip(0).sum()))
    return {
        "efficiency": useful / held,
        "efficiency_bound": useful / bound,
        "padding_share": 1 - useful / padded,
        "wait_share": 1 - padded / held,
        "imbalance_median": float(np.median(imbalance)),
        "imbalance_p95": float(np.percentile(imbalance, 95)),
        "steps_per_epoch": float(np.mean(steps)),
        "steps_each_epoch": steps,
        "examples_per_step": float(np.mean(sizes)),
        "micro_batch_size_median": float(np.median(micro)),
        "micro_batch_size_range": [int(min(micro)), int(max(micro))],
        "step_ks": float(np.mean(ks)),
        "once": all(m == 0 for m in missing) and all(r == 0 for r in repeated),
        "missing": missing,
        "repeated": repeated,
    }


# -- the capture checks ----------------------------------------------------------------------
def check_captures(s: Setting, with_lhotse: bool) -> dict[str, bool]:
    """The every-rank passes (HF's rebalance, lhotse) against each rank's own sampler."""
    out = {}
    epoch = 1
    for a in (1, 4):
        got = hf_rebalance_plan(a, matched=False)(s, epoch)
        same = True
        for r in range(s.world_size):
            own = hf_rebalance_sampler(s, a, None, rank=r, every_rank=False)
            own.set_epoch(epoch)
            stream = [list(mb) for mb in own]
            mine = [list(map(int, mb)) for step in got for mb in step[r]]
            same &= stream == mine
        out[f"hf-rebalance x{a}"] = bool(same)
    if with_lhotse:
        budget = lhotse_budget(s)
        got = lhotse_steps(s, epoch, budget)
        same = True
        for r in range(s.world_size):
            own = lhotse_sampler(s, budget, rank=r, record=False)
            own.set_epoch(epoch)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                stream = [[cut_index(c.id) for c in b] for b in own]
            same &= stream == [step[r][0].tolist() for step in got]
        out["lhotse"] = bool(same)
    return out


# -- the report --------------------------------------------------------------------------------
def pct(v: float) -> str:
    return f"{100 * v:.1f}"


def once_cell(m: dict) -> str:
    if m["once"]:
        return "yes"
    return f"no ({max(m['missing'])} missing, {max(m['repeated'])} repeated)"


def summary_table(payload: dict, model_name: str) -> list[str]:
    res = payload["results"][model_name]
    mixes = list(res)
    sizes = {mix: list(res[mix]) for mix in mixes}
    names: list[str] = []
    for mix in mixes:
        for ws in sizes[mix]:
            names += [n for n in res[mix][ws] if n not in names]
    head = "| method | " + " | ".join(f"{mix} {ws} ranks" for mix in mixes for ws in sizes[mix]) + " |"
    lines = [head, "|" + " --- |" * (1 + sum(len(v) for v in sizes.values()))]
    for name in names:
        cells = []
        for mix in mixes:
            for ws in sizes[mix]:
                m = res[mix][ws].get(name)
                if m is None:
                    cells.append("-")
                    continue
                base = res[mix][ws]["random"]
                cells.append(f"{pct(m['efficiency'])} ({m['efficiency'] / base['efficiency']:.1f}x)")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def detail_table(res: dict) -> list[str]:
    lines = [
        "| ranks | method | efficiency % (x random) | bound % | padding % | wait % | step imbalance median / p95 | "
        "steps / epoch (x random) | examples / step | micro-batch size median [min, max] | step KS "
        "(random's) | every example once |",
        "|" + " --- |" * 12,
    ]
    for ws, by_method in res.items():
        base = by_method["random"]
        for name, m in by_method.items():
            lines.append(
                f"| {ws} | {name} | {pct(m['efficiency'])} ({m['efficiency'] / base['efficiency']:.2f}) "
                f"| {pct(m['efficiency_bound'])} "
                f"| {pct(m['padding_share'])} | {pct(m['wait_share'])} "
                f"| {m['imbalance_median']:.3f} / {m['imbalance_p95']:.3f} "
                f"| {m['steps_per_epoch']:.1f} ({m['steps_per_epoch'] / base['steps_per_epoch']:.2f}) "
                f"| {m['examples_per_step']:.0f} | {m['micro_batch_size_median']:.0f} {m['micro_batch_size_range']} "
                f"| {m['step_ks']:.3f} ({base['step_ks']:.3f}) | {once_cell(m)} |"
            )
    return lines


def done_when(payload: dict) -> list[str]:
    """The plan-level targets at 8 ranks, mix by mix (the cost model of each table)."""
    lines = []
    for model_name, by_mix in payload["results"].items():
        for mix, by_ws in by_mix.items():
            r = by_ws.get("8")
            if r is None or "step-balanced x4" not in r:
                continue
            sb4, sb1, base = r["step-balanced x4"], r["step-balanced x1"], r["random"]
            checks = [
                f"step-balanced x4 efficiency {pct(sb4['efficiency'])} % (>= 90: {sb4['efficiency'] >= 0.9})",
                f"its step KS {sb4['step_ks']:.3f} vs random's {base['step_ks']:.3f} "
                f"(within 0.02: {abs(sb4['step_ks'] - base['step_ks']) <= 0.02})",
                f"x1 {pct(sb1['efficiency'])} % vs hf-rebalance x1 {pct(r['hf-rebalance x1']['efficiency'])} % "
                f"(beats: {sb1['efficiency'] > r['hf-rebalance x1']['efficiency']})",
            ]
            if "lhotse" in r:
                checks.append(
                    f"buckets {pct(r['buckets']['efficiency'])} % at {r['buckets']['steps_per_epoch']:.0f} steps vs "
                    f"lhotse {pct(r['lhotse']['efficiency'])} % at {r['lhotse']['steps_per_epoch']:.0f} and "
                    f"lhotse-eqsteps {pct(r['lhotse-eqsteps']['efficiency'])} % at "
                    f"{r['lhotse-eqsteps']['steps_per_epoch']:.0f} (random: {base['steps_per_epoch']:.0f})"
                )
            modes = [n for n in r if n.startswith("step-balanced") or n == "buckets"]
            bad = [
                f"{n} {r[n]['imbalance_median']:.3f} / {r[n]['imbalance_p95']:.3f}"
                for n in modes
                if r[n]["imbalance_median"] > 1.05 or r[n]["imbalance_p95"] > 1.15
            ]
            checks.append(
                "median imbalance <= 1.05 and p95 <= 1.15 in every batchsel mode: "
                + ("yes" if not bad else "no: " + ", ".join(bad))
            )
            checks.append("every example once: " + ("yes" if all(r[n]["once"] for n in modes) else "no"))
            lines.append(f"- {model_name}, {mix}, 8 ranks: " + "; ".join(checks) + ".")
    return lines


def markdown(payload: dict) -> str:
    s, meas = payload["settings"], payload["measured"]
    lhotse = f"lhotse {meas['lhotse']}" if meas.get("lhotse") else "lhotse not importable: its rows are absent"
    out = [
        TITLE,
        f"Measured {meas['date']} (batchsel {meas['version']}, torch {meas['torch']}, transformers "
        f"{meas['transformers']}, {lhotse}); load average before the start {s['load_start']}, at the end "
        f"{s['load_end']}; {s['seconds']:.0f} s in all. Command: `{s['command']}`.\n",
        f"N = {s['n']} examples, B = {s['batch_size']} per rank and step (global batch world_size x B), "
        f"{s['epochs']} epoch(s) of seed {SEED}, world sizes {s['world_sizes']}"
        + (f" (skipped, fewer than 2 steps an epoch: {s['skipped']})" if s["skipped"] else "")
        + ". Mixes: "
        + "; ".join(f"{k}: {v}" for k, v in s["mixes"].items())
        + ".\n",
        "Efficiency: the examples' own costs over world_size x the sum over steps of the costliest rank's "
        "cost (a rank's step: its micro-batches' padded costs together), padding and waiting together; "
        "(x random): over random batches' at the same world size. Bound: the most any split of the method's steps "
        "could reach (a step's costliest rank costs at least its longest example alone and the step's own cost "
        "over the ranks; the micro-batches' count per rank left aside). Padding: 1 - own costs / the "
        "micro-batches' costs; wait: the rest. Step imbalance: costliest rank / mean rank. Step KS: the "
        "mean over steps of the Kolmogorov-Smirnov distance between the step's lengths (every rank's) and "
        "the whole set's. Every method is measured under the table's cost model; `hf-rebalance` balances "
        "by its own `bs*Lmax + 0.001*bs*Lmax^2`, `-matched` by the table's; `buckets` budgets padded "
        "tokens; lhotse's `quadratic_duration` is the table's (none for padded tokens).\n",
    ]
    if payload.get("captures_checked"):
        out.append(
            "The every-rank passes equal each rank's own sampler's stream (checked at "
            f"{s['world_sizes'][:2]} ranks, epoch 1): "
            + ", ".join(f"{k}: {v}" for k, v in payload["captures_checked"].items())
            + ".\n"
        )
    if s.get("lhotse_eqsteps_budget"):
        out.append(
            "lhotse-eqsteps' max_duration over lhotse's (B x mean cost): "
            + ", ".join(f"{k}: {v:.2f}" for k, v in s["lhotse_eqsteps_budget"].items())
            + ".\n"
        )
    checks = done_when(payload)
    if checks:
        out += ["### The plan-level targets, at 8 ranks\n", *checks, ""]
    for model_name, by_mix in payload["results"].items():
        out.append(f"### Cost model: {COST_MODELS[model_name][1]}\n")
        out.append("Efficiency % (x random):\n")
        out += summary_table(payload, model_name)
        out.append("")
        for mix, res in by_mix.items():
            out.append(f"#### {model_name}, {mix}\n")
            out += detail_table(res)
            out.append("")
    return "\n".join(out) + "\n"


def write_outputs(stem: Path, payload: dict) -> None:
    stem.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(str(stem) + ".json", "w") as f:
        json.dump(payload, f, default=lambda o: o.item() if isinstance(o, np.generic) else str(o))
    with atomic_write(str(stem) + ".md", "w") as f:
        f.write(markdown(payload))
    print(f"wrote {stem}.json and {stem}.md")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="N = 2048, 2 and 8 ranks, 1 epoch: a smoke run")
    parser.add_argument("--n", type=int, default=None, help="examples (default 20480; --quick: 2048)")
    parser.add_argument("--batch-size", type=int, default=32, help="B, examples per rank and step")
    parser.add_argument("--world-sizes", default=None, help="comma-separated (default 2,8,32,64; --quick: 2,8)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs measured (default 3; --quick: 1)")
    parser.add_argument("--no-lhotse", action="store_true", help="skip lhotse even where it imports")
    parser.add_argument("--no-hf-matched", action="store_true", help="skip hf-rebalance-matched")
    parser.add_argument("--out", default=None, help="output stem")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    n = args.n or (2048 if args.quick else 20480)
    sizes = [int(w) for w in (args.world_sizes or ("2,8" if args.quick else "2,8,32,64")).split(",")]
    epochs = args.epochs or (1 if args.quick else 3)
    with_lhotse = not args.no_lhotse and lhotse_available()
    stem = (
        Path(args.out)
        if args.out
        else (
            ROOT / "benchmarks" / "out" / "bench_step_balanced_quick"
            if args.quick
            else ROOT / "benchmarks" / "results" / "buckets" / "bench_step_balanced"
        )
    )
    import transformers
    from transformers.trainer_pt_utils import BatchRebalanceSampler

    if BatchRebalanceSampler.QUADRATIC_COST_COEF != HF_COEF:
        warnings.warn(
            f"BatchRebalanceSampler.QUADRATIC_COST_COEF is {BatchRebalanceSampler.QUADRATIC_COST_COEF}, not "
            f"{HF_COEF}: the hf-cost model is no longer its own; set HF_COEF",
            stacklevel=1,
        )

    lhotse_version = None
    if with_lhotse:
        import lhotse

        lhotse_version = lhotse.__version__
    mixes = make_mixes(n)
    fitting = [w for w in sizes if n // (w * args.batch_size) >= 2]
    payload: dict[str, Any] = {
        "measured": {
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "version": batchsel.__version__,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "lhotse": lhotse_version,
            "numpy": np.__version__,
            "hf_quadratic_cost_coef": BatchRebalanceSampler.QUADRATIC_COST_COEF,
        },
        "settings": {
            "command": " ".join(
                ["python benchmarks/bench_step_balanced.py", *(sys.argv[1:] if argv is None else argv)]
            ),
            "n": n,
            "batch_size": args.batch_size,
            "epochs": epochs,
            "world_sizes": fitting,
            "skipped": [w for w in sizes if w not in fitting],
            "mixes": {k: v[1] for k, v in mixes.items()},
            "cost_models": {k: str(v[0]) for k, v in COST_MODELS.items()},
            "load_start": load_avg(),
            "lhotse_eqsteps_budget": {},
        },
        "results": {},
    }
    start = time.perf_counter()
    table = methods(with_lhotse, not args.no_hf_matched)
    cache: dict[tuple, list[Steps]] = {}
    plan_seconds: dict[str, float] = {}
    for model_name, (model, _) in COST_MODELS.items():
        payload["results"][model_name] = {}
        for mix, (lengths, _) in mixes.items():
            by_ws: dict[str, dict] = {}
            for ws in fitting:
                setting = Setting(lengths, ws, args.batch_size, model, epochs)
                by_ws[str(ws)] = {}
                for name, (make, model_dependent) in table.items():
                    if name.startswith("hf-rebalance-matched") and model.per_token_squared == HF_COEF * model.per_token:
                        continue  # HF's own cost: the same plans as hf-rebalance
                    key = (name, mix, ws) + ((model_name,) if model_dependent else ())
                    if key not in cache:
                        t0 = time.perf_counter()
                        cache[key] = [make(setting, e) for e in range(epochs)]
                        plan_seconds[" ".join(map(str, key))] = time.perf_counter() - t0
                    by_ws[str(ws)][name] = measure(cache[key], lengths, model, ws)
                if setting.lhotse_eqsteps_budget is not None:
                    ratio = setting.lhotse_eqsteps_budget / lhotse_budget(setting)
                    payload["settings"]["lhotse_eqsteps_budget"][f"{model_name} {mix} {ws}"] = ratio
                print(
                    f"{model_name} {mix} {ws} ranks: "
                    + ", ".join(f"{k} {pct(v['efficiency'])}" for k, v in by_ws[str(ws)].items()),
                    flush=True,
                )
            payload["results"][model_name][mix] = by_ws
    first = mixes["lognormal"][0]
    payload["captures_checked"] = {}
    for ws in fitting[:2]:
        for k, v in check_captures(Setting(first, ws, args.batch_size, CostModel(), 2), with_lhotse).items():
            payload["captures_checked"][f"{k} at {ws}"] = v
    payload["settings"]["plan_seconds"] = plan_seconds
    payload["settings"]["load_end"] = load_avg()
    payload["settings"]["seconds"] = time.perf_counter() - start
    print("\n" + markdown(payload))
    write_outputs(stem, payload)
    return payload


if __name__ == "__main__":
    main()
