"""Cost-balanced batches (issue #48): do batches of examples of similar length save wall time
on variable-length tasks, at what cost in accuracy, and how long does a rank wait for another?

Budget-fair protocol (that of ``bench_quality.py``, whose helpers this script imports): every
run's learning rate warms up over its first 5 % of steps and decays (cosine) to zero at its
last step, whatever the method; random batches (``shuffle``) run at the same budgets in the
same process, interleaved with the other methods; seed s of every method shares the initial
weights (the data are made once per task); figures are means over seeds and paired
differences to ``shuffle`` (mean +- standard error over seeds). The learning rate was chosen
on the validation split with random batches (``--tune``: the sweep, in the JSON under
``tune``); the figures are on the test split.

Tasks (synthetic, made here; the step dominates, batches padded to their longest member):

- ``t1-transformer``: token sequences with log-normal lengths (median 40, sigma 0.8, clipped
  to [4, 512]); 4 classes, each with 4 signature tokens that replace a token with
  probability 0.08 (the label is a function of the content; short sequences are ambiguous);
  the class prior shifts with the length (the label correlates with length). A pre-norm
  transformer encoder (2 layers, d=64, 4 heads, learned positions, key padding mask from the
  collate's mask, mean-pooled over real tokens), AdamW;
- ``t2-gru``: sequences with log-normal lengths (median 30, sigma 0.9, clipped to [4, 400])
  over 15 tokens, 3 of them markers (15 % of the positions); the label is the marker drawn
  most often (half the markers are the label's), independent of the length. An embedding,
  a GRU (hidden 64) over the packed sequences, the last hidden state classified, AdamW.

Methods (through batchsel's public API and a ``SelectionBatchSampler``, but for Hugging
Face's sampler), batch size B:

- ``shuffle``: ``RandomSelector(N, B)``; ``shuffle-aa``: the same with another data-order
  seed (the A/A control: the differences chance makes);
- ``hf-length-grouped``: ``transformers.trainer_pt_utils.LengthGroupedSampler`` (megabatches
  of 50 B sorted by length) in a ``BatchSampler`` of B;
- ``buckets``, ``buckets-tight``, ``buckets-wide``: ``BucketSelector(lengths,
  batch_size=B, bucket_width=1.5 | 1.1 | 3.0)`` (a budget of B mean lengths of real tokens);
- ``grouped-loss-rank``, ``grouped-random``: ``CostGroupedSelector(LossRankSelector(N, B) |
  RandomSelector(N, B), lengths)`` at its defaults (``window=2``); ``loss-rank``: the inner
  selector alone, to tell loss-rank's effect from the grouping's;
- ``step-balanced``: ``StepBalancedSelector(RandomSelector(N, B), lengths, accumulation=4)``
  (padded tokens' cost) in a weighted sampler on one process: each optimizer step is random's
  step of the same seed (its B examples), sorted by length and cut into 4 micro-batches of
  nearly equal padded cost; the loop adds the 4 micro-batches' ``selector.weighted_loss``
  gradients (the step's gradient is the B examples' mean) and then steps. Its steps, the
  learning-rate schedule's and the budgets', are optimizer steps: as many an epoch as
  random's.

Budgets: random's full run is ``epochs`` epochs of N / B steps. Every method runs ``epochs``
of its own epochs (``eq``: accuracy at equal epochs, against random's full run); the methods
of ``FULL_METHODS`` also run at fractions (``--budgets``, default 0.5 and 1.0) of random's
full *wall*: seed 0's equal-epoch runs (after an untimed warm-up) measure each method's set-up
seconds and seconds per step, and a budget f is the steps that fill ``f`` of random's wall
(``bench_quality.budget_steps``). Figures per task and method: padding share (padding over
padded tokens, of the batches trained); wall per epoch and its ratio to random's (at the
default threads from the equal-epoch runs; at 1 thread from one epoch of seed 0); the
equal-epoch accuracy difference to random; **wall saved** = 1 minus the wall fraction (of
random's full wall) of the cheapest of the method's runs from which on (it and every dearer
one) the method reaches random's full-run accuracy within 2 standard errors of the paired
difference (0 when only its full-wall run does; "never" when none does; a method run at
equal epochs only: 1 minus that run's wall fraction when it reaches, so the A/A's few per
cent either way are timing noise); the same for random's own 0.5 run tells whether
random's full budget was longer than needed. Note that a bucketed run at random's full
wall trains several times as many epochs: where that overfits, its wall saved is "never"
even if its cheaper runs beat random's at the same wall.

Two ranks: two processes (gloo, 1 thread each) train the task's model with
``SelectionBatchSampler(selector, rank=r, world_size=2)`` (``shuffle``, ``buckets``,
``grouped-random``) and all-reduce the gradients by hand; each step times the compute
(forward and backward) and the all-reduce on each rank. The slower rank enters the
all-reduce last and pays only the transfer (the smaller of the two ranks' all-reduce times);
the faster one waits the rest. Reported: the median over steps of that wait as a share of the
step (the slower rank's compute plus the transfer), and the imbalance ``1 - mean / max`` of
the two ranks' compute per step (the share of the compute capacity that idles). ``--only
ranks`` (``--only one-thread``) measures this part (the 1-thread walls) again into an
existing output.

Timing: the machine is shared; the load average is recorded before every timed run and the
full run waits (up to 15 min) for a 1-min load average below 1.0 before it starts.

Run ``python benchmarks/bench_buckets.py`` (5 seeds: 34 min on 2 idle cores; writes
``benchmarks/results/buckets/bench_buckets.{json,md}``), ``--quick`` (a smoke run of tiny
tasks, < 60 s, to ``benchmarks/out/bench_buckets_quick.*``), ``--tune`` (the learning-rate
sweep on the validation split, into ``bench_buckets_tune.json``), ``--split val``, ``--threads N``
(0: torch's default; ``--quick`` runs 1 thread unless told).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_quality import budget_steps, lr_schedule, mean_se  # noqa: E402

import batchsel  # noqa: E402
from batchsel import SelectionBatchSampler  # noqa: E402
from batchsel.core.io import atomic_write  # noqa: E402
from batchsel.integrations import WeightedDataset  # noqa: E402

FULL_METHODS = (
    "shuffle",
    "hf-length-grouped",
    "buckets",
    "buckets-tight",
    "grouped-loss-rank",
    "buckets-sum",
    "step-balanced",
)
EQ_METHODS = ("shuffle-aa", "buckets-wide", "grouped-random", "loss-rank")
WIDTHS = {"buckets": 1.5, "buckets-tight": 1.1, "buckets-wide": 3.0, "buckets-sum": 1.5}
#: methods whose loss is the batch's sum over B (every example the same weight in the epoch,
#: whatever the size of its batch) instead of the batch's mean
SUM_LOSS = ("buckets-sum",)
GROUPED = ("grouped-loss-rank", "grouped-random")
#: methods whose optimizer step is ACCUMULATION weighted micro-batches (StepBalancedSelector over
#: random batches): the protocol's steps are optimizer steps, as many an epoch as random's
STEP_METHODS = ("step-balanced",)
ACCUMULATION = 4
AA_OFFSET = 1000  # shuffle-aa's data-order seed: seed + AA_OFFSET
#: methods another benchmark adds (bench_stream_batches.py): name -> make(train, batch_size,
#: seed), an object with ``set_epoch``, ``num_batches``, ``online``, ``observe(idx, losses=)``
#: whose iteration yields ``(indices, tokens, mask, labels)`` batches
BATCH_SOURCES: dict[str, Callable[..., Any]] = {}
TITLE = "# Cost-balanced batches (issue #48): `benchmarks/bench_buckets.py`\n"
LOAD_LIMIT = 1.0
ONE_THREAD_SHARE = 1.0  # of an epoch: a bucketed epoch's batches differ in cost, a part of it misleads
LOAD_WAIT = 900.0


# -- data ------------------------------------------------------------------------------
@dataclass
class Seqs:
    tokens: np.ndarray  # int64 (n, longest), 0 past each length
    lengths: np.ndarray  # int64
    y: np.ndarray  # int64


def lognormal_lengths(n: int, rng: np.random.Generator, median: float, sigma: float, lo: int, hi: int) -> np.ndarray:
    return np.clip(np.round(np.exp(rng.normal(np.log(median), sigma, n))), lo, hi).astype(np.int64)


def cut(tokens: np.ndarray, lengths: np.ndarray, y: np.ndarray) -> Seqs:
    tokens = np.where(np.arange(tokens.shape[1])[None, :] < lengths[:, None], tokens, 0)
    return Seqs(tokens[:, : int(lengths.max())].astype(np.int64), lengths, y.astype(np.int64))


def length_topics(n: int, seed: int) -> Seqs:
    """T1: 4 classes of signature tokens, class priors shifting with the length."""
    rng = np.random.default_rng(seed)
    vocab, classes, signal, median, sigma = 64, 4, 0.08, 40, 0.8
    lengths = lognormal_lengths(n, rng, median, sigma, 4, 512)
    z = (np.log(lengths) - np.log(median)) / sigma
    logits = 0.7 * z[:, None] * np.linspace(-1.5, 1.5, classes)[None, :]
    y = np.argmax(logits + rng.gumbel(size=logits.shape), axis=1)
    signature = (np.random.default_rng(12345).permutation(vocab - 1)[: 4 * classes] + 1).reshape(classes, 4)
    tokens = rng.integers(1, vocab, size=(n, int(lengths.max())))
    hit = rng.random(tokens.shape) < signal
    tokens = np.where(hit, signature[y][np.arange(n)[:, None], rng.integers(0, 4, tokens.shape)], tokens)
    return cut(tokens, lengths, y)


def marker_counts(n: int, seed: int) -> Seqs:
    """T2: the label's marker drawn most often among 3 markers, independent of the length."""
    rng = np.random.default_rng(seed)
    lengths = lognormal_lengths(n, rng, 30, 0.9, 4, 400)
    y = rng.integers(0, 3, n)
    shape = (n, int(lengths.max()))
    tokens = rng.integers(4, 16, size=shape)
    own = rng.random(shape) < 0.5
    other = (y[:, None] + rng.integers(1, 3, shape)) % 3
    marker = np.where(own, y[:, None], other) + 1
    tokens = np.where(rng.random(shape) < 0.15, marker, tokens)
    return cut(tokens, lengths, y)


def split_rows(data: Seqs, rows: np.ndarray) -> Seqs:
    lengths = data.lengths[rows]
    return Seqs(data.tokens[rows, : int(lengths.max())], lengths, data.y[rows])


# -- models ----------------------------------------------------------------------------
class Encoder(torch.nn.Module):
    """Pre-norm transformer encoder, key padding mask, mean over real tokens."""

    def __init__(self, vocab: int, classes: int, width: int = 64, layers: int = 2, longest: int = 512) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.position = torch.nn.Parameter(0.02 * torch.randn(longest, width))
        layer = torch.nn.TransformerEncoderLayer(width, 4, 2 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(width, classes)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.embed(tokens) + self.position[: tokens.shape[1]], src_key_padding_mask=~mask)
        m = mask.unsqueeze(-1).to(h.dtype)
        return self.head((h * m).sum(1) / m.sum(1))


class GRUClassifier(torch.nn.Module):
    """Embedding, a GRU over the packed sequences, the last hidden state classified."""

    def __init__(self, vocab: int, classes: int, width: int = 32, hidden: int = 64) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.gru = torch.nn.GRU(width, hidden, batch_first=True)
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        packed = torch.nn.utils.rnn.pack_padded_sequence(
            self.embed(tokens), mask.sum(1), batch_first=True, enforce_sorted=False
        )
        return self.head(self.gru(packed)[1][-1])


@dataclass
class Task:
    name: str
    make: Callable[[int, int], Seqs]
    model: Callable[[], torch.nn.Module]
    lr: float  # AdamW's peak learning rate, chosen on the validation split (--tune)
    sizes: tuple[int, int, int]  # train / val / test
    epochs: int  # random's full run
    batch_size: int = 32
    lrs: tuple[float, ...] = (1e-3, 2e-3, 4e-3)  # --tune's sweep
    data: dict[str, Seqs] = field(default_factory=dict)


def make_tasks(quick: bool) -> dict[str, Task]:
    """The tasks; ``quick``: 5 % of the data, batches of 8, random's full run 1 epoch (a smoke run)."""
    scale, epochs, batch = (0.05, 1, 8) if quick else (1.0, 3, 32)
    sizes = tuple(int(n * scale) for n in (2400, 1000, 2000))
    return {
        # learning rates: the best of the sweep on the validation split (--tune; 4e-3 and 2e-3 tie on t1)
        "t1-transformer": Task("t1-transformer", length_topics, lambda: Encoder(64, 4), 4e-3, sizes, epochs, batch),
        "t2-gru": Task(
            "t2-gru",
            marker_counts,
            lambda: GRUClassifier(16, 3),
            8e-3,
            sizes,
            epochs,
            batch,
            (2e-3, 4e-3, 8e-3, 1.6e-2),
        ),
    }


def load(task: Task) -> dict[str, Seqs]:
    if not task.data:
        tr, va, te = task.sizes
        data = task.make(tr + va + te, 0)
        task.data = {
            "train": split_rows(data, np.arange(tr)),
            "val": split_rows(data, np.arange(tr, tr + va)),
            "test": split_rows(data, np.arange(tr + va, tr + va + te)),
        }
    return task.data


class PadCollate:
    """Indices -> (indices, tokens padded to the batch's longest, mask of real tokens, labels)."""

    def __init__(self, data: Seqs) -> None:
        self.data = data

    def __call__(self, indices: list[int]) -> tuple[np.ndarray, torch.Tensor, torch.Tensor, torch.Tensor]:
        idx = np.asarray(indices, dtype=np.int64)
        lengths = self.data.lengths[idx]
        longest = int(lengths.max())
        tokens = torch.from_numpy(self.data.tokens[idx, :longest])
        mask = torch.arange(longest)[None, :] < torch.from_numpy(lengths)[:, None]
        return idx, tokens, mask, torch.from_numpy(self.data.y[idx])


class WeightedPadCollate(PadCollate):
    """``(index, weight)`` items (``WeightedDataset``) -> PadCollate's batch and the weights."""

    def __call__(self, items: list[Any]) -> Any:
        idx, tokens, mask, y = super().__call__([int(i) for i, _ in items])
        return idx, tokens, mask, y, torch.tensor([float(w) for _, w in items], dtype=torch.float32)


class Indices(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


# -- methods ---------------------------------------------------------------------------
def grouped_available() -> bool:
    return hasattr(batchsel, "CostGroupedSelector")


def make_selector(method: str, lengths: np.ndarray, batch_size: int, seed: int) -> batchsel.Selector:
    n = len(lengths)
    if method in ("shuffle", "shuffle-aa"):
        return batchsel.RandomSelector(n, batch_size, seed=seed + (AA_OFFSET if method == "shuffle-aa" else 0))
    if method in WIDTHS:
        return batchsel.BucketSelector(lengths, batch_size=batch_size, bucket_width=WIDTHS[method], seed=seed)
    if method == "loss-rank":
        return batchsel.LossRankSelector(n, batch_size, seed=seed)
    if method in GROUPED:
        inner = (batchsel.LossRankSelector if method == "grouped-loss-rank" else batchsel.RandomSelector)(
            n, batch_size, seed=seed
        )
        return batchsel.CostGroupedSelector(inner, lengths)
    if method in STEP_METHODS:  # random's steps of the same seed, split
        random = batchsel.RandomSelector(n, batch_size, seed=seed)
        return batchsel.StepBalancedSelector(random, lengths, accumulation=ACCUMULATION)
    raise ValueError(f"unknown method {method!r}")


class HFBatches:
    """Hugging Face's LengthGroupedSampler in a BatchSampler of B, with the sampler's
    ``set_epoch`` / ``num_batches`` shape (its generator reshuffles on every pass)."""

    def __init__(self, lengths: np.ndarray, batch_size: int, seed: int) -> None:
        from transformers.trainer_pt_utils import LengthGroupedSampler

        gen = torch.Generator().manual_seed(seed)
        sampler = LengthGroupedSampler(batch_size, lengths=lengths.tolist(), generator=gen)
        self.batches = torch.utils.data.BatchSampler(sampler, batch_size, drop_last=False)
        self.num_batches = len(self.batches)

    def set_epoch(self, epoch: int) -> None:
        pass

    def __iter__(self) -> Any:
        return iter(self.batches)


def make_batches(method: str, lengths: np.ndarray, batch_size: int, seed: int, rank: int = 0, world: int = 1) -> Any:
    """The DataLoader's batch sampler (with ``num_batches`` per epoch) and the selector (None for HF)."""
    if method == "hf-length-grouped":
        return HFBatches(lengths, batch_size, seed), None
    if method in STEP_METHODS:  # num_batches: micro-batches (ACCUMULATION an optimizer step)
        selector = make_selector(method, lengths, batch_size, seed)
        weighted = SelectionBatchSampler(selector, rank=rank, world_size=world, weighted=True)
        weighted.num_batches = selector.num_batches(world)
        return weighted, selector
    selector = make_selector(method, lengths, batch_size, seed)
    sampler = SelectionBatchSampler(selector, rank=rank, world_size=world)
    sampler.num_batches = selector.num_batches(world)
    return sampler, selector


def steps_per_epoch(method: str, lengths: np.ndarray, batch_size: int) -> int:
    if method in BATCH_SOURCES:
        return -(-len(lengths) // batch_size)
    if method in STEP_METHODS:  # optimizer steps
        return make_batches(method, lengths, batch_size, 0)[0].num_batches // ACCUMULATION
    return make_batches(method, lengths, batch_size, 0)[0].num_batches


# -- one run ---------------------------------------------------------------------------
def accuracy(model: torch.nn.Module, data: Seqs, tokens_per_batch: int = 4096) -> float:
    """Evaluated in batches of similar length (not timed; the same for every method)."""
    order = np.argsort(data.lengths, kind="stable")
    collate, correct, start = PadCollate(data), 0, 0
    model.eval()
    with torch.no_grad():
        while start < len(order):
            # the most examples whose padded size (count x the longest, sorted) fits the budget
            padded = np.arange(1, len(order) - start + 1) * data.lengths[order[start:]]
            size = max(1, int(np.searchsorted(padded, tokens_per_batch, side="right")))
            idx, tokens, mask, y = collate(order[start : start + size].tolist())
            correct += int((model(tokens, mask).argmax(1) == y).sum())
            start += size
    model.train()
    return correct / len(order)


def load_avg() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def train_run(task: Task, method: str, seed: int, steps: int, split: str, lr: float | None = None) -> dict:
    """``steps`` steps of ``method``'s batches, the learning rate decayed over them; the wall
    counts the set-up (sampler, selector), every batch drawn and padded, and every step."""
    if method in STEP_METHODS:
        return accumulated_run(task, method, seed, steps, split, lr)
    data = load(task)
    train = data["train"]
    load_before = load_avg()
    torch.manual_seed(seed)  # the same initial weights for every method of a seed
    model = task.model()
    opt = torch.optim.AdamW(model.parameters(), lr=task.lr if lr is None else lr)
    schedule = lr_schedule(opt, steps)
    t0 = time.perf_counter()
    if method in BATCH_SOURCES:
        sampler = selector = loader = BATCH_SOURCES[method](train, task.batch_size, seed)
    else:
        sampler, selector = make_batches(method, train.lengths, task.batch_size, seed)
        loader = torch.utils.data.DataLoader(Indices(len(train.y)), batch_sampler=sampler, collate_fn=PadCollate(train))
    online = bool(getattr(selector, "online", False))
    setup = time.perf_counter() - t0
    step, epoch, real, padded = 0, 0, 0, 0
    while step < steps:
        sampler.set_epoch(epoch)
        for idx, tokens, mask, y in loader:
            losses = F.cross_entropy(model(tokens, mask), y, reduction="none")
            opt.zero_grad()
            (losses.sum() / task.batch_size if method in SUM_LOSS else losses.mean()).backward()
            opt.step()
            schedule.step()
            if online:
                sampler.observe(idx, losses=losses.detach())
            real += int(mask.sum())
            padded += mask.numel()
            step += 1
            if step == steps:
                break
        epoch += 1
    wall = time.perf_counter() - t0
    return {
        "final": accuracy(model, data[split]),
        "wall_seconds": wall,
        "setup_seconds": setup,
        "steps": step,
        "epochs": step / sampler.num_batches,
        "steps_per_epoch": sampler.num_batches,
        "padding_share": 1.0 - real / padded,
        "load_before": load_before,
    }


def accumulated_run(task: Task, method: str, seed: int, steps: int, split: str, lr: float | None = None) -> dict:
    """``train_run`` for the methods of ``STEP_METHODS``: ``steps`` optimizer steps of
    ``ACCUMULATION`` weighted micro-batches each (the loss the plan's weighted sum, so that a
    step's gradient is its examples' mean), the learning rate decayed over the optimizer steps."""
    data = load(task)
    train = data["train"]
    load_before = load_avg()
    torch.manual_seed(seed)  # the same initial weights for every method of a seed
    model = task.model()
    opt = torch.optim.AdamW(model.parameters(), lr=task.lr if lr is None else lr)
    schedule = lr_schedule(opt, steps)
    t0 = time.perf_counter()
    sampler, selector = make_batches(method, train.lengths, task.batch_size, seed)
    dataset = WeightedDataset(Indices(len(train.y)))
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler, collate_fn=WeightedPadCollate(train))
    per_epoch = sampler.num_batches // ACCUMULATION
    setup = time.perf_counter() - t0
    step, micro, epoch, real, padded = 0, 0, 0, 0, 0
    opt.zero_grad()
    while step < steps:
        sampler.set_epoch(epoch)
        for idx, tokens, mask, y, w in loader:
            losses = F.cross_entropy(model(tokens, mask), y, reduction="none")
            selector.weighted_loss(losses, w).backward()  # the gradients add up over the micro-batches
            real += int(mask.sum())
            padded += mask.numel()
            micro += 1
            if micro % ACCUMULATION:
                continue
            opt.step()
            schedule.step()
            opt.zero_grad()
            step += 1
            if step == steps:
                break
        epoch += 1
    wall = time.perf_counter() - t0
    return {
        "final": accuracy(model, data[split]),
        "wall_seconds": wall,
        "setup_seconds": setup,
        "steps": step,
        "epochs": step / per_epoch,
        "steps_per_epoch": per_epoch,
        "micro_batches_per_step": ACCUMULATION,
        "padding_share": 1.0 - real / padded,
        "load_before": load_before,
    }


def log_run(task: str, method: str, point: str, seed: int, run: dict) -> None:
    print(
        f"  {task:<15} {method:<18} {point:>4} seed {seed}: acc {100 * run['final']:.2f}  "
        f"{run['steps']} steps ({run['epochs']:.2f} ep) {run['wall_seconds']:.1f} s  "
        f"pad {100 * run['padding_share']:.0f} %  load {run['load_before']}",
        flush=True,
    )


# -- the protocol ----------------------------------------------------------------------
def point_key(fraction: float) -> str:
    return f"{fraction:g}"


def run_task(
    task: Task, full: list[str], eq: list[str], budgets: list[float], seeds: int, split: str, first_seed: int = 0
) -> dict:
    """Every run of one task: equal-epoch runs of every method, wall budgets of ``full``'s;
    seed 0's equal-epoch runs calibrate the budgets; methods interleaved within a seed."""
    lengths = load(task)["train"].lengths
    methods = full + [m for m in eq if m not in full]
    per_epoch = {m: steps_per_epoch(m, lengths, task.batch_size) for m in methods}
    eq_steps = {m: task.epochs * per_epoch[m] for m in methods}
    for m in methods:  # untimed: first-use costs (JIT kernels, allocator)
        train_run(task, m, 0, min(5, eq_steps[m]), split)
    runs: dict[str, dict[str, list[dict]]] = {m: {} for m in methods}

    def record(m: str, point: str, seed: int, steps: int) -> None:
        run = train_run(task, m, seed, steps, split)
        runs[m].setdefault(point, []).append(run)
        log_run(task.name, m, point, seed, run)

    for m in methods:
        record(m, "eq", first_seed, eq_steps[m])
    calib = {
        m: {
            "setup_seconds": runs[m]["eq"][0]["setup_seconds"],
            "step_seconds": (runs[m]["eq"][0]["wall_seconds"] - runs[m]["eq"][0]["setup_seconds"]) / eq_steps[m],
        }
        for m in methods
    }
    plan = {
        m: {
            point_key(f): budget_steps({"random": calib["shuffle"], m: calib[m]}, m, eq_steps["shuffle"], f)
            for f in budgets
            if not (m == "shuffle" and f == 1.0)  # random's full run is its equal-epoch run
        }
        for m in full
    }
    plan["shuffle"] = {k: max(1, round(float(k) * eq_steps["shuffle"])) for k in plan["shuffle"]}
    for seed in range(first_seed, first_seed + seeds):
        for f in budgets:
            for m in full:
                if point_key(f) in plan[m]:
                    record(m, point_key(f), seed, plan[m][point_key(f)])
        if seed > first_seed:
            for m in methods:
                record(m, "eq", seed, eq_steps[m])
    return {
        "runs": runs,
        "steps_per_epoch": per_epoch,
        "calibration": calib,
        "budget_steps": plan,
        "summary": summarize(runs, methods),
    }


def summarize(runs: dict[str, dict[str, list[dict]]], methods: list[str]) -> dict:
    """Per method and point (``eq`` and the wall budgets): accuracy, its paired difference to
    random at the same point and to random's full run, the wall fraction; wall saved."""
    anchor = runs["shuffle"]
    anchor = {**anchor, "1": anchor["eq"]}  # random's full-wall run is its equal-epoch run
    full = anchor["eq"]
    target = float(np.mean([r["final"] for r in full]))
    anchor_wall = float(np.mean([r["wall_seconds"] for r in full]))
    anchor_epoch = float(np.mean([r["wall_seconds"] / r["epochs"] for r in full]))
    rows = {}
    for m in methods:
        points = {}
        for key, mine in runs[m].items():
            if m == "shuffle" and key == "eq":
                key = "1"
            finals = [r["final"] for r in mine]
            diff, diff_se = mean_se([a - b["final"] for a, b in zip(finals, anchor[key])])
            gap, gap_se = mean_se([a - b["final"] for a, b in zip(finals, full)])
            points[key] = {
                "final_mean": float(np.mean(finals)),
                "final_per_seed": finals,
                "diff_mean": diff,
                "diff_se": diff_se,
                "gap_mean": gap,
                "gap_se": gap_se,
                "reached": gap + 2 * gap_se >= 0,
                "wall_fraction": float(np.mean([r["wall_seconds"] for r in mine])) / anchor_wall,
                "steps": mine[0]["steps"],
                "epochs": mine[0]["epochs"],
                "seeds": len(mine),
            }
        order = sorted(points, key=lambda k: points[k]["wall_fraction"])
        reached_at = None  # the cheapest point from which on every dearer point reaches the target
        for key in reversed(order):
            if not points[key]["reached"]:
                break
            reached_at = key
        saved = None if reached_at is None else 0.0 if reached_at == "1" else 1.0 - points[reached_at]["wall_fraction"]
        eq_runs = runs[m]["eq"]
        per_epoch = float(np.mean([r["wall_seconds"] / r["epochs"] for r in eq_runs]))
        rows[m] = {
            "points": points,
            "reached_at": reached_at,
            "wall_saved": saved,
            "padding_share": float(np.mean([r["padding_share"] for r in eq_runs])),
            "wall_per_epoch": per_epoch,
            "wall_per_epoch_ratio": per_epoch / anchor_epoch,
            "steps_per_epoch": eq_runs[0]["steps_per_epoch"],
        }
    return {"target": target, "random_wall_seconds": anchor_wall, "rows": rows}


def one_thread_walls(task: Task, methods: list[str], split: str, share: float, least: int) -> dict:
    """Wall per epoch at 1 thread, from a run of ``share`` of an epoch (after 3 untimed steps)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    lengths = load(task)["train"].lengths
    out = {}
    try:
        for m in methods:
            per_epoch = steps_per_epoch(m, lengths, task.batch_size)
            train_run(task, m, 0, 3, split)
            run = train_run(task, m, 0, max(least, round(share * per_epoch)), split)
            step = (run["wall_seconds"] - run["setup_seconds"]) / run["steps"]
            out[m] = {
                "wall_per_epoch": run["setup_seconds"] + step * per_epoch,
                "steps": run["steps"],
                "load_before": run["load_before"],
            }
            print(f"  {task.name:<15} {m:<18} 1 thread: {out[m]['wall_per_epoch']:.1f} s / epoch", flush=True)
    finally:
        torch.set_num_threads(threads)
    for m in methods:
        out[m]["ratio"] = out[m]["wall_per_epoch"] / out["shuffle"]["wall_per_epoch"]
    return out


# -- two ranks -------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_steps(task: Task, method: str, rank: int, steps: int, warm: int) -> dict[str, list[float]]:
    """One rank's loop: compute (forward, backward) and the gradients' all-reduce, timed apart."""
    import torch.distributed as dist

    train = load(task)["train"]
    torch.manual_seed(0)
    model = task.model()
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=task.lr)
    sampler, selector = make_batches(method, train.lengths, task.batch_size, 0, rank, 2)
    loader = torch.utils.data.DataLoader(Indices(len(train.y)), batch_sampler=sampler, collate_fn=PadCollate(train))
    times: dict[str, list[float]] = {"compute": [], "allreduce": [], "padded": []}
    step, epoch = 0, 0
    while step < warm + steps:
        sampler.set_epoch(epoch)
        for idx, tokens, mask, y in loader:
            t0 = time.perf_counter()
            loss = F.cross_entropy(model(tokens, mask), y)
            opt.zero_grad()
            loss.backward()
            t1 = time.perf_counter()
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            dist.all_reduce(flat)
            t2 = time.perf_counter()
            torch.nn.utils.vector_to_parameters(flat / 2, [p.grad for p in params])
            opt.step()
            if step >= warm:
                times["compute"].append(t1 - t0)
                times["allreduce"].append(t2 - t1)
                times["padded"].append(float(mask.numel()))
            step += 1
            if step == warm + steps:
                break
        epoch += 1
    return times


def rank_worker(rank: int, task_name: str, quick: bool, methods: list[str], steps: int, port: int, path: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        task = make_tasks(quick)[task_name]
        mine = {}
        for m in methods:
            dist.barrier()
            mine[m] = rank_steps(task, m, rank, steps, warm=5)
        every = [None, None]
        dist.all_gather_object(every, mine)
        if rank == 0:
            with open(path, "w") as f:
                json.dump(every, f)
    finally:
        dist.destroy_process_group()


def two_ranks(task: Task, quick: bool, methods: list[str], steps: int) -> dict:
    """The wait of a rank for the other per step, from two gloo processes of 1 thread each."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ranks.json")
        load_before = load_avg()
        torch.multiprocessing.spawn(
            rank_worker, args=(task.name, quick, methods, steps, free_port(), path), nprocs=2, join=True
        )
        with open(path) as f:
            every = json.load(f)
    out = {}
    for m in methods:
        compute = np.array([every[r][m]["compute"] for r in range(2)])  # (ranks, steps)
        allreduce = np.array([every[r][m]["allreduce"] for r in range(2)])
        # the slower rank enters the all-reduce last and pays only the transfer (the smaller of
        # the two); the faster one waits the rest: the step lasts the slower rank's compute + transfer
        wait = allreduce.max(0) - allreduce.min(0)
        step = compute.max(0) + allreduce.min(0)
        imbalance = 1.0 - compute.mean(0) / compute.max(0)
        out[m] = {
            "wait_share_median": float(np.median(wait / step)),
            "wait_share_mean": float((wait / step).mean()),
            "wait_ms_median": float(1e3 * np.median(wait)),
            "transfer_ms_median": float(1e3 * np.median(allreduce.min(0))),
            "allreduce_share_median": float(np.median(allreduce / (compute + allreduce))),
            "step_median_ms": float(1e3 * np.median(step)),
            "imbalance_median": float(np.median(imbalance)),
            "imbalance_mean": float(imbalance.mean()),
            "steps": int(compute.shape[1]),
            "load_before": load_before,
            "compute_seconds": np.round(compute, 6).tolist(),
            "allreduce_seconds": np.round(allreduce, 6).tolist(),
        }
        print(
            f"  {task.name:<15} {m:<18} 2 ranks: a rank waits {100 * out[m]['wait_share_median']:.0f} % of the step "
            f"(median; {out[m]['wait_ms_median']:.1f} ms of {out[m]['step_median_ms']:.1f}), compute imbalance "
            f"{100 * out[m]['imbalance_median']:.0f} % (median)",
            flush=True,
        )
    return out


def rank_methods() -> list[str]:
    return ["shuffle", "buckets"] + (["grouped-random"] if grouped_available() else [])


def measure_again(stem: Path, tasks: dict[str, Task], args: argparse.Namespace, steps: int, waited: float) -> dict:
    """``--only``: the two-rank figures or the 1-thread walls measured again into ``stem``'s results."""
    payload = json.loads(Path(str(stem) + ".json").read_text())
    for name, task in tasks.items():
        res = payload["results"].get(name)
        if res is None:
            continue
        if args.only == "ranks":
            res["two_ranks"] = two_ranks(task, args.quick, rank_methods(), steps)
        else:
            methods = payload["settings"]["full_methods"] + payload["settings"]["eq_methods"]
            res["one_thread"] = one_thread_walls(task, methods, args.split, ONE_THREAD_SHARE, 10)
    payload["settings"][f"{args.only}_measured"] = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "load_waited_s": waited,
        "source": source_digest(),
    }
    print_tables(payload)
    write_outputs(stem, payload)
    return payload


# -- tuning ----------------------------------------------------------------------------
def tune(tasks: dict[str, Task], seeds: int) -> dict:
    """Random batches' full run at each learning rate of the task's sweep, on the validation split."""
    out: dict[str, Any] = {}
    for name, task in tasks.items():
        steps = task.epochs * steps_per_epoch("shuffle", load(task)["train"].lengths, task.batch_size)
        train_run(task, "shuffle", 0, 5, "val")
        scores = {}
        for lr in task.lrs:
            finals = [train_run(task, "shuffle", s, steps, "val", lr=lr)["final"] for s in range(seeds)]
            scores[f"{lr:g}"] = {"mean": float(np.mean(finals)), "per_seed": finals}
            print(f"  {name:<15} lr {lr:g}: val accuracy {100 * np.mean(finals):.2f} ({seeds} seeds)", flush=True)
        best = max(scores, key=lambda k: scores[k]["mean"])
        out[name] = {"scores": scores, "best": float(best), "in_use": task.lr, "steps": steps}
        print(f"  {name}: best lr {best} (in use: {task.lr:g})", flush=True)
    return out


# -- output ----------------------------------------------------------------------------
def pct(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{100 * value:.{digits}f}"


def saved_text(row: dict) -> str:
    return "never" if row["wall_saved"] is None else f"{100 * row['wall_saved']:.0f} %"


def point_text(p: dict, signed: bool = True) -> str:
    diff = f" {100 * p['diff_mean']:+.2f}±{100 * p['diff_se']:.2f}" if signed else ""
    return f"{100 * p['final_mean']:.2f}{diff} @{p['wall_fraction']:.2f}"


def task_table(name: str, res: dict, budgets: list[float]) -> str:
    """One task's markdown table: a row per method."""
    summary, one = res["summary"], res.get("one_thread", {})
    keys = [point_key(f) for f in budgets]
    lines = [
        f"### {name}\n",
        f"Random's full run: {res['epochs']} epochs of {summary['rows']['shuffle']['steps_per_epoch']} steps, "
        f"{summary['random_wall_seconds']:.1f} s, test accuracy {100 * summary['target']:.2f} %.\n",
        "| method | padding % | steps / epoch | wall / epoch s (x random) | 1 thread (x random) "
        "| equal epochs: acc %, vs random (pt ± s.e.), wall fraction | "
        + " | ".join(f"wall budget {k}: acc, vs random, wall" for k in keys)
        + " | wall saved |",
        "| --- " * (7 + len(keys)) + "|",
    ]
    for m, row in summary["rows"].items():
        eqp = row["points"].get("eq", row["points"].get("1"))
        thread = f"{one[m]['wall_per_epoch']:.1f} ({one[m]['ratio']:.2f})" if m in one else "-"
        cells = [point_text(row["points"][k], m != "shuffle") if k in row["points"] else "-" for k in keys]
        lines.append(
            f"| {m} | {pct(row['padding_share'])} | {row['steps_per_epoch']} "
            f"| {row['wall_per_epoch']:.2f} ({row['wall_per_epoch_ratio']:.2f}) | {thread} "
            f"| {point_text(eqp, m != 'shuffle')} | " + " | ".join(cells) + f" | {saved_text(row)} |"
        )
    aa = summary["rows"].get("shuffle-aa")
    if aa:
        p = aa["points"]["eq"]
        lines.append(
            f"\nA/A control (random with data-order seed + {AA_OFFSET}, same initial weights): "
            f"{100 * p['diff_mean']:+.2f} ± {100 * p['diff_se']:.2f} pt against random's full run."
        )
    ranks = res.get("two_ranks")
    if ranks:
        lines += [
            "\nTwo ranks (gloo, 1 thread each, {} steps per method after 5 untimed; load before {}):\n".format(
                next(iter(ranks.values()))["steps"], next(iter(ranks.values()))["load_before"]
            ),
            "| method | wait of the faster rank, share of the step (median / mean) | wait ms (median) "
            "| transfer ms (median) | step ms (median) | compute imbalance 1 - mean/max (median) |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for m, r in ranks.items():
            lines.append(
                f"| {m} | {pct(r['wait_share_median'])} % / {pct(r['wait_share_mean'])} % | {r['wait_ms_median']:.1f} "
                f"| {r['transfer_ms_median']:.1f} | {r['step_median_ms']:.1f} | {pct(r['imbalance_median'])} % |"
            )
    return "\n".join(lines) + "\n"


def markdown(payload: dict) -> str:
    s = payload["settings"]
    head = [
        TITLE,
        f"Measured {payload['measured']['date']} (batchsel {payload['measured']['version']}), "
        f"torch threads {s['threads']}, {s['seeds']} seeds, split `{s['split']}`, wall budgets {s['budgets']}; "
        f"load average before the start {s['load_start']} (waited {s['load_waited_s']:.0f} s), "
        f"at the end {s['load_end']}; every run's load in the JSON.\n",
        "Cells: accuracy % on the split, its paired difference to random at the same point "
        "(pt, mean ± s.e. over seeds), and the wall as a fraction of random's full run. "
        "Equal epochs: the method's own epochs, as many as random's full run. "
        "Wall saved: 1 - the wall fraction of the cheapest run from which on the method reaches "
        "random's full-run accuracy within 2 s.e. (0: only its full-wall run does; never: none does; "
        "methods run at equal epochs only: 1 - that run's wall fraction when it reaches, so the A/A's few "
        "per cent either way are timing noise). A bucketed run at random's full wall trains up to 4 times as "
        "many epochs: where that overfits (t1), wall saved is never even if its cheaper runs beat random's "
        "at the same wall. 1 thread: one epoch of seed 0. Two ranks: the faster rank's wait in the "
        "all-reduce (the two ranks' all-reduce times apart) over the step (the slower rank's compute plus "
        "the transfer).\n",
    ]
    if "source" in s:
        head.append(
            f"Sources measured: commit {s['source']['commit']} with the working tree's bucketing sources "
            f"(sha1 of `batchsel/selectors/buckets/*.py`: {s['source']['buckets_sources_sha1']}).\n"
        )
    for part, what in (("ranks", "Two-rank figures"), ("one-thread", "1-thread walls per epoch")):
        if f"{part}_measured" in s:
            again = s[f"{part}_measured"]
            head.append(
                f"{what} measured again on {again['date']} (`--only {part}`; waited {again['load_waited_s']:.0f} s "
                f"for the load).\n"
            )
    tuned = payload.get("tune")
    if tuned:
        parts = []
        for t, r in tuned.items():
            scores = ", ".join(f"{k} -> {100 * v['mean']:.1f} %" for k, v in r["scores"].items())
            parts.append(f"{t}: {scores} (in use {s['lr'].get(t, r['in_use']):g})")
        head.append("Learning rates (validation split, random batches): " + "; ".join(parts) + "\n")
    budgets = s["budgets"]
    return "\n".join(head) + "\n" + "\n".join(task_table(n, r, budgets) for n, r in payload["results"].items())


def print_tables(payload: dict) -> None:
    print("\n" + markdown(payload))


def write_outputs(stem: Path, payload: dict) -> None:
    stem.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(str(stem) + ".json", "w") as f:
        json.dump(payload, f, default=lambda o: o.item() if isinstance(o, np.generic) else str(o))
    with atomic_write(str(stem) + ".md", "w") as f:
        f.write(markdown(payload))
    print(f"wrote {stem}.json and {stem}.md")


def wait_for_load(limit: float, patience: float) -> float:
    """Sleeps until the 1-min load average is below ``limit`` or ``patience`` seconds pass."""
    start = time.monotonic()
    while os.getloadavg()[0] >= limit and time.monotonic() - start < patience:
        print(f"load average {load_avg()}: waiting for < {limit}", flush=True)
        time.sleep(20)
    return time.monotonic() - start


# -- main ------------------------------------------------------------------------------
def source_digest() -> dict[str, str]:
    """The commit and a digest of the bucketing sources measured (the tree is edited while it runs)."""
    folder = ROOT / "batchsel" / "selectors" / "buckets"
    digest = hashlib.sha1(b"".join(p.read_bytes() for p in sorted(folder.glob("*.py")))).hexdigest()[:12]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    except OSError:
        head = ""
    return {"commit": head.strip(), "buckets_sources_sha1": digest}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny tasks, 2 seeds: a smoke run (< 60 s)")
    parser.add_argument("--tune", action="store_true", help="the learning-rate sweep on the validation split")
    parser.add_argument("--split", choices=("val", "test"), default="test")
    parser.add_argument("--seeds", type=int, default=None, help="default 5 (--quick: 2)")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. (fresh seeds: a replication)")
    parser.add_argument("--budgets", default="0.5,1.0", help="fractions of random's full wall")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--tasks", default=None, help="comma-separated (default: all)")
    parser.add_argument("--methods", default=None, help="comma-separated subset (shuffle is always run)")
    parser.add_argument("--rank-steps", type=int, default=None, help="two-rank steps per method (0: skip)")
    parser.add_argument("--no-wait", action="store_true", help="start whatever the load average")
    parser.add_argument(
        "--only",
        choices=("ranks", "one-thread"),
        default=None,
        help="measure that part again (two-rank wait, 1-thread wall per epoch) into the output's JSON and .md",
    )
    parser.add_argument("--out", default=None, help="output stem")
    args = parser.parse_args(argv)
    if args.threads or args.quick:  # --quick: 1 thread unless told (it runs beside other tests)
        torch.set_num_threads(args.threads or 1)
    tasks = make_tasks(args.quick)
    if args.tasks:
        tasks = {k: tasks[k] for k in args.tasks.split(",")}
    seeds = args.seeds or (2 if args.quick else 5)
    tune_path = ROOT / "benchmarks" / "results" / "buckets" / "bench_buckets_tune.json"
    if args.tune:
        tuned = tune(tasks, seeds=min(seeds, 2))
        if not args.quick:
            tune_path.parent.mkdir(parents=True, exist_ok=True)
            before = json.loads(tune_path.read_text()) if tune_path.exists() else {}
            for name, res in tuned.items():  # a task's sweeps add up: lrs tried before are kept
                res["scores"] = {**before.get(name, {}).get("scores", {}), **res["scores"]}
                res["best"] = float(max(res["scores"], key=lambda k: res["scores"][k]["mean"]))
            tuned = {**before, **tuned}
            with atomic_write(str(tune_path), "w") as f:
                json.dump(tuned, f, indent=1)
        return tuned
    budgets = sorted(float(b) for b in args.budgets.split(","))
    if budgets[-1] != 1.0:
        raise ValueError(f"--budgets must end at 1.0 (random's full run), got {args.budgets!r}")
    chosen = None if args.methods is None else set(args.methods.split(",")) | {"shuffle"}
    keep = lambda ms: [m for m in ms if (chosen is None or m in chosen) and (m not in GROUPED or grouped_available())]  # noqa: E731
    full, eq = keep(FULL_METHODS), keep(EQ_METHODS)
    rank_steps_n = args.rank_steps if args.rank_steps is not None else (8 if args.quick else 200)
    stem = (
        Path(args.out)
        if args.out
        else (
            ROOT / "benchmarks" / "out" / "bench_buckets_quick"
            if args.quick
            else ROOT / "benchmarks" / "results" / "buckets" / "bench_buckets"
        )
    )
    waited = 0.0 if (args.quick or args.no_wait) else wait_for_load(LOAD_LIMIT, LOAD_WAIT)
    if args.only:
        return measure_again(stem, tasks, args, rank_steps_n, waited)
    payload: dict[str, Any] = {
        "measured": {"date": time.strftime("%Y-%m-%d %H:%M"), "version": batchsel.__version__},
        "settings": {
            "threads": torch.get_num_threads(),
            "seeds": seeds,
            "split": args.split,
            "budgets": budgets,
            "quick": args.quick,
            "full_methods": full,
            "eq_methods": eq,
            "load_start": load_avg(),
            "source": source_digest(),
            "load_waited_s": waited,
            "grouped_available": grouped_available(),
            "lr": {name: task.lr for name, task in tasks.items()},
            "sizes": {name: task.sizes for name, task in tasks.items()},
            "batch_size": {name: task.batch_size for name, task in tasks.items()},
        },
        "results": {},
    }
    if tune_path.exists() and not args.quick:
        payload["tune"] = json.loads(tune_path.read_text())
    start = time.perf_counter()
    for name, task in tasks.items():
        print(f"\n{name}: {task.sizes} train/val/test, B={task.batch_size}, lr {task.lr:g}", flush=True)
        res = run_task(task, full, eq, budgets, seeds, args.split, args.first_seed)
        res["epochs"] = task.epochs
        res["one_thread"] = one_thread_walls(
            task, full + eq, args.split, 0.15 if args.quick else ONE_THREAD_SHARE, 3 if args.quick else 10
        )
        if rank_steps_n and not (args.quick and payload["results"]):  # --quick: the first task's
            res["two_ranks"] = two_ranks(task, args.quick, rank_methods(), rank_steps_n)
        payload["results"][name] = res
    payload["settings"]["load_end"] = load_avg()
    payload["settings"]["total_seconds"] = time.perf_counter() - start
    print_tables(payload)
    write_outputs(stem, payload)
    return payload


if __name__ == "__main__":
    main()
