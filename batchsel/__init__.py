"""batchsel: data selection and mini-batch scheduling for data-parallel training.

From embeddings of the training examples batchsel computes every worker's batches for
each epoch: submodular (informative, diverse) batches, graph-consistent batches for a
graph-regularized loss, submodular partitions of the data across workers, and random or
loss-ranked baselines; near-duplicate removal (``deduplicate``) and a data audit
(``audit``: duplicates, label noise, imbalance, outliers); in the training loop, a
filter that keeps the best B of a scored candidate batch (loss, gradient norm, RHO-LOSS
reducible loss, optionally diverse). Adapters for torch and MPI live in
``batchsel.integrations``.
"""

from ._warmup import warmup
from .data_audit import Audit, audit
from .dedup import Deduplication, deduplicate
from .filters import CandidateFilter, gradnorm_scores, loss_scores
from .functions import (
    Custom,
    FacilityLocation,
    FeatureBased,
    GraphCut,
    LogDeterminant,
    MaxCoverage,
    Mixture,
    Modular,
    SaturatedCoverage,
    SetFunction,
    SumRedundancy,
)
from .index import EmbeddingIndex, knn_graph
from .irreducible import IrreducibleLoss
from .optimizers import Selection, greedi_facility_location, maximize
from .plan import EpochPlan, load_plans, save_plans
from .selectors import (
    CoresetSelector,
    GraphBlockSelector,
    InfoBatchSelector,
    LossRankSelector,
    RandomSelector,
    ScorePruningSelector,
    Selector,
    SubmodularSelector,
    coverage_centric_selection,
    submodular_partition,
)
from .streaming import ReferenceFacilityLocation, SieveStreaming

__version__ = "0.1.0"


def __getattr__(name: str):  # these import torch (~2 s): only when they are used
    if name == "GraphRegularizedLoss":
        from .losses import GraphRegularizedLoss

        return GraphRegularizedLoss
    if name == "SelectionBatchSampler":
        from .integrations import SelectionBatchSampler

        return SelectionBatchSampler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EmbeddingIndex",
    "knn_graph",
    "deduplicate",
    "Deduplication",
    "audit",
    "Audit",
    "SetFunction",
    "FacilityLocation",
    "FeatureBased",
    "GraphCut",
    "SumRedundancy",
    "SaturatedCoverage",
    "LogDeterminant",
    "Modular",
    "Mixture",
    "MaxCoverage",
    "Custom",
    "Selection",
    "maximize",
    "greedi_facility_location",
    "SieveStreaming",
    "ReferenceFacilityLocation",
    "EpochPlan",
    "save_plans",
    "load_plans",
    "Selector",
    "RandomSelector",
    "SubmodularSelector",
    "LossRankSelector",
    "GraphBlockSelector",
    "CoresetSelector",
    "InfoBatchSelector",
    "ScorePruningSelector",
    "coverage_centric_selection",
    "submodular_partition",
    "CandidateFilter",
    "IrreducibleLoss",
    "loss_scores",
    "gradnorm_scores",
    "GraphRegularizedLoss",
    "SelectionBatchSampler",
    "warmup",
    "__version__",
]
