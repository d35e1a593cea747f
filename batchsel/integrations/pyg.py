"""Cluster-GCN and GraphSAINT mini-batches for PyTorch Geometric, pip-only and data-parallel.

PyG's own ``ClusterData`` / ``ClusterLoader`` and GraphSAINT samplers need ``pyg-lib`` or
``torch-sparse``, which a pip-only install does not have. These classes take the same
arguments and yield the same kind of batches (``torch_geometric.data.Data``) from what
batchsel has: METIS through pymetis (:func:`batchsel.core.graph.metis_blocks`) and the
distributed sampler. Change one import::

    from batchsel.integrations.pyg import ClusterData, ClusterLoader

- :class:`ClusterData` partitions the graph (Chiang et al., KDD 2019, "Cluster-GCN");
  :class:`ClusterLoader` yields the subgraph induced by ``batch_size`` random clusters:
  node attributes sliced, edge attributes sliced, ``edge_index`` renumbered and sorted by
  (row, col) as PyG's (``sparse_format="csc"``: by (col, row)), and ``n_id`` the nodes'
  ids in the full graph. With ``rank`` / ``world_size`` (or under DDP or
  mpiexec) each rank gets disjoint clusters that together cover the graph every epoch, in
  the same number of batches; ``state_dict`` resumes mid-epoch exactly.
- :class:`GraphSAINTNodeSampler`, :class:`GraphSAINTEdgeSampler` and
  :class:`GraphSAINTRandomWalkSampler` (Zeng et al., ICLR 2020): random node, edge or
  random-walk subgraphs, edges sorted by (row, col), with PyG's ``sample_coverage``
  normalization (``node_norm``, ``edge_norm``); each rank draws its own from (seed, epoch,
  rank, step).

Install with ``pip install batchsel[pyg]`` (torch_geometric only).
"""

from __future__ import annotations

import copy
import logging
from typing import Any, Iterator

import numpy as np
import scipy.sparse as sp
import torch
from torch.utils.data import DataLoader

from batchsel.core.checks import check_int, check_seed
from batchsel.core.graph import metis_blocks
from batchsel.distributed.comm import Communicator, get_communicator
from batchsel.loop.sampler import SelectionBatchSampler
from batchsel.plans.plan import EpochPlan
from batchsel.selectors.base import Selector, epoch_rng, split_batches

logger = logging.getLogger(__name__)

# node-level attributes by name: a wrong length is an error, not a graph-level attribute
_NODE_NAMES = ("x", "y", "pos", "n_id", "node_norm")


def _require_pyg() -> Any:
    try:
        import torch_geometric
    except ImportError as exc:
        raise ImportError("batchsel.integrations.pyg needs torch_geometric (pip install batchsel[pyg])") from exc
    return torch_geometric


def _edges(data: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """(source, target, number of nodes) of ``data``, checked: a ValueError names what is wrong."""
    edge_index = getattr(data, "edge_index", None)
    if edge_index is None:
        raise ValueError("data has no edge_index: these loaders partition or sample a graph")
    if not isinstance(edge_index, torch.Tensor) or edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"edge_index must be a 2 x E tensor, got {getattr(edge_index, 'shape', type(edge_index))}")
    if edge_index.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"edge_index must hold integer node ids, got dtype {edge_index.dtype}")
    n = data.num_nodes
    if n is None or n < 1:
        raise ValueError(f"data must have nodes, got num_nodes={n}")
    ei = edge_index.detach().cpu().numpy().astype(np.int64, copy=False)
    if ei.size and (ei.min() < 0 or ei.max() >= n):
        raise ValueError(f"edge_index holds node ids in [{ei.min()}, {ei.max()}], outside [0, {n})")
    num_edges = ei.shape[1]
    for key, value in data.items():
        if not isinstance(value, torch.Tensor) or value.dim() == 0 or key == "edge_index":
            continue
        size = value.size(data.__cat_dim__(key, value))
        if (key in _NODE_NAMES or (key.endswith("mask") and not key.startswith("edge"))) and size != n:
            raise ValueError(f"data.{key} has {size} entries along its node dimension, the graph has {n} nodes")
        if key.startswith("edge") and size != num_edges:
            raise ValueError(f"data.{key} has {size} entries along its edge dimension, the graph has {num_edges} edges")
    return ei[0], ei[1], int(n)


def _sort_pairs(major: np.ndarray, minor: np.ndarray, bound: int) -> np.ndarray:
    """The order that sorts the pairs by (major, minor), ties in their order (``minor`` in
    ``[0, bound)``): one stable sort of a combined key, 15 times faster than lexsort on 10M
    pairs, and nearly free on pairs sorted by major already (as most graphs' edges are)."""
    if bound * (int(major.max()) + 1 if major.size else 1) < 2**62:
        return np.argsort(major * bound + minor, kind="stable")
    return np.lexsort((minor, major))


class _Subgraphs:
    """Induced subgraphs of ``data`` by node ids, their edges in PyG's order.

    The edges are sorted once by (source, target), for ``csc`` by (target, source), so that
    CSR positions give each node's out-edges (``csc``: in-edges) with their other ends in
    ascending order; per batch only the nodes' own edges are read, and they come out sorted
    by (row, col) of the batch's local ids (``csc``: by (col, row)), as PyG's are."""

    def __init__(self, data: Any, sparse_format: str = "csr") -> None:
        src, dst, n = _edges(data)
        self.data, self.num_nodes = data, n
        self.csc = sparse_format == "csc"
        self.sources, self.targets = src, dst  # of every edge, in data's order
        major, minor = (dst, src) if self.csc else (src, dst)
        self.edge_order = _sort_pairs(major, minor, n)  # edge ids by (major, minor)
        self.indptr = np.concatenate([[0], np.cumsum(np.bincount(major, minlength=n))]).astype(np.int64)
        self.index = minor[self.edge_order]  # the other end of each edge: its target (csr), source (csc)

    def out_edges(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions in ``edge_order``, local id of the node) of every out-edge (``csc``:
        in-edge) of ``nodes``, node by node."""
        starts, counts = self.indptr[nodes], self.indptr[nodes + 1] - self.indptr[nodes]
        # positions start..end-1 of every node, without a Python loop
        first = np.concatenate([[0], np.cumsum(counts)[:-1]])
        pos = np.repeat(starts - first, counts) + np.arange(int(counts.sum()))
        return pos, np.repeat(np.arange(len(nodes)), counts)

    def local_ids(self, nodes: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """The position in ``nodes`` (distinct node ids) of each of ``ids``, -1 where absent.

        A table of the graph's N nodes when N is small or the batch large next to it; else a
        binary search in the sorted ``nodes``, so that a small sample of a large graph
        (GraphSAINT draws many) costs in proportion to it, not to N."""
        # (filling a table of up to 2**15 nodes costs about what the search's calls cost)
        if self.num_nodes <= max(1 << 15, 8 * (len(nodes) + len(ids))):
            local = np.full(self.num_nodes, -1, dtype=np.int64)
            local[nodes] = np.arange(len(nodes))
            return local[ids]
        if not len(nodes):
            return np.full(len(ids), -1, dtype=np.int64)
        order = np.argsort(nodes, kind="stable")
        ordered = nodes[order]
        at = np.minimum(np.searchsorted(ordered, ids), len(nodes) - 1)
        return np.where(ordered[at] == ids, order[at], -1)

    def ordered(self, pos: np.ndarray, major: np.ndarray, minor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(edge ids, local edge_index) of the edges at ``pos`` whose ends have the local ids
        ``major`` (the node whose edges they are, ascending) and ``minor``: sorted by
        (major, minor), repeated edges in data's order."""
        order = _sort_pairs(major, minor, int(minor.max()) + 1 if minor.size else 1)
        major, minor = major[order], minor[order]
        edge_index = np.stack([minor, major]) if self.csc else np.stack([major, minor])
        return self.edge_order[pos[order]], edge_index

    def edges_of(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(edge ids, local edge_index) of the subgraph induced by ``nodes`` (distinct ids):
        every edge whose two ends are in ``nodes``, numbered by position in ``nodes``, sorted
        by (row, col) (``csc``: (col, row))."""
        pos, major = self.out_edges(nodes)
        minor = self.local_ids(nodes, self.index[pos])
        keep = minor >= 0
        pos, major, minor = pos[keep], major[keep], minor[keep]
        if len(nodes) < 2 or bool(np.all(nodes[1:] > nodes[:-1])):
            # local ids rise with the ids in data, so the edges are in order already
            edge_index = np.stack([minor, major]) if self.csc else np.stack([major, minor])
            return self.edge_order[pos], edge_index
        return self.ordered(pos, major, minor)  # several clusters: sort within each node

    def batch(
        self,
        nodes: np.ndarray,
        node_extra: dict[str, torch.Tensor] | None = None,
        edge_extra: dict[str, torch.Tensor] | None = None,
        edges: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> Any:
        """A ``Data`` of the subgraph induced by ``nodes``: node attributes in that order,
        edge attributes of its edges, ``n_id`` the nodes' ids in ``data``; ``node_extra`` /
        ``edge_extra``: more per-node / per-edge tensors of the whole graph, sliced alike;
        ``edges``: (edge ids, edge_index) to hold instead of the induced ones."""
        edge_ids, edge_index = self.edges_of(nodes) if edges is None else edges
        node_t, edge_t = torch.from_numpy(nodes), torch.from_numpy(edge_ids)
        data, n, e = self.data, self.num_nodes, self.data.edge_index.size(1)
        out = copy.copy(data)
        for key, value in data.items():
            if key == "edge_index":
                out.edge_index = torch.from_numpy(edge_index).to(value.dtype)
            elif key == "num_nodes":
                out.num_nodes = len(nodes)
            elif isinstance(value, torch.Tensor) and value.dim() > 0:
                dim = data.__cat_dim__(key, value)
                if data.is_edge_attr(key) and value.size(dim) == e:
                    out[key] = value.index_select(dim, edge_t.to(value.device))
                elif data.is_node_attr(key) and value.size(dim) == n:
                    out[key] = value.index_select(dim, node_t.to(value.device))
        out.n_id = node_t
        for key, value in (node_extra or {}).items():
            out[key] = value[node_t]
        for key, value in (edge_extra or {}).items():
            out[key] = value[edge_t]
        return out


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
        _require_pyg()
        if sparse_format not in ("csr", "csc"):
            raise ValueError(f"sparse_format must be 'csr' or 'csc', got {sparse_format!r}")
        self.sparse_format = sparse_format
        self._subgraphs = _Subgraphs(data, sparse_format)
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


class ClusterBatchSelector(Selector):
    """Batches of cluster ids for :class:`ClusterLoader`: every epoch each cluster once, in
    a random order (``shuffle``) seeded from (seed, epoch). One rank: consecutive batches
    of ``batch_size`` clusters, the last one shorter (PyG's). ``W`` ranks: the order is cut
    into ``W`` contiguous shards whose sizes differ by at most one (no cluster repeated, none
    dropped), each cut into the same number of batches, ``ceil(ceil(P / W) / batch_size)``,
    of sizes that differ by at most one.

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

    def check_world(self, world_size: int, rank: int | None = None) -> None:
        super().check_world(world_size, rank)
        p, w = self.num_examples, world_size
        if w > 1 and p // w < self.num_batches(w):
            raise ValueError(
                f"{p} clusters cannot be dealt to {w} ranks in equal numbers of batches of at most "
                f"{self.batch_size} without repeating one: use a num_parts that is a multiple of "
                f"world_size, or a larger batch_size"
            )

    def num_batches(self, world_size: int = 1) -> int:
        world_size = check_int(world_size, "world_size", minimum=1, maximum=self.num_examples)
        per_rank = -(-self.num_examples // world_size)  # ceil divisions
        return -(-per_rank // self.batch_size)

    def plan(self, epoch: int = 0, world_size: int = 1) -> EpochPlan:
        epoch = check_int(epoch, "epoch", minimum=0)
        self.check_world(world_size)
        order = (
            epoch_rng(self.seed, epoch).permutation(self.num_examples) if self.shuffle else np.arange(self.num_examples)
        ).astype(np.int64)
        if world_size == 1:
            per_rank = [split_batches(order, self.batch_size)]
        else:
            t = self.num_batches(world_size)
            per_rank = [np.array_split(shard, t) for shard in np.array_split(order, world_size)]
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


class GraphSAINTSampler(DataLoader):
    """Base of the GraphSAINT samplers: ``num_steps`` random subgraphs per epoch, each the
    subgraph induced by the nodes a subclass draws (``_nodes``), from a generator seeded
    by (seed, epoch, rank, step), so ranks draw different subgraphs and a run repeats.

    ``sample_coverage > 0`` estimates PyG's normalization first, from samples drawn until
    every node a sample can hold was drawn ``sample_coverage`` times on average:
    ``node_norm`` (per node: samples / (its count * N)) and ``edge_norm`` (per edge: its
    source node's count / the edge's count, clamped to [0, 1e4], 0.1 where the edge was
    never drawn), sliced into every batch as in PyG. The nodes a sample can hold are all N
    for random walks (their roots are drawn over every node), for the node sampler the N'
    nodes with out-edges and for the edge sampler the nodes with an edge: PyG counts all N
    there, so on a graph with nodes that have no edges it draws N / N' times as many
    samples (7 nodes with edges among 10,000: over 1,400 times as many) for estimates of
    the same expectation. Each sample costs in proportion to its nodes and their edges, not
    to N. A batch's edges are sorted by (row, col), as in PyG."""

    def __init__(
        self,
        data: Any,
        batch_size: int,
        num_steps: int = 1,
        sample_coverage: int = 0,
        save_dir: Any = None,
        log: bool = True,
        *,
        seed: int = 0,
        rank: int | None = None,
        **kwargs: Any,
    ) -> None:
        _require_pyg()
        for key in ("shuffle", "sampler", "batch_sampler", "collate_fn"):
            if key in kwargs:
                raise ValueError(f"{key}= is set by {type(self).__name__}")
        self._subgraphs = _Subgraphs(data)
        self.data = data
        self.N, self.E = self._subgraphs.num_nodes, int(data.edge_index.size(1))
        if self.E == 0:
            raise ValueError("the graph has no edges: GraphSAINT samples edges and walks")
        self.sample_size = check_int(batch_size, "batch_size", minimum=1)
        self.num_steps = check_int(num_steps, "num_steps", minimum=1)
        self.sample_coverage = check_int(sample_coverage, "sample_coverage", minimum=0)
        self.seed = check_seed(seed)
        # None: this process's rank, looked up when an epoch's iteration starts (as the sampler does)
        self.rank = None if rank is None else check_int(rank, "rank", minimum=0)
        self.epoch = 0
        self.log = bool(log)
        self.node_norm: torch.Tensor | None = None
        self.edge_norm: torch.Tensor | None = None
        if self.sample_coverage > 0:
            self._compute_norm()
        self._start = 0  # the step the next iteration starts from (a resumed epoch's)
        self._handed_out = 0  # steps of the current epoch handed to the loader
        super().__init__(
            range(self.num_steps),  # type: ignore[arg-type]
            batch_size=1,
            sampler=_Steps(self),
            collate_fn=self._collate,
            **kwargs,
        )

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch the next iteration's subgraphs are drawn for."""
        self.epoch = check_int(epoch, "epoch", minimum=0)

    def state_dict(self, batches_done: int | None = None) -> dict[str, Any]:
        """Where the run is: ``batches_done`` steps of the current epoch trained (default:
        the steps handed out so far, exact with ``num_workers=0``; workers fetch ahead, so
        pass your step count there). The subgraphs depend only on (seed, epoch, rank,
        step), so that is all a resume needs."""
        done = self._handed_out if batches_done is None else batches_done
        done = check_int(done, "batches_done", minimum=0, maximum=self.num_steps)
        return {"class": type(self).__name__, "epoch": self.epoch, "batches_done": done, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume :meth:`state_dict`'s point: the next iteration yields the epoch's remaining steps."""
        if not isinstance(state, dict) or state.get("class") != type(self).__name__:
            raise ValueError(f"not a {type(self).__name__} state: {state!r:.80}")
        if state.get("seed") != self.seed:
            raise ValueError(f"the state was saved with seed={state.get('seed')!r}, this sampler has {self.seed}")
        self.epoch = check_int(state["epoch"], "epoch", minimum=0)
        self._start = self._handed_out = check_int(
            state["batches_done"], "batches_done", minimum=0, maximum=self.num_steps
        )

    def _rank(self) -> int:
        return get_communicator().rank if self.rank is None else self.rank

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        if self.rank is None:  # settled before workers copy this loader
            self.rank = self._rank()
        return super().__iter__()

    def _nodes(self, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def _drawable(self) -> int:
        """How many nodes a sample can hold (the normalization's coverage counts them)."""
        return self.N

    def _draw(self, rng: np.random.Generator) -> np.ndarray:
        return np.unique(self._nodes(rng))

    def _collate(self, steps: list[int]) -> Any:
        (step,) = steps
        rng = np.random.default_rng([self.seed, self.epoch, self._rank(), step])
        nodes = self._draw(rng)
        if self.node_norm is None:
            return self._subgraphs.batch(nodes)
        return self._subgraphs.batch(nodes, {"node_norm": self.node_norm}, {"edge_norm": self.edge_norm})

    def _compute_norm(self) -> None:
        sub = self._subgraphs
        node_count = np.zeros(self.N)
        edge_count = np.zeros(self.E)
        rng = np.random.default_rng([self.seed, 0x5A1])  # the same estimate on every rank
        samples, drawn, target = 0, 0, self._drawable() * self.sample_coverage
        while drawn < target:
            nodes = self._draw(rng)
            edge_ids, _ = sub.edges_of(nodes)
            node_count[nodes] += 1
            edge_count[edge_ids] += 1
            drawn += len(nodes)
            samples += 1
        source = sub.sources
        with np.errstate(divide="ignore", invalid="ignore"):
            edge_norm = np.clip(node_count[source] / edge_count, 0, 1e4)
        edge_norm[~np.isfinite(edge_norm) | (edge_count == 0)] = 0.1
        node_count[node_count == 0] = 0.1
        self.node_norm = torch.from_numpy(samples / node_count / self.N).float()
        self.edge_norm = torch.from_numpy(edge_norm).float()
        if self.log:
            logger.info("GraphSAINT normalization from %d samples (coverage %d)", samples, self.sample_coverage)

    def __len__(self) -> int:
        return self.num_steps - self._start


class _Steps(torch.utils.data.Sampler):
    """The steps of a GraphSAINT epoch, from a resumed epoch's first remaining one."""

    def __init__(self, owner: GraphSAINTSampler) -> None:
        self.owner = owner

    def __iter__(self) -> Iterator[int]:
        owner = self.owner
        start, owner._start = owner._start, 0  # only the resumed epoch starts late
        owner._handed_out = start
        for step in range(start, owner.num_steps):
            owner._handed_out = step + 1
            yield step

    def __len__(self) -> int:
        return self.owner.num_steps - self.owner._start


class GraphSAINTNodeSampler(GraphSAINTSampler):
    """PyG's GraphSAINT node sampler, pip-only: each subgraph is induced by the sources of
    ``batch_size`` edges drawn uniformly (nodes drawn in proportion to their out-degree,
    with repeats merged).

    >>> import torch
    >>> from torch_geometric.data import Data
    >>> ring = torch.arange(12)
    >>> data = Data(x=torch.randn(12, 2), edge_index=torch.stack([ring, (ring + 1) % 12]))
    >>> batches = list(GraphSAINTNodeSampler(data, batch_size=6, num_steps=2, log=False))
    >>> len(batches), all(b.num_nodes <= 6 for b in batches)
    (2, True)
    """

    def _nodes(self, rng: np.random.Generator) -> np.ndarray:
        return self._subgraphs.sources[rng.integers(0, self.E, self.sample_size)]

    def _drawable(self) -> int:
        """The nodes with out-edges: the others are never a drawn edge's source."""
        return int(np.count_nonzero(np.diff(self._subgraphs.indptr)))


class GraphSAINTEdgeSampler(GraphSAINTSampler):
    """PyG's GraphSAINT edge sampler, pip-only: each subgraph is induced by both ends of
    ``batch_size`` edges, each drawn independently (repeats merged) with probability
    proportional to ``1 / out-degree(source) + 1 / in-degree(target)``, the paper's
    ``1 / deg(u) + 1 / deg(v)`` (on an undirected graph, the degrees), which favours edges
    between nodes of few edges.

    PyG 2.8 draws the same way with the reciprocal weights, in-degree(source) +
    out-degree(target), favouring edges between hubs; the ``sample_coverage``
    normalization is computed from the sampler's own draws either way. Each sample costs
    ``batch_size`` binary searches in the edges' cumulative weights (computed once), where
    PyG draws ``batch_size * E`` random numbers.

    >>> import torch
    >>> from torch_geometric.data import Data
    >>> ring = torch.arange(12)
    >>> data = Data(x=torch.randn(12, 2), edge_index=torch.stack([ring, (ring + 1) % 12]))
    >>> batch = next(iter(GraphSAINTEdgeSampler(data, batch_size=1, log=False)))
    >>> batch.num_nodes, batch.edge_index.tolist()
    (2, [[0], [1]])
    """

    _cumulative: np.ndarray | None = None

    def _weights(self) -> np.ndarray:
        """The cumulative sum of every edge's weight, in data's order (computed on first use)."""
        if self._cumulative is None:
            sub = self._subgraphs
            out_degree = np.bincount(sub.sources, minlength=self.N)
            in_degree = np.bincount(sub.targets, minlength=self.N)
            self._cumulative = np.cumsum(1.0 / out_degree[sub.sources] + 1.0 / in_degree[sub.targets])
        return self._cumulative

    def _nodes(self, rng: np.random.Generator) -> np.ndarray:
        cumulative = self._weights()
        picks = np.searchsorted(cumulative, rng.random(self.sample_size) * cumulative[-1], side="right")
        picks = np.minimum(picks, self.E - 1)  # (a draw of exactly the total, rounded)
        return np.concatenate([self._subgraphs.sources[picks], self._subgraphs.targets[picks]])

    def _drawable(self) -> int:
        """The nodes with an edge: the others are never a drawn edge's end."""
        sub = self._subgraphs
        ends = np.zeros(self.N, dtype=bool)
        ends[sub.sources] = ends[sub.targets] = True
        return int(np.count_nonzero(ends))


class GraphSAINTRandomWalkSampler(GraphSAINTSampler):
    """PyG's GraphSAINT random-walk sampler, pip-only: each subgraph is induced by the
    nodes of ``batch_size`` random walks of ``walk_length`` steps along out-edges, from
    roots drawn uniformly (a walk at a node without out-edges stays there).

    >>> import torch
    >>> from torch_geometric.data import Data
    >>> ring = torch.arange(12)
    >>> data = Data(x=torch.randn(12, 2), edge_index=torch.stack([ring, (ring + 1) % 12]))
    >>> batch = next(iter(GraphSAINTRandomWalkSampler(data, batch_size=1, walk_length=3, log=False)))
    >>> batch.num_nodes, batch.edge_index.size(1)
    (4, 3)
    """

    def __init__(
        self,
        data: Any,
        batch_size: int,
        walk_length: int,
        num_steps: int = 1,
        sample_coverage: int = 0,
        save_dir: Any = None,
        log: bool = True,
        **kwargs: Any,
    ) -> None:
        self.walk_length = check_int(walk_length, "walk_length", minimum=0)
        super().__init__(data, batch_size, num_steps, sample_coverage, save_dir, log, **kwargs)

    def _nodes(self, rng: np.random.Generator) -> np.ndarray:
        sub = self._subgraphs
        current = rng.integers(0, self.N, self.sample_size)
        visited = [current]
        for _ in range(self.walk_length):
            degree = sub.indptr[current + 1] - sub.indptr[current]
            step = np.floor(rng.random(len(current)) * degree).astype(np.int64)
            moves = degree > 0
            nxt = current.copy()
            nxt[moves] = sub.index[sub.indptr[current[moves]] + step[moves]]
            current = nxt
            visited.append(current)
        return np.concatenate(visited)


__all__ = [
    "ClusterData",
    "ClusterLoader",
    "ClusterBatchSelector",
    "GraphSAINTSampler",
    "GraphSAINTNodeSampler",
    "GraphSAINTEdgeSampler",
    "GraphSAINTRandomWalkSampler",
]
