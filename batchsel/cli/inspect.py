"""``batchsel inspect``: summarize (and plot) a plan file, epoch by epoch."""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

import numpy as np

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
    "and label entropy / graph edges inside batches, padding and the ranks' step-cost\n"
    "balance when given."
)

INSPECT_EXAMPLE = """\
examples:
  batchsel inspect plan.npz
  batchsel inspect plan.npz --labels y.npy --graph graph.npz --plot plan.png
  batchsel inspect buckets.npz --costs lengths.npy
  batchsel inspect plan.npz --json | python -c "import json,sys; \\
print([e['fingerprint'] for e in json.load(sys.stdin)['epochs']])"

  Reports per epoch: the fingerprint, coverage (share of the examples that appear),
  duplicates (repeats beyond the first, named as DistributedSampler-style padding where
  they only even out the ranks; --json: "padding"), per-rank batch and example counts;
  with --labels the label entropy of each batch (bits; -1 = unlabeled, ignored); with
  --graph the share of the graph's edge weight that lies inside batches, next to what
  random batches of the same sizes would keep; with --costs (one cost per example, the
  COSTS of 'batchsel plan --method buckets', or token lengths for any plan) the share of
  the padded cost that is padding (a batch pads to len(batch) x its longest), and the
  step-cost balance: per step, the costliest rank's batch over the ranks' mean, averaged
  over the steps (1 = every rank's batch costs the same; --json: "step_balance", and
  "step_balance_worst" the largest); --packed costs a batch the sum of its costs.
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
    p.add_argument(
        "--costs",
        metavar="COSTS",
        help="per-example costs (N numbers >= 0, e.g. token lengths): padding share and step-cost balance",
    )
    p.add_argument(
        "--packed",
        action="store_true",
        help="with --costs: a batch costs the sum of its costs (packed input), not len(batch) x its longest",
    )
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


def _finite(value: float) -> float | None:
    """``value``, or None where it is NaN or infinite (JSON has neither)."""
    return float(value) if math.isfinite(value) else None


def cost_balance(plan: Any, costs: np.ndarray, packed: bool) -> dict[str, Any]:
    """What per-example ``costs`` say of a plan: the padding, and how evenly the ranks'
    batches of each step cost (every rank waits for the costliest at each step).

    Parameters
    ----------
    plan : EpochPlan
        One epoch.
    costs : numpy.ndarray
        Every example's cost (checked: ``plan.num_examples`` finite numbers >= 0).
    packed : bool
        A batch costs the sum of its costs, not ``len(batch) * its largest``.

    Returns
    -------
    dict
        ``packed``; ``padding_share``, the padding's share of the padded cost (0 when
        that is 0); ``step_balance``, the mean over the steps of the costliest rank's
        batch cost over the ranks' mean (a step whose batches all cost 0 counts 1), and
        ``step_balance_worst``, its largest; each None where it is not a finite number
        (costs beyond float64, a plan without batches).

    Examples
    --------
    >>> from batchsel import EpochPlan
    >>> plan = EpochPlan([[np.array([0, 1])], [np.array([2])]], num_examples=3)
    >>> cost_balance(plan, np.array([1.0, 3, 2]), packed=False)
    {'packed': False, 'padding_share': 0.25, 'step_balance': 1.5, 'step_balance_worst': 1.5}
    """
    from batchsel.selectors.buckets.kernels import batch_costs, batch_padding

    batches = [b for r in range(plan.world_size) for b in plan.batches(r)]
    full = np.array([b.size > 0 for b in batches], dtype=bool)
    kept = [b for b in batches if b.size]  # the kernels take no empty batch: an empty one costs 0
    cost, padded = np.zeros(len(batches)), np.zeros(len(batches))
    with np.errstate(over="ignore", invalid="ignore"):  # beyond float64: said as None
        cost[full] = batch_costs(kept, costs, packed)
        padded[full] = batch_costs(kept, costs, packed=False)
        padding, total = float(batch_padding(kept, costs).sum()), float(padded.sum())
        steps = cost.reshape(plan.world_size, plan.num_batches)  # rank-major, as the plan lists them
        mean, most = steps.mean(axis=0), steps.max(axis=0, initial=0.0)
        ratio = np.where(mean > 0, most / np.where(mean > 0, mean, 1.0), 1.0)
    return {
        "packed": packed,
        # as plan's report: a padded cost beyond float64 leaves the share unknown
        "padding_share": (_finite(padding / total) if math.isfinite(total) else None) if total else 0.0,
        "step_balance": _finite(float(ratio.mean())) if ratio.size else None,
        "step_balance_worst": _finite(float(ratio.max())) if ratio.size else None,
    }


def _balance_lines(args: argparse.Namespace, plans: list[Any], reports: list[dict[str, Any]]) -> list[str]:
    """The text lines of ``--costs`` (one per epoch), or the hint to give it for a buckets plan."""
    if args.costs is None:
        if any(p.method == "buckets" for p in plans):
            return ["padding and step-cost balance: give --costs COSTS (the per-example costs the plan was made of)"]
        return []
    kind = "packed: the sum of a batch's costs" if args.packed else "padded: len(batch) x its longest"
    lines = [f"costs {args.costs} ({kind}):"]
    for p, rep in zip(plans, reports):
        c = rep["costs"]
        share = "unknown" if c["padding_share"] is None else f"{c['padding_share']:.1%}"
        mean, worst = (("-" if v is None else f"{v:.3f}") for v in (c["step_balance"], c["step_balance_worst"]))
        lines.append(
            f"  epoch {p.epoch}  padding {share} of the padded cost  step-cost balance {mean} (the costliest "
            f"rank's batch / the ranks' mean, mean over {p.num_batches} steps; worst step {worst})"
        )
    return lines


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
    if len(sizes) != 1 and (args.labels or args.graph or args.costs):
        raise UsageError(f"the epochs of {args.plan!r} index datasets of different sizes {sorted(sizes)}")
    return plans


def cmd_inspect(args: argparse.Namespace) -> int:
    """Run ``batchsel inspect`` on the parsed ``args`` (the contract: :mod:`batchsel.cli.commands`)."""
    if args.epoch is not None:
        check_int(args.epoch, "--epoch", minimum=0)
    if args.packed and args.costs is None:
        raise UsageError("--packed is used only with --costs COSTS")
    given = [("PLAN", args.plan), ("--labels", args.labels), ("--graph", args.graph), ("--costs", args.costs)]
    outputs.check_plot(args.plot, args.force, given)
    plans = _plans(args)
    n = plans[0].num_examples
    labels = inputs.read_labels(args.labels, n, allow_unlabeled=True) if args.labels else None
    graph = inputs.read_graph(args.graph, n) if args.graph else None
    costs = inputs.read_costs(args.costs, n, option="--costs") if args.costs else None
    reports = [
        plan_report(p, labels, graph)
        for p in progress(plans, args.quiet or len(plans) < 3, desc="inspect", unit="epoch")
    ]
    for p, rep in zip(plans, reports):
        rep["padding"] = _padding(p, rep["duplicates"])
        if costs is not None:
            rep["costs"] = cost_balance(p, costs, args.packed)
    outputs.write(
        [args.plot],
        # the figure replaces the group's temporary file (overwrite), renamed with the group
        lambda group: plot_reports(
            group.path(args.plot, overwrite=args.force), reports, source=os.path.basename(args.plan), overwrite=True
        ),
    )
    if args.json:
        extra = {"plot": args.plot} if args.plot else {}
        outputs.print_json(
            {"plan": args.plan, **({"costs": args.costs} if args.costs else {}), "epochs": reports, **extra}
        )
    else:
        print(format_report(args.plan, [{**rep, "duplicates": _duplicates(rep)} for rep in reports]))
        for line in _balance_lines(args, plans, reports):
            print(line)
        if args.plot:
            print(f"wrote {args.plot}")
    return EXIT_OK
