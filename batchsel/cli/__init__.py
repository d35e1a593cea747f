"""The ``batchsel`` command line: ``select``, ``plan``, ``inspect``, ``dedup`` and ``audit``.

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

One module per command (its options and ``cmd_*``), assembled by ``parser``; shared:
``commands`` (what each command module has, and adds with), ``inputs``, ``outputs`` (all
or none), ``ranks`` (mpiexec), ``errors``, ``terminal``.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Callable, Sequence

from batchsel.cli.audit import AUDIT_EXAMPLE, cmd_audit
from batchsel.cli.dedup import DEDUP_EXAMPLE, cmd_dedup
from batchsel.cli.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_UNEXPECTED,
    EXIT_USAGE,
    Terminated,
    UsageError,
    exit_code,
    shadowing_folder,
    sigterm_raises,
)
from batchsel.cli.inputs import METRICS
from batchsel.cli.inspect import INSPECT_EXAMPLE, cmd_inspect
from batchsel.cli.parser import MAIN_EXAMPLE, build_parser
from batchsel.cli.plan import METHODS, PLAN_EXAMPLE, cmd_plan
from batchsel.cli.select import OBJECTIVES, OPTIMIZERS, SELECT_EXAMPLE, SELECT_METRICS, cmd_select
from batchsel.cli.terminal import colour_reset_at_exit, drop_colour_reset_at_exit, is_terminal
from batchsel.plans.report import plan_report

__all__ = [
    "AUDIT_EXAMPLE",
    "DEDUP_EXAMPLE",
    "EXIT_BROKEN_PIPE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "EXIT_UNEXPECTED",
    "EXIT_USAGE",
    "INSPECT_EXAMPLE",
    "MAIN_EXAMPLE",
    "METHODS",
    "METRICS",
    "OBJECTIVES",
    "OPTIMIZERS",
    "PLAN_EXAMPLE",
    "SELECT_EXAMPLE",
    "SELECT_METRICS",
    "Terminated",
    "UsageError",
    "build_parser",
    "cmd_audit",
    "cmd_dedup",
    "cmd_inspect",
    "cmd_plan",
    "cmd_select",
    "main",
    "plan_report",
]


def _command(name: str) -> Callable[..., int]:
    """The function that runs command ``name``: this package's ``cmd_NAME``, looked up
    when the command runs, so that ``batchsel.cli.cmd_NAME`` is what runs (a test may
    replace it)."""
    command: Callable[..., int] = globals()[f"cmd_{name}"]
    return command


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``batchsel`` command with ``argv`` (default ``sys.argv[1:]``); returns
    the exit code.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments after ``batchsel``; default ``sys.argv[1:]``.

    Returns
    -------
    int
        0 success, 2 bad usage or input, 1 an internal error, 130 Ctrl-C, 143 SIGTERM,
        141 when the reader of stdout went away; ``--help`` and ``--version`` 0.

    Examples
    --------
    >>> main(["--version"])  # doctest: +ELLIPSIS
    batchsel ...
    0
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    colour_reset_before = colour_reset_at_exit()
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        stream=sys.stderr,
        format="batchsel: %(levelname)s: %(name)s: %(message)s",
    )
    shadow = shadowing_folder()
    if shadow is not None:  # the command runs; the user's own Python started here does not
        logging.getLogger(__name__).warning(
            "the folder %r shadows the installed batchsel: 'import batchsel' in Python started in %r gets that "
            'folder ("cannot import name ... (unknown location)"); rename it, or run from another folder',
            shadow,
            os.path.dirname(shadow),
        )
    args = None
    try:
        with sigterm_raises():
            try:
                args = build_parser().parse_args(argv)
            except SystemExit as exc:  # --help / --version
                return int(exc.code or 0)
            # progress bars redraw their line with \r: on a terminal only, not into a pipe or a
            # log file (nor under mpiexec, where every rank's stderr is a pipe)
            args.quiet = args.quiet or not is_terminal(sys.stderr)
            return _command(args.command)(args)
    except (Exception, KeyboardInterrupt, Terminated) as exc:  # noqa: BLE001 - the last line of defence
        return exit_code(exc, debug, getattr(args, "oom_hint", None))  # each command's own hint
    finally:
        if not colour_reset_before and colour_reset_at_exit():
            drop_colour_reset_at_exit()
