"""Selectors: from embeddings, graphs and scores to each rank's batches (an EpochPlan)."""

from batchsel.selectors.base import OnlineSelector, RandomSelector, Selector
from batchsel.selectors.coreset import CoresetSelector, gradient_proxies
from batchsel.selectors.graph_blocks import GraphBlockSelector
from batchsel.selectors.loss_rank import LossRankSelector
from batchsel.selectors.pruning import InfoBatchSelector, ScorePruningSelector, coverage_centric_selection
from batchsel.selectors.submodular import SubmodularSelector
from batchsel.submodular.partition import partition_values, submodular_partition

__all__ = [
    "Selector",
    "OnlineSelector",
    "RandomSelector",
    "SubmodularSelector",
    "LossRankSelector",
    "GraphBlockSelector",
    "CoresetSelector",
    "InfoBatchSelector",
    "ScorePruningSelector",
    "coverage_centric_selection",
    "gradient_proxies",
    "submodular_partition",
    "partition_values",
]
