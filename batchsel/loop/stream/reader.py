"""Reading one pool of a stream: up to ``buffer_size`` examples kept (InfoBatch-style
skipping decides as they are read), their ids checked, their last losses and costs looked
up: :class:`PoolReader`."""

from __future__ import annotations

from typing import Any, Iterator, NamedTuple

import numpy as np

from batchsel.loop.stream.feedback import LossTable
from batchsel.loop.stream.pools import LearntSkipping, first_repeat
from batchsel.loop.stream.sources import StreamSource
from batchsel.selectors.buckets.costs import check_costs, example_costs


class Pool(NamedTuple):
    """A pool's examples, their ids, training weights, last losses (``"loss-rank"`` only),
    costs (with ``cost``) and the source position after the last example read."""

    ids: list
    examples: list
    weights: np.ndarray
    losses: np.ndarray | None
    costs: np.ndarray | None
    after: tuple[int, int]


class PoolReader:
    """Reads a stream's pools.

    Parameters
    ----------
    source : StreamSource
        Where the examples come from (for messages naming where an example was read).
    buffer_size : int
        Examples kept per pool.
    id_key : str, int or callable
        An example's id: its field, tuple position, or ``id_key(example)``.
    cost : str, int, callable or None
        An example's cost: the length (or number) of a field, or ``cost(example)``.
    with_losses : bool
        Look the pool's last losses up (loss-rank orders the pool by them).

    Example
    -------
    >>> source = StreamSource(lambda: ({"id": i} for i in range(5)))
    >>> reader = PoolReader(source, 4, "id", None, with_losses=False)
    >>> reading = source.read(0, 1, order_seed=[0])
    >>> pool = reader.read(reading, LearntSkipping(None, 0.5, 0, 0), LossTable(), 0, ([0], 0, 1))
    >>> pool.ids, pool.after
    ([0, 1, 2, 3], (0, 4))
    """

    def __init__(self, source: StreamSource, buffer_size: int, id_key: Any, cost: Any, with_losses: bool) -> None:
        if not (isinstance(id_key, (str, int)) or callable(id_key)):
            raise TypeError(f"id_key must be a field name, a tuple position or a function, got {type(id_key).__name__}")
        if cost is not None and not (isinstance(cost, (str, int)) or callable(cost)):
            raise TypeError(f"cost must be a field name, a tuple position or a function, got {type(cost).__name__}")
        self.source, self.buffer_size, self.id_key, self.cost = source, buffer_size, id_key, cost
        self.with_losses = with_losses

    def id_of(self, example: Any) -> Any:
        """The example's id; ``ValueError`` naming the key when it has none."""
        try:
            return self.id_key(example) if callable(self.id_key) else example[self.id_key]
        except (KeyError, IndexError, TypeError) as error:
            keys = f" with keys {sorted(example)}" if isinstance(example, dict) else ""
            raise ValueError(
                f"an example has no id {self.id_key!r} ({type(example).__name__}{keys}): give id_key= its field, "
                "tuple position or a function"
            ) from error

    def costs(self, examples: list[Any]) -> np.ndarray | None:
        """The examples' costs, checked (None without ``cost``)."""
        if self.cost is None:
            return None
        if callable(self.cost):
            return check_costs([self.cost(example) for example in examples], len(examples), "cost(example)")
        return example_costs({"cost": [example[self.cost] for example in examples]}, column="cost")

    def read(
        self,
        reading: Iterator[tuple[int, int, Any]],
        skipping: LearntSkipping,
        table: LossTable,
        epoch: int,
        where_from: tuple[Any, int, int],
    ) -> Pool | None:
        """The next pool of ``reading`` (:meth:`StreamSource.read`'s iterator), None when
        it is exhausted. ``where_from`` is ``(order_seed, reader, readers)`` of the
        reading, to name where a repeated id was read."""
        ids: list[Any] = []
        examples: list[Any] = []
        weights: list[float] = []
        where: list[tuple[int, int]] = []
        after = (0, 0)
        for piece, offset, example in reading:
            after = (piece, offset + 1)
            example_id = self.id_of(example)
            weight = skipping.weight(example_id, table.before(example_id, epoch))
            if weight == 0.0:
                continue
            ids.append(example_id)
            examples.append(example)
            weights.append(weight)
            where.append((piece, offset))
            if len(ids) == self.buffer_size:
                break
        if not ids:
            return None
        repeat = first_repeat(ids)
        if repeat is not None:
            order_seed, reader, readers = where_from
            first, second = (self.source.describe(*where[i], reader, readers, order_seed) for i in repeat)
            raise ValueError(
                f"id {ids[repeat[0]]!r} appears twice in one buffer ({first} and {second}): ids must be unique, or "
                "feedback by id cannot tell the examples apart"
            )
        losses = np.array([table.before(i, epoch) for i in ids]) if self.with_losses else None
        return Pool(ids, examples, np.asarray(weights), losses, self.costs(examples), after)


__all__ = ["Pool", "PoolReader"]
