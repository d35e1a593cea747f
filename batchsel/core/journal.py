"""States taken often of arrays written a few entries at a time.

A loss-ranked selector keeps arrays of one entry per example (losses, pending marks) and
writes a batch's entries per step; torchdata's ``StatefulDataLoader`` takes the sampler's
state at every batch. Copying the arrays each time costs their size. A
:class:`WriteJournal` keeps, from the first state on, a base snapshot of the arrays that
the states share (never written after it is taken) and the positions written since; a
state holds the base, those positions and their values now. Past ``limit`` positions the
next state takes a new base.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from batchsel.core.state import restored_into

#: the keys of an array saved as a base and the entries written since
JOURNALED_KEYS = frozenset({"base", "at", "values"})


class WriteJournal:
    """The positions of some same-length arrays written since their last shared snapshot.

    Parameters
    ----------
    size : int
        The arrays' length.
    limit : int or None, default None
        The positions recorded (repeats counted) past which the next state takes a new
        base. None: ``16 * sqrt(size)``, which balances a state's gather of the positions
        written (a few ns each, growing until a new base) against a new base's copy of
        every array, spread over the states until the next.

    Example
    -------
    >>> losses = np.zeros(4)
    >>> journal = WriteJournal(4, limit=4)
    >>> first = journal.state({"losses": losses})["losses"]
    >>> losses[2] = 5.0
    >>> journal.wrote(np.array([2]))
    >>> second = journal.state({"losses": losses})["losses"]
    >>> second["base"] is first["base"], second["at"].tolist(), second["values"].tolist()
    (True, [2], [5.0])
    >>> saved_values(second).tolist()
    [0.0, 0.0, 5.0, 0.0]
    """

    def __init__(self, size: int, limit: int | None = None) -> None:
        self.limit = max(int(16 * math.sqrt(size)) if limit is None else int(limit), 1)
        self._bases: dict[str, tuple[np.ndarray, np.ndarray]] | None = None  # name -> (the live array, its base)
        self._written: list[np.ndarray] = []
        self._count = 0

    def __getstate__(self) -> dict[str, Any]:  # a pickled copy starts without a base
        return {"limit": self.limit, "_bases": None, "_written": [], "_count": 0}

    def wrote(self, positions: np.ndarray) -> None:
        """Record that the entries at ``positions`` of the arrays may have changed (a copy
        is kept: the caller may reuse its buffer). Nothing is recorded before a first state.

        Parameters
        ----------
        positions : numpy.ndarray
            int64 positions.
        """
        if self._bases is None:
            return
        self._written.append(np.array(positions, dtype=np.int64))
        self._count += len(positions)
        if self._count > self.limit:
            self.rewrote_all()

    def rewrote_all(self) -> None:
        """Record that any entry may have changed (a load, a reset): the next state takes
        a new base."""
        self._bases = None
        self._written = []
        self._count = 0

    def state(self, arrays: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
        """Each array as ``{"base", "at", "values"}``: the shared base, the positions
        written since it and their values now (:func:`saved_values` puts them together).

        Parameters
        ----------
        arrays : dict of str to numpy.ndarray
            The live arrays by name; the same objects each time (another object, or
            another set of names, takes a new base).

        Returns
        -------
        dict
            Per name, the three arrays; the base is shared with other states and must
            not be written into.
        """
        bases = self._bases
        if bases is None or bases.keys() != arrays.keys() or any(bases[k][0] is not a for k, a in arrays.items()):
            bases = self._bases = {name: (live, live.copy()) for name, live in arrays.items()}
            self._written, self._count = [], 0
        at = np.concatenate(self._written) if self._written else np.zeros(0, np.int64)
        return {name: {"base": base, "at": at, "values": live[at]} for name, (live, base) in bases.items()}


def saved_parts(saved: Any, dtype: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A saved array as ``(base, at, values)``, of a :meth:`WriteJournal.state` or a plain
    array (states written before journals: nothing written since its base).

    Parameters
    ----------
    saved : dict or array-like
        ``{"base", "at", "values"}`` or the array itself.
    dtype : numpy dtype
        The array's dtype.

    Returns
    -------
    tuple of numpy.ndarray
        The base (``dtype``), int64 positions and their values (``dtype``).

    Raises
    ------
    ValueError
        Positions and values of different lengths, or positions outside the base.
    """
    if isinstance(saved, dict) and saved.keys() == JOURNALED_KEYS:
        base = np.asarray(saved["base"], dtype=dtype)
        at = np.asarray(saved["at"], dtype=np.int64).reshape(-1)
        values = np.asarray(saved["values"], dtype=dtype).reshape(-1)
        if at.shape != values.shape:
            raise ValueError(f"saved array has {at.size} positions written and {values.size} values")
        if at.size and (int(at.min()) < 0 or int(at.max()) >= base.shape[0]):
            raise ValueError(f"saved array has positions written outside its {base.shape[0]} entries")
        return base, at, values
    return np.asarray(saved, dtype=dtype), np.zeros(0, np.int64), np.zeros(0, dtype)


def saved_values(saved: Any, current: np.ndarray | None = None, dtype: Any = np.float64) -> np.ndarray:
    """A saved array's values now (:func:`saved_parts` put together), written into
    ``current`` where it fits (:func:`~batchsel.core.state.restored_into`).

    Parameters
    ----------
    saved : dict or array-like
        As :func:`saved_parts` takes it; check its parts first where they can be wrong.
    current : numpy.ndarray or None, default None
        The loader's own array.
    dtype : numpy dtype, default float64
        The array's dtype.

    Returns
    -------
    numpy.ndarray
        The values, in an array the caller owns.
    """
    base, at, values = saved_parts(saved, dtype)
    out = restored_into(current, base)
    out[at] = values
    return out


__all__ = ["WriteJournal", "saved_parts", "saved_values", "JOURNALED_KEYS"]
