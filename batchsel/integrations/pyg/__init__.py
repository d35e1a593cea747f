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

from batchsel.integrations.pyg.cluster import ClusterBatchSelector, ClusterData, ClusterLoader
from batchsel.integrations.pyg.saint import (
    GraphSAINTEdgeSampler,
    GraphSAINTNodeSampler,
    GraphSAINTRandomWalkSampler,
    GraphSAINTSampler,
)

__all__ = [
    "ClusterData",
    "ClusterLoader",
    "ClusterBatchSelector",
    "GraphSAINTSampler",
    "GraphSAINTNodeSampler",
    "GraphSAINTEdgeSampler",
    "GraphSAINTRandomWalkSampler",
]
