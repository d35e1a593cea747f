"""apricot's selections, each over the batchsel set function of the same name:
facility location, graph cut, sum redundancy and saturated coverage over a similarity of
the rows; feature-based, max coverage, mixtures and custom functions.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from batchsel.apricot.base import BaseGraphSelection, BaseSelection
from batchsel.apricot.sieve import concave_array, coverage_step, facility_step, feature_step
from batchsel.apricot.utils import similarity
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

    def _sieve_parts(self, x: np.ndarray, streaming: bool) -> tuple:
        if streaming:
            self._fill_reservoir(x)
            reservoir = np.asarray(self.reservoir, dtype=np.float64)[: self.reservoir_size]
            matrix = np.asarray(similarity(x, self.metric, Y=reservoir), dtype=np.float64)
            width = int(self.max_reservoir_size)
            if matrix.shape[1] > width:
                raise ValueError(
                    f"a precomputed chunk has {matrix.shape[1]} columns, more than max_reservoir_size={width}"
                )
        else:
            m = self._matrix(x)
            matrix = m.toarray() if sp.issparse(m) else np.asarray(m, dtype=np.float64)
            width = matrix.shape[1]
        singles = np.maximum(matrix, 0.0).sum(axis=1)
        # a gain never exceeds the row's mean similarity (coverage only grows, d only grows)
        bound = matrix.mean(axis=1) if matrix.size and matrix.min() >= 0.0 else None
        return matrix, singles, facility_step(matrix.shape[1]), width, bound

    def _fill_reservoir(self, x: np.ndarray) -> None:
        """apricot's reservoir: the first ``max_reservoir_size`` rows, then row ``t``
        replaces row ``random_state.choice(t)`` when that is within the reservoir."""
        if self.reservoir is None:
            self.reservoir = np.empty((int(self.max_reservoir_size), x.shape[1]))
        if not self._update_reservoir:
            return
        for i in range(x.shape[0]):
            if self.reservoir_size < self.max_reservoir_size:
                self.reservoir[self.reservoir_size] = x[i]
                self.reservoir_size += 1
            else:
                r = self.random_state.choice(self.n_seen_ + i)
                if r < self.max_reservoir_size:
                    self.reservoir[r] = x[i]


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

    def _sieve_parts(self, x: np.ndarray, streaming: bool) -> tuple:
        func = concave_array(self.concave_func)
        singles = func(x).sum(axis=1) - func(np.zeros(x.shape[1])).sum()
        return x, singles, feature_step(func), x.shape[1], None


class MaxCoverageSelection(BaseSelection):
    """apricot's ``MaxCoverageSelection`` (``threshold``) over :class:`batchsel.MaxCoverage`;
    its gains are counts, exact ties everywhere: lazy and approximate lazy greedy break them
    in apricot's queue order."""

    _apricot_queue = True

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

    def _sieve_parts(self, x: np.ndarray, streaming: bool) -> tuple:
        singles = np.fmin(x, self.threshold).sum(axis=1)
        return x, singles, coverage_step(self.threshold), x.shape[1], None


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
