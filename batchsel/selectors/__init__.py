"""Selectors: from embeddings, graphs and scores to each rank's batches (an EpochPlan)."""

from .base import OnlineSelector, RandomSelector, Selector
from .coreset import CoresetSelector, gradient_proxies
from .graph_blocks import GraphBlockSelector
from .loss_rank import LossRankSelector
from .partition import partition_values, submodular_partition
from .pruning import InfoBatchSelector, ScorePruningSelector, coverage_centric_selection
from .submodular import SubmodularSelector

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
