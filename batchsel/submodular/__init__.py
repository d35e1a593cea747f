"""Submodular set functions and their maximizers: greedy optimizers, GreeDi, sieve
streaming and submodular partitioning.

Set functions live in :mod:`batchsel.submodular.functions`, apart from the optimizers that
maximize them (:mod:`batchsel.submodular.optimizers`), as in apricot.
"""

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
from batchsel.submodular.partition import partition_values, submodular_partition
from batchsel.submodular.streaming import ReferenceFacilityLocation, SieveStreaming

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
    "Selection",
    "maximize",
    "greedi_facility_location",
    "SieveStreaming",
    "ReferenceFacilityLocation",
    "submodular_partition",
    "partition_values",
]
