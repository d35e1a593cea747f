"""Figures of epoch plans: what ``batchsel inspect`` reports.

For one :class:`~batchsel.EpochPlan` (:func:`plan_report`, or
:meth:`EpochPlan.report <batchsel.EpochPlan.report>`): coverage of the data set,
duplicates, batch sizes per rank, and, given labels or a graph, the label entropy of every
batch and the share of the graph's edge weight kept inside batches (against random batches
of the same sizes). :func:`format_report` writes them as the text table of ``batchsel
inspect``; :func:`batchsel.plans.plotting.plot_reports` draws them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from batchsel.core.checks import check_graph, check_labels
from batchsel.core.graph import without_self_loops

if TYPE_CHECKING:  # plan.py calls this module (EpochPlan.report); no import back at run time
    from batchsel.plans.plan import EpochPlan


def _finite_or_none(x: float) -> float | None:
    return None if not math.isfinite(x) else float(x)


def _batch_ids(plan: EpochPlan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All batches of a plan, rank by rank: (flat indices, batch id of each, rank of each batch)."""
    sizes = [[b.size for b in plan.batches(r)] for r in range(plan.world_size)]
    flat_sizes = np.array([s for rank in sizes for s in rank], dtype=np.int64)
    batch_rank = np.repeat(np.arange(plan.world_size), [len(rank) for rank in sizes])
    return plan.indices(), np.repeat(np.arange(flat_sizes.size), flat_sizes), batch_rank


def _label_entropy(idx: np.ndarray, bid: np.ndarray, num_batches: int, labels: np.ndarray) -> np.ndarray:
    """Entropy (bits) of the label distribution of each batch; unlabeled (-1) examples are
    left out, a batch with no labeled example gets NaN."""
    y = labels[idx]
    keep = y >= 0
    classes = max(int(labels.max()) + 1, 1) if labels.size else 1
    counts = np.bincount(bid[keep] * classes + y[keep], minlength=num_batches * classes).reshape(num_batches, classes)
    totals = counts.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = counts / totals
        h = -np.where(counts > 0, p * np.log2(np.where(counts > 0, p, 1.0)), 0.0).sum(axis=1)
    h[totals[:, 0] == 0] = np.nan
    return h


def _edge_weights(
    idx: np.ndarray, bid: np.ndarray, num_batches: int, graph: Any
) -> tuple[np.ndarray, np.ndarray, float, float]:
    """Edge weight figures of a plan's batches over ``graph`` (self loops left out):
    per batch, the weight with both ends inside it and the weight incident to its
    examples; for the epoch, the weight of the edges whose ends share at least one batch
    (each edge once, also when padding repeats a batch) and the total weight."""
    g = without_self_loops(graph)
    member = sp.csr_matrix((np.ones(idx.size, dtype=np.float64), (bid, idx)), shape=(num_batches, graph.shape[0]))
    member.sum_duplicates()
    member.data[:] = 1.0
    reached = member @ g  # batches x N: weight from each batch to each example
    inside = np.asarray(reached.multiply(member).sum(axis=1)).ravel()
    incident = np.asarray(reached.sum(axis=1)).ravel()
    # An edge (i, j) is inside some batch when rows i and j of the example x batch
    # membership share a column; O(edges x batches per example).
    of_example = member.T.tocsr()
    edges = g.tocoo()
    shared = np.asarray(of_example[edges.row].multiply(of_example[edges.col]).sum(axis=1)).ravel() > 0
    return inside, incident, float(edges.data[shared].sum()), float(edges.data.sum())


def plan_report(plan: EpochPlan, labels: np.ndarray | None = None, graph: Any = None) -> dict[str, Any]:
    """The figures ``batchsel inspect`` prints for one epoch plan, as a JSON-ready dict
    (also :meth:`EpochPlan.report <batchsel.EpochPlan.report>`).

    Always: provenance (epoch, method, seed, fingerprint), the examples drawn, their
    ``coverage`` of the data set and ``duplicates``, and per rank the batch count and
    batch sizes (and the weight sum of a weighted plan). With ``labels`` (N class ids,
    -1 unlabeled): the label entropy (bits) of every batch against that of all labels.
    With ``graph`` (N x N sparse): the share of the edge weight kept inside batches,
    overall (``graph``, with the share random batches of the same sizes would keep) and
    per batch (``edge_weight_kept``). Values that do not exist (the entropy of a batch
    of unlabeled examples) are None.

    Parameters
    ----------
    plan : EpochPlan
        The epoch's plan.
    labels : array-like or None, default None
        N class ids, -1 for unlabeled examples.
    graph : sparse matrix or None, default None
        An ``N x N`` similarity graph.

    Returns
    -------
    dict
        JSON-ready figures; :func:`format_report` writes them as text.

    See Also
    --------
    batchsel.plans.plotting.plot_reports : draws them.

    Examples
    --------
    >>> import numpy as np
    >>> from batchsel import EpochPlan
    >>> plan = EpochPlan([[np.array([0, 1]), np.array([2, 0])]], num_examples=4)
    >>> rep = plan_report(plan, labels=np.array([0, 1, 1, 0]))
    >>> rep["coverage"], rep["duplicates"], rep["ranks"][0]["label_entropy"]
    (0.75, 1, [1.0, 1.0])
    """
    if labels is not None:
        labels = check_labels(labels, plan.num_examples, allow_unlabeled=True)
    if graph is not None:
        graph = check_graph(graph, plan.num_examples)
    idx, bid, batch_rank = _batch_ids(plan)
    num_batches = batch_rank.size
    sizes = np.bincount(bid, minlength=num_batches)
    n = plan.num_examples
    unique = np.unique(idx)
    report: dict[str, Any] = {
        "epoch": plan.epoch,
        "method": plan.method,
        "seed": plan.seed,
        "fingerprint": plan.fingerprint(),
        "world_size": plan.world_size,
        "num_batches": plan.num_batches,
        "num_examples": n,
        "weighted": plan.weights(0) is not None,
        "examples": int(idx.size),
        "unique": int(unique.size),
        "coverage": unique.size / n if n else 0.0,
        "duplicates": int(idx.size - unique.size),
    }
    entropy = _label_entropy(idx, bid, num_batches, labels) if labels is not None else None
    kept = None
    if graph is not None:
        report["graph"], kept = _graph_figures(idx, bid, num_batches, graph, n)
    if labels is not None:
        report["labels"] = _label_figures(labels, entropy)
    report["ranks"] = [_rank_entry(plan, r, batch_rank == r, sizes, entropy, kept) for r in range(plan.world_size)]
    return report


def _graph_figures(
    idx: np.ndarray, bid: np.ndarray, num_batches: int, graph: Any, n: int
) -> tuple[dict[str, Any], np.ndarray]:
    """The plan's ``graph`` summary (the share of edge weight inside batches, against
    random batches of the same sizes) and the share each batch keeps."""
    inside, incident, covered, total = _edge_weights(idx, bid, num_batches, graph)
    # Random batches of the same sizes put a given pair together with probability
    # sum_b |b| (|b| - 1) / (N (N - 1)) (capped at 1: batches overlap only by padding).
    distinct = np.bincount(np.unique(bid * n + idx) // n, minlength=num_batches).astype(np.float64)
    random_share = min(1.0, float((distinct * (distinct - 1)).sum() / (n * (n - 1)))) if n > 1 else 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        kept = inside / incident
    summary = {
        "edge_weight_inside": covered / total if total > 0 else None,
        "edge_weight_inside_random": random_share,
        "ratio_to_random": covered / total / random_share if total > 0 and random_share > 0 else None,
    }
    return summary, kept


def _label_figures(labels: np.ndarray, entropy: Any) -> dict[str, Any]:
    """The plan's ``labels`` summary: the batches' mean and least label entropy, and that
    of all labels together."""
    labeled = labels[labels >= 0]
    p = np.bincount(labeled) / labeled.size if labeled.size else np.ones(1)
    return {
        "batch_entropy_mean": _finite_or_none(float(np.nanmean(entropy))) if np.isfinite(entropy).any() else None,
        "batch_entropy_min": _finite_or_none(float(np.nanmin(entropy))) if np.isfinite(entropy).any() else None,
        "all_labels_entropy": float(-(p[p > 0] * np.log2(p[p > 0])).sum()),
    }


def _rank_entry(
    plan: EpochPlan,
    r: int,
    mine: np.ndarray,
    sizes: np.ndarray,
    entropy: np.ndarray | None,
    kept: np.ndarray | None,
) -> dict[str, Any]:
    """Rank ``r``'s figures (``mine``: which of all batches are its)."""
    rank_idx = plan.indices(r)
    rank_sizes = sizes[mine]
    entry: dict[str, Any] = {
        "rank": r,
        "batches": int(mine.sum()),
        "examples": int(rank_idx.size),
        "unique": int(np.unique(rank_idx).size),
        "batch_size": {
            "min": int(rank_sizes.min()) if rank_sizes.size else 0,
            "mean": float(rank_sizes.mean()) if rank_sizes.size else 0.0,
            "max": int(rank_sizes.max()) if rank_sizes.size else 0,
        },
    }
    weights = plan.weights(r)
    if weights is not None:
        entry["weight_sum"] = float(sum(float(w.sum()) for w in weights))
    if entropy is not None:
        entry["label_entropy"] = [_finite_or_none(h) for h in entropy[mine].tolist()]
    if kept is not None:
        entry["edge_weight_kept"] = [_finite_or_none(k) for k in kept[mine].tolist()]
    return entry


def _mean_of(values: list[float | None]) -> str:
    vals = [v for v in values if v is not None]
    return f"{np.mean(vals):.3f}" if vals else "-"


def format_report(path: str, reports: list[dict[str, Any]]) -> str:
    """The text ``batchsel inspect`` prints for the :func:`plan_report` of each epoch of
    the plan file ``path``: a header, then per epoch a table of the ranks and the label
    and graph summaries.

    >>> import numpy as np
    >>> from batchsel import EpochPlan
    >>> plan = EpochPlan([[np.array([0, 1])], [np.array([2, 3])]], num_examples=4, method="random")
    >>> print(format_report("plan.npz", [plan_report(plan)]).splitlines()[0])
    plan.npz: 1 epoch(s), method random, seed 0, 4 examples, 2 rank(s) x 1 batches
    """
    lines: list[str] = []
    first = reports[0]
    lines.append(
        f"{path}: {len(reports)} epoch(s), method {first['method'] or '?'}, seed {first['seed']}, "
        f"{first['num_examples']} examples, {first['world_size']} rank(s) x {first['num_batches']} batches"
        f"{', weighted' if first['weighted'] else ''}"
    )
    for rep in reports:
        lines.append(
            f"epoch {rep['epoch']}  fingerprint {rep['fingerprint']}  coverage {rep['coverage']:.2%}  "
            f"duplicates {rep['duplicates']}"
        )
        head = f"  {'rank':>4} {'batches':>7} {'examples':>8} {'unique':>6}  {'batch size min/mean/max':>23}"
        if "labels" in rep:
            head += "  label entropy"
        if "graph" in rep:
            head += "  edge weight kept"
        if rep["weighted"]:
            head += "  weight sum"
        lines.append(head)
        for rk in rep["ranks"]:
            bs = rk["batch_size"]
            line = (
                f"  {rk['rank']:>4} {rk['batches']:>7} {rk['examples']:>8} {rk['unique']:>6}  "
                f"{str(bs['min']) + '/' + format(bs['mean'], '.1f') + '/' + str(bs['max']):>23}"
            )
            if "labels" in rep:
                line += f"  {_mean_of(rk['label_entropy']):>13}"
            if "graph" in rep:
                line += f"  {_mean_of(rk['edge_weight_kept']):>16}"
            if rep["weighted"]:
                line += f"  {rk['weight_sum']:>10.1f}"
            lines.append(line)
        if "labels" in rep:
            lab = rep["labels"]
            mean = "-" if lab["batch_entropy_mean"] is None else f"{lab['batch_entropy_mean']:.3f}"
            lines.append(
                f"  label entropy per batch: mean {mean} bits "
                f"(all labels together: {lab['all_labels_entropy']:.3f} bits)"
            )
        if "graph" in rep:
            g = rep["graph"]
            inside = "-" if g["edge_weight_inside"] is None else f"{g['edge_weight_inside']:.2%}"
            ratio = "-" if g["ratio_to_random"] is None else f"{g['ratio_to_random']:.1f}x"
            lines.append(
                f"  graph edge weight inside batches: {inside} (random batches of these sizes: "
                f"{g['edge_weight_inside_random']:.2%}; ratio {ratio})"
            )
    return "\n".join(lines)


__all__ = ["plan_report", "format_report"]
