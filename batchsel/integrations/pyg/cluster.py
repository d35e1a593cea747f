"""Cluster-GCN for PyG, pip-only and data-parallel: :class:`ClusterData` cuts the graph by
METIS (pymetis), :class:`ClusterLoader` yields the subgraphs of random clusters, each rank
its own through :class:`ClusterBatchSelector` and the distributed sampler."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from torch.utils.data import DataLoader

from batchsel.core.checks import check_int, check_seed
from batchsel.core.graph import metis_blocks
from batchsel.core.world import World
from batchsel.distributed.comm import Communicator
from batchsel.integrations.pyg.subgraphs import Subgraphs, require_pyg
from batchsel.loop.sampler import SelectionBatchSampler
from batchsel.plans.plan import EpochPlan
from batchsel.selectors.offline import OfflineSelector
from batchsel.selectors.sharding import epoch_rng, split_batches

logger = logging.getLogger(__name__)


class ClusterData(torch.utils.data.Dataset):
    """PyG's ``ClusterData``, pip-only: the graph of ``data`` cut into ``num_parts``
    clusters by METIS (pymetis), on the graph made undirected and without self loops.

    Parameters
    ----------
    data:
        A ``torch_geometric.data.Data`` with ``edge_index``; node attributes (``x``,
        ``y``, masks) and edge attributes (``edge_attr``, ``edge_weight``) are sliced per
        batch, others copied.
    num_parts:
        Number of clusters, in ``[1, num_nodes]``.
    recursive:
        METIS recursive bisection (PyG's default is k-way, ``False``).
    keep_inter_cluster_edges:
        ``self[i]`` also keeps the cluster's edges to nodes outside it (``csc``: from nodes
        outside it). Every end inside the cluster has its local id, in ``[0, num_nodes)``;
        an end outside has ``num_nodes`` + its id in ``data``, so no number means two nodes
        (``csr``: ``edge_index[1] - num_nodes`` gives the outside targets' ids in ``data``),
        and the edge attribute ``edge_outside`` is True for those edges. PyG numbers every target,
        inside or outside, by its position in its own permuted copy of the data: a target
        is outside when it is not in ``[partptr[i], partptr[i + 1])``. Batches of
        :class:`ClusterLoader` hold only the edges between their nodes either way.
    sparse_format:
        The order of every batch's edges: ``"csr"`` (PyG's default) sorts them by (row,
        col) of the batch's local ids, ``"csc"`` by (col, row), as PyG's ``sort_edge_index``
        does; with ``keep_inter_cluster_edges``, ``"csr"`` keeps the edges leaving the
        cluster and ``"csc"`` the edges entering it. Anything else is a ValueError.
    save_dir, filename, log:
        Accepted for PyG compatibility; the partition is cheap to recompute, so nothing
        is saved (``log``: a line at INFO level).
    seed:
        The METIS seed.

    Attributes
    ----------
    cluster:
        The cluster of every node (LongTensor of length ``num_nodes``).
    partptr, node_perm:
        Nodes sorted by cluster (``node_perm``, ascending ids within a cluster) and where
        each cluster starts in it (``partptr``, length ``num_parts + 1``).

    Example
    -------
    >>> import torch
    >>> from torch_geometric.data import Data
    >>> ring = torch.arange(12)
    >>> data = Data(x=torch.randn(12, 2), edge_index=torch.stack([ring, (ring + 1) % 12]))
    >>> parts = ClusterData(data, num_parts=3, log=False)
    >>> len(parts), sorted(torch.bincount(parts.cluster).tolist())
    (3, [4, 4, 4])
    """

    def __init__(
        self,
        data: Any,
        num_parts: int,
        recursive: bool = False,
        save_dir: Any = None,
        filename: Any = None,
        log: bool = True,
        keep_inter_cluster_edges: bool = False,
        sparse_format: str = "csr",
        *,
        seed: int = 0,
    ) -> None:
        require_pyg()
        if sparse_format not in ("csr", "csc"):
            raise ValueError(f"sparse_format must be 'csr' or 'csc', got {sparse_format!r}")
        self.sparse_format = sparse_format
        self._subgraphs = Subgraphs(data, sparse_format)
        n = self._subgraphs.num_nodes
        self.num_parts = check_int(num_parts, "num_parts", minimum=1, maximum=n)
        self.recursive = bool(recursive)
        self.keep_inter_cluster_edges = bool(keep_inter_cluster_edges)
        self.seed = check_seed(seed)
        src, dst = data.edge_index.detach().cpu().numpy()
        off_diagonal = src != dst
        if self.num_parts > 1 and not off_diagonal.any():
            raise ValueError(
                f"the graph has no edges between distinct nodes ({n} nodes, isolated but for self "
                f"loops): a partition would be arbitrary; use torch_geometric's RandomNodeLoader"
            )
        graph = sp.csr_matrix(
            (np.ones(int(off_diagonal.sum()), np.float32), (src[off_diagonal], dst[off_diagonal])), shape=(n, n)
        )
        graph.sum_duplicates()
        graph.data[:] = 1.0  # a repeated edge is one edge
        if log:
            logger.info("METIS: %d nodes, %d edges into %d clusters", n, graph.nnz, self.num_parts)
        blocks = metis_blocks(graph, self.num_parts, self.seed, recursive=self.recursive)
        node_perm = np.argsort(blocks, kind="stable")
        self.cluster = torch.from_numpy(blocks)
        self.node_perm = torch.from_numpy(node_perm)
        self.partptr = torch.from_numpy(np.concatenate([[0], np.cumsum(np.bincount(blocks, minlength=self.num_parts))]))
        self.data = data

    def __len__(self) -> int:
        return self.num_parts

    def nodes_of(self, clusters: Any) -> np.ndarray:
        """The node ids of ``clusters`` (cluster ids), cluster by cluster."""
        ids = np.asarray(clusters, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_parts):
            raise ValueError(f"cluster ids must be in [0, {self.num_parts}), got {ids.min()}..{ids.max()}")
        ptr, perm = self.partptr.numpy(), self.node_perm.numpy()
        return np.concatenate([perm[ptr[c] : ptr[c + 1]] for c in ids]) if ids.size else np.empty(0, np.int64)

    def __getitem__(self, idx: int) -> Any:
        idx = check_int(idx, "idx", minimum=0, maximum=self.num_parts - 1)
        nodes = self.nodes_of([idx])
        sub = self._subgraphs
        if not self.keep_inter_cluster_edges:
            return sub.batch(nodes)
        # every edge leaving (csc: entering) the cluster's nodes; an end outside is
        # len(nodes) + its id in data, past every local id
        pos, major = sub.out_edges(nodes)
        other = sub.index[pos]
        minor = sub.local_ids(nodes, other)
        outside = minor < 0
        minor[outside] = len(nodes) + other[outside]
        edge_ids, edge_index = sub.ordered(pos, major, minor)
        out = sub.batch(nodes, edges=(edge_ids, edge_index))
        out.edge_outside = torch.from_numpy(edge_index[0 if sub.csc else 1] >= len(nodes))
        return out

    def collate(self, clusters: list[int]) -> Any:
        """The batch of ``clusters``: the subgraph their nodes induce."""
        return self._subgraphs.batch(self.nodes_of(clusters))

    def __repr__(self) -> str:
        return f"ClusterData(num_nodes={self._subgraphs.num_nodes}, num_parts={self.num_parts})"


class ClusterBatchSelector(OfflineSelector):
    """Batches of cluster ids for :class:`ClusterLoader`: every epoch each cluster once, in
    a random order (``shuffle``) seeded from (seed, epoch). One rank: consecutive batches
    of ``batch_size`` clusters, the last one shorter (PyG's). ``W`` ranks: the order is cut
    into ``W`` contiguous shards whose sizes differ by at most one (no cluster repeated, none
    dropped), each cut into the same number of batches, ``ceil(ceil(P / W) / batch_size)``,
    of sizes that differ by at most one.

    Parameters
    ----------
    num_parts : int
        P, the number of clusters.
    batch_size : int
        Clusters per batch.
    seed : int, default 0
        Seeds the orders.
    shuffle : bool, default True
        A new random order every epoch (False: the clusters in order).

    Example
    -------
    >>> sel = ClusterBatchSelector(10, 2, shuffle=False)
    >>> [b.tolist() for b in sel.plan(0, world_size=3).batches(0)]
    [[0, 1], [2, 3]]
    """

    def __init__(self, num_parts: int, batch_size: int, *, seed: int = 0, shuffle: bool = True) -> None:
        super().__init__(num_parts, batch_size, seed=seed)
        self.shuffle = bool(shuffle)

    def get_params(self) -> dict[str, Any]:
        return {
            "num_parts": self.num_examples,
            "batch_size": self.batch_size,
            "seed": self.seed,
            "shuffle": self.shuffle,
        }

    def world_error(self, world_size: int) -> str | None:
        """At most one rank per cluster, and as many batches on every rank without
        repeating a cluster."""
        error = super().world_error(world_size)
        p, w = self.num_examples, world_size
        if error is None and w > 1 and p // w < self._batches_per_rank(w):
            error = (
                f"{p} clusters cannot be dealt to {w} ranks in equal numbers of batches of at most "
                f"{self.batch_size} without repeating one: use a num_parts that is a multiple of "
                f"world_size, or a larger batch_size"
            )
        return error

    def _batches_per_rank(self, world_size: int) -> int:
        per_rank = -(-self.num_examples // world_size)  # ceil divisions
        return -(-per_rank // self.batch_size)

    def _num_batches(self, world: World) -> int:
        return self._batches_per_rank(world.size)

    def _plan(self, epoch: int, world: World) -> EpochPlan:
        order = (
            epoch_rng(self.seed, epoch).permutation(self.num_examples) if self.shuffle else np.arange(self.num_examples)
        ).astype(np.int64)
        if world.size == 1:
            per_rank = [split_batches(order, self.batch_size)]
        else:
            t = self._batches_per_rank(world.size)
            per_rank = [np.array_split(shard, t) for shard in np.array_split(order, world.size)]
        return EpochPlan(per_rank, num_examples=self.num_examples, epoch=epoch, seed=self.seed, method="clusters")


class ClusterLoader(DataLoader):
    """PyG's ``ClusterLoader``, pip-only and data-parallel: batches of ``batch_size``
    clusters of a :class:`ClusterData`, each the subgraph their nodes induce (``n_id``:
    the nodes' ids in the full graph).

    ``shuffle`` draws the clusters' order anew every epoch from (``seed``, epoch): call
    :meth:`set_epoch` before each epoch, as with ``DistributedSampler``. ``rank`` /
    ``world_size`` (default: from torch.distributed, mpiexec or torchrun, as
    :class:`~batchsel.integrations.SelectionBatchSampler` finds them) give each rank
    disjoint clusters that together cover the graph, in equally many batches.
    :meth:`state_dict` / :meth:`load_state_dict` resume mid-epoch exactly. Other keyword
    arguments go to ``DataLoader`` (``num_workers``, ``pin_memory``, ...).

    Example
    -------
    >>> import torch
    >>> from torch_geometric.data import Data
    >>> ring = torch.arange(12)
    >>> data = Data(x=torch.randn(12, 2), edge_index=torch.stack([ring, (ring + 1) % 12]))
    >>> loader = ClusterLoader(ClusterData(data, 3, log=False), batch_size=2, shuffle=True, rank=0, world_size=1)
    >>> [batch.num_nodes for batch in loader]
    [8, 4]
    """

    def __init__(
        self,
        cluster_data: ClusterData,
        batch_size: int = 1,
        shuffle: bool = False,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        seed: int = 0,
        comm: Communicator | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(cluster_data, ClusterData):
            raise TypeError(f"cluster_data must be a batchsel ClusterData, got {type(cluster_data).__name__}")
        for key in ("sampler", "batch_sampler", "collate_fn"):
            if key in kwargs:
                raise ValueError(f"{key}= is set by ClusterLoader (it chooses each rank's clusters)")
        if kwargs.pop("drop_last", False):
            raise ValueError("drop_last=True is not supported: every cluster is in exactly one batch per epoch")
        self.cluster_data = cluster_data
        selector = ClusterBatchSelector(len(cluster_data), batch_size, seed=seed, shuffle=shuffle)
        self.batch_sampler_ = SelectionBatchSampler(selector, rank=rank, world_size=world_size, comm=comm)
        super().__init__(
            range(len(cluster_data)),  # type: ignore[arg-type]
            batch_sampler=self.batch_sampler_,
            collate_fn=cluster_data.collate,
            **kwargs,
        )

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose clusters the next iteration yields."""
        self.batch_sampler_.set_epoch(epoch)

    def state_dict(self, batches_done: int | None = None) -> dict[str, Any]:
        """Where this rank is in the epoch (see ``SelectionBatchSampler.state_dict``)."""
        return self.batch_sampler_.state_dict(batches_done=batches_done)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batch_sampler_.load_state_dict(state)


__all__ = ["ClusterData", "ClusterBatchSelector", "ClusterLoader"]
