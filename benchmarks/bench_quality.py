"""Regime benchmark, budgeted: does a batchsel method reach random batches' accuracy in less
wall time, when every run's learning rate is decayed over its own budget?

This is the comparison a user makes for a run of fixed length (Kaddour et al., "No Train No
Gain", NeurIPS 2023: gains measured against a constant learning rate vanish against a
baseline whose schedule is fully decayed within the same compute budget). Every method runs
at its defaults through the public API (a selector in a ``SelectionBatchSampler``, losses
and logits fed back with ``observe`` after each step, or a ``CandidateFilter`` scoring
candidate batches); random batches (``RandomSelector`` = ``DistributedSampler`` +
``BatchSampler``) run at the same budgets in the same process, interleaved.

Protocol, per task and regime:

- **budgets**: fractions (``--budgets``, default 0.3, 0.5, 0.7, 1.0) of random's full run of
  ``task.steps`` steps, in *wall seconds*. Random's budget f is ``round(f * steps)`` steps.
  A method's budget f is fixed in steps for reproducibility: a calibration run of each method
  (seed 0, after an untimed warm-up) measures its set-up seconds S (selector, irreducible-loss
  model) and seconds per step w, and its budget is ``(f * W_random - S) / w`` steps, so that
  its wall matches random's at the same fraction. Every run's wall is measured (set-up,
  selection, scoring forwards, data indexing and the step; the one evaluation excluded) and
  the figures use the measured walls, re-based on random's full-budget wall;
- **schedule**: every run's learning rate warms up linearly over its first 5 % of steps and
  decays to zero by its last step (cosine), whatever the method;
- **figures**, per method and budget: the final metric; its paired difference to random at
  the same budget (mean +- standard error over seeds: seed s of every method shares the
  regime's data and the initial weights); the wall fraction actually spent; and **wall
  saved** = 1 minus the wall fraction of the smallest budget from which on (that budget and
  every larger one) the method reaches random's full-budget metric within 2 standard errors
  of the paired difference (0 when only the full budget reaches it: that budget's wall is
  random's by construction). Random's own shortened runs get the same figure: where random at
  0.7 already reaches its full-budget metric, the full budget was too long, and a method's
  saving beyond random's is the difference (column ``beyond random``).

Tasks (inputs standardized with training statistics; the inputs are the embeddings the
selectors see):

- the fast tier (steps of 0.3-1.5 ms, as cheap as one selection): ``digits-mlp`` (scikit-learn
  digits, MLP 64-64-10, SGD 0.05 momentum 0.9, 300 steps), ``mnist1d-mlp`` (mnist1d 4000,
  MLP 40-128-128-10, Adam 1e-3, 2000 steps), ``mnist1d-cnn`` (1-D CNN, Adam 2e-3, 3000 steps);
- **tasks where the step dominates** (10-30 ms a step at B=128, >= 10x one selection at
  default threads; ``--calibrate-only`` prints the figures): ``mnist1d-resnet``, a residual
  1-D CNN (3 blocks of 32 channels, batch norm) and ``mnist1d-transformer``, a 2-layer
  pre-norm transformer encoder over patches of 4 (d=64, 4 heads), both on mnist1d drawn at
  25,000 examples with the generator's seed 1 (16,000 / 4,000 / 5,000 train / val / test),
  AdamW 2e-3 (chosen on the validation split with random batches), 500 steps of 128.

Regimes (built from the training split afresh for every seed; evaluation labels stay clean):
``clean``; ``noise`` (25 % of the training labels replaced by another class); ``longtail``
(class c keeps ``10 ** (-c / (C - 1))`` of its examples, balanced accuracy); ``redundant``
(near-duplicates, Gaussian noise of 0.05 feature standard deviations: on the fast tier half
the set copies 10 examples; on the large tasks 40 % of the set copies 10 % of the
originals, as scraped data does); ``outliers`` (not in the default run: 10 % of the inputs
moved 3 standard deviations).

Outputs: tables per task and regime on stdout, ``benchmarks/out/bench_quality[_quick].json``
(every run), ``.md`` (the overview of wall saved and every budget's figures) and one PNG per
regime (``<stem>_<regime>.png``: metric against wall seconds, a curve per method through its
budgets). ``--render`` merges the JSON of runs made in parallel (e.g. one task per process).

Run ``python benchmarks/bench_quality.py`` (5 seeds, every task and regime: hours on 2
cores; split tasks over processes and ``--render``) or ``--quick`` (2 seeds, digits, budgets
0.5 and 1.0; what CI runs). ``--split val`` reports on the validation split: defaults are
chosen there, never on the test split. ``--threads`` sets torch's threads (0: torch's
default, as users run it).

``--mpi N`` runs the same protocol data-parallel, as a user of a CPU cluster runs it: this
process launches ``mpiexec -n N`` on this script itself (``--bind-to core``, Open MPI's
default for 2 ranks, or ``--bind-to none``; see ``benchmarks/_mpilaunch.py``); every rank
runs the same tasks, regimes, seeds, budgets and methods in the same order (checked at the
start). torch.distributed (gloo) is set up from MPI; every rank builds the same model from
the seed, wraps it in ``DistributedDataParallel`` and draws its batches of B from
``SelectionBatchSampler(selector, rank=r, world_size=N)``, whose ``observe`` all-gathers the
ranks' feedback every 4 steps (the sampler's default; ``--sync-every``) over the communicator
a DDP script's sampler finds (``--feedback-comm auto``: mpi4py under mpiexec; ``torch``:
gloo, as under torchrun). A step is one optimizer step on N x B examples (learning rate
unscaled), so metrics are not those of one process: compare methods within one run. Budgets
use the slowest rank's calibration; a run's wall is the slowest rank's, its selecting seconds
the ranks' mean (per rank in ``rank_*``); every rank evaluates the model, checked identical.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import batchsel  # noqa: E402
from batchsel.core.io import atomic_write  # noqa: E402
from batchsel.integrations import SelectionBatchSampler  # noqa: E402

# the sampler's default sync_every (what --mpi runs share feedback with unless --sync-every)
SYNC_EVERY = inspect.signature(SelectionBatchSampler).parameters["sync_every"].default

REGIMES = ("clean", "noise", "longtail", "redundant")  # the default run, docs/which-method.md's tables
EXTRA_REGIMES = ("outliers",)
NOISE_RATE = 0.25
IMBALANCE = 10.0
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


def _standardized(
    name: str, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray
) -> Dataset:
    from sklearn.model_selection import train_test_split

    x_tr, x_val, y_tr, y_val = train_test_split(x_train, y_train, test_size=0.2, stratify=y_train, random_state=0)
    mean, std = x_tr.mean(0), x_tr.std(0) + 1e-3
    norm = lambda a: ((a - mean) / std).astype(np.float32)  # noqa: E731
    return Dataset(
        name,
        Split(norm(x_tr), y_tr.astype(np.int64)),
        Split(norm(x_val), y_val.astype(np.int64)),
        Split(norm(x_test), y_test.astype(np.int64)),
        int(y_train.max()) + 1,
    )


def load_dataset(name: str) -> Dataset:
    """``digits`` (1078 / 270 / 449 train / val / test), ``mnist1d`` (3200 / 800 / 1000) or
    ``mnist1d-25k`` (16000 / 4000 / 5000, another generator seed)."""
    if name not in _DATA_CACHE:
        if name in ("digits", "digits-parity"):
            from sklearn.datasets import load_digits
            from sklearn.model_selection import train_test_split

            d = load_digits()
            y = d.target if name == "digits" else d.target % 2  # parity: a 2-class task on the same images
            x_tr, x_te, y_tr, y_te = train_test_split(
                d.data.astype(np.float32), y, test_size=0.25, stratify=y, random_state=0
            )
        elif name == "mnist1d":
            from mnist1d.data import get_dataset_args, make_dataset

            d = make_dataset(get_dataset_args())  # generated offline from the package's templates, seed 42
            x_tr, y_tr, x_te, y_te = d["x"], d["y"], d["x_test"], d["y_test"]
        elif name == "mnist1d-25k":
            from mnist1d.data import get_dataset_args, make_dataset

            spec = get_dataset_args()
            spec.num_samples, spec.seed = 25_000, 1  # 80 % train (then 20 % of it val), 20 % test
            d = make_dataset(spec)
            x_tr, y_tr, x_te, y_te = d["x"], d["y"], d["x_test"], d["y_test"]
        else:
            raise ValueError(f"unknown dataset {name!r}; choose digits, digits-parity, mnist1d or mnist1d-25k")
        _DATA_CACHE[name] = _standardized(name, x_tr, y_tr, x_te, y_te)
    return _DATA_CACHE[name]


def make_regime(
    regime: str, train: Split, num_classes: int, seed: int, duplicate_sources: float = 10, duplicate_share: float = 0.5
) -> tuple[Split, dict[str, Any]]:
    """The training set of ``regime`` for ``seed`` and what was done to it. ``redundant``:
    ``duplicate_share`` of the padded set are near-duplicates of ``duplicate_sources``
    examples (a count, or a share of the training set when below 1)."""
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
        n_sources = round(duplicate_sources * len(y)) if duplicate_sources < 1 else int(duplicate_sources)
        n_dup = round(duplicate_share / (1 - duplicate_share) * len(y))
        sources = rng.choice(len(y), size=n_sources, replace=False)
        which = sources[rng.integers(0, n_sources, size=n_dup)]
        dup = x[which] + DUPLICATE_NOISE * rng.standard_normal((n_dup, x.shape[1])).astype(np.float32)
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
    """A dataset with a model, an optimizer (its peak learning rate) and random's full step
    budget; ``duplicate_*``: the redundant regime's near-duplicates (see make_regime)."""

    name: str
    dataset: str
    model: Callable[[int, int], torch.nn.Module]
    optimizer: Callable[[Any], torch.optim.Optimizer]
    steps: int
    quick_steps: int
    batch_size: int = 32
    duplicate_sources: float = 10
    duplicate_share: float = 0.5


class CNN1d(torch.nn.Module):
    def __init__(self, length: int, num_classes: int, channels: int = 32) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv1d(1, channels, 5, stride=2, padding=2),
            torch.nn.ReLU(),
            torch.nn.Conv1d(channels, channels, 3, stride=2, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv1d(channels, channels, 3, stride=2, padding=1),
            torch.nn.ReLU(),
            torch.nn.Flatten(),
        )
        with torch.no_grad():
            width = self.features(torch.zeros(1, 1, length)).shape[1]
        self.head = torch.nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x.unsqueeze(1)))


class ResidualBlock1d(torch.nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv1d(channels, channels, 3, padding=1),
            torch.nn.BatchNorm1d(channels),
            torch.nn.ReLU(),
            torch.nn.Conv1d(channels, channels, 3, padding=1),
            torch.nn.BatchNorm1d(channels),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.body(x))


class ResNet1d(torch.nn.Module):
    """A residual 1-D CNN: a stem convolution, ``blocks`` residual blocks, global mean pool."""

    def __init__(self, length: int, num_classes: int, channels: int = 32, blocks: int = 3) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(
            torch.nn.Conv1d(1, channels, 5, padding=2), torch.nn.BatchNorm1d(channels), torch.nn.ReLU()
        )
        self.blocks = torch.nn.Sequential(*(ResidualBlock1d(channels) for _ in range(blocks)))
        self.head = torch.nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x.unsqueeze(1))).mean(-1))


class SequenceTransformer(torch.nn.Module):
    """A pre-norm transformer encoder over the sequence cut into patches, mean-pooled."""

    def __init__(self, length: int, num_classes: int, patch: int = 4, width: int = 64, layers: int = 2) -> None:
        super().__init__()
        if length % patch:
            raise ValueError(f"sequence length {length} is not a multiple of the patch {patch}")
        self.patch = patch
        self.embed = torch.nn.Linear(patch, width)
        self.position = torch.nn.Parameter(0.02 * torch.randn(1, length // patch, width))
        layer = torch.nn.TransformerEncoderLayer(width, 4, 2 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.embed(x.reshape(x.shape[0], -1, self.patch)) + self.position
        return self.head(self.encoder(tokens).mean(1))


def mlp(*widths: int) -> Callable[[int, int], torch.nn.Module]:
    def build(d_in: int, num_classes: int) -> torch.nn.Module:
        layers, d = [], d_in
        for w in widths:
            layers += [torch.nn.Linear(d, w), torch.nn.ReLU()]
            d = w
        return torch.nn.Sequential(*layers, torch.nn.Linear(d, num_classes))

    return build


TASKS = {
    "digits-mlp": Task(
        "digits-mlp", "digits", mlp(64), lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9), steps=300, quick_steps=150
    ),
    "mnist1d-mlp": Task(
        "mnist1d-mlp", "mnist1d", mlp(128, 128), lambda p: torch.optim.Adam(p, lr=1e-3), steps=2000, quick_steps=400
    ),
    "mnist1d-cnn": Task(
        "mnist1d-cnn",
        "mnist1d",
        lambda d, c: CNN1d(d, c),
        lambda p: torch.optim.Adam(p, lr=2e-3),
        steps=3000,
        quick_steps=400,
    ),
    # the demo's task: digits with a step of ~2 ms, several times a loss-rank selection
    "digits-wide": Task(
        "digits-wide",
        "digits",
        mlp(512, 512),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
        steps=150,
        quick_steps=150,
        batch_size=64,
    ),
    # the step dominates: 10-30 ms at B=128, >= 10x one selection (--calibrate-only)
    "mnist1d-resnet": Task(
        "mnist1d-resnet",
        "mnist1d-25k",
        lambda d, c: ResNet1d(d, c),
        lambda p: torch.optim.AdamW(p, lr=2e-3),
        steps=500,
        quick_steps=100,
        batch_size=128,
        duplicate_sources=0.1,
        duplicate_share=0.4,
    ),
    "mnist1d-transformer": Task(
        "mnist1d-transformer",
        "mnist1d-25k",
        lambda d, c: SequenceTransformer(d, c),
        lambda p: torch.optim.AdamW(p, lr=2e-3),
        steps=500,
        quick_steps=100,
        batch_size=128,
        duplicate_sources=0.1,
        duplicate_share=0.4,
    ),
    # a 2-class task (even / odd digits), not in the default run: checks that a rule chosen on
    # the 10-class tasks carries over to 2 classes
    "parity-mlp": Task(
        "parity-mlp",
        "digits-parity",
        mlp(64),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
        steps=300,
        quick_steps=150,
    ),
}
DEFAULT_TASKS = ("digits-mlp", "mnist1d-mlp", "mnist1d-cnn", "mnist1d-resnet", "mnist1d-transformer")


# -- methods ---------------------------------------------------------------------------
def make_selector(
    method: str, train: Split, batch_size: int, seed: int, steps: int = 1, world_size: int = 1
) -> batchsel.Selector:
    """Every method at its defaults (a ``--variant`` adds keyword arguments); the
    embeddings are the inputs. A pruning selector (epochs of different lengths) is built for
    the fewest epochs that hold ``steps`` batches per rank; the run stops after ``steps``,
    inside its last epoch (whole epochs would move its wall off the budget; InfoBatch with
    its last, annealing epoch cut short measured the same on the validation split). InfoBatch
    gets the training labels (pruning within classes); the variant option ``labels=False``
    runs InfoBatch's own rule over all examples."""
    base, options = VARIANTS.get(method, (method, {}))
    # prefetch: the sampler's, not the selector's; seed_offset: another draw of the same method
    # (random with seed_offset beside random is the A/A control: how many W / B cells chance makes)
    seed += int(options.get("seed_offset", 0))
    options = {k: v for k, v in options.items() if k not in ("prefetch", "seed_offset")}
    n = len(train.y)
    if base in FILTERS:  # candidates for the filter: random batches of its candidate size
        return batchsel.RandomSelector(n, batch_size, seed=seed)
    if base == "random":
        return batchsel.RandomSelector(n, batch_size, seed=seed, **options)
    if base == "smdl":
        return batchsel.SubmodularSelector(train.x, batch_size, seed=seed, **options)
    if base == "loss-rank":
        if options.get("anneal_batches") == "run":  # the pressure decays to 1 over the run's steps
            options["anneal_batches"] = steps
        return batchsel.LossRankSelector(n, batch_size, seed=seed, **options)
    if base == "auto":  # with the labels, as a classifier's user passes them
        return batchsel.AutoSelector(n, batch_size, labels=train.y, seed=seed, **options)
    if base == "coreset":
        return batchsel.CoresetSelector(train.x, train.y, batch_size, **{"fraction": 0.5, **options}, seed=seed)
    if base in ("infobatch", "score-pruning"):

        def build(epochs: int) -> batchsel.Selector:
            if base == "infobatch":
                # with the labels, as a classifier's user passes them (labels=False: InfoBatch's own rule)
                labels = {"labels": train.y} if options.get("labels", True) is not False else {}
                rest = {k: v for k, v in options.items() if k not in ("labels", "anneal_last_epoch")}
                if options.get("anneal_last_epoch"):
                    # infobatch_last_epoch_val's variant: the paper's rule (the default then) with the
                    # last epoch whole, also in runs of <= 7 epochs; the default rule (InfoBatch's code)
                    # keeps the last epoch whole anyway, with these plans in runs of up to 8 epochs
                    default = batchsel.InfoBatchSelector.__init__.__kwdefaults__["anneal"]
                    rest["anneal"] = min(rest.get("anneal", default), (epochs - 1) / epochs)
                    rest.setdefault("anneal_rule", "paper")
                return batchsel.InfoBatchSelector(n, batch_size, epochs=epochs, seed=seed, **labels, **rest)
            return batchsel.ScorePruningSelector(train.y, batch_size, epochs=epochs, seed=seed, **options)

        epochs = 1 if base == "infobatch" else 2  # score pruning: a scoring epoch, then pruned ones
        while build(epochs).total_batches(world_size) < steps:
            epochs += 1
        return build(epochs)
    if base in ("dedup", "dedup-loss-rank"):  # over the rows batchsel.deduplicate keeps (its time is set-up)
        keep = batchsel.deduplicate(train.x, options.get("threshold", 0.95), progress=False).keep
        inner: batchsel.Selector = (
            batchsel.RandomSelector(len(keep), batch_size, seed=seed)
            if base == "dedup"
            else batchsel.LossRankSelector(len(keep), batch_size, seed=seed)
        )
        return KeptRows(keep, n, inner, seed=seed)
    raise ValueError(f"unknown method {method!r}; choose from {METHODS}")


class KeptRows(batchsel.Selector):
    """``inner``'s batches over a subset of the rows (``keep``), in the full set's indices:
    what a user gets from ``Subset(data, keep)`` with ``inner`` (random batches: a
    ``DataLoader(shuffle=True)``); feedback is mapped to ``inner``'s indices."""

    def __init__(self, keep: np.ndarray, num_examples: int, inner: batchsel.Selector, *, seed: int = 0) -> None:
        super().__init__(num_examples, inner.batch_size, seed=seed)
        self.keep = np.asarray(keep, dtype=np.int64)
        self.inner = inner
        self._local = np.full(num_examples, -1, dtype=np.int64)
        self._local[self.keep] = np.arange(len(self.keep))

    def capabilities(self) -> batchsel.selectors.SelectorCapabilities:
        return self.inner.capabilities()  # the sampler reads these: the inner selector's behaviour

    @property
    def epoch_examples(self) -> int:
        return self.inner.epoch_examples

    def get_params(self) -> dict[str, Any]:
        return {"keep": self.keep, "num_examples": self.num_examples, "inner": repr(self.inner), "seed": self.seed}

    def iter_batches(self, epoch: int, rank: int = 0, world_size: int = 1, start: int = 0) -> Iterator[np.ndarray]:
        for batch in self.inner.iter_batches(epoch, rank, world_size, start=start):
            yield self.keep[batch]

    def plan(self, epoch: int = 0, world_size: int = 1) -> "batchsel.EpochPlan":
        inner = self.inner.plan(epoch, world_size)
        return batchsel.EpochPlan(
            [[self.keep[b] for b in inner.batches(r)] for r in range(world_size)],
            num_examples=self.num_examples,
            epoch=epoch,
            seed=self.seed,
            method=f"kept rows, {inner.method}",
        )

    def num_batches(self, world_size: int = 1) -> int:
        return self.inner.num_batches(world_size)

    def observe(self, indices: Any, losses: Any = None, logits: Any = None, embeddings: Any = None) -> None:
        self.inner.observe(self._local[np.asarray(indices)], losses=losses, logits=logits, embeddings=embeddings)

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)


# In-loop candidate filters (batchsel.CandidateFilter): random candidate batches of ratio x B,
# a no-grad forward scores them, the step trains on the B kept (its cost counts as selecting).
FILTERS = {
    "loss-filter": {"score": "loss"},
    "gradnorm-filter": {"score": "gradnorm"},
    "rho-filter": {"score": "rho"},
    "rho-diverse": {"score": "rho", "diversity": 1.0},
    # Selective-Backprop (Jiang et al. 2019): beta=1, half of 2B candidates by loss percentile
    "selective-backprop": {"score": "loss", "pick": "percentile", "beta": 1.0, "ratio": 2.0, "uniform_fraction": 0.0},
}
METHODS = (
    "random",
    "smdl",
    "loss-rank",
    "auto",
    "coreset",
    "infobatch",
    "score-pruning",
    "dedup",
    "dedup-loss-rank",
    *FILTERS,
)
DEFAULT_METHODS = (
    "random",
    "smdl",
    "loss-rank",
    "coreset",
    "infobatch",
    "score-pruning",
    "loss-filter",
    "gradnorm-filter",
    "rho-filter",
    "selective-backprop",
)
LABELS = {
    "random": "random",
    "smdl": "SMDL",
    "loss-rank": "loss-rank",
    "auto": "AutoSelector",
    "coreset": "CRAIG coreset (50%)",
    "infobatch": "InfoBatch pruning",
    "score-pruning": "EL2N + CCS pruning",
    "dedup": "random on the deduplicated set",
    "dedup-loss-rank": "loss-rank on the deduplicated set",
    "loss-filter": "loss filter",
    "gradnorm-filter": "gradnorm filter",
    "rho-filter": "RHO-LOSS filter",
    "rho-diverse": "RHO + diversity",
    "selective-backprop": "Selective-Backprop",
}


def make_filter(
    method: str, train: Split, batch_size: int, seed: int, task: Task | None = None
) -> batchsel.CandidateFilter | None:
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
        options = {
            k.strip(): ast.literal_eval(v.strip())
            for k, v in (item.split("=", 1) for item in opts.split(";") if item.strip())
        }
    except (ValueError, SyntaxError) as exc:
        raise ValueError(f"--variant must look like NAME=METHOD:key=value;key=value, got {text!r} ({exc})") from None
    if method not in METHODS:
        raise ValueError(f"--variant {text!r}: unknown method {method!r}; choose from {METHODS}")
    return name.strip(), method, options


# -- one run ---------------------------------------------------------------------------
WARMUP_SHARE = 0.05  # of a run's steps: linear warm-up, then cosine decay to zero at its last step


def metric(model: torch.nn.Module, split: Split, balanced: bool) -> float:
    with torch.no_grad():
        pred = model(torch.from_numpy(split.x)).argmax(1).numpy()
    if not balanced:
        return float((pred == split.y).mean())
    return float(np.mean([(pred[split.y == c] == c).mean() for c in np.unique(split.y)]))


def lr_schedule(optimizer: torch.optim.Optimizer, steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """The optimizer's learning rate warmed up linearly over the first ``WARMUP_SHARE`` of
    ``steps`` and decayed (cosine) to zero once ``steps`` steps are taken: a run of known length."""
    warm = max(1, round(WARMUP_SHARE * steps))

    def factor(taken: int) -> float:
        if taken < warm:
            return (taken + 1) / warm
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (taken - warm + 1) / (steps - warm + 1))))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def train_run(
    task: Task,
    method: str,
    train: Split,
    evaluation: Split,
    num_classes: int,
    seed: int,
    steps: int,
    balanced: bool,
    comm: Any = None,
    sync_every: int | None = None,
) -> dict[str, Any]:
    """Train ``task``'s model on ``train`` with ``method``'s batches for ``steps`` steps, its
    learning rate decayed over them, and evaluate it once at the end.

    The wall seconds count the set-up (selector, sampler, candidate filter with its
    irreducible-loss model), every batch drawn, scored and fed back, and every step; not the
    evaluation. ``comm`` (``--mpi``: the communicator of an initialized torch.distributed
    group): this rank trains a DistributedDataParallel copy of the model on its own batches
    of B, feedback is all-gathered by the sampler every ``sync_every`` steps (None: the
    sampler's default), and the figures returned are the slowest rank's (wall and set-up
    seconds: maxima over ranks; selecting seconds: the mean; per rank in ``rank_*``)."""
    torch.manual_seed(seed)  # the same initial weights for every method of a seed (and on every rank)
    model = task.model(train.x.shape[1], num_classes)
    net = model
    if comm is not None:  # gradients averaged over the ranks in backward, as a DDP user's are
        net = torch.nn.parallel.DistributedDataParallel(model)
    opt = task.optimizer(model.parameters())
    schedule = lr_schedule(opt, steps)
    t0 = time.perf_counter()
    filt = make_filter(method, train, task.batch_size, seed, task)  # fits the IL model: part of the cost
    fitted = filt  # keeps the IL figures when the guard drops the filter
    if filt is not None and filt.guard_ == "uniform":
        filt = None  # the IL model is near chance: random batches of B, exactly the anchor's
    rank, world = (0, 1) if comm is None else (comm.rank, comm.size)
    selector = make_selector(method, train, filt.candidate_size if filt else task.batch_size, seed, steps, world)
    base, options = VARIANTS.get(method, (method, {}))
    weighted = selector.weighted_plans  # (index, weight) pairs: coresets, InfoBatch
    # prefetch=N (a variant option; default: the sampler's, one batch ahead for online
    # selectors): selection runs N batches ahead, in the sampler's thread where a core is free
    shared = {} if sync_every is None else {"sync_every": sync_every}
    if "prefetch" in options:
        shared["prefetch"] = int(options["prefetch"])
    sampler = SelectionBatchSampler(selector, rank=rank, world_size=world, comm=comm, weighted=weighted, **shared)
    setup = time.perf_counter() - t0
    if comm is not None:
        sampler.verify()  # every rank built the same selector (data, seed, settings): else it raises
        comm.barrier()  # untimed: the ranks start the loop together
    x, y = torch.from_numpy(train.x), torch.from_numpy(train.y)
    step, epoch, select, observed = 0, 0, setup, 0.0
    loop_start = time.perf_counter()
    while step < steps:
        sampler.set_epoch(epoch)
        batches = iter(sampler)
        while step < steps:
            t0 = time.perf_counter()
            item = next(batches, None)
            if item is None:
                break
            # through numpy: torch.tensor(list) costs 10 us a batch, as much as a 64-row step's sampler
            if weighted:  # a WeightedBatch: its arrays, as a loop that indexes tensors uses them
                ib, wb = torch.from_numpy(item.indices), torch.from_numpy(item.weights)
            else:
                ib, wb = torch.from_numpy(np.array(item)), None
            if filt is not None:  # score the candidates, keep B of them
                with torch.no_grad():
                    candidate_logits = model(x[ib])  # the module itself: no DDP hooks for a no-grad forward
                keep = filt(ib, candidate_logits, y[ib], embeddings=x[ib] if filt.diversity else None)
                ib = ib[torch.from_numpy(keep)]
            t1 = time.perf_counter()
            logits = net(x[ib])
            losses = F.cross_entropy(logits, y[ib], reduction="none")
            # weighted plans: CRAIG's weighted mean, InfoBatch's mean of up-weighted losses
            loss = losses.mean() if wb is None else selector.weighted_loss(losses, wb)
            opt.zero_grad()
            loss.backward()  # under DDP: the gradient all-reduce
            opt.step()
            schedule.step()
            t2 = time.perf_counter()
            if filt is None:
                sampler.observe(ib, losses=losses.detach(), logits=logits.detach())  # under --mpi: all-gathered
            t3 = time.perf_counter()
            select += (t1 - t0) + (t3 - t2)
            observed += t3 - t2  # part of select: under --mpi, the feedback's all-gather
            step += 1
        epoch += 1
    batches.close()  # stops a prefetch thread still selecting ahead
    wall = setup + time.perf_counter() - loop_start
    model.eval()
    final = metric(model, evaluation, balanced)
    extra = (
        {}
        if fitted is None
        else {"il_accuracy": fitted.il_accuracy_, "il_skill": fitted.il_skill_, "guard": fitted.guard_}
    )
    if comm is not None:
        # the slower rank sets the pace: walls are maxima over ranks; the ranks must hold the same model
        every = np.stack(comm.allgather(np.array([wall, select, observed, setup], dtype=np.float64)))
        params = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
        checks = comm.allgather(np.array([params.sum(dtype=np.float64), np.abs(params).sum(dtype=np.float64)]))
        if not all(np.array_equal(c, checks[0]) for c in checks):
            raise RuntimeError(f"ranks ended {task.name} / {method} / seed {seed} with different models: {checks}")
        extra.update(
            rank_wall_seconds=every[:, 0].tolist(),
            rank_select_seconds=every[:, 1].tolist(),
            rank_observe_seconds=every[:, 2].tolist(),
        )
        wall, select, observed, setup = (
            float(every[:, 0].max()),
            float(every[:, 1].mean()),
            float(every[:, 2].mean()),
            float(every[:, 3].max()),
        )
    return {
        "final": final,
        "wall_seconds": wall,
        "setup_seconds": setup,
        "select_seconds": select,
        "observe_seconds": observed,
        "epochs": epoch,
        "steps": step,
        "last_lr": opt.param_groups[0]["lr"],
        "prefetch": sampler.prefetch,
        **extra,
    }


# -- budgets ---------------------------------------------------------------------------
def calibrate(
    task: Task,
    methods: list[str],
    train: Split,
    evaluation: Split,
    num_classes: int,
    steps: int,
    balanced: bool,
    comm: Any = None,
    sync_every: int | None = None,
    warm_up: bool = True,
    min_seconds: float = 1.0,
) -> dict[str, dict[str, float]]:
    """Each method's set-up seconds and seconds per step, from a run of ``steps`` steps
    (seed 0) after an untimed warm-up of 10 steps (JIT compilation, first-use costs); under
    ``--mpi`` the slowest rank's, so every rank derives the same budgets.

    A method's step is random's training step (the same model on B examples) plus its own
    selecting per step (drawing, scoring forwards, ``observe``): timing noise in the
    training step, which is the same for all, then cancels out of the budgets. Selection
    that overlaps the step (a ``prefetch`` thread) shows little selecting on the training
    thread and may slow the step itself: the step of a method with a prefetch thread is
    therefore at least its measured one's excess over random's (not for the others, whose
    excess would add only the medians' noise).

    Short runs time badly (a 50-step run of a 0.4 ms step lasts 20 ms): the methods are
    timed in interleaved rounds until random's runs add up to ``min_seconds`` (3 to 9
    rounds), and each figure is the median over the rounds."""
    if warm_up:
        for m in methods:
            train_run(task, m, train, evaluation, num_classes, 0, min(10, steps), balanced, comm, sync_every)
    rounds: dict[str, list[dict[str, float]]] = {m: [] for m in methods}
    threaded: dict[str, int] = {}  # the sampler's prefetch depth: a thread may select beside the step
    while True:
        for m in methods:  # interleaved: drift hits every method alike
            run = train_run(task, m, train, evaluation, num_classes, 0, steps, balanced, comm, sync_every)
            threaded[m] = run["prefetch"]
            rounds[m].append(
                {
                    "setup_seconds": run["setup_seconds"],
                    "measured_step_seconds": (run["wall_seconds"] - run["setup_seconds"]) / run["steps"],
                    "select_seconds_per_step": (run["select_seconds"] - run["setup_seconds"]) / run["steps"],
                    "wall_seconds": run["wall_seconds"],
                }
            )
        # under --mpi the walls are the slowest rank's already: every rank stops alike
        timed = sum(r["wall_seconds"] for r in rounds["random"])
        if len(rounds["random"]) >= 9 or (len(rounds["random"]) >= 3 and timed >= min_seconds):
            break
    costs: dict[str, dict[str, float]] = {
        m: {key: float(np.median([r[key] for r in rs])) for key in rs[0] if key != "wall_seconds"}
        for m, rs in rounds.items()
    }
    for m, rs in rounds.items():
        costs[m]["calibration_rounds"] = len(rs)
        costs[m]["prefetch"] = threaded[m]
    training = costs["random"]["measured_step_seconds"] - costs["random"]["select_seconds_per_step"]
    for c in costs.values():
        excess = c["measured_step_seconds"] - costs["random"]["measured_step_seconds"]
        # the excess only where a thread selects beside the step: elsewhere all selecting is
        # timed on the training thread, and the excess of two noisy medians only adds noise
        # (a 0.6 ms excess on a 15 ms step once cost InfoBatch 5 % of its wall)
        own = max(c["select_seconds_per_step"], excess) if c["prefetch"] else c["select_seconds_per_step"]
        c["step_seconds"] = training + own
    return costs


def budget_steps(costs: dict[str, dict[str, float]], method: str, full_steps: int, fraction: float) -> int:
    """The steps of ``method``'s run at ``fraction`` of random's full wall: random's is
    ``fraction * full_steps``; another method's fills the same seconds at its own cost."""
    if method == "random":
        return max(1, round(fraction * full_steps))
    anchor, own = costs["random"], costs[method]
    seconds = fraction * (anchor["setup_seconds"] + full_steps * anchor["step_seconds"])
    return max(1, round((seconds - own["setup_seconds"]) / own["step_seconds"]))


# -- figures ---------------------------------------------------------------------------
def budget_key(fraction: float) -> str:
    return f"{fraction:g}"


def mean_se(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    v = np.asarray(values, dtype=np.float64)
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else 0.0


def summarize(runs: dict[str, dict[str, list[dict]]], methods: list[str], budgets: list[float]) -> dict[str, Any]:
    """Figures of one (task, regime); ``runs[method][budget_key][i]`` is seed i. The target
    is random's mean full-budget metric; wall fractions are of random's mean full-budget wall."""
    full = runs["random"][budget_key(1.0)]
    target = float(np.mean([r["final"] for r in full]))
    anchor_wall = float(np.mean([r["wall_seconds"] for r in full]))
    rows = {}
    for m in methods:
        cells = {}
        for f in budgets:
            mine, same = runs[m][budget_key(f)], runs["random"][budget_key(f)]
            finals = [r["final"] for r in mine]
            diff, diff_se = mean_se([a - b["final"] for a, b in zip(finals, same)])
            gap, gap_se = mean_se([a - b["final"] for a, b in zip(finals, full)])
            walls = [r["wall_seconds"] for r in mine]
            cells[budget_key(f)] = {
                "final_mean": float(np.mean(finals)),
                "final_per_seed": finals,
                "diff_mean": diff,
                "diff_se": diff_se,  # against random at the same budget
                "gap_mean": gap,
                "gap_se": gap_se,  # against random's full budget (the target)
                "reached": gap + 2 * gap_se >= 0,
                "wall_fraction": float(np.mean(walls)) / anchor_wall,
                "wall_fraction_per_seed": [w / anchor_wall for w in walls],
                "steps": mine[0]["steps"],
                "epochs": mine[0]["epochs"],
                "select_share": float(sum(r["select_seconds"] for r in mine) / max(sum(walls), 1e-12)),
                "better": diff > max(0.0, 2 * diff_se),
                "worse": diff < min(0.0, -2 * diff_se),
            }
        reached_at = None  # the smallest budget from which on every budget reaches the target
        for f in sorted(budgets, reverse=True):
            if not cells[budget_key(f)]["reached"]:
                break
            reached_at = f
        # reached only at the full budget: no saving (its wall is random's by construction; the
        # few per cent it lands off are the calibration's noise, not a saving or a loss)
        saved = (
            None
            if reached_at is None
            else 0.0
            if reached_at == budgets[-1]
            else 1.0 - cells[budget_key(reached_at)]["wall_fraction"]
        )
        rows[m] = {
            "budgets": cells,
            "reached_at": reached_at,
            "wall_saved": saved,
            "worse_at": [f for f in budgets if cells[budget_key(f)]["worse"]],
            "better_at": [f for f in budgets if cells[budget_key(f)]["better"]],
        }
    own = rows["random"]["wall_saved"]
    for m in methods:
        saved = rows[m]["wall_saved"]
        rows[m]["beyond_random"] = None if saved is None else saved - own
    return {"target": target, "random_wall_seconds": anchor_wall, "rows": rows}


def _saved_text(row: dict) -> str:
    if row["wall_saved"] is None:
        return "never"
    return f"{100 * row['wall_saved']:.0f} %"


def print_table(task: str, regime: str, summary: dict, methods: list[str], budgets: list[float], header: str) -> None:
    rows = summary["rows"]
    print(
        f"\n{task} / {regime}: {header}\ntarget = random's full-budget {100 * summary['target']:.2f}, "
        f"random's full wall {summary['random_wall_seconds']:.2f} s; per budget: metric, "
        f"difference to random at that budget (pt, +- s.e.), wall fraction spent"
    )
    head = (
        f"{'method':<20}"
        + "".join(f"{'budget ' + budget_key(f):>30}" for f in budgets)
        + f"{'wall saved':>12}{'beyond random':>15}"
    )
    print(head)
    print("-" * len(head))
    for m in methods:
        cells = []
        for f in budgets:
            c = rows[m]["budgets"][budget_key(f)]
            diff = "" if m == "random" else f" {100 * c['diff_mean']:+.1f}+-{100 * c['diff_se']:.1f}"
            cells.append(f"{100 * c['final_mean']:.1f}{diff} @{c['wall_fraction']:.2f}")
        beyond = rows[m]["beyond_random"]
        print(
            f"{LABELS.get(m, m):<20}" + "".join(f"{c:>30}" for c in cells) + f"{_saved_text(rows[m]):>12}"
            f"{'-' if beyond is None else f'{100 * beyond:+.0f} % wall':>15}"
        )


def overview(results: dict, methods: list[str]) -> str:
    """(task, regime) x method: wall saved at random's full-budget metric (within 2 s.e.),
    the method's beyond random's own shortened runs in brackets; W / B: worse / better than
    random at some equal wall budget, beyond 2 s.e."""
    others = [m for m in methods if m != "random"]
    lines = [
        "| task, regime | random: full-budget metric, wall saved | "
        + " | ".join(LABELS.get(m, m) for m in others)
        + " |",
        "| --- | --- |" + " --- |" * len(others),
    ]
    for task, by_regime in results.items():
        for regime, res in by_regime.items():
            rows = res["summary"]["rows"]
            cells = []
            for m in others:
                row = rows[m]
                text = _saved_text(row)
                if row["beyond_random"] is not None:
                    text += f" ({100 * row['beyond_random']:+.0f} % beyond random)"
                tag = ("W" if row["worse_at"] else "") + ("B" if row["better_at"] else "")
                cells.append(text + (f" **{tag}**" if tag else ""))
            lines.append(
                f"| {task}, {regime} | {100 * res['summary']['target']:.1f} %, "
                f"{_saved_text(rows['random'])} | " + " | ".join(cells) + " |"
            )
    return "\n".join(lines) + "\n" + chance_line(results, others)


def chance_line(results: dict, methods: list[str]) -> str:
    """How many (task, regime, budget) cells each method has marked W and B, its mean
    difference to random over them and the cells below random, beside the number of W a
    method no different from random gets by chance: a paired difference over S seeds lies
    beyond 2 of its standard errors, on either side, with probability ``t.cdf(-2, S - 1)``
    (0.058 at 5 seeds)."""
    from scipy.stats import t as student_t

    if not methods:
        return ""
    counts, seeds, cells = [], set(), 0
    for m in methods:
        marked = [
            c
            for by_regime in results.values()
            for res in by_regime.values()
            for c in res["summary"]["rows"][m]["budgets"].values()
        ]
        cells = len(marked)
        seeds.update(len(c["final_per_seed"]) for c in marked)
        diffs = np.array([c["diff_mean"] for c in marked])
        counts.append(
            f"{LABELS.get(m, m)} W {sum(c['worse'] for c in marked)}, B {sum(c['better'] for c in marked)}, "
            f"{100 * diffs.mean():+.2f} pt on average, below random in {int((diffs < 0).sum())}"
        )
    s = min(seeds)
    chance = float(student_t.cdf(-2.0, s - 1))
    return (
        f"\nCells (task, regime, budget) marked, of {cells} per method: {'; '.join(counts)}. "
        f"A method no different from random is marked W in about {chance * cells:.1f} of them "
        f"by chance, and B in as many ({s} seeds: {100 * chance:.1f} % a cell).\n"
    )


def markdown(results: dict, methods: list[str], budgets: list[float]) -> str:
    """Every figure: per task, regime, method and budget, the metric, its difference to
    random at that budget and to random's full budget, the steps and the wall fraction."""
    lines = [
        "| task | regime | method | budget | steps | wall x random's full | metric % "
        "| vs random, same budget (pt) | vs random's full budget (pt) | selecting |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for task, by_regime in results.items():
        for regime, res in by_regime.items():
            for m in methods:
                for f in budgets:
                    c = res["summary"]["rows"][m]["budgets"][budget_key(f)]
                    same = "" if m == "random" else f"{100 * c['diff_mean']:+.2f} ± {100 * c['diff_se']:.2f}"
                    flag = " **W**" if c["worse"] else (" **B**" if c["better"] else "")
                    lines.append(
                        f"| {task} | {regime} | {LABELS.get(m, m)} | {budget_key(f)} | {c['steps']} "
                        f"| {c['wall_fraction']:.2f} | {100 * c['final_mean']:.2f} | {same}{flag} "
                        f"| {100 * c['gap_mean']:+.2f} ± {100 * c['gap_se']:.2f}"
                        f"{' (reached)' if c['reached'] else ''} | {100 * c['select_share']:.0f} % |"
                    )
    return "\n".join(lines) + "\n"


def costs_markdown(results: dict, methods: list[str]) -> str:
    """Each task's calibration (clean regime, or the first one run): ms per step, of it
    selecting, random's step over the method's selection per step, and the method's
    measured step over random's (the anchor, measured in the same run)."""
    lines = [
        "| task | threads | method | set-up s | ms per step (measured) | ms per step (budgets) "
        "| selecting ms per step | random's step / selecting | step x random's (measured) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for task, by_regime in results.items():
        regime = "clean" if "clean" in by_regime else next(iter(by_regime))
        costs, threads = by_regime[regime]["costs"], by_regime[regime].get("threads", "?")
        step = costs["random"]["step_seconds"]
        for m in methods:
            c = costs[m]
            sel = c["select_seconds_per_step"]
            lines.append(
                f"| {task} | {threads} | {LABELS.get(m, m)} | {c['setup_seconds']:.2f} "
                f"| {1e3 * c['measured_step_seconds']:.2f} | {1e3 * c['step_seconds']:.2f} | {1e3 * sel:.3f} "
                f"| {'-' if m == 'random' else f'{step / max(sel, 1e-9):.0f}x'} "
                f"| {c['measured_step_seconds'] / costs['random']['measured_step_seconds']:.3f}x |"
            )
    return "\n".join(lines) + "\n"


def plot(results: dict, methods: list[str], budgets: list[float], stem: str) -> list[str]:
    """One PNG per regime, ``<stem>_<regime>.png``: a panel per task, the metric against wall
    seconds, a curve per method through its budgets (mean over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(results)
    regimes = sorted({r for by_regime in results.values() for r in by_regime})
    paths = []
    for regime in regimes:
        present = [t for t in tasks if regime in results[t]]
        fig, axes = plt.subplots(1, len(present), figsize=(4.2 * len(present), 3.4), squeeze=False)
        for ax, task in zip(axes[0], present):
            res = results[task][regime]
            for m in methods:
                runs = res["runs"][m]
                walls = [np.mean([r["wall_seconds"] for r in runs[budget_key(f)]]) for f in budgets]
                values = [np.mean([r["final"] for r in runs[budget_key(f)]]) for f in budgets]
                ax.plot(walls, values, marker="o", ms=3, lw=1.2 if m != "random" else 2.2, label=LABELS.get(m, m))
            ax.axhline(res["summary"]["target"], color="grey", lw=0.6, ls=":")
            ax.set_title(f"{task} / {regime}", fontsize=9)
            ax.set_xlabel("wall seconds (budget)", fontsize=8)
            ax.set_ylabel(res["metric"], fontsize=8)
            ax.tick_params(labelsize=7)
        axes[0][0].legend(fontsize=6)
        fig.tight_layout()
        path = f"{stem}_{regime}.png"
        with atomic_write(path, "wb") as f:
            fig.savefig(f, format="png", dpi=80)
        plt.close(fig)
        paths.append(path)
    return paths


# -- main ------------------------------------------------------------------------------
def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def write_outputs(stem: str, payload: dict, methods: list[str], budgets: list[float]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(stem)), exist_ok=True)
    # when and with what the figures were measured: the docs print it beside the tables they generate
    # (a new run: now; --render keeps its inputs' entry)
    payload.setdefault("measured", {"date": time.strftime("%Y-%m-%d"), "version": batchsel.__version__})
    with atomic_write(stem + ".json", "w") as f:
        json.dump(_jsonable(payload), f)
    pngs = plot(payload["results"], methods, budgets, stem)
    with atomic_write(stem + ".md", "w") as f:
        f.write(
            overview(payload["results"], methods)
            + "\n"
            + costs_markdown(payload["results"], methods)
            + "\n"
            + markdown(payload["results"], methods, budgets)
        )
    print(f"wrote {stem}.json, {stem}.md and {', '.join(os.path.basename(p) for p in pngs)}")


def parse_budgets(text: str) -> list[float]:
    try:
        budgets = sorted({float(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise ValueError(f"--budgets must be comma-separated fractions, got {text!r}") from None
    if not budgets or budgets[-1] != 1.0 or budgets[0] <= 0:
        raise ValueError(f"--budgets must be fractions in (0, 1] that include 1 (random's full run), got {text!r}")
    return budgets


def render(paths: list[str], stem: str) -> dict:
    """Merge the results of several runs with the same methods, seeds and budgets."""
    results, args, total, measured = {}, None, 0.0, []
    for path in paths:
        with open(path) as f:
            payload = json.load(f)
        keys = ("methods", "seeds", "budgets", "split")
        if args is not None and any(payload["args"][k] != args[k] for k in keys):
            raise ValueError(
                f"{path} ran { ({k: payload['args'][k] for k in keys}) }; {paths[0]} ran "
                f"{ ({k: args[k] for k in keys}) }"
            )
        args = args or payload["args"]
        for task, by_regime in payload["results"].items():
            results.setdefault(task, {}).update(by_regime)
        total += payload["total_seconds"]
        measured.append(payload.get("measured"))
    for text in args.get("variant", []):
        name, method, options = parse_variant(text)
        VARIANTS[name], LABELS[name] = (method, options), name
    methods = [m.strip() for m in args["methods"].split(",") if m.strip()]
    for by_regime in results.values():  # the figures anew from the runs (as this version computes them)
        for entry in by_regime.values():
            if "runs" in entry:
                entry["summary"] = summarize(entry["runs"], methods, parse_budgets(args["budgets"]))
    write_outputs(
        stem,
        # merged runs were measured when their own runs were, not now (None: not recorded)
        {
            "args": args,
            "results": results,
            "total_seconds": total,
            "merged_from": paths,
            "measured": None if None in measured else max(measured, key=lambda m: m["date"]),
        },
        methods,
        parse_budgets(args["budgets"]),
    )
    return results


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default=",".join(DEFAULT_TASKS), help=f"comma-separated, from {list(TASKS)}")
    parser.add_argument("--regimes", default=",".join(REGIMES))
    parser.add_argument(
        "--methods",
        default=",".join(DEFAULT_METHODS),
        help=f"comma-separated, from {list(METHODS)} (every method at its defaults; "
        "rho-diverse is RHO-LOSS with diversity 1)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=METHOD:k=v;k=v",
        help="a method with other settings, run as NAME (add NAME to --methods)",
    )
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="seeds are first-seed .. first-seed + seeds - 1 (fresh seeds replicate a run's cells)",
    )
    parser.add_argument(
        "--budgets", default="0.3,0.5,0.7,1.0", help="wall budgets as fractions of random's full run (must include 1)"
    )
    parser.add_argument(
        "--split",
        choices=("test", "val"),
        default="test",
        help="evaluate on the test split (report) or the validation split (choose defaults)",
    )
    parser.add_argument("--steps-scale", type=float, default=1.0, help="multiply every task's full step budget")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--quick", action="store_true", help="2 seeds, digits only, budgets 0.5 and 1 (CI)")
    parser.add_argument(
        "--calibrate-only",
        action="store_true",
        help="measure every method's cost per step (clean regime) and write the cost table only",
    )
    parser.add_argument("--out", default=None, help="output stem (default benchmarks/out/bench_quality[_quick])")
    parser.add_argument(
        "--render",
        nargs="+",
        metavar="JSON",
        default=None,
        help="train nothing: merge these outputs (e.g. tasks run in parallel) into --out's .json / .md / .png",
    )
    parser.add_argument(
        "--mpi",
        type=int,
        default=0,
        metavar="N",
        help="run every method data-parallel on N ranks under mpiexec (launched from here; DDP "
        "over gloo, per-rank batch B); default output stem "
        "benchmarks/out/bench_quality[_quick]_mpiN",
    )
    parser.add_argument(
        "--feedback-comm",
        choices=("auto", "torch", "mpi"),
        default="auto",
        help="with --mpi: the communicator the samplers all-gather feedback over: auto (what a "
        "DDP script's sampler finds: get_communicator('auto'), mpi4py here), torch "
        "(torch.distributed's gloo group, as under torchrun) or mpi (mpi4py)",
    )
    parser.add_argument(
        "--sync-every",
        type=int,
        default=None,
        help="with --mpi: the samplers' sync_every (feedback all-gathered every K steps; default: the sampler's, 4)",
    )
    parser.add_argument(
        "--bind-to",
        default="core",
        help="with --mpi: mpiexec's --bind-to (core, Open MPI's default for 2 ranks; none: the OS places the ranks)",
    )
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
        if args.budgets == parser.get_default("budgets"):
            args.budgets = "0.5,1.0"
    try:
        budgets = parse_budgets(args.budgets)
    except ValueError as exc:
        parser.error(str(exc))
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
    for name, given, allowed in (
        ("tasks", tasks, TASKS),
        ("regimes", regimes, REGIMES + EXTRA_REGIMES),
        ("methods", methods, (*METHODS, *VARIANTS)),
    ):
        bad = sorted(set(given) - set(allowed))
        if bad or not given:
            parser.error(f"--{name}: unknown or empty {bad or given!r}; choose from {list(allowed)}")
    if "random" not in methods:
        parser.error(f"--methods must include the anchor 'random', got {methods!r}")
    if args.seeds < 2:
        parser.error(f"--seeds must be >= 2 (standard errors), got {args.seeds}")
    if args.first_seed < 0:
        parser.error(f"--first-seed must be >= 0, got {args.first_seed}")
    if args.threads < 0:
        parser.error(f"--threads must be >= 0 (0: torch's default), got {args.threads}")
    if args.mpi < 0 or args.mpi == 1:
        parser.error(f"--mpi must be >= 2 ranks (leave it out for one process), got {args.mpi}")
    if args.sync_every is not None and args.sync_every < 1:
        parser.error(f"--sync-every must be >= 1, got {args.sync_every}")
    if args.calibrate_only:
        regimes = regimes[:1] if "clean" not in regimes else ["clean"]
    stem = args.out or str(
        ROOT / "benchmarks" / "out" / f"bench_quality{'_quick' if args.quick else ''}"
        f"{'_costs' if args.calibrate_only else ''}"
        f"{f'_mpi{args.mpi}' if args.mpi else ''}"
    )
    if args.mpi and not args.mpi_worker:
        return launch_ranks(args, stem)
    if not args.mpi:
        args.bind_to = args.feedback_comm = None  # one process: no binding, no feedback to share
    comm = None
    if args.mpi_worker:
        args.bind_to = args.mpi_worker
        comm = join_ranks(args)
    lead = comm is None or comm.rank == 0  # prints and writes the outputs
    if args.threads:
        torch.set_num_threads(args.threads)
    # the RHO-LOSS guard warns on every run where it draws uniformly; each run records it ("guard")
    logging.getLogger("batchsel.loop.filters").setLevel(logging.ERROR)
    threads = torch.get_num_threads()

    start = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    for task_name in tasks:
        task = TASKS[task_name]
        data = load_dataset(task.dataset)
        evaluation = data.test if args.split == "test" else data.val
        full_steps = max(10, round((task.quick_steps if args.quick else task.steps) * args.steps_scale))
        results[task_name] = {}
        for ri, regime in enumerate(regimes):
            balanced = regime == "longtail"
            regime_of = lambda seed: make_regime(
                regime,
                data.train,
                data.num_classes,
                seed,  # noqa: E731
                task.duplicate_sources,
                task.duplicate_share,
            )[0]
            calibration = regime_of(0)
            costs = calibrate(
                task,
                methods,
                calibration,
                evaluation,
                data.num_classes,
                max(50, round(0.15 * full_steps)),
                balanced,
                comm,
                args.sync_every,
                warm_up=ri == 0,
            )
            plan = {m: {budget_key(f): budget_steps(costs, m, full_steps, f) for f in budgets} for m in methods}
            entry = {
                "costs": costs,
                "threads": threads,
                "steps": plan,
                "full_steps": full_steps,
                "train_size": len(calibration.y),
                "metric": "balanced accuracy" if balanced else "accuracy",
            }
            results[task_name][regime] = entry
            if args.calibrate_only:
                continue
            runs: dict[str, dict[str, list[dict]]] = {m: {budget_key(f): [] for f in budgets} for m in methods}
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                train = regime_of(seed)
                for f in budgets:
                    for m in methods:  # interleaved: load drift hits every method alike
                        runs[m][budget_key(f)].append(
                            train_run(
                                task,
                                m,
                                train,
                                evaluation,
                                data.num_classes,
                                seed,
                                plan[m][budget_key(f)],
                                balanced,
                                comm,
                                args.sync_every,
                            )
                        )
            entry.update(summary=summarize(runs, methods, budgets), runs=runs)
            if lead:
                world = (
                    ""
                    if comm is None
                    else (
                        f", {comm.size} ranks x B={task.batch_size}, feedback over "
                        f"{type(comm).__name__} ({args.feedback_comm}) every "
                        f"{args.sync_every or SYNC_EVERY} step(s)"
                    )
                )
                print_table(
                    task_name,
                    regime,
                    entry["summary"],
                    methods,
                    budgets,
                    f"{args.seeds} seeds, {entry['metric']} on {args.split}, random's full budget "
                    f"{full_steps} steps, {len(calibration.y)} training examples, {threads} torch "
                    f"thread(s){world}; load average {os.getloadavg()[0]:.2f}",
                )
                sys.stdout.flush()
    total = time.perf_counter() - start
    if lead:
        print(f"\ntotal {total:.0f} s")
        payload = {
            "args": vars(args),
            "results": results,
            "total_seconds": total,
            "world_size": 1 if comm is None else comm.size,
        }
        if args.calibrate_only:
            os.makedirs(os.path.dirname(os.path.abspath(stem)), exist_ok=True)
            table = costs_markdown(results, methods)
            print(table)
            with atomic_write(stem + ".md", "w") as f:
                f.write(table)
            with atomic_write(stem + ".json", "w") as f:
                json.dump(_jsonable(payload), f)
        else:
            write_outputs(stem, payload, methods, budgets)
    if comm is not None:
        comm.barrier()  # no rank leaves (and tears the process group down) before the outputs are written
    return results


def launch_ranks(args: argparse.Namespace, stem: str) -> dict:
    """``--mpi N``: this process runs ``mpiexec -n N`` on this script with the same settings
    (each rank a ``--mpi-worker``), streams rank 0's tables and returns its results."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _mpilaunch import mpiexec_command, run_mpiexec

    forwarded = [
        "--tasks",
        args.tasks,
        "--regimes",
        args.regimes,
        "--methods",
        args.methods,
        "--seeds",
        args.seeds,
        "--first-seed",
        args.first_seed,
        "--budgets",
        args.budgets,
        "--split",
        args.split,
        "--steps-scale",
        repr(args.steps_scale),
        "--threads",
        args.threads,
        "--out",
        stem,
        "--mpi",
        args.mpi,
        "--mpi-worker",
        args.bind_to,
        "--feedback-comm",
        args.feedback_comm,
        *(["--sync-every", args.sync_every] if args.sync_every is not None else []),
        *(["--quick"] if args.quick else []),
        *(["--calibrate-only"] if args.calibrate_only else []),
    ]
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
        raise RuntimeError(
            f"--mpi {args.mpi} but this job has {world} ranks: launch it with --mpi only "
            f"(the script starts mpiexec itself)"
        )
    comm = get_communicator(args.feedback_comm)  # "auto": what a DDP script's sampler finds
    settings = json.dumps(vars(args), sort_keys=True)
    every = comm.allgather(settings)
    if any(s != settings for s in every):
        raise RuntimeError(f"ranks disagree on the settings: {every}")
    return comm


if __name__ == "__main__":
    main()
