"""The communicator of a job with one process."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchsel.distributed.comm.base import CommBase, check_op, check_root


class SingleProcessComm(CommBase):
    """The communicator of a job with one process: every collective is the identity.

    >>> comm = SingleProcessComm()
    >>> comm.rank, comm.size, comm.allgather("x"), comm.allreduce([1, 2]).tolist()
    (0, 1, ['x'], [1, 2])
    """

    rank = 0
    size = 1

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        check_root(root, 1)
        return obj

    def allgather(self, obj: Any) -> list:
        return [obj]

    def gather(self, obj: Any, root: int = 0) -> list | None:
        check_root(root, 1)
        return [obj]

    def allreduce(self, array: Any, op: str = "sum") -> np.ndarray:
        check_op(op)
        return np.array(array, copy=True)

    def scatter(self, objs: Any, root: int = 0) -> Any:
        """Rank r gets ``objs[r]`` of the root's list (not part of the Communicator protocol:
        callers fall back to ``broadcast`` where it is missing)."""
        check_root(root, 1)
        return objs[0]

    def barrier(self) -> None:
        """Nothing to wait for with one process."""


__all__ = ["SingleProcessComm"]
