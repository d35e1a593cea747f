"""Cluster-GCN for PyG, pip-only and data-parallel: :class:`ClusterData` cuts the graph by
METIS (pymetis), :class:`ClusterLoader` yields the subgraphs of random clusters, each rank
its own through :class:`ClusterBatchSelector` and the distributed sampler, or clusters packed
under a cost budget (``max_cost``: nodes plus edges, :meth:`ClusterData.costs`) with the
ranks' batches of one step of near-equal cost, through :class:`~batchsel.BucketSelector`."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from torch.utils.data import DataLoader

from batchsel.core.checks import check_int, check_number, check_seed
from batchsel.core.graph import metis_blocks
from batchsel.core.permutation import permutation
from batchsel.core.world import World
from batchsel.distributed.comm import Communicator
from batchsel.integrations.pyg.subgraphs import Subgraphs, require_pyg
from batchsel.loop.sampler import SelectionBatchSampler
from batchsel.plans.plan import EpochPlan
from batchsel.selectors.buckets.bucket import BucketSelector
from batchsel.selectors.buckets.costs import check_costs
from batchsel.selectors.offline import OfflineSelector
from batchsel.selectors.sharding import epoch_rng, split_batches

logger = logging.getLogger(__name__)

#: what :meth:`ClusterData.costs` counts per cluster
COST_KINDS = ("nodes+edges", "nodes", "edges")


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

    def costs(self, kind: str = "nodes+edges") -> np.ndarray:
        """Every cluster's cost: the size of the subgraph its nodes induce, the batch that
        :class:`ClusterLoader` makes of it alone.

        The edges are counted as ``edge_index`` holds them (an undirected edge stored in
        both directions counts twice, self loops and repeated edges count), so a cluster's
        edge count is the ``edge_index.size(1)`` of :class:`ClusterLoader`'s batch of it alone
        (without the outside edges ``keep_inter_cluster_edges`` adds to ``self[i]``). A batch of several clusters also holds the edges between them, which the sum
        of their costs leaves out (METIS cuts few). One pass over the nodes and edges, no
        subgraph built: time and memory grow as O(N + E).

        Parameters
        ----------
        kind : {"nodes+edges", "nodes", "edges"}, default "nodes+edges"
            The number of nodes plus the number of edges, or either alone.

        Returns
        -------
        numpy.ndarray
            float64, one cost per cluster (length ``num_parts``).

        Raises
        ------
        ValueError
            ``kind`` is none of those.

        Example
        -------
        >>> import torch
        >>> from torch_geometric.data import Data
        >>> ring = torch.arange(12)
        >>> parts = ClusterData(Data(edge_index=torch.stack([ring, (ring + 1) % 12]), num_nodes=12), 3, log=False)
        >>> parts.costs().tolist(), parts.costs("edges").tolist()
        ([7.0, 7.0, 7.0], [3.0, 3.0, 3.0])
        """
        if kind not in COST_KINDS:
            raise ValueError(f"kind must be one of {', '.join(map(repr, COST_KINDS))}, got {kind!r}")
        out = np.zeros(self.num_parts, dtype=np.float64)
        if kind != "edges":
            out += np.diff(self.partptr.numpy())
        if kind != "nodes":
            blocks = self.cluster.numpy()
            source, target = blocks[self._subgraphs.sources], blocks[self._subgraphs.targets]
            out += np.bincount(source[source == target], minlength=self.num_parts)
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
            permutation(epoch_rng(self.seed, epoch), self.num_examples)
            if self.shuffle
            else np.arange(self.num_examples)
        ).astype(np.int64)
        if world.size == 1:
            per_rank = [split_batches(order, self.batch_size)]
        else:
            t = self._batches_per_rank(world.size)
            per_rank = [np.array_split(shard, t) for shard in np.array_split(order, world.size)]
        return EpochPlan(per_rank, num_examples=self.num_examples, epoch=epoch, seed=self.seed, method="clusters")


def cluster_selector(
    cluster_data: ClusterData,
    batch_size: int | None = None,
    shuffle: bool | None = None,
    *,
    max_cost: float | None = None,
    cost: Any = None,
    seed: int = 0,
) -> OfflineSelector:
    """The selector of :class:`ClusterLoader`'s batches of cluster ids: ``batch_size``
    clusters (:class:`ClusterBatchSelector`), or clusters packed under ``max_cost``
    (:class:`~batchsel.BucketSelector`, ``packed=True``), with its checks.

    Parameters
    ----------
    cluster_data : ClusterData
        The clusters.
    batch_size, shuffle, max_cost, cost, seed :
        As :class:`ClusterLoader`'s.

    Returns
    -------
    OfflineSelector
        A :class:`ClusterBatchSelector` or a :class:`~batchsel.BucketSelector`.

    Raises
    ------
    ValueError
        ``batch_size`` and ``max_cost`` both given, ``max_cost`` not a finite number > 0,
        ``shuffle=False`` with ``max_cost`` or ``cost`` without it, a ``cost`` kind unknown or
        a cost array of the wrong length.

    Example
    -------
    >>> import torch
    >>> from torch_geometric.data import Data
    >>> ring = torch.arange(12)
    >>> parts = ClusterData(Data(edge_index=torch.stack([ring, (ring + 1) % 12]), num_nodes=12), 4, log=False)
    >>> type(cluster_selector(parts, max_cost=12)).__name__, type(cluster_selector(parts, 2)).__name__
    ('BucketSelector', 'ClusterBatchSelector')
    """
    if max_cost is None:
        if cost is not None:
            given = repr(cost) if isinstance(cost, str) else f"<{type(cost).__name__}>"
            raise ValueError(f"cost={given} weighs the clusters for max_cost: give max_cost too")
        return ClusterBatchSelector(
            len(cluster_data), 1 if batch_size is None else batch_size, seed=seed, shuffle=bool(shuffle)
        )
    if batch_size is not None:
        raise ValueError(
            f"give batch_size (clusters per batch) or max_cost (a budget of a batch's summed cluster "
            f"cost), not both: got batch_size={batch_size!r}, max_cost={max_cost!r}"
        )
    if check_number(max_cost, "max_cost", 0.0) <= 0:
        raise ValueError(f"max_cost must be > 0 (a budget of a batch's summed cluster cost), got {max_cost!r}")
    if shuffle is not None and not shuffle:
        raise ValueError(
            "shuffle=False cannot go with max_cost: the batches under max_cost are drawn anew from "
            "(seed, epoch), so fix seed instead (or pass batch_size for batches in cluster order)"
        )
    if isinstance(cost, str) and cost not in COST_KINDS:
        raise ValueError(f"cost must be one of {', '.join(map(repr, COST_KINDS))} or an array, got {cost!r}")
    if cost is None or isinstance(cost, str):
        costs = cluster_data.costs("nodes+edges" if cost is None else cost)
    else:
        costs = check_costs(cost, len(cluster_data), name="cost")
    return BucketSelector(costs, max_cost=max_cost, packed=True, seed=seed)


class ClusterLoader(DataLoader):
    """PyG's ``ClusterLoader``, pip-only and data-parallel: batches of ``batch_size``
    clusters of a :class:`ClusterData` (or of clusters packed under ``max_cost``), each
    the subgraph their nodes induce (``n_id``: the nodes' ids in the full graph).

    ``shuffle`` draws the clusters' order anew every epoch from (``seed``, epoch): call
    :meth:`set_epoch` before each epoch, as with ``DistributedSampler``. ``rank`` /
    ``world_size`` (default: from torch.distributed, mpiexec or torchrun, as
    :class:`~batchsel.integrations.SelectionBatchSampler` finds them) give each rank
    disjoint clusters that together cover the graph, in equally many batches.
    :meth:`state_dict` / :meth:`load_state_dict` resume mid-epoch exactly. Other keyword
    arguments go to ``DataLoader`` (``num_workers``, ``pin_memory``, ...).

    With ``max_cost`` the batches balance by cost instead of by count: clusters of
    similar cost are packed into batches whose summed cost (:meth:`ClusterData.costs`,
    nodes plus edges by default) stays within ``max_cost`` (a cluster over it is a batch
    alone), by :class:`~batchsel.BucketSelector` (``packed=True``). Every rank has as many
    batches, every cluster is in one batch per epoch, and the ranks' batches of one step
    cost nearly the same, so that no rank waits for another at the gradient all-reduce.
    Batches then hold different numbers of clusters (many small, few large).

    Parameters
    ----------
    cluster_data : ClusterData
        The clusters.
    batch_size : int or None, default None
        Clusters per batch (None: 1, PyG's default, unless ``max_cost`` is given).
    shuffle : bool or None, default None
        With ``batch_size``: a new random order every epoch (None: False, PyG's default).
        With ``max_cost`` the batches are always drawn anew from (``seed``, epoch):
        ``shuffle=False`` is a ValueError (fix ``seed`` for the same batches every run).
    max_cost : float or None, default None
        A budget of one batch's summed cluster cost, instead of ``batch_size`` (both
        given: ValueError). Must be a finite number > 0. The batch's own subgraph also
        holds the edges between its clusters, which the budget does not count.
    cost : str or array-like or None, default None
        With ``max_cost``: what a cluster costs, a kind of :meth:`ClusterData.costs`
        (None: ``"nodes+edges"``) or one number ``>= 0`` per cluster.
    rank, world_size : int or None, default None
        This process's rank and the number of ranks (None: found as above).
    seed : int, default 0
        Seeds the orders and the cost batches.
    comm : Communicator or None, default None
        The ranks' communicator (None: found as above).

    Example
    -------
    >>> import torch
    >>> from torch_geometric.data import Data
    >>> ring = torch.arange(12)
    >>> data = Data(x=torch.randn(12, 2), edge_index=torch.stack([ring, (ring + 1) % 12]))
    >>> loader = ClusterLoader(ClusterData(data, 3, log=False), batch_size=2, shuffle=True, rank=0, world_size=1)
    >>> [batch.num_nodes for batch in loader]
    [8, 4]
    >>> parts = ClusterData(data, 6, log=False)  # 6 clusters of 2 nodes and 1 edge: cost 3
    >>> ranks = [ClusterLoader(parts, max_cost=6, rank=r, world_size=2) for r in (0, 1)]
    >>> [[batch.num_nodes + batch.edge_index.size(1) for batch in loader] for loader in ranks]
    [[6, 3], [6, 3]]
    """

    def __init__(
        self,
        cluster_data: ClusterData,
        batch_size: int | None = None,
        shuffle: bool | None = None,
        *,
        max_cost: float | None = None,
        cost: Any = None,
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
        selector = cluster_selector(cluster_data, batch_size, shuffle, max_cost=max_cost, cost=cost, seed=seed)
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


__all__ = ["COST_KINDS", "ClusterData", "ClusterBatchSelector", "ClusterLoader", "cluster_selector"]
