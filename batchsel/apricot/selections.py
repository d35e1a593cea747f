"""apricot's selections, each over the batchsel set function of the same name:
facility location, graph cut, sum redundancy and saturated coverage over a similarity of
the rows; feature-based, max coverage, mixtures and custom functions.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from batchsel.apricot.base import BaseGraphSelection, BaseSelection
from batchsel.submodular.functions import (
    Custom,
    FacilityLocation,
    FeatureBased,
    GraphCut,
    MaxCoverage,
    Mixture,
    SaturatedCoverage,
    SumRedundancy,
)
from batchsel.submodular.functions.base import SetFunction


class FacilityLocationSelection(BaseGraphSelection):
    """apricot's ``FacilityLocationSelection`` over :class:`batchsel.FacilityLocation`."""

    def __init__(
        self,
        n_samples: Any,
        metric: str = "euclidean",
        initial_subset: Any = None,
        optimizer: Any = "lazy",
        optimizer_kwds: dict | None = None,
        n_neighbors: Any = None,
        reservoir: Any = None,
        max_reservoir_size: int = 1000,
        n_jobs: int = 1,
        random_state: Any = None,
        verbose: bool = False,
    ) -> None:
        super().__init__(
            n_samples, metric, initial_subset, optimizer, optimizer_kwds, n_neighbors, reservoir,
            max_reservoir_size, n_jobs, random_state, verbose,
        )  # fmt: skip

    def _make(self, matrix: Any) -> SetFunction:
        return FacilityLocation(matrix)

    def _streamer(self) -> Any:
        from batchsel.submodular.streaming import SieveStreaming

        metric = self.metric
        if metric not in ("euclidean", "cosine"):
            raise NotImplementedError(f"partial_fit streams facility location for euclidean and cosine, not {metric!r}")
        reference = None if self.reservoir is None else np.asarray(self.reservoir, dtype=np.float32)
        return SieveStreaming(
            "facility-location",
            int(self.n_samples),
            epsilon=self._epsilon(),
            metric=metric,
            reference=reference,
            reference_size=int(self.max_reservoir_size),
            refine=False,
        )


class GraphCutSelection(BaseGraphSelection):
    """apricot's ``GraphCutSelection`` (``alpha``) over :class:`batchsel.GraphCut`."""

    def __init__(
        self,
        n_samples: Any = 10,
        metric: str = "euclidean",
        alpha: float = 1,
        initial_subset: Any = None,
        optimizer: Any = "naive",
        optimizer_kwds: dict | None = None,
        n_neighbors: Any = None,
        reservoir: Any = None,
        max_reservoir_size: int = 1000,
        n_jobs: int = 1,
        random_state: Any = None,
        verbose: bool = False,
    ) -> None:
        self.alpha = alpha
        super().__init__(
            n_samples, metric, initial_subset, optimizer, optimizer_kwds, n_neighbors, reservoir,
            max_reservoir_size, n_jobs, random_state, verbose,
        )  # fmt: skip

    def _make(self, matrix: Any) -> SetFunction:
        return GraphCut(matrix, lam=self.alpha)


class SumRedundancySelection(BaseGraphSelection):
    """apricot's ``SumRedundancySelection`` over :class:`batchsel.SumRedundancy`."""

    def __init__(
        self,
        n_samples: Any = 10,
        metric: str = "euclidean",
        initial_subset: Any = None,
        optimizer: Any = "two-stage",
        n_neighbors: Any = None,
        reservoir: Any = None,
        max_reservoir_size: int = 1000,
        n_jobs: int = 1,
        random_state: Any = None,
        optimizer_kwds: dict | None = None,
        verbose: bool = False,
    ) -> None:
        super().__init__(
            n_samples, metric, initial_subset, optimizer, optimizer_kwds, n_neighbors, reservoir,
            max_reservoir_size, n_jobs, random_state, verbose,
        )  # fmt: skip

    def _make(self, matrix: Any) -> SetFunction:
        return SumRedundancy(matrix)


class SaturatedCoverageSelection(BaseGraphSelection):
    """apricot's ``SaturatedCoverageSelection`` (``alpha``) over
    :class:`batchsel.SaturatedCoverage`."""

    def __init__(
        self,
        n_samples: Any = 10,
        metric: str = "euclidean",
        alpha: float = 0.1,
        initial_subset: Any = None,
        optimizer: Any = "two-stage",
        n_neighbors: Any = None,
        n_jobs: int = 1,
        random_state: Any = None,
        reservoir: Any = None,
        max_reservoir_size: Any = None,
        optimizer_kwds: dict | None = None,
        verbose: bool = False,
    ) -> None:
        self.alpha = alpha
        super().__init__(
            n_samples, metric, initial_subset, optimizer, optimizer_kwds, n_neighbors, reservoir,
            1000 if max_reservoir_size is None else max_reservoir_size, n_jobs, random_state, verbose,
        )  # fmt: skip

    def _make(self, matrix: Any) -> SetFunction:
        return SaturatedCoverage(matrix, alpha=self.alpha)


class FeatureBasedSelection(BaseSelection):
    """apricot's ``FeatureBasedSelection`` (``concave_func``: ``"sqrt"``, ``"log"``,
    ``"sigmoid"``, ``"inverse"``, ``"min"`` or a callable) over :class:`batchsel.FeatureBased`."""

    def __init__(
        self,
        n_samples: Any,
        concave_func: Any = "sqrt",
        initial_subset: Any = None,
        optimizer: Any = "two-stage",
        optimizer_kwds: dict | None = None,
        reservoir: Any = None,
        max_reservoir_size: int = 1000,
        n_jobs: int = 1,
        random_state: Any = None,
        verbose: bool = False,
    ) -> None:
        self.concave_func_name = concave_func
        self.concave_func = concave_func
        super().__init__(
            n_samples, initial_subset, optimizer, optimizer_kwds, reservoir, max_reservoir_size, n_jobs,
            random_state, verbose,
        )  # fmt: skip

    def _make(self, matrix: Any) -> SetFunction:
        return FeatureBased(matrix, self.concave_func)

    def _streamer(self) -> Any:
        from batchsel.submodular.streaming import SieveStreaming

        return SieveStreaming(
            "feature-based", int(self.n_samples), epsilon=self._epsilon(), concave=self.concave_func, refine=False
        )


class MaxCoverageSelection(BaseSelection):
    """apricot's ``MaxCoverageSelection`` (``threshold``) over :class:`batchsel.MaxCoverage`."""

    def __init__(
        self,
        n_samples: Any,
        threshold: float = 1.0,
        initial_subset: Any = None,
        optimizer: Any = "two-stage",
        optimizer_kwds: dict | None = None,
        n_jobs: int = 1,
        random_state: Any = None,
        verbose: bool = False,
    ) -> None:
        self.threshold = threshold
        super().__init__(
            n_samples, initial_subset, optimizer, optimizer_kwds, n_jobs=n_jobs, random_state=random_state,
            verbose=verbose,
        )  # fmt: skip

    def _make(self, matrix: Any) -> SetFunction:
        return MaxCoverage(matrix, threshold=self.threshold)


class MixtureSelection(BaseSelection):
    """apricot's ``MixtureSelection``: ``sum_i weights[i] * functions[i]`` over
    :class:`batchsel.Mixture`; ``functions`` are selections of this module. With a
    ``metric`` the parts share that similarity (apricot sets them to ``"precomputed"``);
    ``weights`` may be a list."""

    def __init__(
        self,
        n_samples: Any,
        functions: list,
        weights: Any = None,
        metric: str = "ignore",
        initial_subset: Any = None,
        optimizer: Any = "two-stage",
        optimizer_kwds: dict | None = None,
        n_neighbors: Any = None,
        reservoir: Any = None,
        max_reservoir_size: int = 1000,
        n_jobs: int = 1,
        random_state: Any = None,
        verbose: bool = False,
    ) -> None:
        if len(functions) < 2:
            raise ValueError("Must mix at least two functions.")
        self.m = len(functions)
        self.functions = functions
        self.weights = np.ones(self.m) if weights is None else np.asarray(weights, dtype=np.float64)
        super().__init__(
            n_samples, initial_subset, optimizer, optimizer_kwds, reservoir, max_reservoir_size, n_jobs,
            random_state, verbose,
        )  # fmt: skip
        self._over_similarity(metric, n_neighbors)
        self._square = self.metric != "ignore"
        for function in self.functions:
            function.initial_subset = self.initial_subset
            function.metric = "precomputed"

    def _make(self, matrix: Any) -> SetFunction:
        return Mixture([g._make(matrix) for g in self.functions], weights=self.weights)


class _OverCustom:
    """The function of apricot's custom selections: ``function(rows, **function_kwds)`` of
    the chosen rows (of the features, or of the similarity), over :class:`batchsel.Custom`."""

    def _set_function(self, function: Callable, function_kwds: dict | None) -> None:
        if not callable(function):
            raise ValueError("Must pass in a callable function.")
        self.function = function
        self.function_kwds = {} if function_kwds is None else function_kwds

    def _make(self, matrix: Any) -> SetFunction:
        dense = matrix.toarray() if sp.issparse(matrix) else matrix
        return Custom(dense, self.function, **self.function_kwds)


class CustomSelection(_OverCustom, BaseSelection):
    """apricot's ``CustomSelection``: ``function(rows)`` of the chosen rows, over
    :class:`batchsel.Custom` (``function_kwds`` passed to it)."""

    def __init__(
        self,
        n_samples: Any,
        function: Callable,
        initial_subset: Any = None,
        optimizer: Any = "two-stage",
        optimizer_kwds: dict | None = None,
        function_kwds: dict | None = None,
        n_jobs: int = 1,
        random_state: Any = None,
        verbose: bool = False,
    ) -> None:
        self._set_function(function, function_kwds)
        super().__init__(
            n_samples, initial_subset, optimizer, optimizer_kwds, n_jobs=n_jobs, random_state=random_state,
            verbose=verbose,
        )  # fmt: skip


class CustomGraphSelection(_OverCustom, BaseGraphSelection):
    """apricot's ``CustomGraphSelection``: ``function(rows)`` of the chosen rows of the
    similarity (``metric``), over :class:`batchsel.Custom`."""

    def __init__(
        self,
        n_samples: Any,
        function: Callable,
        metric: str = "euclidean",
        initial_subset: Any = None,
        optimizer: Any = "two-stage",
        optimizer_kwds: dict | None = None,
        function_kwds: dict | None = None,
        n_jobs: int = 1,
        random_state: Any = None,
        verbose: bool = False,
    ) -> None:
        self._set_function(function, function_kwds)
        super().__init__(
            n_samples, metric, initial_subset, optimizer, optimizer_kwds, n_jobs=n_jobs, random_state=random_state,
            verbose=verbose,
        )  # fmt: skip
