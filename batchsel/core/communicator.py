"""The communicator contract: the collective operations batchsel needs across ranks.

Core code that talks across ranks (:func:`batchsel.maximize` with ``optimizer="greedi"``,
:func:`batchsel.greedi_facility_location`) and the samplers of
:mod:`batchsel.integrations` take any object with these members, checked structurally:
``isinstance(obj, Communicator)`` is true for any object that has them, whether or not it
derives from this class. The implementations over one process, mpi4py and
torch.distributed live in :mod:`batchsel.distributed.comm` and derive from it, which
gives them the default :meth:`Communicator.abort`.

Example
-------
>>> class Solo:
...     rank, size = 0, 1
...     def broadcast(self, obj, root=0): return obj
...     def allgather(self, obj): return [obj]
...     def gather(self, obj, root=0): return [obj]
...     def allreduce(self, array, op="sum"): return np.array(array, copy=True)
...     def barrier(self): pass
...     def abort(self, errorcode=1): raise SystemExit(errorcode)
>>> isinstance(Solo(), Communicator)
True
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["Communicator", "check_ranks_agree"]


@runtime_checkable
class Communicator(Protocol):
    """The collective operations batchsel needs. Every method is collective: all ranks
    call it, in the same order.

    - ``rank``, ``size``: this process's rank and the number of ranks;
    - ``broadcast(obj, root=0)``: root's ``obj`` on every rank;
    - ``allgather(obj)``: the list of every rank's ``obj``, by rank (numpy arrays may
      travel as raw bytes; any picklable object works);
    - ``gather(obj, root=0)``: on ``root``, the list of every rank's ``obj``, by rank;
      ``None`` on every other rank, which so never holds the others' objects (e.g. a
      distributed graph assembled only where it is used);
    - ``allreduce(array, op="sum")``: a new array reduced elementwise over the ranks,
      ``op`` one of ``"sum"``, ``"max"``, ``"min"``, ``"prod"``;
    - ``barrier()``: returns once every rank has called it;
    - ``abort(errorcode=1)``: end the whole job now (one rank failed; the others must not
      hang in a collective). The default, for classes that derive from this one, ends
      this process only.

    Example
    -------
    >>> from batchsel.integrations import SingleProcessComm
    >>> comm = SingleProcessComm()
    >>> isinstance(comm, Communicator), comm.allreduce(np.array([1, 2]), op="max").tolist()
    (True, [1, 2])
    >>> comm.gather("mine", root=0)
    ['mine']
    """

    rank: int
    size: int

    def broadcast(self, obj: Any, root: int = 0) -> Any:
        raise NotImplementedError

    def allgather(self, obj: Any) -> list:
        raise NotImplementedError

    def gather(self, obj: Any, root: int = 0) -> list | None:
        raise NotImplementedError

    def allreduce(self, array: Any, op: str = "sum") -> np.ndarray:
        raise NotImplementedError

    def barrier(self) -> None:
        raise NotImplementedError

    def abort(self, errorcode: int = 1) -> None:
        # flush what the failing rank said before the process disappears
        logging.shutdown()
        sys.stderr.flush()
        os._exit(errorcode)


def check_ranks_agree(comm: Communicator, what: str, **values: Any) -> None:
    """Collective: raise the same ``RuntimeError`` on every rank unless every rank passes
    equal ``values`` (small, picklable: shapes, dtypes, digests). Multi-rank entry points
    call it before any work, so ranks holding different data fail at once, saying which
    rank holds what, instead of crashing, hanging or returning different results.

    >>> from batchsel.integrations import SingleProcessComm
    >>> check_ranks_agree(SingleProcessComm(), "the embeddings", shape=(10, 4), dtype="float32")
    """
    if int(comm.size) == 1:
        return
    every = comm.allgather(tuple(values.items()))
    if all(v == every[0] for v in every):
        return
    held = "; ".join(f"rank {r}: " + ", ".join(f"{k}={v}" for k, v in items) for r, items in enumerate(every))
    raise RuntimeError(f"the ranks disagree on {what} ({held}); every rank must pass the same data and settings")
