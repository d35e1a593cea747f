"""batchsel: data selection and mini-batch scheduling for data-parallel training.

From embeddings of the training examples batchsel computes every worker's batches for
each epoch: submodular (informative, diverse) batches, graph-consistent batches for a
graph-regularized loss, submodular partitions of the data across workers, and random or
loss-ranked baselines. Adapters for torch and MPI live in ``batchsel.integrations``.
"""
from .index import EmbeddingIndex, knn_graph
from .plan import EpochPlan, load_plans, save_plans
from .selectors import RandomSelector, Selector

__version__ = "0.1.0"

__all__ = [
    "EmbeddingIndex", "knn_graph",
    "EpochPlan", "save_plans", "load_plans",
    "Selector", "RandomSelector",
    "__version__",
]
