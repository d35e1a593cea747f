"""Label-issue benchmark: batchsel's audit next to cleanlab on the noisy regimes.

Data: the regime benchmark's training sets (``bench_quality.load_dataset``) of digits and
mnist1d with its ``noise`` regime (25 % of the labels flipped to another class, per seed),
and a 20-class Gaussian mixture in 64-d at the same rate. For each, over seeds:

- ``batchsel audit``: neighbours' leave-one-out class probabilities (10-NN, cosine) and
  its confident-learning rule (:func:`batchsel.data.audit.confident_learning`);
- ``cleanlab, same probabilities``: ``cleanlab.filter.find_label_issues`` given those
  probabilities (cleanlab's default ``prune_by_noise_rate``): the rule alone compared;
- ``cleanlab defaults``: ``cleanlab.classification.CleanLearning().find_label_issues``
  (scikit-learn's logistic regression, cross-validated probabilities): what a cleanlab
  user gets without a model of their own;
- with ``--model``, a model of the task's own (:func:`oof_probabilities`: 5-fold
  cross-fitted out-of-fold softmax outputs of a torch model trained on the noisy labels;
  mnist1d: the regime benchmark's residual 1-D CNN; digits and the mixture: an MLP), given
  to ``batchsel.audit(..., probabilities=...)`` and to ``find_label_issues``: what a user
  with a model of their own gets from each; its training time is reported apart.

Figures: precision, recall and F1 of the flagged rows against the flipped ones, the
estimated noise rate (batchsel) next to the true one, and the time of each; then the audit
on the clean labels (how much "noise" weak embeddings alone produce). Run:
``python benchmarks/bench_labels.py`` (``--seeds 5``; ``--quick``: 2 seeds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def noisy_sets(seed: int):
    import bench_quality as bq

    for name in ("digits", "mnist1d"):
        data = bq.load_dataset(name)
        train = data.train
        classes = int(train.y.max()) + 1
        noisy, info = bq.make_regime("noise", train, classes, seed)
        truth = np.zeros(len(train.y), bool)
        truth[info["flipped"]] = True
        yield name, np.ascontiguousarray(train.x, np.float32), noisy.y.astype(np.int64), truth
    rng = np.random.default_rng([seed, 77])
    n, classes = 5000, 20
    y = rng.integers(0, classes, n)
    x = (rng.standard_normal((classes, 64)) * 0.9)[y] + rng.standard_normal((n, 64))
    flip = rng.choice(n, round(bq.NOISE_RATE * n), replace=False)
    noisy = y.copy()
    noisy[flip] = (y[flip] + rng.integers(1, classes, flip.size)) % classes
    truth = np.zeros(n, bool)
    truth[flip] = True
    yield "gaussian-20", x.astype(np.float32), noisy, truth


def clean_estimates() -> dict:
    import bench_quality as bq

    from batchsel.data.audit import audit

    out = {}
    for name in ("digits", "mnist1d"):
        train = bq.load_dataset(name).train
        report = audit(np.ascontiguousarray(train.x, np.float32), train.y, progress=False)
        out[name] = (report.noise_rate, report.neighbor_agreement)
    return out


def oof_probabilities(name: str, x: np.ndarray, y: np.ndarray, seed: int, folds: int = 5) -> np.ndarray:
    """Out-of-fold class probabilities: ``folds`` models, each trained on the other folds'
    (noisy) labels with AdamW and a cosine schedule, predicting its own fold."""
    import bench_quality as bq
    import torch
    import torch.nn.functional as F

    classes = int(y.max()) + 1
    fold = np.random.default_rng([seed, 5]).permutation(len(y)) % folds
    out = np.zeros((len(y), classes))
    xt, yt = torch.from_numpy(np.ascontiguousarray(x, np.float32)), torch.from_numpy(y.astype(np.int64))
    for f in range(folds):
        train, held = np.flatnonzero(fold != f), np.flatnonzero(fold == f)
        torch.manual_seed(seed * folds + f)
        if name == "mnist1d":  # the regime benchmark's step-dominated model
            model, epochs = bq.ResNet1d(x.shape[1], classes), 20
        else:
            model, epochs = bq.mlp(256)(x.shape[1], classes), 30
        opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
        batch = 128
        steps = epochs * -(-len(train) // batch)
        schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=steps, pct_start=0.1)
        rng = np.random.default_rng([seed, f])
        model.train()
        for step in range(steps):
            ib = torch.from_numpy(rng.choice(train, batch, replace=len(train) < batch))
            loss = F.cross_entropy(model(xt[ib]), yt[ib])
            opt.zero_grad()
            loss.backward()
            opt.step()
            schedule.step()
        model.eval()
        with torch.no_grad():
            out[held] = torch.softmax(model(xt[torch.from_numpy(held)]), dim=1).double().numpy()
    return out


def scores(flagged: np.ndarray, truth: np.ndarray) -> tuple[float, float, float]:
    hit = int(truth[flagged].sum())
    p, r = hit / max(flagged.size, 1), hit / max(int(truth.sum()), 1)
    return p, r, 2 * p * r / max(p + r, 1e-12)


def run(seeds: int, model: bool = False) -> dict:
    from cleanlab.classification import CleanLearning
    from cleanlab.filter import find_label_issues

    from batchsel.data.audit import audit

    rows: dict = {}
    for seed in range(seeds):
        for name, x, y, truth in noisy_sets(seed):
            t = time.perf_counter()
            report = audit(x, y, progress=False, seed=seed)
            ours_s = time.perf_counter() - t
            t = time.perf_counter()
            same = np.flatnonzero(find_label_issues(y, report.probabilities))
            same_s = time.perf_counter() - t
            t = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                issues = CleanLearning(seed=seed).find_label_issues(x, y)
            defaults = np.flatnonzero(issues["is_label_issue"].to_numpy())
            defaults_s = time.perf_counter() - t
            r = rows.setdefault(
                name,
                {
                    "true_rate": [],
                    "estimate": [],
                    "batchsel": [],
                    "cleanlab, same probabilities": [],
                    "cleanlab defaults": [],
                },
            )
            r["true_rate"].append(float(truth.mean()))
            r["estimate"].append(report.noise_rate)
            r["batchsel"].append((*scores(report.label_issues, truth), ours_s))
            r["cleanlab, same probabilities"].append((*scores(same, truth), same_s + ours_s))
            r["cleanlab defaults"].append((*scores(defaults, truth), defaults_s))
            if model:
                t = time.perf_counter()
                probs = oof_probabilities(name, x, y, seed)
                r.setdefault("model_seconds", []).append(time.perf_counter() - t)
                r.setdefault("model_accuracy_on_true", []).append(
                    float((probs.argmax(1) == np.where(truth, -1, y)).sum() / (~truth).sum())
                )
                t = time.perf_counter()
                given = audit(x, y, progress=False, seed=seed, probabilities=probs)
                given_s = time.perf_counter() - t
                t = time.perf_counter()
                same_model = np.flatnonzero(find_label_issues(y, probs))
                same_model_s = time.perf_counter() - t
                r.setdefault("estimate, model", []).append(given.noise_rate)
                r.setdefault("batchsel, model probabilities", []).append((*scores(given.label_issues, truth), given_s))
                r.setdefault("cleanlab, model probabilities", []).append((*scores(same_model, truth), same_model_s))
    return rows


def mean_se(values: list[float]) -> str:
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.3f} +- {se:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--model", action="store_true", help="also a model's out-of-fold probabilities (5-fold, torch)")
    args = parser.parse_args()
    seeds = 2 if args.quick else args.seeds
    rows = run(seeds, model=args.model)
    print(f"== label issues, 25 % of labels flipped, {seeds} seeds (mean +- s.e.) ==")
    print(f"{'data':12}{'method':32}{'precision':>16}{'recall':>16}{'F1':>16}{'seconds':>9}")
    for name, r in rows.items():
        methods = ["batchsel", "cleanlab, same probabilities", "cleanlab defaults"]
        methods += [m for m in ("batchsel, model probabilities", "cleanlab, model probabilities") if m in r]
        for method in methods:
            p, rc, f1, s = zip(*r[method])
            print(f"{name:12}{method:32}{mean_se(p):>16}{mean_se(rc):>16}{mean_se(f1):>16}{statistics.mean(s):9.2f}")
        print(f"{name:12}{'noise rate: true / estimated':32}{mean_se(r['true_rate']):>16}{mean_se(r['estimate']):>16}")
        if "estimate, model" in r:
            print(
                f"{name:12}{'  ... from the model':32}{'':>16}{mean_se(r['estimate, model']):>16}"
                f"   (model: {mean_se(r['model_accuracy_on_true'])} accuracy on the unflipped rows, "
                f"{statistics.mean(r['model_seconds']):.1f} s for 5 folds)"
            )
    print("\n== the same audit on clean labels (no flipped label): what the estimate says ==")
    clean = clean_estimates()
    for name, (rate, agreement) in clean.items():
        print(
            f"{name:12}estimated noise {rate:6.1%}   neighbours' top-class vote {agreement:.2f}"
            f"{'   (below 0.5: the audit marks the estimate unreliable)' if agreement < 0.5 else ''}"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"noisy": rows, "clean": clean}, fh, indent=1)


if __name__ == "__main__":
    main()
