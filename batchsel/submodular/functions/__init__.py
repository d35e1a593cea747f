"""Set functions with incremental state, for greedy maximization (:func:`batchsel.maximize`).

Every function is over a ground set ``{0, ..., n - 1}``: ``gains(candidates)`` (marginal
gains w.r.t. the current set), ``add(j)``, ``reset()``, ``evaluate(S)``, ``value``,
``selected``. Graph-based functions take a dense or a sparse (CSR, int64 indices)
similarity; their definitions and gains follow apricot-select 0.6.1.
"""

from batchsel.submodular.functions.base import SetFunction
from batchsel.submodular.functions.custom import Custom
from batchsel.submodular.functions.facility_location import FacilityLocation
from batchsel.submodular.functions.feature_based import FeatureBased, MaxCoverage
from batchsel.submodular.functions.graph_cut import GraphCut
from batchsel.submodular.functions.log_determinant import LogDeterminant
from batchsel.submodular.functions.mixture import Mixture
from batchsel.submodular.functions.modular import Modular
from batchsel.submodular.functions.saturated_coverage import SaturatedCoverage
from batchsel.submodular.functions.sum_redundancy import SumRedundancy

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
