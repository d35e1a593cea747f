"""``batchsel audit``: near-duplicates, label noise, imbalance and outliers of a data set."""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np

from batchsel.cli import commands, inputs, outputs, ranks
from batchsel.cli.errors import EXIT_OK, UsageError
from batchsel.core.checks import check_int
from batchsel.core.io import AtomicGroup

AUDIT_HELP = "near-duplicates, label noise, imbalance and outliers of a data set"
AUDIT_DESCRIPTION = (
    "Audit EMB (and its labels): near-duplicates, label noise, class balance, outliers\n"
    "and cluster structure, with what the regime benchmark measured on such data."
)

AUDIT_EXAMPLE = """\
examples:
  batchsel audit emb.npy --labels y.npy
  batchsel audit emb.npy --labels y.npy --json --issues suspects.npy --plot audit.png
  batchsel audit emb.npy --labels y.npy --probabilities oof_probs.npy   # a model's, cross-validated
  mpiexec -n 2 batchsel audit emb.npy --labels y.npy        # the k-NN search sharded

  From one k-NN search (cosine): the share of near-duplicate rows at several thresholds,
  outliers, how clustered the rows are and, with --labels, class counts, the estimated
  share of wrong labels (confident learning on the neighbours' leave-one-out votes) and
  the rows most likely mislabelled (--issues saves them, most likely first); then what
  the regime benchmark measured on data like this.
"""


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add the ``audit`` command and its options (:func:`~batchsel.cli.commands.add_command`)."""
    p = commands.add_command(
        sub, parents, "audit", help=AUDIT_HELP, description=AUDIT_DESCRIPTION, epilog=AUDIT_EXAMPLE
    )
    commands.add_embeddings_argument(p)
    p.add_argument("--labels", metavar="Y", help="class labels (N integers): label noise and class balance")
    commands.add_threshold_argument(p, help="near-duplicate cosine similarity for the advice, in (0, 1] (default 0.95)")
    p.add_argument(
        "--probabilities",
        metavar="P",
        help="N x C out-of-sample class probabilities of a model (column c = label c; e.g. "
        "cross-validated softmax outputs) for the label-noise estimate, instead of the neighbours' votes",
    )
    p.add_argument("--k", type=int, default=10, metavar="K", help="neighbours per row (default 10)")
    p.add_argument("--issues", metavar="FILE.npy", help="save the rows flagged as mislabelled, most likely first")
    p.add_argument("--plot", metavar="FILE.png", help="draw the figures to FILE (.png, .pdf or .svg)")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    p.set_defaults(
        oom_hint="lower --k (every row's K neighbours are held), or run under mpiexec on several machines "
        "(each indexes its rows)",
    )


def _check_options(args: argparse.Namespace) -> None:
    """The options' mistakes that need no data, and the outputs (before the work)."""
    inputs.check_threshold(args.threshold)
    check_int(args.k, "--k", minimum=1)
    if args.issues is not None and args.labels is None:
        raise UsageError("--issues needs --labels (the flagged rows are label issues)")
    if args.probabilities is not None and args.labels is None:
        raise UsageError("--probabilities needs --labels (they are a model's probabilities of each label)")
    given = [("EMB", args.embeddings), ("--labels", args.labels), ("--probabilities", args.probabilities)]
    outputs.check_output(args.issues, args.force, what="issues", suffixes=(".npy",), inputs=given)
    outputs.check_plot(args.plot, args.force, given)
    if args.issues is not None and args.plot is not None and outputs.same_file(args.issues, args.plot):
        raise UsageError("--issues and --plot name the same file")


def _write_outputs(args: argparse.Namespace, report: Any) -> None:
    """``--issues`` and ``--plot``: both or neither."""
    from batchsel.plans.plotting import plot_audit

    def write_outputs(group: AtomicGroup) -> None:
        if args.issues is not None:
            with group.open(args.issues, "wb", overwrite=args.force) as fh:
                np.save(fh, report.label_issues)
        if args.plot is not None:
            # the figure replaces the group's temporary file (overwrite), renamed with the group
            plot_audit(
                group.path(args.plot, overwrite=args.force),
                report,
                source=os.path.basename(args.embeddings),
                overwrite=True,
            )

    outputs.write([args.issues, args.plot], write_outputs)


def cmd_audit(args: argparse.Namespace) -> int:
    """Run ``batchsel audit`` on the parsed ``args`` (the contract: :mod:`batchsel.cli.commands`)."""
    from batchsel.data.audit import audit

    _check_options(args)
    source, n, comm = ranks.sharded_source(args, ["embeddings", "labels", "probabilities"])
    if n < 2:
        raise UsageError(f"an audit needs at least 2 rows, {args.embeddings!r} has {n}")
    labels = inputs.read_labels(args.labels, n, allow_unlabeled=False) if args.labels else None
    probabilities = None
    if args.probabilities is not None:
        probabilities = inputs.read_probabilities(args.probabilities, labels, n)
    report = audit(
        source,
        labels,
        k=args.k,
        threshold=args.threshold,
        comm=comm,
        progress=not args.quiet,
        probabilities=probabilities,
    )
    if comm is not None and comm.rank != 0:
        return EXIT_OK  # rank 0 writes and reports
    _write_outputs(args, report)
    if args.json:
        outputs.print_json(
            {
                "embeddings": args.embeddings,
                **report.to_dict(),
                **({"issues": args.issues} if args.issues else {}),
                **({"plot": args.plot} if args.plot else {}),
            }
        )
    else:
        print(f"{args.embeddings}: {report.format()}")
    return EXIT_OK
