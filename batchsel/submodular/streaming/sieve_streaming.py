"""The sieve-streaming estimator, :class:`SieveStreaming`: its options, the reference of
facility location (given, sampled from the data, or the stream's first rows, held back
until they have arrived), ``partial_fit`` / ``fit``, ``state_dict`` to resume, and the
result. The sieves themselves are :class:`~batchsel.submodular.streaming.sieves.SieveSet`'s.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import numpy as np
from tqdm.auto import tqdm

from batchsel.core.checks import check_int, check_number, check_seed
from batchsel.core.state import to_portable
from batchsel.submodular.optimizers import Selection
from batchsel.submodular.streaming.checkpoint import check_state, stream_config
from batchsel.submodular.streaming.chunks import DEFAULT_CHUNK_ROWS, load_chunk, open_stream
from batchsel.submodular.streaming.objective import StreamObjective
from batchsel.submodular.streaming.scoring import METRICS
from batchsel.submodular.streaming.sieves import SieveSet

# the package's logger, as before the split into modules
logger = logging.getLogger("batchsel.submodular.streaming")

OBJECTIVES = ("feature-based", "facility-location")
DEFAULT_REFERENCE_SIZE = 1000


class SieveStreaming:
    """Sieve-streaming maximization (Badanidiyuru et al. 2014) of a monotone submodular
    function over rows that arrive in chunks; see :mod:`batchsel.submodular.streaming` for
    the method and which functions stream.

    Keyword groups: the sieves (`epsilon`, `refine`), feature-based objective (`concave`,
    `saturation`), facility-location reference (`metric`, `reference`, `reference_size`,
    `seed`), display (`progress`).

    Parameters
    ----------
    objective : str
        ``"feature-based"`` (non-negative features, ``concave`` / ``saturation`` as
        :class:`batchsel.FeatureBased`) or ``"facility-location"`` (over a reference
        sample: ``metric``, ``reference``, ``reference_size``).
    k : int
        Number of rows to pick. The best sieve may hold fewer (it is still a
        ``(1/2 - eps)``-approximation; a warning says so).
    epsilon : float, default 0.1
        Threshold spacing: ``log(2k) / log(1 + epsilon)`` sieves, guarantee ``1/2 - epsilon``.
    concave : str or callable, default "sqrt"
        Feature-based: the concave function, as :class:`batchsel.FeatureBased`'s.
    saturation : float, optional
        Feature-based, ``concave="min"``: the cap.
    metric : str, default "euclidean"
        Facility location: ``"euclidean"`` or ``"cosine"`` (:class:`ReferenceFacilityLocation`).
    reference : array-like, optional
        ``m x d`` reference rows for facility location; None: a seeded uniform sample of
        ``reference_size`` rows when :meth:`fit` gets an array or a file, else the first
        ``reference_size`` rows of the stream (held back until that many have arrived).
    reference_size : int, default 1000
        Rows of the reference when it is not given.
    seed : int, default 0
        Seed of the reference sample (the sieve itself draws nothing).
    refine : bool, default True
        Keep the sieves' rows and finish with lazy greedy over their union (see the module
        docstring); False: the best sieve, as the paper and apricot.
    progress : bool, default False
        A tqdm progress bar over the rows in :meth:`fit`.

    Attributes
    ----------
    indices_ : numpy.ndarray
        Global row indices (int64) of the result: the best sieve's rows in the order they
        arrived, or, when the refinement did better, lazy greedy's picks in pick order.
    gains_ : numpy.ndarray
        Their marginal gains (float64) when they joined.
    value_ : float
        ``f(indices_)``, the sum of ``gains_``.
    selection_ : Selection
        The same as a :class:`batchsel.Selection` (``optimizer="sieve"``).
    n_seen_ : int
        Rows processed so far (rows held back for the reference included).
    max_singleton_ : float
        The largest singleton value ``m`` seen.
    n_sieves_, evaluations_ : int
        Sieves currently open; marginal gains computed.
    held_indices_ : numpy.ndarray
        Global row indices (int64, sorted) of the rows the open sieves and the remembered
        best closed sieve hold: the rows a later chunk may still make part of the result.

    How it differs from apricot's ``partial_fit`` (thresholds, reference, values):
    docs/guide/apricot.md; ``benchmarks/bench_streaming.py`` compares the two.

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

    _d: int | None  # columns of the stream's rows (reset by _clear)
    _result: Selection | None  # computed when asked for (the refinement costs)

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
        self._objective = StreamObjective(
            objective, concave, saturation, metric, reference, self.reference_size, self.seed
        )
        self._clear()

    # -- public interface --------------------------------------------------------------
    def partial_fit(self, chunk: Any) -> "SieveStreaming":
        """Process the next rows; rows are numbered globally in the order they arrive.

        Parameters
        ----------
        chunk : array-like
            An ``n x d`` chunk (memmap slices included); an empty one (0 x d) is skipped.

        Returns
        -------
        SieveStreaming
            self.
        """
        shape = getattr(chunk, "shape", None)
        if shape is not None and len(shape) == 2 and shape[0] == 0:
            return self
        x = load_chunk(chunk, self.n_seen_)
        if self._d is None:
            self._d = x.shape[1]
        elif x.shape[1] != self._d:
            raise ValueError(f"chunk at row {self.n_seen_} has {x.shape[1]} columns, earlier rows had {self._d}")
        if self._objective.rows is None:  # facility location before its reference is fixed
            if self._objective.given is not None:
                self._objective.fix(self._objective.given, self._d)
            else:  # the first reference_size rows: held back until they have all arrived
                full = self._objective.hold(x)
                self.n_seen_ += x.shape[0]
                if full:
                    self._flush()
                return self
        self._sieves.consume(self._objective.rows, x, self.n_seen_)
        self.n_seen_ += x.shape[0]
        self._update_result()
        return self

    def fit(self, data: Any, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> "SieveStreaming":
        """Start over and stream ``data``.

        Parameters
        ----------
        data : str, os.PathLike, array-like or iterable
            The path of a ``.npy`` file (read chunk by chunk, never whole, nor mapped: the
            pages of a memmap count in the resident memory), an array or memmap (sliced into
            ``chunk_rows`` rows), or an iterable of arrays.
        chunk_rows : int, default 65536
            Rows per chunk of a file or an array.

        Returns
        -------
        SieveStreaming
            self.
        """
        chunk_rows = check_int(chunk_rows, "chunk_rows", minimum=1)
        self._clear()
        chunks, total, sample_from = open_stream(data, chunk_rows)
        if self.objective == "facility-location" and sample_from is not None:
            self._objective.sample_from(sample_from)
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
        """Everything needed to continue the stream (copies).

        Returns
        -------
        dict
            Pass it to :meth:`load_state_dict` of a ``SieveStreaming`` built with the same
            arguments.
        """
        state = {
            "config": stream_config(self),
            "n_seen": self.n_seen_,
            "d": self._d,
            "max_singleton": self._sieves.max_singleton,
            "evaluations": self._sieves.evaluations,
            "reference": self._objective.fixed_reference(),
            "pending": [p.copy() for p in self._objective.pending],
        }
        state.update(self._sieves.state(self._d, self._objective.state_size(self._d)))
        return to_portable(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s snapshot; the next :meth:`partial_fit` continues
        the stream where it stopped.

        Parameters
        ----------
        state : dict
            A :meth:`state_dict` of a ``SieveStreaming`` built with the same arguments.
        """
        state = check_state(state, stream_config(self))
        self._clear()
        self.n_seen_, self._d = int(state["n_seen"]), state["d"]
        if state["reference"] is not None:
            self._objective.fix(np.array(state["reference"]), self._d)
        self._objective.load(state["pending"])
        self._sieves.load(state, self._objective.state_size(self._d))
        self._update_result()

    # -- the result ----------------------------------------------------------------------
    @property
    def selection_(self) -> Selection:
        """The result as a :class:`batchsel.Selection` (computed when first asked for)."""
        if self._result is None:
            refine = self.refine and self._objective.rows is not None
            self._result = self._sieves.selection(self.n_seen_, self._objective.function if refine else None)
        return self._result

    @property
    def indices_(self) -> np.ndarray:
        """Global row indices (int64) of the result."""
        return self.selection_.indices

    @property
    def gains_(self) -> np.ndarray:
        """Their marginal gains (float64) when they joined."""
        return self.selection_.gains

    @property
    def value_(self) -> float:
        """``f(indices_)``, the sum of ``gains_``."""
        return self.selection_.value

    @property
    def n_sieves_(self) -> int:
        """Sieves currently open."""
        return len(self._sieves.sieves)

    @property
    def max_singleton_(self) -> float:
        """The largest singleton value seen."""
        return self._sieves.max_singleton

    @property
    def evaluations_(self) -> int:
        """Marginal gains computed."""
        return self._sieves.evaluations

    @property
    def held_indices_(self) -> np.ndarray:
        """Global row indices (int64, sorted) of the rows the open sieves and the remembered
        best closed sieve hold: the rows a later chunk may still make part of the result."""
        return self._sieves.held_indices()

    def __repr__(self) -> str:
        return (
            f"SieveStreaming({self.objective!r}, k={self.k}, epsilon={self.epsilon}, "
            f"rows_seen={self.n_seen_}, selected={self.indices_.size}, value={self.value_:.6g})"
        )

    # -- machinery -----------------------------------------------------------------------
    def _clear(self) -> None:
        self._objective.restart()
        self._d = None
        self._sieves = SieveSet(self.k, self.epsilon, self.refine)
        self.n_seen_ = 0
        self._update_result()

    def _update_result(self) -> None:
        self._result = None

    def _flush(self) -> None:
        """Fix the reference from the held-back rows and process them."""
        rows = self._objective.release()
        if rows is None:
            return
        self._objective.fix(rows[: self.reference_size].copy(), self._d)
        self._sieves.consume(self._objective.rows, rows, self.n_seen_ - rows.shape[0])
        self._update_result()
