"""k-nearest-neighbour search and k-NN affinity graphs over embeddings, with faiss.

numpy in, ``(distances, indices)`` out, as in faiss. Embeddings may be a memory-mapped
``.npy`` file: they are read in blocks and never copied whole by this package (faiss keeps
its own copy inside a flat or IVF index, as it must).

The package: :class:`EmbeddingIndex` and the :func:`knn_graph` shortcut
(:mod:`batchsel.index.embedding_index`);
:mod:`batchsel.index.vectors`, how rows reach faiss (blocks, float32, normalized);
:mod:`batchsel.index.ivf`, the IVF index's shape, training and ``nprobe`` tuning;
:mod:`batchsel.index.affinity`, neighbour lists made into k-NN affinity graphs (kernels,
sigma, CSR). :class:`~batchsel.distributed.sharded.ShardedIndex` shards the same index
over ranks.
"""

from batchsel.index.affinity import KERNELS
from batchsel.index.embedding_index import AUTO_EXACT_MAX, KINDS, METRICS, EmbeddingIndex, knn_graph
from batchsel.index.ivf import (
    IVF_LISTS_PER_SQRT_N,
    IVF_TRAIN_ITERATIONS,
    IVF_TRAIN_PER_LIST,
    NPROBE_SAMPLE,
    NPROBE_STEPS,
    NPROBE_TARGET,
)
from batchsel.index.vectors import BLOCK_ROWS

__all__ = [
    "EmbeddingIndex",
    "knn_graph",
    "AUTO_EXACT_MAX",
    # the settings below were importable from here before the index became a package
    "BLOCK_ROWS",
    "METRICS",
    "KINDS",
    "KERNELS",
    "IVF_LISTS_PER_SQRT_N",
    "IVF_TRAIN_PER_LIST",
    "IVF_TRAIN_ITERATIONS",
    "NPROBE_STEPS",
    "NPROBE_SAMPLE",
    "NPROBE_TARGET",
]
