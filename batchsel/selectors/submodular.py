"""Submodular batch selection (SMDL; Joseph, Teja R, Singh, Balasubramanian, IJCAI 2019).

Each step greedily picks a batch S of B examples from a pool of this rank's unused examples,
maximizing ``F(S) = l_u U(S) + l_r R(S) + l_m M(S) + l_f Fm(S)``: uncertainty (entropy of the
latest logits), facility-location coverage of the pool, closeness to the mean and feature
match, each term divided by its value on a random batch. The pool is a window sliding
through the shard in a random order, so every example is used once per epoch, at most
``max_delay`` batches after its turn. A batch is two compiled GIL-free calls (the kernels
are in :mod:`batchsel.selectors._smdl_kernels`).

The terms, the order within the epoch, the measured costs and how the default weights
(coverage alone) were chosen: docs/design/smdl.md.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Sequence

import numpy as np

from batchsel.core.checks import check_indices, check_int, check_rows, check_scale, load_embeddings
from batchsel.core.rng import CounterKeyedBatches
from batchsel.core.world import World
from batchsel.selectors._smdl_kernels import count_below
from batchsel.selectors.capabilities import SelectorCapabilities
from batchsel.selectors.online import OnlineSelector
from batchsel.selectors.smdl_pool import PoolSelection, SMDLRun

logger = logging.getLogger(__name__)

OPTIMIZERS = ("stochastic", "lazy")
DEFAULT_WEIGHTS = (0.0, 1.0, 0.0, 0.0)
# Rows of the embeddings read at a time when computing the mean (bounds memory on memmaps).
_MEAN_BLOCK = 1 << 16


def entropy_of_logits(logits: np.ndarray) -> np.ndarray:
    """Entropy (nats) of softmax(logits) per row, computed stably.

    >>> entropy_of_logits(np.zeros((1, 4))).round(4).tolist()
    [1.3863]
    """
    # z - max, log_p = z - log(sum(exp(z))), -sum(exp(log_p) * log_p), in two buffers
    # (the same operations, so the same values, with fewer temporaries and calls)
    z = np.array(logits, dtype=np.float64)
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    z -= np.log(p.sum(axis=1, keepdims=True))
    np.exp(z, out=p)
    p *= z
    h = p.sum(axis=1)
    return np.negative(h, out=h)


class SubmodularSelector(
    CounterKeyedBatches,
    PoolSelection,
    OnlineSelector[SMDLRun],
    partitions=("random", "submodular"),
    full_batches=True,
    # a batch's selection is hidden by a thread behind the step; draws without replacement
    # within an epoch, so a step of lag changes little (docs/design/sampler.md)
    default_prefetch=1,
    feedback_fields=("embeddings",),  # and the logits where U is weighed: capabilities()
):
    """Submodular mini-batch selection (SMDL; docs: design/smdl.md), online.

    Keyword groups: randomness (`seed`), the objective (`weights`), the pool and the
    epoch's order (`pool_size`, `max_delay`, `warmup_epochs`), coverage (`coverage_size`,
    `coverage_every`), greedy (`optimizer`, `epsilon`), ranks (`partition`, `drop_last`).

    Parameters
    ----------
    embeddings:
        ``N x d`` embeddings (array, torch tensor, ``.npy`` path opened memory-mapped, or
        an :class:`~batchsel.EmbeddingIndex`); refresh rows with
        ``observe(indices, embeddings=...)``.
    batch_size:
        B.
    seed:
        Seeds pools, stochastic greedy and the shards.
    weights:
        ``(l_u, l_r, l_m, l_f)``: uncertainty, diversity (facility location), closeness to
        the mean, feature match. Default: coverage alone, (0, 1, 0, 0), chosen on a
        validation split over 12 cases (module docstring); the paper's are
        (0.2, 0.1, 0.5, 0.2). Without ``l_u`` the logits given to :meth:`observe` change
        nothing.
    pool_size:
        Candidates per step: the first ``pool_size`` unused examples of the rank's shard in
        its random order, those due included (default ``8 * B``; see the module docstring).
    coverage_size:
        Examples of the pool whose coverage R measures (default 256; ``None``: the whole
        pool, best coverage, ``|P|^2 d`` work per batch). Keep it well above B.
    optimizer, epsilon:
        ``"stochastic"`` greedy with ``ceil(pool / B * ln(1 / epsilon))`` candidates per
        pick, or exact ``"lazy"`` greedy.
    warmup_epochs:
        Epochs ``< warmup_epochs`` draw random batches (without replacement).
    partition:
        ``"random"`` (a fresh split every epoch) or ``"submodular"`` (GreedMax shards).
    drop_last:
        DistributedSampler's: pad ranks by repeating examples, or drop the tail.
    max_delay:
        No example is used more than ``max_delay`` batches after the batch a random order
        would put it in (default 2; 0 gives random batches). Larger values give greedy more
        of each batch to choose and defer the examples it does not want for longer (see the
        module docstring).
    coverage_every:
        Batches for which the coverage set and sigma^2 of R are kept (default 1: drawn for
        every batch from its pool). With ``n > 1`` they are those of the pool at the first
        batch of each stretch of ``n`` batches (the coverage set drawn from a generator of
        its own, so a resumed run draws the same), and the similarities of the examples
        still in the pool are reused: about B examples enter the pool per batch, so only
        theirs are computed (``ceil(pool_size / B)``, 8 at the default pool, computes about
        a quarter of the similarities per batch on average). Other picks than the default's
        (why it is not the default: docs/design/smdl.md);
        :meth:`select_from_pool` draws its coverage set per call whatever this is.

    Notes
    -----
    Uncertainty uses the latest logits of each example. Before any logits were observed it
    is uniform (it does not change the choice); afterwards, examples never observed count as
    maximally uncertain (entropy ``ln C``), so they are explored first. Losses are ignored.
    ``partition="submodular"`` computes the GreedMax shards once per world size, from the
    embeddings at that moment; they are kept in :meth:`state_dict`.
    Within an epoch a rank never repeats an example (except the padding of
    ``drop_last=False``); every rank has ``ceil(shard / B)`` batches of B examples but
    the last, as ``BatchSampler`` cuts a shard.

    Example
    -------
    >>> import numpy as np
    >>> x = np.random.default_rng(0).normal(size=(300, 8)).astype(np.float32)
    >>> sel = SubmodularSelector(x, batch_size=32, seed=0, pool_size=128)
    >>> batches = list(sel.iter_batches(epoch=0))
    >>> len(batches), len(np.unique(np.concatenate(batches))), {len(b) for b in batches}
    (10, 300, {32, 12})
    >>> sel.observe(batches[0], logits=np.zeros((len(batches[0]), 10)))
    """

    run_type = SMDLRun

    def __init__(
        self,
        embeddings: Any,
        batch_size: int,
        *,
        seed: int = 0,
        weights: Sequence[float] = DEFAULT_WEIGHTS,
        pool_size: int | None = None,
        coverage_size: int | None = 256,
        optimizer: str = "stochastic",
        epsilon: float = 0.01,
        warmup_epochs: int = 0,
        partition: str = "random",
        drop_last: bool = False,
        max_delay: int = 2,
        coverage_every: int = 1,
    ) -> None:
        if hasattr(embeddings, "embeddings") and hasattr(embeddings, "knn_graph"):  # EmbeddingIndex
            embeddings = embeddings.embeddings
        self.embeddings = load_embeddings(embeddings)
        # the similarity and the distances to the mean are computed in float32
        check_scale(self.embeddings, "embeddings")
        super().__init__(self.embeddings.shape[0], batch_size, seed=seed, drop_last=drop_last, partition=partition)
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (4,):
            raise ValueError(f"weights must be 4 numbers (l_u, l_r, l_m, l_f), got {weights!r}")
        if not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
            raise ValueError(f"weights must be finite, >= 0 and not all 0, got {weights!r}")
        self.weights = tuple(float(v) for v in w)
        self.pool_size = 8 * self.batch_size if pool_size is None else check_int(pool_size, "pool_size", minimum=1)
        if self.pool_size < self.batch_size:
            raise ValueError(f"pool_size must be >= batch_size ({self.batch_size}), got {pool_size}")
        self.coverage_size = None if coverage_size is None else check_int(coverage_size, "coverage_size", minimum=1)
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
        self.optimizer = optimizer
        if not 0 < epsilon < 1:
            raise ValueError(f"epsilon must be in (0, 1), got {epsilon!r}")
        self.epsilon = float(epsilon)
        self.warmup_epochs = check_int(warmup_epochs, "warmup_epochs", minimum=0)
        self.max_delay = check_int(max_delay, "max_delay", minimum=0)
        self.coverage_every = check_int(coverage_every, "coverage_every", minimum=1)
        self._version = 0  # of the embeddings: a run's cached rows are for one version
        self.entropy_ = np.full(self.num_examples, np.nan, dtype=np.float32)
        self.num_classes_: int | None = None
        self._refreshed = False
        self.mean_ = self._mean()

    def capabilities(self) -> SelectorCapabilities:
        """The class's, with the logits among the feedback read where U is weighed: only
        U reads them, so without it a sampler shares no logits (and, without refreshed
        embeddings, no collective at all)."""
        capabilities = super().capabilities()
        if self.weights[0] > 0:
            return dataclasses.replace(capabilities, feedback_fields=("logits", "embeddings"))
        return capabilities

    def _mean(self) -> np.ndarray:
        total = np.zeros(self.embeddings.shape[1], dtype=np.float64)
        for start in range(0, self.num_examples, _MEAN_BLOCK):
            total += self.embeddings[start : start + _MEAN_BLOCK].sum(axis=0, dtype=np.float64)
        return total / self.num_examples

    def _partition_data(self) -> np.ndarray:
        return self.embeddings

    # -- feedback ---------------------------------------------------------------------
    def observe(self, indices: Any, losses: Any = None, logits: Any = None, embeddings: Any = None) -> None:
        """Record the latest logits (their entropy) and/or refreshed embeddings of
        ``indices``; losses are not used by SMDL."""
        idx = check_indices(indices, self.num_examples)
        if logits is not None:
            z = check_rows(logits, len(idx), "logits", ndim=2)
            if self.num_classes_ is not None and z.shape[1] != self.num_classes_:
                raise ValueError(f"logits have {z.shape[1]} classes, earlier logits had {self.num_classes_}")
            self.num_classes_ = int(z.shape[1])
            self.entropy_[idx] = entropy_of_logits(z)
        if embeddings is not None:
            e = check_rows(embeddings, len(idx), "embeddings", ndim=2)
            if e.shape[1] != self.embeddings.shape[1]:
                raise ValueError(f"embeddings have dimension {e.shape[1]}, expected {self.embeddings.shape[1]}")
            check_scale(e, "embeddings", underflow=False)  # a few rows may be tiny; none may overflow
            if not self._refreshed:  # the caller's array or memmap is never written
                logger.info("copying the %d x %d embeddings to refresh them", *self.embeddings.shape)
                self.embeddings = np.array(self.embeddings, dtype=np.float32, order="C")
                self._refreshed = True
            idx, last = np.unique(idx[::-1], return_index=True)  # the last row wins for repeats
            e = e[::-1][last]
            self.mean_ += (e.astype(np.float64) - self.embeddings[idx]).sum(axis=0) / self.num_examples
            self.embeddings[idx] = e
            self._version += 1

    def _scores_state(self) -> dict[str, Any]:
        state = {"entropy": self.entropy_.copy(), "num_classes": self.num_classes_, "mean": self.mean_.copy()}
        if self._refreshed:
            state["embeddings"] = self.embeddings.copy()
        return state

    def _load_scores(self, state: dict[str, Any]) -> None:
        entropy = np.asarray(state["entropy"], dtype=np.float32)
        if entropy.shape != (self.num_examples,):
            raise ValueError(f"state has entropies for {entropy.shape} examples, expected {self.num_examples}")
        self.entropy_ = entropy.copy()
        self.num_classes_ = state["num_classes"]
        self.mean_ = np.asarray(state["mean"], dtype=np.float64).copy()
        if "embeddings" in state:
            self.embeddings = np.array(state["embeddings"], dtype=np.float32, order="C")
            self._refreshed = True
        self._version += 1

    # -- selection --------------------------------------------------------------------
    def _due(self, sizes: np.ndarray, t: int, length: int) -> int:
        """Positions (into the shard) below this are due at batch ``t``: a position's turn
        is the batch that cutting the shard in order into ``sizes`` puts it in, and it is
        due ``max_delay`` batches later; at the last batch every position is."""
        if t >= len(sizes) - 1:
            return length
        turn = t + 1 - self.max_delay
        return int(sizes[:turn].sum()) if turn > 0 else 0

    def _handed_over(self, k: int, m: int, left: int) -> int:
        """How many of a batch's ``k`` examples are taken in turn order at the end of the
        epoch (``m`` unused, ``left`` batches to go, this one included): over the last
        ``h = ceil(pool_size / B)`` batches a share that grows to all of it, ``1 - after /
        (h B)`` of ``after = m - k`` examples still to come, so that a short last batch
        is not greedy's leftovers either (full batches: ``(h - left + 1) / h``)."""
        handover = -(-self.pool_size // self.batch_size)
        if left > handover:
            return 0
        span = handover * self.batch_size
        return k * max(0, span - (m - k)) // span

    def _next_batch(self, run: SMDLRun, rng: Any) -> np.ndarray:
        order, m, sizes, shard = run.order, run.m, run.sizes, run.shard
        t = len(run.drawn)
        count = len(sizes)
        k = min(int(sizes[t]), m) if t < count else min(self.batch_size, m)
        # self._due(sizes, t, len(shard)), from the run's cumulative sizes
        turn = t + 1 - self.max_delay
        bound = len(shard) if t >= count - 1 else (run.ends[turn - 1] if turn > 0 else 0)
        due = count_below(order, m, bound)
        # hand over to the turn order over the last ceil(pool / B) batches (module docstring)
        due = max(due, self._handed_over(k, m, count - t))
        if run.epoch < self.warmup_epochs or due >= k:
            # random batch (the shard is shuffled), or more due than fit: earliest first
            pool_pos = order[m - k : m][::-1].copy()  # the first k unused positions, ascending
            order[m - k : m] = pool_pos
            run.m = m - k
            return shard[pool_pos]
        # the pool: the first pool_size unused positions; the due ones are among them
        return self._greedy_batch(run, t, k, due, rng)

    def _new_run(self, epoch: int, world: World) -> SMDLRun:
        run = super()._new_run(epoch, world)
        run.order = run.order[::-1].copy()  # descending: the pool is a suffix of order[:m]
        run.ends = np.cumsum(run.sizes).tolist()  # where each batch's turn ends (see _due)
        return run

    def _restore_run(self, run: SMDLRun) -> None:
        super()._restore_run(run)  # may re-cut the sizes
        m = run.m
        run.order[:m] = np.sort(run.order[:m])[::-1]  # a no-op for states written here
        run.ends = np.cumsum(run.sizes).tolist()

    def __repr__(self) -> str:
        return (
            f"SubmodularSelector(num_examples={self.num_examples}, batch_size={self.batch_size}, "
            f"weights={self.weights}, pool_size={self.pool_size}, optimizer={self.optimizer!r}, "
            f"partition={self.partition!r}, seed={self.seed})"
        )


__all__ = ["SubmodularSelector", "entropy_of_logits"]
