"""What the ``batchsel`` command shows on a terminal, and nowhere else: progress bars only
when stderr is one, and no colour or other escape code anywhere (not even the colour
reset colorama writes at exit)."""

from __future__ import annotations

import atexit
import sys
from typing import Any


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is an open terminal.

    Parameters
    ----------
    stream : file object
        E.g. ``sys.stderr``.

    Returns
    -------
    bool
        False also for a stream without ``isatty`` or a closed one.

    Examples
    --------
    >>> import io
    >>> is_terminal(io.StringIO())
    False
    """
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or closed
        return False


def progress(iterable: Any, quiet: bool, **kwargs: Any) -> Any:
    """``iterable`` with a progress bar on stderr, none when ``quiet``.

    Parameters
    ----------
    iterable : iterable
        What the loop runs over.
    quiet : bool
        No bar (``--quiet``, or stderr is not a terminal: ``main`` sets ``args.quiet``).
    **kwargs
        tqdm's options (``desc``, ``unit``, ...).

    Returns
    -------
    tqdm.tqdm
        Iterates as ``iterable``; the bar is removed when the loop ends.

    Examples
    --------
    >>> list(progress(range(3), quiet=True, desc="epochs"))
    [0, 1, 2]
    """
    from tqdm import tqdm

    return tqdm(iterable, disable=quiet, file=sys.stderr, leave=False, **kwargs)


def colour_reset_at_exit() -> bool:
    """Whether colorama's exit handler is registered.

    numba builds an error message at import of one of its modules
    (``numba.cpython.listobj``, loaded with the first compiled kernel, also from the
    cache) and formats it with colorama, whose ``init()`` registers a handler that writes
    ESC[0m to stdout at exit when stdout is a terminal. Under mpiexec it is one (each
    rank's stdout is a pseudo-terminal, which mpiexec copies to its own stdout, a pipe or
    a file), so the code landed after the command's output.

    colorama has no public call that says so or undoes it (``deinit()`` restores the
    streams and leaves the handler), so this reads colorama's own flag; numba's
    ``NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING`` would keep colorama out, but it is read
    when numba is imported, which ``import batchsel`` does before the command starts.

    Returns
    -------
    bool
        False also when colorama was never imported.

    See Also
    --------
    drop_colour_reset_at_exit : unregisters the handler.
    """
    initialise = sys.modules.get("colorama.initialise")
    return initialise is not None and bool(getattr(initialise, "atexit_done", False))


def drop_colour_reset_at_exit() -> None:
    """Unregister colorama's exit handler (:func:`colour_reset_at_exit`): the command
    writes no colour, so it has none to reset.

    See Also
    --------
    colour_reset_at_exit : whether the handler is registered.
    """
    initialise: Any = sys.modules.get("colorama.initialise")
    if initialise is not None and hasattr(initialise, "reset_all"):
        atexit.unregister(initialise.reset_all)
        initialise.atexit_done = False  # a later init() registers it again
