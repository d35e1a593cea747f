"""``batchsel inspect``: summarize (and plot) a plan file, epoch by epoch."""

from __future__ import annotations

import argparse
import os
from typing import Any

from batchsel.cli import commands, inputs, outputs
from batchsel.cli.errors import EXIT_OK, UsageError
from batchsel.cli.terminal import progress
from batchsel.core.checks import check_int
from batchsel.plans.plan import load_plans
from batchsel.plans.plotting import plot_reports
from batchsel.plans.report import format_report, plan_report

INSPECT_HELP = "summarize (and plot) a plan file"
INSPECT_DESCRIPTION = (
    "Summarize a plan file: fingerprints, coverage, duplicates, per-rank counts,\n"
    "and label entropy / graph edges inside batches when given."
)

INSPECT_EXAMPLE = """\
examples:
  batchsel inspect plan.npz
  batchsel inspect plan.npz --labels y.npy --graph graph.npz --plot plan.png
  batchsel inspect plan.npz --json | python -c "import json,sys; \\
print([e['fingerprint'] for e in json.load(sys.stdin)['epochs']])"

  Reports per epoch: the fingerprint, coverage (share of the examples that appear),
  duplicates (repeats beyond the first, named as DistributedSampler-style padding where
  they only even out the ranks; --json: "padding"), per-rank batch and example counts;
  with --labels the label entropy of each batch (bits; -1 = unlabeled, ignored); with
  --graph the share of the graph's edge weight that lies inside batches, next to what
  random batches of the same sizes would keep.
"""


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add the ``inspect`` command and its options (:func:`~batchsel.cli.commands.add_command`)."""
    p = commands.add_command(
        sub, parents, "inspect", help=INSPECT_HELP, description=INSPECT_DESCRIPTION, epilog=INSPECT_EXAMPLE
    )
    p.add_argument("plan", metavar="PLAN.npz", help="plan file written by 'batchsel plan' or batchsel.save_plans")
    p.add_argument("--epoch", type=int, default=None, metavar="E", help="only this epoch (default all)")
    p.add_argument("--labels", metavar="Y", help="class labels (N integers, -1 = unlabeled)")
    p.add_argument("--graph", metavar="G.npz", help="N x N graph (scipy.sparse.save_npz)")
    p.add_argument("--plot", metavar="FILE.png", help="draw the figures to FILE (.png, .pdf or .svg)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(oom_hint=None)


def _padding(plan: Any, duplicates: int) -> int | None:
    """How many of a plan's ``duplicates`` (examples drawn more than once) are
    DistributedSampler-style padding, which repeats examples so that every rank gets as
    many as the others: the batches at the end of a rank that repeat an earlier batch
    (ranks evened out batch by batch: batch i of rank r comes after the batches before i
    and batch i of the ranks before r), and fewer than one example per rank beyond them
    (the wrap-around of DistributedSampler's split). None when the plan repeats more than
    that (a selector that draws examples again, e.g. by loss rank): padding, if any, is
    then not told apart."""
    batches = [plan.batches(r) for r in range(plan.world_size)]
    first: dict[bytes, tuple[int, int]] = {}
    for r, rank in enumerate(batches):
        for i, b in enumerate(rank):
            key = b.tobytes()
            first[key] = min(first.get(key, (i, r)), (i, r))
    repeated = 0
    for r, rank in enumerate(batches):
        for i in range(len(rank) - 1, -1, -1):
            if first[rank[i].tobytes()] == (i, r):
                break
            repeated += rank[i].size
    rest = duplicates - repeated
    return duplicates if 0 <= rest < plan.world_size else None


def _duplicates(report: dict[str, Any]) -> str:
    """The duplicates of an epoch's report, with what they are."""
    duplicates, padding = report["duplicates"], report["padding"]
    if not duplicates:
        return "0"
    if padding is None:
        return f"{duplicates} (examples drawn more than once: the method repeats examples)"
    same = "examples" if len({rank["examples"] for rank in report["ranks"]}) == 1 else "batches"
    return f"{duplicates} (DistributedSampler-style padding, so that every rank has the same number of {same})"


def _plans(args: argparse.Namespace) -> list[Any]:
    """The epochs of the plan file asked for (``--epoch``), validated."""
    plans = load_plans(args.plan)
    if args.epoch is not None:
        chosen = [p for p in plans if p.epoch == args.epoch]
        if not chosen:
            raise UsageError(f"{args.plan!r} has no epoch {args.epoch} (it has {[p.epoch for p in plans]})")
        plans = chosen
    for p in plans:
        p.validate()
    sizes = {p.num_examples for p in plans}
    if len(sizes) != 1 and (args.labels or args.graph):
        raise UsageError(f"the epochs of {args.plan!r} index datasets of different sizes {sorted(sizes)}")
    return plans


def cmd_inspect(args: argparse.Namespace) -> int:
    """Run ``batchsel inspect`` on the parsed ``args`` (the contract: :mod:`batchsel.cli.commands`)."""
    if args.epoch is not None:
        check_int(args.epoch, "--epoch", minimum=0)
    outputs.check_plot(args.plot, args.force, [("PLAN", args.plan), ("--labels", args.labels), ("--graph", args.graph)])
    plans = _plans(args)
    n = plans[0].num_examples
    labels = inputs.read_labels(args.labels, n, allow_unlabeled=True) if args.labels else None
    graph = inputs.read_graph(args.graph, n) if args.graph else None
    reports = [
        plan_report(p, labels, graph)
        for p in progress(plans, args.quiet or len(plans) < 3, desc="inspect", unit="epoch")
    ]
    for p, rep in zip(plans, reports):
        rep["padding"] = _padding(p, rep["duplicates"])
    outputs.write(
        [args.plot],
        # the figure replaces the group's temporary file (overwrite), renamed with the group
        lambda group: plot_reports(
            group.path(args.plot, overwrite=args.force), reports, source=os.path.basename(args.plan), overwrite=True
        ),
    )
    if args.json:
        outputs.print_json({"plan": args.plan, "epochs": reports, **({"plot": args.plot} if args.plot else {})})
    else:
        print(format_report(args.plan, [{**rep, "duplicates": _duplicates(rep)} for rep in reports]))
        if args.plot:
            print(f"wrote {args.plot}")
    return EXIT_OK
