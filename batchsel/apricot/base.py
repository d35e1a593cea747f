"""apricot's selection base classes: :class:`BaseSelection` (``fit``, ``transform``,
``fit_transform`` and ``partial_fit`` over a batchsel set function and an apricot
optimizer) and :class:`BaseGraphSelection` (the same over a similarity of the rows).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from batchsel.apricot.optimizers import OPTIMIZERS, BaseOptimizer, SieveGreedy, resolve
from batchsel.apricot.problem import Problem
from batchsel.apricot.sieve import SieveState
from batchsel.apricot.utils import as_data, check_random_state, similarity
from batchsel.submodular.functions.base import SetFunction


def _costs(sample_cost: Any, n: int) -> np.ndarray | None:
    if sample_cost is None:
        return None
    cost = np.asarray(sample_cost, dtype=np.float64)
    if cost.shape != (n,):
        raise ValueError(f"sample_cost must have one value per example ({n}), got shape {cost.shape}")
    return cost


class BaseSelection:
    """apricot's selection base: ``fit(X)`` selects ``n_samples`` examples of X with
    ``optimizer``; the results are ``ranking`` (indices in selection order), ``gains`` (the
    marginal gain of each when picked, float64) and ``subset`` (their rows).

    Parameters follow apricot-select 0.6.1.

    Parameters
    ----------
    n_samples : int or float
        Number of examples to select (> 0), or the budget with ``fit``'s ``sample_cost``.
    initial_subset : list or numpy.ndarray, optional
        Examples in the set before the first pick: indices, a boolean mask, or rows (2-D).
    optimizer : str or BaseOptimizer, default "lazy"
        An apricot optimizer name (:data:`~batchsel.apricot.OPTIMIZERS`) or object.
    optimizer_kwds : dict, optional
        Arguments of an optimizer given by name.
    reservoir : array-like, optional
        The rows facility location's ``partial_fit`` compares the stream with; None: a
        reservoir sample of the stream (of ``random_state``), as apricot's.
    max_reservoir_size : int, default 1000
        Rows of that sample.
    n_jobs : int, default 1
        Accepted and not used, as in apricot.
    random_state : None, int or numpy.random.RandomState, optional
        The draws of the stochastic optimizers.
    verbose : bool, default False
        Progress bars over the picks.

    Attributes
    ----------
    ranking : numpy.ndarray
        The selected examples (int64), in selection order.
    gains : numpy.ndarray
        The gain (float64) of each when it was picked.
    subset : numpy.ndarray
        Their rows.
    idxs : numpy.ndarray
        apricot's ``idxs``: the examples the optimizer left unmasked (neither initial, nor
        picked, nor dropped by sample greedy).

    Example
    -------
    >>> from batchsel.apricot import FeatureBasedSelection
    >>> x = np.random.default_rng(0).uniform(size=(50, 4))
    >>> sel = FeatureBasedSelection(5).fit(x)
    >>> sel.ranking.shape, sel.subset.shape, sel.idxs.shape
    ((5,), (5, 4), (45,))
    """

    _square = False  # the function's matrix is a square similarity (GreeDi slices columns too)
    _apricot_queue = False  # lazy greedy in apricot's queue order (max coverage's ties)

    def __init__(
        self,
        n_samples: Any,
        initial_subset: Any = None,
        optimizer: Any = "lazy",
        optimizer_kwds: dict | None = None,
        reservoir: Any = None,
        max_reservoir_size: int = 1000,
        n_jobs: int = 1,
        random_state: Any = None,
        verbose: bool = False,
    ) -> None:
        if n_samples <= 0:
            raise ValueError("n_samples must be a positive value.")
        if initial_subset is not None and not isinstance(initial_subset, (list, np.ndarray)):
            raise ValueError("initial_subset must be a list, numpy array, or None")
        if initial_subset is not None:
            initial_subset = np.array(initial_subset)
        if not isinstance(optimizer, BaseOptimizer) and optimizer not in OPTIMIZERS:
            raise ValueError(f"Optimizer must be an optimizer object or a str in {list(OPTIMIZERS)}.")
        if verbose not in (True, False):
            raise ValueError("verbosity must be True or False")
        self.n_samples = n_samples
        self.metric = "ignore"
        self.random_state = check_random_state(random_state)
        self.optimizer = optimizer
        self.optimizer_kwds = {} if optimizer_kwds is None else optimizer_kwds
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.initial_subset = initial_subset
        self.reservoir = reservoir
        self.max_reservoir_size = max_reservoir_size if reservoir is None else np.asarray(reservoir).shape[0]
        self.reservoir_size = 0 if reservoir is None else np.asarray(reservoir).shape[0]
        self._update_reservoir = reservoir is None
        self.ranking: Any = None
        self.idxs: Any = None
        self.gains: Any = None
        self.subset: Any = None
        self.sparse: Any = None
        self.n_neighbors: Any = None
        self._sieve: SieveState | None = None
        self.n_seen_ = 0

    # -- to implement: the batchsel function of a matrix (features or similarity) -------------
    def _make(self, matrix: Any) -> SetFunction:
        raise NotImplementedError

    def _matrix(self, X: Any) -> Any:
        """The matrix the function is built on: the features (``metric="ignore"``, as here),
        or a similarity of the rows (:meth:`_over_similarity`)."""
        return similarity(X, self.metric, self.n_neighbors)

    def _over_similarity(self, metric: str, n_neighbors: Any) -> None:
        """Build the function on the similarity ``metric`` of the rows (apricot's ``"corr"``
        is ``"correlation"``), a sparse k-NN one with ``n_neighbors``."""
        self.metric = metric.replace("corr", "correlation") if metric != "correlation" else metric
        self.n_neighbors = n_neighbors

    # -- apricot's interface ------------------------------------------------------------------
    def fit(self, X: Any, y: Any = None, sample_weight: Any = None, sample_cost: Any = None) -> "BaseSelection":
        """Select ``n_samples`` examples of X (``sample_cost``: a knapsack budget of
        ``n_samples``); returns self."""
        x = as_data(X)
        values = x.data if sp.issparse(x) else x
        if values.size and values.min() < 0.0 and values.max() > 0.0:
            raise ValueError("X cannot contain negative values or must be entirely negative values.")
        if self.n_samples > x.shape[0]:
            raise ValueError("Cannot select more examples than the number in the data set.")
        self.sparse = sp.issparse(x)
        initial, rows = self._initial(x.shape[0])
        optimizer = resolve(self.optimizer, verbose=self.verbose, random_state=self.random_state, **self.optimizer_kwds)
        if isinstance(optimizer, SieveGreedy):
            return self._fit_sieve(x, optimizer, initial, sample_cost)
        matrix = self._matrix(x)
        problem = Problem(self._make, matrix, self._square, initial, rows, self.verbose, self._apricot_queue)
        optimizer.select(problem, self.n_samples, _costs(sample_cost, x.shape[0]))
        self.ranking = np.asarray(problem.ranking, dtype=np.int64)
        self.gains = np.asarray(problem.gains, dtype=np.float64)
        self.idxs = problem.idxs
        self.subset = self._rows(x, self.ranking)
        return self

    def transform(self, X: Any, y: Any = None, sample_weight: Any = None) -> Any:
        """The selected rows of X (and of y, sample_weight), in selection order."""
        r = self.ranking
        if sample_weight is not None:
            return X[r], None if y is None else y[r], sample_weight[r]
        return X[r] if y is None else (X[r], y[r])

    def fit_transform(self, X: Any, y: Any = None, sample_weight: Any = None, sample_cost: Any = None) -> Any:
        """``fit`` then ``transform``."""
        self.fit(X, y=y, sample_weight=sample_weight, sample_cost=sample_cost)
        return self.transform(X, y=y, sample_weight=sample_weight)

    def partial_fit(self, X: Any, y: Any = None, sample_weight: Any = None, sample_cost: Any = None) -> "BaseSelection":
        """Stream X (one chunk of rows) through apricot's sieve (:class:`SieveGreedy`, which
        becomes ``optimizer`` as in apricot; ``sample_cost`` scales the singleton gains that
        open its thresholds, as apricot's); ``ranking`` numbers the rows across calls and
        is the best sieve's picks so far."""
        x = as_data(X)
        x = x.toarray() if sp.issparse(x) else x
        matrix, singles, step, width, bound = self._sieve_parts(x, streaming=True)
        if not isinstance(self.optimizer, SieveGreedy):
            self.optimizer = SieveGreedy(verbose=self.verbose, random_state=self.random_state, **self.optimizer_kwds)
        if self._sieve is None:
            self._sieve = SieveState(int(self.n_samples), width)
        self._stream(self.optimizer, (matrix, singles, step, bound), x, sample_cost)
        self.n_seen_ += x.shape[0]
        return self

    def _fit_sieve(self, x: Any, optimizer: SieveGreedy, initial: Any, sample_cost: Any) -> "BaseSelection":
        """``fit`` with the sieve: one pass over X by a fresh stream (apricot's sieve over the
        whole similarity, for the graph functions)."""
        optimizer.restart()
        dense = x.toarray() if sp.issparse(x) else x
        matrix, singles, step, width, bound = self._sieve_parts(dense, streaming=False)
        self._sieve = SieveState(int(self.n_samples), width)
        self._stream(optimizer, (matrix, singles, step, bound), dense, sample_cost)
        self.subset = self._rows(x, self.ranking)
        mask = np.zeros(x.shape[0], dtype=bool)
        if initial is not None:
            mask[initial] = True
        self.idxs = np.flatnonzero(~mask)
        return self

    def _stream(self, optimizer: SieveGreedy, parts: tuple, rows: np.ndarray, sample_cost: Any) -> None:
        matrix, singles, step, bound = parts
        assert self._sieve is not None
        cost = _costs(sample_cost, matrix.shape[0])
        # apricot scales the singleton gains by the reservoir's size when there is one
        r = matrix.shape[1] if self.reservoir is not None else 1
        singles = (singles if cost is None else singles / cost) / r
        optimizer.stream(self._sieve, step, matrix, singles, int(self.n_samples), rows, bound)
        self.ranking, self.gains, self.subset = self._sieve.best()

    def _sieve_parts(self, x: np.ndarray, streaming: bool) -> tuple:
        """The sieve's view of the chunk x: (matrix, singleton gains, gain step, width of a
        sieve's state, bound of the gains or None); apricot's sieve covers facility location,
        feature-based and max coverage."""
        raise NotImplementedError(
            f"apricot's sieve (partial_fit, optimizer='sieve') covers FacilityLocationSelection, "
            f"FeatureBasedSelection and MaxCoverageSelection, not {type(self).__name__}"
        )

    # -- helpers ------------------------------------------------------------------------------
    def _initial(self, n: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        s = self.initial_subset
        if s is None:
            return None, None
        if s.ndim == 2:
            return None, s.astype(np.float64)
        if s.dtype == bool:
            s = np.flatnonzero(s)
        if len(s) + self.n_samples > n:
            raise ValueError(
                "When using a mask for the initial subset must selected fewer than the size of the subset "
                "minus the initial subset size, i.e., n_samples < X.shape[0] - initial_subset.shape[0]."
            )
        if s.size and (s.max() >= n or s.min() < 0):
            raise ValueError("initial_subset indices must be in [0, X.shape[0])")
        return np.unique(s.astype(np.int64)), None

    def _rows(self, x: Any, ranking: np.ndarray) -> np.ndarray:
        if self.metric == "precomputed":
            return np.zeros((0, x.shape[1]))
        rows = x[ranking]
        return rows.toarray() if sp.issparse(rows) else np.asarray(rows, dtype=np.float64)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_samples={self.n_samples!r}, optimizer={self.optimizer!r})"


class BaseGraphSelection(BaseSelection):
    """Selections over a similarity of the rows: ``metric`` (``"euclidean"``, ``"cosine"``,
    ``"corr"``/``"correlation"``, any scikit-learn metric, or ``"precomputed"`` for a given
    square similarity, dense or CSR) and ``n_neighbors`` (a sparse k-NN similarity) as
    apricot's.

    Parameters
    ----------
    n_samples : int or float
        As :class:`BaseSelection`'s, and so are ``initial_subset``, ``optimizer``
        (default ``"two-stage"``), ``optimizer_kwds``, ``reservoir``,
        ``max_reservoir_size``, ``n_jobs``, ``random_state`` and ``verbose``.
    metric : str, default "euclidean"
        The similarity of the rows (:func:`~batchsel.apricot.utils.similarity`).
    n_neighbors : int, optional
        A sparse k-NN similarity of that many neighbours; None: dense.

    Example
    -------
    >>> from batchsel.apricot import GraphCutSelection
    >>> x = np.random.default_rng(0).uniform(size=(40, 3))
    >>> GraphCutSelection(4, metric="cosine", n_neighbors=10).fit(x).ranking.shape
    (4,)
    """

    _square = True

    def __init__(
        self,
        n_samples: Any,
        metric: str = "euclidean",
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
        super().__init__(
            n_samples,
            initial_subset=initial_subset,
            optimizer=optimizer,
            optimizer_kwds=optimizer_kwds,
            reservoir=reservoir,
            max_reservoir_size=max_reservoir_size,
            n_jobs=n_jobs,
            random_state=random_state,
            verbose=verbose,
        )
        self._over_similarity(metric, n_neighbors)

    def fit(self, X: Any, y: Any = None, sample_weight: Any = None, sample_cost: Any = None) -> "BaseSelection":
        if sp.issparse(X) and self.metric not in ("precomputed", "ignore"):
            raise ValueError("Must passed in a precomputed sparse similarity matrix or a dense feature matrix.")
        if self.metric == "precomputed" and X.shape[0] != X.shape[1]:
            raise ValueError("Precomputed similarity matrices must be square and symmetric.")
        return super().fit(X, y=y, sample_weight=sample_weight, sample_cost=sample_cost)
