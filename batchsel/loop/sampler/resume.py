"""Exact mid-epoch resume: what an iteration handed out, and where the next one restarts.

:class:`IterationRecord` keeps the latest iteration's place in its epoch (the batches an
online selector drew, which a checkpoint must replay) and a loaded checkpoint's restart
point. :class:`SamplerState` is one rank's saved state, typed: the run it belongs to
(:class:`RunRecord`), where its epoch restarts (:class:`EpochPosition`), the selector's
state and the feedback not applied yet; :func:`every_rank` gathers every rank's.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field, fields
from typing import Any, Callable

import numpy as np

from batchsel.core.checks import check_int
from batchsel.core.state import STATE_VERSION, check_version, from_portable, to_portable
from batchsel.loop.sampler.elastic import Remainder
from batchsel.loop.sampler.frameworks import hands_out_in_order

# what every saved state holds (states of older versions lack the run's sizes and the
# feedback held back by a prefetch run, which are checked or restored only when present)
REQUIRED = ("rank", "world_size", "seed", "method", "epoch", "position", "pending", "selector", "observations")


class IterationRecord:
    """The latest iteration's place in its epoch, and a loaded restart point.

    Example
    -------
    >>> record = IterationRecord()
    >>> record.begin(epoch=0)                   # no restart point: from the beginning
    (0, [], 0)
    >>> record.handed(np.array([4, 2]), keep=True)
    >>> record.batch(0).tolist(), record.saved(0, None, [], online=True).position
    ([4, 2], 1)
    """

    def __init__(self) -> None:
        #: a loaded state's restart point, until the iteration over its epoch starts, and
        #: whether finished batches are handed out as placeholders first
        self.resume: EpochPosition | None = None
        self.placeholders = False
        #: the rest of an epoch saved on another number of ranks, as this world finishes it
        self.remainder: Remainder | None = None
        self.epoch: int | None = None  # epoch of the latest iteration
        self.base = 0  # batch number the latest iteration started from
        self.yielded = 0  # batches of that epoch handed out so far
        self.history: list[np.ndarray] = []  # batches handed out by the latest iteration (online / feedback)
        self.pending: list[np.ndarray] = []  # batches that iteration replays from a checkpoint
        self.passed = False  # whether the latest iteration ran to its end
        # the look-ahead of the DataLoader running the latest iteration, as stated
        # (``workers_ahead``), why its loader was seen to differ, and how many batches
        # were handed out before it started
        self.window = 0
        self.mismatch: str | None = None
        self.attached_at = 0
        # the loader's iterator, read in the epoch's tail only: weak while the epoch runs,
        # its attributes once the sampler ran out (None: no loader, gone, or a copy of the
        # sampler: not pickled, a new one attaches itself); whether it hands batches out in order
        self._loader: weakref.ref | None = None
        self._kept: dict[str, Any] | None = None
        self.ordered = True

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_loader": None, "_kept": None}

    def begin(self, epoch: int) -> tuple[int, list[np.ndarray], int]:
        """Start an iteration over ``epoch``, from the restart point when it is that epoch's.

        Parameters
        ----------
        epoch : int
            The epoch being iterated.

        Returns
        -------
        tuple
            ``(start, pending, skip)``: the batch number the selector resumes at, the
            batches drawn before the checkpoint to replay first, and the finished batches
            to hand out as placeholders (a framework skips them itself).
        """
        start, pending, skip = 0, [], 0
        if self.resume is not None and self.resume.epoch == epoch:
            start, pending = self.resume.position, self.resume.pending
            skip = self.resume.batches_done if self.placeholders else 0
        self.resume, self.placeholders = None, False
        self.epoch, self.base, self.pending = epoch, start - len(pending), list(pending)
        self.yielded, self.history = self.base - skip, []
        self.passed = False
        return start, pending, skip

    def attach(self, loader: Any, window: int, mismatch: str | None = None) -> None:
        """Note the look-ahead of the DataLoader that runs this iteration, as stated, and
        its iterator where one was found (None: a loop of its own, or not found).

        Parameters
        ----------
        loader : DataLoader iterator or None
            The iterator asking for the batches; read only in the epoch's tail.
        window : int
            The stated look-ahead, ``num_workers * prefetch_factor`` (the sampler's
            ``workers_ahead``).
        mismatch : str or None
            Why the stated look-ahead is not the loader's (a checkpoint's default count
            then refuses, naming this); None where it agrees or no loader was seen.
        """
        # weak while the epoch runs: a loop that leaves it drops the iterator, and its workers
        self._loader, self._kept = (None if loader is None else weakref.ref(loader)), None
        self.ordered = hands_out_in_order(loader)
        self.window, self.mismatch, self.attached_at = window, mismatch, self.yielded

    def finish(self) -> None:
        """The iteration handed out its last batch and was asked for one more: the loop may
        still be up to the loader's look-ahead behind, so the loader's attributes are held
        until the next iteration, to tell a checkpoint taken after the loop how far it got."""
        self.passed = True
        # its attributes only: the iterator itself would be copied into forked workers
        self._kept, self._loader = self.loader_attributes(), None

    def loader_attributes(self) -> dict[str, Any] | None:
        """The attributes of the latest iteration's DataLoader iterator, where one is known.

        Returns
        -------
        dict or None
            Its ``__dict__`` (kept once the sampler ran out), None without one.
        """
        if self._kept is not None:
            return self._kept
        loader = None if self._loader is None else self._loader()
        return getattr(loader, "__dict__", None)

    def in_flight(self) -> int | None:
        """Batches handed to the DataLoader that its training loop has not received yet.

        A DataLoader with workers asks for ``window`` batches before its loop receives the
        first and for one more each time the loop receives one (torch's documented
        ``prefetch_factor``, in order), so while the epoch lasts the loop is exactly
        ``window`` batches behind the sampler. Once the sampler has run out that stops
        holding: the loop is then between ``window - 1`` batches and none behind, which
        only the loader's own count tells, where it keeps one.

        Returns
        -------
        int or None
            The batches in flight, which a checkpoint taken now must not count; None where
            that cannot be told (the stated look-ahead is not the loader's, batches out of
            order, or the epoch's tail without the loader's count).
        """
        if self.mismatch is not None or not self.ordered:
            return None
        handed = self.yielded - self.attached_at
        if not self.passed or self.window <= 1:
            return min(self.window, handed)
        received = (self.loader_attributes() or {}).get("_num_yielded")  # torch's count, where it keeps one
        return max(handed - received, 0) if isinstance(received, int) else None

    def handed(self, batch: np.ndarray, keep: bool) -> None:
        """Count a batch handed out; ``keep`` it where the selector's batches are recorded."""
        self.yielded += 1
        if keep:
            self.history.append(batch)

    def batch(self, number: int) -> np.ndarray:
        """The indices of batch ``number`` (from the epoch's start) of the latest iteration.

        Parameters
        ----------
        number : int
            The batch's number in its epoch.

        Returns
        -------
        numpy.ndarray
            Its indices, as handed out; ``ValueError`` for a batch it did not hand out.
        """
        i = number - self.base
        if self.epoch is None or not 0 <= i < len(self.history):
            raise ValueError(
                f"batch={number} was not handed out by this iteration of epoch {self.epoch} "
                f"(batches {self.base} to {self.base + len(self.history) - 1})"
            )
        return self.history[i]

    def saved(self, epoch: int, batches_done: int | None, ahead: list[Any], online: bool) -> EpochPosition:
        """Where a run resumed from now restarts ``epoch``.

        Parameters
        ----------
        epoch : int
            The sampler's epoch.
        batches_done : int or None
            Batches of the epoch the loop finished; None: those the training loop received
            (handed out, less those a DataLoader's workers still hold).
        ahead : list
            ``(batch, weights)`` items selected ahead and not handed out yet.
        online : bool
            Whether the selector draws as it goes (its drawn batches are replayed).

        Returns
        -------
        EpochPosition
            The batches the selector has drawn and those to replay first; a loaded restart
            point not iterated yet, unchanged.
        """
        if self.resume is not None:  # loaded and not iterated yet: unchanged
            return self.resume
        active = self.epoch == epoch
        yielded = self.yielded if active else 0
        if batches_done is not None:
            done = check_int(batches_done, "batches_done", minimum=0)
        elif not active:
            done = yielded
        else:
            held = self.in_flight()
            if held is None:
                raise ValueError(self.unknown_position())
            done = yielded - held
        if done > yielded:
            raise ValueError(f"batches_done={done} but only {yielded} batches of epoch {epoch} were handed out")
        pending: list[np.ndarray] = []
        if online and active:
            if done < self.base:
                raise ValueError(f"batches_done={done} is before this iteration's start ({self.base})")
            # batches drawn so far: the replayed ones (some maybe not handed out yet) and the
            # new ones, those selected ahead in the background included
            drawn = self.history + [batch for batch, _ in ahead]
            drawn = drawn if len(drawn) >= len(self.pending) else self.pending
            pending = [np.array(b, dtype=np.int64) for b in drawn[done - self.base :]]
        return EpochPosition(epoch, done + len(pending), pending)

    def unknown_position(self) -> str:
        """Why :meth:`in_flight` cannot tell the loop's position, and the exact form."""
        if not self.ordered:
            return (
                "the DataLoader hands batches out of order (in_order=False): no position in the epoch says "
                "which were trained; checkpoint at an epoch's end, or use in_order=True"
            )
        if self.mismatch is not None:
            return f"sampler.state_dict() cannot count the batches trained: {self.mismatch}"
        return (
            f"sampler.state_dict() cannot tell how many of the epoch's last {self.window} batches handed to the "
            f"DataLoader (workers_ahead={self.window}) the training loop has finished: pass your step count, "
            "sampler.state_dict(batches_done=step)"
        )

    def restart_at(self, place: EpochPosition, placeholders: bool) -> None:
        """Restart ``place.epoch`` at ``place`` when it is next iterated.

        Parameters
        ----------
        place : EpochPosition
            A saved state's position, checked against the epoch's length.
        placeholders : bool
            Hand out an empty batch for each finished one first.
        """
        self.resume, self.placeholders = place, bool(placeholders)


@dataclass(frozen=True)
class RunRecord:
    """What a saved state records of its run, checked against the run that resumes it:
    another dataset size, batch size or batch count would put the saved position at
    another point of the epoch (offline selectors have no state of their own to object).

    ``num_examples``, ``batch_size`` and ``num_batches`` are None in states written before
    they were recorded; such fields are not checked.

    Example
    -------
    >>> from batchsel import RandomSelector
    >>> saved = RunRecord.of(RandomSelector(10, 2), rank=0, world_size=1, num_batches=5)
    >>> saved.check_resumed_by(RunRecord.of(RandomSelector(12, 2), rank=0, world_size=1, num_batches=6))
    Traceback (most recent call last):
    ...
    ValueError: the state was saved with num_examples=10, this sampler has 12; resume with the data and selector settings of the saved run
    """

    rank: int
    world_size: int
    seed: int
    method: str
    num_examples: int | None = None
    batch_size: int | None = None
    num_batches: int | None = None

    @classmethod
    def of(cls, selector: Any, rank: int, world_size: int, num_batches: int) -> RunRecord:
        """The record of a sampler's run.

        Parameters
        ----------
        selector : Selector
            The sampler's selector.
        rank, world_size : int
            This rank and the number of ranks.
        num_batches : int
            The rank's batches in the saved epoch.

        Returns
        -------
        RunRecord
        """
        return cls(
            rank,
            world_size,
            selector.seed,
            type(selector).__name__,
            selector.num_examples,
            selector.batch_size,
            num_batches,
        )

    def check_resumed_by(self, mine: RunRecord) -> None:
        """``ValueError`` naming the first recorded field that ``mine`` (the resuming
        sampler's record) does not share.

        Parameters
        ----------
        mine : RunRecord
            The resuming sampler's record.
        """
        for f in fields(self):
            saved, value = getattr(self, f.name), getattr(mine, f.name)
            if saved is not None and saved != value:
                raise ValueError(
                    f"the state was saved with {f.name}={saved!r}, this sampler has {value!r}; "
                    f"resume with the data and selector settings of the saved run"
                )


@dataclass
class EpochPosition:
    """Where a resumed run restarts its epoch: ``position`` batches drawn by the selector,
    of which the last ``pending`` were not trained yet (an online selector's, replayed
    first on resume)."""

    epoch: int
    position: int
    pending: list[np.ndarray] = field(default_factory=list)

    @property
    def batches_done(self) -> int:
        """The batches of the epoch the loop had finished."""
        return self.position - len(self.pending)


@dataclass
class SamplerState:
    """One rank's resume state, typed: the run it belongs to, where its epoch restarts,
    the selector's own state, and the feedback not handed to the selector yet (the
    ``observations`` buffered for the next all-gather, and what a prefetch run held back,
    ``deferred``).

    :meth:`to_dict` writes the saved form (flat, with :data:`~batchsel.core.state.STATE_VERSION`,
    arrays as tensors: ``torch.load(weights_only=True)`` reads it), :meth:`from_dict`
    reads it back, also as written by 0.1.0.

    Example
    -------
    >>> from batchsel import RandomSelector
    >>> run = RunRecord.of(RandomSelector(10, 2), rank=0, world_size=1, num_batches=5)
    >>> state = SamplerState(run, EpochPosition(epoch=1, position=2), selector={}, observations=[], deferred=[])
    >>> saved = state.to_dict()
    >>> saved["version"], saved["batches_done"], SamplerState.from_dict(saved, lambda: (0, 1)) == state
    (1, 2, True)
    """

    run: RunRecord
    place: EpochPosition
    selector: dict[str, Any]
    observations: list[Any]
    deferred: list[Any]
    remainder: Remainder | None = None

    def to_dict(self) -> dict[str, Any]:
        """The saved form: one flat dict, arrays as tensors.

        Returns
        -------
        dict
            ``version``, the run's fields, ``epoch``, ``position``, ``pending``,
            ``batches_done``, ``selector``, ``observations`` and ``deferred``; and
            ``remainder`` where the epoch is the rest of one saved on another number of
            ranks (states without one keep 0.1.0's form).
        """
        place = self.place
        saved = {
            "version": STATE_VERSION,
            **{f.name: getattr(self.run, f.name) for f in fields(self.run)},  # numbers and strings: no deep copy
            "epoch": place.epoch,
            "position": place.position,
            "pending": [np.asarray(b, dtype=np.int64) for b in place.pending],
            "batches_done": place.batches_done,
            "selector": self.selector,
            "observations": list(self.observations),
            "deferred": list(self.deferred),
        }
        if self.remainder is not None:
            saved["remainder"] = self.remainder.to_dict()
        return to_portable(saved)

    @classmethod
    def from_dict(cls, state: Any, rank_of: Callable[[], tuple[int, int]]) -> SamplerState:
        """This rank's state from a saved one: one rank's, or every rank's
        (``state_dict(all_ranks=True)``), as this version or 0.1.0 wrote it.

        Parameters
        ----------
        state : dict
            :meth:`to_dict`'s output, or :func:`every_rank`'s.
        rank_of : callable
            Returns ``(rank, world_size)`` of this job; called only for every rank's state.

        Returns
        -------
        SamplerState
            ``ValueError`` for anything else, naming what is missing.
        """
        state = from_portable(check_version(state, "SelectionBatchSampler"))
        if "ranks" in state:
            rank, world_size = rank_of()
            if len(state["ranks"]) != world_size:
                raise ValueError(f"the state holds {len(state['ranks'])} ranks, this job has {world_size}")
            state = state["ranks"][rank]
        if not isinstance(state, dict):
            raise ValueError(f"a sampler state is a dict, got {type(state).__name__}")
        missing = sorted(set(REQUIRED) - set(state))
        if missing:
            raise ValueError(f"the state lacks {missing}: pass what SelectionBatchSampler.state_dict() returned")
        run = RunRecord(**{f.name: state.get(f.name) for f in fields(RunRecord)})
        place = EpochPosition(
            check_int(state["epoch"], "epoch", minimum=0),
            check_int(state["position"], "position", minimum=0),
            [np.asarray(b, dtype=np.int64) for b in state["pending"]],
        )
        observations, deferred = list(state["observations"]), list(state.get("deferred", []))
        remainder = state.get("remainder")
        remainder = None if remainder is None else Remainder.from_dict(remainder)
        return cls(run, place, state["selector"], observations, deferred, remainder)


def every_rank(state: dict[str, Any], comm: Any, world_size: int, timeout: float | None) -> dict[str, Any]:
    """Every rank's saved state in one dict (collective), so that rank 0 alone can save it.

    Parameters
    ----------
    state : dict
        This rank's saved state (:meth:`SamplerState.to_dict`).
    comm : Communicator or None
        The ranks' communicator (``ValueError`` without one).
    world_size : int
        The number of ranks.
    timeout : float or None
        Seconds to wait for every rank before ``RuntimeError`` names the call (where the
        communicator can bound the wait: MPI, torch.distributed over gloo).

    Returns
    -------
    dict
        ``version``, ``world_size`` and ``ranks``: the states by rank.
    """
    if comm is None:
        raise ValueError("all_ranks=True needs a communicator (this sampler has none)")
    wait = getattr(comm, "wait_for_ranks", None)
    if wait is not None:
        wait("sampler.state_dict(all_ranks=True), a collective", timeout)
    return {"version": STATE_VERSION, "world_size": world_size, "ranks": comm.allgather(state)}


__all__ = ["EpochPosition", "IterationRecord", "RunRecord", "SamplerState", "every_rank"]
