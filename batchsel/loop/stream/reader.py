"""Reading one pool of a stream: up to ``buffer_size`` examples kept (InfoBatch-style
skipping decides as they are read), their ids checked, their last losses and costs looked
up: :class:`PoolReader`."""

from __future__ import annotations

import itertools
from operator import itemgetter
from typing import Any, Iterator, NamedTuple, Sequence

import numpy as np

from batchsel.loop.stream.feedback import LossTable, plain_ids
from batchsel.loop.stream.pools import LearntSkipping, first_repeat
from batchsel.loop.stream.sources import StreamSource, reraise
from batchsel.selectors.buckets.costs import check_costs, value_cost


class Pool(NamedTuple):
    """A pool's examples, their ids, training weights, last losses (``"loss-rank"`` only),
    costs (with ``cost``) and the source position after the last example read."""

    ids: list
    examples: list
    weights: np.ndarray  # float32
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
        self._piece: tuple[int, int, int, Iterator[Any]] | None = None  # the piece being read
        self.after = (0, 0)  # the source position after the last pool read

    def start(self, position: tuple[int, int]) -> None:
        """A new reading starts at ``position``."""
        self._piece, self.after = None, position

    def ids_of(self, examples: list[Any]) -> list[Any]:
        """The examples' ids as Python values (:func:`plain_ids`: a 0-d tensor id as its
        int); ``ValueError`` naming the key when one has none."""
        key = self.id_key
        try:
            ids = list(map(key if callable(key) else itemgetter(key), examples))
        except (KeyError, IndexError, TypeError) as error:
            example = next(e for e in examples if not self._has_id(e))
            keys = f" with keys {sorted(example)}" if isinstance(example, dict) else ""
            raise ValueError(
                f"an example has no id {self.id_key!r} ({type(example).__name__}{keys}): give id_key= its field, "
                "tuple position or a function"
            ) from error
        return plain_ids(ids)

    def _has_id(self, example: Any) -> bool:
        try:
            self.id_key(example) if callable(self.id_key) else example[self.id_key]
        except (KeyError, IndexError, TypeError):
            return False
        return True

    def costs(self, examples: list[Any]) -> np.ndarray | None:
        """The examples' costs, checked (None without ``cost``)."""
        if self.cost is None:
            return None
        if callable(self.cost):
            return check_costs([self.cost(example) for example in examples], len(examples), "cost(example)")
        values = list(map(itemgetter(self.cost), examples))
        try:  # sequences (token ids): their lengths, in one pass
            sizes = np.fromiter(map(len, values), dtype=np.float64, count=len(values))
        except TypeError:  # numbers (a precomputed length), 0-d tensors and numpy scalars included
            where = f"cost {self.cost!r}"
            sizes = np.empty(len(values))
            for i, value in enumerate(values):
                try:
                    sizes[i] = value_cost(value, where)
                except (TypeError, ValueError) as error:
                    raise TypeError(f"{where} must be a sequence or a number, got a {type(value).__name__}") from error
        return check_costs(sizes, name=f"cost {self.cost!r}")

    def read(
        self,
        reading: Iterator[tuple[int, int, int, Iterator[Any]]],
        skipping: LearntSkipping,
        table: LossTable,
        epoch: int,
        where_from: tuple[Any, int, int],
    ) -> Pool | None:
        """The next pool of ``reading`` (:meth:`StreamSource.read`'s pieces, the current
        one left open for the next pool), None when it is exhausted. ``where_from`` is
        ``(order_seed, reader, readers)`` of the reading, to name where a repeated id was
        read."""
        ids: list[Any] = []
        examples: list[Any] = []
        weights: list[float] | None = None  # None: every example weight 1 (nothing skipped)
        chunks: list[tuple[int, int, int, Sequence[int]]] = []  # (piece, offset, step, kept) per read
        while len(examples) < self.buffer_size:
            if self._piece is None:
                self._piece = next(reading, None)
                if self._piece is None:
                    break
            piece, offset, step, source = self._piece
            got: list[Any] = []
            try:  # extend keeps the examples read before an error: its count says where it came
                got.extend(itertools.islice(source, self.buffer_size - len(examples)))
            except Exception as error:
                order_seed, reader, readers = where_from
                place = self.source.describe(piece, offset + step * len(got), reader, readers, order_seed)
                reraise(error, f"reading {place} (reader {reader} of {readers})")
            if not got:
                self._piece, self.after = None, (piece + 1, 0)
                continue
            self._piece = (piece, offset + step * len(got), step, source)
            got_ids = self.ids_of(got)
            kept: Sequence[int] = range(len(got))
            if skipping.threshold is not None:
                weights = [] if weights is None else weights
                kept = [k for k in kept if self._keep(skipping, table, got_ids[k], epoch, weights)]
                got, got_ids = [got[k] for k in kept], [got_ids[k] for k in kept]
            examples += got
            ids += got_ids
            chunks.append((piece, offset, step, kept))
        if self._piece is not None:
            self.after = self._piece[:2]
        if not ids:
            return None
        if len(set(ids)) != len(ids):
            self._repeated(ids, chunks, where_from)
        losses = table.before_many(ids, epoch) if self.with_losses else None
        weight = np.ones(len(ids), dtype=np.float32) if weights is None else np.asarray(weights, dtype=np.float32)
        return Pool(ids, examples, weight, losses, self.costs(examples), self.after)

    def _repeated(self, ids: list[Any], chunks: list[tuple[int, int, int, Sequence[int]]], where_from: tuple) -> None:
        """``ValueError`` naming the first id read twice in a pool and where it was read."""
        where = [(piece, offset + step * k) for piece, offset, step, kept in chunks for k in kept]
        first, second = first_repeat(ids) or (0, 0)
        order_seed, reader, readers = where_from
        places = [self.source.describe(*where[i], reader, readers, order_seed) for i in (first, second)]
        raise ValueError(
            f"id {ids[first]!r} appears twice in one buffer ({places[0]} and {places[1]}): ids must be unique, "
            "or feedback by id cannot tell the examples apart"
        )

    @staticmethod
    def _keep(skipping: LearntSkipping, table: LossTable, example_id: Any, epoch: int, weights: list[float]) -> bool:
        weight = skipping.weight(example_id, table.before(example_id, epoch))
        if weight:
            weights.append(weight)
        return bool(weight)


__all__ = ["Pool", "PoolReader"]
