"""The argument parser of the ``batchsel`` command, assembled from the subcommand modules:
each adds its subcommand and options (``add_parser``)."""

from __future__ import annotations

import argparse
from typing import Any

from batchsel.cli import audit, dedup, inspect, plan, select
from batchsel.cli.errors import UsageError
from batchsel.core.version import __version__

MAIN_EXAMPLE = """\
example ('batchsel COMMAND --help' shows each command's options and examples):
  batchsel select emb.npy --k 100 --json
  batchsel plan emb.npy --batch-size 64 --workers 4 --epochs 2 --out plan.npz
  batchsel inspect plan.npz --labels y.npy --plot plan.png
  batchsel dedup emb.npy --threshold 0.95 --out keep.npy
  batchsel audit emb.npy --labels y.npy

exit codes: 0 ok, 2 bad usage or input, 1 internal error (--debug shows the traceback)
"""

# the subcommands, in the order of the help
SUBCOMMANDS = (select, plan, inspect, dedup, audit)

QUIET_HELP = "no progress bars (shown only when stderr is a terminal)"
DEBUG_HELP = "print the traceback of errors"


class CommandParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line (:class:`~batchsel.cli.errors.UsageError`).

    argparse prints the usage and exits; a one-line error that names the problem (and
    where the help is) is easier to read in logs and to test.

    Examples
    --------
    >>> CommandParser(prog="batchsel").parse_args(["--nope"])
    Traceback (most recent call last):
    ...
    batchsel.cli.errors.UsageError: unrecognized arguments: --nope (see 'batchsel --help')
    """

    def error(self, message: str) -> None:
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _shared_options() -> list[argparse.ArgumentParser]:
    """The options every command takes after its name: ``--quiet`` and ``--debug`` (also
    accepted before it; SUPPRESS keeps a value given there) and ``--force``."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help=QUIET_HELP)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    force = argparse.ArgumentParser(add_help=False)
    force.add_argument("--force", action="store_true", help="replace output files that exist")
    return [common, force]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``batchsel`` command.

    Returns
    -------
    argparse.ArgumentParser
        Its subcommands (``args.command``) are those of :data:`SUBCOMMANDS`; each sets
        ``args.oom_hint``, the options that lower its memory (None when none does).

    Examples
    --------
    >>> args = build_parser().parse_args(["select", "emb.npy", "--k", "5"])
    >>> args.command, args.k, args.objective
    ('select', 5, 'facility-location')
    """
    parser = CommandParser(
        prog="batchsel",
        description="Data selection and mini-batch scheduling for data-parallel training.",
        epilog=MAIN_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"batchsel {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub: Any = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    parents = _shared_options()
    for command in SUBCOMMANDS:
        command.add_parser(sub, parents)
    return parser
