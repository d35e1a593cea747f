"""Which rank of how many this process is: the one detection every part of batchsel uses.

:func:`detect_world` reads, in order, an initialized torch.distributed process group, MPI
under mpiexec, torchrun's variables, else one process (the communicator
:func:`~batchsel.distributed.comm.get_communicator` chooses), and checks explicit values
against it. It returns a :class:`~batchsel.core.world.World` (``rank``, ``size``: one
argument order everywhere) and the communicator between the ranks.
"""

from __future__ import annotations

import logging

from batchsel.core.communicator import Communicator
from batchsel.core.world import World
from batchsel.distributed.comm import get_communicator

logger = logging.getLogger(__name__)


def torch_dist_world() -> World | None:
    """The :class:`~batchsel.core.world.World` of torch.distributed's default group.

    Returns
    -------
    World or None
        None when no process group is initialized (or torch has no torch.distributed).

    Example
    -------
    >>> torch_dist_world() is None   # no process group in this process
    True
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return World(dist.get_rank(), dist.get_world_size())
    return None


def detect_world(
    rank: int | None = None, world_size: int | None = None, comm: Communicator | None = None
) -> tuple[World, Communicator | None]:
    """This process's world and the communicator between its ranks.

    Parameters
    ----------
    rank : int, optional
        This process's rank; None: detected.
    world_size : int, optional
        The number of ranks; None: detected.
    comm : Communicator, optional
        The communicator to use; None: :func:`~batchsel.distributed.comm.get_communicator`'s
        (torch.distributed if initialized, MPI under mpiexec, torchrun's variables, else
        one process).

    Returns
    -------
    tuple
        ``(world, comm)``. ``comm`` is None where explicit values are not this job's
        (ranks simulated in one process: tests, planning), with a ``World`` of the given
        values.

    Raises
    ------
    ValueError
        Explicit values contradict an initialized torch.distributed or the given
        communicator (they would train overlapping or missing batches without a word), or
        are out of range.

    Examples
    --------
    >>> detect_world()                      # one process
    (World(rank=0, size=1), SingleProcessComm(rank=0, size=1))
    >>> detect_world(rank=1, world_size=4)  # simulated: no communicator
    (World(rank=1, size=4), None)
    """
    given = None if rank is None or world_size is None else World(rank, world_size)  # checked once, here
    if comm is None:
        found = get_communicator("auto")
        if given is None or (found.rank, found.size) == (given.rank, given.size):
            comm = found
        elif torch_dist_world() is not None:
            raise ValueError(
                f"rank={rank}, world_size={world_size} given, but torch.distributed has rank "
                f"{found.rank} of {found.size}: leave them out (they are read from the process "
                f"group) or pass the group's"
            )
        else:
            logger.debug("rank %d / world %d given and not this job's %r: no communicator", rank, world_size, found)
            return given, None
    for name, value, actual in (("rank", rank, comm.rank), ("world_size", world_size, comm.size)):
        if value is not None and value != actual:
            raise ValueError(f"{name}={value} disagrees with the communicator's {actual} ({comm!r})")
    return World(comm.rank, comm.size), comm


__all__ = ["detect_world", "torch_dist_world"]
