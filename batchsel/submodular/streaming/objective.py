"""What the sieves of one stream score rows with (:class:`StreamObjective`): the
feature-based rows, or facility location over a reference that is given, a seeded uniform
sample of the data that ``fit`` streams, or the stream's first rows, held back until enough
have arrived.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from batchsel.core.checks import load_embeddings
from batchsel.submodular.functions.base import SetFunction
from batchsel.submodular.functions.feature_based import FeatureBased
from batchsel.submodular.streaming.scoring import FeatureRows, ReferenceFacilityLocation, ReferenceRows


class StreamObjective:
    """The objective :class:`~batchsel.submodular.streaming.SieveStreaming` scores rows
    with: :class:`~batchsel.submodular.streaming.scoring.FeatureRows`, or
    :class:`~batchsel.submodular.streaming.scoring.ReferenceRows` once facility
    location's reference is fixed; until then, where the reference comes from.

    Parameters
    ----------
    objective : str
        ``"feature-based"`` or ``"facility-location"``.
    concave, saturation : str or callable, float or None
        The feature-based objective's (``"sqrt"`` and None for facility location).
    metric : str
        Facility location's metric.
    reference : array-like or None
        The reference rows the user gave; None: sampled by :meth:`sample_from`, or the
        first ``size`` rows of the stream (:meth:`hold`).
    size : int
        Rows of a sampled or held-back reference.
    seed : int
        Seed of the sample.

    Attributes
    ----------
    rows : FeatureRows, ReferenceRows or None
        The objective over rows; None while facility location's reference is not fixed.
    given : numpy.ndarray or None
        The reference to fix (given or sampled).
    pending : list of numpy.ndarray
        The rows held back so far (copies); ``pending_rows`` counts them.

    Example
    -------
    >>> ref = StreamObjective("facility-location", "sqrt", None, "euclidean", None, 3, seed=0)
    >>> ref.hold(np.ones((2, 4), np.float32)), ref.hold(np.ones((2, 4), np.float32))
    (False, True)
    >>> ref.release().shape, ref.pending_rows, ref.rows
    ((4, 4), 0, None)
    """

    def __init__(
        self,
        objective: str,
        concave: str | Callable,
        saturation: float | None,
        metric: str,
        reference: Any,
        size: int,
        seed: int,
    ) -> None:
        self.objective, self.metric, self.size, self.seed = objective, metric, size, seed
        self.concave, self.saturation = concave, saturation
        if objective == "feature-based":
            self.rows: Any = FeatureRows(concave, saturation)
            if reference is not None:
                raise ValueError("reference applies to objective='facility-location' only")
        elif concave != "sqrt" or saturation is not None:
            raise ValueError("concave and saturation apply to objective='feature-based' only")
        self.given = None if reference is None else np.array(load_embeddings(reference, "reference"))
        self.sampled = False
        self.pending: list[np.ndarray] = []
        self.pending_rows = 0
        self.restart()

    def fix(self, reference: np.ndarray, d: int | None) -> None:
        """Fix facility location's reference: score rows against ``reference`` from now on.

        Parameters
        ----------
        reference : numpy.ndarray
            The ``m x d`` reference rows.
        d : int or None
            Columns of the stream's rows (None before the first row).
        """
        if d is not None and reference.shape[1] != d:
            raise ValueError(f"reference has {reference.shape[1]} columns but the rows have {d}")
        self.rows = ReferenceRows(reference, self.metric)

    def state_size(self, d: int | None) -> int:
        """Length of a sieve's state for rows of ``d`` columns (0 before the objective is
        known)."""
        return 0 if self.rows is None else self.rows.state_size(d or 0)

    def fixed_reference(self) -> np.ndarray | None:
        """A copy of facility location's fixed reference; None before, or for feature-based."""
        return None if self.rows is None or self.objective != "facility-location" else self.rows.reference.copy()

    def function(self, rows: np.ndarray) -> SetFunction:
        """The set function over the kept ``rows`` that the refinement maximizes.

        Parameters
        ----------
        rows : numpy.ndarray
            The rows (``n x d``).

        Returns
        -------
        SetFunction
            :class:`batchsel.FeatureBased`, or :class:`ReferenceFacilityLocation` over the
            fixed reference.
        """
        if self.objective == "feature-based":
            return FeatureBased(rows, self.concave, self.saturation)
        return ReferenceFacilityLocation(rows, self.rows.reference, self.metric)

    def restart(self) -> None:
        """Start a new stream: forget facility location's fixed reference, the rows held
        back, and a sampled reference (``fit`` draws it again from its data); a given one
        stays."""
        if self.objective == "facility-location":
            self.rows = None
        if self.sampled:
            self.given = None
        self.sampled = False
        self.pending, self.pending_rows = [], 0

    def sample_from(self, x: np.ndarray) -> None:
        """Unless one was given, draw the reference: ``size`` rows of ``x`` (all when fewer),
        uniformly without replacement, seeded, read in order (a memmap front to back).

        Parameters
        ----------
        x : numpy.ndarray
            The rows (an array or memmap).
        """
        if self.given is not None:
            return
        n = x.shape[0]
        m = min(self.size, n)
        # sorted: a memmap is read front to back
        rows = np.sort(np.random.default_rng(self.seed).choice(n, size=m, replace=False))
        self.given = np.array(load_embeddings(x[rows], name="reference sample"))
        self.sampled = True

    def hold(self, x: np.ndarray) -> bool:
        """Hold back the rows ``x`` (a copy) until the reference is fixed.

        Parameters
        ----------
        x : numpy.ndarray
            The next rows of the stream.

        Returns
        -------
        bool
            Whether ``size`` rows have now arrived.
        """
        self.pending.append(np.array(x))
        self.pending_rows += x.shape[0]
        return self.pending_rows >= self.size

    def load(self, pending: list[np.ndarray]) -> None:
        """Hold back ``pending`` (copies), as a ``state_dict`` saved them.

        Parameters
        ----------
        pending : list of numpy.ndarray
            The rows held back.
        """
        self.pending = [np.array(p) for p in pending]
        self.pending_rows = sum(p.shape[0] for p in self.pending)

    def release(self) -> np.ndarray | None:
        """The rows held back, in order, no longer held; None when there are none.

        Returns
        -------
        numpy.ndarray or None
        """
        if not self.pending:
            return None
        rows = np.concatenate(self.pending)
        self.pending, self.pending_rows = [], 0
        return rows
