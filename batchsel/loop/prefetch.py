"""Selection ahead of the training step, for ``SelectionBatchSampler(prefetch=N)``.

:class:`BackgroundSelection` is all the sampler sees: ``run`` an iteration's batch source
(``N`` items ahead, in a daemon thread), ``observe`` feedback, ``state`` (the items
selected ahead and the feedback held back) and ``stop``. :class:`_SelectionThread` is the
thread and its queue of requests.

The batches depend on the order of the calls, never on thread timing: one selection at a
time touches the selector, feedback that comes while one may be running is held back and
handed to the selector, in call order, by the next selection, and the training thread
waits for the selections in flight before it hands out, saves or loads anything.

>>> seen = []
>>> background = BackgroundSelection(seen.extend)   # seen.extend: what the selector observes
>>> batches = background.run(iter([[0, 1], [2, 3], [4, 5]]), depth=1)
>>> next(batches)              # waited for; the selection of [2, 3] starts
[0, 1]
>>> background.observe(["feedback on [0, 1]"])
>>> seen                       # held back: that selection may be running
[]
>>> next(batches)              # starts the selection of [4, 5], which applies it first
[2, 3]
>>> list(batches), seen
([[4, 5]], ['feedback on [0, 1]'])
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import deque
from typing import Any, Callable, Iterator, TypeVar

import numpy as np

from batchsel.loop.warmup import compile_seconds

#: one :meth:`SelectionBatchSampler.observe` call: indices and losses / logits / embeddings
Observation = dict[str, "np.ndarray | None"]
Item = TypeVar("Item")

logger = logging.getLogger(__name__)

# what the thread hands back when the source has no item left
_END = object()
# a woken thread that has not started its request after this many seconds is starved; the
# training thread then runs up to _MAX_SKIP requests without waking it (see _SelectionThread)
_STARVED = 1e-4
_MAX_SKIP = 64
# selections that take less than this (a running mean) are run on the training thread when
# needed: handing one to the thread and back costs more (loss-rank's, at small N). So are
# selections dearer than the step they would run beside (docs/design/sampler.md)
_CHEAP = 1e-4


# environment variables that give the number of ranks on this node (torchrun, Open MPI, MPICH)
_LOCAL_SIZE_VARS = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")


def cores_of_this_rank() -> int:
    """The cores this process can count on: its CPU affinity if it is bound to some of the
    machine's cores (mpiexec binds each rank to one core by default), else the machine's
    cores shared by the ranks on this node (torchrun or mpiexec ``--bind-to none``).

    Returns
    -------
    int
        At least 1.

    Example
    -------
    >>> cores_of_this_rank() >= 1
    True
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity API (macOS): the machine's
        cores = os.cpu_count() or 1
    if cores < (os.cpu_count() or cores):
        return cores  # bound: these cores are this rank's
    local = next((int(v) for v in (os.environ.get(k) for k in _LOCAL_SIZE_VARS) if v and v.isdigit()), 1)
    return max(1, cores // max(1, local))


class _Request:
    """One selection: the observations to apply first, then the next item of the source."""

    __slots__ = ("observations", "result", "finished", "woken")

    def __init__(self, observations: list[Observation]) -> None:
        self.observations = observations
        self.woken = 0.0  # when the thread was woken for it (0: it was not)
        self.result: tuple[bool, Any] = (False, None)
        # held until the result is in: waiting for it is one C-level acquire, no GIL held
        self.finished = threading.Lock()
        self.finished.acquire()


class _SelectionThread:
    """A daemon thread that takes the next items of ``source`` while the training step runs.

    Requests are served one at a time, in the order made: each hands the selector the
    observations that came with it (``apply``), then takes the next item of ``source``.
    The selector is touched only by the request running (at most one), and the training
    thread waits for the results before it hands out, saves or loads anything. A request
    the thread has not started when its result is needed (no core was free for it: a
    loaded machine) runs on the training thread instead of waiting for the thread to be
    scheduled. A request made while none is in flight applies its observations at once, on
    the calling thread (the selector is idle: the same order of calls), so that the thread
    only selects.

    The hand-off uses C-level primitives only (a lock, a ``SimpleQueue`` of wake-up tokens,
    a lock per request released when its result is in), no Python-level
    ``threading.Condition`` code run under the GIL on either thread.

    A thread that was woken and has not started its request ``_STARVED`` seconds later gets
    no core or no GIL now (a loaded machine, or a training thread that holds the GIL). Its
    request runs here, and the next requests are left to the training thread too, 1, 3,
    7, ... up to ``_MAX_SKIP`` of them, before the thread is woken again (each request the
    thread serves in time halves the count). A thread kept waiting for the GIL takes it
    by force after the switch interval, and the training thread then waits until the OS
    schedules it, which can cost more than the selection itself with a small model.

    Selections that cost less than a hand-off (a running mean below ``_CHEAP``, 0.1 ms:
    loss-rank's), or more than the training thread's step between two batches (a running
    mean), are not handed to the thread: each runs on the training thread when its result
    is needed, until that changes.
    """

    def __init__(
        self, source: Iterator[Any], apply: Callable[[list[Observation]], None], threaded: bool = True
    ) -> None:
        self._source, self._apply = source, apply
        self._lock = threading.Lock()  # guards _queued and _busy
        self._queued: deque[_Request] = deque()  # made, not started, oldest first
        self._busy = False  # a request is running (on either thread)
        self._wake: queue.SimpleQueue[None] = queue.SimpleQueue()  # a token per request, and at close
        self._closed = False
        self._requests: deque[_Request] = deque()  # made and not collected, oldest first
        self._skip = 0  # requests still to make without waking the thread
        self._backoff = 0  # how many were skipped after the latest starved request
        self._ready: deque[tuple[bool, Any]] = deque()  # collected early (drain), not handed out
        self._cost = -1.0  # running mean of a selection's seconds (-1: none measured yet)
        self._step = -1.0  # running mean of the training thread's seconds between batches
        # the thread holds this object, never the iteration: dropping the iteration closes it.
        # Without one (threaded=False) every request runs on the training thread when its
        # result is needed: the same calls in the same order, so the same items.
        self.thread: threading.Thread | None = None
        if threaded:
            self.thread = threading.Thread(target=self._serve, name="batchsel-prefetch", daemon=True)
            self.thread.start()

    @property
    def in_flight(self) -> int:
        """Requests made and not collected."""
        return len(self._requests)

    def _inline(self) -> bool:
        """Whether the thread cannot gain: selections cost less than handing them over
        (``_CHEAP``), or more than the training step beside which the thread would run
        (a step mostly Python, a tiny model: the two would take turns with the GIL)."""
        return 0.0 <= self._cost < _CHEAP or 0.0 <= self._step < self._cost

    def stepped(self, seconds: float) -> None:
        """The training thread spent ``seconds`` between taking a batch and asking for the next."""
        self._step = seconds if self._step < 0 else 0.8 * self._step + 0.2 * seconds

    def _run(self, request: _Request) -> None:
        start = time.perf_counter()
        try:
            if request.observations:
                self._apply(request.observations)
            request.result = (True, next(self._source, _END))
        except BaseException as exc:  # noqa: BLE001 - raised in the training thread
            request.result = (False, exc)
        took = time.perf_counter() - start
        self._cost = took if self._cost < 0 else 0.8 * self._cost + 0.2 * took
        with self._lock:
            self._busy = False
            more = bool(self._queued)
        request.finished.release()
        if more and self.thread is not None and threading.current_thread() is not self.thread and not self._inline():
            self._wake.put(None)  # ran here: the thread serves the ones queued behind it

    def _serve(self) -> None:
        while True:
            self._wake.get()
            while True:
                with self._lock:
                    if self._closed:
                        return
                    # a token left from a request the training thread took over: what is
                    # queued now may be cheap enough to stay there
                    if self._busy or not self._queued or self._inline():
                        break
                    request = self._queued.popleft()
                    self._busy = True
                self._run(request)

    def request(self, observations: list[Observation]) -> None:
        """Start selecting the next item, after applying ``observations``."""
        request = _Request(observations)
        self._requests.append(request)
        if len(self._requests) == 1 and observations:
            # nothing in flight: the selector is idle, the feedback goes in now, here
            request.observations = []
            try:
                self._apply(observations)
            except BaseException as exc:  # noqa: BLE001 - raised with this request's result
                request.result = (False, exc)
                request.finished.release()
                return
        with self._lock:
            self._queued.append(request)
        if self.thread is None or self._inline():
            pass  # no thread, or cheaper than a hand-off: the training thread runs it when needed
        elif self._skip:
            self._skip -= 1  # the thread was starved lately: the training thread will run it
        else:
            request.woken = time.perf_counter()
            self._wake.put(None)

    def _collect(self) -> tuple[bool, Any]:
        # the oldest request's result: finished, running (wait), or not started (run it here)
        request = self._requests[0]
        with self._lock:
            # not started means nothing runs: an earlier request would still be in _requests
            steal = bool(self._queued) and self._queued[0] is request
            if steal:
                self._queued.popleft()
                self._busy = True
        if steal:
            if request.woken and time.perf_counter() - request.woken > _STARVED:
                self._backoff = min(2 * self._backoff + 1, _MAX_SKIP)
                self._skip = self._backoff
            self._run(request)
        else:
            self._backoff >>= 1  # served in time: wake it more often again
        request.finished.acquire()
        self._requests.popleft()
        return request.result

    def drain(self) -> list[tuple[bool, Any]]:
        """Wait until no request is in flight; the results stay queued for :meth:`result`.
        Returns every result not handed out yet, oldest first."""
        while self._requests:
            self._ready.append(self._collect())
        return list(self._ready)

    def result(self) -> Any:
        """The oldest request's item (waiting for it); its exception is raised here."""
        if not self._ready and not self._requests:
            return _END  # closed, or nothing asked for
        ok, value = self._ready.popleft() if self._ready else self._collect()
        if not ok:
            raise value
        return value

    def close(self) -> None:
        """Finish the requests made (the selector must be idle, and in the state the order
        of calls gives, once this returns) and end the thread. Idempotent."""
        if self._closed:
            return
        on_thread = self.thread is not None and threading.current_thread() is self.thread
        if not on_thread:
            self.drain()
            self._ready.clear()
        # else finalized by the garbage collector on the thread itself: it cannot wait for itself
        with self._lock:
            self._closed = True
        self._wake.put(None)
        if self.thread is not None and not on_thread:
            self.thread.join()


class SelectionClock:
    """Seconds of selection (drawing batches, handing feedback to the selector), on either
    thread, and of numba compilation inside it (counted apart, not as selection).

    Example
    -------
    >>> clock = SelectionClock()
    >>> clock.run(sum, [1, 2]), clock.select >= 0.0
    (3, True)
    """

    def __init__(self) -> None:
        self.select = 0.0
        self.compile = 0.0

    def run(self, fn: Callable[..., Item], *args: Any, **kwargs: Any) -> Item:
        """``fn(*args, **kwargs)``, its seconds counted.

        Parameters
        ----------
        fn : callable
            The selection work.
        *args, **kwargs : Any
            Its arguments.

        Returns
        -------
        Any
            What ``fn`` returns.
        """
        compiled, start = compile_seconds(), time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            took, compiled = time.perf_counter() - start, compile_seconds() - compiled
            self.compile += compiled
            self.select += took - compiled


class BackgroundSelection:
    """A sampler's path for feedback to its selector, and its iterations' selection ahead.

    ``apply`` hands observations to the selector. Outside an iteration with ``depth > 0``
    :meth:`observe` applies at once; during one, feedback is held back (:attr:`deferred`)
    and each selection the iteration starts first applies what was held back until then.
    :attr:`clock` adds up the time of both.

    Parameters
    ----------
    apply : callable
        ``apply(observations)`` hands a list of observations to the selector.
    deferred : list of Observation, optional
        Feedback held back already (a saved or pickled state's).
    per_iteration : bool, default False
        Hold all feedback back until the next iteration starts or this one runs out.

    See Also
    --------
    cores_of_this_rank : whether a thread is started.
    """

    def __init__(
        self,
        apply: Callable[[list[Observation]], None],
        deferred: list[Observation] | None = None,
        *,
        per_iteration: bool = False,
    ) -> None:
        self.clock = SelectionClock()
        #: hold all feedback back until the next iteration starts or this one runs out (a
        #: selector that reads it only when it plans an epoch: one hand-over per epoch)
        self.per_iteration = per_iteration
        self._feed = apply
        #: feedback not handed to the selector yet, oldest first
        self.deferred: list[Observation] = [] if deferred is None else deferred
        self._thread: _SelectionThread | None = None  # the running iteration's

    def __getstate__(self) -> dict[str, Any]:
        # a copy has no thread (a thread neither copies nor pickles): its iteration starts its own
        return {**self.__dict__, "_thread": None}

    def applies_now(self) -> bool:
        """Whether feedback given now goes to the selector at once: no selection running,
        not held back for the next iteration, nothing held back before it."""
        return self._thread is None and not self.per_iteration and not self.deferred

    def _apply(self, observations: list[Observation]) -> None:
        """Hand ``observations`` to the selector, timed by :attr:`clock`."""
        self.clock.run(self._feed, observations)

    def run(self, source: Iterator[Item], depth: int) -> Iterator[Item]:
        """``source``'s items. With ``depth > 0`` each is selected in a daemon thread
        ``depth`` items ahead: handing one out starts the selection of the one ``depth``
        places later, with the feedback observed until then. The thread ends when the items
        do, when this iterator is closed or garbage collected, or at :meth:`stop`; an
        exception in it is raised here, at the item it was selecting. A process with fewer
        than two cores of its own (:func:`cores_of_this_rank`) starts no thread: each
        selection runs on the calling thread when its item is needed, with the same
        feedback, so the items are the same.

        Parameters
        ----------
        source : iterator
            The iteration's items, selected when taken.
        depth : int
            How many items are selected ahead.

        Returns
        -------
        iterator
            ``source``'s items, in order.
        """
        source = self._timed(source)
        if not depth:
            self._flush()  # feedback held back by a prefetch run (or its saved state)
            yield from source
            self._flush()  # ran out: the epoch's feedback is in before anyone reads the selector
            return
        cores = cores_of_this_rank()
        if cores < 2:  # a thread would take turns with the training step on one core: no gain
            logger.info("prefetch=%d on %d core for this process: selecting ahead on the training thread", depth, cores)
        worker = self._thread = _SelectionThread(source, self._apply, threaded=cores >= 2)
        try:
            for _ in range(depth):  # the first one is waited for at once
                worker.request(self._take())
            while True:
                item = worker.result()
                if item is _END:
                    return
                worker.request(self._take())
                handed = time.perf_counter()
                yield item
                worker.stepped(time.perf_counter() - handed)
        finally:
            worker.close()
            if self._thread is worker:
                self._thread = None
                if threading.current_thread() is not worker.thread:
                    self._flush()  # nothing in flight: the last steps' feedback goes in now
                # else garbage-collected in the middle of a selection on the thread: the
                # feedback waits for the next observe or iteration, not inside that selection

    def observe(self, observations: list[Observation]) -> None:
        """Hand ``observations`` to the selector now, after what was held back; while an
        iteration with ``depth > 0`` runs, when its next selection starts; with
        ``per_iteration``, when the next iteration starts or this one runs out.

        Parameters
        ----------
        observations : list of Observation
            Feedback, in call order.
        """
        if self._thread is not None or self.per_iteration:  # a selection may be running, or held per epoch
            self.deferred.extend(observations)
            return
        self._flush()
        self._apply(observations)

    def apply_held_back(self) -> None:
        """Hand the feedback held back to the selector now, unless a selection thread is
        running (its next selection takes it)."""
        if self._thread is None:
            self._flush()

    def state(self) -> tuple[list[Any], list[Observation]]:
        """Wait for the selections in flight (the selector is idle afterwards). Returns the
        items they selected and :meth:`run` has not handed out yet, oldest first, and the
        feedback held back.

        Returns
        -------
        tuple of (list, list of Observation)
            The items selected ahead, and the feedback held back.
        """
        ahead = []
        if self._thread is not None:
            for ok, item in self._thread.drain():
                if not ok:
                    raise RuntimeError("selecting a batch ahead failed; the state would not be consistent") from item
                if item is not _END:
                    ahead.append(item)
        return ahead, list(self.deferred)

    def stop(self, flush: bool = True) -> None:
        """End the running iteration's thread after its selections in flight (that
        iteration then ends); with ``flush``, hand the selector the feedback held back.

        Parameters
        ----------
        flush : bool, default True
            Hand the feedback held back to the selector afterwards.
        """
        worker, self._thread = self._thread, None
        if worker is not None:
            worker.close()
            if flush:
                self._flush()

    def _timed(self, source: Iterator[Item]) -> Iterator[Item]:
        while True:
            item = self.clock.run(next, source, _END)
            if item is _END:
                return
            yield item

    def _take(self) -> list[Observation]:
        taken, self.deferred = self.deferred, []
        return taken

    def _flush(self) -> None:
        if self.deferred:
            self._apply(self._take())


__all__ = ["BackgroundSelection", "Observation", "SelectionClock", "cores_of_this_rank"]
