"""``batchsel plan``: every worker's batches for E epochs, saved in one plan file.

The selector of ``--method`` is built here from the command's options
(:func:`_selector`); ``--method buckets`` reads per-example costs (token lengths) in place
of the embeddings and plans token-budget batches (:class:`~batchsel.BucketSelector`).
Under mpiexec the k-NN graph of ``--method graph`` and the GreedMax partition of
``--partition submodular`` are built sharded over the ranks, and rank 0 plans and writes.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

import numpy as np

from batchsel.cli import commands, inputs, outputs, ranks
from batchsel.cli.errors import EXIT_OK, UsageError, one_line, require
from batchsel.cli.terminal import progress
from batchsel.core.checks import check_int, check_seed
from batchsel.core.io import AtomicGroup, array_shape
from batchsel.plans.plan import save_plans
from batchsel.selectors.buckets.bucket import DEFAULT_WIDTH

METHODS = ("random", "submodular", "loss", "graph", "coreset", "buckets")

PLAN_HELP = "compute every worker's batches and save them"
PLAN_DESCRIPTION = "Compute the batches of every worker (rank) for E epochs and save them in one\nplan file."

PLAN_EXAMPLE = """\
examples:
  # 3 epochs of random batches of 64 for 4 workers (DistributedSampler's split)
  batchsel plan emb.npy --batch-size 64 --workers 4 --epochs 3 --out plan.npz
  # graph-consistent batches: k-NN graph of the embeddings, METIS blocks per batch
  batchsel plan emb.npy --method graph --neighbors 10 --batch-size 64 --workers 4 \\
      --save-graph graph.npz --out plan.npz --force
  # the same with the k-NN graph built over 2 MPI ranks (each reads its rows of emb.npy;
  # rank 0 partitions the gathered graph and writes the same plan)
  mpiexec -n 2 batchsel plan emb.npy --method graph --batch-size 64 --workers 4 --out plan.npz
  # weighted coreset batches (CRAIG) need the labels
  batchsel plan emb.npy --method coreset --labels y.npy --fraction 0.2 \\
      --batch-size 64 --workers 4 --out coreset.npz
  # token-budget batches of similar length from lengths.npy (1-D: tokens per example):
  # each batch's padded cost, len(batch) * its longest length, stays within --max-cost
  batchsel plan lengths.npy --method buckets --max-cost 8192 --workers 4 --epochs 3 --out buckets.npz
  # as many batches as random batches of 64 instead; --packed budgets the sum of the lengths
  batchsel plan lengths.npy --method buckets --batch-size 64 --packed --workers 4 --out packed.npz

  All epochs go into one file; read it with batchsel.load_plans(PATH) or
  batchsel.EpochPlan.load(PATH, epoch=E). The same (inputs, method, seed, workers)
  always give the same plan: compare fingerprints with 'batchsel inspect'.
  Graphs (--graph, --save-graph) are scipy.sparse.save_npz files. Bucket batches hold
  many short or few long examples, every example once an epoch, the same number of
  batches on every worker (batchsel.BucketSelector).
"""

# the methods that use each method option: any other method refuses it
USED_BY = {
    "labels": ("coreset",),
    "metric": ("graph", "coreset"),
    "neighbors": ("graph", "coreset"),
    "weights": ("submodular",),
    "pool_size": ("submodular",),
    "partition": ("submodular",),
    "losses": ("loss",),
    "pressure": ("loss",),
    "graph": ("graph",),
    "blocks_per_batch": ("graph",),
    "save_graph": ("graph",),
    "fraction": ("coreset",),
    "max_cost": ("buckets",),
    "bucket_width": ("buckets",),
    "packed": ("buckets",),
    # every example is in exactly one bucket batch an epoch: nothing to drop
    "drop_last": tuple(m for m in METHODS if m != "buckets"),
}


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add the ``plan`` command and its options (:func:`~batchsel.cli.commands.add_command`)."""
    p = commands.add_command(sub, parents, "plan", help=PLAN_HELP, description=PLAN_DESCRIPTION, epilog=PLAN_EXAMPLE)
    p.add_argument(
        "embeddings",
        metavar="EMB",
        help="N x d embeddings: .npy, .npz[:NAME] or .pt[:NAME]; --method buckets: N per-example costs (1-D)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        metavar="B",
        help="examples per batch; --method buckets: as many batches as random batches of B (or give --max-cost)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,  # None when not given: 1, and a note under mpiexec (whose ranks are not the workers)
        metavar="W",
        help="number of data-parallel workers (training processes, the world size) the plan is for (default 1; "
        "not the number of mpiexec ranks, which only share the work of planning)",
    )
    p.add_argument("--epochs", type=int, default=1, metavar="E", help="number of epochs (default 1)")
    p.add_argument("--start-epoch", type=int, default=0, metavar="E0", help="number of the first epoch (default 0)")
    p.add_argument("--method", choices=METHODS, default="random", help="how batches are chosen (default random)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed (default 0)")
    p.add_argument(
        "--drop-last",
        action="store_true",
        default=None,  # None when not given: refused by --method buckets (USED_BY)
        help="drop the tail instead of padding ranks to equal size",
    )
    p.add_argument("--labels", metavar="Y", help="class labels (N integers) for --method coreset")
    p.add_argument(
        "--metric",
        choices=inputs.METRICS,
        default=None,
        help="graph: metric of the k-NN graph built from EMB; coreset: of the facility location (default euclidean)",
    )
    p.add_argument(
        "--neighbors",
        type=int,
        default=None,
        metavar="K",
        help="graph: k of the k-NN graph built from EMB (default 10); coreset: sparse K-NN "
        "similarity instead of dense per class",
    )
    _add_method_options(p)
    p.add_argument("--out", metavar="PLAN.npz", required=True, help="plan file to write")
    p.add_argument("--json", action="store_true", help="print a JSON summary instead of text")
    p.set_defaults(
        oom_hint="for large N give --method coreset --neighbors K (a sparse similarity instead of a dense one "
        "per class), or --method graph a smaller --neighbors",
    )


def _add_method_options(p: argparse.ArgumentParser) -> None:
    """The options of one method each, in a group per method."""
    g = p.add_argument_group("method submodular (SMDL)")
    g.add_argument(
        "--weights",
        metavar="LU,LR,LM,LF",
        default=None,
        help="weights of uncertainty, diversity, mean closeness, feature match (default 0.2,0.1,0.5,0.2)",
    )
    g.add_argument("--pool-size", type=int, default=None, metavar="P", help="candidates per batch (default 8 B)")
    g.add_argument(
        "--partition",
        choices=("random", "submodular"),
        default=None,
        help="worker shards: random every epoch, or representative (GreedMax) (default random)",
    )
    g = p.add_argument_group("method loss (loss-rank)")
    g.add_argument("--losses", metavar="L", help="latest per-example losses (N floats; default: none seen yet)")
    g.add_argument(
        "--pressure",
        type=float,
        default=None,
        metavar="S_E",
        help="selection pressure: first / last rank probability (default 100)",
    )
    g = p.add_argument_group("method graph (graph-consistent batches)")
    g.add_argument("--graph", metavar="G.npz", help="N x N graph (scipy.sparse.save_npz); default: k-NN graph of EMB")
    g.add_argument(
        "--blocks-per-batch", type=int, default=None, metavar="Q", help="METIS blocks per batch (default B / 32)"
    )
    g.add_argument("--save-graph", metavar="G.npz", help="also save the k-NN graph built from EMB")
    g = p.add_argument_group("method coreset (CRAIG)")
    g.add_argument("--fraction", type=float, default=None, metavar="F", help="share of each class kept (default 0.1)")
    g = p.add_argument_group("method buckets (token-budget batches of similar cost; EMB: the costs)")
    g.add_argument(
        "--max-cost",
        type=float,
        default=None,
        metavar="X",
        help="a batch's budget: len(batch) * max cost (or, --packed, the sum of the costs) <= X; or give --batch-size",
    )
    g.add_argument(
        "--bucket-width",
        type=float,
        default=None,
        metavar="W",
        help=f"largest / smallest cost in a bucket, > 1: smaller pads less, mixes less (default {DEFAULT_WIDTH:g})",
    )
    g.add_argument(
        "--packed",
        action="store_true",
        default=None,
        help="budget the sum of a batch's costs (packed input) instead of its padded cost",
    )


def _given(**options: Any) -> dict[str, Any]:
    """The options the user gave; the others keep the library's defaults."""
    return {k: v for k, v in options.items() if v is not None}


def _weights(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 4:
        raise UsageError(f"--weights must be 4 comma-separated numbers LU,LR,LM,LF, got {text!r}")
    return values


def _selector(
    args: argparse.Namespace,
    x: np.ndarray | None,
    n: int,
    labels: np.ndarray | None,
    losses: np.ndarray | None,
    graph: Any,
) -> tuple[Any, Any]:
    """The selector for ``--method`` over ``n`` examples (embeddings ``x``, None for
    ``random``), and the k-NN graph it built (method graph without ``--graph``; else
    None). ``(None, None)`` on a rank other than 0 under mpiexec, once its share of the
    sharded work is done."""
    from batchsel.selectors import CoresetSelector, LossRankSelector, RandomSelector

    common = {"seed": args.seed, "drop_last": args.drop_last}
    if args.method == "random":
        return RandomSelector(n, args.batch_size, **common), None
    if args.method == "submodular":
        return _submodular_selector(args, x, n), None
    if args.method == "loss":
        selector = LossRankSelector(n, args.batch_size, **common, **_given(pressure=args.pressure))
        if losses is not None:
            selector.observe(np.arange(n), losses=losses)
        return selector, None
    if args.method == "graph":
        return _graph_selector(args, x, graph)
    if args.method == "buckets":
        return _bucket_selector(args, x), None
    metric = inputs.metric(args.metric) if args.metric else None
    options = _given(fraction=args.fraction, metric=metric, neighbors=args.neighbors)
    return CoresetSelector(x, labels, args.batch_size, **common, **options), None


def _submodular_selector(args: argparse.Namespace, x: np.ndarray | None, n: int) -> Any:
    """``--method submodular`` (SMDL); under mpiexec with ``--partition submodular`` the
    GreedMax shards come from the graph built over the ranks (None on the other ranks)."""
    from batchsel.selectors import SubmodularSelector

    shards = None
    if getattr(args, "comm", None) is not None:  # under mpiexec: GreedMax from the sharded graph
        shards = _sharded_greedmax(args, n)
        if args.comm.rank != 0:
            return None  # rank 0 plans and writes
        x = inputs.read_embeddings(args.embeddings)  # SMDL itself needs all rows: on rank 0 only
    options = _given(
        weights=_weights(args.weights) if args.weights else None, pool_size=args.pool_size, partition=args.partition
    )
    selector = SubmodularSelector(x, args.batch_size, seed=args.seed, drop_last=args.drop_last, **options)
    if shards is not None:
        # the shards the selector would compute itself (same graph, same seed): handed
        # over through its state, which carries GreedMax shards per world size
        state = selector.state_dict()
        state["partitions"] = {args.workers: shards}
        selector.load_state_dict(state)
    return selector


def _graph_selector(args: argparse.Namespace, x: np.ndarray | None, graph: Any) -> tuple[Any, Any]:
    """``--method graph``: METIS blocks of ``--graph``, or of the k-NN graph of EMB built
    here (in row shards under mpiexec, gathered to rank 0: ``(None, None)`` elsewhere)."""
    from batchsel.selectors import GraphBlockSelector

    built = None
    metric = inputs.metric(args.metric or "euclidean")
    k = 10 if args.neighbors is None else args.neighbors
    if graph is None and getattr(args, "comm", None) is not None:  # under mpiexec: the sharded graph
        from batchsel.distributed.sharded import ShardedIndex, gather_graph

        index: Any = ShardedIndex(args.embeddings, args.comm, metric=metric, progress=not args.quiet)
        rows = index.knn_graph(k=k)
        del index
        # to rank 0 only: the other ranks would hold the whole graph just to drop it
        graph = built = gather_graph(rows, args.comm, root=0)
        del rows
        if args.comm.rank != 0:
            return None, None  # rank 0 partitions the graph
    elif graph is None:
        from batchsel.index import EmbeddingIndex

        index = EmbeddingIndex(x, metric=metric, progress=not args.quiet)
        graph = built = index.knn_graph(k=k)
        del index
    options = _given(blocks_per_batch=args.blocks_per_batch)
    return GraphBlockSelector(graph, args.batch_size, seed=args.seed, drop_last=args.drop_last, **options), built


def _bucket_selector(args: argparse.Namespace, costs: np.ndarray) -> Any:
    """``--method buckets``: token-budget batches of the per-example ``costs`` (EMB),
    refused in the command's terms when ``--workers`` cannot all get as many batches."""
    from batchsel.selectors.buckets.bucket import BucketSelector

    options = _given(max_cost=args.max_cost, batch_size=args.batch_size, bucket_width=args.bucket_width)
    if args.batch_size is not None and args.batch_size > len(costs):
        raise UsageError(
            f"--batch-size {args.batch_size} is more than the {len(costs)} examples: give at most {len(costs)}"
        )
    selector = BucketSelector(costs, packed=bool(args.packed), seed=args.seed, **options)
    if selector.world_error(args.workers) is not None:  # the selector's message, in the command's terms
        raise UsageError(
            f"--workers {args.workers} is too many for {selector.num_examples} examples under this budget (every "
            "worker gets as many batches, each of one example or more): use fewer --workers, or a larger "
            "--max-cost / --batch-size"
        )
    return selector


def _sharded_greedmax(args: argparse.Namespace, n: int) -> np.ndarray | None:
    """Under mpiexec, ``--partition submodular``: the GreedMax shard of every example for
    ``--workers`` shards (on rank 0; None elsewhere), from the RBF k-NN graph the
    selector would build itself (euclidean, GreedMax's default k) built over the ranks.
    GreedMax runs on rank 0 on the gathered graph (batchsel.distributed.sharded.submodular_partition)."""
    from batchsel.distributed.sharded import ShardedIndex, submodular_partition
    from batchsel.selectors.selector import Selector
    from batchsel.submodular.partition import DEFAULT_NEIGHBORS, shard_of_each

    # the one-process run's error for too many workers, before the graph is built
    Selector(n, 1).check_world(args.workers)
    k = min(DEFAULT_NEIGHBORS, n - 1)
    index = ShardedIndex(args.embeddings, args.comm, metric="euclidean", progress=not args.quiet)
    rows = index.knn_graph(k=k, kernel="rbf")
    del index
    parts = submodular_partition(rows, args.workers, args.comm, seed=args.seed, root=0)
    return shard_of_each(parts, n) if args.comm.rank == 0 else None


def _check_budget(args: argparse.Namespace) -> None:
    """``--batch-size`` (every method but buckets needs it), and the budget of ``--method
    buckets``: ``--max-cost`` or ``--batch-size``, one of them; ``--bucket-width``."""
    if args.method != "buckets":
        if args.batch_size is None:
            raise UsageError(f"--method {args.method} needs --batch-size B")
    elif (args.max_cost is None) == (args.batch_size is None):
        raise UsageError(
            "--method buckets needs --max-cost X (a batch's cost budget) or --batch-size B (as many batches as "
            f"random batches of B), {'not both' if args.max_cost is not None else 'one of them'}"
        )
    if args.batch_size is not None:
        check_int(args.batch_size, "--batch-size", minimum=1)
    if args.max_cost is not None and not (math.isfinite(args.max_cost) and args.max_cost > 0):
        raise UsageError(f"--max-cost must be a number > 0, got {args.max_cost}")
    if args.bucket_width is not None and not (math.isfinite(args.bucket_width) and args.bucket_width > 1):
        raise UsageError(
            f"--bucket-width must be a number > 1 (a bucket's largest cost / its smallest), got {args.bucket_width}"
        )


def _check_options(args: argparse.Namespace) -> None:
    """The options' mistakes that need no data, and the outputs (before the work)."""
    args.workers = 1 if args.workers is None else check_int(args.workers, "--workers", minimum=1)
    check_int(args.epochs, "--epochs", minimum=1)
    check_int(args.start_epoch, "--start-epoch", minimum=0)
    if args.neighbors is not None:
        check_int(args.neighbors, "--neighbors", minimum=1)
    args.seed = check_seed(args.seed)
    # Options that the chosen method would silently ignore are mistakes worth naming.
    for option, methods in USED_BY.items():
        if getattr(args, option) is not None and args.method not in methods:
            raise UsageError(f"--{option.replace('_', '-')} is used only by --method {' or '.join(methods)}")
    _check_budget(args)
    args.drop_last = bool(args.drop_last)  # None (not given) as False from here on
    if args.method == "coreset" and args.labels is None:
        raise UsageError("--method coreset needs --labels")
    if args.method == "graph":  # METIS partitions the graph: say so before building it
        require("pymetis", "--method graph")
    if args.graph is not None and (args.save_graph or args.neighbors or args.metric):
        raise UsageError(
            "--neighbors, --metric and --save-graph are for the graph built from EMB; they do not combine with --graph"
        )
    given = [
        ("COSTS" if args.method == "buckets" else "EMB", args.embeddings),
        ("--labels", args.labels),
        ("--losses", args.losses),
        ("--graph", args.graph),
    ]
    # numpy's savez would append .npz to another name; a plan file is read back by its name
    outputs.check_output(args.out, args.force, what="plan", suffixes=(".npz",), inputs=given)
    outputs.check_output(args.save_graph, args.force, what="graph", suffixes=(".npz",), inputs=given)
    if args.save_graph is not None and outputs.same_file(args.save_graph, args.out):
        raise UsageError("--save-graph and --out name the same file")


def _embeddings(args: argparse.Namespace) -> tuple[np.ndarray | None, int]:
    """``(x, N)`` of EMB, ``x`` None where the method does not need the rows here (random
    batches, a graph built over the ranks). A 1-D array is refused with the method that
    takes one: per-example costs (token lengths) are planned by ``--method buckets``, as
    :func:`~batchsel.cli.inputs.read_costs` names embeddings given to buckets."""
    try:
        if args.method == "random" or args.comm is not None:
            return None, inputs.num_rows(args.embeddings)
        x = inputs.read_embeddings(args.embeddings)
        return x, x.shape[0]
    except (UsageError, ValueError) as exc:
        try:
            one_d = len(array_shape(args.embeddings)) == 1  # read again on this error path only
        except (ValueError, TypeError, OSError):
            one_d = False
        if not one_d:
            raise
        raise UsageError(
            f"{one_line(exc)}; for a 1-D array of one cost per example (e.g. its length in tokens), add "
            "--method buckets (with --batch-size B or --max-cost X)"
        ) from None


def _read_inputs(args: argparse.Namespace) -> tuple[np.ndarray | None, int, Any, Any, Any]:
    """``(x, N, labels, losses, graph)``: the embeddings where the method needs them here
    (not for random batches, nor for a graph built over the ranks; the per-example costs
    for buckets), the other inputs given, checked against N."""
    if args.method == "buckets":
        x = inputs.read_costs(args.embeddings)  # the per-example costs stand in for the embeddings
        n = x.shape[0]
    else:
        x, n = _embeddings(args)
    if args.batch_size is not None and args.batch_size > n and args.method not in ("random", "buckets"):
        # the selectors' own check (batch_size <= N), before any graph is built, in the
        # command's terms; random batches take a larger B, as torch's BatchSampler does
        raise UsageError(
            f"--batch-size {args.batch_size} is larger than the {n} examples of {args.embeddings!r}: "
            f"--method {args.method} needs a batch size of at most {n}"
        )
    labels = inputs.read_labels(args.labels, n, allow_unlabeled=False) if args.labels else None
    losses = inputs.read_losses(args.losses, n) if args.losses else None
    graph = inputs.read_graph(args.graph, n) if args.graph else None
    return x, n, labels, losses, graph


def _write_plans(args: argparse.Namespace, plans: list[Any], built_graph: Any) -> None:
    """The plan file, and ``--save-graph`` the k-NN graph built: both or neither."""

    def write_outputs(group: AtomicGroup) -> None:
        with group.open(args.out, "wb", overwrite=args.force) as fh:
            save_plans(fh, plans)
        if args.save_graph is not None and built_graph is not None:
            import scipy.sparse as sp

            with group.open(args.save_graph, "wb", overwrite=args.force) as fh:
                sp.save_npz(fh, built_graph)

    outputs.write([args.out, args.save_graph], write_outputs)


def _cost_summary(selector: Any, plans: list[Any]) -> dict[str, Any]:
    """``--method buckets``: the budget in use, the largest batch cost (above the budget
    only for an example that costs more alone), and the share of the padded cost, over
    all epochs, that is padding."""
    from batchsel.selectors.buckets.kernels import batch_costs, batch_padding

    batches = [b for p in plans for r in range(p.world_size) for b in p.batches(r)]
    with np.errstate(over="ignore"):  # costs near float64's limit: said as None (JSON has no inf)
        padded = float(batch_costs(batches, selector.costs, packed=False).sum())
        # the padding summed position by position (>= 0), not padded - real: rounding gave "-0.0%"
        padding = float(batch_padding(batches, selector.costs).sum())
        largest = float(batch_costs(batches, selector.costs, selector.packed).max())
    share = padding / padded if 0 < padded < math.inf else math.nan if padded else 0.0
    return {
        "max_cost": selector.max_cost_,
        "bucket_width": selector.bucket_width,
        "packed": selector.packed,
        "max_batch_cost": largest if math.isfinite(largest) else None,
        "padding_share": share if math.isfinite(share) else None,
    }


def _report(args: argparse.Namespace, plans: list[Any], n: int, sizes: list[int], budget: dict[str, Any]) -> None:
    """Say what was written (stdout), with a note on stderr where the batches are smaller
    than ``--batch-size``; ``budget``: :func:`_cost_summary` (``--method buckets``) or empty."""
    if args.method != "buckets" and max(sizes) < args.batch_size:
        # said, not refused: the selectors (RandomSelector as torch's DistributedSampler +
        # BatchSampler) cut a batch larger than a worker's share of the epoch to that share
        share = max(p.indices(r).size for p in plans for r in range(p.world_size))
        sys.stderr.write(
            f"batchsel: note: --batch-size {args.batch_size} is more than the {share} examples each of the "
            f"{args.workers} worker(s) gets an epoch: the batches hold {max(sizes)} at most\n"
        )
    summary = {
        "out": args.out,
        "method": args.method,
        "seed": args.seed,
        "num_examples": n,
        "batch_size": args.batch_size,
        "world_size": args.workers,
        "num_batches": plans[0].num_batches,
        **budget,
        "epochs": [{"epoch": p.epoch, "fingerprint": p.fingerprint()} for p in plans],
    }
    if args.json:
        outputs.print_json(summary)
        return
    print(
        f"wrote {args.out}: {len(plans)} epoch(s) x {args.workers} worker(s) x {plans[0].num_batches} "
        f"batches of {min(sizes)}..{max(sizes)} examples (method {args.method}, seed {args.seed}, "
        f"{n} examples)"
    )
    if budget:
        largest, share = budget["max_batch_cost"], budget["padding_share"]
        print(
            f"budget {budget['max_cost']:g} per batch ({'packed' if budget['packed'] else 'padded'} cost; largest "
            f"batch {'beyond float64' if largest is None else f'{largest:g}'}), bucket width "
            f"{budget['bucket_width']:g}, padding {'unknown' if share is None else f'{share:.1%}'} of the padded cost"
        )
    for p in plans:
        print(f"epoch {p.epoch}  fingerprint {p.fingerprint()}")


def cmd_plan(args: argparse.Namespace) -> int:
    """Run ``batchsel plan`` on the parsed ``args`` (the contract: :mod:`batchsel.cli.commands`)."""
    workers_given = args.workers is not None
    _check_options(args)
    if args.method == "buckets":
        args.oom_hint = "for --method buckets give a --bucket-width further from 1"
    # under mpiexec -n W (W > 1), method graph and the GreedMax partition build the k-NN
    # graph sharded over the ranks (each reads its rows of EMB); rank 0 writes the outputs
    plan_inputs = ["embeddings", "labels", "losses", "graph"]
    sharded = (args.method == "graph" and args.graph is None) or (
        args.method == "submodular" and args.partition == "submodular"
    )
    comm = ranks.mpi_ranks(args, plan_inputs)
    args.comm = comm if sharded else None
    if comm is not None and not sharded and ranks.others_wait(comm):
        return EXIT_OK
    if comm is not None and comm.rank == 0 and not workers_given:
        # the plan's world size is --workers, never the launch's (1 process and mpiexec
        # give the same plan): said, as the ranks may be mistaken for the workers
        sys.stderr.write(
            f"batchsel: note: --workers not given: the plan is for 1 worker; the {comm.size} mpiexec ranks only "
            "share the work of planning (give --workers W for W training processes)\n"
        )
    x, n, labels, losses, graph = _read_inputs(args)
    selector, built_graph = _selector(args, x, n, labels, losses, graph)
    if args.comm is not None and args.comm.rank != 0:
        return EXIT_OK  # the graph is built; rank 0 partitions it and writes the outputs
    epochs = range(args.start_epoch, args.start_epoch + args.epochs)
    plans = [
        selector.plan(epoch=e, world_size=args.workers) for e in progress(epochs, args.quiet, desc="plan", unit="epoch")
    ]
    sizes = [b.size for p in plans for r in range(p.world_size) for b in p.batches(r)]
    if not sizes:  # nothing to train on: refused before it is written
        dropped = " with --drop-last, which drops them all (use fewer workers, or leave --drop-last out)"
        raise UsageError(
            f"the plan holds no batch: {args.workers} workers for {n} examples{dropped if args.drop_last else ''}"
        )
    budget = _cost_summary(selector, plans) if args.method == "buckets" else {}
    _write_plans(args, plans, built_graph)
    _report(args, plans, n, sizes, budget)
    return EXIT_OK
