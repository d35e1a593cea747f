"""Set functions with incremental state, for greedy maximization (:func:`batchsel.maximize`).

Every function is over a ground set ``{0, ..., n - 1}``: ``gains(candidates)`` (marginal
gains w.r.t. the current set), ``add(j)``, ``reset()``, ``evaluate(S)``, ``value``,
``selected``. Graph-based functions take a dense or a sparse (CSR, int64 indices)
similarity; their definitions and gains follow apricot-select 0.6.1.
"""

from .base import SetFunction
from .custom import Custom
from .facility_location import FacilityLocation
from .feature_based import FeatureBased, MaxCoverage
from .graph_cut import GraphCut
from .log_determinant import LogDeterminant
from .mixture import Mixture
from .modular import Modular
from .saturated_coverage import SaturatedCoverage
from .sum_redundancy import SumRedundancy

__all__ = [
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
]
