"""Exact mid-epoch resume: what an iteration handed out, and where the next one restarts.

:class:`IterationRecord` keeps the latest iteration's place in its epoch (the batches an
online selector drew, which a checkpoint must replay) and a loaded checkpoint's restart
point. :func:`own_state` and :func:`check_same_run` read a saved state: this rank's part,
and whether it was saved by the same data and settings.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

import numpy as np

from batchsel.core.checks import check_int
from batchsel.core.state import from_portable
from batchsel.loop.sampler.frameworks import hands_out_in_order

#: the version of :meth:`SelectionBatchSampler.state_dict`'s output
STATE_VERSION = 1
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
    >>> record.batch(0).tolist(), record.saved(0, None, [], online=True)["position"]
    ([4, 2], 1)
    """

    def __init__(self) -> None:
        #: a loaded state's restart point, until the iteration over its epoch starts
        self.resume: dict[str, Any] | None = None
        self.epoch: int | None = None  # epoch of the latest iteration
        self.base = 0  # batch number the latest iteration started from
        self.yielded = 0  # batches of that epoch handed out so far
        self.history: list[np.ndarray] = []  # batches handed out by the latest iteration (online / feedback)
        self.pending: list[np.ndarray] = []  # batches that iteration replays from a checkpoint
        self.passed = False  # whether the latest iteration ran to its end
        # the look-ahead of the DataLoader running the latest iteration, as stated
        # (``workers_ahead``), whether its loader was seen to differ, and how many batches
        # were handed out before it started
        self.window = 0
        self.mismatch: str | None = None
        self.attached_at = 0
        # the loader's iterator, for the epoch's tail only (None: none, gone, or a copy of
        # the sampler; not pickled: a new one attaches itself), and whether it hands
        # batches out in order
        self.loader_attributes: Callable[[], dict[str, Any] | None] = lambda: None
        self.ordered = True

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
        if self.resume is not None and self.resume["epoch"] == epoch:
            start, pending = self.resume["position"], self.resume["pending"]
            skip = start - len(pending) if self.resume.get("placeholders") else 0
        self.resume = None
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
        held = None if loader is None else weakref.ref(loader)
        self.loader_attributes = lambda: None if held is None else getattr(held(), "__dict__", None)
        self.ordered = hands_out_in_order(loader)
        self.window, self.mismatch, self.attached_at = window, mismatch, self.yielded

    def finish(self) -> None:
        """The iteration handed out its last batch and was asked for one more: the loop may
        still be up to the loader's look-ahead behind, so the loader's attributes are held
        until the next iteration, to tell a checkpoint taken after the loop how far it got."""
        self.passed = True
        attributes = self.loader_attributes()
        if attributes is not None:  # its attributes only: the iterator itself would be copied into forked workers
            self.loader_attributes = lambda: attributes

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

    def saved(self, epoch: int, batches_done: int | None, ahead: list[Any], online: bool) -> dict[str, Any]:
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
        dict
            ``epoch``, ``position`` (batches the selector has drawn) and ``pending`` (those
            to replay first); a loaded restart point not iterated yet, unchanged.
        """
        if self.resume is not None:  # loaded and not iterated yet: unchanged
            return {k: v for k, v in self.resume.items() if k != "placeholders"}
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
        return {"epoch": epoch, "position": done + len(pending), "pending": pending}

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

    def restart_at(self, state: dict[str, Any], position: int, placeholders: bool) -> None:
        """Restart the saved epoch at ``position`` when it is next iterated.

        Parameters
        ----------
        state : dict
            This rank's saved state (its ``epoch`` and ``pending`` batches).
        position : int
            Batches the selector had drawn, checked against the epoch's length.
        placeholders : bool
            Hand out an empty batch for each finished one first.
        """
        self.resume = {
            "epoch": int(state["epoch"]),
            "position": position,
            "placeholders": bool(placeholders),
            "pending": [np.asarray(b, dtype=np.int64) for b in state["pending"]],
        }


def every_rank(state: dict[str, Any], comm: Any, world_size: int) -> dict[str, Any]:
    """Every rank's state in one dict (collective), so that rank 0 alone can save it.

    Parameters
    ----------
    state : dict
        This rank's state.
    comm : Communicator or None
        The ranks' communicator (``ValueError`` without one).
    world_size : int
        The number of ranks.

    Returns
    -------
    dict
        ``version``, ``world_size`` and ``ranks``: the states by rank.
    """
    if comm is None:
        raise ValueError("all_ranks=True needs a communicator (this sampler has none)")
    return {"version": STATE_VERSION, "world_size": world_size, "ranks": comm.allgather(state)}


def own_state(state: Any, rank_of: Any) -> dict[str, Any]:
    """This rank's part of a saved state, checked for what every state holds.

    Parameters
    ----------
    state : dict
        :meth:`SelectionBatchSampler.state_dict`'s output, of one rank or of all
        (``all_ranks=True``).
    rank_of : callable
        Returns ``(rank, world_size)`` of this job; called only for a state of all ranks.

    Returns
    -------
    dict
        The rank's state, arrays back as numpy arrays; ``ValueError`` for anything else.
    """
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        raise ValueError(f"not a SelectionBatchSampler state (version {STATE_VERSION}): {type(state).__name__}")
    state = from_portable(state)
    if "ranks" in state:
        rank, world_size = rank_of()
        if len(state["ranks"]) != world_size:
            raise ValueError(f"the state holds {len(state['ranks'])} ranks, this job has {world_size}")
        state = state["ranks"][rank]
    missing = sorted(set(REQUIRED) - set(state))
    if missing:
        raise ValueError(f"the state lacks {missing}: pass what SelectionBatchSampler.state_dict() returned")
    return state


def run_keys(selector: Any, rank: int, world_size: int, num_batches: int) -> dict[str, Any]:
    """What a saved state records of the run, to check it against the resuming one.

    Parameters
    ----------
    selector : Selector
        The sampler's selector.
    rank : int
        This rank.
    world_size : int
        The number of ranks.
    num_batches : int
        The rank's batches in the saved epoch.

    Returns
    -------
    dict
        ``rank``, ``world_size``, ``seed``, ``method``, ``num_examples``, ``batch_size``
        and ``num_batches``, in that order.
    """
    return {
        "rank": rank,
        "world_size": world_size,
        "seed": selector.seed,
        "method": type(selector).__name__,
        "num_examples": selector.num_examples,
        "batch_size": selector.batch_size,
        "num_batches": num_batches,
    }


def stamp(state: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """``state`` with the version, the run's keys (:func:`run_keys`) and ``batches_done``.

    Parameters
    ----------
    state : dict
        A rank's state: where it restarts, the selector's state, the feedback.
    run : dict
        :func:`run_keys` of the saving sampler.

    Returns
    -------
    dict
        ``state``, updated in place.
    """
    first = ("rank", "world_size", "seed", "method")
    state.update(version=STATE_VERSION, **{k: run[k] for k in first})
    state["batches_done"] = state["position"] - len(state["pending"])
    state.update({k: v for k, v in run.items() if k not in first})
    return state


def check_same_run(state: dict[str, Any], mine: dict[str, Any]) -> None:
    """Refuse a state saved with other data or settings: another dataset size, batch size
    or batch count puts the saved position at another point of the epoch (offline
    selectors have no state of their own to object). States written before these were
    recorded skip them.

    Parameters
    ----------
    state : dict
        This rank's saved state.
    mine : dict
        This sampler's :func:`run_keys`.
    """
    for key, value in mine.items():
        if key in state and state[key] != value:
            raise ValueError(
                f"the state was saved with {key}={state[key]!r}, this sampler has {value!r}; "
                f"resume with the data and selector settings of the saved run"
            )


__all__ = ["IterationRecord", "STATE_VERSION", "check_same_run", "every_rank", "own_state", "run_keys", "stamp"]
