"""The communicator over torch.distributed (:class:`TorchDistComm`), and the end of its
process group at exit.

torch is imported only when a :class:`TorchDistComm` is built.
"""

from __future__ import annotations

import atexit
import datetime
import gc
import logging
import os
import sys
from typing import Any

import numpy as np

from batchsel.distributed.comm.base import CommBase, check_op, check_root
from batchsel.distributed.comm.launch import TORCHRUN_ENV_VARS
from batchsel.distributed.comm.wire import from_payload, gather_payload

# the logger of batchsel.distributed.comm, as before it became a package
logger = logging.getLogger("batchsel.distributed.comm")

# TorchDistComm.allgather's message: a head of HEADER_LEN + 1 int64 words (the array
# header, then the byte count) padded to 144 bytes so that the bytes after it stay
# 16-byte aligned, then the payload padded to the group's capacity (a power of two)
_ALIGN = 16
_MESSAGE_HEAD = 144
_MIN_CAPACITY = 1 << 12
_MAX_CAPACITY = 1 << 20
_GROUP_STATE: dict = {}


def destroy_process_group() -> None:
    """At exit, before the interpreter finalizes: a gloo group still alive then (DDP keeps
    it referenced from garbage cycles) lets its worker thread take the GIL during
    finalization and abort the process (seen as signal 6 at the end of good runs)."""
    import torch.distributed as dist

    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()


def torch_dist_initialized() -> bool:
    """True when torch.distributed has a default process group (without importing torch
    when the program never did)."""
    dist = sys.modules.get("torch.distributed")
    return bool(dist is not None and dist.is_available() and dist.is_initialized())


class TorchDistComm(CommBase):
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
        root = check_root(root, self.size)
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
        header, payload = gather_payload(obj)
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
        return [from_payload(h, body[: h[-1]]) for h, body in zip(headers, bodies)]

    def gather(self, obj: Any, root: int = 0) -> list | None:
        """Every rank's ``obj`` on ``root`` (by rank), ``None`` elsewhere
        (``torch.distributed.gather_object``: pickled; the root receives ``size`` buffers
        as large as the largest object)."""
        self._ensure_init()
        root = check_root(root, self.size)
        out: list | None = [None] * self.size if self.rank == root else None
        self._dist.gather_object(obj, out, dst=self._global_rank(root), group=self.group)
        return out

    def scatter(self, objs: Any, root: int = 0) -> Any:
        """Rank r gets ``objs[r]`` of the root's list (``scatter_object_list``: pickled)."""
        self._ensure_init()
        root = check_root(root, self.size)
        out: list = [None]
        self._dist.scatter_object_list(
            out, objs if self.rank == root else None, src=self._global_rank(root), group=self.group
        )
        return out[0]

    def allreduce(self, array: Any, op: str = "sum") -> np.ndarray:
        import torch

        op = check_op(op)
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

    def wait_for_ranks(self, what: str, timeout: float | None) -> None:
        """Return once every rank has called it, or raise ``RuntimeError`` naming ``what``
        and the ranks that did not arrive after ``timeout`` seconds.

        Only a bound tighter than the process group's own (``timeout`` below this
        communicator's, torch's 30 minutes by default) costs anything: gloo's
        ``monitored_barrier``, which names the missing ranks, one message per rank. A
        looser or no bound is the process group's, which every collective has anyway;
        backends without a monitored barrier (NCCL) keep that one too.

        Parameters
        ----------
        what : str
            The collective about to run, named in the error.
        timeout : float or None
            Seconds to wait; None: as long as the process group waits.
        """
        if timeout is None or not timeout < self.timeout or self.size == 1:
            return
        self._ensure_init()
        if self._dist.get_backend(self.group) != "gloo":
            return
        try:
            self._dist.monitored_barrier(
                group=self.group, timeout=datetime.timedelta(seconds=timeout), wait_all_ranks=True
            )
        except RuntimeError as exc:
            raise RuntimeError(
                f"{what}: rank {self.rank} waited {timeout:g} s for the other ranks, which did not arrive "
                f"(a rank stopped, or does not make this call: every rank must) - {exc}"
            ) from exc


__all__ = ["TorchDistComm", "destroy_process_group", "torch_dist_initialized"]
