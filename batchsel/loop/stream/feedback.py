"""The losses a stream's training loop hands back, by example id: :class:`LossTable`.

An example comes once an epoch, so what orders it in epoch ``e`` is its last loss from
an epoch before ``e``. The table keeps, per id, the last loss, the epoch it was observed
in and the loss before that epoch: a pool read again on resume, after some of its
examples were trained in this epoch, sees the losses it saw the first time.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Iterable

import numpy as np

from batchsel.core.checks import tensor_to_numpy


class LossTable:
    """Per-id losses with the epoch they were observed in. Asked about the epoch running
    (or a later one), never an earlier one: it keeps one loss before the last epoch seen.

    Example
    -------
    >>> table = LossTable()
    >>> table.record(["a"], [2.0], epoch=0)
    >>> table.record(["a"], [0.5], epoch=1)
    >>> table.before("a", epoch=1), table.before("a", epoch=2), math.isnan(table.before("b", 1))
    (2.0, 0.5, True)
    """

    def __init__(self) -> None:
        self.entries: dict[Any, tuple[float, int, float | None]] = {}  # id -> (last loss, its epoch, the one before)

    def __len__(self) -> int:
        return len(self.entries)

    def record(self, ids: Iterable[Any], losses: Iterable[float], epoch: int) -> None:
        """Record each id's loss observed in ``epoch`` (the last one wins)."""
        entries = self.entries
        for example_id, loss in zip(ids, losses):
            last = entries.get(example_id)
            if last is None:
                entries[example_id] = (loss, epoch, None)
            elif last[1] < epoch:
                entries[example_id] = (loss, epoch, last[0])
            else:
                entries[example_id] = (loss, epoch, last[2])

    def record_batch(self, ids: list[Any], losses: Any, epoch: int) -> None:
        """:meth:`record` of a batch's losses as the loop hands them (a tensor or an array),
        checked: one finite loss per id; tensor or numpy ids are stored as Python ints
        (:func:`plain_ids`)."""
        values = np.asarray(tensor_to_numpy(losses), dtype=np.float64)
        if values.ndim > 1:  # as the map-style selectors: a (B, T) loss is not one loss per example
            raise ValueError(
                f"losses must be 1-D (one unweighted loss per example), got shape {values.shape}: reduce the loss "
                "over each example's other dimensions first"
            )
        values = values.reshape(-1)
        if len(values) != len(ids):
            raise ValueError(f"losses has {len(values)} values for a batch of {len(ids)} ids")
        if not np.all(np.isfinite(values)):
            raise ValueError(f"losses must be finite, got {values[~np.isfinite(values)][0]!r}")
        self.record(plain_ids(ids), values.tolist(), epoch)

    def before(self, example_id: Any, epoch: int) -> float:
        """The id's last loss observed before ``epoch`` (``nan``: none)."""
        entry = self.entries.get(example_id)
        if entry is None:
            return math.nan
        prior = entry[0] if entry[1] < epoch else entry[2]
        return math.nan if prior is None else prior

    def before_many(self, ids: list[Any], epoch: int) -> np.ndarray:
        """:meth:`before` of every id, as a float64 array (one dict lookup each)."""
        out = np.full(len(ids), np.nan)
        for k, entry in enumerate(map(self.entries.get, ids)):
            if entry is not None:
                prior = entry[0] if entry[1] < epoch else entry[2]
                if prior is not None:
                    out[k] = prior
        return out

    def known_before(self, epoch: int) -> int:
        """How many ids have a loss from before ``epoch``."""
        return sum(1 for _, seen, prior in self.entries.values() if seen < epoch or prior is not None)

    def mean_before(self, epoch: int) -> float | None:
        """The mean of the ids' losses before ``epoch``; None when there are none."""
        values = np.fromiter((self.before(i, epoch) for i in self.entries), dtype=np.float64, count=len(self.entries))
        values = values[~np.isnan(values)]
        return float(values.mean()) if len(values) else None

    def state(self) -> dict[Any, tuple[float, int, float | None]]:
        """The entries (by reference: saving them copies them)."""
        return self.entries

    def load(self, entries: dict[Any, Any]) -> None:
        """Replace the entries with ``entries`` (:meth:`state`'s output)."""
        self.entries = {
            key: (float(v[0]), int(v[1]), None if v[2] is None else float(v[2])) for key, v in entries.items()
        }


_PLAIN = frozenset({int, str, bytes})


def plain_ids(ids: list[Any]) -> list[Any]:
    """Example ids as the Python values the loss table is keyed by: a 0-d tensor or a
    numpy scalar (ids read from a dataset in torch or numpy format) as its ``item()``, so
    an id read and the same id handed back to ``observe`` are one key.

    Raises
    ------
    TypeError
        An id that is a tensor or array of several values, or unhashable.

    Example
    -------
    >>> import torch
    >>> plain_ids([torch.tensor(3), np.int64(4), "a"])
    [3, 4, 'a']
    """
    if set(map(type, ids)) <= _PLAIN:  # the usual case: nothing to convert
        return ids
    return [_plain(example_id) for example_id in ids]


def _plain(example_id: Any) -> Any:
    """One id as :func:`plain_ids` makes it."""
    if type(example_id) in _PLAIN:
        return example_id
    if isinstance(example_id, np.generic):
        return example_id.item()
    shape = getattr(example_id, "shape", None)
    if shape is not None:  # a tensor or an array: hashed by identity, not by value
        if len(shape) == 0 and hasattr(example_id, "item"):
            return example_id.item()
        raise TypeError(
            f"an id must be a number or a string, got a {type(example_id).__name__} of shape {tuple(shape)}"
        )
    try:
        hash(example_id)
    except TypeError:
        raise TypeError(f"an id must be hashable (a number or a string), got {example_id!r}") from None
    return example_id


class EpochRepeats:
    """Warns, once per epoch, when an epoch starts over (iterated again in the training
    process, or batch 0 of a reader's epoch observed again): the loop forgot
    ``set_epoch``, and every epoch reads the same order.

    Example
    -------
    >>> repeats = EpochRepeats()
    >>> repeats.check(epoch=0, reader=0, number=0); repeats.check(epoch=1, reader=0, number=0)
    """

    def __init__(self) -> None:
        self.last: dict[tuple[int, int], int] = {}  # (epoch, reader) -> last batch number observed
        self.warned: set[int] = set()

    def check(self, epoch: int, reader: int, number: int) -> None:
        """Note batch ``number`` of ``reader``'s ``epoch``; warn if the epoch restarted."""
        if number == 0 and (epoch, reader) in self.last:
            self.repeated(epoch, stacklevel=4)  # the loop's observe call
        self.last[epoch, reader] = number

    def repeated(self, epoch: int, stacklevel: int = 3) -> None:
        """Warn (once for ``epoch``) that it is read again; ``stacklevel`` as ``warnings.warn``'s,
        counted from here."""
        if epoch not in self.warned:
            self.warned.add(epoch)
            warnings.warn(
                f"StreamBatches yielded epoch {epoch} again: call stream.set_epoch(epoch) before each epoch, "
                "or every epoch reads the same order",
                stacklevel=stacklevel,
            )


def warn_unfed(mode: str, epoch: int) -> None:
    """Warn that a feedback mode starts an epoch with no loss observed (the loop forgot
    ``observe``, or calls it in a process the stream does not read from)."""
    warnings.warn(
        f"StreamBatches(mode={mode!r}) starts epoch {epoch} without any loss observed, so it trains as "
        "mode='random': call stream.observe(batch, losses) after each step, in the training process",
        stacklevel=4,
    )


__all__ = ["EpochRepeats", "LossTable", "plain_ids", "warn_unfed"]
