"""The set-function interface and the input checks the set functions share.

A :class:`SetFunction` is a function f over subsets of a ground set ``{0, ..., n - 1}``
that keeps an incremental state for one growing set: ``gains(candidates)`` are the
marginal gains ``f(S + j) - f(S)`` w.r.t. the current set S, ``add(j)`` adds an item,
``reset()`` empties the set, ``evaluate(T)`` computes ``f(T)`` from scratch without
touching the state. Every function is normalized, ``f({}) = 0``, so ``value`` is the sum
of the gains of the items added.

To write a new function, subclass :class:`SetFunction` and implement ``_reset_state()``,
``_gains(idx)`` (for valid indices not in the set) and ``_add(j)``; ``_evaluate(idx)`` has
a generic default (a fresh copy adds the items one by one). Keep ``_gains`` monotone in
the state (a gain computed later never exceeds one computed earlier, as submodularity
promises) and independent of the batch it is computed in: lazy greedy relies on both.
Optionally implement ``_decrements(j)`` (see there): lazy greedy then lowers the bounds of
exactly the items an add affects and re-evaluates far fewer gains.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import numpy as np
import scipy.sparse as sp

from batchsel.core.checks import check_finite, check_graph, check_indices, known_symmetric, tensor_to_numpy, to_int64

logger = logging.getLogger(__name__)


class SetFunction:
    """Base class of the set functions (see the module docstring).

    Attributes
    ----------
    n:
        Ground-set size.
    selected:
        The items added since the last ``reset()``, in order.
    value:
        ``f(selected)``, accumulated from the gains of the items as they were added.
    """

    n: int

    def __init__(self, n: int) -> None:
        self.n = int(n)
        self.reset()

    # -- public interface ----------------------------------------------------------------
    def reset(self) -> None:
        """Empty the current set."""
        self.selected: list[int] = []
        self.value = 0.0
        self._in_set = np.zeros(self.n, dtype=bool)
        self._reset_state()

    def gains(self, candidates: Any) -> np.ndarray:
        """Marginal gains ``f(S + j) - f(S)`` (float64) of ``candidates`` w.r.t. the
        current set S; 0 for items already in S."""
        idx = self._items(candidates, "candidates")
        out = np.asarray(self._gains(idx), dtype=np.float64)
        if self.selected:
            out[self._in_set[idx]] = 0.0
        return out

    def add(self, j: Any) -> float:
        """Add item ``j`` to the current set; returns its gain."""
        j = self._item(j)
        if self._in_set[j]:
            raise ValueError(f"item {j} is already in the set")
        gain = float(self._gains(np.array([j], dtype=np.int64))[0])
        self._add(j)
        self._in_set[j] = True
        self.selected.append(j)
        self.value += gain
        return gain

    def add_rows(self, rows: Any) -> float:
        """Add examples given by their rows (features), not items of the ground set (e.g.
        examples chosen earlier, apricot's 2-D ``initial_subset``): they count in every later
        gain and in ``value``, not in ``selected`` nor in :meth:`evaluate`. Returns their
        joint gain. Feature-based functions only; the others raise ``TypeError``."""
        gain = float(self._add_rows(rows))
        self.value += gain
        return gain

    def evaluate(self, subset: Any) -> float:
        """``f(subset)`` computed from scratch; the current state is left unchanged.
        Repeated items count once."""
        idx = np.unique(self._items(subset, "subset"))
        if idx.size == 0:
            return 0.0
        return float(self._evaluate(idx))

    # -- to implement ----------------------------------------------------------------------
    def _reset_state(self) -> None:
        raise NotImplementedError

    def _gains(self, idx: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _add(self, j: int) -> None:
        raise NotImplementedError

    def _add_rows(self, rows: Any) -> float:
        raise TypeError(
            f"{type(self).__name__} takes no rows: give its initial items as indices "
            f"(rows apply to feature-based functions, as in apricot)"
        )

    def _decrements(self, j: int) -> tuple[np.ndarray, np.ndarray] | None:
        """How adding ``j`` to the current set lowers the gains, called before the add:
        ``(items, drops)`` (an item may repeat; its drops add up) listing every item whose
        computed gain can change at all, with drops that add up to at most its decrease;
        None when not known (every gain is then treated as stale after an add)."""
        return None

    def _evaluate(self, idx: np.ndarray) -> float:
        fresh = copy.copy(self)
        fresh.reset()  # reset allocates new state arrays: self is untouched
        for j in idx:
            fresh.add(int(j))
        return fresh.value

    # -- helpers ---------------------------------------------------------------------------
    def _items(self, items: Any, name: str) -> np.ndarray:
        if isinstance(items, np.ndarray) and items.dtype == np.int64 and items.ndim == 1:
            # Fast path for the optimizers' own arrays.
            if items.size and (items[0] < 0 or items.min() < 0 or items.max() >= self.n):
                bad = items[(items < 0) | (items >= self.n)][0]
                raise ValueError(f"{name} must be in [0, {self.n}), found {int(bad)}")
            return items

        return check_indices(items, self.n, name)

    def _item(self, j: Any) -> int:
        if isinstance(j, (bool, np.bool_)) or not isinstance(j, (int, np.integer)):
            raise TypeError(f"item must be an integer, got {j!r}")
        if not 0 <= j < self.n:
            raise ValueError(f"item must be in [0, {self.n}), got {j}")
        return int(j)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, selected={len(self.selected)}, value={self.value:.6g})"


# -- shared input checks ---------------------------------------------------------------
def as_similarity(similarity: Any, name: str = "similarity", nonnegative: bool = True) -> np.ndarray | sp.csr_matrix:
    """A square similarity matrix: a dense float32/float64 C-contiguous ndarray (other
    dtypes become float64; float32 and float64 arrays are used without a copy), or a CSR
    matrix with int64 indices and float32 values, float64 kept (through ``check_graph``). NaN/inf,
    non-square input and, when ``nonnegative``, negative values raise ``ValueError``."""
    if sp.issparse(similarity):
        # float64 values stay float64 (apricot's arithmetic: the float32 cast moved graph-cut
        # gains, sums of whole rows, by 2e-4); other dtypes become float32
        s = check_graph(similarity, name=name, dtype=np.float64 if similarity.dtype == np.float64 else np.float32)
        values = s.data
    else:
        similarity = tensor_to_numpy(similarity)
        s = np.asarray(similarity)
        if s.dtype == object or not (np.issubdtype(s.dtype, np.number) or s.dtype == bool):
            raise TypeError(f"{name} must be numeric, got dtype {s.dtype}")
        if s.ndim != 2 or s.shape[0] != s.shape[1]:
            raise ValueError(f"{name} must be a square matrix, got shape {s.shape}")
        if s.shape[0] == 0:
            raise ValueError(f"{name} is empty")
        if s.dtype not in (np.float32, np.float64) or not s.flags.c_contiguous:
            s = np.ascontiguousarray(s, dtype=s.dtype if s.dtype in (np.float32, np.float64) else np.float64)
        check_finite(s, name)
        values = s
    if nonnegative and values.size and values.min() < 0:
        raise ValueError(
            f"{name} must be non-negative, found {float(values.min())}; shift it "
            f"(similarity - similarity.min()) or use a non-negative kernel"
        )
    return s


def as_features(features: Any, name: str = "features") -> np.ndarray | sp.csr_matrix:
    """Non-negative ``n x d`` features: a dense float32/float64 array (kept as given when
    already one of those, C-contiguous) or a CSR matrix with int64 indices."""
    if sp.issparse(features):
        x = sp.csr_matrix(features)
        if x.dtype not in (np.float32, np.float64):
            x = x.astype(np.float64)
        x = to_int64(x.copy() if x is features else x)
        x.sum_duplicates()
        values = x.data
        if values.size and not np.isfinite(values).all():
            raise ValueError(f"{name} contains NaN or inf")
    else:
        features = tensor_to_numpy(features)
        x = np.asarray(features)
        if x.dtype == object or not (np.issubdtype(x.dtype, np.number) or x.dtype == bool):
            raise TypeError(f"{name} must be numeric, got dtype {x.dtype}")
        if x.ndim != 2:
            raise ValueError(f"{name} must be 2-D (n x d), got shape {x.shape}")
        if x.dtype not in (np.float32, np.float64) or not x.flags.c_contiguous:
            x = np.ascontiguousarray(x, dtype=x.dtype if x.dtype in (np.float32, np.float64) else np.float64)
        check_finite(x, name)
        values = x
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{name} is empty: shape {x.shape}")
    if values.size and values.min() < 0:
        raise ValueError(f"{name} must be non-negative, found {float(values.min())}")
    return x


def row(matrix: np.ndarray | sp.csr_matrix, j: int) -> tuple[np.ndarray | slice, np.ndarray]:
    """Row ``j`` as ``(columns, values)``: ``slice(None)`` and the dense row, or the CSR
    row's column indices and values (no densification)."""
    if isinstance(matrix, np.ndarray):
        return slice(None), matrix[j]
    start, stop = matrix.indptr[j], matrix.indptr[j + 1]
    return matrix.indices[start:stop], matrix.data[start:stop]


def row_sums(matrix: np.ndarray | sp.csr_matrix) -> np.ndarray:
    """Row sums in float64."""
    if isinstance(matrix, np.ndarray):
        return matrix.sum(axis=1, dtype=np.float64)
    return np.asarray(matrix.sum(axis=1, dtype=np.float64)).ravel()


def is_symmetric(matrix: np.ndarray | sp.csr_matrix) -> bool:
    """Whether a similarity equals its transpose (a CSR matrix: pattern and values, one
    transposition; a dense one: exactly)."""
    if isinstance(matrix, np.ndarray):
        return bool(np.array_equal(matrix, matrix.T))
    n = matrix.shape[0]
    if not np.array_equal(np.diff(matrix.indptr), np.bincount(matrix.indices, minlength=n)):
        return False  # row and column counts differ
    t = matrix.T.tocsr()
    t.sort_indices()
    return bool(np.array_equal(t.indices, matrix.indices) and np.array_equal(t.data, matrix.data))


def check_symmetric_flag(matrix: np.ndarray | sp.csr_matrix, symmetric: bool | None) -> bool:
    """The ``symmetric`` argument of the sparse set functions: None checks it, unless the
    matrix is marked symmetric as built (``knn_graph``'s graphs are)."""
    if symmetric is None:
        return not isinstance(matrix, np.ndarray) and (known_symmetric(matrix) or is_symmetric(matrix))
    if not isinstance(symmetric, (bool, np.bool_)):
        raise TypeError(f"symmetric must be True, False or None, got {symmetric!r}")
    return bool(symmetric)


def diagonal(matrix: np.ndarray | sp.csr_matrix) -> np.ndarray:
    """The diagonal in float64."""
    if isinstance(matrix, np.ndarray):
        return np.diagonal(matrix).astype(np.float64)
    return np.asarray(matrix.diagonal(), dtype=np.float64)


def symmetric_drops(
    matrix: np.ndarray | sp.csr_matrix, symmetric: bool, kernel: Any, state: np.ndarray, j: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """``_decrements(j)`` of a function over a similarity whose drops the numba ``kernel``
    computes from a symmetric CSR matrix (``kernel(indptr, indices, data, state, j)``);
    None when ``matrix`` is not one (``symmetric`` false)."""
    if not symmetric:
        return None
    return kernel(matrix.indptr, matrix.indices, matrix.data, state, j)
