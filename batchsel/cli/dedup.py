"""``batchsel dedup``: find near-duplicate rows and keep one of each group."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from batchsel.cli import commands, inputs, outputs, ranks
from batchsel.cli.errors import EXIT_OK, UsageError
from batchsel.core.checks import check_int
from batchsel.core.io import AtomicGroup

DEDUP_HELP = "find near-duplicate rows and keep one of each group"
DEDUP_DESCRIPTION = (
    "Find the rows of EMB whose embeddings are near-duplicates (cosine similarity >= T)\n"
    "and keep one row per group (its smallest index)."
)

DEDUP_EXAMPLE = """\
examples:
  # drop near-duplicates (cosine >= 0.95), keep one row per group: train on keep.npy's rows
  batchsel dedup emb.npy --threshold 0.95 --out keep.npy
  # also each row's group (the row its group keeps), as JSON figures
  batchsel dedup emb.npy --threshold 0.9 --out keep.npy --groups groups.npy --json
  # sharded over 2 MPI ranks (each reads its rows); rank 0 writes the same files
  mpiexec -n 2 batchsel dedup emb.npy --threshold 0.95 --out keep.npy

  Groups are the connected components of the near-duplicate pairs found among each
  row's K nearest neighbours; each keeps its smallest row index. stdout (text): the
  counts; --out keep.npy: the kept row indices (int64, sorted); --groups: for every row
  the row its group keeps.
"""


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add the ``dedup`` command and its options (:func:`~batchsel.cli.commands.add_command`)."""
    p = commands.add_command(
        sub, parents, "dedup", help=DEDUP_HELP, description=DEDUP_DESCRIPTION, epilog=DEDUP_EXAMPLE
    )
    commands.add_embeddings_argument(p)
    commands.add_threshold_argument(
        p, help="cosine similarity at or above which two rows are near-duplicates, in (0, 1] (default 0.95)"
    )
    p.add_argument("--k", type=int, default=8, metavar="K", help="neighbours searched per row (default 8)")
    p.add_argument("--out", metavar="KEEP.npy", help="save the kept row indices (int64, sorted)")
    p.add_argument("--groups", metavar="GROUPS.npy", help="save, for every row, the row its group keeps")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    p.set_defaults(
        oom_hint="lower --k (each row's K neighbours are held), or run under mpiexec on several machines "
        "(each indexes its rows)",
    )


def _report(args: argparse.Namespace, result: Any) -> None:
    """Print the counts of a deduplication (text or ``--json``)."""
    sizes = np.unique(result.group, return_counts=True)[1]
    report = {
        "embeddings": args.embeddings,
        "num_examples": result.num_examples,
        "threshold": result.threshold,
        "k": result.k,
        "kept": int(result.keep.size),
        "removed": int(result.num_examples - result.keep.size),
        "removed_fraction": result.removed_fraction,
        "pairs": int(result.pairs[0].size),
        "groups": int((sizes > 1).sum()),
        "largest_group": int(sizes.max()),
        "seconds": round(result.seconds, 3),
        **({"out": args.out} if args.out else {}),
        **({"groups_file": args.groups} if args.groups else {}),
        # random pairs nearly as alike as the threshold (raw features): also logged on stderr
        **({"warning": result.extra["warning"]} if result.extra.get("warning") else {}),
    }
    if args.json:
        outputs.print_json(report)
    else:
        print(
            f"{args.embeddings}: {report['kept']} of {report['num_examples']} rows kept, {report['removed']} "
            f"near-duplicates removed ({100 * report['removed_fraction']:.1f} %) at cosine >= {result.threshold:g}; "
            f"{report['groups']} groups of 2 or more, the largest of {report['largest_group']} rows"
        )


def cmd_dedup(args: argparse.Namespace) -> int:
    """Run ``batchsel dedup`` on the parsed ``args`` (the contract: :mod:`batchsel.cli.commands`)."""
    from batchsel.data.dedup import deduplicate

    inputs.check_threshold(args.threshold)
    check_int(args.k, "--k", minimum=1)
    given = [("EMB", args.embeddings)]
    outputs.check_output(args.out, args.force, what="output", suffixes=(".npy",), inputs=given)
    outputs.check_output(args.groups, args.force, what="groups", suffixes=(".npy",), inputs=given)
    if args.out is not None and args.groups is not None and outputs.same_file(args.out, args.groups):
        raise UsageError("--out and --groups name the same file")
    source, _, comm = ranks.sharded_source(args, ["embeddings"])
    result = deduplicate(source, args.threshold, k=args.k, comm=comm, progress=not args.quiet)
    if comm is not None and comm.rank != 0:
        return EXIT_OK  # rank 0 writes and reports

    def write_outputs(group: AtomicGroup) -> None:
        for path, array in ((args.out, result.keep), (args.groups, result.group)):
            if path is not None:
                with group.open(path, "wb", overwrite=args.force) as fh:
                    np.save(fh, array)

    outputs.write([args.out, args.groups], write_outputs)
    _report(args, result)
    return EXIT_OK
