"""Figures of epoch plans (``batchsel inspect --plot``) and of data audits (``batchsel
audit --plot``), drawn with matplotlib.

matplotlib is an optional dependency (``pip install 'batchsel[plot]'``): it is imported
only when a figure is drawn, and :func:`require_matplotlib` says how to install it.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np

from batchsel.core.io import atomic_write

PLOT_SUFFIXES = (".png", ".pdf", ".svg")
INSTALL_HINT = "pip install matplotlib (or pip install 'batchsel[plot]')"


def require_matplotlib() -> Any:
    """The ``matplotlib`` module; ``ImportError`` with the install command when it is
    missing (check before long work, not after it).

    >>> require_matplotlib().__name__
    'matplotlib'
    """
    try:
        import matplotlib
    except ImportError:
        raise ImportError(f"matplotlib is not installed: {INSTALL_HINT}") from None
    return matplotlib


def plot_reports(
    path: str | os.PathLike, reports: list[dict[str, Any]], *, source: str | None = None, overwrite: bool = True
) -> None:
    """Draw the :func:`~batchsel.plans.report.plan_report` of one or more epochs of a plan to
    ``path`` (the format from its suffix: ``.png``, ``.pdf`` or ``.svg``), as ``batchsel
    inspect --plot`` does: examples per rank, batch sizes per epoch and rank, and per batch
    the label entropy and the share of edge weight kept (when the reports have them).

    The heading names the method and fingerprints, after ``source`` (the plan file's
    name) when given. The file is written to a temporary name and renamed; an existing
    one is replaced only with ``overwrite``. Needs matplotlib (:func:`require_matplotlib`).

    Parameters
    ----------
    path : str or os.PathLike
        The figure's file.
    reports : list of dict
        :func:`~batchsel.plans.report.plan_report` of every epoch, in order.
    source : str or None, default None
        The plan file's name, for the heading.
    overwrite : bool, default True
        Replace an existing file.

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> from batchsel import EpochPlan
    >>> from batchsel.plans.report import plan_report
    >>> plan = EpochPlan([[np.array([0, 1])], [np.array([2, 3])]], num_examples=4)
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     plot_reports(os.path.join(folder, "plan.svg"), [plan_report(plan)])
    ...     print(os.path.getsize(os.path.join(folder, "plan.svg")) > 0)
    True
    """
    path = os.fspath(path)
    fmt = _figure_format(path)
    if not reports:
        raise ValueError("reports is empty: pass the plan_report() of at least one epoch")
    plt = _pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    (ax_counts, ax_sizes), (ax_entropy, ax_edges) = axes
    _draw_examples_per_rank(ax_counts, reports)
    sizes = _draw_batch_sizes(ax_sizes, reports)
    n = reports[0]["num_examples"]
    _draw_per_batch(
        ax_entropy,
        reports,
        "label_entropy",
        "label entropy per batch (dashed: all labels)",
        "bits",
        "no --labels given",
        lambda rep: rep["labels"]["all_labels_entropy"],
    )
    mean_size = np.mean([s["mean"] for s in sizes]) if sizes else 1.0
    _draw_per_batch(
        ax_edges,
        reports,
        "edge_weight_kept",
        "share of the batch's edge weight kept inside it\n(dashed: random batches)",
        "share",
        "no --graph given",
        lambda rep: (mean_size - 1) / max(n - 1, 1),
    )
    title = (
        f"method {reports[0]['method'] or '?'}, fingerprint(s) "
        f"{', '.join(rep['fingerprint'] for rep in reports[:3])}{' ...' if len(reports) > 3 else ''}"
    )
    fig.suptitle(title if source is None else f"{source}: {title}", fontsize="medium")
    _save(plt, fig, path, fmt, overwrite)


def _pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (no display needed)."""
    matplotlib = require_matplotlib()
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, fig: Any, path: str, fmt: str, overwrite: bool) -> None:
    """Lay ``fig`` out, write it to ``path`` atomically, and close it whatever happens."""
    fig.tight_layout()
    try:
        with atomic_write(path, "wb", overwrite=overwrite) as fh:
            fig.savefig(fh, format=fmt)
    finally:
        plt.close(fig)


def _draw_examples_per_rank(ax: Any, reports: list[dict[str, Any]]) -> None:
    """Bars of the examples of every rank, one bar per epoch."""
    world = reports[0]["world_size"]
    width = 0.8 / len(reports)
    for j, rep in enumerate(reports):
        ax.bar(
            np.arange(world) + j * width, [rk["examples"] for rk in rep["ranks"]], width, label=f"epoch {rep['epoch']}"
        )
    ax.set(title="examples per rank", xlabel="rank", ylabel="examples")
    ax.set_xticks(np.arange(world) + 0.4 - width / 2, [str(r) for r in range(world)])
    if 1 < len(reports) <= 8:
        ax.legend(fontsize="small")


def _draw_batch_sizes(ax: Any, reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Bars of the mean batch size (min-max whiskers) of every epoch and rank; returns
    their ``batch_size`` entries."""
    sizes = [rk["batch_size"] for rep in reports for rk in rep["ranks"]]
    ax.bar(
        np.arange(len(sizes)),
        [s["mean"] for s in sizes],
        yerr=[[s["mean"] - s["min"] for s in sizes], [s["max"] - s["mean"] for s in sizes]],
        color="tab:gray",
    )
    ax.set(title="batch size (mean, min-max) per epoch and rank", xlabel="epoch / rank", ylabel="examples per batch")
    if len(sizes) <= 24:
        ax.set_xticks(np.arange(len(sizes)), [f"{rep['epoch']}/{rk['rank']}" for rep in reports for rk in rep["ranks"]])
    return sizes


def _draw_per_batch(
    ax: Any,
    reports: list[dict[str, Any]],
    key: str,
    title: str,
    ylabel: str,
    missing: str,
    reference: Callable[[dict], float] | None,
) -> None:
    """One line per rank of the per-batch figure ``key``, epochs one after another, with
    a dashed ``reference`` per epoch; ``missing`` written instead when the reports lack it."""
    if key not in reports[0]["ranks"][0]:
        ax.text(0.5, 0.5, missing, ha="center", va="center", transform=ax.transAxes)
        ax.set(title=title, xticks=[], yticks=[])
        return
    offset = 0
    for rep in reports:
        for rk in rep["ranks"]:
            vals = np.array([np.nan if v is None else v for v in rk[key]], dtype=float)
            ax.plot(
                offset + np.arange(vals.size),
                vals,
                lw=1,
                color=f"C{rk['rank'] % 10}",
                label=f"rank {rk['rank']}" if rep is reports[0] else None,
            )
        if reference is not None:
            ax.hlines(reference(rep), offset, offset + rep["num_batches"] - 1, colors="k", linestyles="dashed")
        offset += rep["num_batches"]
        if rep is not reports[-1]:
            ax.axvline(offset - 0.5, color="0.8", lw=0.8)
    ax.set(title=title, xlabel="batch (epochs one after another)", ylabel=ylabel)
    if reports[0]["world_size"] <= 8:
        ax.legend(fontsize="small")


def _figure_format(path: str) -> str:
    fmt = os.path.splitext(path)[1].lstrip(".").lower()
    if "." + fmt not in PLOT_SUFFIXES:
        raise ValueError(f"path must end in one of {PLOT_SUFFIXES}, got {path!r}")
    return fmt


def plot_audit(path: str | os.PathLike, report: Any, *, source: str | None = None, overwrite: bool = True) -> None:
    """Draw a :class:`~batchsel.data.audit.Audit` to ``path`` (``.png``, ``.pdf`` or ``.svg``,
    written atomically): the near-duplicate curve, the outlier scores with their cut, and
    with labels the class counts and the probability the neighbours give each row's label
    (flagged rows apart). Needs matplotlib.

    Parameters
    ----------
    path : str or os.PathLike
        The figure's file.
    report : Audit
        What :func:`~batchsel.data.audit.audit` found.
    source : str or None, default None
        The embeddings' file name, for the heading.
    overwrite : bool, default True
        Replace an existing file.

    Examples
    --------
    >>> import os, tempfile, numpy as np
    >>> from batchsel.data.audit import audit
    >>> x = np.random.default_rng(0).normal(size=(200, 8)).astype(np.float32)
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     plot_audit(os.path.join(folder, "audit.svg"), audit(x, np.arange(200) % 2, progress=False))
    ...     print(os.path.getsize(os.path.join(folder, "audit.svg")) > 0)
    True
    """
    path = os.fspath(path)
    fmt = _figure_format(path)
    plt = _pyplot()
    fig, ((ax_dup, ax_out), (ax_cls, ax_conf)) = plt.subplots(2, 2, figsize=(11, 7.5))
    ts = sorted(report.duplicates)
    ax_dup.plot(ts, [100 * report.duplicates[t] for t in ts], marker="o")
    ax_dup.set(title="near-duplicates removed", xlabel="cosine similarity threshold", ylabel="% of rows")
    score = report.outlier_score
    ax_out.hist(score, bins=60, color="tab:gray")
    if report.outliers.size:
        ax_out.axvline(score[report.outliers].min(), color="tab:red", ls="--", label=f"{report.outliers.size} outliers")
        ax_out.legend(fontsize="small")
    ax_out.set(title="1 - mean cosine similarity to the neighbours", xlabel="outlier score", ylabel="rows")
    if report.class_counts is None:
        for ax in (ax_cls, ax_conf):
            ax.text(0.5, 0.5, "no labels given", ha="center", va="center", transform=ax.transAxes)
            ax.set(xticks=[], yticks=[])
    else:
        classes = list(report.class_counts)
        ax_cls.bar(np.arange(len(classes)), [report.class_counts[c] for c in classes], color="tab:blue")
        ax_cls.set(title=f"class counts (largest / smallest {report.imbalance:.1f})", xlabel="class", ylabel="rows")
        if len(classes) <= 30:
            ax_cls.set_xticks(np.arange(len(classes)), [str(c) for c in classes])
        given = report.probabilities[np.arange(report.num_examples), report.label_positions]
        flagged = np.zeros(report.num_examples, bool)
        flagged[report.label_issues] = True
        bins = np.linspace(0, 1, 41)
        ax_conf.hist(given[~flagged], bins=bins, alpha=0.7, label="not flagged")
        ax_conf.hist(given[flagged], bins=bins, alpha=0.7, color="tab:red", label=f"{flagged.sum()} flagged")
        ax_conf.set(
            title=f"probability of the given label (noise ~ {report.noise_rate:.1%})",
            xlabel="probability",
            ylabel="rows",
        )
        ax_conf.legend(fontsize="small")
    heading = f"{report.num_examples} rows x {report.dim}"
    fig.suptitle(heading if source is None else f"{source}: {heading}", fontsize="medium")
    _save(plt, fig, path, fmt, overwrite)


__all__ = ["plot_reports", "plot_audit", "require_matplotlib", "PLOT_SUFFIXES"]
