"""Online batch selection by loss rank (Loshchilov & Hutter, 2015).

Examples are ranked by their latest known loss, largest first; rank r of n is drawn with
probability proportional to ``exp(-ln(s_e) * r / (n - 1))`` (``s_e``: the selection
pressure), with replacement across batches and without within a batch. Losses arrive
through ``observe(indices, losses=...)``. An epoch has as many batches as a random epoch;
a batch is one compiled GIL-free call from a counter-based generator keyed by
(seed, epoch, rank, batch).

Details and measurements: docs/design/loss-rank.md.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from batchsel.core.checks import check_int
from batchsel.core.journal import ChangeLog, WriteJournal, saved_parts, saved_values
from batchsel.core.rng import CounterKeyedBatches, stream_key, substream, uniform
from batchsel.core.sorting import stable_argsort
from batchsel.core.world import World
from batchsel.selectors import rank_order
from batchsel.selectors.feedback_checks import checked_losses, feedback_arrays, in_range_and_finite
from batchsel.selectors.online import OnlineSelector
from batchsel.selectors.rank_order import RankOrder
from batchsel.selectors.runs import Run

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class LossRankRun(Run):
    """A loss-rank run: the shard sorted by index, and what its batches keep between them.

    Parameters
    ----------
    rank_order : RankOrder or None, default None
        The shard's rank order (:mod:`~batchsel.selectors.rank_order`), from the run's
        first batch on; later batches move the keys that changed.
    read_changes : int, default 0
        The selector's change log's clock when the order last read it.
    direct : bool, default False
        Whether the shard is every example in index order (one rank): example ``i`` is
        shard position ``i``.
    pending : numpy.ndarray or None, default None
        A plan's own pending marks (a training run uses the selector's).
    **fields
        :class:`~batchsel.selectors.runs.Run`'s.
    """

    rank_order: RankOrder | None = None
    read_changes: int = 0
    direct: bool = False
    pending: np.ndarray | None = None

    reads_order = False  # drawn with replacement: the identity order stays


class LossRankSelector(CounterKeyedBatches, OnlineSelector[LossRankRun], feedback_fields=("losses",)):
    """Rank-based online batch selection with selection pressure ``s_e`` (docs: design/loss-rank.md).

    Parameters
    ----------
    num_examples, batch_size:
        N and B.
    seed:
        Seeds the per-epoch shards and every draw.
    pressure:
        s_e >= 1: the ratio of the selection probabilities of the first and last ranks
        (1 gives uniform sampling).
    initial_loss:
        The loss assumed for examples never observed. ``None`` (default) is +inf: unseen
        examples rank first (ties among them broken at random), so every example tends to
        be seen early; a number places them among the observed ones.
    anneal_batches:
        The run's length in batches per rank (``epochs * num_batches(world_size)``): the
        pressure decays geometrically from ``pressure`` at the run's first batch to 1
        (uniform sampling) at its last, as Loshchilov & Hutter anneal s_e, so the last
        steps, where a decayed learning rate settles the model, see every example alike.
        Batch t of epoch e is the run's batch ``e * num_batches(world_size) + t``; past
        the end the pressure stays 1. None (default): the pressure stays constant.
    drop_last:
        DistributedSampler's padding / dropping of the per-rank shards (``ceil(N / W)`` or
        ``N // W`` examples per rank, ``ceil(shard / B)`` batches).

    Each rank ranks and draws only within its shard of the epoch (a random split, fresh
    every epoch), with no communication. A batch moves the keys that changed in the
    shard's rank order, kept in sorted blocks: its cost grows with the changes (a binary
    search and a shift within a block each), not with a sort or a pass over the shard.

    Attributes
    ----------
    losses_ : numpy.ndarray of float64, shape (num_examples,)
        The latest loss observed per example (read-only: :meth:`observe` writes it, so
        the rank order hears of every change).

    Example
    -------
    >>> import numpy as np
    >>> sel = LossRankSelector(100, batch_size=10, seed=0, pressure=100)
    >>> sel.observe(np.arange(100), losses=np.arange(100.0))   # example 99 has the top loss
    >>> counts = np.bincount(sel.plan(epoch=0).indices(), minlength=100)
    >>> bool(counts[50:].sum() > counts[:50].sum())
    True
    """

    run_type = LossRankRun

    def __init__(
        self,
        num_examples: int,
        batch_size: int,
        *,
        seed: int = 0,
        pressure: float = 100.0,
        initial_loss: float | None = None,
        anneal_batches: int | None = None,
        drop_last: bool = False,
    ) -> None:
        super().__init__(num_examples, batch_size, seed=seed, drop_last=drop_last)
        self.pressure = pressure
        self.anneal_batches = None if anneal_batches is None else check_int(anneal_batches, "anneal_batches", minimum=1)
        if initial_loss is not None and not math.isfinite(initial_loss):
            raise ValueError(f"initial_loss must be a finite number or None, got {initial_loss!r}")
        self.initial_loss = None if initial_loss is None else float(initial_loss)
        fill = np.inf if initial_loss is None else float(initial_loss)
        self._losses = np.full(self.num_examples, fill, dtype=np.float64)
        # drawn, loss not observed since: ranked last until it is (design/loss-rank.md)
        self._pending = np.zeros(self.num_examples, dtype=np.bool_)
        # every write below records its positions (_wrote): the journal, for what a state
        # shares with the last (a state every step costs the batches written since, not
        # N); the change log, for the runs' rank orders (a batch moves what changed)
        self._journal = WriteJournal()
        self._journal.filled({"losses": self._losses, "pending": self._pending})  # (a subclass adds its own)
        self._changes = ChangeLog(limit=max(self.num_examples // 8, 1024))

    @property
    def losses_(self) -> np.ndarray:
        """The latest loss observed per example, read-only (+inf or ``initial_loss`` where
        none was): feed losses with :meth:`observe`."""
        view = self._losses.view()
        view.flags.writeable = False
        return view

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        if "losses_" in state:  # pickled before losses_ was read-only
            state["_losses"] = state.pop("losses_")
        state.setdefault("_changes", ChangeLog(limit=max(int(state["num_examples"]) // 8, 1024)))
        self.__dict__.update(state)

    def _wrote(self, positions: np.ndarray) -> None:
        """Record a write of the per-example arrays at ``positions``."""
        self._journal.wrote(positions)
        self._changes.wrote(positions)

    def _rewrote_all(self) -> None:
        """Record that any entry of the per-example arrays may have changed."""
        self._journal.rewrote_all()
        self._changes.rewrote_all()

    @property
    def pressure(self) -> float:
        return self._pressure

    @pressure.setter
    def pressure(self, value: float) -> None:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float, np.integer, np.floating))
            or not math.isfinite(value)
            or value < 1
        ):
            raise ValueError(f"pressure (s_e) must be a finite number >= 1, got {value!r}")
        self._pressure = float(value)

    def observe(self, indices: Any, losses: Any = None, logits: Any = None, embeddings: Any = None) -> None:
        """Record the latest per-example ``losses`` of ``indices`` (others are ignored)."""
        if losses is None:
            return
        pair = feedback_arrays(indices, losses)
        if pair is None or not self._stored(*pair):
            # other types, or a value out of range or not finite: checked (named), then stored
            stored = self._stored(*checked_losses(indices, losses, self.num_examples, cast=False))
            assert stored  # (in range and finite now)

    def _stored(self, idx: np.ndarray, values: np.ndarray) -> bool:
        """Store a batch's losses where every index is in range and every loss finite
        (one compiled pass checks, then writes); False, and nothing written, otherwise."""
        log, at = self._changes.room(idx.size)
        if not _store_losses(self._losses, self._pending, idx, values, self.num_examples, log, at):
            return False
        self._changes.added(idx.size)
        self._journal.wrote(idx)
        return True

    def probabilities(self, n: int) -> np.ndarray:
        """Selection probabilities of ranks 0..n-1 (largest loss first)."""
        return selection_probabilities(check_int(n, "n", minimum=1), self._pressure)

    def pressure_at(self, batch: int) -> float:
        """The pressure of the run's batch ``batch`` (per rank, counted over epochs):
        ``pressure`` without ``anneal_batches``, else its geometric decay to 1.

        >>> sel = LossRankSelector(100, batch_size=10, pressure=100, anneal_batches=21)
        >>> [round(sel.pressure_at(b), 6) for b in (0, 10, 20, 30)]
        [100.0, 10.0, 1.0, 1.0]
        """
        batch = check_int(batch, "batch", minimum=0)
        if self.anneal_batches is None:
            return self._pressure
        done = min(1.0, batch / max(self.anneal_batches - 1, 1))
        return float(self._pressure ** (1.0 - done))

    def _new_run(self, epoch: int, world: World) -> LossRankRun:
        # the shard's examples in index order: an example's positions are found by a binary
        # search, and the first sort reads the losses in memory order. Which examples the
        # shard holds is the random split's; ties are broken at random all the same (pick)
        if world.size == 1:  # one rank holds every example: no split, no permutation to draw
            every = np.arange(self.num_examples, dtype=np.int64)
            run = self.run_type.start(epoch, world.rank, every, self.batch_size)
            assert isinstance(run, LossRankRun)  # run_type
            run.direct = True
            return run
        run = super()._new_run(epoch, world)
        run.shard = np.sort(run.shard)
        return run

    def _next_batch(self, run: LossRankRun, rng: Any) -> np.ndarray:
        shard = run.shard
        n = len(shard)
        pending = self._pending_marks(run)
        changed: np.ndarray | None = _NOTHING
        if run.rank_order is None:  # the run's first batch: one sort; later ones move what changed
            run.rank_order = rank_order.build(_rank_values(self._losses, pending, shard))
        else:
            changed = self._changes.since(run.read_changes)
        k = min(self.batch_size, n)
        log, at = self._changes.room(k)  # the kernel logs the batch (disjoint from what changed)
        run.read_changes = self._changes.now()
        batch = _loss_rank_batch(
            self._losses,
            pending,
            shard,
            *run.rank_order,  # (arrays: numba reads their types faster than a tuple's)
            _NOTHING if changed is None else changed,
            changed is None,
            run.direct,
            k,
            _log_q(self._run_pressure(run), n),
            stream_key(rng),
            log,
            at,
        )
        self._changes.added(k)  # its pending marks, in the change log by the kernel
        self._journal.wrote(batch)
        return batch

    def rejoin(self, epoch: int, world: World, steps: int, drawn: np.ndarray) -> int:
        """:meth:`OnlineSelector.rejoin`; no batch is in flight after the interruption, so
        none is pending (those drawn and not trained are dropped with the old ranks)."""
        self._pending[:] = False
        self._rewrote_all()
        return super().rejoin(epoch, world, steps, drawn)

    def _pending_marks(self, run: LossRankRun) -> np.ndarray:
        """The pending marks ``run`` draws with: the selector's for a training run; a plan()'s
        runs are not the training's, they keep their own."""
        for training in self._runs.values():
            if run is training:
                return self._pending
        if run.pending is None:
            run.pending = np.zeros(self.num_examples, np.bool_)
        return run.pending

    def _run_pressure(self, run: LossRankRun) -> float:
        """The pressure of ``run``'s next batch."""
        if self.anneal_batches is None:
            return self._pressure
        per_epoch = -(-len(run.shard) // self.batch_size)  # the run's num_batches(world_size)
        return self.pressure_at(run.epoch * per_epoch + len(run.drawn))

    def _journaled(self) -> dict[str, np.ndarray]:
        """The per-example arrays a state carries, written a batch at a time (journaled)."""
        return {"losses": self._losses, "pending": self._pending}

    def _scores_state(self) -> dict[str, Any]:
        return {**self._journal.state(self._journaled()), "pressure": self._pressure}

    def _load_scores(self, state: dict[str, Any]) -> None:
        losses = saved_parts(state["losses"], np.float64)
        if losses[0].shape != (self.num_examples,):
            raise ValueError(f"state has losses for {losses[0].shape} examples, expected {self.num_examples}")
        if np.isnan(losses[0]).any() or np.isnan(losses[2]).any():  # +inf is an unseen example's loss; NaN has no rank
            raise ValueError("state has NaN losses")
        saved_pending = state.get("pending", np.zeros(self.num_examples, np.bool_))  # (older states: none)
        pending = saved_parts(saved_pending, np.bool_)[0]
        if pending.shape != (self.num_examples,):
            raise ValueError(f"state has pending marks for {pending.shape} examples, expected {self.num_examples}")
        self.pressure = state["pressure"]
        self._losses = saved_values(state["losses"], self._losses, np.float64)
        self._pending = saved_values(saved_pending, self._pending, np.bool_)
        self._rewrote_all()

    def __repr__(self) -> str:
        return (
            f"LossRankSelector(num_examples={self.num_examples}, batch_size={self.batch_size}, "
            f"pressure={self._pressure:g}, anneal_batches={self.anneal_batches}, seed={self.seed})"
        )


_NOTHING = np.zeros(0, np.int64)  # no example changed (the kernel only reads it)
# substreams of a batch's key: rank draws, the race over the ranks left (tie breaks: rank_order's)
_RANKS, _RACE = 1, 2
# rank draws tried by rejection before the ranks still missing are drawn by a race over
# the ranks left (O(n)); rejection costs O(1) a draw while the batch is a small part of the
# probability mass, the race bounds the work when repeats become the rule (k close to n
# under high pressure)
_DRAW_FACTOR, _DRAW_EXTRA = 4, 64


@njit(cache=True, nogil=True)
def _draw_ranks_kernel(n, k, log_q, key):  # pragma: no cover - numba
    """k distinct ranks of 0..n-1 in the order of sequential sampling without replacement
    with ``p_r ∝ exp(r * log_q)``.

    Independent draws (inverse CDF of the truncated geometric distribution) with the
    repeats discarded give exactly that sequence: whatever was drawn so far, the next new
    rank is distributed as p over the ranks not drawn yet. After a number of draws (a
    stopping rule that looks only at the past) the ranks still missing come from an
    exponential race over the ranks not drawn (rank r's clock ``E_r / p_r``, the earliest
    first), which is the same sequential sampling over those ranks: the whole sequence
    keeps its distribution, and the work stays O(n) when repeats dominate. The ranks
    drawn are remembered in a table of O(k) entries, not a mark per rank (O(n) a batch).
    """
    ranks = np.empty(k, np.int64)
    have = 0
    if k < n:
        stream = substream(key, _RANKS)
        tries = _DRAW_FACTOR * k + _DRAW_EXTRA
        drawn = rank_order.int_table(min(tries, n))
        # inverse CDF: F(r) = (1 - q^(r+1)) / (1 - q^n), q = exp(log_q)
        mass = -math.expm1(n * log_q)  # 1 - q^n
        for i in range(tries):
            u = uniform(stream, i)
            x = u * n if log_q == 0.0 else math.log1p(-u * mass) / log_q
            r = n - 1 if x >= n - 1 else int(x)  # (rounding up to n; no int overflow)
            slot = rank_order.slot_of(drawn, r)
            if drawn[slot] == -1:
                drawn[slot] = r
                ranks[have] = r
                have += 1
                if have == k:
                    return ranks
    m = k - have
    rest = n - have
    seen = np.zeros(n, np.bool_)
    for i in range(have):
        seen[ranks[i]] = True
    cand = np.empty(rest, np.int64)
    clock = np.empty(rest, np.float64)
    stream = substream(key, _RACE)
    j = 0
    for r in range(n):
        if not seen[r]:
            e = -math.log1p(-uniform(stream, r))  # Exp(1), 0 <= e < 38
            cand[j] = r
            clock[j] = (np.log(e) if e > 0.0 else -np.inf) - r * log_q  # log(e / p_r) + const
            j += 1
    if m < rest:  # the m earliest clocks: select, then sort only those
        cut = np.partition(clock, m - 1)[m - 1]
        c = 0
        for i in range(rest):
            if clock[i] <= cut:
                cand[c] = cand[i]
                clock[c] = clock[i]
                c += 1
        cand, clock = cand[:c], clock[:c]
    first = stable_argsort(clock)[:m]
    ranks[have:] = cand[first]
    return ranks


@njit(cache=True, nogil=True, inline="always")
def _rank_value(losses, pending, i):  # pragma: no cover - numba
    """What example ``i`` is sorted by: its negated loss, +inf while the loss is pending."""
    return np.inf if pending[i] else -losses[i]


@njit(cache=True, nogil=True)
def _rank_values(losses, pending, shard):  # pragma: no cover - numba
    """The value each shard position is ranked by (largest loss first, pending last)."""
    n = shard.size
    cur = np.empty(n, np.float64)
    for p in range(n):
        cur[p] = _rank_value(losses, pending, shard[p])
    return cur


@njit(cache=True, nogil=True)
def _move_examples(order, losses, pending, shard, direct, examples):  # pragma: no cover - numba
    """Move the keys of the shard positions holding ``examples`` to their values now
    (``shard`` sorted; ``direct``: position ``i`` holds example ``i``), then recount."""
    n = shard.size
    if direct:
        values = np.empty(examples.size, np.float64)
        for t in range(examples.size):
            values[t] = _rank_value(losses, pending, examples[t])
        rank_order.move_many(order, examples, values)
        return
    first = np.searchsorted(shard, examples)
    count = 0
    for t in range(examples.size):  # (DistributedSampler's padding repeats an example)
        p = first[t]
        while p < n and shard[p] == examples[t]:
            count += 1
            p += 1
    moved = np.empty(count, np.int64)
    values = np.empty(count, np.float64)
    count = 0
    for t in range(examples.size):
        p = first[t]
        while p < n and shard[p] == examples[t]:
            moved[count] = p
            values[count] = _rank_value(losses, pending, examples[t])
            count += 1
            p += 1
    rank_order.move_many(order, moved, values)


@njit(cache=True, nogil=True)
def _loss_rank_batch(
    losses,
    pending,
    shard,
    cur,
    values,
    positions,
    counts,
    sequence,
    starts,
    last_values,
    last_positions,
    free,
    meta,
    changed,
    everything,
    direct,
    k,
    log_q,
    key,
    log,
    at,
):  # pragma: no cover - numba
    """A loss-rank batch of ``k`` examples of ``shard``, in one call without the GIL:
    bring the rank order (a :class:`RankOrder`'s arrays) up to date (the examples
    ``changed`` since it was, or, with ``everything`` or many changed, a new sort), draw
    the ranks, look their examples up, mark them pending and write them to the change log
    ``log`` from ``at`` on (a training loop observes their losses before the next batch,
    and each key then moves once)."""
    order = RankOrder(cur, values, positions, counts, sequence, starts, last_values, last_positions, free, meta)
    if everything or 8 * changed.size > shard.size:
        order.cur[:] = _rank_values(losses, pending, shard)
        rank_order.resort(order)
    else:
        _move_examples(order, losses, pending, shard, direct, changed)
    picked = rank_order.pick(order, _draw_ranks_kernel(shard.size, k, log_q, key), key)
    out = np.empty(k, np.int64)
    for i in range(k):
        out[i] = shard[picked[i]]
        pending[out[i]] = True  # (their keys move at the next batch, which reads them in the change log)
        log[at + i] = out[i]
    return out


@njit(cache=True, nogil=True)
def _store_losses(losses, pending, idx, values, num_examples, log, at):  # pragma: no cover - numba
    """``losses[idx] = values`` and ``pending[idx] = False`` (float32 or float64 values),
    ``idx`` written to the change log ``log`` from ``at`` on: a batch's feedback without
    numpy's fancy indexing on every step. Where an index is outside ``[0, num_examples)``
    or a loss is not finite, nothing is written and False returned."""
    if not in_range_and_finite(idx, values, num_examples):
        return False
    for i in range(idx.size):
        losses[idx[i]] = values[i]
        pending[idx[i]] = False
        log[at + i] = idx[i]
    return True


def _log_q(pressure: float, n: int) -> float:
    """log of the ratio of consecutive ranks' probabilities: ``p_r ∝ exp(r * log_q)``."""
    return -math.log(pressure) / max(n - 1, 1)


def selection_probabilities(n: int, pressure: float) -> np.ndarray:
    """Loshchilov & Hutter's selection probabilities of ranks ``0..n-1`` (largest loss first):
    ``p_r ∝ pressure ** (-r / (n - 1))``, the first rank ``pressure`` times the last's. The
    rule of the selector's draws, and of a stream's pools
    (:func:`batchsel.loop.stream.pools.rank_probabilities`).

    Parameters
    ----------
    n : int
        The number of ranks, ``>= 1``.
    pressure : float
        The ratio of the first rank's probability to the last's, ``>= 1``.

    Returns
    -------
    numpy.ndarray
        ``n`` probabilities, decreasing, summing to 1.

    Example
    -------
    >>> p = selection_probabilities(3, 100.0)
    >>> round(float(p[0] / p[-1]), 6), round(float(p[0] / p[1]), 6)
    (100.0, 10.0)
    """
    logp = np.arange(n) * _log_q(pressure, n)  # <= 0, its largest (0) first
    p = np.exp(logp)
    return p / p.sum()


def _draw_ranks(n: int, k: int, pressure: float, rng: Any) -> np.ndarray:
    """k distinct ranks of 0..n-1 in the order of sequential sampling without replacement
    with ``p_r ∝ pressure ** (-r / (n - 1))`` (``rng``: a Generator or a batch key)."""
    return _draw_ranks_kernel(int(n), int(k), _log_q(pressure, n), stream_key(rng))


def _examples_of_ranks(losses: np.ndarray, ranks: np.ndarray, rng: Any) -> np.ndarray:
    """Positions in ``losses`` of the examples with the given (distinct) ranks, largest
    loss first, ties broken uniformly at random."""
    losses = np.asarray(losses, dtype=np.float64)
    order = rank_order.build(-losses)
    return rank_order.pick(order, np.asarray(ranks, dtype=np.int64), stream_key(rng))


__all__ = ["LossRankSelector"]
