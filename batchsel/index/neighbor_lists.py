"""The neighbour lists faiss returns, checked and cleaned: no missing neighbour in an
exact search, finite distances, and each point's own match removed.

Shared by :meth:`EmbeddingIndex.neighbors <batchsel.index.EmbeddingIndex.neighbors>` and
:meth:`ShardedIndex.neighbors <batchsel.distributed.sharded.ShardedIndex.neighbors>` (a
shard's rows, with global indices).
"""

from __future__ import annotations

import numpy as np


def check_found(D: np.ndarray, I: np.ndarray, exact: bool, num_examples: int) -> None:
    """``ValueError`` when the search went wrong: an exact search that missed neighbours
    (its distances were NaN), or distances that are not finite (float32 overflow).

    Parameters
    ----------
    D, I : numpy.ndarray
        The search's distances and indices (``-1``: no neighbour).
    exact : bool
        The index is exact (``kind="flat"``): it finds every neighbour unless distances
        were NaN.
    num_examples : int
        The number of indexed points, for the message.

    Examples
    --------
    >>> check_found(np.array([[0.0, 1.0]]), np.array([[0, 1]]), True, 2)
    >>> check_found(np.array([[0.0, np.inf]]), np.array([[0, 1]]), True, 2)
    Traceback (most recent call last):
    ...
    ValueError: k-NN distances are not finite (the embeddings overflow float32); rescale the embeddings (e.g. divide them by their standard deviation)
    """
    missing = I < 0
    if exact and missing.any():
        # exact search finds k neighbours of every point unless distances were NaN
        raise ValueError(
            f"exact search found no neighbour for {int(missing.any(axis=1).sum())} of "
            f"{num_examples} points: the distances are not finite; check and rescale "
            f"the embeddings"
        )
    if not np.isfinite(D[~missing]).all():
        raise ValueError(
            "k-NN distances are not finite (the embeddings overflow float32); rescale the "
            "embeddings (e.g. divide them by their standard deviation)"
        )


def without_self(D: np.ndarray, I: np.ndarray, first_row: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``k`` neighbours of every row that are not the row itself (also when
    duplicates made faiss list another point at distance 0 first).

    Parameters
    ----------
    D, I : numpy.ndarray
        ``rows x (k + 1)`` neighbour lists of rows ``first_row ..`` (global indices).
    first_row : int
        The global index of the first row (a shard's offset).
    k : int
        Neighbours to keep per row.

    Returns
    -------
    tuple[numpy.ndarray, numpy.ndarray]
        ``(D, I)``, ``rows x k``, in their order.

    Examples
    --------
    >>> D, I = np.array([[0.0, 0.0, 2.0]]), np.array([[5, 3, 4]])
    >>> without_self(D, I, 3, 2)[1].tolist()
    [[5, 4]]
    """
    rows = np.arange(first_row, first_row + I.shape[0])[:, None]
    is_self = I == rows
    # Keep the first k columns that are not the point itself.
    keep = (np.cumsum(~is_self, axis=1) <= k) & ~is_self
    order = np.argsort(~keep, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(D, order, axis=1), np.take_along_axis(I, order, axis=1)


__all__ = ["check_found", "without_self"]
