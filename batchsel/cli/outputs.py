"""What the ``batchsel`` commands write: output files all or none, and JSON on stdout.

Every output is checked before the work (:func:`check_output`: a file can be created in its
folder, it is not an input, it is replaced only with ``--force``), then the command's
outputs are written as one group (:func:`write`): to temporary names, renamed together
once all are written, removed on an error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any, Callable, Sequence

from batchsel.cli.errors import UsageError, require
from batchsel.cli.inputs import input_file
from batchsel.core.io import AtomicGroup, atomic_group
from batchsel.plans.plotting import PLOT_SUFFIXES


def same_file(a: str, b: str) -> bool:
    """Whether two paths name one file: the same name, a symlink (resolved paths, also of a
    file not written yet) or a hard link (inode).

    Parameters
    ----------
    a, b : str
        The paths; either may not exist yet.

    Returns
    -------
    bool

    Examples
    --------
    >>> same_file("out/plan.npz", "out/../out/plan.npz")
    True
    """
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    return os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)


def _check_target(path: str, what: str) -> str:
    """The file a write to ``path`` replaces (a symlink's target), refused when it is not a
    regular file or its folder is missing."""
    # a symlink is written through (the atomic write replaces its target, not the link)
    target = os.path.realpath(path) if os.path.islink(path) else path
    if os.path.exists(target) and not os.path.isfile(target):
        raise UsageError(
            f"{what} {path!r} is not a regular file (a device, FIFO, socket or folder); write to a regular file"
        )
    folder = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(folder):
        problem = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise UsageError(f"cannot write {what} {target!r}: {folder!r} {problem}")
    return target


def check_output(
    path: str | None,
    force: bool,
    what: str = "output",
    suffixes: tuple[str, ...] = (),
    inputs: Sequence[tuple[str, str | None]] = (),
) -> None:
    """Fail before the expensive work when an output cannot be written (the atomic write
    checks again when it happens) or is one of the ``inputs``: ``--force`` replaces
    outputs, never the data read.

    Parameters
    ----------
    path : str or None
        The output; None (not asked for) passes.
    force : bool
        ``--force``: an existing file may be replaced.
    what : str, default "output"
        What the file is, in the error.
    suffixes : tuple of str, default ()
        The endings it must have (lower case); () takes any.
    inputs : sequence of (str, str or None), default ()
        ``(option, path)`` of the command's inputs, None for those not given.

    Raises
    ------
    UsageError
        Naming the problem: a wrong suffix, an input, a folder, an existing file without
        ``--force``, a special file, a missing folder, or a folder where no file can be
        created.
    """
    if path is None:
        return
    if suffixes and not path.lower().endswith(suffixes):
        raise UsageError(f"{what} {path!r} must end with {' or '.join(suffixes)}")
    for option, spec in inputs:
        if spec is not None and same_file(input_file(spec), path):
            raise UsageError(f"{what} {path!r} is the input {option} {spec!r}: write the output to another file")
    if os.path.isdir(path):
        raise UsageError(f"{what} {path!r} is a directory")
    if os.path.lexists(path) and not force:
        raise UsageError(f"{what} {path!r} exists (pass --force to replace it)")
    path = _check_target(path, what)
    folder = os.path.dirname(os.path.abspath(path))
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


def check_plot(path: str | None, force: bool, inputs: Sequence[tuple[str, str | None]]) -> None:
    """A ``--plot`` output: writable, not an input, and matplotlib there (before the work).

    Parameters
    ----------
    path : str or None
        The figure's file (.png, .pdf or .svg); None passes.
    force : bool
        ``--force``.
    inputs : sequence of (str, str or None)
        As for :func:`check_output`.

    Raises
    ------
    UsageError
        As :func:`check_output`, or when matplotlib is not installed.
    """
    check_output(path, force, what="plot", suffixes=PLOT_SUFFIXES, inputs=inputs)
    if path is not None:
        require("matplotlib", "--plot")


def write(paths: Sequence[str | None], write_files: Callable[[AtomicGroup], None]) -> None:
    """Write a command's output files as one.

    All are renamed to their names only when every one is written, and the temporary
    files are removed on an error, Ctrl-C or SIGTERM, so a command leaves all of its
    outputs or none. An OS error (disk full, permissions) names the files.

    Parameters
    ----------
    paths : sequence of str or None
        The outputs, None for those not asked for; nothing is written when all are None.
    write_files : callable
        ``write_files(group)`` creates each in the group: ``group.open`` for a file
        object, ``group.path`` for a writer that takes a name.

    Raises
    ------
    UsageError
        When the write fails with an ``OSError`` (not ``FileExistsError``: an output
        created meanwhile, which ``main`` reports as such).
    """
    names = [p for p in paths if p is not None]
    if not names:
        return
    try:
        with atomic_group() as group:
            write_files(group)
    except OSError as exc:
        if isinstance(exc, FileExistsError):
            raise
        raise UsageError(f"cannot write {' and '.join(repr(p) for p in names)}: {exc.strerror or exc}") from None


def print_json(obj: Any) -> None:
    """Print ``obj`` as JSON on one line of stdout: easy to pipe to jq / json.tool, or to
    parse line by line.

    Parameters
    ----------
    obj : object
        JSON-serializable, without NaN or infinities.

    Examples
    --------
    >>> print_json({"k": 3, "indices": [4, 1, 7]})
    {"k": 3, "indices": [4, 1, 7]}
    """
    sys.stdout.write(json.dumps(obj, allow_nan=False) + "\n")
