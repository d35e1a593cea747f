"""Induced subgraphs of a PyG ``Data`` by node ids, their edges in PyG's order: the
slicing that every Cluster-GCN and GraphSAINT batch of :mod:`batchsel.integrations.pyg` is
made by (:class:`Subgraphs`), with the checks of the graph it is given."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch

# node-level attributes by name: a wrong length is an error, not a graph-level attribute
_NODE_NAMES = ("x", "y", "pos", "n_id", "node_norm")


def require_pyg() -> Any:
    """The ``torch_geometric`` module, or an ``ImportError`` that names the extra to install.

    Returns
    -------
    module
        ``torch_geometric``.

    Example
    -------
    >>> require_pyg().__name__
    'torch_geometric'
    """
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
    ``[0, bound)``): one stable sort of a combined key, much faster than lexsort on many
    pairs, and nearly free on pairs sorted by major already (as most graphs' edges are)."""
    if bound * (int(major.max()) + 1 if major.size else 1) < 2**62:
        return np.argsort(major * bound + minor, kind="stable")
    return np.lexsort((minor, major))


class Subgraphs:
    """Induced subgraphs of ``data`` by node ids, their edges in PyG's order.

    The edges are sorted once by (source, target), for ``csc`` by (target, source), so that
    CSR positions give each node's out-edges (``csc``: in-edges) with their other ends in
    ascending order; per batch only the nodes' own edges are read, and they come out sorted
    by (row, col) of the batch's local ids (``csc``: by (col, row)), as PyG's are.

    Parameters
    ----------
    data : torch_geometric.data.Data
        The graph, with ``edge_index``; its node and edge attributes are checked against
        its numbers of nodes and edges (``ValueError`` naming what is wrong).
    sparse_format : str, default "csr"
        ``"csr"``: batches' edges by (row, col) and a node's edges its out-edges;
        ``"csc"``: by (col, row), its in-edges.

    Example
    -------
    >>> from torch_geometric.data import Data
    >>> ring = torch.arange(6)
    >>> sub = Subgraphs(Data(x=torch.zeros(6, 1), edge_index=torch.stack([ring, (ring + 1) % 6])))
    >>> batch = sub.batch(np.array([0, 1, 2]))
    >>> batch.num_nodes, batch.edge_index.tolist(), batch.n_id.tolist()
    (3, [[0, 1], [1, 2]], [0, 1, 2])
    """

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


__all__ = ["Subgraphs", "require_pyg"]
