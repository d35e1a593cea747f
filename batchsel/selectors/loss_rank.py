"""Online batch selection by loss rank (Loshchilov & Hutter, 2015) — a baseline.

Examples are ranked by their latest known loss, largest first; the example of rank r
(0-based, among the n examples of this rank's shard) is drawn with probability
proportional to ``exp(-ln(s_e) * r / (n - 1))``, so the top example is exactly ``s_e``
times as likely as the last (the selection pressure, typically 1e2..1e8, often annealed:
``selector.pressure`` may be changed between batches). Losses are refreshed by
``observe(indices, losses=...)`` whenever examples were in a batch.

Sampling is *with* replacement across batches (that is the method: hard examples come back
often, easy ones rarely) and without replacement within a batch (Gumbel top-k, exact
sequential sampling without replacement). An epoch has as many batches as a random epoch.
"""
from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

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
    every epoch), with no communication. The cost per batch is a sort of the shard's
    losses, O(n log n).

    Example
    -------
    >>> import numpy as np
    >>> sel = LossRankSelector(100, batch_size=10, seed=0, pressure=100)
    >>> sel.observe(np.arange(100), losses=np.arange(100.0))   # example 99 has the top loss
    >>> counts = np.bincount(sel.plan(epoch=0).indices(), minlength=100)
    >>> bool(counts[50:].sum() > counts[:50].sum())
    True
    """

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
        losses = self.losses_[shard]
        # rank: largest loss first, random order among equal losses (e.g. the unseen)
        ranked = np.lexsort((rng.random(n), -losses))
        logp = -math.log(self._pressure) * np.arange(n) / max(n - 1, 1)
        keys = logp + rng.gumbel(size=n)  # Gumbel top-k: sampling without replacement
        top = np.argpartition(-keys, k - 1)[:k] if k < n else np.arange(n)
        top = top[np.argsort(-keys[top], kind="stable")]
        return shard[ranked[top]]

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


__all__ = ["LossRankSelector"]
