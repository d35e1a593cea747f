"""How the ``batchsel`` command fails: exit codes, and one line on stderr per error.

A bad usage or a bad input, or a missing optional dependency (naming the extra that
installs it), exits 2 with ``batchsel: error: ...``; a bug exits 1 with
``batchsel: internal error: ...`` (the traceback only with ``--debug``); Ctrl-C exits
130, SIGTERM 143 (raised as :class:`Terminated`, so open atomic writes remove their
temporary files), a closed stdout 141.
"""

from __future__ import annotations

import contextlib
import importlib
import linecache
import os
import re
import signal
import sys
import traceback
from typing import Any, Iterator

EXIT_OK, EXIT_UNEXPECTED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_BROKEN_PIPE, EXIT_TERMINATED = 0, 1, 2, 130, 141, 143

# a terminal's control sequences (numba's error messages carry colour codes)
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

# batchsel's own source folder: a ValueError raised there is batchsel naming a bad input
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


#: an optional dependency's top-level module -> the extra that installs it (pyproject.toml)
EXTRAS = {
    "pymetis": "graph",
    "matplotlib": "plot",
    "mpi4py": "mpi",
    "lightning": "lightning",
    "pytorch_lightning": "lightning",
    "transformers": "hf",
    "accelerate": "hf",
    "torch_geometric": "pyg",
}


def shadowing_folder() -> str | None:
    """The folder ``batchsel`` without ``__init__.py`` in the working directory that
    ``import batchsel`` in a Python started there gets in place of this package, or None.

    Such a folder becomes a namespace package whenever this package is not found by the
    path finder itself (an editable install: setuptools' finder comes after it), and
    ``from batchsel import X`` fails with "cannot import name ... (unknown location)"
    before any code of batchsel runs. The command itself still runs (its console script
    does not put the working directory on ``sys.path``, and its submodules come from the
    install), so it can say so. (A folder with ``__init__.py``, a source checkout, is a
    working package, whichever: not this.)

    Returns
    -------
    str or None
        The folder's path, when the path finder, looking in the working directory first
        (as ``python script.py`` and ``python -c`` there do), makes it the namespace
        package ``batchsel``.
    """
    import importlib.machinery

    cwd = os.getcwd()
    folder = os.path.join(cwd, "batchsel")
    if not os.path.isdir(folder) or os.path.exists(os.path.join(folder, "__init__.py")):
        return None
    try:
        spec = importlib.machinery.PathFinder.find_spec("batchsel", [cwd, *sys.path])
    except (ImportError, OSError, ValueError):  # an unreadable path entry: nothing to say
        return None
    if spec is None or spec.origin not in (None, "namespace"):  # a regular package wins over the folder
        return None
    return folder if folder in [os.path.abspath(p) for p in spec.submodule_search_locations or ()] else None


class UsageError(Exception):
    """Bad usage or bad input: exit code 2 and one line on stderr."""


def require(module: str, what: str) -> None:
    """Import ``module`` (an optional dependency that ``what`` needs), before the work.

    Parameters
    ----------
    module : str
        The module, a key of :data:`EXTRAS`.
    what : str
        The option that needs it, for the message (``"--plot"``).

    Raises
    ------
    UsageError
        It is not installed: the message names the extra to install.
    """
    try:
        importlib.import_module(module)
    except ImportError:
        raise UsageError(
            f"{what} needs {module}, which is not installed: pip install 'batchsel[{EXTRAS[module]}]'"
        ) from None


def missing_extra(exc: ImportError) -> str | None:
    """The one-line message of an ``ImportError`` that an extra of batchsel fixes.

    Parameters
    ----------
    exc : ImportError
        The error.

    Returns
    -------
    str or None
        Its own message when it names the extra (``batchsel[...]``), else one naming the extra
        of its missing module (:data:`EXTRAS`); None when no extra installs that module.

    Examples
    --------
    >>> missing_extra(ModuleNotFoundError("No module named 'pymetis'", name="pymetis"))
    "pymetis is not installed: pip install 'batchsel[graph]'"
    >>> missing_extra(ModuleNotFoundError("No module named 'foo'", name="foo")) is None
    True
    """
    text = one_line(exc)
    if "batchsel[" in text:
        return text
    extra = EXTRAS.get((exc.name or "").split(".")[0])
    return None if extra is None else f"{exc.name} is not installed: pip install 'batchsel[{extra}]'"


class Terminated(BaseException):
    """SIGTERM arrived: unwinds like Ctrl-C, so open atomic writes remove their
    temporary files (the default action would kill the process on the spot)."""


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line, without a terminal's escape codes.

    Parameters
    ----------
    exc : BaseException
        The error.

    Returns
    -------
    str
        Its message with runs of white space made one space and escape codes removed;
        the name of its type when the message is empty.

    Examples
    --------
    >>> one_line(ValueError("\\x1b[1mbad\\x1b[0m\\n  value"))
    'bad value'
    >>> one_line(KeyError())
    'KeyError'
    """
    return " ".join(_ESCAPES.sub("", str(exc)).split()) or type(exc).__name__


def is_bad_input(exc: BaseException) -> bool:
    """Whether a ``ValueError`` / ``TypeError`` is batchsel rejecting its input: raised by
    a ``raise`` statement in batchsel's own code, which raises these only to name a bad
    value and its fix. The same types raised inside numpy, scipy, numba, ..., or by a
    call batchsel itself got wrong, are bugs: exit 1, not "bad input".

    Parameters
    ----------
    exc : BaseException
        The error, with its traceback.

    Returns
    -------
    bool
        True when the innermost frame of its traceback is a ``raise`` line of batchsel.
    """
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = os.path.abspath(tb.tb_frame.f_code.co_filename)
    return filename.startswith(_PACKAGE) and linecache.getline(filename, tb.tb_lineno).lstrip().startswith("raise")


def exit_code(exc: BaseException, debug: bool, oom_hint: str | None) -> int:
    """Report an error that ended a command on stderr, and give the command's exit code.

    Parameters
    ----------
    exc : BaseException
        The error (an ``Exception``, ``KeyboardInterrupt`` or :class:`Terminated`).
    debug : bool
        Print its traceback first (``--debug``); not for Ctrl-C, SIGTERM or a closed stdout.
    oom_hint : str or None
        The command's own options that lower its memory, named on ``MemoryError``.

    Returns
    -------
    int
        2 for bad usage or input or a missing extra, 130 for Ctrl-C, 143 for SIGTERM, 141 when the reader
        of stdout went away, else 1.
    """
    quiet_ends = (KeyboardInterrupt, Terminated, BrokenPipeError)
    if debug and not isinstance(exc, quiet_ends):
        traceback.print_exception(type(exc), exc, exc.__traceback__)
    if isinstance(exc, (UsageError, FileExistsError)) or (
        isinstance(exc, (ValueError, TypeError)) and is_bad_input(exc)
    ):
        sys.stderr.write(f"batchsel: error: {one_line(exc)}\n")
        return EXIT_USAGE
    missing = missing_extra(exc) if isinstance(exc, ImportError) else None
    if missing is not None:  # an optional dependency the command needs: the user installs it
        sys.stderr.write(f"batchsel: error: {missing}\n")
        return EXIT_USAGE
    if isinstance(exc, KeyboardInterrupt):
        sys.stderr.write("batchsel: interrupted\n")
        return EXIT_INTERRUPTED
    if isinstance(exc, Terminated):
        sys.stderr.write("batchsel: terminated (SIGTERM)\n")
        return EXIT_TERMINATED
    if isinstance(exc, BrokenPipeError):
        # The reader of stdout went away (e.g. `| head`): stop quietly, with the status a
        # shell reports for SIGPIPE; devnull keeps Python's exit flush from failing again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    if isinstance(exc, MemoryError):
        sys.stderr.write(f"batchsel: error: out of memory{f' ({oom_hint})' if oom_hint else ''}\n")
        return EXIT_UNEXPECTED
    sys.stderr.write(
        f"batchsel: internal error: {type(exc).__name__}: {one_line(exc)}"
        f"{'' if debug else '; rerun with --debug for the traceback'}\n"
    )
    return EXIT_UNEXPECTED


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Within the block SIGTERM raises :class:`Terminated` (in the main thread; elsewhere
    the default action stays); the previous handler is restored after it.

    Yields
    ------
    None
    """
    try:
        # None: the previous handler was not set from Python (the default action)
        previous = signal.signal(signal.SIGTERM, _on_sigterm) or signal.SIG_DFL
    except ValueError:  # not the main thread: keep the default action
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
