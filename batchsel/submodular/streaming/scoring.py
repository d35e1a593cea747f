"""What sieve-streaming maximizes, over rows: the feature-based gains of rows against a
state of feature sums (:class:`FeatureRows`), and facility location against a fixed
reference sample (:class:`ReferenceRows`, and :class:`ReferenceFacilityLocation`, the same
as an offline set function).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from batchsel.core.checks import check_number, check_scale, load_embeddings
from batchsel.submodular.functions.base import SetFunction
from batchsel.submodular.functions.feature_based import CONCAVE, concave_increment
from batchsel.submodular.streaming.kernels import FACILITY, KINDS

METRICS = ("euclidean", "cosine")
# Reference rows per similarity product in ReferenceFacilityLocation (bounds block x m).
_REF_ROWS = 2048


class FeatureRows:
    """Feature-based gains of rows against a state of ``d`` feature sums (float64): the
    objective :class:`~batchsel.submodular.streaming.SieveStreaming` streams for
    ``"feature-based"``, with the increments of :class:`batchsel.FeatureBased`.

    The objectives over rows share one interface: :meth:`state_size`, :meth:`prepare` (a
    chunk's rows as the sieve scores them), :meth:`gains`, :meth:`add`, and ``kind`` /
    ``param`` for the compiled loops (:mod:`batchsel.submodular.streaming.kernels`; kind -1:
    none, the numpy gains are used).

    Parameters
    ----------
    concave : str or callable
        One of ``FeatureBased``'s concave functions, or a callable (numpy gains).
    saturation : float or None
        ``concave="min"``'s cap (> 0); None otherwise.

    Example
    -------
    >>> rows = FeatureRows("sqrt", None)
    >>> block = rows.prepare(np.array([[4.0, 0.0], [1.0, 1.0]]), 0)
    >>> state = np.zeros(rows.state_size(2))
    >>> rows.add(state, block, 0)
    >>> rows.gains(state, block, np.array([0, 1])).round(3).tolist()
    [0.828, 1.236]
    """

    def __init__(self, concave: str | Callable, saturation: float | None) -> None:
        if not callable(concave) and concave not in CONCAVE:
            raise ValueError(f"concave must be one of {CONCAVE} or a callable, got {concave!r}")
        if concave == "min":
            saturation = check_number(saturation, "saturation", 0.0)
            if saturation <= 0:
                raise ValueError(f"concave='min' needs saturation > 0, got {saturation!r}")
        elif saturation is not None:
            raise ValueError("saturation applies to concave='min' only")
        self.concave, self.saturation = concave, saturation
        # a callable has no compiled kernel: numpy gains, in batches (see SieveSet)
        self.kind = KINDS.get(concave, -1) if isinstance(concave, str) else -1
        self.param = float(saturation) if saturation is not None else 0.0
        # the same increment as FeatureBased: monotone in the state in floating point, so a
        # row's gain never exceeds its singleton value (the sieves' filter relies on it)
        self._inc = concave_increment(concave, saturation)

    def state_size(self, d: int) -> int:
        """The length of a sieve's state for rows of ``d`` columns: ``d`` (feature sums)."""
        return d

    def prepare(self, x: np.ndarray, where: int) -> np.ndarray:
        """The rows ``x`` (numbered from ``where`` in the stream) as scored: themselves,
        checked non-negative (a ``ValueError`` names the first negative row)."""
        if x.size and x.min() < 0:
            row = where + int(np.flatnonzero((x < 0).any(axis=1))[0])
            raise ValueError(
                f"feature-based selection needs non-negative features; row {row} has "
                f"{float(x[row - where].min())} (use e.g. ReLU or softmax outputs)"
            )
        return x

    def gains(self, state: np.ndarray, block: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The gains (float64) of the rows ``rows`` of a prepared ``block`` against ``state``."""
        return self._inc(state[None, :], block[rows].astype(np.float64)).sum(axis=1)

    def add(self, state: np.ndarray, block: np.ndarray, row: int) -> None:
        """Add row ``row`` of a prepared ``block`` to ``state`` (in place)."""
        state += block[row]


class ReferenceRows:
    """Facility-location gains of rows against the coverage (float64) of ``m`` reference
    rows: ``sum_r max(sim(x, r) - coverage_r, 0)``; the objective
    :class:`~batchsel.submodular.streaming.SieveStreaming` streams for
    ``"facility-location"``, with :class:`FeatureRows`' interface (there, a row is scored
    by its similarity to the reference rows).

    Parameters
    ----------
    reference : numpy.ndarray
        The ``m x d`` reference rows.
    metric : str
        ``"euclidean"`` (``max(D - d^2, 0)``, ``D`` the largest squared distance between two
        reference rows) or ``"cosine"`` (the squared cosine).

    Example
    -------
    >>> rows = ReferenceRows(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]], np.float32), "euclidean")
    >>> block = rows.prepare(np.array([[0.0, 0.0]], np.float32), 0)
    >>> block.tolist(), rows.offset
    ([[2.0, 1.0, 1.0]], 2.0)
    """

    def __init__(self, reference: np.ndarray, metric: str) -> None:
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
        self.metric = metric
        self.reference = reference
        self.kind, self.param = FACILITY, 0.0
        r = reference.astype(np.float64)
        if metric == "euclidean":
            # Centered on the reference mean: float32 distances |x|^2 + |r|^2 - 2 x.r lose
            # little to cancellation then (as FacilityLocation.from_embeddings).
            self._center = r.mean(axis=0)
            # float32 squared distances must neither overflow nor underflow (as offline)
            check_scale(reference, "reference", center=self._center)
            rc = r - self._center
            self._r = rc.astype(np.float32)
            self._rnorm = np.einsum("ij,ij->i", rc, rc)
            # apricot's similarity max d^2 - d^2, with max d^2 over the reference pairs;
            # rows of the stream farther from a reference row than that count 0 for it
            # (max(., 0) keeps f monotone and submodular).
            gram = rc @ rc.T
            d2 = self._rnorm[:, None] + self._rnorm[None, :] - 2 * gram
            self.offset = float(max(d2.max(), 0.0))
        else:
            norms = np.sqrt(np.einsum("ij,ij->i", r, r))
            self._r = (r / np.where(norms > 0, norms, 1.0)[:, None]).astype(np.float32)
            self.offset = 0.0

    def state_size(self, d: int) -> int:
        """The length of a sieve's state: ``m``, the coverage of each reference row."""
        return self.reference.shape[0]

    def prepare(self, x: np.ndarray, where: int) -> np.ndarray:
        """The ``len(x) x m`` similarity (float32) of ``x`` to the reference."""
        if x.shape[1] != self.reference.shape[1]:
            raise ValueError(f"rows have {x.shape[1]} columns but the reference has {self.reference.shape[1]}")
        if self.metric == "euclidean":
            check_scale(x, f"rows from {where}", center=self._center, underflow=False)
            xc = x.astype(np.float64) - self._center
            xnorm = np.einsum("ij,ij->i", xc, xc)
            sim = xc.astype(np.float32) @ self._r.T
            sim *= 2
            sim -= xnorm.astype(np.float32)[:, None]
            sim -= self._rnorm.astype(np.float32)[None, :]
            sim += np.float32(self.offset)  # offset - d^2
            np.maximum(sim, 0, out=sim)
            return sim
        norms = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64))
        xn = (x / np.where(norms > 0, norms, 1.0)[:, None]).astype(np.float32)
        sim = xn @ self._r.T
        np.clip(sim, -1, 1, out=sim)
        return np.square(sim, out=sim)  # apricot's cosine similarity: the squared cosine

    def gains(self, state: np.ndarray, block: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The gains (float64) of the rows ``rows`` of a prepared ``block`` against ``state``."""
        return np.maximum(block[rows] - state, 0.0).sum(axis=1)

    def add(self, state: np.ndarray, block: np.ndarray, row: int) -> None:
        """Add row ``row`` of a prepared ``block`` to the coverage ``state`` (in place)."""
        np.maximum(state, block[row], out=state)


class ReferenceFacilityLocation(SetFunction):
    """Facility location of N rows over a fixed reference sample ``R`` of m rows:
    ``f(S) = sum_{r in R} max_{s in S} sim(r, s)``; the function
    :class:`SieveStreaming` streams for ``"facility-location"``, here as an offline
    :class:`~batchsel.submodular.functions.SetFunction` (e.g. for :func:`batchsel.maximize`).

    ``sim``: ``"euclidean"``: ``max(D - d^2, 0)`` with ``d^2`` the squared euclidean
    distance and ``D`` the largest squared distance between two reference rows (apricot's
    ``max d^2 - d^2``, measured on the reference); ``"cosine"``: the squared cosine. The
    similarity of candidates is computed when their gains are asked for (``N x m`` is
    never stored), so ``embeddings`` may be a memmap.

    Example
    -------
    >>> import numpy as np
    >>> import batchsel
    >>> x = np.random.default_rng(0).normal(size=(500, 8)).astype(np.float32)
    >>> f = ReferenceFacilityLocation(x, reference=x[:100])
    >>> chosen = batchsel.maximize(f, 5)
    >>> len(chosen), round(f.evaluate(chosen.indices) / chosen.value, 6)
    (5, 1.0)
    """

    def __init__(self, embeddings: Any, reference: Any, metric: str = "euclidean") -> None:
        self.embeddings = load_embeddings(embeddings)
        ref = load_embeddings(reference, name="reference")
        if ref.shape[1] != self.embeddings.shape[1]:
            raise ValueError(f"reference has {ref.shape[1]} columns but the embeddings have {self.embeddings.shape[1]}")
        self._rows = ReferenceRows(np.array(ref), metric)
        self.metric = metric
        super().__init__(self.embeddings.shape[0])

    @property
    def reference(self) -> np.ndarray:
        return self._rows.reference

    def _reset_state(self) -> None:
        self._cover = np.zeros(self._rows.reference.shape[0], dtype=np.float64)

    def _gains(self, idx: np.ndarray) -> np.ndarray:
        out = np.empty(idx.size, dtype=np.float64)
        for s in range(0, idx.size, _REF_ROWS):
            part = idx[s : s + _REF_ROWS]
            sim = self._rows.prepare(self.embeddings[part], 0)
            out[s : s + part.size] = self._rows.gains(self._cover, sim, np.arange(part.size))
        return out

    def _add(self, j: int) -> None:
        sim = self._rows.prepare(self.embeddings[j : j + 1], j)
        self._rows.add(self._cover, sim, 0)
