"""Golden cases: every selector and optimizer of batchsel run on small fixed inputs.

Shared by ``make_golden.py`` (which records ``golden.json``) and ``tests/project/test_golden.py``
(which recomputes every recorded case and compares). Each case is a zero-argument function
returning a JSON-ready summary; :func:`compare` checks a recomputed summary against the
recorded one: integers, strings and hashes exactly, floats to float32's rounding (``REL``).

Only names that survive a re-layering are used: the ``batchsel`` namespace (set functions,
optimizers, streaming, selectors), ``batchsel.selectors.partition_values``,
``batchsel.optimizers.OPTIMIZERS`` (the optimizer names) and ``batchsel.apricot``.
"""

from __future__ import annotations

import functools
import hashlib
import math
from typing import Any, Callable

import numpy as np

import batchsel
import batchsel.apricot as apricot
import batchsel.selectors as bs
import batchsel.submodular.optimizers as bo

N = 120  # examples of the selector cases
D = 8  # embedding dimension
C = 4  # classes
EPOCHS = 3  # epochs 0..2 of every selector case
WORLD_SIZES = (1, 2)
K = 8  # picks of the optimizer cases
N_FN = 80  # ground set of the set-function cases
# relative tolerance of floats: the cases compute in float32, whose sums' last bits differ
# with the CPU and BLAS (a sum's summation order); 2e-5 is about 168 float32 ulps, the
# worst-case rounding of the longest sums here (N, N_FN terms). Picks and orders stay exact.
REL = 2e-5
ABS = 1e-9  # absolute tolerance of floats (values near 0)


# -- summaries ----------------------------------------------------------------------------
def ihash(a: Any) -> str:
    """16 hex digits of sha256 over an integer array's dtype, shape and bytes."""
    a = np.ascontiguousarray(np.asarray(a))
    h = hashlib.sha256(f"{a.dtype.newbyteorder('<').str}{a.shape}".encode())
    h.update(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes())
    return h.hexdigest()[:16]


def ints(a: Any, head: int = 8) -> dict[str, Any]:
    """An integer array: its hash, length and first values."""
    a = np.asarray(a)
    return {"sha": ihash(a), "n": int(a.size), "head": a.ravel()[:head].tolist()}


def flt(v: Any) -> float:
    """A float with 10 significant digits (compact JSON, far below the tolerance)."""
    v = float(v)
    return v if not math.isfinite(v) else float(f"{v:.10g}")


def floats(a: Any) -> list[float]:
    return [flt(v) for v in np.asarray(a, dtype=np.float64).ravel()]


def plan_summary(plan: Any) -> dict[str, Any]:
    """An EpochPlan: fingerprint, shape, each rank's indices (hash) and batch sizes, the
    weights (rounded values) when it has them."""
    out: dict[str, Any] = {
        "fp": plan.fingerprint(),
        "ws": plan.world_size,
        "nb": plan.num_batches,
        "ne": plan.num_examples,
        "epoch": plan.epoch,
        "method": plan.method,
        "ranks": [],
    }
    for r in range(plan.world_size):
        batches = plan.batches(r)
        rank: dict[str, Any] = {
            "idx": ints(np.concatenate(batches) if batches else np.empty(0, np.int64)),
            "sizes": [int(b.size) for b in batches],
        }
        w = plan.weights(r)
        if w is not None:
            rank["w"] = floats(np.concatenate(w)) if w else []
        out["ranks"].append(rank)
    return out


def batches_summary(batches: list[np.ndarray]) -> dict[str, Any]:
    flat = np.concatenate([np.asarray(b, dtype=np.int64) for b in batches]) if batches else np.empty(0, np.int64)
    return {"idx": ints(flat), "sizes": [int(len(b)) for b in batches]}


def selection_summary(sel: Any) -> dict[str, Any]:
    return {
        "idx": np.asarray(sel.indices).tolist(),
        "gains": floats(sel.gains),
        "value": flt(sel.value),
        "optimizer": sel.optimizer,
        "evals": int(sel.evaluations),
    }


# -- comparison ---------------------------------------------------------------------------
def compare(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Differences between a recorded and a recomputed summary (empty: equal)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or set(expected) != set(actual):
            got = sorted(actual) if isinstance(actual, dict) else actual
            return [f"{path}: keys {sorted(expected)} != {got!r:.200}"]
        return [d for k in expected for d in compare(expected[k], actual[k], f"{path}.{k}")]
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(expected) != len(actual):
            return [f"{path}: {expected!r:.200} != {actual!r:.200}"]
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in compare(e, a, f"{path}[{i}]")]
    if isinstance(expected, float) or isinstance(actual, float):
        if isinstance(expected, bool) or isinstance(actual, bool) or expected is None or actual is None:
            return [] if expected == actual else [f"{path}: {expected!r} != {actual!r}"]
        e, a = float(expected), float(actual)
        if e == a or (math.isnan(e) and math.isnan(a)) or math.isclose(e, a, rel_tol=REL, abs_tol=ABS):
            return []
        return [f"{path}: {e!r} != {a!r}"]
    return [] if expected == actual and type(expected) is type(actual) else [f"{path}: {expected!r} != {actual!r}"]


# -- inputs -------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def data() -> dict[str, Any]:
    """The fixed inputs: clustered embeddings with labels, losses and logits per epoch."""
    rng = np.random.default_rng(20240611)
    labels = rng.integers(0, C, N).astype(np.int64)
    centers = rng.normal(size=(C, D)) * 3.0
    x = (centers[labels] + rng.normal(size=(N, D))).astype(np.float32)
    losses = [rng.gamma(2.0, 0.5, N) * 0.7**e for e in range(EPOCHS)]
    logits = [(np.eye(C)[labels] * (1.0 + e) + rng.normal(size=(N, C)) * 1.5).astype(np.float32) for e in range(EPOCHS)]
    graph = batchsel.knn_graph(x, k=8)
    return {"x": x, "labels": labels, "losses": losses, "logits": logits, "graph": graph}


@functools.lru_cache(maxsize=None)
def fn_data() -> dict[str, Any]:
    """Inputs of the set-function cases (a smaller ground set)."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(N_FN, D)).astype(np.float32)
    feats = np.abs(rng.normal(size=(N_FN, 12))) * (rng.random((N_FN, 12)) < 0.6)
    binary = (rng.random((N_FN, 20)) < 0.15).astype(np.float64)
    sq = ((x[:, None, :].astype(np.float64) - x[None, :, :]) ** 2).sum(-1)
    rbf = np.exp(-sq / np.median(sq))
    graph = batchsel.knn_graph(x, k=6, self_weight=1.0)
    weights = rng.normal(size=N_FN)
    costs = rng.uniform(0.5, 2.0, N_FN)
    return {"x": x, "feats": feats, "binary": binary, "rbf": rbf, "graph": graph, "weights": weights, "costs": costs}


def input_summary() -> dict[str, Any]:
    d, f = data(), fn_data()
    g, fg = d["graph"], f["graph"]
    return {
        "x": floats(d["x"][:2]),
        "labels": ints(d["labels"]),
        "graph": {"indptr": ints(g.indptr), "indices": ints(g.indices), "data": floats(g.data[:40])},
        "graph_sum": flt(g.data.astype(np.float64).sum()),
        "fn_graph": {"indptr": ints(fg.indptr), "indices": ints(fg.indices), "sum": flt(fg.data.sum())},
    }


# -- selectors ----------------------------------------------------------------------------
def _feed(sel: Any, batch: np.ndarray, epoch: int) -> None:
    """The deterministic feedback of a batch: that epoch's losses and logits of its rows."""
    d = data()
    b = np.asarray(batch, dtype=np.int64)
    fields = set(getattr(sel, "feedback_fields", ()))
    kwargs: dict[str, Any] = {}
    if "losses" in fields:
        kwargs["losses"] = d["losses"][epoch][b]
    if "logits" in fields:
        kwargs["logits"] = d["logits"][epoch][b]
    if kwargs:
        sel.observe(b, **kwargs)


def run_selector(make: Callable[[], Any], feedback: bool = True) -> dict[str, Any]:
    """For world sizes 1 and 2 (a fresh selector each): every epoch's plan as planned at the
    epoch's start, then every rank's batches through ``iter_batches`` (the feedback of each
    batch observed right after it is drawn), and the selector's fingerprint."""
    out: dict[str, Any] = {}
    for ws in WORLD_SIZES:
        try:
            out[f"ws{ws}"] = _run_world(make(), ws, feedback)
        except ValueError:  # a world size the selector refuses by design: nothing recorded
            continue
    return out


def _run_world(sel: Any, ws: int, feedback: bool) -> dict[str, Any]:
    res: dict[str, Any] = {"sel_fp": sel.fingerprint(ws), "epochs": []}
    for epoch in range(EPOCHS):
        ep: dict[str, Any] = {"plan": plan_summary(sel.plan(epoch, ws)), "iter": []}
        for rank in range(ws):
            drawn = []
            for batch in sel.iter_batches(epoch, rank, ws):
                drawn.append(np.asarray(batch).copy())
                if feedback:
                    _feed(sel, batch, epoch)
            ep["iter"].append(batches_summary(drawn))
        res["epochs"].append(ep)
    return res


def _x() -> np.ndarray:
    return data()["x"]


def _y() -> np.ndarray:
    return data()["labels"]


SELECTORS: dict[str, Callable[[], Any]] = {
    "random/default": lambda: batchsel.RandomSelector(N, 16, seed=3),
    "random/drop_last": lambda: batchsel.RandomSelector(N, 16, seed=3, drop_last=True),
    "random/no_shuffle": lambda: batchsel.RandomSelector(N, 25, shuffle=False),
    "smdl/default": lambda: batchsel.SubmodularSelector(_x(), 16, seed=0),
    "smdl/paper_weights": lambda: batchsel.SubmodularSelector(_x(), 16, seed=1, weights=(0.2, 0.1, 0.5, 0.2)),
    "smdl/uncertainty_lazy": lambda: batchsel.SubmodularSelector(
        _x(), 12, seed=2, weights=(1.0, 1.0, 0.0, 0.0), optimizer="lazy", pool_size=48
    ),
    "smdl/coverage_every": lambda: batchsel.SubmodularSelector(
        _x(), 16, seed=4, coverage_every=3, coverage_size=None, max_delay=3
    ),
    "smdl/partition_warmup": lambda: batchsel.SubmodularSelector(
        _x(), 16, seed=5, partition="submodular", warmup_epochs=1, drop_last=True
    ),
    "loss_rank/default": lambda: batchsel.LossRankSelector(N, 16, seed=0),
    "loss_rank/anneal": lambda: batchsel.LossRankSelector(N, 16, seed=1, pressure=20.0, anneal_batches=24),
    "loss_rank/initial_drop": lambda: batchsel.LossRankSelector(
        N, 10, seed=2, pressure=5.0, initial_loss=1.0, drop_last=True
    ),
    "graph_blocks/default": lambda: batchsel.GraphBlockSelector(data()["graph"], 20, seed=0, blocks_per_batch=2),
    "graph_blocks/whole": lambda: batchsel.GraphBlockSelector(
        data()["graph"], 24, seed=1, block_size=8, whole_blocks=True
    ),
    "graph_blocks/drop_last": lambda: batchsel.GraphBlockSelector(data()["graph"], 32, seed=2, drop_last=True),
    "coreset/default": lambda: batchsel.CoresetSelector(_x(), _y(), 8, fraction=0.25, seed=0),
    "coreset/cosine_knn": lambda: batchsel.CoresetSelector(
        _x(), _y(), 8, fraction=0.3, seed=1, metric="cosine", neighbors=10
    ),
    "coreset/nolabels_stochastic": lambda: batchsel.CoresetSelector(
        _x(), None, 10, fraction=0.2, seed=2, optimizer="stochastic", drop_last=True
    ),
    "infobatch/reference": lambda: batchsel.InfoBatchSelector(N, 16, epochs=EPOCHS, seed=0),
    "infobatch/paper": lambda: batchsel.InfoBatchSelector(N, 16, epochs=EPOCHS, seed=0, anneal_rule="paper"),
    "infobatch/labels_norescale": lambda: batchsel.InfoBatchSelector(
        N, 16, epochs=EPOCHS, seed=1, prune_ratio=0.7, labels=_y(), rescale=False, anneal_rule="paper"
    ),
    "infobatch/labels_rescale": lambda: batchsel.InfoBatchSelector(
        N, 12, epochs=EPOCHS, seed=2, prune_ratio=0.5, labels=_y(), anneal_rule="paper", drop_last=True
    ),
    "score_pruning/el2n": lambda: batchsel.ScorePruningSelector(_y(), 16, epochs=EPOCHS, keep=0.5, seed=0),
    "score_pruning/forgetting": lambda: batchsel.ScorePruningSelector(
        _y(), 16, epochs=EPOCHS, keep=0.6, score="forgetting", score_epochs=2, seed=1
    ),
    "score_pruning/strata_cut": lambda: batchsel.ScorePruningSelector(
        _y(), 10, epochs=EPOCHS, keep=0.4, strata=5, hard_cut=0.1, seed=2
    ),
}


def _ccs() -> dict[str, Any]:
    s = data()["losses"][0]
    out = {}
    for name, kw in {
        "default": {"count": 30},
        "strata4_cut": {"count": 40, "strata": 4, "hard_cut": 0.2, "seed": 3},
        "strata1": {"count": 10, "strata": 1, "seed": 1},
        "all": {"count": N, "strata": 10},
    }.items():
        out[name] = ints(batchsel.coverage_centric_selection(s, **kw), head=12)
    return out


def _partition() -> dict[str, Any]:
    out = {}
    for name, (src, w, kw) in {
        "x_w2": (_x(), 2, {}),
        "x_w3_k5": (_x(), 3, {"neighbors": 5, "seed": 4}),
        "graph_w4": (data()["graph"], 4, {"seed": 1}),
        "x_w1": (_x(), 1, {}),
    }.items():
        parts = batchsel.submodular_partition(src, w, **kw)
        out[name] = [ints(p) for p in parts]
        if name == "graph_w4":
            out["values"] = floats(bs.partition_values(data()["graph"], parts))
    return out


# -- set functions and optimizers ---------------------------------------------------------
def _sum_sqrt(m: np.ndarray) -> float:
    return float(np.sqrt(np.abs(m).sum(axis=0)).sum())


FUNCTIONS: dict[str, Callable[[], Any]] = {
    "fl_dense": lambda: batchsel.FacilityLocation.from_embeddings(fn_data()["x"]),
    "fl_cosine": lambda: batchsel.FacilityLocation.from_embeddings(fn_data()["x"], metric="cosine"),
    "fl_sparse": lambda: batchsel.FacilityLocation(fn_data()["graph"]),
    "feature_sqrt": lambda: batchsel.FeatureBased(fn_data()["feats"]),
    "feature_log": lambda: batchsel.FeatureBased(fn_data()["feats"], concave="log"),
    "feature_inverse": lambda: batchsel.FeatureBased(fn_data()["feats"], concave="inverse"),
    "feature_min": lambda: batchsel.FeatureBased(fn_data()["feats"], concave="min", saturation=1.5),
    "max_coverage": lambda: batchsel.MaxCoverage(fn_data()["binary"]),
    "graph_cut": lambda: batchsel.GraphCut(fn_data()["rbf"], lam=1.0),
    "graph_cut_emb": lambda: batchsel.GraphCut.from_embeddings(fn_data()["x"], lam=2.0),
    "graph_cut_sparse": lambda: batchsel.GraphCut(fn_data()["graph"], lam=3.0),
    "sum_redundancy": lambda: batchsel.SumRedundancy(fn_data()["rbf"]),
    "saturated": lambda: batchsel.SaturatedCoverage(fn_data()["rbf"], alpha=0.1),
    "saturated_sparse": lambda: batchsel.SaturatedCoverage(fn_data()["graph"], alpha=0.3),
    "log_det": lambda: batchsel.LogDeterminant(fn_data()["rbf"], reg=1.0),
    "modular": lambda: batchsel.Modular(fn_data()["weights"]),
    "mixture": lambda: batchsel.Mixture(
        [
            batchsel.FacilityLocation(fn_data()["rbf"]),
            batchsel.Modular(fn_data()["weights"]),
            batchsel.SumRedundancy(fn_data()["rbf"]),
        ],
        weights=[1.0, 0.5, 0.05],
    ),
    "custom": lambda: batchsel.Custom(fn_data()["feats"][:40], _sum_sqrt),
    "reference_fl": lambda: batchsel.ReferenceFacilityLocation(fn_data()["x"], reference=fn_data()["x"][::3]),
}


def run_optimizer(fname: str, opt: str, **kw: Any) -> dict[str, Any]:
    f = FUNCTIONS[fname]()
    if opt == "greedi":
        kw.setdefault("parts", 3)
    sel = batchsel.maximize(f, K, opt, seed=5, **kw)
    out = selection_summary(sel)
    out["selected"] = [int(v) for v in f.selected]
    out["f_value"] = flt(f.value)
    if opt == "greedi":
        out["extra"] = {k: (floats(v) if isinstance(v, (list, np.ndarray)) else v) for k, v in sel.extra.items()}
        out["extra"] = {k: flt(v) if isinstance(v, float) else v for k, v in out["extra"].items()}
    return out


def _optimizer_options() -> dict[str, Any]:
    f = fn_data()
    out = {}
    for name, (fname, opt, kw) in {
        "costs_lazy": ("fl_dense", "lazy", {"costs": f["costs"]}),
        "costs_naive": ("feature_sqrt", "naive", {"costs": f["costs"]}),
        "initial_exclude": ("fl_dense", "lazy", {"initial": [0, 5], "exclude": np.arange(10, 30)}),
        "candidates": ("graph_cut", "naive", {"candidates": np.arange(0, N_FN, 2)}),
        "initial_rows": ("feature_sqrt", "lazy", {"initial": f["feats"][:3] * 0.5}),
        "stochastic_eps": ("saturated", "stochastic", {"epsilon": 0.3}),
        "approx_beta": ("fl_sparse", "approximate-lazy", {"beta": 0.5}),
        "sample_frac": ("feature_log", "sample", {"sample_fraction": 0.5}),
        "greedi_parts2": ("fl_dense", "greedi", {"parts": 2}),
    }.items():
        out[name] = run_optimizer(fname, opt, **kw)
    return out


def _greedi_fl() -> dict[str, Any]:
    x = fn_data()["x"]
    out = {}
    for name, kw in {"default": {"parts": 3}, "cosine": {"metric": "cosine", "parts": 2, "seed": 3}}.items():
        sel = batchsel.greedi_facility_location(x, K, **kw)
        out[name] = selection_summary(sel)
        out[name]["extra"] = {
            "parts": sel.extra.get("parts"),
            "merged_value": flt(sel.extra["merged_value"]),
            "part_values": floats(sel.extra["part_values"]),
        }
    return out


def _sieve() -> dict[str, Any]:
    f = fn_data()
    x = data()["x"]
    out = {}
    for name, (args, kw, chunks) in {
        "feature_fit": (("feature-based", K), {}, 37),
        "feature_log_norefine": (("feature-based", K), {"concave": "log", "refine": False, "epsilon": 0.2}, 25),
        "feature_min": (("feature-based", 5), {"concave": "min", "saturation": 1.0}, 50),
        "fl_reference": (("facility-location", K), {"reference": x[::4]}, 40),
        "fl_sample_cosine": (("facility-location", 6), {"metric": "cosine", "reference_size": 30, "seed": 2}, 33),
    }.items():
        data_rows = f["feats"] if args[0] == "feature-based" else x
        s = batchsel.SieveStreaming(*args, **kw).fit(data_rows, chunk_rows=chunks)
        out[name] = {
            "idx": s.indices_.tolist(),
            "gains": floats(s.gains_),
            "value": flt(s.value_),
            "held": ints(s.held_indices_),
            "n_sieves": int(s.n_sieves_),
        }
    # partial_fit over uneven chunks, reference from the stream's first rows
    s = batchsel.SieveStreaming("facility-location", 5, reference_size=20)
    for chunk in np.array_split(x, [7, 30, 31, 90]):
        s.partial_fit(chunk)
    out["fl_partial"] = {"idx": s.indices_.tolist(), "gains": floats(s.gains_), "value": flt(s.value_)}
    return out


# -- dedup, audit, filters, apricot -------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _dup_data() -> tuple[np.ndarray, np.ndarray]:
    x = data()["x"].copy()
    rng = np.random.default_rng(11)
    x[100:110] = x[:10] * 1.5 + rng.normal(size=(10, D)).astype(np.float32) * 0.01
    x[110:115] = x[20:25]
    y = data()["labels"].copy()
    y[:12] = (y[:12] + 1) % C  # label noise
    return x, y


def _dedup() -> dict[str, Any]:
    x, _ = _dup_data()
    out = {}
    for name, kw in {"t099": {"threshold": 0.99}, "t09_k4": {"threshold": 0.9, "k": 4}}.items():
        r = batchsel.deduplicate(x, progress=False, **kw)
        i, j, s = r.pairs
        out[name] = {
            "keep": ints(r.keep),
            "group": ints(r.group),
            "pairs_i": ints(i),
            "pairs_j": ints(j),
            "pairs_s": floats(s),
            "removed": flt(r.removed_fraction),
        }
    return out


def _audit() -> dict[str, Any]:
    x, y = _dup_data()
    out = {}
    for name, kw in {"labels": {"labels": y}, "nolabels_k5": {"k": 5, "threshold": 0.9}}.items():
        a = batchsel.audit(x, progress=False, **kw)
        d = a.to_dict(top=30)
        d.pop("seconds")
        d = {k: flt(v) if isinstance(v, float) else v for k, v in d.items()}
        d["outlier_score"] = floats(a.outlier_score[:20])
        d["duplicate_group"] = ints(a.duplicate_group)
        if a.label_issues is not None:
            d["label_issues_all"] = ints(a.label_issues)
        out[name] = d
    return out


def _filters() -> dict[str, Any]:
    d = data()
    rng = np.random.default_rng(3)
    il = rng.gamma(2.0, 0.3, N)
    out = {}
    for name, kw in {
        "loss_top": {"ratio": 4, "score": "loss", "uniform_fraction": 0.0},
        "loss_default": {"score": "loss", "seed": 1},
        "gradnorm_warmup": {"ratio": 2, "score": "gradnorm", "warmup_steps": 3, "seed": 2},
        "rho": {"ratio": 3, "score": "rho", "irreducible_losses": il, "seed": 4},
        "percentile": {"ratio": 2, "score": "loss", "pick": "percentile", "beta": 2.0, "window": 64, "seed": 5},
        "diverse": {"ratio": 4, "score": "loss", "diversity": 0.5, "uniform_fraction": 0.1, "seed": 6},
    }.items():
        filt = batchsel.CandidateFilter(5, **kw)
        kept = []
        order = np.random.default_rng(9).permutation(N)
        for step, start in enumerate(range(0, N, filt.candidate_size)):
            idx = order[start : start + filt.candidate_size]
            e = step % EPOCHS
            pos = filt(idx, d["logits"][e][idx], d["labels"][idx], embeddings=d["x"][idx])
            kept.append(np.asarray(pos))
        out[name] = {
            "kept": batches_summary(kept),
            "steps": int(filt.steps_),
            "kept_n": int(filt.kept_),
            "uniform_n": int(filt.kept_uniform_),
        }
        # select() on given scores
        s = np.round(d["losses"][1][:20], 3)
        out[name]["select"] = np.asarray(filt.select(np.arange(20), s, embeddings=d["x"][:20])).tolist()
    out["loss_scores"] = floats(batchsel.loss_scores(d["logits"][0][:10], d["labels"][:10]))
    out["gradnorm_scores"] = floats(batchsel.gradnorm_scores(d["logits"][0][:10], d["labels"][:10]))
    return out


def _apricot() -> dict[str, Any]:
    f = fn_data()
    out = {}
    for name, make in {
        "fl_lazy": lambda: apricot.FacilityLocationSelection(10, metric="euclidean").fit(np.abs(f["x"])),
        "fl_cosine_naive": lambda: apricot.FacilityLocationSelection(10, metric="cosine", optimizer="naive").fit(
            np.abs(f["x"])
        ),
        "feature_stochastic": lambda: apricot.FeatureBasedSelection(10, optimizer="stochastic", random_state=0).fit(
            f["feats"]
        ),
        "graph_cut_two_stage": lambda: apricot.GraphCutSelection(8, optimizer="two-stage").fit(np.abs(f["x"])),
        "max_coverage": lambda: apricot.MaxCoverageSelection(6).fit(f["binary"]),
        "sum_redundancy_sample": lambda: apricot.SumRedundancySelection(6, optimizer="sample", random_state=1).fit(
            np.abs(f["x"])
        ),
        "saturated_modular": lambda: apricot.SaturatedCoverageSelection(6, optimizer="modular").fit(np.abs(f["x"])),
    }.items():
        m = make()
        out[name] = {"ranking": np.asarray(m.ranking).tolist(), "gains": floats(m.gains)}
    return out


# -- the registry -------------------------------------------------------------------------
def _registry() -> dict[str, Callable[[], Any]]:
    cases: dict[str, Callable[[], Any]] = {"inputs": input_summary}
    for name, make in SELECTORS.items():
        cases[f"selector/{name}"] = functools.partial(run_selector, make)
    cases["selector/coverage_centric_selection"] = _ccs
    cases["selector/submodular_partition"] = _partition
    for fname in FUNCTIONS:
        for opt in bo.OPTIMIZERS:
            cases[f"maximize/{fname}/{opt}"] = functools.partial(run_optimizer, fname, opt)
    cases["maximize/options"] = _optimizer_options
    cases["greedi_facility_location"] = _greedi_fl
    cases["streaming/sieve"] = _sieve
    cases["deduplicate"] = _dedup
    cases["audit"] = _audit
    cases["candidate_filter"] = _filters
    cases["apricot"] = _apricot
    return cases


CASES = _registry()
