"""A sampler's rank, world size and communicator: given, or detected in the environment
(:func:`~batchsel.distributed.world.detect_world`, the one detection).

Missing values are detected when first needed and again when an epoch starts while they
say one process: a sampler built before the framework creates the process group (in a
Lightning module's ``__init__``) must not settle on one process. A multi-rank answer is
final, and explicit values that contradict an initialized torch.distributed are refused.
"""

from __future__ import annotations

import logging
from typing import Callable

from batchsel.core.checks import check_int
from batchsel.core.world import World
from batchsel.distributed.comm import Communicator
from batchsel.distributed.world import detect_world, torch_dist_world

logger = logging.getLogger(__name__)


class RankWorld:
    """This process's :class:`~batchsel.core.world.World` and the communicator between its
    ranks, detected (:func:`~batchsel.distributed.world.detect_world`) when first needed.

    Parameters
    ----------
    rank : int, optional
        This process's rank; ``None``: detected.
    world_size : int, optional
        The number of ranks; ``None``: detected.
    comm : Communicator, optional
        The communicator; ``None``: the detected one when the given values match it, else
        none (ranks simulated in one process).
    check : callable, optional
        Called with ``(world_size, rank)`` on each detection (the selector's ``check_world``).

    Example
    -------
    >>> world = RankWorld(1, 4)          # ranks simulated in one process: no communicator
    >>> world.world, world.comm
    (World(rank=1, size=4), None)
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
        if rank is not None and world_size is not None:
            World(rank, world_size)  # the range, checked where the values are given
        self.given = (rank, world_size, comm)
        self.check = check
        self.lazy = comm is None and (rank is None or world_size is None)
        self.found: Communicator | None = None  # the communicator (None: local only)
        self.detected: World | None = None  # None until first needed
        if not self.lazy:
            self.resolve()

    @property
    def world(self) -> World:
        """This process's rank and the number of ranks (detected on first use when not given)."""
        if self.detected is None:
            self.resolve()
        assert self.detected is not None
        return self.detected

    @property
    def rank(self) -> int:
        """This process's rank."""
        return self.world.rank

    @property
    def world_size(self) -> int:
        """The number of ranks."""
        return self.world.size

    @property
    def comm(self) -> Communicator | None:
        """The communicator feedback and plan checks go through (None: local only)."""
        if self.detected is None:
            self.resolve()
        return self.found

    def refresh(self) -> None:
        """Detect again where a process group may exist by now: when an iteration starts.
        Not detected yet, lazily one process, or no communicator beside an initialized
        torch.distributed (which must agree with explicit values)."""
        if (
            self.detected is None
            or (self.lazy and self.detected.size == 1)
            or (self.found is None and torch_dist_world() is not None)
        ):
            self.resolve()

    def resolve(self) -> None:
        """Detect the values not given (``ValueError`` where given ones contradict them)."""
        world, comm = detect_world(*self.given)
        if self.detected is not None and world != self.detected:
            logger.info(
                "rank %d / world %d now (was %d / %d when first used): torch.distributed was set up after that",
                world.rank,
                world.size,
                self.detected.rank,
                self.detected.size,
            )
        if self.check is not None:
            self.check(world.size, world.rank)
        self.found, self.detected = comm, world


__all__ = ["RankWorld"]
