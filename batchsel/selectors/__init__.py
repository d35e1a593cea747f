"""Selectors: from embeddings, graphs and scores to each rank's batches (an EpochPlan)."""

from batchsel.selectors.auto import AutoSelector
from batchsel.selectors.capabilities import SelectorCapabilities
from batchsel.selectors.coreset import CoresetSelector, gradient_proxies
from batchsel.selectors.epoch_feedback import EpochFeedbackSelector
from batchsel.selectors.graph_blocks import GraphBlockSelector
from batchsel.selectors.loss_rank import LossRankSelector
from batchsel.selectors.offline import OfflineSelector
from batchsel.selectors.online import OnlineSelector
from batchsel.selectors.pruning import InfoBatchSelector, ScorePruningSelector, coverage_centric_selection
from batchsel.selectors.random_batches import RandomSelector
from batchsel.selectors.selector import Selector
from batchsel.selectors.submodular import SubmodularSelector
from batchsel.submodular.partition import partition_values, submodular_partition

__all__ = [
    "Selector",
    "SelectorCapabilities",
    "OfflineSelector",
    "OnlineSelector",
    "EpochFeedbackSelector",
    "RandomSelector",
    "SubmodularSelector",
    "LossRankSelector",
    "AutoSelector",
    "GraphBlockSelector",
    "CoresetSelector",
    "InfoBatchSelector",
    "ScorePruningSelector",
    "coverage_centric_selection",
    "gradient_proxies",
    "submodular_partition",
    "partition_values",
]
