"""``batchsel select``: pick K examples by greedy maximization of a submodular function.

In memory (:func:`batchsel.submodular.optimizers.maximize`), sharded over MPI ranks for
sparse facility location by exact greedy, or in one pass over a .npy file in bounded
memory (``--stream``: sieve streaming).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import numpy as np

from batchsel.cli import commands, inputs, outputs, ranks
from batchsel.cli.errors import EXIT_OK, UsageError
from batchsel.core.checks import check_int, check_metric, check_seed
from batchsel.core.io import AtomicGroup, NpyRows, conversion_hint
from batchsel.submodular.optimizers import OPTIMIZERS as MAXIMIZE_OPTIMIZERS

OBJECTIVES = ("facility-location", "feature-based", "graph-cut", "sum-redundancy", "saturated-coverage")
# every optimizer of maximize, its default (lazy) first, but GreeDi (which needs ranks:
# greedi_facility_location under mpiexec)
OPTIMIZERS = ("lazy", *(name for name in MAXIMIZE_OPTIMIZERS if name not in ("lazy", "greedi")))
SELECT_METRICS = inputs.METRICS + ("corr",)  # set functions also take apricot's correlation; the index does not

SELECT_HELP = "pick k examples by submodular maximization"
SELECT_DESCRIPTION = (
    "Pick K examples of EMB (N x d) by greedy maximization of a submodular function;\n"
    "print them in selection order with their marginal gains."
)

SELECT_EXAMPLE = """\
example:
  # 100 representative digits by facility location (euclidean, dense similarity)
  python -c "import numpy as np; from sklearn.datasets import load_digits; \\
np.save('emb.npy', load_digits().data.astype('float32'))"
  batchsel select emb.npy --k 100 --out picked.npy
  batchsel select emb.npy --k 10 --metric cosine --neighbors 20 --json | python -m json.tool
  # one pass over a large file in bounded memory (sieve streaming)
  batchsel select big.npy --k 100 --objective feature-based --stream --chunk-rows 65536

  stdout (text): one line per selected example, in selection order: INDEX<TAB>GAIN;
  with --out only one line saying what was written (--json still prints the JSON).
  --out FILE.npy saves the indices (int64); FILE.npz saves indices, gains and value.
  EMB may be FILE.npy (memory-mapped), FILE.npz or FILE.npz:NAME, FILE.pt or FILE.pt:NAME.
"""


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add the ``select`` command and its options (:func:`~batchsel.cli.commands.add_command`)."""
    p = commands.add_command(
        sub, parents, "select", help=SELECT_HELP, description=SELECT_DESCRIPTION, epilog=SELECT_EXAMPLE
    )
    commands.add_embeddings_argument(p)
    p.add_argument("--k", type=int, required=True, metavar="K", help="number of examples to select")
    p.add_argument(
        "--objective", choices=OBJECTIVES, default="facility-location", help="set function (default facility-location)"
    )
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="lazy", help="greedy variant (default lazy)")
    p.add_argument(
        "--epsilon",
        type=float,
        default=None,
        metavar="EPS",
        help="accuracy of the stochastic optimizers (default 0.01) and of --stream's thresholds (default 0.1)",
    )
    p.add_argument(
        "--metric",
        choices=SELECT_METRICS,
        default=None,
        help="similarity of embeddings (default euclidean: max d^2 - d^2, as apricot; cosine: squared "
        "cosine; corr: squared Pearson correlation)",
    )
    p.add_argument(
        "--neighbors",
        type=int,
        default=None,
        metavar="N",
        help="sparse similarity over the N-NN graph instead of a dense N x N one "
        "(default: dense up to 20000 examples, 20-NN beyond)",
    )
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the stochastic optimizers (default 0)")
    p.add_argument(
        "--out",
        metavar="FILE",
        help="save the indices to FILE.npy (or indices, gains and value to FILE.npz) instead of printing them",
    )
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    p.add_argument(
        "--stream",
        action="store_true",
        help="one pass over EMB.npy in chunks, in bounded memory (sieve streaming): feature-based, or "
        "facility-location over a seeded sample of --reference-size rows",
    )
    p.add_argument(
        "--chunk-rows", type=int, default=None, metavar="N", help="rows read at a time with --stream (default 65536)"
    )
    p.add_argument(
        "--reference-size",
        type=int,
        default=None,
        metavar="M",
        help="facility-location --stream: rows of the reference sample (default 1000)",
    )
    p.set_defaults(
        oom_hint="for large N use --neighbors N (a sparse similarity) or --stream (one pass in bounded memory)"
    )


def _objective(name: str, x: np.ndarray, metric: str, neighbors: int | None, progress: bool) -> Any:
    from batchsel.submodular.functions import (
        FacilityLocation,
        FeatureBased,
        GraphCut,
        SaturatedCoverage,
        SumRedundancy,
    )

    if name == "feature-based":
        return FeatureBased(x)
    cls: Any = {
        "facility-location": FacilityLocation,
        "graph-cut": GraphCut,
        "sum-redundancy": SumRedundancy,
        "saturated-coverage": SaturatedCoverage,
    }[name]
    return cls.from_embeddings(x, metric=metric, neighbors=neighbors, progress=progress)


def _select_stream(args: argparse.Namespace, metric: str, seed: int) -> tuple[int, Any]:
    """``select --stream``: sieve streaming over the .npy file, read chunk by chunk."""
    from batchsel.submodular.streaming import SieveStreaming

    if args.objective not in ("facility-location", "feature-based"):
        raise UsageError(f"--stream supports --objective facility-location or feature-based, not {args.objective}")
    if args.optimizer != "lazy" or args.neighbors is not None:
        raise UsageError("--optimizer and --neighbors do not apply to --stream (sieve streaming)")
    if args.objective == "feature-based" and args.reference_size is not None:
        raise UsageError("--reference-size applies to --objective facility-location only")
    chunk_rows = check_int(args.chunk_rows if args.chunk_rows is not None else 1 << 16, "--chunk-rows", minimum=1)
    reference_size = check_int(
        args.reference_size if args.reference_size is not None else 1000, "--reference-size", minimum=1
    )
    path, key = args.embeddings, None
    if ":" in os.path.basename(path) and not os.path.exists(path):
        path, key = path.rsplit(":", 1)
    if key is not None or not path.endswith(".npy"):
        raise UsageError(
            f"--stream reads .npy files (chunk by chunk), got {args.embeddings!r}; {conversion_hint(path)}"
        )
    n = NpyRows(path).shape[0]
    if args.k > n:
        raise UsageError(f"--k {args.k} is larger than the number of examples in {args.embeddings!r} ({n})")
    sieve = SieveStreaming(
        args.objective,
        args.k,
        epsilon=args.epsilon if args.epsilon is not None else 0.1,
        metric=metric,
        reference_size=reference_size,
        seed=seed,
        progress=not args.quiet,
    )
    return n, sieve.fit(path, chunk_rows=chunk_rows).selection_


def _select_in_memory(args: argparse.Namespace, metric: str, seed: int) -> tuple[int, Any] | None:
    """``select`` without ``--stream``: ``(N, selection)``, or None on a rank that leaves
    the writing and the report to rank 0. Under mpiexec -n W, sparse facility location by
    exact greedy runs sharded; any other selection runs on rank 0 alone."""
    sharded = (
        args.objective == "facility-location"
        and args.neighbors is not None
        and args.optimizer in ("lazy", "naive")
        and metric in ("euclidean", "cosine")
    )
    comm = ranks.mpi_ranks(args, ["embeddings"]) if sharded else None
    if not sharded and ranks.rank_zero_alone(args, ["embeddings"]):
        return None
    x = inputs.read_embeddings(args.embeddings) if comm is None else None
    n = x.shape[0] if x is not None else inputs.num_rows(args.embeddings)
    if args.k > n:
        raise UsageError(f"--k {args.k} is larger than the number of examples in {args.embeddings!r} ({n})")
    if args.neighbors is not None and args.neighbors >= n:
        raise UsageError(f"--neighbors {args.neighbors} must be smaller than the number of examples ({n})")
    from batchsel.submodular.optimizers import maximize

    if comm is not None:
        from batchsel.distributed.sharded import ShardedIndex, facility_location

        # the graph FacilityLocation.from_embeddings(neighbors=...) builds, in row shards
        index = ShardedIndex(args.embeddings, comm, metric=metric, progress=not args.quiet)
        rows = index.knn_graph(k=args.neighbors, kernel="rbf" if metric == "euclidean" else "cosine", self_weight=1.0)
        result = facility_location(rows, args.k, comm, index.row_range[0])
        return (n, result) if comm.rank == 0 else None  # rank 0 writes and reports
    f = _objective(args.objective, x, metric, args.neighbors, progress=not args.quiet)
    epsilon = args.epsilon if args.epsilon is not None else 0.01
    return n, maximize(f, args.k, optimizer=args.optimizer, epsilon=epsilon, seed=seed, progress=not args.quiet)


def _check_options(args: argparse.Namespace) -> tuple[str, int]:
    """The options' mistakes that need no data, and the checked ``(metric, seed)``."""
    if not args.stream and (args.chunk_rows is not None or args.reference_size is not None):
        raise UsageError("--chunk-rows and --reference-size apply to --stream only")
    if args.objective == "feature-based" and (args.metric is not None or args.neighbors is not None):
        raise UsageError(
            "--metric and --neighbors do not apply to --objective feature-based "
            "(it uses the embeddings as non-negative features)"
        )
    metric = check_metric(args.metric or "euclidean", SELECT_METRICS)
    if args.neighbors is not None:
        check_int(args.neighbors, "--neighbors", minimum=1)
    check_int(args.k, "--k", minimum=1)
    seed = check_seed(args.seed)
    if args.epsilon is not None and not 0 < args.epsilon < 1:
        raise UsageError(f"--epsilon must be in (0, 1), got {args.epsilon}")
    outputs.check_output(args.out, args.force, suffixes=(".npy", ".npz"), inputs=[("EMB", args.embeddings)])
    return metric, seed


def _report(args: argparse.Namespace, n: int, result: Any, metric: str, seed: int) -> None:
    """Write ``--out`` and print the selection (or, with ``--out``, one line)."""
    indices = np.asarray(result.indices, dtype=np.int64)
    gains = np.asarray(result.gains, dtype=np.float64)

    def write_outputs(group: AtomicGroup) -> None:
        with group.open(args.out, "wb", overwrite=args.force) as fh:
            if args.out.lower().endswith(".npy"):
                np.save(fh, indices)
            else:
                np.savez(fh, indices=indices, gains=gains, value=np.float64(result.value))

    outputs.write([args.out], write_outputs)
    if args.json:
        outputs.print_json(
            {
                "embeddings": args.embeddings,
                "num_examples": n,
                "k": args.k,
                "objective": args.objective,
                "optimizer": "sieve" if args.stream else args.optimizer,
                "metric": None if args.objective == "feature-based" else metric,
                "neighbors": args.neighbors,
                "seed": seed,
                "value": float(result.value),
                "indices": indices.tolist(),
                "gains": gains.tolist(),
            }
        )
    elif args.out is not None:
        # the selection is in the file: one line says what was written where
        saved = "indices" if args.out.lower().endswith(".npy") else "indices, gains and value"
        print(
            f"wrote {args.out}: {saved} of {indices.size} of {n} examples "
            f"({args.objective}{', sieve streaming' if args.stream else ''}, value {float(result.value):.8g})"
        )
    else:
        sys.stdout.write("".join(f"{i}\t{g:.8g}\n" for i, g in zip(indices.tolist(), gains.tolist())))


def cmd_select(args: argparse.Namespace) -> int:
    """Run ``batchsel select`` on the parsed ``args`` (the contract: :mod:`batchsel.cli.commands`)."""
    metric, seed = _check_options(args)
    if args.stream:
        if ranks.rank_zero_alone(args, ["embeddings"]):
            return EXIT_OK
        selected: tuple[int, Any] | None = _select_stream(args, metric, seed)
    else:
        selected = _select_in_memory(args, metric, seed)
    if selected is not None:
        _report(args, *selected, metric, seed)
    return EXIT_OK
