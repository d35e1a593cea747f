"""A sampler's rank, world size and communicator: given, or looked up in the environment.

Missing values are looked up when first needed and again when an epoch starts while they
say one process: a sampler built before the framework creates the process group (in a
Lightning module's ``__init__``) must not settle on one process. A multi-rank answer is
final, and explicit values that contradict an initialized torch.distributed are refused.
"""

from __future__ import annotations

import logging
from typing import Callable

from batchsel.core.checks import check_int
from batchsel.distributed.comm import Communicator, get_communicator

logger = logging.getLogger(__name__)


def torch_dist_world() -> tuple[int, int] | None:
    """(rank, world size) of torch.distributed's default group.

    Returns
    -------
    tuple of int or None
        ``(rank, world_size)``, or None when no process group is initialized.

    Example
    -------
    >>> torch_dist_world() is None   # no process group in this process
    True
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


class RankWorld:
    """This process's rank, the number of ranks and the communicator between them.

    Parameters
    ----------
    rank : int, optional
        This process's rank; ``None``: looked up.
    world_size : int, optional
        The number of ranks; ``None``: looked up.
    comm : Communicator, optional
        The communicator; ``None``: :func:`~batchsel.distributed.comm.get_communicator`'s
        when the given values match it, else none (ranks simulated in one process).
    check : callable, optional
        Called with ``(world_size, rank)`` on each lookup (the selector's ``check_world``).

    Example
    -------
    >>> world = RankWorld(1, 4)          # ranks simulated in one process: no communicator
    >>> world.rank, world.world_size, world.comm
    (1, 4, None)
    """

    def __init__(
        self,
        rank: int | None = None,
        world_size: int | None = None,
        comm: Communicator | None = None,
        check: Callable[[int, int], None] | None = None,
    ) -> None:
        if rank is not None:
            rank = check_int(rank, "rank", minimum=0)
        if world_size is not None:
            world_size = check_int(world_size, "world_size", minimum=1)
        self.given = (rank, world_size, comm)
        self.check = check
        self.lazy = comm is None and (rank is None or world_size is None)
        self.found: Communicator | None = None  # the communicator (None: local only)
        self.found_rank = self.found_size = -1
        self.resolved = False
        if not self.lazy:
            self.resolve()

    @property
    def rank(self) -> int:
        """This process's rank (looked up on first use when not given)."""
        if not self.resolved:
            self.resolve()
        return self.found_rank

    @property
    def world_size(self) -> int:
        """The number of ranks (looked up on first use when not given)."""
        if not self.resolved:
            self.resolve()
        return self.found_size

    @property
    def comm(self) -> Communicator | None:
        """The communicator feedback and plan checks go through (None: local only)."""
        if not self.resolved:
            self.resolve()
        return self.found

    def refresh(self) -> None:
        """Look the values up again where a process group may exist by now: when an
        iteration starts. Unresolved, lazily one process, or no communicator beside an
        initialized torch.distributed (which must agree with explicit values)."""
        if (
            not self.resolved
            or (self.lazy and self.found_size == 1)
            or (self.found is None and torch_dist_world() is not None)
        ):
            self.resolve()

    def resolve(self) -> None:
        """Look up the values not given (``ValueError`` where given ones contradict them)."""
        comm, rank, world_size = self.lookup(*self.given)
        if self.resolved and (rank, world_size) != (self.found_rank, self.found_size):
            logger.info(
                "rank %d / world %d now (was %d / %d when first used): torch.distributed was set up after that",
                rank,
                world_size,
                self.found_rank,
                self.found_size,
            )
        if self.check is not None:
            self.check(world_size, rank)
        self.found, self.found_rank, self.found_size, self.resolved = comm, rank, world_size, True

    @staticmethod
    def lookup(
        rank: int | None, world_size: int | None, comm: Communicator | None
    ) -> tuple[Communicator | None, int, int]:
        """The communicator, rank and world size for the given values.

        Parameters
        ----------
        rank : int or None
            The given rank.
        world_size : int or None
            The given world size.
        comm : Communicator or None
            The given communicator.

        Returns
        -------
        tuple
            ``(comm, rank, world_size)``; ``comm`` is None where explicit values are not
            this job's (ranks simulated in one process).
        """
        if comm is None:
            found = get_communicator("auto")
            if rank is None or world_size is None or (found.rank, found.size) == (rank, world_size):
                comm = found
            elif torch_dist_world() is not None:
                # explicit values that contradict the process group would train overlapping
                # or missing batches without a word
                raise ValueError(
                    f"rank={rank}, world_size={world_size} given, but torch.distributed has rank "
                    f"{found.rank} of {found.size}: leave them out (they are read from the process "
                    f"group) or pass the group's"
                )
            else:  # simulating ranks in one process (tests, planning): no communicator
                logger.debug("rank %d / world %d given and not this job's %r: no communicator", rank, world_size, found)
                return None, rank, world_size
        for name, given, actual in (("rank", rank, comm.rank), ("world_size", world_size, comm.size)):
            if given is not None and given != actual:
                raise ValueError(f"{name}={given} disagrees with the communicator's {actual} ({comm!r})")
        return comm, comm.rank, comm.size


__all__ = ["RankWorld", "torch_dist_world"]
