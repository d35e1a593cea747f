"""The ``batchsel`` command line: ``select``, ``plan`` and ``inspect``.

For people who have embeddings in a file and want a selection or a batch schedule without
writing Python, and for inspecting schedules::

    batchsel select emb.npy --k 100 --json > picked.json
    batchsel plan emb.npy --batch-size 64 --workers 4 --epochs 3 --out plan.npz
    batchsel inspect plan.npz --labels y.npy --plot plan.png

Results (and ``--json``) go to stdout, progress bars and errors to stderr; progress bars
only when stderr is a terminal (none in a pipe, a log file or under mpiexec, whose ranks
write to pipes), and no colour or other escape codes anywhere. Exit codes:
0 success; 2 bad usage or bad input (one line ``batchsel: error: ...`` on stderr, no
traceback); 1 an internal error (one line, the traceback only with ``--debug``); 130
Ctrl-C; 143 SIGTERM. Every output is checked before the work (a file can be created in
its folder), written to a temporary name, and renamed with the command's other outputs
once all are written (temporary files are removed on an error, Ctrl-C or SIGTERM): a
command leaves all of its files or none. An existing file is only replaced with
``--force`` (a symlink is written through; devices and other special files are refused).
Under mpiexec the ranks first check that they run the same command on the same data.
"""

from __future__ import annotations

import argparse
import atexit
import json
import linecache
import logging
import math
import os
import re
import signal
import socket
import sys
import tempfile
import traceback
import zipfile
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from batchsel.core.checks import check_graph, check_int, check_labels, check_metric, check_seed, load_embeddings
from batchsel.core.io import AtomicGroup, NpyRows, array_digest, array_shape, atomic_group, conversion_hint, load_array
from batchsel.core.version import __version__
from batchsel.plans.plan import load_plans, save_plans
from batchsel.plans.plotting import PLOT_SUFFIXES, plot_reports, require_matplotlib
from batchsel.plans.report import format_report, plan_report

logger = logging.getLogger(__name__)

EXIT_OK, EXIT_UNEXPECTED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_BROKEN_PIPE, EXIT_TERMINATED = 0, 1, 2, 130, 141, 143

OBJECTIVES = ("facility-location", "feature-based", "graph-cut", "sum-redundancy", "saturated-coverage")
# every optimizer of maximize but GreeDi (which needs ranks: greedi_facility_location under mpiexec)
OPTIMIZERS = (
    "lazy",
    "naive",
    "two-stage",
    "approximate-lazy",
    "stochastic",
    "lazier-than-lazy",
    "sample",
    "modular",
    "bidirectional",
)
METHODS = ("random", "submodular", "loss", "graph", "coreset")
# "l2" (faiss's name) is accepted as a synonym of "euclidean": _metric translates it.
METRICS = ("cosine", "euclidean", "l2")
SELECT_METRICS = METRICS + ("corr",)  # set functions also take apricot's correlation; the index does not


class UsageError(Exception):
    """Bad usage or bad input: exit code 2 and one line on stderr."""


class Terminated(BaseException):
    """SIGTERM arrived: unwinds like Ctrl-C, so open atomic writes remove their
    temporary files (the default action would kill the process on the spot)."""


class _Parser(argparse.ArgumentParser):
    # argparse prints the usage and exits; a one-line error that names the problem (and
    # where the help is) is easier to read in logs and to test.
    def error(self, message: str) -> None:
        raise UsageError(f"{message} (see '{self.prog} --help')")


# --------------------------------------------------------------------------------------
# argument parsing
# --------------------------------------------------------------------------------------

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

  All epochs go into one file; read it with batchsel.load_plans(PATH) or
  batchsel.EpochPlan.load(PATH, epoch=E). The same (inputs, method, seed, workers)
  always give the same plan: compare fingerprints with 'batchsel inspect'.
  Graphs (--graph, --save-graph) are scipy.sparse.save_npz files.
"""

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

MAIN_EXAMPLE = """\
example ('batchsel COMMAND --help' shows each command's options and examples):
  batchsel select emb.npy --k 100 --json
  batchsel plan emb.npy --batch-size 64 --workers 4 --epochs 2 --out plan.npz
  batchsel inspect plan.npz --labels y.npy --plot plan.png
  batchsel dedup emb.npy --threshold 0.95 --out keep.npy
  batchsel audit emb.npy --labels y.npy

exit codes: 0 ok, 2 bad usage or input, 1 internal error (--debug shows the traceback)
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``batchsel`` command."""
    fmt = argparse.RawDescriptionHelpFormatter
    parser = _Parser(
        prog="batchsel",
        description="Data selection and mini-batch scheduling for data-parallel training.",
        epilog=MAIN_EXAMPLE,
        formatter_class=fmt,
    )
    parser.add_argument("--version", action="version", version=f"batchsel {__version__}")
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no progress bars (shown only when stderr is a terminal)"
    )
    parser.add_argument("--debug", action="store_true", help="print the traceback of errors")
    # The same flags after the command name; SUPPRESS keeps a value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=argparse.SUPPRESS,
        help="no progress bars (shown only when stderr is a terminal)",
    )
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="print the traceback of errors")
    force = argparse.ArgumentParser(add_help=False)
    force.add_argument("--force", action="store_true", help="replace output files that exist")
    sub: Any = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "select",
        parents=[common, force],
        formatter_class=fmt,
        epilog=SELECT_EXAMPLE,
        help="pick k examples by submodular maximization",
        description="Pick K examples of EMB (N x d) by greedy maximization of a submodular function;\n"
        "print them in selection order with their marginal gains.",
    )
    p.add_argument("embeddings", metavar="EMB", help="N x d embeddings: .npy, .npz[:NAME] or .pt[:NAME]")
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
        run=cmd_select,
        oom_hint="for large N use --neighbors N (a sparse similarity) or --stream (one pass in bounded memory)",
    )

    p = sub.add_parser(
        "plan",
        parents=[common, force],
        formatter_class=fmt,
        epilog=PLAN_EXAMPLE,
        help="compute every worker's batches and save them",
        description="Compute the batches of every worker (rank) for E epochs and save them in one\nplan file.",
    )
    p.add_argument("embeddings", metavar="EMB", help="N x d embeddings: .npy, .npz[:NAME] or .pt[:NAME]")
    p.add_argument("--batch-size", type=int, required=True, metavar="B", help="examples per batch")
    p.add_argument(
        "--workers", type=int, required=True, metavar="W", help="number of data-parallel workers (world size)"
    )
    p.add_argument("--epochs", type=int, default=1, metavar="E", help="number of epochs (default 1)")
    p.add_argument("--start-epoch", type=int, default=0, metavar="E0", help="number of the first epoch (default 0)")
    p.add_argument("--method", choices=METHODS, default="random", help="how batches are chosen (default random)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed (default 0)")
    p.add_argument("--drop-last", action="store_true", help="drop the tail instead of padding ranks to equal size")
    p.add_argument("--labels", metavar="Y", help="class labels (N integers) for --method coreset")
    p.add_argument(
        "--metric",
        choices=METRICS,
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
    p.add_argument("--out", metavar="PLAN.npz", required=True, help="plan file to write")
    p.add_argument("--json", action="store_true", help="print a JSON summary instead of text")
    p.set_defaults(
        run=cmd_plan,
        oom_hint="for large N give --method coreset --neighbors K (a sparse similarity instead of a dense one "
        "per class), or --method graph a smaller --neighbors",
    )

    p = sub.add_parser(
        "inspect",
        parents=[common, force],
        formatter_class=fmt,
        epilog=INSPECT_EXAMPLE,
        help="summarize (and plot) a plan file",
        description="Summarize a plan file: fingerprints, coverage, duplicates, per-rank counts,\n"
        "and label entropy / graph edges inside batches when given.",
    )
    p.add_argument("plan", metavar="PLAN.npz", help="plan file written by 'batchsel plan' or batchsel.save_plans")
    p.add_argument("--epoch", type=int, default=None, metavar="E", help="only this epoch (default all)")
    p.add_argument("--labels", metavar="Y", help="class labels (N integers, -1 = unlabeled)")
    p.add_argument("--graph", metavar="G.npz", help="N x N graph (scipy.sparse.save_npz)")
    p.add_argument("--plot", metavar="FILE.png", help="draw the figures to FILE (.png, .pdf or .svg)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(run=cmd_inspect, oom_hint=None)

    p = sub.add_parser(
        "dedup",
        parents=[common, force],
        formatter_class=fmt,
        epilog=DEDUP_EXAMPLE,
        help="find near-duplicate rows and keep one of each group",
        description="Find the rows of EMB whose embeddings are near-duplicates (cosine similarity >= T)\n"
        "and keep one row per group (its smallest index).",
    )
    p.add_argument("embeddings", metavar="EMB", help="N x d embeddings: .npy, .npz[:NAME] or .pt[:NAME]")
    p.add_argument(
        "--threshold",
        type=float,
        default=0.95,
        metavar="T",
        help="cosine similarity at or above which two rows are near-duplicates, in (0, 1] (default 0.95)",
    )
    p.add_argument("--k", type=int, default=8, metavar="K", help="neighbours searched per row (default 8)")
    p.add_argument("--out", metavar="KEEP.npy", help="save the kept row indices (int64, sorted)")
    p.add_argument("--groups", metavar="GROUPS.npy", help="save, for every row, the row its group keeps")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    p.set_defaults(
        run=cmd_dedup,
        oom_hint="lower --k (each row's K neighbours are held), or run under mpiexec on several machines "
        "(each indexes its rows)",
    )

    p = sub.add_parser(
        "audit",
        parents=[common, force],
        formatter_class=fmt,
        epilog=AUDIT_EXAMPLE,
        help="near-duplicates, label noise, imbalance and outliers of a data set",
        description="Audit EMB (and its labels): near-duplicates, label noise, class balance, outliers\n"
        "and cluster structure, with what the regime benchmark measured on such data.",
    )
    p.add_argument("embeddings", metavar="EMB", help="N x d embeddings: .npy, .npz[:NAME] or .pt[:NAME]")
    p.add_argument("--labels", metavar="Y", help="class labels (N integers): label noise and class balance")
    p.add_argument(
        "--threshold",
        type=float,
        default=0.95,
        metavar="T",
        help="near-duplicate cosine similarity for the advice, in (0, 1] (default 0.95)",
    )
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
        run=cmd_audit,
        oom_hint="lower --k (every row's K neighbours are held), or run under mpiexec on several machines "
        "(each indexes its rows)",
    )
    return parser


# --------------------------------------------------------------------------------------
# inputs and outputs
# --------------------------------------------------------------------------------------


def _embeddings(path: str) -> np.ndarray:
    """N x d float32 embeddings from a file (.npy stays memory-mapped)."""
    return load_embeddings(load_array(path), name=f"embeddings {path!r}")


def _num_rows(path: str) -> int:
    """N of an N x d embeddings file, from its header where the format has one: random
    batches need nothing else (loading would copy a float64 file to float32 and read all
    of it for the NaN check)."""
    shape = array_shape(path)
    if len(shape) != 2:
        raise UsageError(f"embeddings {path!r} must be 2-D (N x d), got shape {shape}")
    if shape[0] == 0 or shape[1] == 0:
        raise UsageError(f"embeddings {path!r} is empty: shape {shape}")
    return int(shape[0])


def _labels(path: str, num_examples: int, allow_unlabeled: bool) -> np.ndarray:
    return check_labels(load_array(path), num_examples, name=f"labels {path!r}", allow_unlabeled=allow_unlabeled)


def _graph(path: str, num_examples: int) -> Any:
    import scipy.sparse as sp

    if os.path.isdir(path):
        raise UsageError(f"graph {path!r} is a directory, not a file")
    if not os.path.exists(path):
        raise UsageError(f"no such graph file {path!r}")
    if not zipfile.is_zipfile(path):  # not an .npz (a CSV edge list, a .npy)
        npz = os.path.splitext(path)[0] + ".npz"
        raise UsageError(
            f"cannot read graph {path!r}: not a scipy.sparse.save_npz file; save the N x N matrix with "
            f"scipy.sparse.save_npz({npz!r}, matrix)"
        )
    try:
        graph = sp.load_npz(path)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise UsageError(f"cannot read graph {path!r} (expected a scipy.sparse.save_npz file): {exc}") from None
    return check_graph(graph, num_nodes=num_examples, name=f"graph {path!r}")


def _input_file(spec: str) -> str:
    """The file of an input argument (``FILE.npz:NAME`` names an array inside FILE)."""
    if not os.path.exists(spec) and ":" in os.path.basename(spec):
        return spec.rsplit(":", 1)[0]
    return spec


def _same_file(a: str, b: str) -> bool:
    """Whether two paths name one file: the same name, a symlink (resolved paths, also of a
    file not written yet) or a hard link (inode)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)


def _check_output(
    path: str | None,
    force: bool,
    what: str = "output",
    suffixes: tuple[str, ...] = (),
    inputs: Sequence[tuple[str, str | None]] = (),
) -> None:
    """Fail before the expensive work when an output cannot be written (the atomic write
    checks again when it happens) or is one of the ``inputs`` (``(option, path)`` pairs):
    ``--force`` replaces outputs, never the data read."""
    if path is None:
        return
    if suffixes and not path.lower().endswith(suffixes):
        raise UsageError(f"{what} {path!r} must end with {' or '.join(suffixes)}")
    for option, spec in inputs:
        if spec is None:
            continue
        if _same_file(_input_file(spec), path):
            raise UsageError(f"{what} {path!r} is the input {option} {spec!r}: write the output to another file")
    if os.path.isdir(path):
        raise UsageError(f"{what} {path!r} is a directory")
    if os.path.lexists(path) and not force:
        raise UsageError(f"{what} {path!r} exists (pass --force to replace it)")
    # a symlink is written through (the atomic write replaces its target, not the link)
    target = os.path.realpath(path) if os.path.islink(path) else path
    if os.path.exists(target) and not os.path.isfile(target):
        raise UsageError(
            f"{what} {path!r} is not a regular file (a device, FIFO, socket or folder); write to a regular file"
        )
    path = target
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        problem = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise UsageError(f"cannot write {what} {path!r}: {folder!r} {problem}")
    # a file created and removed: permission bits (os.access) say yes to root, and on
    # read-only or special file systems (/proc, /sys), where creating the file fails
    try:
        fd, probe = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise UsageError(
            f"cannot write {what} {path!r}: cannot create a file in {folder!r} ({exc.strerror or exc})"
        ) from None
    os.close(fd)
    os.unlink(probe)


def _write(paths: Sequence[str | None], write: Callable[[AtomicGroup], None]) -> None:
    """Write a command's output files (``paths``, None for those not asked for) as one:
    ``write`` creates each in the group (``group.open`` for a file object, ``group.path``
    for a writer that takes a name); all are renamed to their names only when every one
    is written, and the temporary files are removed on an error, Ctrl-C or SIGTERM, so a
    command leaves all of its outputs or none. An OS error (disk full, permissions) names
    the files."""
    names = [p for p in paths if p is not None]
    if not names:
        return
    try:
        with atomic_group() as group:
            write(group)
    except OSError as exc:
        if isinstance(exc, FileExistsError):
            raise
        raise UsageError(f"cannot write {' and '.join(repr(p) for p in names)}: {exc.strerror or exc}") from None


def _progress(iterable: Any, quiet: bool, **kwargs: Any) -> Any:
    from tqdm import tqdm

    return tqdm(iterable, disable=quiet, file=sys.stderr, leave=False, **kwargs)


def _print_json(obj: Any) -> None:
    # One line: easy to pipe to jq / json.tool, or to parse line by line.
    sys.stdout.write(json.dumps(obj, allow_nan=False) + "\n")


def _metric(name: str) -> str:
    return check_metric(name, METRICS)


# --------------------------------------------------------------------------------------
# select
# --------------------------------------------------------------------------------------


def _objective(name: str, x: np.ndarray, metric: str, neighbors: int | None, progress: bool) -> Any:
    from batchsel.submodular import functions

    if name == "feature-based":
        return functions.FeatureBased(x)
    cls: Any = {
        "facility-location": functions.FacilityLocation,
        "graph-cut": functions.GraphCut,
        "sum-redundancy": functions.SumRedundancy,
        "saturated-coverage": functions.SaturatedCoverage,
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


def _mpi_ranks(args: argparse.Namespace, inputs: Sequence[str]) -> Any:
    """The MPI communicator when launched by mpiexec with more than one rank, else None:
    then the k-NN graph is built sharded over the ranks (batchsel.distributed.sharded), once every
    rank has checked that all run the same command on the same data (``inputs``: the
    names of ``args`` that are input files; :func:`_check_ranks_agree`)."""
    from batchsel.distributed.comm import get_communicator, launched_by_mpi

    if not launched_by_mpi():
        return None
    comm = get_communicator("mpi")
    if comm.size == 1:
        return None
    _check_ranks_agree(comm, args, inputs)
    return comm


def _rank_zero_alone(args: argparse.Namespace, inputs: Sequence[str]) -> bool:
    """Under mpiexec -n W (W > 1), work that does not shard runs on rank 0 alone: once the
    ranks agree on the command (:func:`_mpi_ranks`), True on the other ranks, which then
    exit 0 without output (every rank writing the same files raced for them)."""
    comm = _mpi_ranks(args, inputs)
    if comm is None:
        return False
    if comm.rank == 0:
        logger.info(
            "--method / options that do not shard: rank 0 does the work, the other %d ranks wait", comm.size - 1
        )
    return comm.rank != 0


def _option(name: str) -> str:
    return "EMB" if name == "embeddings" else "--" + name.replace("_", "-")


def _ranks(ranks: Sequence[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


class _RankInput(NamedTuple):
    """An input file as one rank sees it (sent to the other ranks)."""

    name: str  # of the argument
    spec: str  # as given: PATH or FILE.npz:NAME
    shape: tuple[int, ...]
    identity: tuple[str, int, int, str | None]  # host, device, inode, key: the same file


def _check_ranks_agree(comm: Any, args: argparse.Namespace, inputs: Sequence[str]) -> None:
    """Collective: every rank parses its own command line and reads its own files (another
    path, another machine's copy), and on one machine rank 0 alone reads the embeddings
    (batchsel.distributed.sharded's ``node_work="leader"``), so a rank with other options or other
    data would go unnoticed, or fail in a collective as an internal error. Raises the
    same ``UsageError`` on every rank (one line, exit 2 everywhere) when a rank cannot read
    an input, or when its options, or the shape or content of an input, differ from
    rank 0's. Contents are compared by :func:`~batchsel.core.io.array_digest`, read once per
    distinct file (the first rank holding it), and not at all when every rank's file is
    rank 0's (the same machine, device and inode): the usual case costs no read."""
    # the options as each rank parsed them; input paths may differ (a rank's own copy)
    options = {
        k: repr(v)
        for k, v in vars(args).items()
        if k not in inputs and k not in ("quiet", "debug") and isinstance(v, (str, int, float, type(None)))
    }
    options.update({name: "FILE" if getattr(args, name) is not None else "None" for name in inputs})
    host = socket.gethostname()
    files: list[_RankInput] = []
    error: str | None = None
    for name in inputs:
        spec = getattr(args, name)
        if spec is None:
            continue
        try:
            shape = array_shape(spec)  # the header only, where the format has one
            info = os.stat(_input_file(spec))
        except (ValueError, OSError) as exc:
            error = _one_line(exc)
            break
        key = spec[len(_input_file(spec)) + 1 :] or None  # FILE.npz:NAME
        files.append(_RankInput(name, spec, shape, (host, info.st_dev, info.st_ino, key)))
    every = comm.allgather((options, files, error))
    errors = [(r, e) for r, (_, _, e) in enumerate(every) if e is not None]
    if errors:
        everywhere = len(errors) == len(every) and len({e for _, e in errors}) == 1
        raise UsageError(errors[0][1] if everywhere else f"{errors[0][1]} (on rank {errors[0][0]})")
    differ = sorted(k for k in options if len({o.get(k) for o, _, _ in every}) > 1)
    if differ:
        held = "; ".join(
            f"{_option(k)} " + ", ".join(f"{o.get(k)} on rank {r}" for r, (o, _, _) in enumerate(every)) for k in differ
        )
        raise UsageError(f"the ranks were given different options ({held}); every rank must run the same command")
    held_by = [[f[i] for _, f, _ in every] for i in range(len(files))]  # per input, each rank's
    for mine, theirs in zip(files, held_by):
        if any(t.shape != mine.shape for t in theirs):
            held = "; ".join(f"rank {r}: {t.spec!r} of shape {t.shape}" for r, t in enumerate(theirs))
            raise UsageError(
                f"the ranks read {_option(mine.name)} files of different shapes ({held}); "
                "every rank must read the same data"
            )
    # per input, the rank whose digest stands for each rank's file: the first holding it
    holder = [[next(q for q, o in enumerate(theirs) if o.identity == t.identity) for t in theirs] for theirs in held_by]
    compare = [i for i in range(len(files)) if len(set(holder[i])) > 1]
    if not compare:
        return
    digests: dict[int, str] = {}
    for i in compare:
        if holder[i][comm.rank] == comm.rank:
            try:
                digests[i] = array_digest(files[i].spec)
            except (ValueError, OSError) as exc:
                error = f"{_one_line(exc)} (on rank {comm.rank})"
                break
    gathered = comm.allgather((digests, error))
    errors = [e for _, e in gathered if e is not None]
    if errors:
        raise UsageError(errors[0])
    for i in compare:
        ranks_of: dict[str, list[int]] = {}
        for r, q in enumerate(holder[i]):
            ranks_of.setdefault(gathered[q][0][i], []).append(r)
        if len(ranks_of) > 1:
            theirs = held_by[i]
            hosts = len({t.identity[0] for t in theirs}) > 1  # the same path on other machines
            held = "; ".join(
                f"{_ranks(ranks)}: {theirs[ranks[0]].spec!r}" + (f" on {theirs[ranks[0]].identity[0]}" if hosts else "")
                for ranks in ranks_of.values()
            )
            raise UsageError(
                f"the ranks read different {_option(files[i].name)} data of the same shape {files[i].shape} "
                f"({held}); every rank must read the same data"
            )


def cmd_select(args: argparse.Namespace) -> int:
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
    _check_output(args.out, args.force, suffixes=(".npy", ".npz"), inputs=[("EMB", args.embeddings)])
    if args.stream:
        if _rank_zero_alone(args, ["embeddings"]):
            return EXIT_OK
        n, result = _select_stream(args, metric, seed)
    else:
        # under mpiexec -n W, sparse facility location by exact greedy runs sharded
        sharded = (
            args.objective == "facility-location"
            and args.neighbors is not None
            and args.optimizer in ("lazy", "naive")
            and metric in ("euclidean", "cosine")
        )
        comm = _mpi_ranks(args, ["embeddings"]) if sharded else None
        if not sharded and _rank_zero_alone(args, ["embeddings"]):
            return EXIT_OK
        x = _embeddings(args.embeddings) if comm is None else None
        n = x.shape[0] if comm is None else _num_rows(args.embeddings)
        if args.k > n:
            raise UsageError(f"--k {args.k} is larger than the number of examples in {args.embeddings!r} ({n})")
        if args.neighbors is not None and args.neighbors >= n:
            raise UsageError(f"--neighbors {args.neighbors} must be smaller than the number of examples ({n})")
        from batchsel.submodular.optimizers import maximize

        if comm is not None:
            from batchsel.distributed.sharded import ShardedIndex, facility_location

            # the graph FacilityLocation.from_embeddings(neighbors=...) builds, in row shards
            index = ShardedIndex(args.embeddings, comm, metric=metric, progress=not args.quiet)
            rows = index.knn_graph(
                k=args.neighbors, kernel="rbf" if metric == "euclidean" else "cosine", self_weight=1.0
            )
            result = facility_location(rows, args.k, comm, index.row_range[0])
            if comm.rank != 0:
                return EXIT_OK  # rank 0 writes and reports
        else:
            f = _objective(args.objective, x, metric, args.neighbors, progress=not args.quiet)
            result = maximize(
                f,
                args.k,
                optimizer=args.optimizer,
                epsilon=args.epsilon if args.epsilon is not None else 0.01,
                seed=seed,
                progress=not args.quiet,
            )
    indices = np.asarray(result.indices, dtype=np.int64)
    gains = np.asarray(result.gains, dtype=np.float64)

    def write_outputs(group: AtomicGroup) -> None:
        with group.open(args.out, "wb", overwrite=args.force) as fh:
            if args.out.lower().endswith(".npy"):
                np.save(fh, indices)
            else:
                np.savez(fh, indices=indices, gains=gains, value=np.float64(result.value))

    _write([args.out], write_outputs)
    if args.json:
        _print_json(
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
    return EXIT_OK


# --------------------------------------------------------------------------------------
# plan
# --------------------------------------------------------------------------------------


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
    None)."""
    from batchsel import selectors
    from batchsel.selectors.base import Selector

    common = {"seed": args.seed, "drop_last": args.drop_last}
    built = None
    selector: Selector
    if args.method == "random":
        selector = selectors.RandomSelector(n, args.batch_size, **common)
    elif args.method == "submodular":
        shards = None
        if getattr(args, "comm", None) is not None:  # under mpiexec: GreedMax from the sharded graph
            shards = _sharded_greedmax(args, n)
            if args.comm.rank != 0:
                return None, None  # rank 0 plans and writes
            x = _embeddings(args.embeddings)  # SMDL itself needs all rows: on rank 0 only
        selector = selectors.SubmodularSelector(
            x,
            args.batch_size,
            **common,
            **_given(
                weights=_weights(args.weights) if args.weights else None,
                pool_size=args.pool_size,
                partition=args.partition,
            ),
        )
        if shards is not None:
            # the shards the selector would compute itself (same graph, same seed): handed
            # over through its state, which carries GreedMax shards per world size
            state = selector.state_dict()
            state["partitions"] = {args.workers: shards}
            selector.load_state_dict(state)
    elif args.method == "loss":
        selector = selectors.LossRankSelector(n, args.batch_size, **common, **_given(pressure=args.pressure))
        if losses is not None:
            selector.observe(np.arange(n), losses=losses)
    elif args.method == "graph":
        if graph is None and getattr(args, "comm", None) is not None:  # under mpiexec: the sharded graph
            from batchsel.distributed.sharded import ShardedIndex, gather_graph

            index: Any = ShardedIndex(
                args.embeddings, args.comm, metric=_metric(args.metric or "euclidean"), progress=not args.quiet
            )
            rows = index.knn_graph(k=10 if args.neighbors is None else args.neighbors)
            del index
            # to rank 0 only: the other ranks would hold the whole graph just to drop it
            graph = built = gather_graph(rows, args.comm, root=0)
            del rows
            if args.comm.rank != 0:
                return None, None  # rank 0 partitions the graph
        elif graph is None:
            from batchsel.index import EmbeddingIndex

            index = EmbeddingIndex(x, metric=_metric(args.metric or "euclidean"), progress=not args.quiet)
            graph = built = index.knn_graph(k=10 if args.neighbors is None else args.neighbors)
            del index
        selector = selectors.GraphBlockSelector(
            graph, args.batch_size, **common, **_given(blocks_per_batch=args.blocks_per_batch)
        )
    else:  # coreset
        selector = selectors.CoresetSelector(
            x,
            labels,
            args.batch_size,
            **common,
            **_given(
                fraction=args.fraction, metric=_metric(args.metric) if args.metric else None, neighbors=args.neighbors
            ),
        )
    return selector, built


def _sharded_greedmax(args: argparse.Namespace, n: int) -> np.ndarray | None:
    """Under mpiexec, ``--partition submodular``: the GreedMax shard of every example for
    ``--workers`` shards (on rank 0; None elsewhere), from the RBF k-NN graph the
    selector would build itself (euclidean, GreedMax's default k) built over the ranks.
    GreedMax runs on rank 0 on the gathered graph (batchsel.distributed.sharded.submodular_partition)."""
    from batchsel.distributed.sharded import ShardedIndex, submodular_partition
    from batchsel.selectors.base import Selector
    from batchsel.submodular.partition import DEFAULT_NEIGHBORS, shard_of_each

    # the one-process run's error for too many workers, before the graph is built
    Selector(n, 1).check_world(args.workers)
    k = min(DEFAULT_NEIGHBORS, n - 1)
    index = ShardedIndex(args.embeddings, args.comm, metric="euclidean", progress=not args.quiet)
    rows = index.knn_graph(k=k, kernel="rbf")
    del index
    parts = submodular_partition(rows, args.workers, args.comm, seed=args.seed, root=0)
    return shard_of_each(parts, n) if args.comm.rank == 0 else None


def cmd_plan(args: argparse.Namespace) -> int:
    check_int(args.batch_size, "--batch-size", minimum=1)
    check_int(args.workers, "--workers", minimum=1)
    check_int(args.epochs, "--epochs", minimum=1)
    check_int(args.start_epoch, "--start-epoch", minimum=0)
    if args.neighbors is not None:
        check_int(args.neighbors, "--neighbors", minimum=1)
    args.seed = check_seed(args.seed)
    # Options that the chosen method would silently ignore are mistakes worth naming.
    used_by = {
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
    }
    for option, methods in used_by.items():
        if getattr(args, option) is not None and args.method not in methods:
            raise UsageError(f"--{option.replace('_', '-')} is used only by --method {' or '.join(methods)}")
    if args.method == "coreset" and args.labels is None:
        raise UsageError("--method coreset needs --labels")
    if args.graph is not None and (args.save_graph or args.neighbors or args.metric):
        raise UsageError(
            "--neighbors, --metric and --save-graph are for the graph built from EMB; they do not combine with --graph"
        )
    inputs = [("EMB", args.embeddings), ("--labels", args.labels), ("--losses", args.losses), ("--graph", args.graph)]
    # numpy's savez would append .npz to another name; a plan file is read back by its name
    _check_output(args.out, args.force, what="plan", suffixes=(".npz",), inputs=inputs)
    _check_output(args.save_graph, args.force, what="graph", suffixes=(".npz",), inputs=inputs)
    if args.save_graph is not None and _same_file(args.save_graph, args.out):
        raise UsageError("--save-graph and --out name the same file")

    # under mpiexec -n W (W > 1), method graph and the GreedMax partition build the k-NN
    # graph sharded over the ranks (each reads its rows of EMB); rank 0 writes the outputs
    plan_inputs = ["embeddings", "labels", "losses", "graph"]
    sharded = (args.method == "graph" and args.graph is None) or (
        args.method == "submodular" and args.partition == "submodular"
    )
    args.comm = _mpi_ranks(args, plan_inputs) if sharded else None
    if not sharded and _rank_zero_alone(args, plan_inputs):
        return EXIT_OK
    if args.method == "random" or args.comm is not None:
        x, n = None, _num_rows(args.embeddings)
    else:
        x = _embeddings(args.embeddings)
        n = x.shape[0]
    if args.batch_size > n and args.method != "random":
        # the selectors' own check (batch_size <= N), before any graph is built, in the
        # command's terms; random batches take a larger B, as torch's BatchSampler does
        raise UsageError(
            f"--batch-size {args.batch_size} is larger than the {n} examples of {args.embeddings!r}: "
            f"--method {args.method} needs a batch size of at most {n}"
        )
    labels = _labels(args.labels, n, allow_unlabeled=False) if args.labels else None
    losses = None
    if args.losses:
        from batchsel.core.checks import check_rows

        losses = check_rows(load_array(args.losses), n, f"losses {args.losses!r} (one per example)", ndim=1)
    graph = _graph(args.graph, n) if args.graph else None

    selector, built_graph = _selector(args, x, n, labels, losses, graph)
    if args.comm is not None and args.comm.rank != 0:
        return EXIT_OK  # the graph is built; rank 0 partitions it and writes the outputs
    epochs = range(args.start_epoch, args.start_epoch + args.epochs)
    plans = [
        selector.plan(epoch=e, world_size=args.workers)
        for e in _progress(epochs, args.quiet, desc="plan", unit="epoch")
    ]

    sizes = [b.size for p in plans for r in range(p.world_size) for b in p.batches(r)]
    if not sizes:  # nothing to train on: refused before it is written
        dropped = " with --drop-last, which drops them all (use fewer workers, or leave --drop-last out)"
        raise UsageError(
            f"the plan holds no batch: {args.workers} workers for {n} examples{dropped if args.drop_last else ''}"
        )

    def write_outputs(group: AtomicGroup) -> None:
        with group.open(args.out, "wb", overwrite=args.force) as fh:
            save_plans(fh, plans)
        if args.save_graph is not None and built_graph is not None:
            import scipy.sparse as sp

            with group.open(args.save_graph, "wb", overwrite=args.force) as fh:
                sp.save_npz(fh, built_graph)

    _write([args.out, args.save_graph], write_outputs)

    if max(sizes) < args.batch_size:
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
        "epochs": [{"epoch": p.epoch, "fingerprint": p.fingerprint()} for p in plans],
    }
    if args.json:
        _print_json(summary)
    else:
        print(
            f"wrote {args.out}: {len(plans)} epoch(s) x {args.workers} worker(s) x {plans[0].num_batches} "
            f"batches of {min(sizes)}..{max(sizes)} examples (method {args.method}, seed {args.seed}, "
            f"{n} examples)"
        )
        for p in plans:
            print(f"epoch {p.epoch}  fingerprint {p.fingerprint()}")
    return EXIT_OK


# --------------------------------------------------------------------------------------
# inspect
# --------------------------------------------------------------------------------------


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


def cmd_inspect(args: argparse.Namespace) -> int:
    if args.epoch is not None:
        check_int(args.epoch, "--epoch", minimum=0)
    _check_plot(args.plot, args.force, [("PLAN", args.plan), ("--labels", args.labels), ("--graph", args.graph)])
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
    n = plans[0].num_examples
    labels = _labels(args.labels, n, allow_unlabeled=True) if args.labels else None
    graph = _graph(args.graph, n) if args.graph else None
    reports = [
        plan_report(p, labels, graph)
        for p in _progress(plans, args.quiet or len(plans) < 3, desc="inspect", unit="epoch")
    ]
    for p, rep in zip(plans, reports):
        rep["padding"] = _padding(p, rep["duplicates"])
    _write(
        [args.plot],
        # the figure replaces the group's temporary file (overwrite), renamed with the group
        lambda group: plot_reports(
            group.path(args.plot, overwrite=args.force), reports, source=os.path.basename(args.plan), overwrite=True
        ),
    )
    if args.json:
        _print_json({"plan": args.plan, "epochs": reports, **({"plot": args.plot} if args.plot else {})})
    else:
        print(format_report(args.plan, [{**rep, "duplicates": _duplicates(rep)} for rep in reports]))
        if args.plot:
            print(f"wrote {args.plot}")
    return EXIT_OK


# --------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------

# --------------------------------------------------------------------------------------
# dedup
# --------------------------------------------------------------------------------------


def _check_threshold(value: float) -> None:
    if not (math.isfinite(value) and 0 < value <= 1):
        raise UsageError(f"--threshold must be in (0, 1], got {value}")


def _sharded_source(args: argparse.Namespace, inputs: Sequence[str]) -> tuple[Any, int, Any]:
    """(embeddings, N, communicator): under mpiexec -n W (W > 1) the path of the .npy each
    rank reads its rows of, and the MPI communicator (the ranks agree on ``inputs``, see
    :func:`_mpi_ranks`); else the loaded array and None."""
    path = args.embeddings
    comm = _mpi_ranks(args, inputs)
    if comm is None:
        x = _embeddings(path)
        return x, x.shape[0], None
    if not path.lower().endswith(".npy"):
        raise UsageError(f"under mpiexec EMB must be a .npy file (each rank reads its rows), got {path!r}")
    return path, _num_rows(path), comm


def _check_plot(path: str | None, force: bool, inputs: Sequence[tuple[str, str | None]]) -> None:
    """A --plot output: writable, not an input, and matplotlib there (before the work)."""
    _check_output(path, force, what="plot", suffixes=PLOT_SUFFIXES, inputs=inputs)
    if path is not None:
        try:
            require_matplotlib()
        except ImportError as exc:
            raise UsageError(f"--plot needs {exc}") from None


def cmd_dedup(args: argparse.Namespace) -> int:
    from batchsel.data.dedup import deduplicate

    _check_threshold(args.threshold)
    check_int(args.k, "--k", minimum=1)
    inputs = [("EMB", args.embeddings)]
    _check_output(args.out, args.force, what="output", suffixes=(".npy",), inputs=inputs)
    _check_output(args.groups, args.force, what="groups", suffixes=(".npy",), inputs=inputs)
    if args.out is not None and args.groups is not None and _same_file(args.out, args.groups):
        raise UsageError("--out and --groups name the same file")
    source, _, comm = _sharded_source(args, ["embeddings"])
    result = deduplicate(source, args.threshold, k=args.k, comm=comm, progress=not args.quiet)
    if comm is not None and comm.rank != 0:
        return EXIT_OK  # rank 0 writes and reports

    def write_outputs(group: AtomicGroup) -> None:
        for path, array in ((args.out, result.keep), (args.groups, result.group)):
            if path is not None:
                with group.open(path, "wb", overwrite=args.force) as fh:
                    np.save(fh, array)

    _write([args.out, args.groups], write_outputs)
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
    }
    if args.json:
        _print_json(report)
    else:
        print(
            f"{args.embeddings}: {report['kept']} of {report['num_examples']} rows kept, {report['removed']} "
            f"near-duplicates removed ({100 * report['removed_fraction']:.1f} %) at cosine >= {result.threshold:g}; "
            f"{report['groups']} groups of 2 or more, the largest of {report['largest_group']} rows"
        )
    return EXIT_OK


# --------------------------------------------------------------------------------------
# audit
# --------------------------------------------------------------------------------------


def cmd_audit(args: argparse.Namespace) -> int:
    from batchsel.data.audit import audit, check_probabilities
    from batchsel.plans.plotting import plot_audit

    _check_threshold(args.threshold)
    check_int(args.k, "--k", minimum=1)
    if args.issues is not None and args.labels is None:
        raise UsageError("--issues needs --labels (the flagged rows are label issues)")
    if args.probabilities is not None and args.labels is None:
        raise UsageError("--probabilities needs --labels (they are a model's probabilities of each label)")
    inputs = [("EMB", args.embeddings), ("--labels", args.labels), ("--probabilities", args.probabilities)]
    _check_output(args.issues, args.force, what="issues", suffixes=(".npy",), inputs=inputs)
    _check_plot(args.plot, args.force, inputs)
    if args.issues is not None and args.plot is not None and _same_file(args.issues, args.plot):
        raise UsageError("--issues and --plot name the same file")
    source, n, comm = _sharded_source(args, ["embeddings", "labels", "probabilities"])
    if n < 2:
        raise UsageError(f"an audit needs at least 2 rows, {args.embeddings!r} has {n}")
    labels = _labels(args.labels, n, allow_unlabeled=False) if args.labels else None
    probabilities = None
    if args.probabilities is not None:
        probabilities = check_probabilities(load_array(args.probabilities), labels, n)
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

    _write([args.issues, args.plot], write_outputs)
    if args.json:
        _print_json(
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


# a terminal's control sequences (numba's error messages carry colour codes)
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _one_line(exc: BaseException) -> str:
    text = " ".join(_ESCAPES.sub("", str(exc)).split()) or type(exc).__name__
    return text


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or closed
        return False


def _colour_reset_at_exit() -> bool:
    """Whether colorama's exit handler is registered. numba builds an error message at
    import of one of its modules (``numba.cpython.listobj``, loaded with the first
    compiled kernel, also from the cache) and formats it with colorama, whose ``init()``
    registers a handler that writes ESC[0m to stdout at exit when stdout is a terminal.
    Under mpiexec it is one (each rank's stdout is a pseudo-terminal, which mpiexec copies
    to its own stdout, a pipe or a file), so the code landed after the command's output."""
    initialise = sys.modules.get("colorama.initialise")
    return initialise is not None and bool(getattr(initialise, "atexit_done", False))


def _drop_colour_reset_at_exit() -> None:
    """Unregister colorama's exit handler (:func:`_colour_reset_at_exit`): the command
    writes no colour, so it has none to reset."""
    initialise: Any = sys.modules.get("colorama.initialise")
    if initialise is not None and hasattr(initialise, "reset_all"):
        atexit.unregister(initialise.reset_all)
        initialise.atexit_done = False  # a later init() registers it again


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _is_bad_input(exc: BaseException) -> bool:
    """Whether a ``ValueError`` / ``TypeError`` is batchsel rejecting its input: raised by
    a ``raise`` statement in batchsel's own code, which raises these only to name a bad
    value and its fix. The same types raised inside numpy, scipy, numba, ..., or by a
    call batchsel itself got wrong, are bugs: exit 1, not "bad input"."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = os.path.abspath(tb.tb_frame.f_code.co_filename)
    return filename.startswith(_PACKAGE) and linecache.getline(filename, tb.tb_lineno).lstrip().startswith("raise")


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``batchsel`` command with ``argv`` (default ``sys.argv[1:]``); returns
    the exit code.

    >>> main(["--version"])  # doctest: +ELLIPSIS
    batchsel ...
    0
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    colour_reset_before = _colour_reset_at_exit()
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        stream=sys.stderr,
        format="batchsel: %(levelname)s: %(name)s: %(message)s",
    )
    try:
        # None: the previous handler was not set from Python (the default action)
        previous = signal.signal(signal.SIGTERM, _on_sigterm) or signal.SIG_DFL
    except ValueError:  # not the main thread: keep the default action
        previous = None
    args = None
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exc:  # --help / --version
            return int(exc.code or 0)
        # progress bars redraw their line with \r: on a terminal only, not into a pipe or a
        # log file (nor under mpiexec, where every rank's stderr is a pipe)
        args.quiet = args.quiet or not _is_terminal(sys.stderr)
        return args.run(args)
    except (UsageError, FileExistsError) as exc:
        if debug:
            traceback.print_exc()
        sys.stderr.write(f"batchsel: error: {_one_line(exc)}\n")
        return EXIT_USAGE
    except (ValueError, TypeError) as exc:
        if debug:
            traceback.print_exc()
        if _is_bad_input(exc):
            sys.stderr.write(f"batchsel: error: {_one_line(exc)}\n")
            return EXIT_USAGE
        sys.stderr.write(
            f"batchsel: internal error: {type(exc).__name__}: {_one_line(exc)}"
            f"{'' if debug else '; rerun with --debug for the traceback'}\n"
        )
        return EXIT_UNEXPECTED
    except KeyboardInterrupt:
        sys.stderr.write("batchsel: interrupted\n")
        return EXIT_INTERRUPTED
    except Terminated:
        sys.stderr.write("batchsel: terminated (SIGTERM)\n")
        return EXIT_TERMINATED
    except BrokenPipeError:
        # The reader of stdout went away (e.g. `| head`): stop quietly, with the status a
        # shell reports for SIGPIPE; devnull keeps Python's exit flush from failing again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except MemoryError:
        if debug:
            traceback.print_exc()
        hint = getattr(args, "oom_hint", None)  # each command's own options
        sys.stderr.write(f"batchsel: error: out of memory{f' ({hint})' if hint else ''}\n")
        return EXIT_UNEXPECTED
    except Exception as exc:  # noqa: BLE001 - the last line of defence
        if debug:
            traceback.print_exc()
        sys.stderr.write(
            f"batchsel: internal error: {type(exc).__name__}: {_one_line(exc)}"
            f"{'' if debug else '; rerun with --debug for the traceback'}\n"
        )
        return EXIT_UNEXPECTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if not colour_reset_before and _colour_reset_at_exit():
            _drop_colour_reset_at_exit()


if __name__ == "__main__":
    sys.exit(main())
