"""The communicator contract: the collective operations batchsel needs across ranks.

Core code that talks across ranks (:func:`batchsel.maximize` with ``optimizer="greedi"``,
:func:`batchsel.greedi_facility_location`) and the samplers of
:mod:`batchsel.integrations` take any object with these members, checked structurally:
``isinstance(obj, Communicator)`` is true for any object that has them, whether or not it
derives from this class. The implementations over one process, mpi4py and
torch.distributed live in :mod:`batchsel.distributed.comm` and derive from it, which
gives them the default :meth:`Communicator.abort`.

Examples
--------
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

    Attributes
    ----------
    rank : int
        This process's rank, in ``[0, size)``.
    size : int
        The number of ranks, at least 1.

    See Also
    --------
    check_ranks_agree : fail on every rank at once when the ranks' data differ.

    Examples
    --------
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
        """Send ``root``'s object to every rank (collective: every rank calls it).

        Parameters
        ----------
        obj : Any
            The object to send, picklable; read on ``root`` only (the other ranks
            usually pass ``None``).
        root : int, default 0
            The rank whose ``obj`` is sent, in ``[0, size)``.

        Returns
        -------
        Any
            ``root``'s ``obj`` on every rank (on ``root`` itself, ``obj`` or an equal copy).
        """
        raise NotImplementedError

    def allgather(self, obj: Any) -> list:
        """Every rank's object on every rank (collective: every rank calls it).

        Parameters
        ----------
        obj : Any
            This rank's object, picklable (numpy arrays may travel as raw bytes).

        Returns
        -------
        list
            On every rank, the ``size`` objects by rank: item ``r`` is rank ``r``'s ``obj``.
        """
        raise NotImplementedError

    def gather(self, obj: Any, root: int = 0) -> list | None:
        """Every rank's object on ``root`` only (collective: every rank calls it).

        Parameters
        ----------
        obj : Any
            This rank's object, picklable.
        root : int, default 0
            The rank that receives the objects, in ``[0, size)``.

        Returns
        -------
        list or None
            On ``root``, the ``size`` objects by rank; ``None`` on every other rank, which
            so never holds the others' objects.
        """
        raise NotImplementedError

    def allreduce(self, array: Any, op: str = "sum") -> np.ndarray:
        """Reduce an array elementwise over the ranks (collective: every rank calls it).

        Parameters
        ----------
        array : array-like
            This rank's array; every rank passes the same shape and dtype. It is not
            modified.
        op : {"sum", "max", "min", "prod"}, default "sum"
            The elementwise reduction.

        Returns
        -------
        numpy.ndarray
            A new array, the same on every rank: ``op`` over all ranks' arrays.
        """
        raise NotImplementedError

    def barrier(self) -> None:
        """Wait for every rank (collective: every rank calls it).

        Returns
        -------
        None
            On every rank, once every rank has called it.
        """
        raise NotImplementedError

    def abort(self, errorcode: int = 1) -> None:
        """End the whole job now, from one rank: the only member not called by every rank.

        A rank that failed calls it so that the others do not hang in a collective. This
        default, for classes that derive from :class:`Communicator`, flushes the logs and
        stderr and ends this process only; the mpi4py communicator ends every rank
        (``MPI_Abort``).

        Parameters
        ----------
        errorcode : int, default 1
            The exit status of the process (or of the job); 1 by convention for a failure.

        Returns
        -------
        None
            It does not return: the process ends.
        """
        # flush what the failing rank said before the process disappears
        logging.shutdown()
        sys.stderr.flush()
        os._exit(errorcode)


def check_ranks_agree(comm: Communicator, what: str, **values: Any) -> None:
    """Collective: raise the same ``RuntimeError`` on every rank unless every rank passes
    equal ``values`` (small, picklable: shapes, dtypes, digests).

    Multi-rank entry points call it before any work, so ranks holding different data fail
    at once, saying which rank holds what, instead of crashing, hanging or returning
    different results. Every rank calls it (it gathers the values from all ranks); with
    one rank it returns at once.

    Parameters
    ----------
    comm : Communicator
        The ranks to compare.
    what : str
        What the values describe, for the message (e.g. ``"the embeddings"``).
    **values : Any
        The values every rank must agree on, compared with ``==`` in keyword order.

    Raises
    ------
    RuntimeError
        On every rank, when any two ranks passed different values; the message lists
        every rank's values.

    Examples
    --------
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
