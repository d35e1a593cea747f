"""Graph-consistent stochastic mini-batches (Thulasidasan & Bilmes 2016; the batching of
Cluster-GCN).

The k-NN affinity graph (or a graph the user has) is cut by METIS into many small blocks
of about ``B / q`` examples; every epoch the blocks are shuffled and the examples, block
after block, are cut into batches of ``B`` (``whole_blocks=True``: each batch is ``q``
whole blocks, of varying size). Batches keep most graph edges inside them, so a graph-regularized loss that
only uses in-batch edges (:mod:`batchsel.loop.losses`) loses little, and they stay stochastic
from epoch to epoch. The METIS partition depends only on the graph and the seed; it is
computed once and cached (in memory, and in ``cache_dir`` if given).
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from batchsel.core.checks import check_graph, check_int
from batchsel.core.graph import metis_blocks as _metis_blocks
from batchsel.core.io import save_npy
from batchsel.core.world import World
from batchsel.plans.plan import EpochPlan
from batchsel.selectors.offline import OfflineSelector
from batchsel.selectors.sharding import epoch_rng, even_split

logger = logging.getLogger(__name__)


class GraphBlockSelector(
    OfflineSelector,
    # where the METIS cache lives does not change the blocks; neighbors only builds the
    # graph from an EmbeddingIndex, and the graph itself is fingerprinted
    unplanned_params=("cache_dir", "neighbors"),
):
    """Batches of ``q`` METIS blocks of a graph, shuffled every epoch (docs: design/graph-batches.md).

    Parameters
    ----------
    graph:
        ``N x N`` scipy sparse adjacency / affinity matrix (weights >= 0; symmetrized by
        max for METIS if needed), or an :class:`~batchsel.EmbeddingIndex`, whose
        ``knn_graph(k=neighbors)`` is used.
    batch_size:
        Target B.
    seed:
        Seeds METIS and the per-epoch shuffles.
    blocks_per_batch:
        q (default ``max(1, round(B / 32))``, i.e. blocks of about 32 examples).
    block_size:
        Alternative to ``blocks_per_batch``: ``q = round(B / block_size)``.
    drop_last:
        DistributedSampler's policy at the batch level: ranks are equalized by repeating
        some of their batches (``False``) or by dropping the extra batches (``True``).
    cache_dir:
        Folder where the METIS partition is stored (named by a hash of the graph, the
        number of blocks and the seed) and reused by other ranks and runs.
    neighbors:
        k of the k-NN graph when ``graph`` is an EmbeddingIndex.
    whole_blocks:
        ``False`` (default): the shuffled blocks, one after the other, are cut into batches
        of exactly B and a shorter last one (dropped with ``drop_last``), as
        ``BatchSampler`` cuts a shuffled epoch: one batch shape for compiled models. A
        batch is then ``q - 1`` whole blocks and parts of two. ``True``: every batch is
        ``q`` whole blocks; sizes vary with METIS's balance.

    Notes
    -----
    The ``q * round(N / B)`` METIS blocks hold about ``B / q`` examples each. With whole
    blocks the epoch has ``M = round(N / B)`` batches (at least 1) of ``q`` blocks, and
    their sizes are not exactly B: METIS balances blocks to within a few percent, and a
    batch's size is the sum of its blocks' (on k-NN graphs within +-25% of ``N / M``,
    tested; :meth:`batch_size_range` reports them). Otherwise ``M = ceil(N / B)`` (``N //
    B`` with ``drop_last``). Every example is in exactly one batch per epoch; batch i goes
    to rank ``i % W`` (DistributedSampler's interleave), so ``world_size`` must be at
    most M.

    Example
    -------
    >>> import numpy as np
    >>> from batchsel import EmbeddingIndex
    >>> x = np.random.default_rng(0).normal(size=(400, 4)).astype(np.float32)
    >>> graph = EmbeddingIndex(x, metric="euclidean", progress=False).knn_graph(k=8)
    >>> sel = GraphBlockSelector(graph, batch_size=40, seed=0, blocks_per_batch=4)
    >>> plan = sel.plan(epoch=0, world_size=2)
    >>> plan.num_batches, sorted(plan.indices().tolist()) == list(range(400))
    (5, True)
    """

    def __init__(
        self,
        graph: Any,
        batch_size: int,
        *,
        seed: int = 0,
        blocks_per_batch: int | None = None,
        block_size: int | None = None,
        drop_last: bool = False,
        cache_dir: str | os.PathLike | None = None,
        neighbors: int = 10,
        whole_blocks: bool = False,
    ) -> None:
        if hasattr(graph, "knn_graph") and hasattr(graph, "embeddings"):  # EmbeddingIndex
            graph = graph.knn_graph(k=check_int(neighbors, "neighbors", minimum=1))
        self.graph = check_graph(graph)  # explicit zeros dropped
        if self.graph.nnz and float(self.graph.data.min()) < 0:
            raise ValueError(f"graph weights must be >= 0, found {float(self.graph.data.min())}")
        if self.graph.nnz == self.graph.diagonal().astype(bool).sum():
            # METIS would cut an edgeless graph arbitrarily (and weights scaled by a largest
            # weight of 0 were NaN: a segfault in METIS)
            raise ValueError(
                f"graph has no edges of weight > 0 between distinct nodes ({self.graph.shape[0]} nodes; "
                f"stored zeros and self loops are no edges); pass an affinity graph with positive "
                f"weights (e.g. EmbeddingIndex(x).knn_graph()) or use RandomSelector"
            )
        super().__init__(self.graph.shape[0], batch_size, seed=seed, drop_last=drop_last)
        b = self.batch_size
        if blocks_per_batch is not None:
            q = check_int(blocks_per_batch, "blocks_per_batch", minimum=1, maximum=b)
            if block_size is not None and max(1, round(b / check_int(block_size, "block_size", minimum=1))) != q:
                raise ValueError(
                    f"blocks_per_batch={blocks_per_batch} and block_size={block_size} disagree "
                    f"for batch_size={b}: give one of them"
                )
        elif block_size is not None:
            q = max(1, round(b / check_int(block_size, "block_size", minimum=1, maximum=b)))
        else:
            q = max(1, round(b / 32))
        self.whole_blocks = bool(whole_blocks)
        block_batches = max(1, int(self.num_examples / b + 0.5))  # batches of whole blocks
        # blocks hold at least one example each
        self.blocks_per_batch = min(q, self.num_examples // block_batches)
        if self.blocks_per_batch != q:
            logger.warning(
                "blocks_per_batch lowered from %d to %d: too few examples for %d batches of %d blocks",
                q,
                self.blocks_per_batch,
                block_batches,
                q,
            )
        self.num_blocks = self.blocks_per_batch * block_batches
        if self.whole_blocks:
            self.num_batches_total = block_batches
        else:
            self.num_batches_total = max(1, self.num_examples // b if drop_last else -(-self.num_examples // b))
        self.cache_dir = None if cache_dir is None else os.fspath(cache_dir)
        self.neighbors = check_int(neighbors, "neighbors", minimum=1)
        self._blocks: np.ndarray | None = None
        self._within: np.ndarray | None = None

    def get_params(self) -> dict[str, Any]:
        """The constructor's parameters, with ``blocks_per_batch`` the q in use (from
        ``block_size``, lowered when there are too few examples) and ``block_size=None``,
        so that rebuilding from them gives the same blocks.

        >>> import scipy.sparse as sp
        >>> g = sp.random(60, 60, density=0.2, random_state=0, format="csr")
        >>> p = GraphBlockSelector(g + g.T, 20, block_size=10).get_params()
        >>> p["blocks_per_batch"], p["block_size"], p["graph"].shape
        (2, None, (60, 60))
        """
        return {
            "graph": self.graph,
            "batch_size": self.batch_size,
            "seed": self.seed,
            "blocks_per_batch": self.blocks_per_batch,
            "block_size": None,
            "drop_last": self.drop_last,
            "cache_dir": self.cache_dir,
            "neighbors": self.neighbors,
            "whole_blocks": self.whole_blocks,
        }

    # -- the partition ----------------------------------------------------------------
    def _graph_key(self) -> str:
        h = hashlib.sha256()
        for arr in (self.graph.indptr, self.graph.indices, self.graph.data):
            h.update(np.ascontiguousarray(arr).tobytes())
        h.update(f"{self.num_blocks}:{self.seed}".encode())
        return h.hexdigest()[:20]

    @property
    def blocks_(self) -> np.ndarray:
        """Block id of every example (METIS; computed once, cached)."""
        if self._blocks is None:
            path = None
            if self.cache_dir is not None:
                path = os.path.join(self.cache_dir, f"metis-{self._graph_key()}.npy")
                if os.path.exists(path):
                    blocks = np.load(path)
                    if blocks.shape == (self.num_examples,) and blocks.dtype == np.int64:
                        logger.info("METIS partition read from %s", path)
                        self._blocks = blocks
                        return blocks
                    logger.warning("ignoring %s: not a partition of this graph", path)
            self._blocks = _metis_blocks(self.graph, self.num_blocks, self.seed)
            if path is not None:
                save_npy(path, self._blocks)
        return self._blocks

    def _within_block_rank(self) -> np.ndarray:
        """Every example's rank in a reverse Cuthill-McKee order of the edges inside its
        block: neighbours come close together, so a batch boundary that cuts a block
        leaves most of its edges on one side (more of the edge weight stays in batches than
        with a random order inside blocks; measured: docs/design/graph-batches.md)."""
        if self._within is None:
            blocks = self.blocks_
            g = self.graph.tocoo()
            inner = blocks[g.row] == blocks[g.col]
            n = self.num_examples
            a = sp.csr_matrix((np.ones(int(inner.sum())), (g.row[inner], g.col[inner])), shape=(n, n))
            order = reverse_cuthill_mckee(a + a.T, symmetric_mode=True)
            self._within = np.empty(n, dtype=np.int64)
            self._within[order] = np.arange(n)
        return self._within

    @property
    def block_sizes_(self) -> np.ndarray:
        return np.bincount(self.blocks_, minlength=self.num_blocks)

    def batch_size_range(self) -> tuple[int, int]:
        """The smallest and largest possible batch: with whole blocks the sums of the q
        smallest / largest blocks, otherwise the epoch's last batch and B."""
        if not self.whole_blocks:
            n, b = self.num_examples, self.batch_size
            last = b if self.drop_last or n % b == 0 else n % b
            return (last, b) if n >= b else (n, n)
        sizes = np.sort(self.block_sizes_)
        q = self.blocks_per_batch
        return int(sizes[:q].sum()), int(sizes[-q:].sum())

    # -- the interface ----------------------------------------------------------------
    def world_error(self, world_size: int) -> str | None:
        """At most one rank per example and per batch of the epoch."""
        error = super().world_error(world_size)
        if error is None and world_size > self.num_batches_total:
            error = (
                f"world_size must be <= the number of batches per epoch ({self.num_batches_total}), got {world_size}"
            )
        return error

    def _plan(self, epoch: int, world: World) -> EpochPlan:
        blocks = self.blocks_
        rng = epoch_rng(self.seed, epoch)
        # a random order of blocks
        block_rank = rng.permutation(self.num_blocks)[blocks]
        if self.whole_blocks:
            order = np.lexsort((rng.random(self.num_examples), block_rank))
            batch_of = block_rank[order] // self.blocks_per_batch
            bounds = np.searchsorted(batch_of, np.arange(self.num_batches_total + 1))
        else:  # the blocks in their order, each in its graph order one way or the other, cut every B
            within = self._within_block_rank()
            backwards = (rng.random(self.num_blocks) < 0.5)[blocks]
            order = np.lexsort((np.where(backwards, -within, within), block_rank))
            bounds = np.minimum(np.arange(self.num_batches_total + 1) * self.batch_size, self.num_examples)
        batches = [order[bounds[i] : bounds[i + 1]].astype(np.int64) for i in range(self.num_batches_total)]
        ids = even_split(np.arange(self.num_batches_total), world.size, self.drop_last)
        return EpochPlan(
            [[batches[i] for i in rank_ids] for rank_ids in ids],
            num_examples=self.num_examples,
            epoch=epoch,
            seed=self.seed,
            method="graph_blocks",
        )

    def _num_batches(self, world: World) -> int:
        m = self.num_batches_total
        return m // world.size if self.drop_last else -(-m // world.size)

    def __repr__(self) -> str:
        return (
            f"GraphBlockSelector(num_examples={self.num_examples}, batch_size={self.batch_size}, "
            f"blocks_per_batch={self.blocks_per_batch}, num_blocks={self.num_blocks}, seed={self.seed}"
            f"{', whole_blocks=True' if self.whole_blocks else ''})"
        )


__all__ = ["GraphBlockSelector"]
