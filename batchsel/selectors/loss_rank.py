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
from batchsel.core.journal import WriteJournal, saved_parts, saved_values
from batchsel.core.rng import CounterKeyedBatches, stream_key, substream, uniform
from batchsel.core.sorting import stable_argsort
from batchsel.core.world import World
from batchsel.selectors.feedback_checks import checked_losses
from batchsel.selectors.online import OnlineSelector
from batchsel.selectors.runs import Run

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class LossRankRun(Run):
    """A loss-rank run: the shard sorted by index, and what its batches keep between them.

    Parameters
    ----------
    rank_order : tuple of numpy.ndarray or None, default None
        The shard's rank order (``_sort_shard``'s ``(sv, sp, cur)``), from the run's first
        batch on; later batches update it in O(n).
    pending : numpy.ndarray or None, default None
        A plan's own pending marks (a training run uses the selector's).
    **fields
        :class:`~batchsel.selectors.runs.Run`'s.
    """

    rank_order: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
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
    every epoch), with no communication. The cost per batch is O(n) (an update of the
    shard's rank order), not a sort.

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
        self.losses_ = np.full(self.num_examples, fill, dtype=np.float64)
        # drawn, loss not observed since: ranked last until it is (design/loss-rank.md)
        self._pending = np.zeros(self.num_examples, dtype=np.bool_)
        # what the two arrays' entries a state shares with the last (a state every step
        # costs the batches written since, not N); every write below records its positions
        self._journal = WriteJournal()
        self._journal.filled({"losses": self.losses_, "pending": self._pending})  # (a subclass adds its own)

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
        idx, values = checked_losses(indices, losses, self.num_examples, cast=False)
        _store_losses(self.losses_, self._pending, idx, values)
        self._journal.wrote(idx)

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
        # the shard's examples in index order: every batch scans their losses, read then in
        # memory order (fewer cache misses than the random split's order). Which examples
        # the shard holds is the random split's; ties are broken at random all the same (_pick)
        if world.size == 1:  # one rank holds every example: no split, no permutation to draw
            every = np.arange(self.num_examples, dtype=np.int64)
            return self.run_type.start(epoch, world.rank, every, self.batch_size)  # type: ignore[return-value]
        run = super()._new_run(epoch, world)
        run.shard = np.sort(run.shard)
        return run

    def _next_batch(self, run: LossRankRun, rng: Any) -> np.ndarray:
        shard = run.shard
        n = len(shard)
        pending = self._pending_marks(run)
        order = run.rank_order
        if order is None:  # the run's first batch: one sort; later ones update it in O(n)
            order = run.rank_order = _sort_shard(self.losses_, pending, shard)
        batch = _loss_rank_batch(
            self.losses_,
            pending,
            shard,
            *order,
            min(self.batch_size, n),
            _log_q(self._run_pressure(run), n),
            stream_key(rng),
        )
        self._journal.wrote(batch)  # its pending marks
        return batch

    def rejoin(self, epoch: int, world: World, steps: int, drawn: np.ndarray) -> int:
        """:meth:`OnlineSelector.rejoin`; no batch is in flight after the interruption, so
        none is pending (those drawn and not trained are dropped with the old ranks)."""
        self._pending[:] = False
        self._journal.rewrote_all()
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
        return {"losses": self.losses_, "pending": self._pending}

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
        self.losses_ = saved_values(state["losses"], self.losses_, np.float64)
        self._pending = saved_values(saved_pending, self._pending, np.bool_)
        self._journal.rewrote_all()

    def __repr__(self) -> str:
        return (
            f"LossRankSelector(num_examples={self.num_examples}, batch_size={self.batch_size}, "
            f"pressure={self._pressure:g}, anneal_batches={self.anneal_batches}, seed={self.seed})"
        )


# substreams of a batch's key: rank draws, the race over the ranks left, tie breaks
_RANKS, _RACE, _TIES = 1, 2, 3
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
    keeps its distribution, and the work stays O(n) when repeats dominate.
    """
    ranks = np.empty(k, np.int64)
    seen = np.zeros(n, np.bool_)
    have = 0
    if k < n:
        stream = substream(key, _RANKS)
        # inverse CDF: F(r) = (1 - q^(r+1)) / (1 - q^n), q = exp(log_q)
        mass = -math.expm1(n * log_q)  # 1 - q^n
        for i in range(_DRAW_FACTOR * k + _DRAW_EXTRA):
            u = uniform(stream, i)
            x = u * n if log_q == 0.0 else math.log1p(-u * mass) / log_q
            r = n - 1 if x >= n - 1 else int(x)  # (rounding up to n; no int overflow)
            if not seen[r]:
                seen[r] = True
                ranks[have] = r
                have += 1
                if have == k:
                    return ranks
    m = k - have
    rest = n - have
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
def _sort_shard(losses, pending, shard):  # pragma: no cover - numba
    """The shard's examples in rank order: ``(sv, sp, cur)`` with ``cur[p]`` the negated
    loss of shard position ``p`` (+inf while its loss is pending: ranked last) and ``sp``
    the positions sorted by ``(cur[p], p)`` (largest loss first, equal losses by
    position), ``sv = cur[sp]``."""
    n = shard.size
    cur = np.empty(n, np.float64)
    for p in range(n):
        cur[p] = _rank_value(losses, pending, shard[p])
    sp = stable_argsort(cur)
    return cur[sp], sp, cur


@njit(cache=True, nogil=True)
def _refresh(losses, pending, shard, sv, sp, cur):  # pragma: no cover - numba
    """Bring ``_sort_shard``'s arrays up to date with ``losses`` in place, in O(n): the
    positions whose loss changed (one scan, whoever changed it) leave the sorted order and
    are merged back, by ``(value, position)``; the result is what a new sort would give."""
    n = shard.size
    dirty = np.zeros(n, np.bool_)
    changed = np.empty(n, np.int64)
    d = 0
    for p in range(n):
        v = _rank_value(losses, pending, shard[p])
        if v != cur[p]:
            cur[p] = v
            dirty[p] = True
            changed[d] = p
            d += 1
    if d == 0:
        return
    if 8 * d > n:  # much changed: sort anew
        sp[:] = stable_argsort(cur)
        for i in range(n):
            sv[i] = cur[sp[i]]
        return
    changed = changed[:d]  # ascending positions; sorted by value, stably
    changed = changed[stable_argsort(cur[changed])]
    w = 0
    for i in range(n):  # drop the changed ones, keeping the order
        p = sp[i]
        if not dirty[p]:
            sv[w] = sv[i]
            sp[w] = p
            w += 1
    i, j, out = w - 1, d - 1, n - 1  # merge them back, from the end
    while j >= 0:
        pj = changed[j]
        vj = cur[pj]
        if i >= 0 and (sv[i] > vj or (sv[i] == vj and sp[i] > pj)):
            sv[out] = sv[i]
            sp[out] = sp[i]
            i -= 1
        else:
            sv[out] = vj
            sp[out] = pj
            j -= 1
        out -= 1


@njit(cache=True, nogil=True)
def _pick(sv, sp, ranks, key):  # pragma: no cover - numba
    """The positions holding the given distinct ranks of the sorted ``(sv, sp)``, in the
    order of ``ranks``: a rank whose value is unique is its example; the ranks falling in
    a block of equal values get distinct members of the block, uniformly at random
    (sampling without replacement: rejection of repeats when the block is at least twice
    the ranks in it, else a partial Fisher-Yates shuffle of a copy)."""
    n = sv.size
    k = ranks.size
    order = np.argsort(ranks)
    picked = np.empty(k, np.int64)
    stream = substream(key, _TIES)
    draws = 0
    i = 0
    while i < k:
        r = ranks[order[i]]
        v = sv[r]
        if (r == 0 or sv[r - 1] != v) and (r == n - 1 or sv[r + 1] != v):
            picked[i] = sp[r]
            i += 1
            continue
        a = np.searchsorted(sv, v, side="left")
        b = np.searchsorted(sv, v, side="right")
        j = i
        while j < k and ranks[order[j]] < b:
            j += 1
        m, c = j - i, b - a
        if 2 * m <= c and m <= 64:
            for t in range(m):
                while True:
                    s = int(uniform(stream, draws) * c)
                    draws += 1
                    s = a + (c - 1 if s >= c else s)
                    fresh = True
                    for q in range(i, i + t):
                        if picked[q] == sp[s]:
                            fresh = False
                            break
                    if fresh:
                        break
                picked[i + t] = sp[s]
        else:
            block = sp[a:b].copy()
            for t in range(m):
                left = c - t
                s = int(uniform(stream, draws) * left)
                draws += 1
                s = t + (left - 1 if s >= left else s)
                block[t], block[s] = block[s], block[t]
                picked[i + t] = block[t]
        i = j
    out = np.empty(k, np.int64)
    for i in range(k):
        out[order[i]] = picked[i]
    return out


@njit(cache=True, nogil=True)
def _loss_rank_batch(losses, pending, shard, sv, sp, cur, k, log_q, key):  # pragma: no cover - numba
    """A loss-rank batch of ``k`` examples of ``shard``, in one call without the GIL:
    refresh the rank order (``_sort_shard``'s arrays, in place; pending losses last),
    draw the ranks, look their examples up, mark them pending."""
    _refresh(losses, pending, shard, sv, sp, cur)
    picked = _pick(sv, sp, _draw_ranks_kernel(shard.size, k, log_q, key), key)
    out = np.empty(k, np.int64)
    for i in range(k):
        out[i] = shard[picked[i]]
        pending[out[i]] = True
    return out


@njit(cache=True, nogil=True)
def _store_losses(losses, pending, idx, values):  # pragma: no cover - numba
    """``losses[idx] = values`` and ``pending[idx] = False`` in one pass (float32 or float64
    values): a batch's feedback without numpy's fancy indexing on every step."""
    for i in range(idx.size):
        losses[idx[i]] = values[i]
        pending[idx[i]] = False


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
    sv, sp, _ = _sort_shard(losses, np.zeros(losses.size, np.bool_), np.arange(losses.size, dtype=np.int64))
    return _pick(sv, sp, np.asarray(ranks, dtype=np.int64), stream_key(rng))


__all__ = ["LossRankSelector"]
