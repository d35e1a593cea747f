"""Data pruning with epoch lengths known before the run: dynamic (InfoBatch; Qin et al.,
ICLR 2024: each epoch skips part of the examples the model has already learnt,
:mod:`~batchsel.selectors.pruning.infobatch`) and score-based (EL2N or forgetting scores
from the first epochs, then coverage-centric selection of the examples kept; Paul et al.
2021, Toneva et al. 2019, Zheng et al. 2023: :mod:`~batchsel.selectors.pruning.score_pruning`,
:mod:`~batchsel.selectors.pruning.coverage`). Both are
:class:`~batchsel.selectors.epoch_feedback.EpochFeedbackSelector` s."""

from batchsel.selectors.pruning.coverage import coverage_centric_selection
from batchsel.selectors.pruning.infobatch import ANNEAL_RULES, InfoBatchSelector
from batchsel.selectors.pruning.score_pruning import SCORES, ScorePruningSelector

__all__ = ["InfoBatchSelector", "ScorePruningSelector", "coverage_centric_selection", "ANNEAL_RULES", "SCORES"]
