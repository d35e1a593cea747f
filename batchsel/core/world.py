"""The ranks a run is split over: :class:`World`, one process's ``(rank, world size)``,
checked once where it is made and trusted by everything it is handed to."""

from __future__ import annotations

from dataclasses import dataclass

from batchsel.core.checks import check_int


@dataclass(frozen=True)
class World:
    """One rank of ``size`` ranks, as ``torch.utils.data.DistributedSampler`` takes them
    (``rank``, ``num_replicas``): checked once, when made, then passed on as it is.

    Parameters
    ----------
    rank : int, default 0
        This process's rank, in ``[0, size)``.
    size : int, default 1
        The number of ranks (``world_size``), at least 1.

    Raises
    ------
    TypeError
        ``rank`` or ``size`` is not an integer.
    ValueError
        ``size`` is below 1 or ``rank`` outside ``[0, size)``.

    See Also
    --------
    batchsel.selectors.Selector.world : a World checked to fit a selector too.

    Examples
    --------
    >>> World(1, 4)
    World(rank=1, size=4)
    >>> World(4, 4)
    Traceback (most recent call last):
    ...
    ValueError: rank must be in [0, 4), got 4
    """

    rank: int = 0
    size: int = 1

    def __post_init__(self) -> None:
        size = check_int(self.size, "world_size", minimum=1)
        rank = check_int(self.rank, "rank", minimum=0)
        if rank >= size:
            raise ValueError(f"rank must be in [0, {size}), got {rank}")
        object.__setattr__(self, "size", size)  # numpy integers become ints
        object.__setattr__(self, "rank", rank)


__all__ = ["World"]
