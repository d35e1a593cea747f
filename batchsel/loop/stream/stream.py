"""Batches chosen from a bounded buffer of a stream: :class:`StreamBatches`, a torch
``IterableDataset`` for ``DataLoader(stream, batch_size=None)``.

The stream is read in pools of ``buffer_size`` examples (where they come from and how the
readers split them: :mod:`~batchsel.loop.stream.sources`; how a pool is read:
:mod:`~batchsel.loop.stream.reader`); each pool becomes its batches by a shuffle,
rank-based draws by last loss or InfoBatch-style skipping, grouped by cost or not
(:mod:`~batchsel.loop.stream.pools`, which says how each mode works).

A loss observed in one epoch orders its example the next time it is read (the next
epoch: an example comes once an epoch; :mod:`~batchsel.loop.stream.feedback`), so the
batches do not depend on when a worker ran ahead of the loop. A pool is a function of
(seed, epoch, rank, worker, pool number) and of what the pool read, so the position to
resume from is small: where the pool started in the source and how many of its batches
were yielded; the pool is read again on resume.
"""

from __future__ import annotations

import copy
import logging
import os
from operator import itemgetter
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np
from torch.utils.data import IterableDataset

from batchsel.core.checks import check_int, check_number
from batchsel.core.state import STATE_VERSION
from batchsel.core.world import World
from batchsel.distributed.world import detect_world
from batchsel.loop.stream.checkpoint import check_resume, check_state
from batchsel.loop.stream.feedback import EpochRepeats, LossTable, warn_unfed
from batchsel.loop.stream.pools import LearntSkipping, group_by_cost, pool_order, split_count
from batchsel.loop.stream.reader import PoolReader
from batchsel.loop.stream.sources import StreamSource

logger = logging.getLogger(__name__)

MODES = ("random", "loss-rank", "prune")
_ORDER = 1 << 20  # the substream that orders a reader's shards (pools use 0, 1, ...)


class StreamBatch(NamedTuple):
    """One batch of a stream.

    Attributes
    ----------
    data : Any
        ``collate_fn`` of the batch's examples.
    ids : list
        The examples' ids, in the batch's order: hand them back with the losses
        (:meth:`StreamBatches.observe`).
    weights : torch.Tensor
        float32, one per example: 1, or ``1 / (1 - prune_ratio)`` for a learnt example
        kept where others were skipped; train on ``(losses * weights).mean()``.
    epoch, reader, number : int
        The epoch, the reader (``rank * num_workers + worker``) and the batch's number in
        the reader's epoch.
    """

    data: Any
    ids: list
    weights: Any
    epoch: int
    reader: int
    number: int


def _default_collate(examples: list[Any]) -> Any:
    from torch.utils.data import default_collate

    return default_collate(examples)


_PERSISTENT = (
    "StreamBatches iterated twice in one DataLoader worker: persistent_workers=True keeps the first epoch's copy "
    "(its epoch and losses); use persistent_workers=False"
)


def _raising(error: Exception) -> Iterator[Any]:
    # raised from the iterator, not when it is made: torch reports a worker's error then,
    # but loses one raised while a persistent worker builds its iterator
    raise error
    yield  # a generator: the error comes with the first batch asked for


def _check_uncollated(batch: Any) -> None:
    """``ValueError`` when ``batch`` went through a DataLoader's collation again
    (``DataLoader(stream)`` batches the batches: a :class:`StreamBatch` with a tensor epoch
    and ids of 1-tuples or 1-element tensors), or is a list of StreamBatches: its losses
    would not match its ids, or be keyed by values no example has."""
    if isinstance(batch, StreamBatch):
        again, first = not isinstance(batch.epoch, int), batch.ids[:1]
        what = f"a StreamBatch of epoch {batch.epoch!r}"
        if not again and any(isinstance(i, list) for i in first):  # batch_size=None keeps the epoch an int
            raise TypeError(
                f"the stream's ids are sequences ({first[0]!r}): the DataLoader turns tuple ids into lists, which "
                "key nothing; give each example one int or string id (e.g. join the tuple's parts into a string)"
            )
    else:
        first = batch[:1] if isinstance(batch, (list, tuple)) or hasattr(batch, "shape") else []
        again, what = any(isinstance(b, StreamBatch) for b in first), f"a {type(batch).__name__} of StreamBatches"
    if not again and any(_collated_id(i) for i in first):
        again, what = True, f"ids like {first!r}"
    if again:
        raise ValueError(
            f"observe got {what}: the DataLoader collated the stream's batches again (each StreamBatch is a batch "
            "already): use DataLoader(stream, batch_size=None)"
        )


def _collated_id(example_id: Any) -> bool:
    """Whether an id looks collated: a list, a 1-tuple (strings) or a tensor of ``shape
    (1,)`` (numbers) are no ids :class:`StreamBatches` yields."""
    one_tuple = isinstance(example_id, tuple) and len(example_id) == 1
    return isinstance(example_id, list) or one_tuple or len(getattr(example_id, "shape", ())) > 0


def _world(rank: int | None, world_size: int | None, batches_per_epoch: int | None) -> World:
    """Explicit values, else the job's (:func:`~batchsel.distributed.world.detect_world`:
    torch.distributed, MPI under mpiexec, torchrun's variables, else one process); several
    ranks need ``batches_per_epoch``."""
    world, _ = detect_world(rank, world_size)
    if world.size > 1 and batches_per_epoch is None:
        raise ValueError(
            f"world_size {world.size} needs batches_per_epoch= (every rank must yield as many batches, and a "
            "stream's length per rank is not known ahead)"
        )
    return world


class StreamBatches(IterableDataset):
    """Batches of a stream chosen from a bounded buffer: a shuffle, loss-rank or
    InfoBatch-style skipping by example id, optionally grouped by cost; split across ranks
    and DataLoader workers by shard; resumable mid-epoch.

    Use it as ``DataLoader(stream, batch_size=None, num_workers=...)`` (or torchdata's
    ``StatefulDataLoader``); each item is a :class:`StreamBatch`. Call :meth:`set_epoch`
    before each epoch; in the feedback modes hand each batch's losses to :meth:`observe`.

    The stream is read in pools of ``buffer_size`` examples (memory: the pool, and in
    the feedback modes one entry per id trained on); each pool becomes batches by
    ``mode``, grouped by ``cost`` when given (:mod:`~batchsel.loop.stream.pools` says how). A loss observed
    in one epoch orders its example the next time it is read (the next epoch), so the
    batches do not depend on when a worker ran ahead of the loop, and resume is exact.
    Reader ``rank * num_workers + worker`` reads every such-numbered shard (its own from
    epoch to epoch), or with too few shards every such-numbered example; with
    ``world_size > 1``, ``batches_per_epoch`` sets every rank's number of batches (as
    WebDataset's ``with_epoch``).

    Parameters
    ----------
    source : sequence, datasets.IterableDataset, callable or iterable
        Shards (with ``open_shard``), a Hugging Face ``IterableDataset``, a function
        returning an iterable of examples (a generator function), or an iterable that can
        be read again (:class:`~batchsel.loop.stream.sources.StreamSource`).
    batch_size : int
        Examples per batch.
    open_shard : callable or None, default None
        ``open_shard(shard)``: an iterable of the shard's examples (for WebDataset,
        ``lambda url: wds.WebDataset(url, shardshuffle=False, nodesplitter=None,
        workersplitter=None).decode()``).

    Keyword groups:
        the examples: `id_key`, `cost`, `collate_fn`; the buffer and mode: `buffer_size`,
        `mode`, `pressure`, `prune_ratio`, `epochs`, `anneal`; the epoch: `batches_per_epoch`,
        `drop_last`, `seed`, `rank`, `world_size`.

    id_key : str, int or callable, default "id"
        An example's stable id: its field (``"__key__"`` for WebDataset), its position in
        a tuple, or ``id_key(example)``. Ids must be unique within a buffer.
    cost : str, callable or None, default None
        Group batches by cost: the field whose length (or number) is the cost, or
        ``cost(example)``.
    collate_fn : callable or None, default None
        Makes a batch of a list of examples; None: torch's ``default_collate``
        (``batchsel.pad_collate`` for sequences of varying length).
    buffer_size : int, default 4096
        Examples per pool, a multiple of ``batch_size``.
    mode : {"random", "loss-rank", "prune"}, default "random"
    pressure : float, default 100.0
        ``"loss-rank"``: the first rank's probability over the last's, ``>= 1``.
    prune_ratio : float, default 0.5
        ``"prune"``: the share of the learnt examples skipped, in [0, 0.9].
    epochs : int or None, default None
        ``"prune"``: the run's epochs (required there; the annealing depends on it).
    anneal : float, default 0.875
        ``"prune"``: epoch ``e >= 1`` prunes while ``e + 1 <= anneal * epochs``
        (InfoBatch's code).
    batches_per_epoch : int or None, default None
        Batches of every rank's epoch (required with ``world_size > 1``); None: until the
        source ends.
    drop_last : bool, default False
        Drop a reader's short last batch.
    seed : int, default 0
    rank, world_size : int or None, default None
        This process's rank and the number of ranks; None: torch.distributed's, else MPI's
        under mpiexec, else torchrun's ``RANK`` / ``WORLD_SIZE``, else one process. Fixed here.

    Raises
    ------
    ValueError, TypeError
        A bad option (named); while reading: an example without an id, an id twice in one
        buffer, a rank's source ending before ``batches_per_epoch``.

    See Also
    --------
    batchsel.SelectionBatchSampler : the same selection for a map-style dataset.

    Example
    -------
    >>> def examples():
    ...     for i in range(10):
    ...         yield {"id": i, "x": float(i)}
    >>> stream = StreamBatches(examples, batch_size=4, buffer_size=8, seed=0)
    >>> stream.set_epoch(0)
    >>> batches = list(stream)
    >>> [len(b.ids) for b in batches], sorted(i for b in batches for i in b.ids) == list(range(10))
    ([4, 4, 2], True)
    >>> stream.observe(batches[0], losses=[0.5, 0.1, 2.0, 1.0])   # by id, used next epoch
    """

    def __init__(
        self,
        source: Any,
        batch_size: int,
        open_shard: Callable[[Any], Any] | None = None,
        *,
        id_key: Any = "id",
        cost: Any = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        buffer_size: int = 4096,
        mode: str = "random",
        pressure: float = 100.0,
        prune_ratio: float = 0.5,
        epochs: int | None = None,
        anneal: float = 0.875,
        batches_per_epoch: int | None = None,
        drop_last: bool = False,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        self.source = StreamSource(source, open_shard)
        self.batch_size = check_int(batch_size, "batch_size", minimum=1)
        self.buffer_size = check_int(buffer_size, "buffer_size", minimum=1)
        if self.buffer_size % self.batch_size:
            raise ValueError(f"buffer_size must be a multiple of batch_size {self.batch_size}, got {buffer_size}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.pressure = check_number(pressure, "pressure", 1.0)
        self.prune_ratio = check_number(prune_ratio, "prune_ratio", 0.0, 0.9)
        self.anneal = check_number(anneal, "anneal", 0.0, 1.0)
        self.epochs = None if epochs is None else check_int(epochs, "epochs", minimum=1)
        if mode == "prune" and self.epochs is None:
            raise ValueError("mode='prune' needs epochs= (the run's epochs: the last ones train on every example)")
        self.batches_per_epoch = (
            None if batches_per_epoch is None else check_int(batches_per_epoch, "batches_per_epoch", minimum=1)
        )
        self.world = _world(rank, world_size, self.batches_per_epoch)
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError(f"collate_fn must be callable, got {type(collate_fn).__name__}")
        self.id_key, self.cost, self.collate_fn = id_key, cost, collate_fn or _default_collate
        self.drop_last = bool(drop_last)
        self.seed = check_int(seed, "seed", minimum=0)
        self.epoch = 0
        self._losses = LossTable()  # the training process's copy is the one observe() fills
        self._resume: dict[str, Any] | None = None  # a loaded position, used by the next iteration of its epoch
        self._own_state = False  # a state with the losses (the training process's) was loaded
        self._position: dict[str, Any] | None = None  # the running iteration's position
        self._worker_pid: int | None = None  # the worker process that iterated this copy (persistent workers: twice)
        self._repeats = EpochRepeats()
        self._epoch_set = True  # set_epoch (or a load) since this copy's last iteration started
        self._pools = PoolReader(self.source, self.buffer_size, id_key, cost, with_losses=mode == "loss-rank")

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next iteration reads (the order of shards and pools)."""
        self.epoch = check_int(epoch, "epoch", minimum=0)
        self._epoch_set = True

    def __len__(self) -> int:
        """This rank's batches per epoch (``batches_per_epoch``; ``TypeError`` without it,
        as for any stream of unknown length)."""
        if self.batches_per_epoch is None:
            raise TypeError("StreamBatches has no length without batches_per_epoch (the stream's length is not known)")
        return self.batches_per_epoch

    def __iter__(self) -> Iterator[StreamBatch]:
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        if info is not None and self._worker_pid == os.getpid():
            return _raising(ValueError(_PERSISTENT))
        if info is not None:
            self._worker_pid = os.getpid()
        reader, readers = self.world.rank * workers + worker, self.world.size * workers
        limit = None if self.batches_per_epoch is None else split_count(self.batches_per_epoch, workers, worker)
        if info is None and not self._epoch_set and self._resume is None:
            self._repeats.repeated(self.epoch)  # iterated here again without set_epoch
        self._epoch_set = False
        position = self._position = self._start(reader, readers)
        return self._batches(position, limit)

    def _start(self, reader: int, readers: int) -> dict[str, Any]:
        """The iteration's position: the loaded one when it is this epoch's, else a new one."""
        resume, self._resume = self._resume, None
        if resume is not None and resume["epoch"] == self.epoch:
            check_resume(resume, (reader, readers), self._losses, self.mode, self._own_state)
            return dict(resume)
        known = self._losses.known_before(self.epoch)
        if self.mode != "random" and self.epoch >= 1 and not known:
            warn_unfed(self.mode, self.epoch)
        pruning = self.mode == "prune" and 1 <= self.epoch and self.epoch + 1 <= self.anneal * (self.epochs or 0)
        threshold = self._losses.mean_before(self.epoch) if pruning else None
        return {
            "epoch": self.epoch, "reader": reader, "readers": readers, "known": known,
            "threshold": threshold, "pool": 0, "start": (0, 0), "batch": 0, "done": 0, "finished": False,
        }  # fmt: skip

    def _batches(self, position: dict[str, Any], limit: int | None) -> Iterator[StreamBatch]:
        import torch

        epoch, reader, readers = position["epoch"], position["reader"], position["readers"]
        order_seed = (self.seed, epoch, reader, readers, _ORDER)
        skipping = LearntSkipping(position["threshold"], self.prune_ratio, self.seed, epoch)
        reading = self.source.read(reader, readers, order_seed, tuple(position["start"]))
        pools = copy.copy(self._pools)  # its reading position is this iteration's
        pools.start(tuple(position["start"]))
        while not position["finished"] and (limit is None or position["done"] < limit):
            pool = pools.read(reading, skipping, self._losses, epoch, (order_seed, reader, readers))
            if pool is None:
                position["finished"] = True
                break
            ids, examples, weights, losses, costs, after = pool
            rng = np.random.default_rng([self.seed, epoch, reader, readers, position["pool"]])
            order = pool_order(len(ids), losses if self.mode == "loss-rank" else None, self.pressure, rng)
            batches = group_by_cost(order, costs, self.batch_size, rng)
            if self.drop_last:  # the pool's short batch, wherever grouping put it
                batches = [b for b in batches if len(b) == self.batch_size]
            for number in range(position["batch"], len(batches)):
                if limit is not None and position["done"] >= limit:
                    return
                chosen = batches[number]
                take = itemgetter(*chosen.tolist()) if len(chosen) > 1 else lambda items: (items[chosen[0]],)
                position["batch"], position["done"] = number + 1, position["done"] + 1
                yield StreamBatch(
                    data=self.collate_fn(list(take(examples))),
                    ids=list(take(ids)),
                    weights=torch.from_numpy(weights[chosen]),
                    epoch=epoch, reader=reader, number=position["done"] - 1,
                )  # fmt: skip
            position.update(pool=position["pool"] + 1, start=after, batch=0)
        if limit is not None and position["done"] < limit:
            raise ValueError(
                f"rank {self.world.rank}'s source ended after {position['done']} of the {limit} batches of reader "
                f"{reader} in epoch {epoch}: its shards hold fewer examples than batches_per_epoch asks of every "
                "rank; lower batches_per_epoch, or give this rank more data"
                + (" (mode='prune' skips learnt examples: size it for a pruned epoch)" if skipping.threshold else "")
            )

    def observe(self, batch: Any, losses: Any) -> None:
        """Record the per-example losses of a batch (call it in the training process, after
        the step): each id's last loss orders it the next time it is read.

        Parameters
        ----------
        batch : StreamBatch or sequence
            The batch trained on, or its ids.
        losses : array-like or torch.Tensor
            One unweighted loss per example, finite, 1-D.

        Raises
        ------
        ValueError
            A batch collated again by the loader (``DataLoader(stream)`` without
            ``batch_size=None``), 2-D losses, or not one finite loss per id.
        """
        _check_uncollated(batch)
        if isinstance(batch, StreamBatch):
            self._repeats.check(batch.epoch, batch.reader, batch.number)
            self._losses.record_batch(batch.ids, losses, batch.epoch)
        else:
            self._losses.record_batch(list(batch), losses, self.epoch)

    def _config(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "batch_size": self.batch_size, "buffer_size": self.buffer_size, "seed": self.seed,
            "rank": self.world.rank, "world_size": self.world.size, "batches_per_epoch": self.batches_per_epoch,
        }  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        """The epoch, the running iteration's position and, in the training process, the
        losses observed (by reference: saving copies them). torchdata's
        ``StatefulDataLoader`` calls it in each worker: checkpoint its state and this
        object's own (the losses live here) and load both, this one first."""
        from torch.utils.data import get_worker_info

        state: dict[str, Any] = {"version": STATE_VERSION, "config": self._config(), "epoch": self.epoch}
        position = self._resume if self._resume is not None else self._position  # loaded, not iterated yet: as loaded
        state["position"] = None if position is None else dict(position)
        state["losses"] = self._losses.state() if get_worker_info() is None else None
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output: the next iteration of the saved epoch
        yields exactly the batches still to come."""
        check_state(state, self._config())
        self.epoch = check_int(state["epoch"], "epoch", minimum=0)
        if state["losses"] is not None:  # the training process's state (a worker's has none)
            self._losses.load(state["losses"])
            self._own_state = True
        position = state["position"]
        self._resume = None if position is None else dict(position, start=tuple(position["start"]))
        self._position = None
        self._epoch_set = True

    def __repr__(self) -> str:
        return (
            f"StreamBatches(mode={self.mode!r}, batch_size={self.batch_size}, buffer_size={self.buffer_size}, "
            f"rank={self.world.rank}, world_size={self.world.size}, epoch={self.epoch})"
        )


__all__ = ["MODES", "StreamBatch", "StreamBatches"]
