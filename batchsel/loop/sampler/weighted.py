"""The weighted side of the sampler: a weighted plan's batch, and a dataset wrapper whose
items carry the weight.

``SelectionBatchSampler(..., weighted=True)`` yields :class:`WeightedBatch` objects;
``DataLoader(WeightedDataset(dataset), batch_sampler=sampler)`` turns their
``(index, weight)`` keys into ``(x, y, w)`` items.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Iterator, overload

import numpy as np

from batchsel.core.checks import tensor_to_numpy


class WeightedBatch(Sequence[tuple[int, float]]):
    """A batch of a weighted sampler (``SelectionBatchSampler(..., weighted=True)``): the
    ``(index, weight)`` pairs a DataLoader hands to :class:`WeightedDataset`, and the same
    as two arrays, :attr:`indices` (int64) and :attr:`weights` (float32), for a loop that
    indexes tensors itself (``torch.from_numpy(batch.indices)``). The arrays are the
    plan's own (not to be written to): no list of pairs is built unless the batch is
    iterated (on a sub-millisecond step that list and its conversion back cost as much as
    the sampler's whole work).

    Parameters
    ----------
    indices : numpy.ndarray
        The batch's example indices (int64).
    weights : numpy.ndarray
        One weight per index (float32); ``ValueError`` when the lengths differ.

    See Also
    --------
    WeightedDataset : the dataset wrapper that takes these pairs as keys.

    Example
    -------
    >>> batch = WeightedBatch(np.array([3, 5]), np.array([1.0, 2.0], np.float32))
    >>> list(batch), batch[1], batch.indices.tolist(), batch == [(3, 1.0), (5, 2.0)]
    ([(3, 1.0), (5, 2.0)], (5, 2.0), [3, 5], True)
    """

    __slots__ = ("indices", "weights")

    def __init__(self, indices: np.ndarray, weights: np.ndarray) -> None:
        if len(indices) != len(weights):
            raise ValueError(f"{len(indices)} indices but {len(weights)} weights")
        self.indices, self.weights = indices, weights

    def __len__(self) -> int:
        return len(self.indices)

    @overload
    def __getitem__(self, k: int) -> tuple[int, float]: ...

    @overload
    def __getitem__(self, k: slice) -> list[tuple[int, float]]: ...

    def __getitem__(self, k: int | slice) -> tuple[int, float] | list[tuple[int, float]]:
        if isinstance(k, slice):
            return list(zip(self.indices[k].tolist(), self.weights[k].tolist()))
        return int(self.indices[k]), float(self.weights[k])

    def __iter__(self) -> Iterator[tuple[int, float]]:
        return zip(self.indices.tolist(), self.weights.tolist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, WeightedBatch):
            return np.array_equal(self.indices, other.indices) and np.array_equal(self.weights, other.weights)
        if isinstance(other, (list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # equal to a list of pairs, which has no hash

    def __repr__(self) -> str:
        return f"WeightedBatch({list(self)!r})"


class WeightedDataset:
    """Wraps a map-style dataset so that items become ``(*item, w)``: e.g. ``(x, y, w)``.

    ``w`` (a float32 scalar, collated to a float32 tensor) is the weight carried by the
    key when the batch sampler yields ``(index, weight)`` pairs
    (``SelectionBatchSampler(..., weighted=True)``, exact per batch and across worker
    processes), else ``weights[index]``, else 1.

    Parameters
    ----------
    dataset : map-style dataset
        The wrapped dataset: ``len(dataset)`` and ``dataset[index]``.
    weights : array-like or tensor, optional
        One finite weight ``>= 0`` per item, used for plain integer keys. Default
        ``None``: weight 1.

    See Also
    --------
    WeightedBatch : the batches whose ``(index, weight)`` pairs are this dataset's keys.

    Example
    -------
    >>> data = [(0.5, 1), (1.5, 0)]
    >>> WeightedDataset(data, weights=[2.0, 3.0])[1]
    (1.5, 0, np.float32(3.0))
    >>> WeightedDataset(data)[(0, 7.0)]
    (0.5, 1, np.float32(7.0))
    """

    #: takes the ``(index, weight)`` keys of a weighted sampler (the sampler checks it)
    accepts_weighted_keys = True

    def __init__(self, dataset: Any, weights: Any = None) -> None:
        self.dataset = dataset
        if weights is not None:
            weights = np.asarray(tensor_to_numpy(weights), dtype=np.float32).reshape(-1)
            if len(weights) != len(dataset):
                raise ValueError(f"weights has {len(weights)} entries, the dataset {len(dataset)}")
            if not np.isfinite(weights).all() or (weights < 0).any():
                raise ValueError("weights must be finite and >= 0")
        self.weights = weights

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: Any) -> tuple:
        if isinstance(key, tuple):
            index, w = key
        else:
            index, w = key, (1.0 if self.weights is None else self.weights[key])
        item = self.dataset[index]
        item = tuple(item) if isinstance(item, (tuple, list)) else (item,)
        return (*item, np.float32(w))


__all__ = ["WeightedBatch", "WeightedDataset"]
