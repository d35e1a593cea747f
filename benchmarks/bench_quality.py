"""Regime benchmark: where does a batchsel method reach an accuracy sooner than random batches?

Every method runs at its defaults, through the public API (a selector in a
``SelectionBatchSampler``, losses and logits fed back with ``observe`` after each step), with
random batches (``RandomSelector`` = ``DistributedSampler`` + ``BatchSampler``) as the anchor
in the same run, seeds interleaved so that machine-load drift hits every method alike.

Datasets and models (each a fixed train / validation / test split; inputs standardized with
training statistics; the inputs are the embeddings the selectors see):

- ``digits-mlp``: scikit-learn digits (1797 x 64), MLP 64-64-10, SGD lr 0.05, momentum 0.9;
- ``mnist1d-mlp``: mnist1d (5000 x 40, generated offline by the ``mnist1d`` package),
  MLP 40-128-128-10, Adam lr 1e-3;
- ``mnist1d-cnn``: the same data, a 1-D CNN (3 strided convolutions of 32 channels), Adam.

Regimes (built from the training split afresh for every seed; evaluation labels stay clean):

- ``clean``;
- ``noise``: 25 % of the training labels replaced by a different class, uniformly;
- ``longtail``: class c keeps ``n_c * 10 ** (-c / (C - 1))`` of its examples (imbalance
  ratio 10); the metric becomes balanced accuracy (mean per-class recall);
- ``redundant``: the training set padded with near-duplicates (Gaussian noise of 0.05 of a
  feature's standard deviation) of 10 examples, so that half of it is redundant;
- ``outliers`` (not in the default run; ``--regimes outliers``): 10 % of the training
  inputs moved far from the data (Gaussian noise of 3 feature standard deviations added),
  labels kept: hard, outlying examples, where a selector that bunches or defers them shows.

Figures per dataset, regime and method (the anchor is random's mean final metric):

- final metric, and its difference to random: mean +- standard error over seeds of the
  paired difference (seed s of every method shares the regime data and the initial weights);
- steps to reach random's final metric (first evaluation at or above it), the ratio to
  random's own steps (per seed, mean +- s.e. over the seeds where both reach it) and the
  seeds that never reach it;
- wall seconds to reach it (training + selection, evaluation excluded) and the ratio;
- the share of the wall time spent selecting (drawing batches and ``observe``).

Outputs: a table per dataset and regime, ``benchmarks/out/bench_quality[_quick].json`` (every
curve and figure), ``.png`` (mean curves per regime, against steps and against wall seconds)
and ``.md`` (one markdown table of everything, as in the README).

Run ``python benchmarks/bench_quality.py`` (5 seeds, all datasets and regimes, about 10
minutes on 2 cores) or ``--quick`` (2 seeds, digits only, shorter runs; what CI runs).
``--split val`` reports on the validation split instead of the test split: defaults are
chosen there, never on the test split. Torch runs with one thread (``--threads``).

``--mpi N`` runs the same benchmark data-parallel, as a user of a CPU cluster runs it: this
process launches ``mpiexec -n N`` on this script itself (``--bind-to core``, Open MPI's
default for 2 ranks, or ``--bind-to none``; see ``benchmarks/_mpilaunch.py``), and every
rank runs the same tasks, regimes, seeds and methods in the same order (checked at the
start). torch.distributed (gloo) is set up from MPI
(``batchsel.integrations.init_torch_distributed_from_mpi``); every rank builds the same
model from the seed, wraps it in ``DistributedDataParallel`` (gradients averaged in
backward) and draws its batches from ``SelectionBatchSampler(selector, rank=r,
world_size=N, prefetch=...)``, whose ``observe`` all-gathers every rank's feedback
every 4 steps (the sampler's default; counted as selecting) over the communicator a DDP script's sampler
finds (``--feedback-comm auto``: mpi4py, since MPI is up over the same ranks; ``torch``:
torch.distributed's gloo group, as under torchrun; ``--sync-every K``: every K steps instead). Batches: each rank
trains on the task's B per step, so a step is one optimizer step on N x B examples (the
learning rate is the task's, unscaled) and an epoch has 1/N as many steps; the step
budget is the task's, so runs see N times the examples of one process and their metrics
are not those of the one-process table: compare methods within one run. Every rank
evaluates the (identical, checked after each run) model, outside the timed wall, with a
barrier after each evaluation; a run's wall seconds are the slowest rank's (curves:
the maximum over ranks at each evaluation), its selecting seconds the ranks' mean; the
JSON keeps each rank's (``rank_wall_seconds``, ``rank_select_seconds``,
``rank_observe_seconds``: the all-gather part). Rank 0 prints and writes the outputs
(default stem ``bench_quality[_quick]_mpiN``). Candidate filters (``*-filter``,
``rho-*``) run too: each rank fits the same irreducible-loss model and filters its own
candidate batches.

``--warmup`` (one process or ``--mpi``) first trains every method but the filters for
``eval_every`` untimed steps per task, so that JIT compilation (numba kernels, loaded
from or written to their cache) and other first-use costs are not charged to seed 0.
"""
from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import batchsel  # noqa: E402
from batchsel.integrations import SelectionBatchSampler  # noqa: E402
from batchsel.io import atomic_write  # noqa: E402

# the sampler's default sync_every (what --mpi runs share feedback with unless --sync-every)
SYNC_EVERY = inspect.signature(SelectionBatchSampler).parameters["sync_every"].default

REGIMES = ("clean", "noise", "longtail", "redundant")  # the default run, the README's table
EXTRA_REGIMES = ("outliers",)
NOISE_RATE = 0.25
IMBALANCE = 10.0
DUPLICATE_SOURCES = 10
DUPLICATE_NOISE = 0.05
OUTLIER_RATE = 0.1
OUTLIER_NOISE = 3.0


# -- data ------------------------------------------------------------------------------
@dataclass
class Split:
    x: np.ndarray  # float32, standardized
    y: np.ndarray  # int64


@dataclass
class Dataset:
    name: str
    train: Split
    val: Split
    test: Split
    num_classes: int


_DATA_CACHE: dict[str, Dataset] = {}


def _standardized(name: str, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray,
                  y_test: np.ndarray) -> Dataset:
    from sklearn.model_selection import train_test_split

    x_tr, x_val, y_tr, y_val = train_test_split(x_train, y_train, test_size=0.2, stratify=y_train, random_state=0)
    mean, std = x_tr.mean(0), x_tr.std(0) + 1e-3
    norm = lambda a: ((a - mean) / std).astype(np.float32)  # noqa: E731
    return Dataset(name, Split(norm(x_tr), y_tr.astype(np.int64)), Split(norm(x_val), y_val.astype(np.int64)),
                   Split(norm(x_test), y_test.astype(np.int64)), int(y_train.max()) + 1)


def load_dataset(name: str) -> Dataset:
    """``digits`` (1078 / 270 / 449 train / val / test) or ``mnist1d`` (3200 / 800 / 1000)."""
    if name not in _DATA_CACHE:
        if name in ("digits", "digits-parity"):
            from sklearn.datasets import load_digits
            from sklearn.model_selection import train_test_split

            d = load_digits()
            y = d.target if name == "digits" else d.target % 2  # parity: a 2-class task on the same images
            x_tr, x_te, y_tr, y_te = train_test_split(d.data.astype(np.float32), y, test_size=0.25,
                                                      stratify=y, random_state=0)
        elif name == "mnist1d":
            from mnist1d.data import get_dataset_args, make_dataset

            d = make_dataset(get_dataset_args())  # generated offline from the package's templates, seed 42
            x_tr, y_tr, x_te, y_te = d["x"], d["y"], d["x_test"], d["y_test"]
        else:
            raise ValueError(f"unknown dataset {name!r}; choose digits, digits-parity or mnist1d")
        _DATA_CACHE[name] = _standardized(name, x_tr, y_tr, x_te, y_te)
    return _DATA_CACHE[name]


def make_regime(regime: str, train: Split, num_classes: int, seed: int) -> tuple[Split, dict[str, Any]]:
    """The training set of ``regime`` for ``seed`` and what was done to it."""
    rng = np.random.default_rng([seed, 1234])
    x, y = train.x, train.y
    if regime == "clean":
        return train, {}
    if regime == "noise":
        flip = rng.choice(len(y), size=round(NOISE_RATE * len(y)), replace=False)
        noisy = y.copy()
        noisy[flip] = (y[flip] + rng.integers(1, num_classes, size=len(flip))) % num_classes
        return Split(x, noisy), {"flipped": np.sort(flip)}
    if regime == "longtail":
        keep = []
        for c in range(num_classes):
            members = np.flatnonzero(y == c)
            n_c = max(1, int(len(members) * IMBALANCE ** (-c / (num_classes - 1))))
            keep.append(rng.choice(members, size=n_c, replace=False))
        keep = np.sort(np.concatenate(keep))
        return Split(x[keep], y[keep]), {"kept": keep}
    if regime == "redundant":
        sources = rng.choice(len(y), size=DUPLICATE_SOURCES, replace=False)
        which = sources[rng.integers(0, DUPLICATE_SOURCES, size=len(y))]
        dup = x[which] + DUPLICATE_NOISE * rng.standard_normal((len(y), x.shape[1])).astype(np.float32)
        return Split(np.concatenate([x, dup]), np.concatenate([y, y[which]])), {"sources": sources}
    if regime == "outliers":
        moved = rng.choice(len(y), size=round(OUTLIER_RATE * len(y)), replace=False)
        far = x.copy()  # the inputs are standardized: 3 means 3 feature standard deviations
        far[moved] += OUTLIER_NOISE * rng.standard_normal((len(moved), x.shape[1])).astype(np.float32)
        return Split(far, y), {"moved": np.sort(moved)}
    raise ValueError(f"unknown regime {regime!r}; choose from {REGIMES + EXTRA_REGIMES}")


# -- models ----------------------------------------------------------------------------
@dataclass
class Task:
    """A dataset with a model, an optimizer and a step budget."""
    name: str
    dataset: str
    model: Callable[[int, int], torch.nn.Module]
    optimizer: Callable[[Any], torch.optim.Optimizer]
    steps: int
    quick_steps: int
    eval_every: int
    batch_size: int = 32


class CNN1d(torch.nn.Module):
    def __init__(self, length: int, num_classes: int, channels: int = 32) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv1d(1, channels, 5, stride=2, padding=2), torch.nn.ReLU(),
            torch.nn.Conv1d(channels, channels, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.Conv1d(channels, channels, 3, stride=2, padding=1), torch.nn.ReLU(), torch.nn.Flatten())
        with torch.no_grad():
            width = self.features(torch.zeros(1, 1, length)).shape[1]
        self.head = torch.nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x.unsqueeze(1)))


def mlp(*widths: int) -> Callable[[int, int], torch.nn.Module]:
    def build(d_in: int, num_classes: int) -> torch.nn.Module:
        layers, d = [], d_in
        for w in widths:
            layers += [torch.nn.Linear(d, w), torch.nn.ReLU()]
            d = w
        return torch.nn.Sequential(*layers, torch.nn.Linear(d, num_classes))
    return build


TASKS = {
    "digits-mlp": Task("digits-mlp", "digits", mlp(64), lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
                       steps=300, quick_steps=150, eval_every=10),
    "mnist1d-mlp": Task("mnist1d-mlp", "mnist1d", mlp(128, 128), lambda p: torch.optim.Adam(p, lr=1e-3),
                        steps=2000, quick_steps=400, eval_every=50),
    "mnist1d-cnn": Task("mnist1d-cnn", "mnist1d", lambda d, c: CNN1d(d, c), lambda p: torch.optim.Adam(p, lr=2e-3),
                        steps=3000, quick_steps=400, eval_every=50),
    # a 2-class task (even / odd digits), not in the default run: checks that a rule chosen on
    # the 10-class tasks carries over to 2 classes
    "parity-mlp": Task("parity-mlp", "digits-parity", mlp(64), lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
                       steps=300, quick_steps=150, eval_every=10),
}
DEFAULT_TASKS = ("digits-mlp", "mnist1d-mlp", "mnist1d-cnn")


# -- methods ---------------------------------------------------------------------------
def make_selector(method: str, train: Split, batch_size: int, seed: int) -> batchsel.Selector:
    """Every method at its defaults (a ``--variant`` adds keyword arguments); the
    embeddings are the inputs."""
    base, options = VARIANTS.get(method, (method, {}))
    options = {k: v for k, v in options.items() if k != "prefetch"}  # the sampler's, not the selector's
    n = len(train.y)
    if base in FILTERS:  # candidates for the filter: random batches of its candidate size
        return batchsel.RandomSelector(n, batch_size, seed=seed)
    if base == "random":
        return batchsel.RandomSelector(n, batch_size, seed=seed, **options)
    if base == "smdl":
        return batchsel.SubmodularSelector(train.x, batch_size, seed=seed, **options)
    if base == "loss-rank":
        return batchsel.LossRankSelector(n, batch_size, seed=seed, **options)
    if base == "coreset":
        return batchsel.CoresetSelector(train.x, train.y, batch_size, **{"fraction": 0.5, **options}, seed=seed)
    raise ValueError(f"unknown method {method!r}; choose from {METHODS}")


# In-loop candidate filters (batchsel.CandidateFilter): random candidate batches of ratio x B,
# a no-grad forward scores them, the step trains on the B kept (its cost counts as selecting).
FILTERS = {"loss-filter": {"score": "loss"}, "gradnorm-filter": {"score": "gradnorm"},
           "rho-filter": {"score": "rho"}, "rho-diverse": {"score": "rho", "diversity": 1.0}}
METHODS = ("random", "smdl", "loss-rank", "coreset", *FILTERS)
LABELS = {"random": "random", "smdl": "SMDL", "loss-rank": "loss-rank", "coreset": "CRAIG coreset (50%)",
          "loss-filter": "loss filter", "gradnorm-filter": "gradnorm filter", "rho-filter": "RHO-LOSS filter",
          "rho-diverse": "RHO + diversity"}


def make_filter(method: str, train: Split, batch_size: int, seed: int,
                task: Task | None = None) -> batchsel.CandidateFilter | None:
    """The candidate filter of a filter method (None for the others); the irreducible-loss
    model is batchsel's default, cross-fitted on the training set as the regime made it.
    A variant's ``il_*`` options go to :class:`batchsel.IrreducibleLoss` (``il_model="task"``:
    the task's own architecture, ``il_model=<task name>``: that task's architecture)."""
    base, options = VARIANTS.get(method, (method, {}))
    if base not in FILTERS:
        return None
    options = {**FILTERS[base], **options}
    il_options = {k[3:]: options.pop(k) for k in list(options) if k.startswith("il_")}
    if options["score"] == "rho" and "irreducible_losses" not in options:
        arch = il_options.get("model")
        if arch == "task" or arch in TASKS:
            source = task if arch == "task" else TASKS[arch]
            if source is None:
                raise ValueError("il_model='task' needs the task")
            d, c = train.x.shape[1], int(train.y.max()) + 1
            il_options["model"] = lambda: source.model(d, c)
        options["irreducible_losses"] = batchsel.IrreducibleLoss(seed=seed, **il_options).fit(train.x, train.y)
    return batchsel.CandidateFilter(batch_size, seed=seed, **options)
# --variant NAME=METHOD:key=value;key=value -> NAME: (METHOD, {key: value}); for searches on --split val
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {}


def parse_variant(text: str) -> tuple[str, str, dict[str, Any]]:
    """``"smdl-div=smdl:weights=(0.2, 0.5, 0.1, 0.2);pool_size=128"`` -> name, method, options."""
    import ast

    try:
        name, rest = text.split("=", 1)
        method, _, opts = rest.partition(":")
        options = {k.strip(): ast.literal_eval(v.strip()) for k, v in
                   (item.split("=", 1) for item in opts.split(";") if item.strip())}
    except (ValueError, SyntaxError) as exc:
        raise ValueError(f"--variant must look like NAME=METHOD:key=value;key=value, got {text!r} ({exc})") from None
    if method not in METHODS:
        raise ValueError(f"--variant {text!r}: unknown method {method!r}; choose from {METHODS}")
    return name.strip(), method, options


# -- one run ---------------------------------------------------------------------------
def metric(model: torch.nn.Module, split: Split, balanced: bool) -> float:
    with torch.no_grad():
        pred = model(torch.from_numpy(split.x)).argmax(1).numpy()
    if not balanced:
        return float((pred == split.y).mean())
    return float(np.mean([(pred[split.y == c] == c).mean() for c in np.unique(split.y)]))


def train_run(task: Task, method: str, train: Split, evaluation: Split, num_classes: int, seed: int,
              steps: int, balanced: bool, comm: Any = None, sync_every: int | None = None) -> dict[str, Any]:
    """Train ``task``'s model on ``train`` with ``method``'s batches for ``steps`` steps;
    the curve is ``[(step, wall seconds so far, metric)]`` every ``task.eval_every`` steps.

    ``comm`` (``--mpi``: the communicator of an initialized torch.distributed group): this
    rank trains a DistributedDataParallel copy of the model on its own batches of B (rank r
    of the sampler's world), feedback is all-gathered by the sampler every ``sync_every``
    steps (None: the sampler's default), every rank evaluates the same model outside the timed wall, and
    the figures returned are the slowest rank's (wall seconds, curve walls: maxima over
    ranks; selecting seconds: the mean over ranks; per rank in ``rank_*``)."""
    torch.manual_seed(seed)  # the same initial weights for every method of a seed (and on every rank)
    model = task.model(train.x.shape[1], num_classes)
    net = model
    if comm is not None:  # gradients averaged over the ranks in backward, as a DDP user's are
        net = torch.nn.parallel.DistributedDataParallel(model)
    opt = task.optimizer(model.parameters())
    t0 = time.perf_counter()
    filt = make_filter(method, train, task.batch_size, seed, task)  # fits the IL model: part of the cost
    setup = time.perf_counter() - t0
    fitted = filt  # keeps the IL figures when the guard drops the filter
    if filt is not None and filt.guard_ == "uniform":
        filt = None  # the IL model is near chance: random batches of B, exactly the anchor's
    selector = make_selector(method, train, filt.candidate_size if filt else task.batch_size, seed)
    base, options = VARIANTS.get(method, (method, {}))
    weighted = base == "coreset"
    # prefetch=N (a variant option): selection runs N batches ahead in the sampler's thread
    rank, world = (0, 1) if comm is None else (comm.rank, comm.size)
    shared = {} if sync_every is None else {"sync_every": sync_every}
    sampler = SelectionBatchSampler(selector, rank=rank, world_size=world, comm=comm, weighted=weighted,
                                    prefetch=int(options.get("prefetch", 0)), **shared)
    if comm is not None:
        sampler.verify()  # every rank built the same selector (data, seed, settings): else it raises
        comm.barrier()  # untimed: the ranks start the loop together
    x, y = torch.from_numpy(train.x), torch.from_numpy(train.y)
    curve, step, epoch, select, wall, observed = [], 0, 0, setup, setup, 0.0
    while step < steps:
        sampler.set_epoch(epoch)
        batches = iter(sampler)
        while step < steps:
            t0 = time.perf_counter()
            item = next(batches, None)
            if item is None:
                break
            if weighted:
                ib, wb = torch.tensor([i for i, _ in item]), torch.tensor([w for _, w in item])
            else:
                ib, wb = torch.tensor(item), None
            if filt is not None:  # score the candidates, keep B of them
                with torch.no_grad():
                    candidate_logits = model(x[ib])  # the module itself: no DDP hooks for a no-grad forward
                keep = filt(ib, candidate_logits, y[ib], embeddings=x[ib] if filt.diversity else None)
                ib = ib[torch.from_numpy(keep)]
            t1 = time.perf_counter()
            logits = net(x[ib])
            losses = F.cross_entropy(logits, y[ib], reduction="none")
            loss = (losses * wb).sum() / wb.sum() if wb is not None else losses.mean()
            opt.zero_grad()
            loss.backward()  # under DDP: the gradient all-reduce
            opt.step()
            t2 = time.perf_counter()
            if filt is None:
                sampler.observe(ib, losses=losses.detach(), logits=logits.detach())  # under --mpi: all-gathered
            t3 = time.perf_counter()
            select += (t1 - t0) + (t3 - t2)
            observed += t3 - t2  # part of select: under --mpi, the feedback's all-gather
            wall += t3 - t0
            step += 1
            if step % task.eval_every == 0 or step == steps:
                model.eval()
                curve.append((step, wall, metric(model, evaluation, balanced)))
                model.train()
                if comm is not None:
                    comm.barrier()  # untimed: evaluation does not leak into the next step's wall
        epoch += 1
    batches.close()  # stops a prefetch thread still selecting ahead
    extra = {} if fitted is None else {"il_accuracy": fitted.il_accuracy_, "il_skill": fitted.il_skill_,
                                       "guard": fitted.guard_, "il_seconds": setup}
    if comm is not None:
        # the slower rank sets the pace: walls are maxima over ranks; the ranks must hold the same model
        mine = np.array([wall, select, observed, *(w for _, w, _ in curve)], dtype=np.float64)
        every = np.stack(comm.allgather(mine))
        params = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
        checks = comm.allgather(np.array([params.sum(dtype=np.float64), np.abs(params).sum(dtype=np.float64)]))
        if not all(np.array_equal(c, checks[0]) for c in checks):
            raise RuntimeError(f"ranks ended {task.name} / {method} / seed {seed} with different models: {checks}")
        walls = every[:, 3:].max(0)
        curve = [(s, float(w), m) for (s, _, m), w in zip(curve, walls)]
        extra.update(rank_wall_seconds=every[:, 0].tolist(), rank_select_seconds=every[:, 1].tolist(),
                     rank_observe_seconds=every[:, 2].tolist())
        wall, select, observed = float(every[:, 0].max()), float(every[:, 1].mean()), float(every[:, 2].mean())
    return {"curve": curve, "final": curve[-1][2], "wall_seconds": wall, "select_seconds": select,
            "observe_seconds": observed, "epochs": epoch, "steps": step, **extra}


# -- figures ---------------------------------------------------------------------------
def first_reaching(curve: list, target: float) -> tuple[int, float] | None:
    """(step, wall seconds) of the first evaluation at or above ``target``."""
    return next(((s, w) for s, w, m in curve if m >= target - 1e-12), None)


def mean_se(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    v = np.asarray(values, dtype=np.float64)
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else 0.0


def summarize(runs: dict[str, list[dict]], methods: list[str]) -> dict[str, Any]:
    """Figures of one (task, regime); runs[method][i] is seed i."""
    target = float(np.mean([r["final"] for r in runs["random"]]))
    base_hits = [first_reaching(r["curve"], target) for r in runs["random"]]
    rows = {}
    for m in methods:
        finals = [r["final"] for r in runs[m]]
        diffs = [a - b["final"] for a, b in zip(finals, runs["random"])]
        hits = [first_reaching(r["curve"], target) for r in runs[m]]
        step_ratios = [h[0] / b[0] for h, b in zip(hits, base_hits) if h and b]
        wall_ratios = [h[1] / b[1] for h, b in zip(hits, base_hits) if h and b]
        wall = [r["wall_seconds"] for r in runs[m]]
        rows[m] = {
            "final_mean": float(np.mean(finals)), "final_per_seed": finals,
            "diff_mean": mean_se(diffs)[0], "diff_se": mean_se(diffs)[1],
            "steps_to_target_per_seed": [h[0] if h else None for h in hits],
            "wall_to_target_per_seed": [h[1] if h else None for h in hits],
            "steps_to_target_mean": mean_se([h[0] for h in hits if h])[0],
            "not_reached": sum(h is None for h in hits),
            "steps_ratio": mean_se(step_ratios)[0], "steps_ratio_se": mean_se(step_ratios)[1],
            "wall_to_target_ratio": mean_se(wall_ratios)[0], "wall_to_target_ratio_se": mean_se(wall_ratios)[1],
            "wall_seconds_mean": float(np.mean(wall)),
            "wall_ratio": float(np.mean(wall) / np.mean([r["wall_seconds"] for r in runs["random"]])),
            "select_share": float(sum(r["select_seconds"] for r in runs[m]) / max(sum(wall), 1e-12)),
            # the part of it in observe (under --mpi: the feedback's all-gather, waiting for the other ranks)
            "observe_share": float(sum(r.get("observe_seconds", 0.0) for r in runs[m]) / max(sum(wall), 1e-12)),
            "epochs": runs[m][0]["epochs"],
        }
    return {"target": target, "rows": rows}


def verdict(row: dict, seeds: int) -> str:
    """``faster``: reaches random's metric in <= 0.7x its steps on every seed, the ratio
    beyond seed noise (mean + 2 s.e. < 1); ``better`` / ``worse``: final metric beyond 2 s.e."""
    tags = []
    if row["not_reached"] == 0 and row["steps_ratio"] is not None and row["steps_ratio"] <= 0.7 \
            and row["steps_ratio"] + 2 * row["steps_ratio_se"] < 1.0:
        tags.append("faster")
    if row["diff_se"] is not None and row["diff_mean"] > 2 * row["diff_se"] and row["diff_se"] > 0:
        tags.append("better")
    if row["diff_se"] is not None and row["diff_mean"] < -2 * row["diff_se"] and row["diff_se"] > 0:
        tags.append("WORSE")
    return ",".join(tags) or "-"


def print_table(task: str, regime: str, summary: dict, methods: list[str], seeds: int, metric_name: str) -> None:
    rows = summary["rows"]
    print(f"\n{task} / {regime}: {seeds} seeds, {metric_name}; target = random's final {summary['target']:.4f}")
    head = (f"{'method':<20}{'final':>8}{'diff vs random (pt)':>22}{'steps to target':>17}{'x random':>14}"
            f"{'missed':>8}{'wall to target':>16}{'wall x':>8}{'selecting':>11}{'verdict':>10}")
    print(head)
    print("-" * len(head))
    for m in methods:
        r = rows[m]
        fmt = lambda v, se, p=2: "-" if v is None else f"{v:.{p}f}+-{se:.{p}f}"  # noqa: E731
        steps = "-" if r["steps_to_target_mean"] is None else f"{r['steps_to_target_mean']:.0f}"
        print(f"{LABELS.get(m, m):<20}{100 * r['final_mean']:>8.2f}"
              f"{fmt(None if r['diff_mean'] is None else 100 * r['diff_mean'], 100 * (r['diff_se'] or 0)):>22}"
              f"{steps:>17}{fmt(r['steps_ratio'], r['steps_ratio_se'] or 0):>14}{r['not_reached']:>5}/{seeds:<2}"
              f"{fmt(r['wall_to_target_ratio'], r['wall_to_target_ratio_se'] or 0):>16}{r['wall_ratio']:>8.2f}"
              f"{100 * r['select_share']:>10.1f}%{verdict(r, seeds):>10}")


def markdown(results: dict, methods: list[str], seeds: int) -> str:
    """One table of every task, regime and method (for the README): final metric and
    difference to random, steps and wall seconds to random's final metric (x random)."""
    lines = ["| task | regime | method | final % | vs random (pt) | steps to random's final (x random) "
             "| wall to it (x random) | wall, same steps (x random) | selecting | verdict |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for task, by_regime in results.items():
        for regime, res in by_regime.items():
            for m in methods:
                r = res["summary"]["rows"][m]
                missed = f", {r['not_reached']}/{seeds} missed" if r["not_reached"] else ""
                steps = "never" if r["steps_ratio"] is None else \
                    f"{r['steps_ratio']:.2f} ± {r['steps_ratio_se']:.2f}{missed}"
                wall = "never" if r["wall_to_target_ratio"] is None else \
                    f"{r['wall_to_target_ratio']:.2f} ± {r['wall_to_target_ratio_se']:.2f}"
                diff = "" if m == "random" else f"{100 * r['diff_mean']:+.2f} ± {100 * r['diff_se']:.2f}"
                lines.append(f"| {task} | {regime} | {LABELS.get(m, m)} | {100 * r['final_mean']:.2f} | {diff} "
                             f"| {steps} | {wall} | {r['wall_ratio']:.2f} | {100 * r['select_share']:.0f} % "
                             f"| {verdict(r, seeds)} |")
    return "\n".join(lines) + "\n"


def overview(results: dict, methods: list[str], seeds: int) -> str:
    """(task, regime) x method: final difference to random in points / steps to random's
    final metric (x random), and the verdict (F faster, B better, W worse)."""
    others = [m for m in methods if m != "random"]
    short = {"faster": "F", "better": "B", "WORSE": "W"}
    lines = ["| task, regime | random | " + " | ".join(LABELS.get(m, m) for m in others) + " |",
             "| --- | --- |" + " --- |" * len(others)]
    for task, by_regime in results.items():
        for regime, res in by_regime.items():
            cells = []
            for m in others:
                row = res["summary"]["rows"][m]
                ratio = "never" if row["steps_ratio"] is None else f"{row['steps_ratio']:.2f}x"
                tag = "".join(short[v] for v in verdict(row, seeds).split(",") if v in short)
                cells.append(f"{100 * row['diff_mean']:+.1f} / {ratio}" + (f" **{tag}**" if tag else ""))
            lines.append(f"| {task}, {regime} | {100 * res['summary']['target']:.1f} % | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(results: dict, methods: list[str], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(results)
    regimes = list(next(iter(results.values())))
    fig, axes = plt.subplots(2 * len(tasks), len(regimes), figsize=(4 * len(regimes), 3.2 * 2 * len(tasks)),
                             squeeze=False)
    for ti, task in enumerate(tasks):
        for ri, regime in enumerate(regimes):
            runs = results[task][regime]["runs"]
            for row, xcol, xlabel in ((2 * ti, 0, "steps"), (2 * ti + 1, 1, "wall seconds")):
                ax = axes[row][ri]
                for m in methods:
                    curves = np.array([[pt[xcol] for pt in r["curve"]] for r in runs[m]])
                    vals = np.array([[pt[2] for pt in r["curve"]] for r in runs[m]])
                    ax.plot(curves.mean(0), vals.mean(0), label=LABELS.get(m, m))
                ax.axhline(results[task][regime]["summary"]["target"], color="grey", lw=0.6, ls=":")
                ax.set_title(f"{task} / {regime}", fontsize=9)
                ax.set_xlabel(xlabel, fontsize=8)
                lo = min(results[task][regime]["summary"]["target"] - 0.15, 0.9)
                ax.set_ylim(max(lo, 0.0), 1.0)
                ax.tick_params(labelsize=7)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=80)
    plt.close(fig)


# -- main ------------------------------------------------------------------------------
def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def write_outputs(stem: str, payload: dict, methods: list[str], seeds: int) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(stem)), exist_ok=True)
    with atomic_write(stem + ".json", "w") as f:
        json.dump(_jsonable(payload), f)
    plot(payload["results"], methods, stem + ".png")
    with atomic_write(stem + ".md", "w") as f:
        f.write(overview(payload["results"], methods, seeds) + "\n" + markdown(payload["results"], methods, seeds))
    print(f"wrote {stem}.json, {stem}.png and {stem}.md")


def render(paths: list[str], stem: str) -> dict:
    """Merge the results of several runs with the same methods and seeds."""
    results, args, total = {}, None, 0.0
    for path in paths:
        with open(path) as f:
            payload = json.load(f)
        if args is not None and (payload["args"]["methods"], payload["args"]["seeds"]) != \
                (args["methods"], args["seeds"]):
            raise ValueError(f"{path} ran methods={payload['args']['methods']!r}, seeds={payload['args']['seeds']}; "
                             f"{paths[0]} ran methods={args['methods']!r}, seeds={args['seeds']}")
        args = args or payload["args"]
        for task, by_regime in payload["results"].items():
            results.setdefault(task, {}).update(by_regime)
        total += payload["total_seconds"]
    for text in args.get("variant", []):
        name, method, options = parse_variant(text)
        VARIANTS[name], LABELS[name] = (method, options), name
    methods = [m.strip() for m in args["methods"].split(",") if m.strip()]
    write_outputs(stem, {"args": args, "results": results, "total_seconds": total, "merged_from": paths},
                  methods, args["seeds"])
    return results


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default=",".join(DEFAULT_TASKS), help=f"comma-separated, from {list(TASKS)}")
    parser.add_argument("--regimes", default=",".join(REGIMES))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=METHOD:k=v;k=v",
                        help="a method with other settings, run as NAME (add NAME to --methods)")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--split", choices=("test", "val"), default="test",
                        help="evaluate on the test split (report) or the validation split (choose defaults)")
    parser.add_argument("--steps-scale", type=float, default=1.0, help="multiply every task's step budget")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--quick", action="store_true", help="2 seeds, digits only, short runs (CI)")
    parser.add_argument("--out", default=None, help="output stem (default benchmarks/out/bench_quality[_quick])")
    parser.add_argument("--render", nargs="+", metavar="JSON", default=None,
                        help="train nothing: merge these outputs (e.g. tasks run in parallel) into --out's "
                             ".json / .png / .md")
    parser.add_argument("--mpi", type=int, default=0, metavar="N",
                        help="run every method data-parallel on N ranks under mpiexec (launched from here; DDP "
                             "over gloo, per-rank batch B, feedback all-gathered every step); default output stem "
                             "benchmarks/out/bench_quality[_quick]_mpiN")
    parser.add_argument("--feedback-comm", choices=("auto", "torch", "mpi"), default="auto",
                        help="with --mpi: the communicator the samplers all-gather feedback over: auto (what a "
                             "DDP script's sampler finds: get_communicator('auto'), mpi4py here), torch "
                             "(torch.distributed's gloo group, as under torchrun) or mpi (mpi4py)")
    parser.add_argument("--sync-every", type=int, default=None,
                        help="with --mpi: the samplers' sync_every (feedback all-gathered every K steps; "
                             "default: the sampler's, 4)")
    parser.add_argument("--warmup", action="store_true",
                        help="first, per task, an untimed run of eval_every steps of every method but the "
                             "filters (JIT compilation and first-use costs are not charged to seed 0)")
    parser.add_argument("--bind-to", default="core",
                        help="with --mpi: mpiexec's --bind-to (core, Open MPI's default for 2 ranks: a rank's "
                             "prefetch thread shares its core; none: the OS places it)")
    # a rank under mpiexec; its value is the parent's --bind-to (recorded in the outputs): Open MPI's
    # launcher scans the whole command line and refuses a second --bind-to, even the script's
    parser.add_argument("--mpi-worker", default=None, metavar="BIND", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.render:
        return render(args.render, args.out or str(ROOT / "benchmarks" / "out" / "bench_quality"))
    if args.quick:
        args.seeds = min(args.seeds, 2)
        if args.tasks == ",".join(DEFAULT_TASKS):
            args.tasks = "digits-mlp"
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    regimes = [r.strip() for r in args.regimes.split(",") if r.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for text in args.variant:
        try:
            name, method, options = parse_variant(text)
        except ValueError as exc:
            parser.error(str(exc))
        VARIANTS[name] = (method, options)
        LABELS[name] = name
    for name, given, allowed in (("tasks", tasks, TASKS), ("regimes", regimes, REGIMES + EXTRA_REGIMES),
                                 ("methods", methods, (*METHODS, *VARIANTS))):
        bad = sorted(set(given) - set(allowed))
        if bad or not given:
            parser.error(f"--{name}: unknown or empty {bad or given!r}; choose from {list(allowed)}")
    if "random" not in methods:
        parser.error(f"--methods must include the anchor 'random', got {methods!r}")
    if args.seeds < 2:
        parser.error(f"--seeds must be >= 2 (standard errors), got {args.seeds}")
    if args.mpi < 0 or args.mpi == 1:
        parser.error(f"--mpi must be >= 2 ranks (leave it out for one process), got {args.mpi}")
    if args.sync_every is not None and args.sync_every < 1:
        parser.error(f"--sync-every must be >= 1, got {args.sync_every}")
    stem = args.out or str(ROOT / "benchmarks" / "out" / f"bench_quality{'_quick' if args.quick else ''}"
                                                         f"{f'_mpi{args.mpi}' if args.mpi else ''}")
    if args.mpi and not args.mpi_worker:
        return launch_ranks(args, stem)
    if not args.mpi:
        args.bind_to = args.feedback_comm = None  # one process: no binding, no feedback to share
    comm = None
    if args.mpi_worker:
        args.bind_to = args.mpi_worker
        comm = join_ranks(args)
    lead = comm is None or comm.rank == 0  # prints and writes the outputs
    torch.set_num_threads(args.threads)

    start = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    for task_name in tasks:
        task = TASKS[task_name]
        data = load_dataset(task.dataset)
        evaluation = data.test if args.split == "test" else data.val
        steps = max(task.eval_every, round((task.quick_steps if args.quick else task.steps) * args.steps_scale))
        results[task_name] = {}
        if args.warmup:  # untimed: compiles the kernels and touches every code path once
            for m in methods:
                if VARIANTS.get(m, (m, {}))[0] not in FILTERS:
                    train_run(task, m, data.train, evaluation, data.num_classes, 0, task.eval_every, False, comm,
                              args.sync_every)
        for regime in regimes:
            balanced = regime == "longtail"
            runs: dict[str, list[dict]] = {m: [] for m in methods}
            for seed in range(args.seeds):
                train, _ = make_regime(regime, data.train, data.num_classes, seed)
                for m in methods:  # interleaved: load drift hits every method alike
                    runs[m].append(train_run(task, m, train, evaluation, data.num_classes, seed, steps, balanced,
                                             comm, args.sync_every))
            summary = summarize(runs, methods)
            results[task_name][regime] = {"summary": summary, "runs": runs, "steps": steps,
                                          "train_size": len(train.y), "metric": "balanced accuracy" if balanced
                                          else "accuracy"}
            if lead:
                world = "" if comm is None else (f", {comm.size} ranks x B={TASKS[task_name].batch_size}, feedback over "
                                                 f"{type(comm).__name__} ({args.feedback_comm}) every {args.sync_every or SYNC_EVERY} step(s)")
                print_table(task_name, regime, summary, methods, args.seeds,
                            f"{'balanced accuracy' if balanced else 'accuracy'} on {args.split} after {steps} steps, "
                            f"{len(train.y)} training examples{world}; load average {os.getloadavg()[0]:.2f}")
                sys.stdout.flush()
    total = time.perf_counter() - start
    if lead:
        print(f"\ntotal {total:.0f} s")
        payload = {"args": vars(args), "results": results, "total_seconds": total,
                   "world_size": 1 if comm is None else comm.size}
        write_outputs(stem, payload, methods, args.seeds)
    if comm is not None:
        comm.barrier()  # no rank leaves (and tears the process group down) before the outputs are written
    return results


def launch_ranks(args: argparse.Namespace, stem: str) -> dict:
    """``--mpi N``: this process runs ``mpiexec -n N`` on this script with the same settings
    (each rank a ``--mpi-worker``), streams rank 0's tables and returns its results."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _mpilaunch import mpiexec_command, run_mpiexec

    forwarded = ["--tasks", args.tasks, "--regimes", args.regimes, "--methods", args.methods,
                 "--seeds", args.seeds, "--split", args.split, "--steps-scale", repr(args.steps_scale),
                 "--threads", args.threads, "--out", stem, "--mpi", args.mpi, "--mpi-worker", args.bind_to,
                 "--feedback-comm", args.feedback_comm,
                 *(["--sync-every", args.sync_every] if args.sync_every is not None else []),
                 *(["--quick"] if args.quick else []), *(["--warmup"] if args.warmup else [])]
    for text in args.variant:
        forwarded += ["--variant", text]
    cmd = mpiexec_command(args.mpi, args.bind_to, Path(__file__).resolve(), forwarded)
    print(f"launching {args.mpi} ranks: {' '.join(cmd)}", flush=True)
    run_mpiexec(cmd, timeout=None, capture=False)
    with open(stem + ".json") as f:
        return json.load(f)["results"]


def join_ranks(args: argparse.Namespace) -> Any:
    """A rank under mpiexec: torch.distributed (gloo) set up from MPI; every rank must run
    the same settings (tasks, methods in the same order, seeds), checked here. Returns the
    communicator the samplers and the figures go through."""
    from batchsel.integrations import get_communicator, init_torch_distributed_from_mpi

    rank, world = init_torch_distributed_from_mpi()  # an exception on any rank aborts the job
    if world != args.mpi:
        raise RuntimeError(f"--mpi {args.mpi} but this job has {world} ranks: launch it with --mpi only "
                           f"(the script starts mpiexec itself)")
    comm = get_communicator(args.feedback_comm)  # "auto": what a DDP script's sampler finds
    settings = json.dumps(vars(args), sort_keys=True)
    every = comm.allgather(settings)
    if any(s != settings for s in every):
        raise RuntimeError(f"ranks disagree on the settings: {every}")
    return comm


if __name__ == "__main__":
    main()
