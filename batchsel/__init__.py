"""batchsel: data selection and mini-batch scheduling for data-parallel training.

Three classes replace ``shuffle=True`` (measured against random batches at equal wall
time: docs/which-method.md):

- ``AutoSelector(N, B, labels=y)`` in ``SelectionBatchSampler``, for any run: loss-rank's
  batches where the run's losses say they pay, random ones where they point to wrong
  labels (docs: design/auto.md).
- ``BucketSelector(lengths, batch_size=B)`` with ``pad_collate``, for examples of different
  lengths: batches of similar length, the ranks balanced (docs: guide/variable-length.md).
- ``StreamBatches``, for a training set that streams: a bounded buffer's batches, grouped
  by length (docs: guide/streaming.md).

Beyond them: loss-rank, InfoBatch and score-based pruning, candidate filters (loss,
gradient norm, RHO-LOSS), submodular (SMDL) and graph-consistent batches, set functions
and ``maximize``, near-duplicate removal (``deduplicate``) and a data audit (``audit``).
Adapters for torch and MPI live in ``batchsel.integrations``.
"""

from batchsel import _numba_colour  # noqa: F401 - before numba loads
from batchsel.core.version import __version__
from batchsel.data.audit import Audit, audit
from batchsel.data.dedup import Deduplication, deduplicate
from batchsel.index import EmbeddingIndex, knn_graph
from batchsel.loop.filters import CandidateFilter
from batchsel.loop.irreducible import IrreducibleLoss
from batchsel.loop.warmup import warmup
from batchsel.plans.plan import EpochPlan, load_plans, save_plans
from batchsel.selectors import (
    AutoSelector,
    CoresetSelector,
    GraphBlockSelector,
    InfoBatchSelector,
    LossRankSelector,
    RandomSelector,
    ScorePruningSelector,
    Selector,
    SubmodularSelector,
    coverage_centric_selection,
)
from batchsel.selectors.buckets.bucket import BucketSelector
from batchsel.selectors.buckets.cost_model import CostModel
from batchsel.selectors.buckets.costs import example_costs
from batchsel.selectors.buckets.grouped import CostGroupedSelector
from batchsel.selectors.buckets.step_balanced import StepBalancedSelector
from batchsel.selectors.scores import gradnorm_scores, loss_scores
from batchsel.submodular.functions import (
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
from batchsel.submodular.optimizers import Selection, greedi_facility_location, maximize
from batchsel.submodular.partition import submodular_partition
from batchsel.submodular.streaming import ReferenceFacilityLocation, SieveStreaming

# modules that moved in 0.2: their old paths are deprecation stubs, imported only when asked for
_MOVED = {"io", "communicator", "functions", "optimizers", "streaming", "sharded", "dedup", "data_audit", "plan"}
_MOVED |= {"report", "plotting", "filters", "irreducible", "losses"}


def __getattr__(name: str):
    # these import torch: only when they are used
    if name == "GraphRegularizedLoss":
        from batchsel.loop.losses import GraphRegularizedLoss

        return GraphRegularizedLoss
    if name == "pad_collate":
        from batchsel.loop.collate import pad_collate

        return pad_collate
    if name == "SelectionBatchSampler":
        from batchsel.loop.sampler import SelectionBatchSampler

        return SelectionBatchSampler
    if name in ("StreamBatches", "StreamBatch"):
        from batchsel.loop import stream

        return getattr(stream, name)
    # the subpackages that import torch or frameworks, and modules that moved (deprecated paths)
    if name in ("integrations", "loop", "cli", "apricot") or name in _MOVED:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
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
    "AutoSelector",
    "RandomSelector",
    "SubmodularSelector",
    "LossRankSelector",
    "GraphBlockSelector",
    "CoresetSelector",
    "InfoBatchSelector",
    "ScorePruningSelector",
    "coverage_centric_selection",
    "BucketSelector",
    "CostGroupedSelector",
    "StepBalancedSelector",
    "CostModel",
    "example_costs",
    "submodular_partition",
    "CandidateFilter",
    "IrreducibleLoss",
    "loss_scores",
    "gradnorm_scores",
    "GraphRegularizedLoss",
    "SelectionBatchSampler",
    "pad_collate",
    "StreamBatches",
    "StreamBatch",
    "warmup",
    "__version__",
]
