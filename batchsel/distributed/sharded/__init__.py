"""The index and the k-NN graph sharded over ranks (MPI, torch.distributed).

Each rank reads only its rows of the embeddings and indexes them; every search is answered
by all shards and merged, so results equal one process's :class:`~batchsel.index.EmbeddingIndex`
(flat: exact; IVF: one quantizer trained on rank 0 and broadcast, preassigned lists). The
k-NN graph stays distributed (CSR rows with global indices, symmetrized across ranks) or is
gathered to every rank or to one; facility location runs as a distributed lazy greedy.

The package:

- :mod:`~batchsel.distributed.sharded.sharded_index`: :class:`ShardedIndex`;
- :mod:`~batchsel.distributed.sharded.rows`: which rows each rank holds
  (:func:`shard_range`) and how it reads them;
- :mod:`~batchsel.distributed.sharded.exchange`: a search answered by every shard, merged;
- :mod:`~batchsel.distributed.sharded.leader`: ``node_work="leader"``, rank 0 working
  alone for the ranks of one machine;
- :mod:`~batchsel.distributed.sharded.graph`: the distributed k-NN graph, its assembly
  (:func:`gather_graph`) and its files (:func:`save_graph_shard`, :func:`load_graph_shards`);
- :mod:`~batchsel.distributed.sharded.lazy_greedy`: :func:`facility_location`, the
  distributed counterpart of ``batchsel.submodular.maximize(FacilityLocation(W), k)``;
- :mod:`~batchsel.distributed.sharded.partition`: :func:`submodular_partition`,
  :func:`batchsel.submodular.partition.submodular_partition` run on the gathered graph.

Design and limits: docs/design/sharded.md.
"""

from batchsel.distributed.sharded.graph import gather_graph, load_graph_shards, save_graph_shard
from batchsel.distributed.sharded.lazy_greedy import facility_location
from batchsel.distributed.sharded.leader import NODE_WORK
from batchsel.distributed.sharded.partition import submodular_partition
from batchsel.distributed.sharded.rows import shard_range
from batchsel.distributed.sharded.sharded_index import ShardedIndex

__all__ = [
    "ShardedIndex",
    "shard_range",
    "gather_graph",
    "save_graph_shard",
    "load_graph_shards",
    "facility_location",
    "submodular_partition",
    "NODE_WORK",
]
