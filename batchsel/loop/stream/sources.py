"""Where a stream's examples come from, split across readers (rank x DataLoader worker) the
way the stream's own library splits it: by shard when there are shards enough, else by
example.

:class:`StreamSource` takes three kinds of source:

- a sequence of shards with ``open_shard(shard)`` (WebDataset tar paths, file names,
  MosaicML-style index entries): reader ``j`` of ``R`` reads shards ``j, j + R, ...``;
- a Hugging Face ``datasets.IterableDataset``: its ``n_shards`` shards the same way
  (``dataset.shard(...)``), read through ``dataset.iter(...)``, which does not split
  again inside a DataLoader worker; with fewer shards than readers, by example;
- a function returning an iterable (a generator function), or an iterable that can be
  read again: every reader reads the whole stream and keeps examples ``j, j + R, ...``.

A reader's shards keep their reader from epoch to epoch (so its examples, and the losses
recorded for them, stay with it); their order is shuffled every epoch. A position
``(piece, offset)`` (the reader's ``piece``-th shard, ``offset`` examples into it) is
where :meth:`StreamSource.read` starts again on resume.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from typing import Any, Callable, NoReturn, Sequence

import numpy as np

logger = logging.getLogger(__name__)

_HF_ROWS = 256  # rows per Arrow read when a Hugging Face shard is read row by row


class StreamSource:
    """A stream's examples, split across ``readers`` readers.

    Parameters
    ----------
    source : sequence, datasets.IterableDataset, callable or iterable
        The shards (with ``open_shard``), a Hugging Face ``IterableDataset``, a function
        returning an iterable of examples, or an iterable that can be read again.
    open_shard : callable or None, default None
        ``open_shard(shard)`` returns an iterable of the shard's examples.

    Raises
    ------
    TypeError
        An iterator (a generator object: it can be read once only), a non-callable
        ``open_shard``, or a source of none of the kinds.
    ValueError
        An empty shard list.

    Example
    -------
    >>> source = StreamSource(["a", "b", "c"], open_shard=lambda s: [s + "0", s + "1"])
    >>> [e for _, _, _, part in source.read(1, 2, order_seed=[0]) for e in part]
    ['b0', 'b1']
    >>> [e for _, _, _, part in StreamSource(range(10)).read(1, 3, order_seed=[0]) for e in part]
    [1, 4, 7]
    """

    def __init__(self, source: Any, open_shard: Callable[[Any], Any] | None = None) -> None:
        self._open: Callable[[Any], Any] | None = None
        self._factory: Callable[[], Any] | None = None
        self.shards: list[Any] | None = None
        if open_shard is not None:
            if not callable(open_shard):
                raise TypeError(f"open_shard must be callable, got {type(open_shard).__name__}")
            if isinstance(source, (str, bytes)) or not hasattr(source, "__len__"):
                raise TypeError(f"with open_shard, source must be a sequence of shards, got {type(source).__name__}")
            self.shards, self._open, self.kind = list(source), open_shard, "shards"
            if not self.shards:
                raise ValueError("source has no shards")
        elif hasattr(source, "n_shards") and hasattr(source, "shard") and hasattr(source, "iter"):
            self.shards, self._open, self.kind = list(range(source.n_shards)), self._hf_shard, "hf"
            self._hf = source
        elif isinstance(source, Iterator):
            raise TypeError(
                f"source is an iterator ({type(source).__name__}): it can be read once only, and a stream is read "
                "again every epoch and by every worker; pass the function that makes it (source=make_examples, "
                "not make_examples())"
            )
        elif callable(source):
            self._factory, self.kind = source, "whole"
        elif hasattr(source, "__iter__"):
            self._factory, self.kind = lambda: source, "whole"
        else:
            raise TypeError(
                f"source must be shards with open_shard, an iterable or a function, got {type(source).__name__}"
            )

    def _hf_shard(self, index: int) -> Iterator[Any]:
        shard = self._hf.shard(num_shards=self._hf.n_shards, index=index, contiguous=True)
        yield from _rows(shard)

    def _by_example(self, readers: int) -> bool:
        """Whether the readers split the stream by example (too few shards, or none)."""
        if self.shards is None:
            return True
        if len(self.shards) >= readers:
            return False
        if self.kind == "hf":
            return True
        raise ValueError(
            f"{len(self.shards)} shards for {readers} readers (ranks x DataLoader workers): every reader needs a "
            "shard; write more shards, or use fewer workers"
        )

    def pieces(self, reader: int, readers: int, order_seed: Sequence[int]) -> list[Any]:
        """The shards reader ``reader`` of ``readers`` reads this epoch, in the order
        ``order_seed`` shuffles them to (one ``None`` for a stream split by example)."""
        if self._by_example(readers):
            return [None]
        assert self.shards is not None
        mine = list(range(reader, len(self.shards), readers))
        return [mine[i] for i in np.random.default_rng(list(order_seed)).permutation(len(mine))]

    def read(
        self, reader: int, readers: int, order_seed: Sequence[int], start: tuple[int, int] = (0, 0)
    ) -> Iterator[tuple[int, int, int, Iterator[Any]]]:
        """Reader ``reader``'s examples from ``start``, a piece at a time:
        ``(piece, offset, step, examples)``, the ``k``-th of ``examples`` being example
        ``offset + k * step`` of the piece (a shard: step 1; the whole stream split by
        example: the reader's every ``readers``-th example, offsets in the whole stream).

        ``order_seed`` orders the reader's shards (:meth:`pieces`)."""
        pieces = self.pieces(reader, readers, order_seed)
        first_piece, first_offset = start
        for number in range(first_piece, len(pieces)):
            skip = first_offset if number == first_piece else 0
            if pieces[number] is None:  # the whole stream: keep every readers-th example
                whole = self._factory() if self._factory is not None else _rows(self._hf)
                first = skip + (reader - skip) % readers  # the reader's first example at or after skip
                yield number, first, readers, itertools.islice(iter(whole), first, None, readers)
                continue
            assert self.shards is not None
            examples = self._opened(self.shards[pieces[number]], f"reader {reader} of {readers}")
            yield number, skip, 1, itertools.islice(examples, skip, None)

    def _opened(self, shard: Any, reader: str) -> Iterator[Any]:
        """``iter(open_shard(shard))``, its errors naming the shard and the reader."""
        assert self._open is not None
        try:
            opened = self._open(shard)
        except Exception as error:
            reraise(error, f"open_shard({shard!r}) for {reader}")
        if opened is None:
            raise TypeError(
                f"open_shard({shard!r}) returned None for {reader}: it must return an iterable of the shard's "
                "examples (a generator, a list, a WebDataset)"
            )
        try:
            return iter(opened)
        except TypeError as error:
            raise TypeError(
                f"open_shard({shard!r}) returned a {type(opened).__name__} for {reader}, not an iterable of examples"
            ) from error

    def describe(self, piece: int, offset: int, reader: int, readers: int, order_seed: Sequence[int]) -> str:
        """Where an example was read, for messages: ``shard 'x' #12`` or ``example 12``."""
        pieces = self.pieces(reader, readers, order_seed)
        if pieces[piece] is None:
            return f"example {offset}"
        assert self.shards is not None
        return f"shard {self.shards[pieces[piece]]!r} #{offset}"


def reraise(error: Exception, where: str) -> NoReturn:
    """Raise ``error`` again, saying ``where`` it came from: an ``OSError`` as one of its
    type whose message starts with ``where`` (``from error``), any other with ``where``
    as a note (Python 3.11+; as it is before).

    Example
    -------
    >>> try:
    ...     reraise(FileNotFoundError("no such file"), "open_shard('a.tar') for reader 0 of 1")
    ... except FileNotFoundError as error:
    ...     print(error)
    open_shard('a.tar') for reader 0 of 1: no such file
    """
    if isinstance(error, OSError):
        try:
            again = type(error)(f"{where}: {error}")
        except Exception:  # a subclass that needs other arguments
            again = OSError(f"{where}: {error}")
        raise again from error
    if hasattr(error, "add_note"):
        error.add_note(f"while {where}" if where.startswith("reading") else f"in {where}")
    raise error


def _rows(dataset: Any) -> Iterator[dict[str, Any]]:
    """A Hugging Face IterableDataset's rows through ``dataset.iter`` (public, and it does
    not split by DataLoader worker again, as ``iter(dataset)`` does in a worker)."""
    for batch in dataset.iter(batch_size=_HF_ROWS):
        columns = list(batch)
        for j in range(len(batch[columns[0]]) if columns else 0):
            yield {column: batch[column][j] for column in columns}


__all__ = ["StreamSource", "reraise"]
