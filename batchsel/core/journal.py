"""States taken often of arrays written a few entries at a time.

A loss-ranked selector keeps arrays of one entry per example (losses, pending marks) and
writes a batch's entries per step; torchdata's ``StatefulDataLoader`` takes the sampler's
state at every batch. Copying the arrays each time costs their size. A
:class:`WriteJournal` keeps, from the first state on, a base snapshot of the arrays that
the states share (never written after it is taken) and the positions written since; a
state holds the base, those positions and their values. A state reads only the values of
the positions written since the one before (still in cache: just written), and keeps the
earlier ones as read then; a position written again is listed again, later, and the last
of its values is the one that holds (:func:`saved_parts`). Past ``limit`` positions the
next state takes a new base: the former one brought up to date at the positions written
since it, where no state holds it any more, so that a new base costs what was written, not
the arrays' size.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from batchsel.core.state import restored_into

#: whether ``sys.getrefcount`` tells that only the journal holds an array (not in a
#: free-threaded build, whose counts are deferred): only then is a former base reused
_REFCOUNTS_EXACT = getattr(sys, "_is_gil_enabled", lambda: True)()
#: the keys of an array saved as a base and the entries written since
JOURNALED_KEYS = frozenset({"base", "at", "values"})
#: the positions a state gathers at most (about): a new base comes after as many
DEFAULT_LIMIT = 4096
#: positions recorded without a state taken, as a multiple of the limit, past which the
#: journal stops recording until the next state (which then copies the arrays whole)
_IDLE_FACTOR = 16


class WriteJournal:
    """The positions of some same-length arrays written since their last shared snapshot.

    Parameters
    ----------
    limit : int, default 4096
        The positions recorded (repeats counted) past which the next state takes a new
        base. A state gathers up to that many entries; a new base writes the positions
        of two such periods into the former base (or copies the arrays whole where a
        state still holds it).

    Example
    -------
    >>> losses = np.zeros(4)
    >>> journal = WriteJournal(limit=4)
    >>> first = journal.state({"losses": losses})["losses"]
    >>> losses[2] = 5.0
    >>> journal.wrote(np.array([2]))
    >>> second = journal.state({"losses": losses})["losses"]
    >>> second["base"] is first["base"], second["at"].tolist(), second["values"].tolist()
    (True, [2], [5.0])
    >>> saved_values(second).tolist()
    [0.0, 0.0, 5.0, 0.0]
    """

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = max(int(limit), 1)
        self._bases: dict[str, tuple[np.ndarray, np.ndarray]] | None = None  # name -> (the live array, its base)
        self._written: list[np.ndarray] = []  # the positions written since the base
        self._read: dict[str, list[np.ndarray]] = {}  # name -> the values of _written[:len] as a state read them
        self._count = 0
        self._known = False  # whether _written holds every write since the base
        self._spares: dict[str, np.ndarray] = {}  # the former bases
        self._spare_lacks: list[np.ndarray] | None = None  # what they lack besides _written (None: unknown)

    def __getstate__(self) -> dict[str, Any]:  # a pickled copy starts without a base
        return {
            **self.__dict__,
            "_bases": None,
            "_written": [],
            "_read": {},
            "_count": 0,
            "_known": False,
            "_spares": {},
            "_spare_lacks": None,
        }

    def wrote(self, positions: np.ndarray) -> None:
        """Record that the entries at ``positions`` of the arrays may have changed (a copy
        is kept: the caller may reuse its buffer). Nothing is recorded while the journal
        has no base (before a first state or :meth:`filled`, after :meth:`rewrote_all`).

        Parameters
        ----------
        positions : numpy.ndarray
            int64 positions.
        """
        if not self._known:
            return
        self._written.append(np.array(positions, dtype=np.int64))
        self._count += len(positions)
        if self._count > _IDLE_FACTOR * self.limit:  # no state for long: stop, the next copies whole
            self.rewrote_all()

    def filled(self, arrays: dict[str, np.ndarray]) -> None:
        """Record that each of ``arrays`` holds one value throughout (just built, as by
        ``np.full``): the states share that value, broadcast read-only, as their base until
        the first new base, so a fresh part's state copies nothing.

        Parameters
        ----------
        arrays : dict of str to numpy.ndarray
            The live arrays by name, each filled with one value.
        """
        self._bases = {
            name: (live, np.broadcast_to(live[:1].copy(), live.shape) if live.size else live.copy())
            for name, live in arrays.items()
        }
        self._written, self._read, self._count, self._known = [], {}, 0, True
        self._spares, self._spare_lacks = {}, None

    def rewrote_all(self) -> None:
        """Record that any entry may have changed (a load, a reset): the next state takes
        a whole new base."""
        self._known = False
        self._written, self._read = [], {}
        self._count = 0
        self._spare_lacks = None

    def state(self, arrays: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
        """Each array as ``{"base", "at", "values"}``: the shared base, the positions
        written since it and their values (a position written again is listed again, with
        its later value: :func:`saved_values` puts them together).

        Parameters
        ----------
        arrays : dict of str to numpy.ndarray
            The live arrays by name; the same objects each time (another object, or
            another set of names, takes a whole new base).

        Returns
        -------
        dict
            Per name, the three arrays; the base is shared with other states and must
            not be written into.
        """
        bases = self._bases
        same = bases is not None and bases.keys() == arrays.keys() and all(bases[k][0] is a for k, a in arrays.items())
        if not (same and self._known):
            self._renew(arrays, None)
        elif self._count > self.limit:
            self._renew(arrays, self._written)
        bases = self._bases
        assert bases is not None
        written = self._written
        at = np.concatenate(written) if written else np.zeros(0, np.int64)
        saved = {}
        for name, (live, base) in bases.items():
            read = self._read.setdefault(name, [])
            read.extend(live[positions] for positions in written[len(read) :])  # only the new ones: in cache
            values = np.concatenate(read) if read else live[:0].copy()
            saved[name] = {"base": base, "at": at, "values": values}
        return saved

    def _renew(self, arrays: dict[str, np.ndarray], written: list[np.ndarray] | None) -> None:
        """New bases equal to ``arrays``: each former base (the spare) brought up to date
        at the positions it lacks, where ``written`` (the positions since the current
        base) and what it lacked before are known and no state holds it; else a copy,
        into the spare's memory where no state holds it (a fresh array of ten million
        entries costs its page faults, several times the copy)."""
        lacks = None  # (written holds more than the limit: never empty)
        if written is not None and self._spare_lacks is not None:
            lacks = np.concatenate([*self._spare_lacks, *written])
        new: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for name, live in arrays.items():
            base = self._free_spare(name, live)
            if base is None:
                base = live.copy()
            elif lacks is None:
                np.copyto(base, live)
            else:
                base[lacks] = live[lacks]
            new[name] = (live, base)
        old = self._bases
        self._spares = {} if old is None else {name: base for name, (_, base) in old.items()}
        self._spare_lacks = (
            written if (written is not None and old is not None and old.keys() == arrays.keys()) else None
        )
        self._bases = new
        self._written, self._read, self._count, self._known = [], {}, 0, True

    def _free_spare(self, name: str, live: np.ndarray) -> np.ndarray | None:
        """The former base of ``name`` if it fits ``live`` and no state holds it."""
        spares = self._spares
        if (
            _REFCOUNTS_EXACT
            and name in spares
            and spares[name].flags.writeable  # (a filled base is a read-only broadcast)
            and spares[name].shape == live.shape
            and spares[name].dtype == live.dtype
            and sys.getrefcount(spares[name]) <= 2  # the dict's reference and the call's: no state's tensor
        ):
            return spares.pop(name)
        return None


class ChangeLog:
    """The positions of an array written, in order, for readers that each catch up at
    their own pace (a rank order updated at its next batch, not at every write).

    A reader keeps the :meth:`now` it last read at and asks :meth:`since` for what was
    written after it; where that is unknown (:meth:`rewrote_all`, a log copied or
    pickled, or writes the log has dropped), ``since`` answers None: anything may have
    changed.

    Parameters
    ----------
    limit : int
        Positions kept when the log's buffer fills (the older ones are dropped: a reader
        that far behind reads everything again, which then costs about as much).

    Example
    -------
    >>> log = ChangeLog(limit=100)
    >>> mark = log.now()
    >>> log.wrote(np.array([3, 1]))
    >>> log.wrote(np.array([1]))
    >>> log.since(mark).tolist(), log.since(log.now()).tolist()
    ([3, 1, 1], [])
    >>> log.rewrote_all()
    >>> log.since(mark) is None
    True
    """

    def __init__(self, limit: int) -> None:
        self.limit = max(int(limit), 1)
        # the positions in the order written: entry i is write number _first + i. Entries
        # are only appended; a full buffer is copied into a new one (keeping the last
        # ``limit``), so the views ``since`` hands out never change
        self._buffer = np.empty(0, np.int64)
        self._first = 0  # the clock of _buffer[0]
        self._end = 0  # positions written since the log began (its clock)
        self._known_from = 0  # readers from before it get None

    def __getstate__(self) -> dict[str, Any]:  # a copy's readers read everything again
        after = self._end + 1
        return {**self.__dict__, "_buffer": np.empty(0, np.int64), "_first": after, "_end": after, "_known_from": after}

    def now(self) -> int:
        """The log's clock: what a reader keeps to ask :meth:`since` later."""
        return self._end

    def wrote(self, positions: np.ndarray) -> None:
        """Record that the entries at ``positions`` may have changed (a copy is kept).

        Parameters
        ----------
        positions : numpy.ndarray
            1-D integer positions.
        """
        buffer, at = self.room(positions.size)
        buffer[at : at + positions.size] = positions
        self._end += positions.size

    def room(self, count: int) -> tuple[np.ndarray, int]:
        """Where the next ``count`` positions go, for a compiled kernel that writes them
        itself: the log's buffer and the offset to write at; :meth:`added` then records them.

        Parameters
        ----------
        count : int
            Positions about to be written.

        Returns
        -------
        tuple
            ``(buffer, offset)``: int64 ``buffer[offset : offset + count]`` is free.
        """
        held = self._end - self._first
        if held + count > self._buffer.size:
            keep = min(held, self.limit)
            buffer = np.empty(max(2 * (keep + count), 1024), np.int64)
            buffer[:keep] = self._buffer[held - keep : held]
            self._buffer, self._first = buffer, self._end - keep
            self._known_from = max(self._known_from, self._first)
            held = keep
        return self._buffer, held

    def added(self, count: int) -> None:
        """Record the ``count`` positions written where :meth:`room` said."""
        self._end += count

    def rewrote_all(self) -> None:
        """Record that any entry may have changed: every reader reads everything again."""
        self._buffer = np.empty(0, np.int64)  # (a new one: views handed out stay as they are)
        self._end += 1  # (a tick of its own: a reader marked just before it is told nothing)
        self._first = self._known_from = self._end

    def since(self, mark: int) -> np.ndarray | None:
        """The positions written since :meth:`now` was ``mark`` (repeats kept), or None
        where that is not known.

        Parameters
        ----------
        mark : int
            A former :meth:`now`.

        Returns
        -------
        numpy.ndarray or None
            int64 positions, oldest first: a view of the log, which later writes leave as
            it is (do not write into it).
        """
        if not self._known_from <= mark <= self._end:
            return None
        return self._buffer[mark - self._first : self._end - self._first]


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
        The base (``dtype``), int64 positions and their values (``dtype``), each position
        once: where a state lists one more than once, its last value.

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
        if at.size > 1:  # a position written again is listed again, later: its last value holds
            _, first_from_end = np.unique(at[::-1], return_index=True)
            last = at.size - 1 - first_from_end
            at, values = at[last], values[last]
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


__all__ = ["WriteJournal", "ChangeLog", "saved_parts", "saved_values", "JOURNALED_KEYS"]
