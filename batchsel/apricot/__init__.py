"""apricot-select 0.6.1's API over batchsel's set functions and optimizers:
``import batchsel.apricot as apricot`` in place of ``import apricot``.

The selection classes (:mod:`~batchsel.apricot.base`, :mod:`~batchsel.apricot.selections`)
keep apricot's names, constructor arguments, attributes (``ranking``, ``gains``,
``subset``, ``idxs``) and methods (``fit``, ``transform``, ``fit_transform``,
``partial_fit``); the optimizers (:mod:`batchsel.apricot.optimizers`, as apricot's
``apricot.optimizers``) keep apricot's names, as strings and classes, and arguments. They
are thin adapters: the gains come from :mod:`batchsel.submodular.functions`, the greedy
loops from :mod:`batchsel.submodular.optimizers`; what is left here is apricot's control
flow where its results depend on it (its ``RandomState``'s draws, the tie order of modular
and of max coverage's queue, its sieve in ``partial_fit``: :mod:`batchsel.apricot.sieve`).
Everything is computed in float64, as apricot does. Where the results differ from
apricot's, and why: docs/guide/apricot.md.

Example
-------
>>> import numpy as np
>>> import batchsel.apricot as apricot
>>> x = np.random.default_rng(0).uniform(size=(200, 8))
>>> sel = apricot.FacilityLocationSelection(10, metric="euclidean").fit(x)
>>> sel.ranking.shape, sel.gains.dtype.name, sel.transform(x).shape
((10,), 'float64', (10, 8))
"""

from batchsel.apricot.base import BaseGraphSelection, BaseSelection
from batchsel.apricot.optimizers import (
    OPTIMIZERS,
    ApproximateLazyGreedy,
    BaseOptimizer,
    BidirectionalGreedy,
    GreeDi,
    LazyGreedy,
    ModularGreedy,
    NaiveGreedy,
    RandomGreedy,
    SampleGreedy,
    SieveGreedy,
    StochasticGreedy,
    TwoStageGreedy,
)
from batchsel.apricot.selections import (
    CustomGraphSelection,
    CustomSelection,
    FacilityLocationSelection,
    FeatureBasedSelection,
    GraphCutSelection,
    MaxCoverageSelection,
    MixtureSelection,
    SaturatedCoverageSelection,
    SumRedundancySelection,
)
from batchsel.apricot.utils import check_random_state

__all__ = [
    "BaseSelection",
    "BaseGraphSelection",
    "FacilityLocationSelection",
    "FeatureBasedSelection",
    "GraphCutSelection",
    "SumRedundancySelection",
    "SaturatedCoverageSelection",
    "MaxCoverageSelection",
    "MixtureSelection",
    "CustomSelection",
    "CustomGraphSelection",
    "BaseOptimizer",
    "NaiveGreedy",
    "LazyGreedy",
    "ApproximateLazyGreedy",
    "TwoStageGreedy",
    "StochasticGreedy",
    "SampleGreedy",
    "GreeDi",
    "ModularGreedy",
    "RandomGreedy",
    "BidirectionalGreedy",
    "SieveGreedy",
    "OPTIMIZERS",
    "check_random_state",
]

__version__ = "0.6.1"  # the apricot-select API this module follows
