"""SMDL's greedy over a pool, through the compiled kernels of
:mod:`batchsel.selectors._smdl_kernels`: a batch's random draws, the pool rows kept across
batches (:class:`RowCache`), the coverage side of a stretch of batches, and the kernel
calls. :class:`PoolSelection` gives these to :class:`~batchsel.SubmodularSelector`, which
decides which pool, and when (docs: design/smdl.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from batchsel.core.checks import check_int
from batchsel.core.rng import stream_key
from batchsel.selectors._smdl_kernels import smdl_draws, smdl_select, smdl_step, stretch_setup
from batchsel.selectors.runs import Run
from batchsel.selectors.sharding import epoch_rng

_NO_POSITIONS = np.zeros(0, dtype=np.int64)
_NO_UNIFORMS = np.zeros((0, 0), dtype=np.float64)
_NOT_FINITE = (
    "the SMDL terms of this pool are not finite (the embeddings' distances overflow float32); "
    "rescale the embeddings (e.g. divide them by their standard deviation)"
)


class RowCache:
    """A run's cached pool rows (see :func:`~batchsel.selectors._smdl_kernels.smdl_step`),
    for the embeddings of one version; with ``coverage_every > 1``, also the current
    stretch's coverage side.

    Parameters
    ----------
    capacity : int
        Rows it holds (the pool size).
    d : int
        The embeddings' dimension.
    version : int
        The version of the embeddings the rows were read from.

    Example
    -------
    >>> cache = RowCache(8, 4, version=0)
    >>> cache.x.shape, int(cache.count[0])
    ((8, 4), 0)
    """

    def __init__(self, capacity: int, d: int, version: int) -> None:
        self.version = version
        self.pos = np.empty(capacity, dtype=np.int64)
        self.slot = np.empty(capacity, dtype=np.int64)
        self.count = np.zeros(1, dtype=np.int64)
        self.x = np.empty((capacity, d), dtype=np.float32)
        self.sq = np.empty(capacity, dtype=np.float32)
        self.dist = np.empty(capacity, dtype=np.float64)
        self.feats = np.empty((capacity, d), dtype=np.float32)
        self.fnan = np.zeros(capacity, dtype=np.int64)
        self.sim = np.empty((capacity, 0), dtype=np.float32)
        self.stamp = np.full(capacity, -1, dtype=np.int64)
        self.stretch = -1
        self.right_t = np.empty((d + 2, 0), dtype=np.float32)
        self.scale = 1.0
        self.cov_pos = np.empty(0, dtype=np.int64)
        self.zero_self = False


@dataclass(eq=False)
class SMDLRun(Run):
    """An SMDL run: ``order`` descending (the pool is a suffix of ``order[:m]``), where
    each batch's turn ends, and the pool rows kept across its batches.

    Parameters
    ----------
    ends : list of int, default []
        ``cumsum(sizes)``: the positions below ``ends[t]`` have had their turn by batch ``t``.
    cache : RowCache or None, default None
        The pool rows of the run's latest batch.
    **fields
        :class:`~batchsel.selectors.runs.Run`'s.
    """

    ends: list[int] = field(default_factory=list)
    cache: RowCache | None = None


class PoolSelection:
    """SMDL's batch from a pool: greedy on the weighted terms, in the compiled kernels
    (:meth:`select_from_pool` for any pool; an online run's next batch through
    :meth:`_greedy_batch`, its pool rows cached). Mixed into
    :class:`~batchsel.SubmodularSelector`, whose settings and scores it reads.

    Example
    -------
    >>> from batchsel import SubmodularSelector
    >>> x = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    >>> sorted(SubmodularSelector(x, 4).select_from_pool(np.arange(16), 4).tolist())
    [1, 7, 8, 12]
    """

    # the selector's settings and scores
    seed: int
    batch_size: int
    weights: tuple[float, ...]
    pool_size: int
    coverage_size: int | None
    optimizer: str
    epsilon: float
    coverage_every: int
    embeddings: Any
    entropy_: np.ndarray
    mean_: np.ndarray
    num_classes_: int | None
    _version: int

    def select_from_pool(
        self, pool: np.ndarray, k: int, rng: np.random.Generator | None = None, fixed: np.ndarray | None = None
    ) -> np.ndarray:
        """Positions (into ``pool``, a sorted array of example indices) of the ``k``
        examples of the batch greedy builds from the pool: the positions ``fixed`` (in the
        batch from the start), then greedy's picks in selection order."""
        rng = np.random.default_rng(self.seed) if rng is None else rng
        pool = np.asarray(pool, dtype=np.int64)
        p = len(pool)
        k = check_int(k, "k", minimum=1, maximum=p)
        fixed = np.zeros(0, dtype=np.int64) if fixed is None else np.asarray(fixed, dtype=np.int64)
        outside = fixed.size and (fixed.min() < 0 or fixed.max() >= p)
        if fixed.ndim != 1 or len(np.unique(fixed)) != len(fixed) or len(fixed) > k or outside:
            raise ValueError(f"fixed must be at most k={k} distinct positions in [0, {p}), got {fixed!r}")
        free = k - len(fixed)
        if free == 0:
            return fixed.copy()
        picks, finite = smdl_select(*self._kernel_args(pool, k, rng, fixed))
        if not finite:
            raise ValueError(_NOT_FINITE)
        return np.concatenate([fixed, picks])

    def _greedy_batch(self, run: SMDLRun, t: int, k: int, due: int, rng: Any) -> np.ndarray:
        """Batch ``t`` of ``run``, ``k`` examples greedy picks from the pool (the first
        ``pool_size`` unused positions, the ``due`` earliest of them in the batch from
        the start), its rows cached in the run; ``run.order`` and ``run.m`` updated."""
        order, m, shard = run.order, run.m, run.shard
        p = min(self.pool_size, m)
        stretch = self.coverage_every > 1 and self.weights[1] > 0
        typical, cov, sample, uniforms = self._draws(p, k, due, rng, draw_coverage=not stretch)
        emb = self.embeddings
        if type(emb) in (np.ndarray, np.memmap):  # float32 C-contiguous (load_embeddings): read in the kernel
            source, src_pool = emb, _NO_POSITIONS
        else:  # the pool's rows, in ascending position order
            source, src_pool = self._read_rows(shard[order[m - p : m][::-1]]), np.arange(p)
        cache = run.cache
        if cache is None or cache.version != self._version or cache.x.shape[0] < p:
            cache = run.cache = RowCache(self.pool_size, emb.shape[1], self._version)
        stamp = -1
        if stretch:
            stamp = t // self.coverage_every
            if cache.stretch != stamp:
                self._new_stretch(run, cache, t, stamp)
        batch, finite = smdl_step(
            source,
            src_pool,
            self.entropy_,
            self.mean_,
            self.weights,
            self._log_classes(),
            k,
            typical,
            cov,
            sample,
            uniforms,
            order,
            m,
            p,
            shard,
            due,
            cache.pos,
            cache.slot,
            cache.count,
            cache.x,
            cache.sq,
            cache.dist,
            cache.feats,
            cache.fnan,
            cache.sim,
            cache.stamp,
            stamp,
            cache.right_t,
            cache.scale,
            cache.cov_pos,
            cache.zero_self,
        )
        if not finite:
            raise ValueError(_NOT_FINITE)
        run.m = m - k
        return batch

    def _new_stretch(self, run: SMDLRun, cache: RowCache, t: int, stamp: int) -> None:
        """The coverage side of stretch ``stamp`` (batches ``stamp * coverage_every`` on):
        the coverage set and sigma^2 of the pool at its first batch ``t0``, from the run's
        state alone (``order[:m0]`` were the unused positions then), so a resumed run
        computes the same; the coverage set is drawn from its own generator."""
        t0 = stamp * self.coverage_every
        order, m, shard = run.order, run.m, run.shard
        m0 = m + sum(len(b) for b in run.drawn[t0:t])  # order[m:m0]: the batches t0..t-1
        p0 = min(self.pool_size, m0)
        pool0 = np.sort(np.concatenate([order[max(m - p0, 0) : m], order[m:m0]]))[:p0]  # the first p0 unused then
        q0 = p0 if self.coverage_size is None else min(self.coverage_size, p0)
        cov0 = np.arange(p0)
        if q0 < p0:
            cov0 = np.sort(epoch_rng(self.seed, run.epoch, run.rank, t0, 1).choice(p0, size=q0, replace=False))
        emb = self.embeddings
        if type(emb) in (np.ndarray, np.memmap):
            source, rows = emb, shard[pool0]
        else:
            source, rows = self._read_rows(shard[pool0]), np.arange(p0)
        cache.right_t, scale = stretch_setup(source, rows, cov0)
        cache.scale = float(scale)
        cache.cov_pos, cache.zero_self = pool0[cov0], q0 < p0
        if cache.sim.shape[1] != q0:
            cache.sim = np.empty((cache.x.shape[0], q0), dtype=np.float32)
        cache.stretch = stamp

    def _draws(self, p: int, k: int, nfixed: int, rng: Any, draw_coverage: bool = True) -> tuple:
        """A batch's random draws for a pool of ``p`` with ``nfixed`` examples in the batch
        from the start and ``k - nfixed >= 1`` to pick, from its key (an int, or 63 bits of
        a numpy Generator): the batch that fixes the scales, the coverage set (not drawn
        when it is the whole pool; the kernel sorts it), stochastic greedy's uniforms (and
        its sample size). Each comes from its own stream of the key, in one compiled call."""
        q = 0
        if draw_coverage and self.weights[1] > 0 and self.coverage_size is not None and self.coverage_size < p:
            q = self.coverage_size
        free, rest = k - nfixed, p - nfixed
        sample = 0
        if self.optimizer == "stochastic":
            sample = min(rest, max(1, math.ceil(rest / free * math.log(1.0 / self.epsilon))))
        typical, cov, uniforms = smdl_draws(stream_key(rng), p, k, q, free if sample else 0, sample)
        return typical, (cov if q else _NO_POSITIONS), sample, (uniforms if sample else _NO_UNIFORMS)

    def _read_rows(self, pool: np.ndarray) -> np.ndarray:
        """The pool's embeddings for an array type other than a plain array or memmap (a
        subclass may read its rows its own way): through its indexing, once."""
        return np.ascontiguousarray(self.embeddings[pool], dtype=np.float32)

    def _log_classes(self) -> float:
        """The entropy of an example whose logits were never observed (-1: no logits yet)."""
        return -1.0 if self.num_classes_ is None else math.log(self.num_classes_)

    def _kernel_args(self, pool: np.ndarray, k: int, rng: np.random.Generator, fixed: np.ndarray) -> tuple:
        """The arguments of :func:`smdl_select` for a pool (sorted example indices) with
        ``fixed`` pool positions in the batch and ``k - len(fixed) >= 1`` to pick: the
        batch's random draws (:meth:`_draws`) and the embeddings: a plain array (or memmap)
        whole, its pool rows read in the kernel; any other array type's pool rows, read
        once through its indexing."""
        typical, cov, sample, uniforms = self._draws(len(pool), k, len(fixed), rng)
        emb = self.embeddings
        if type(emb) in (np.ndarray, np.memmap):
            x, source = np.empty((0, emb.shape[1]), dtype=np.float32), emb
        else:
            x = source = self._read_rows(pool)
        return (
            x,
            source,
            self.entropy_,
            pool,
            self.mean_,
            self.weights,
            self._log_classes(),
            int(k),
            typical,
            cov,
            int(sample),
            uniforms,
            fixed,
        )


__all__ = ["PoolSelection", "RowCache", "SMDLRun"]
