"""An online selector's run state: :class:`Run`, what one (epoch, rank, world size) has
drawn so far and which of its shard's examples are still unused, and the record of it
that :meth:`~batchsel.selectors.online.OnlineSelector.state_dict` carries."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from batchsel.core.state import restored_into
from batchsel.selectors.sharding import batch_sizes


@dataclass(eq=False)
class Run:
    """The current epoch's draw of one rank of an online selector.

    ``order[:m]`` are the positions (into ``shard``) still unused this epoch; ``drawn``
    the batches drawn so far, batch ``t`` of size ``sizes[t]`` for selectors that draw
    without replacement (:func:`~batchsel.selectors.sharding.batch_sizes`). Selectors that
    draw with replacement (loss rank) ignore ``order``, ``m`` and ``sizes``. Subclasses
    add what their selector keeps per run (a cache, a sorted order).

    The former dict form still reads and writes: ``run["m"]``, ``"cache" in run``,
    ``run.get("key")``, ``run.pop("cache", None)`` (a field that is None counts as absent).

    Parameters
    ----------
    epoch : int
        The epoch drawn.
    rank : int
        The rank whose shard it is.
    shard : numpy.ndarray
        The rank's examples of the epoch (int64).
    order : numpy.ndarray
        Positions into ``shard``; ``order[:m]`` the unused ones.
    m : int
        How many positions are still unused.
    sizes : numpy.ndarray
        The batch sizes of the epoch (int64).
    drawn : list of numpy.ndarray, default []
        The batches drawn so far, in order.
    key : int or None, default None
        The run's counter-based key, once computed
        (:class:`~batchsel.core.rng.CounterKeyedBatches`).

    Example
    -------
    >>> run = Run.start(0, 0, np.arange(5), batch_size=2)
    >>> run.m, run.sizes.tolist(), run["m"], "key" in run
    (5, [2, 2, 1], 5, False)
    """

    epoch: int
    rank: int
    shard: np.ndarray
    order: np.ndarray
    m: int
    sizes: np.ndarray
    drawn: list[np.ndarray] = field(default_factory=list)
    key: int | None = None
    _drawn_record: DrawnRecord | None = field(default=None, repr=False)

    #: whether the selector reads ``order``: a run drawn with replacement (loss rank) has
    #: none (an empty array), and its record none either
    reads_order: ClassVar[bool] = True

    @classmethod
    def start(cls, epoch: int, rank: int, shard: np.ndarray, batch_size: int) -> Run:
        """A run with nothing drawn yet: every position unused, in order.

        Parameters
        ----------
        epoch, rank : int
            The run's epoch and rank.
        shard : numpy.ndarray
            The rank's examples of the epoch.
        batch_size : int
            The selector's batch size.

        Returns
        -------
        Run
            Of the class it is called on.
        """
        return cls(
            epoch=int(epoch),
            rank=int(rank),
            shard=shard,
            order=np.arange(len(shard), dtype=np.int64) if cls.reads_order else np.zeros(0, np.int64),
            m=len(shard),
            sizes=batch_sizes(len(shard), batch_size),
        )

    # -- resume -----------------------------------------------------------------------
    def record(self, world_size: int) -> dict[str, Any]:
        """This run as an entry of ``state_dict()["runs"]`` (the format of every version;
        a run drawn with replacement saves an empty ``order``). Nothing writes into its
        arrays afterwards: a copy of ``order``, and views of the drawn batches' buffers
        (:class:`DrawnRecord`), which later batches extend past.

        Parameters
        ----------
        world_size : int
            The world size the run is for.

        Returns
        -------
        dict
            ``rank``, ``world_size``, ``epoch``, ``order``, ``m``, ``drawn`` (the batches
            concatenated) and ``drawn_sizes``.
        """
        if self._drawn_record is None or not self._drawn_record.follows(self.drawn):
            self._drawn_record = DrawnRecord(self.drawn)
        drawn, sizes = self._drawn_record.now()
        return {
            "rank": self.rank,
            "world_size": world_size,
            "epoch": self.epoch,
            "order": self.order.copy() if self.reads_order else np.zeros(0, np.int64),
            "m": int(self.m),
            "drawn": drawn,
            "drawn_sizes": sizes,
        }

    def resume(self, record: dict[str, Any]) -> None:
        """Take over the draw of a :meth:`record` (``order``, ``m`` and ``drawn``).

        Parameters
        ----------
        record : dict
            An entry of ``state_dict()["runs"]``.
        """
        sizes = np.asarray(record["drawn_sizes"], dtype=np.int64)
        drawn = np.asarray(record["drawn"], dtype=np.int64)
        self.drawn = np.split(drawn, np.cumsum(sizes)[:-1]) if sizes.size else []
        order = np.asarray(record["order"], dtype=np.int64)
        if self.reads_order:  # (a run drawn with replacement has none; older states saved one)
            self.order = restored_into(self.order, order)
        self.m = int(record["m"])

    def recut_sizes(self) -> None:
        """Re-cut the sizes of the batches still to come evenly from ``m`` where they do not
        add up to it (a state written by an earlier version, which cut sizes that differ
        by at most one), for a run drawn without replacement: every example is still used
        once, in as many batches as the epoch has."""
        drawn, sizes, m = self.drawn, self.sizes, self.m
        t = len(drawn)
        if t < len(sizes) and sum(len(b) for b in drawn) + m == len(self.shard) and int(sizes[t:].sum()) != m:
            sizes[:t] = [len(b) for b in drawn]
            rest = len(sizes) - t
            sizes[t:] = m // rest
            sizes[len(sizes) - m % rest :] += 1

    # -- the former dict form -----------------------------------------------------------
    def __getitem__(self, name: str) -> Any:
        value = getattr(self, name, None)
        if value is None:
            raise KeyError(name)
        return value

    def __setitem__(self, name: str, value: Any) -> None:
        setattr(self, name, value)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and getattr(self, name, None) is not None

    def get(self, name: str, default: Any = None) -> Any:
        """``run[name]``, or ``default`` where it is absent (None)."""
        value = getattr(self, name, None)
        return default if value is None else value

    def pop(self, name: str, default: Any = None) -> Any:
        """``run[name]`` (``default`` where absent), then absent."""
        value = self.get(name, default)
        if name in {f.name for f in dataclasses.fields(self)}:
            setattr(self, name, None)
        else:
            self.__dict__.pop(name, None)
        return value


class DrawnRecord:
    """A run's batches drawn so far, concatenated, and their sizes, kept up to date as
    batches are appended: a state taken every step copies the new batches, not the
    epoch's. The arrays handed out are views of buffers whose entries are never written
    again (a full buffer is copied into a larger one), so earlier states stay as taken.

    Parameters
    ----------
    drawn : list of numpy.ndarray
        The run's list of batches, followed as it grows.

    Example
    -------
    >>> batches = [np.array([3, 1])]
    >>> record = DrawnRecord(batches)
    >>> batches.append(np.array([0]))
    >>> [a.tolist() for a in record.now()]
    [[3, 1, 0], [2, 1]]
    """

    def __init__(self, drawn: list[np.ndarray]) -> None:
        self.drawn = drawn
        self.flat = np.zeros(sum(len(b) for b in drawn) + 1024, np.int64)
        self.sizes = np.zeros(len(drawn) + 64, np.int64)
        self.batches = self.length = 0
        self.last: np.ndarray | None = None

    def follows(self, drawn: list[np.ndarray]) -> bool:
        """Whether ``drawn`` is the list followed, grown only by appending since."""
        return (
            drawn is self.drawn
            and len(drawn) >= self.batches
            and (self.batches == 0 or drawn[self.batches - 1] is self.last)
        )

    def now(self) -> tuple[np.ndarray, np.ndarray]:
        """The batches drawn until now, concatenated (int64), and their sizes (int64)."""
        new = self.drawn[self.batches :]
        if new:
            sizes = [len(b) for b in new]
            length = self.length + sum(sizes)
            if length > len(self.flat):
                self.flat = np.concatenate([self.flat[: self.length], np.zeros(length, np.int64)])
            if self.batches + len(new) > len(self.sizes):
                self.sizes = np.concatenate([self.sizes[: self.batches], np.zeros(self.batches + len(new), np.int64)])
            self.flat[self.length : length] = np.concatenate(new) if len(new) > 1 else new[0]
            self.sizes[self.batches : self.batches + len(new)] = sizes
            self.batches += len(new)
            self.length = length
            self.last = self.drawn[self.batches - 1]
        return self.flat[: self.length], self.sizes[: self.batches]


__all__ = ["Run", "DrawnRecord"]
