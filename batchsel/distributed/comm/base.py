"""What the communicators share besides the :class:`~batchsel.core.communicator.Communicator`
contract: the checks of a collective's ``root`` and ``op``, a readable repr, and
:meth:`CommBase.wait_for_ranks`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from batchsel.core.communicator import Communicator

REDUCE_OPS = ("sum", "max", "min", "prod")


def check_op(op: str) -> str:
    """``op`` if it is one of :data:`REDUCE_OPS`, else ``ValueError``.

    Examples
    --------
    >>> check_op("max")
    'max'
    """
    if op not in REDUCE_OPS:
        raise ValueError(f"op must be one of {REDUCE_OPS}, got {op!r}")
    return op


def check_root(root: Any, size: int) -> int:
    """``root`` as an int rank in ``[0, size)``: ``TypeError`` unless an integer,
    ``ValueError`` out of range.

    Examples
    --------
    >>> check_root(np.int64(1), 2)
    1
    """
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)):
        raise TypeError(f"root must be an integer, got {root!r}")
    if not 0 <= root < size:
        raise ValueError(f"root must be in [0, {size}), got {root}")
    return int(root)


class CommBase(Communicator):
    """The base of batchsel's communicators: the :class:`Communicator` contract (and its
    default ``abort``), a readable repr, and :meth:`wait_for_ranks`.

    Examples
    --------
    >>> from batchsel.distributed.comm import SingleProcessComm
    >>> SingleProcessComm()
    SingleProcessComm(rank=0, size=1)
    """

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rank={self.rank}, size={self.size})"

    def wait_for_ranks(self, what: str, timeout: float | None) -> None:
        """Collective: return once every rank has called it, or raise ``RuntimeError``
        naming ``what`` (the collective about to run) after ``timeout`` seconds (``None``:
        wait as long as it takes). Call it before a collective that a rank may never
        reach (a rank that stopped early), so the job ends instead of hanging. Here: no
        wait of its own (one process; over torch.distributed the process group's own
        ``timeout`` bounds every collective)."""


__all__ = ["REDUCE_OPS", "check_op", "check_root", "CommBase"]
