"""Online batch selection by loss rank (Loshchilov & Hutter, 2015) — a baseline.

Examples are ranked by their latest known loss, largest first; the example of rank r
(0-based, among the n examples of this rank's shard) is drawn with probability
proportional to ``exp(-ln(s_e) * r / (n - 1))``, so the top example is exactly ``s_e``
times as likely as the last (the selection pressure, typically 1e2..1e8, often annealed:
``selector.pressure`` may be changed between batches). Losses are refreshed by
``observe(indices, losses=...)`` whenever examples were in a batch.

Sampling is *with* replacement across batches (that is the method: hard examples come back
often, easy ones rarely) and without replacement within a batch (exact sequential sampling
without replacement). An epoch has as many batches as a random epoch.

A batch costs O(n log B), not a sort of the shard: the B ranks are drawn first, by inverse
CDF of the truncated geometric distribution of the ranks with repeats discarded (the same
distribution as sequential sampling without replacement), then the examples holding those
ranks are found by one ``np.argpartition`` with the ranks as ``kth``; examples with equal
losses (the unseen ones, say) share their block of ranks in a random order.
"""
from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
from numba import njit

from .._checks import check_indices, check_int, check_rows
from .base import OnlineSelector

logger = logging.getLogger(__name__)


class LossRankSelector(OnlineSelector):
    """Rank-based online batch selection with selection pressure ``s_e`` (DESIGN 2.2).

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
    drop_last:
        DistributedSampler's padding / dropping of the per-rank shards (``ceil(N / W)`` or
        ``N // W`` examples per rank, ``ceil(shard / B)`` batches).

    Each rank ranks and draws only within its shard of the epoch (a random split, fresh
    every epoch), with no communication. The cost per batch is O(n log B) (a partition of
    the shard's losses around the B drawn ranks), not a sort.

    Example
    -------
    >>> import numpy as np
    >>> sel = LossRankSelector(100, batch_size=10, seed=0, pressure=100)
    >>> sel.observe(np.arange(100), losses=np.arange(100.0))   # example 99 has the top loss
    >>> counts = np.bincount(sel.plan(epoch=0).indices(), minlength=100)
    >>> bool(counts[50:].sum() > counts[:50].sum())
    True
    """

    uses_feedback = True
    supports_start = True

    def __init__(self, num_examples: int, batch_size: int, *, seed: int = 0, pressure: float = 100.0,
                 initial_loss: float | None = None, drop_last: bool = False) -> None:
        super().__init__(num_examples, batch_size, seed=seed, drop_last=drop_last)
        self.pressure = pressure
        if initial_loss is not None and not math.isfinite(initial_loss):
            raise ValueError(f"initial_loss must be a finite number or None, got {initial_loss!r}")
        self.initial_loss = None if initial_loss is None else float(initial_loss)
        fill = np.inf if initial_loss is None else float(initial_loss)
        self.losses_ = np.full(self.num_examples, fill, dtype=np.float64)

    @property
    def pressure(self) -> float:
        return self._pressure

    @pressure.setter
    def pressure(self, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                or not math.isfinite(value) or value < 1:
            raise ValueError(f"pressure (s_e) must be a finite number >= 1, got {value!r}")
        self._pressure = float(value)

    def observe(self, indices: Any, losses: Any = None, logits: Any = None, embeddings: Any = None) -> None:
        """Record the latest per-example ``losses`` of ``indices`` (others are ignored)."""
        if losses is None:
            return
        idx = check_indices(indices, self.num_examples)
        self.losses_[idx] = check_rows(losses, len(idx), "losses", ndim=1)

    def probabilities(self, n: int) -> np.ndarray:
        """Selection probabilities of ranks 0..n-1 (largest loss first)."""
        n = check_int(n, "n", minimum=1)
        if n == 1:
            return np.ones(1)
        logp = -math.log(self._pressure) * np.arange(n) / (n - 1)
        p = np.exp(logp - logp.max())
        return p / p.sum()

    def _next_batch(self, run: dict[str, Any], rng: np.random.Generator) -> np.ndarray:
        shard = run["shard"]
        n = len(shard)
        k = min(self.batch_size, n)
        ranks = _draw_ranks(n, k, self._pressure, rng)
        return shard[_examples_of_ranks(self.losses_[shard], ranks, rng)]

    def _scores_state(self) -> dict[str, Any]:
        return {"losses": self.losses_.copy(), "pressure": self._pressure}

    def _load_scores(self, state: dict[str, Any]) -> None:
        losses = np.asarray(state["losses"], dtype=np.float64)
        if losses.shape != (self.num_examples,):
            raise ValueError(f"state has losses for {losses.shape} examples, expected {self.num_examples}")
        self.losses_ = losses.copy()
        self.pressure = state["pressure"]

    def __repr__(self) -> str:
        return (f"LossRankSelector(num_examples={self.num_examples}, batch_size={self.batch_size}, "
                f"pressure={self._pressure:g}, seed={self.seed})")


# Rank draws per round of the rejection sampler (times the ranks still missing) and rounds
# before the rest is drawn by Gumbel top-k over the remaining ranks (O(n)): rejection is
# cheap while the batch is a small part of the probability mass, Gumbel when it is not
# (k close to n under high pressure, where repeats become the rule).
_DRAW_FACTOR = 2
_DRAW_ROUNDS = 3


def _draw_ranks(n: int, k: int, pressure: float, rng: np.random.Generator) -> np.ndarray:
    """k distinct ranks of 0..n-1 in the order of sequential sampling without replacement
    with ``p_r ∝ pressure ** (-r / (n - 1))``.

    Independent draws with the repeats discarded give exactly that sequence: whatever was
    drawn so far, the next new rank is distributed as p over the ranks not yet drawn. So is
    a switch to Gumbel top-k over the ranks not yet drawn after some rounds (the switch
    depends only on the number of repeats, which is independent of which new rank comes
    next), which bounds the work when repeats dominate.
    """
    log_q = -math.log(pressure) / max(n - 1, 1)  # p_r ∝ q ** r, 0 < q <= 1
    chosen: list[np.ndarray] = []
    seen = np.zeros(n, dtype=bool)
    have = 0
    if k < n:
        # inverse CDF of the truncated geometric: F(r) = (1 - q^(r+1)) / (1 - q^n)
        mass = -math.expm1(n * log_q)  # 1 - q^n
        for _ in range(_DRAW_ROUNDS):
            u = rng.random(_DRAW_FACTOR * (k - have) + 8)
            if log_q == 0.0:
                r = (u * n).astype(np.int64)
            else:
                r = (np.log1p(-u * mass) / log_q).astype(np.int64)
            np.minimum(r, n - 1, out=r)  # u * mass rounding up to 1 - q^n
            # first occurrences, in draw order, of ranks not drawn in earlier rounds
            _, first = np.unique(r, return_index=True)
            new = r[np.sort(first)]
            new = new[~seen[new]][: k - have]
            seen[new] = True
            chosen.append(new)
            have += new.size
            if have == k:
                return np.concatenate(chosen)
    # Gumbel top-(k - have) over the ranks not drawn yet (all of them when k == n)
    rest = np.flatnonzero(~seen)
    keys = log_q * rest + rng.gumbel(size=rest.size)
    m = k - have
    top = np.argpartition(-keys, m - 1)[:m] if m < rest.size else np.arange(rest.size)
    top = top[np.argsort(-keys[top], kind="stable")]
    chosen.append(rest[top])
    return np.concatenate(chosen)


def _examples_of_ranks(losses: np.ndarray, ranks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Positions in ``losses`` of the examples with the given (distinct) ranks, largest
    loss first, ties broken uniformly at random: one partial sort around the ranks."""
    n = losses.size
    neg = -losses
    order = np.argsort(ranks, kind="stable")
    kth = ranks[order]
    part = np.argpartition(neg, kth) if kth.size < n else np.argsort(neg, kind="stable")
    picked = part[kth]
    first, count, members, offsets = _tie_blocks(neg, part, kth)
    # a value shared with other examples (picked or not): its picked ranks get distinct
    # examples of its block of ranks, uniformly at random
    for g in np.flatnonzero(count > 1):
        stop = first[g + 1] if g + 1 < first.size else kth.size
        picked[first[g]:stop] = rng.choice(members[offsets[g]:offsets[g] + count[g]], stop - first[g], replace=False)
    out = np.empty_like(picked)
    out[order] = picked
    return out


@njit(cache=True, nogil=True)
def _tie_blocks(neg: np.ndarray, part: np.ndarray, kth: np.ndarray):  # pragma: no cover - numba
    """For ``part`` partitioned around the sorted ranks ``kth``: the groups of consecutive
    ranks with the same value (start in ``kth`` of each), the number of examples of every
    group's value, and those examples (``members[offsets[g]:]``, only for groups of more
    than one). Examples equal to a group's value lie between the ranks around the group, so
    every position is scanned at most twice: O(n)."""
    k = kth.size
    n = part.size
    first = np.empty(k, np.int64)
    groups = 0
    for i in range(k):
        if i == 0 or neg[part[kth[i]]] != neg[part[kth[i - 1]]]:
            first[groups] = i
            groups += 1
    first = first[:groups]
    count = np.zeros(groups, np.int64)
    offsets = np.zeros(groups, np.int64)
    members = np.empty(0, np.int64)
    total = 0
    buf = np.empty(16, np.int64)
    for g in range(groups):
        a = first[g]
        b = first[g + 1] - 1 if g + 1 < groups else k - 1
        v = neg[part[kth[a]]]
        lo = kth[a - 1] + 1 if a > 0 else 0
        hi = kth[b + 1] if b + 1 < k else n
        c = 0
        for p in range(lo, hi):
            if neg[part[p]] == v:
                c += 1
        count[g] = c
        offsets[g] = total
        if c > 1:
            if total + c > buf.size:
                bigger = np.empty(max(2 * buf.size, total + c), np.int64)
                bigger[:total] = buf[:total]
                buf = bigger
            for p in range(lo, hi):
                if neg[part[p]] == v:
                    buf[total] = part[p]
                    total += 1
    members = buf[:total]
    return first, count, members, offsets


__all__ = ["LossRankSelector"]
