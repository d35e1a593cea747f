"""Streaming selection: sieve-streaming (Badanidiyuru, Mirzasoleiman, Karbasi, Krause, KDD 2014).

One pass over chunks of an ``.npy`` file, a memmap or any iterator of arrays, in memory
O(k d) plus one chunk; apricot calls it ``partial_fit``. The best sieve is a
``(1/2 - eps)``-approximation of the best k rows of the stream; ``refine=True`` (default)
runs lazy greedy on the union of the sieves' rows at the end. Feature-based functions are
exact; facility location is evaluated against a reference sample
(:class:`ReferenceFacilityLocation`). Resumable through ``state_dict``.

The method and its measurements: docs/guide/streaming.md.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import re
from typing import Any, Callable, Iterable, Iterator

import numpy as np
from numba import njit
from tqdm.auto import tqdm

from batchsel.core.checks import check_int, check_number, check_scale, check_seed, load_embeddings
from batchsel.core.io import NpyRows
from batchsel.core.state import from_portable, to_portable
from batchsel.submodular.functions.base import SetFunction
from batchsel.submodular.functions.feature_based import CONCAVE, FeatureBased, concave_increment
from batchsel.submodular.optimizers import Selection, maximize

logger = logging.getLogger(__name__)

OBJECTIVES = ("feature-based", "facility-location")
METRICS = ("euclidean", "cosine")
DEFAULT_CHUNK_ROWS = 1 << 16
DEFAULT_REFERENCE_SIZE = 1000
# Rows processed at a time inside a chunk: bounds the float64 temporaries (block x d) and
# the facility-location similarity block (block x m float32, 64 MB at m = 1000).
_BLOCK_ROWS = 1 << 14
# Candidate gains evaluated at once while scanning a sieve for its next row: the first
# accepted row ends the scan (the gains after it change), so start small, then double.
_FIRST_BATCH = 16
_MAX_BATCH = 4096
# Reference rows per similarity product in ReferenceFacilityLocation (bounds block x m).
_REF_ROWS = 2048


# -- kernels ---------------------------------------------------------------------------------
# The sieve is sequential row by row (a row's gain depends on the rows the sieve took
# before it): one compiled pass per sieve and block, no temporaries. No fastmath: the sums
# run in a fixed order whatever the row's address, so any chunking gives the same result.
_SQRT, _LOG, _INVERSE, _MIN, _FACILITY = 0, 1, 2, 3, 4
_KINDS = {"sqrt": _SQRT, "log": _LOG, "inverse": _INVERSE, "sigmoid": _INVERSE, "min": _MIN}


@njit(cache=True, nogil=True, inline="always")
def _gain(kind, param, row, state):
    acc = 0.0
    tiny = 2.2250738585072014e-308
    for f in range(row.shape[0]):
        x = np.float64(row[f])
        if x == 0.0:  # every term is 0 there (ReLU features are half zeros); the sum is unchanged
            continue
        c = state[f]
        if kind == _FACILITY:  # max(sim - coverage, 0)
            acc += max(x - c, 0.0)
        elif kind == _SQRT:  # sqrt(c + x) - sqrt(c), in a form monotone in c
            acc += x / max(np.sqrt(c + x) + np.sqrt(c), tiny)
        elif kind == _LOG:
            acc += np.log1p(x / (1.0 + c))
        elif kind == _INVERSE:
            acc += x / ((1.0 + c) * (1.0 + c + x))
        else:  # min(c + x, a) - min(c, a)
            acc += max(min(x, param - c), 0.0)
    return acc


@njit(cache=True, nogil=True)
def _singletons(kind, param, block, zero, out):
    for t in range(block.shape[0]):
        out[t] = _gain(kind, param, block[t], zero)


@njit(cache=True, nogil=True)
def _scan(kind, param, block, single, start, stop, k, v, state, indices, gains, size, value, base, added):
    """Sieve ``v`` over rows ``start .. stop - 1``: returns (size, value, evaluations,
    rows added); ``added`` gets the positions of the rows taken."""
    evaluations = 0
    n_added = 0
    for t in range(start, stop):
        if size >= k:
            break
        threshold = (v / 2.0 - value) / (k - size)
        s = single[t]
        # a gain never exceeds the singleton value (the terms are monotone in the state)
        if s <= 0.0 or s < threshold:
            continue
        g = _gain(kind, param, block[t], state)
        evaluations += 1
        if g > 0.0 and g >= threshold:
            row = block[t]
            if kind == _FACILITY:
                for f in range(row.shape[0]):
                    state[f] = max(state[f], np.float64(row[f]))
            else:
                for f in range(row.shape[0]):
                    state[f] += np.float64(row[f])
            indices[size] = base + t
            gains[size] = g
            value += g
            size += 1
            added[n_added] = t
            n_added += 1
    return size, value, evaluations, n_added


# -- objectives over rows -------------------------------------------------------------------
class _FeatureRows:
    """Feature-based gains of rows against a state of ``d`` feature sums (float64)."""

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
        # a callable has no compiled kernel: numpy gains, in batches (see _run_sieve)
        self.kind = _KINDS.get(concave, -1) if isinstance(concave, str) else -1
        self.param = float(saturation) if saturation is not None else 0.0
        # the same increment as FeatureBased: monotone in the state in floating point, so a
        # row's gain never exceeds its singleton value (the filter in _run_sieve relies on it)
        self._inc = concave_increment(concave, saturation)

    def state_size(self, d: int) -> int:
        return d

    def prepare(self, x: np.ndarray, where: int) -> np.ndarray:
        if x.size and x.min() < 0:
            row = where + int(np.flatnonzero((x < 0).any(axis=1))[0])
            raise ValueError(
                f"feature-based selection needs non-negative features; row {row} has "
                f"{float(x[row - where].min())} (use e.g. ReLU or softmax outputs)"
            )
        return x

    def gains(self, state: np.ndarray, block: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return self._inc(state[None, :], block[rows].astype(np.float64)).sum(axis=1)

    def add(self, state: np.ndarray, block: np.ndarray, row: int) -> None:
        state += block[row]


class _ReferenceRows:
    """Facility-location gains of rows against the coverage (float64) of ``m`` reference
    rows: ``sum_r max(sim(x, r) - coverage_r, 0)``."""

    def __init__(self, reference: np.ndarray, metric: str) -> None:
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
        self.metric = metric
        self.reference = reference
        self.kind, self.param = _FACILITY, 0.0
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
        return np.maximum(block[rows] - state, 0.0).sum(axis=1)

    def add(self, state: np.ndarray, block: np.ndarray, row: int) -> None:
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
        self._rows = _ReferenceRows(np.array(ref), metric)
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


# -- the sieves -----------------------------------------------------------------------------
class _Sieve:
    """One threshold's candidate set: k slots of indices and gains, the objective's state."""

    __slots__ = ("size", "value", "indices", "gains", "state")

    def __init__(self, k: int, state_size: int) -> None:
        self.size = 0
        self.value = 0.0
        self.indices = np.full(k, -1, dtype=np.int64)
        self.gains = np.zeros(k, dtype=np.float64)
        self.state = np.zeros(state_size, dtype=np.float64)


class SieveStreaming:
    """Sieve-streaming maximization (Badanidiyuru et al. 2014) of a monotone submodular
    function over rows that arrive in chunks; see the module docstring for the method and
    which functions stream.

    Parameters
    ----------
    objective:
        ``"feature-based"`` (non-negative features, ``concave`` / ``saturation`` as
        :class:`batchsel.FeatureBased`) or ``"facility-location"`` (over a reference
        sample: ``metric``, ``reference``, ``reference_size``).
    k:
        Number of rows to pick. The best sieve may hold fewer (it is still a
        ``(1/2 - eps)``-approximation; a warning says so).
    epsilon:
        Threshold spacing: ``log(2k) / log(1 + epsilon)`` sieves, guarantee ``1/2 - epsilon``.
    reference:
        ``m x d`` reference rows for facility location; None: a seeded uniform sample of
        ``reference_size`` rows when :meth:`fit` gets an array or a file, else the first
        ``reference_size`` rows of the stream (held back until that many have arrived).
    seed:
        Seed of the reference sample (the sieve itself draws nothing).
    refine:
        Keep the sieves' rows and finish with lazy greedy over their union (see above);
        False: the best sieve, as the paper and apricot.
    progress:
        A tqdm progress bar over the rows in :meth:`fit`.

    Attributes
    ----------
    indices_:
        Global row indices (int64) of the result: the best sieve's rows in the order they
        arrived, or, when the refinement did better, lazy greedy's picks in pick order.
    gains_:
        Their marginal gains (float64) when they joined.
    value_:
        ``f(indices_)``, the sum of ``gains_``.
    selection_:
        The same as a :class:`batchsel.Selection` (``optimizer="sieve"``).
    n_seen_:
        Rows processed so far (rows held back for the reference included).
    max_singleton_:
        The largest singleton value ``m`` seen.
    n_sieves_:
        Sieves currently open; ``evaluations_``: marginal gains computed.
    held_indices_:
        Global row indices (int64, sorted) of the rows the open sieves and the remembered
        best closed sieve hold: the rows a later chunk may still make part of the result.

    Apricot's ``partial_fit`` for comparison: it keeps thresholds from ``(1 + eps) - 1``
    up (never drops the low ones, so their number grows with the spread of the values)
    and a copy of every sieve's rows; for facility location it draws a reservoir of 1000
    rows *while* streaming, so sieves built against earlier reservoir rows are scored
    against a changed function, and its values are means over the reservoir. Here the
    reference is fixed before the first row is scored, values are sums, a row held by
    several sieves is kept once (and only with ``refine``). On 100k x 64 features, k = 100,
    epsilon 0.1: apricot 0.91 of lazy greedy's value at about 4 300 rows per CPU second,
    this class 0.93 at about 140 000 (``benchmarks/bench_streaming.py``).

    Example
    -------
    >>> import numpy as np
    >>> import batchsel
    >>> x = np.abs(np.random.default_rng(0).normal(size=(2000, 16))).astype(np.float32)
    >>> sieve = SieveStreaming("feature-based", k=20).fit(x, chunk_rows=300)
    >>> offline = batchsel.maximize(batchsel.FeatureBased(x), 20)
    >>> len(sieve.indices_), bool(sieve.value_ >= 0.9 * offline.value)
    (20, True)
    >>> a = SieveStreaming("feature-based", k=20)
    >>> for chunk in np.array_split(x, 7):
    ...     _ = a.partial_fit(chunk)
    >>> bool(np.array_equal(a.indices_, sieve.indices_))
    True
    """

    # the stream's state (reset by _clear)
    _d: int | None
    _pending: list[np.ndarray]
    _pending_rows: int
    _kept: dict[int, np.ndarray]
    _dropped: tuple[float, tuple[int, np.ndarray, np.ndarray]] | None

    def __init__(
        self,
        objective: str,
        k: int,
        *,
        epsilon: float = 0.1,
        concave: str | Callable = "sqrt",
        saturation: float | None = None,
        metric: str = "euclidean",
        reference: Any = None,
        reference_size: int = DEFAULT_REFERENCE_SIZE,
        seed: int = 0,
        refine: bool = True,
        progress: bool = False,
    ) -> None:
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
        self.objective = objective
        self.k = check_int(k, "k", minimum=1)
        self.epsilon = check_number(epsilon, "epsilon", 0.0, 1.0)
        if not 0 < self.epsilon < 1:
            raise ValueError(f"epsilon must be in (0, 1), got {epsilon!r}")
        self.concave, self.saturation = concave, saturation
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
        self.metric = metric
        self.reference_size = check_int(reference_size, "reference_size", minimum=1)
        self.seed = check_seed(seed)
        self.progress = progress
        if not isinstance(refine, (bool, np.bool_)):
            raise TypeError(f"refine must be True or False, got {refine!r}")
        self.refine = bool(refine)
        if objective == "feature-based":
            self._fn: Any = _FeatureRows(concave, saturation)
            if reference is not None:
                raise ValueError("reference applies to objective='facility-location' only")
        elif concave != "sqrt" or saturation is not None:
            raise ValueError("concave and saturation apply to objective='feature-based' only")
        self._given_reference = None if reference is None else np.array(load_embeddings(reference, "reference"))
        self._clear()

    # -- public interface --------------------------------------------------------------
    def partial_fit(self, chunk: Any) -> "SieveStreaming":
        """Process the next rows (an ``n x d`` array-like, memmap slices included); rows
        are numbered globally in the order they arrive; an empty chunk (0 x d) is skipped."""
        shape = getattr(chunk, "shape", None)
        if shape is not None and len(shape) == 2 and shape[0] == 0:
            return self
        try:
            x = load_embeddings(chunk, name=f"the chunk from row {self.n_seen_}")
        except ValueError as exc:  # name the row as numbered in the stream, not in the chunk
            message = re.sub(
                r"\(row (\d+)\)|at row (\d+)",
                lambda m: m.group(0).replace(
                    m.group(1) or m.group(2), str(self.n_seen_ + int(m.group(1) or m.group(2)))
                ),
                str(exc),
            )
            raise ValueError(message) from None
        if self._d is None:
            self._d = x.shape[1]
        elif x.shape[1] != self._d:
            raise ValueError(f"chunk at row {self.n_seen_} has {x.shape[1]} columns, earlier rows had {self._d}")
        if self.objective == "facility-location" and self._fn is None:
            if self._given_reference is not None:
                self._set_reference(self._given_reference)
            else:  # the first reference_size rows: held back until they have all arrived
                self._pending.append(np.array(x))
                self._pending_rows += x.shape[0]
                self.n_seen_ += x.shape[0]
                if self._pending_rows >= self.reference_size:
                    self._flush()
                return self
        self._consume(x, self.n_seen_)
        self.n_seen_ += x.shape[0]
        self._update_result()
        return self

    def fit(self, data: Any, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> "SieveStreaming":
        """Start over and stream ``data``: the path of a ``.npy`` file (read chunk by chunk,
        never whole, nor mapped: the pages of a memmap count in the resident memory), an
        array or memmap (sliced into ``chunk_rows`` rows), or an iterable of arrays."""
        chunk_rows = check_int(chunk_rows, "chunk_rows", minimum=1)
        self._clear()
        total = None
        if isinstance(data, (str, os.PathLike)):
            source = NpyRows(os.fspath(data))
            total = source.shape[0]
            chunks: Iterable[Any] = source.chunks(chunk_rows)
            sample_from: Any = source.array
        elif isinstance(data, np.ndarray) or hasattr(data, "__array__") or hasattr(data, "detach"):
            x = load_embeddings(data) if not isinstance(data, np.ndarray) or data.ndim != 2 else data
            total = x.shape[0]
            chunks = (x[s : s + chunk_rows] for s in range(0, total, chunk_rows))
            sample_from = x
        else:
            chunks, sample_from = iter(data), None
        if self.objective == "facility-location" and self._given_reference is None and sample_from is not None:
            self._given_reference = self._sample_reference(sample_from)
            self._sampled_reference = True
        with tqdm(total=total, unit="rows", unit_scale=True, disable=not self.progress, desc="sieve") as bar:
            for chunk in chunks:
                self.partial_fit(chunk)
                bar.update(len(chunk))
        self._flush()
        if self.n_seen_ == 0:
            raise ValueError("the data holds no rows")
        if self.indices_.size < self.k:
            logger.warning(
                "the best sieve holds %d of k=%d rows (%d rows seen)", self.indices_.size, self.k, self.n_seen_
            )
        return self

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue the stream (copies): pass it to
        :meth:`load_state_dict` of a ``SieveStreaming`` built with the same arguments."""
        exps = sorted(self._sieves)
        size = self._state_size
        return to_portable(
            {
                "config": self._config(),
                "n_seen": self.n_seen_,
                "d": self._d,
                "max_singleton": self.max_singleton_,
                "evaluations": self.evaluations_,
                "reference": None
                if self._fn is None or self.objective != "facility-location"
                else self._fn.reference.copy(),
                "pending": [p.copy() for p in self._pending],
                "exponents": np.array(exps, dtype=np.int64),
                "sizes": np.array([self._sieves[i].size for i in exps], dtype=np.int64),
                "values": np.array([self._sieves[i].value for i in exps], dtype=np.float64),
                "indices": np.array([self._sieves[i].indices for i in exps], dtype=np.int64).reshape(len(exps), self.k),
                "gains": np.array([self._sieves[i].gains for i in exps], dtype=np.float64).reshape(len(exps), self.k),
                "states": np.array([self._sieves[i].state for i in exps], dtype=np.float64).reshape(len(exps), size),
                "dropped": None if self._dropped is None else (self._dropped[0], copy.deepcopy(self._dropped[1])),
                "kept_indices": np.array(sorted(self._kept), dtype=np.int64),
                "kept_rows": (
                    np.stack([self._kept[j] for j in sorted(self._kept)])
                    if self._kept
                    else np.empty((0, self._d or 0), np.float32)
                ),
            }
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s snapshot; the next :meth:`partial_fit` continues
        the stream where it stopped."""
        if not isinstance(state, dict) or "config" not in state:
            raise TypeError("state must be a dict from SieveStreaming.state_dict()")
        if state["config"] != self._config():
            raise ValueError(f"the state was saved by SieveStreaming{state['config']}, not {self._config()}")
        state = from_portable(state)
        self._clear()
        self.n_seen_, self._d = int(state["n_seen"]), state["d"]
        self.max_singleton_, self.evaluations_ = float(state["max_singleton"]), int(state["evaluations"])
        if state["reference"] is not None:
            self._set_reference(np.array(state["reference"]))
        self._pending = [np.array(p) for p in state["pending"]]
        self._pending_rows = sum(p.shape[0] for p in self._pending)
        for row, i in enumerate(state["exponents"].tolist()):
            sv = _Sieve(self.k, self._state_size)
            sv.size, sv.value = int(state["sizes"][row]), float(state["values"][row])
            sv.indices[:] = state["indices"][row]
            sv.gains[:] = state["gains"][row]
            sv.state[:] = state["states"][row]
            self._sieves[i] = sv
        self._dropped = None if state["dropped"] is None else (state["dropped"][0], copy.deepcopy(state["dropped"][1]))
        self._kept = {int(j): np.array(r) for j, r in zip(state["kept_indices"].tolist(), state["kept_rows"])}
        self._update_result()

    # -- machinery -----------------------------------------------------------------------
    def _config(self) -> dict[str, Any]:
        concave = self.concave if isinstance(self.concave, str) else getattr(self.concave, "__name__", "callable")
        return {
            "objective": self.objective,
            "k": self.k,
            "epsilon": self.epsilon,
            "concave": concave,
            "saturation": self.saturation,
            "metric": self.metric,
            "reference_size": self.reference_size,
            "seed": self.seed,
            "refine": self.refine,
        }

    def _clear(self) -> None:
        if self.objective == "facility-location":
            self._fn = None
            if getattr(self, "_sampled_reference", False):
                self._given_reference = None  # fit() draws it again from its data
        self._sampled_reference = False
        self._d = None
        self._pending = []
        self._pending_rows = 0
        self._sieves: dict[int, _Sieve] = {}
        # the rows of the sieves' sets, once each (for the refinement)
        self._kept = {}
        self._dropped = None
        self.n_seen_ = 0
        self.max_singleton_ = 0.0
        self.evaluations_ = 0
        self._update_result()

    @property
    def _state_size(self) -> int:
        return 0 if self._fn is None else self._fn.state_size(self._d or 0)

    @property
    def n_sieves_(self) -> int:
        return len(self._sieves)

    @property
    def held_indices_(self) -> np.ndarray:
        """Global row indices of the rows the sieves hold, once each, sorted: every open
        sieve's and the remembered best closed sieve's (the rows a later chunk may still make
        part of the result).

        Returns
        -------
        numpy.ndarray
            int64 row indices (numbered in the order the rows arrived).
        """
        held = [sv.indices[: sv.size] for sv in self._sieves.values()]
        if self._dropped is not None:
            held.append(np.asarray(self._dropped[1][1], dtype=np.int64))
        return np.unique(np.concatenate(held)).astype(np.int64) if held else np.empty(0, np.int64)

    def _set_reference(self, reference: np.ndarray) -> None:
        if self._d is not None and reference.shape[1] != self._d:
            raise ValueError(f"reference has {reference.shape[1]} columns but the rows have {self._d}")
        self._fn = _ReferenceRows(reference, self.metric)

    def _sample_reference(self, x: np.ndarray) -> np.ndarray:
        n = x.shape[0]
        m = min(self.reference_size, n)
        # sorted: a memmap is read front to back
        rows = np.sort(np.random.default_rng(self.seed).choice(n, size=m, replace=False))
        return np.array(load_embeddings(x[rows], name="reference sample"))

    def _flush(self) -> None:
        """Fix the reference from the held-back rows and process them."""
        if not self._pending:
            return
        rows = np.concatenate(self._pending)
        self._pending, self._pending_rows = [], 0
        self._set_reference(rows[: self.reference_size].copy())
        self._consume(rows, self.n_seen_ - rows.shape[0])
        self._update_result()

    def _consume(self, x: np.ndarray, base: int) -> None:
        for s in range(0, x.shape[0], _BLOCK_ROWS):
            self._block(x[s : s + _BLOCK_ROWS], base + s)

    def _block(self, x: np.ndarray, base: int) -> None:
        """Process rows ``base ..`` as if they arrived one at a time."""
        fn, k = self._fn, self.k
        block = fn.prepare(x, base)
        b = x.shape[0]
        zero = np.zeros(self._state_size, dtype=np.float64)
        if fn.kind >= 0:
            single = np.empty(b, dtype=np.float64)
            _singletons(fn.kind, fn.param, block, zero, single)
        else:  # in parts: bounds the rows x d float64 temporaries
            single = np.concatenate(
                [fn.gains(zero, block, np.arange(s, min(s + _MAX_BATCH, b))) for s in range(0, b, _MAX_BATCH)]
            )
        self.evaluations_ += b
        # m_t: the largest singleton value up to and including row t
        m = np.maximum.accumulate(np.maximum(single, self.max_singleton_))
        self.max_singleton_ = float(m[-1])
        if self.max_singleton_ <= 0:
            return  # no row has value yet: no sieve
        log_step = math.log1p(self.epsilon)
        positive = m > 0
        # sieve i is open at row t when m_t <= (1 + eps)^i <= 2 k m_t; none while m_t = 0
        # (those rows come first: lo = hi = min keeps both non-decreasing)
        lo = np.full(b, np.iinfo(np.int64).min, dtype=np.int64)
        hi = lo.copy()
        lo[positive] = np.ceil(np.log(m[positive]) / log_step).astype(np.int64)
        hi[positive] = np.floor(np.log(2.0 * k * m[positive]) / log_step).astype(np.int64)
        first = min(min(self._sieves, default=int(lo[positive][0])), int(lo[positive][0]))
        closed = False
        for i in range(first, int(hi[-1]) + 1):
            # lo and hi grow with t, so sieve i is open on one run of rows [start, stop)
            start = int(np.searchsorted(hi, i, side="left"))
            stop = int(np.searchsorted(lo, i, side="right"))
            sieve = self._sieves.get(i)
            if sieve is None:
                if start >= stop:
                    continue
                sieve = self._sieves[i] = _Sieve(k, self._state_size)
            if sieve.size < k:
                self._run_sieve(sieve, (1.0 + self.epsilon) ** i, x, block, single, start, stop, base)
            if stop < b:  # m passed (1 + eps)^i: the sieve closes
                del self._sieves[i]
                closed = True
                if sieve.size and (self._dropped is None or sieve.value > self._dropped[0]):
                    self._dropped = (
                        sieve.value,
                        (i, sieve.indices[: sieve.size].copy(), sieve.gains[: sieve.size].copy()),
                    )
        if closed and self._kept:  # forget the rows only closed sieves held
            used = set(self.held_indices_.tolist())
            self._kept = {j: r for j, r in self._kept.items() if j in used}

    def _run_sieve(
        self,
        sieve: _Sieve,
        v: float,
        x: np.ndarray,
        block: np.ndarray,
        single: np.ndarray,
        start: int,
        stop: int,
        base: int,
    ) -> None:
        fn, k = self._fn, self.k
        if fn.kind >= 0:
            added = np.empty(k, dtype=np.int64)
            sieve.size, sieve.value, evaluations, n_added = _scan(
                fn.kind,
                fn.param,
                block,
                single,
                start,
                stop,
                k,
                v,
                sieve.state,
                sieve.indices,
                sieve.gains,
                sieve.size,
                sieve.value,
                base,
                added,
            )
            self.evaluations_ += evaluations
            if self.refine:
                for t in added[:n_added].tolist():
                    if base + t not in self._kept:
                        self._kept[base + t] = x[t].copy()
            return
        pos = start
        while pos < stop and sieve.size < k:
            threshold = (v / 2.0 - sieve.value) / (k - sieve.size)
            # a gain never exceeds the singleton value (submodularity, and so in floating
            # point for these gains): rows below the threshold need no evaluation
            seg = single[pos:stop]
            candidates = np.flatnonzero(seg >= threshold if threshold > 0 else seg > 0) + pos
            found, batch, at = -1, _FIRST_BATCH, 0
            while at < candidates.size:
                rows = candidates[at : at + batch]
                g = fn.gains(sieve.state, block, rows)
                self.evaluations_ += rows.size
                ok = (g >= threshold) & (g > 0)
                if ok.any():
                    j = int(np.argmax(ok))
                    found, gain = int(rows[j]), float(g[j])
                    break
                at += rows.size
                batch = min(2 * batch, _MAX_BATCH)
            if found < 0:
                return
            fn.add(sieve.state, block, found)
            if self.refine and base + found not in self._kept:
                self._kept[base + found] = x[found].copy()
            sieve.indices[sieve.size] = base + found
            sieve.gains[sieve.size] = gain
            sieve.value += gain
            sieve.size += 1
            pos = found + 1

    def _update_result(self) -> None:
        self._result: Selection | None = None  # computed when asked for (the refinement costs)

    @property
    def selection_(self) -> Selection:
        if self._result is None:
            self._result = self._best()
        return self._result

    @property
    def indices_(self) -> np.ndarray:
        return self.selection_.indices

    @property
    def gains_(self) -> np.ndarray:
        return self.selection_.gains

    @property
    def value_(self) -> float:
        return self.selection_.value

    def _best(self) -> Selection:
        # the best sieve by value; ties to the smaller threshold (the dropped sieve's is
        # smaller than every open one's)
        best: tuple[float, np.ndarray, np.ndarray] = (0.0, np.empty(0, np.int64), np.empty(0, np.float64))
        if self._dropped is not None:
            best = (self._dropped[0], self._dropped[1][1], self._dropped[1][2])
        for i in sorted(self._sieves):
            sv = self._sieves[i]
            if sv.size and sv.value > best[0]:
                best = (sv.value, sv.indices[: sv.size], sv.gains[: sv.size])
        extra = {
            "rows_seen": self.n_seen_,
            "sieves": len(self._sieves),
            "max_singleton": self.max_singleton_,
            "sieve_value": float(best[0]),
            "kept_rows": len(self._kept),
            "refined": False,
        }
        evaluations = self.evaluations_
        if self.refine and self._kept and self._fn is not None:
            # Lazy greedy over the union of the kept rows (every open sieve's and the best
            # dropped one's): it holds the best sieve, so its greedy picks are worth at least
            # (1 - 1/e) of it; the better of the two is kept, so the guarantee stays.
            order = np.array(sorted(self._kept), dtype=np.int64)  # ties to the smallest row
            rows = np.stack([self._kept[j] for j in order.tolist()])
            if self.objective == "feature-based":
                f: SetFunction = FeatureBased(rows, self.concave, self.saturation)
            else:
                f = ReferenceFacilityLocation(rows, self._fn.reference, self.metric)
            greedy = maximize(f, min(self.k, order.size), "lazy")
            evaluations += greedy.evaluations
            if greedy.value > best[0]:
                best = (greedy.value, order[greedy.indices], greedy.gains)
                extra["refined"] = True
        return Selection(
            best[1].copy(), best[2].copy(), float(best[0]), optimizer="sieve", evaluations=evaluations, extra=extra
        )

    def __repr__(self) -> str:
        return (
            f"SieveStreaming({self.objective!r}, k={self.k}, epsilon={self.epsilon}, "
            f"rows_seen={self.n_seen_}, selected={self.indices_.size}, value={self.value_:.6g})"
        )


def read_npy_chunks(
    path: str | os.PathLike, chunk_rows: int = DEFAULT_CHUNK_ROWS, start: int = 0
) -> Iterator[np.ndarray]:
    """The rows of a 2-D ``.npy`` file from row ``start`` on, ``chunk_rows`` at a time,
    read with plain reads (never the whole file, never mapped): what
    :meth:`SieveStreaming.fit` streams, and how to resume it after
    :meth:`SieveStreaming.load_state_dict` (``start=sieve.n_seen_``).

    Example
    -------
    >>> import os, tempfile
    >>> import numpy as np
    >>> path = os.path.join(tempfile.mkdtemp(), "x.npy")
    >>> np.save(path, np.abs(np.random.default_rng(0).normal(size=(1000, 8))).astype(np.float32))
    >>> whole = SieveStreaming("feature-based", 10).fit(path, chunk_rows=128)
    >>> first = SieveStreaming("feature-based", 10)
    >>> for chunk in read_npy_chunks(path, 128):
    ...     if first.n_seen_ >= 512:
    ...         break
    ...     _ = first.partial_fit(chunk)
    >>> resumed = SieveStreaming("feature-based", 10)
    >>> resumed.load_state_dict(first.state_dict())
    >>> for chunk in read_npy_chunks(path, 128, start=resumed.n_seen_):
    ...     _ = resumed.partial_fit(chunk)
    >>> bool(np.array_equal(resumed.indices_, whole.indices_))
    True
    >>> os.remove(path)
    """
    source = NpyRows(os.fspath(path))
    chunk_rows = check_int(chunk_rows, "chunk_rows", minimum=1)
    start = check_int(start, "start", minimum=0, maximum=source.shape[0])
    return source.chunks(chunk_rows, start)
