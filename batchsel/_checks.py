"""Input checks shared by every module: one place that turns user input into the
canonical forms (float32 C-contiguous embeddings, CSR graphs with int64 indices) or
raises a ``ValueError`` / ``TypeError`` that names the bad value."""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import scipy.sparse as sp

# Rows checked for NaN/inf at a time: bounds the temporary memory on memory-mapped input.
_FINITE_BLOCK = 1 << 16


def tensor_to_numpy(x: Any) -> Any:
    """A torch tensor as a numpy array (detached, on the CPU); anything else unchanged.
    Duck-typed, so checking input never imports torch."""
    if hasattr(x, "detach") and hasattr(x, "numpy"):
        return x.detach().cpu().numpy()
    return x


def _describe(x: Any) -> str:
    if isinstance(x, np.ndarray):
        return f"array of shape {x.shape} and dtype {x.dtype}"
    return repr(x) if len(repr(x)) < 80 else f"{type(x).__name__} object"


def check_int(value: Any, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an ``int`` after checking its type and range."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def check_finite(x: np.ndarray, name: str) -> None:
    """Raise ``ValueError`` when ``x`` holds NaN or inf; scans in blocks so a memmap is
    read once and never copied whole."""
    flat = x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(-1, 1)
    for start in range(0, flat.shape[0], _FINITE_BLOCK):
        block = flat[start:start + _FINITE_BLOCK]
        if not np.isfinite(block).all():
            bad = np.argwhere(~np.isfinite(block))[0]
            row = start + int(bad[0])
            raise ValueError(f"{name} contains NaN or inf (first at row {row}: {flat[row, bad[1]]})")


def load_embeddings(embeddings: Any, name: str = "embeddings") -> np.ndarray:
    """Return an ``N x d`` float32 C-contiguous array for ``embeddings``.

    ``embeddings`` is an array-like, a torch tensor, or the path of a ``.npy`` file, which
    is opened memory-mapped. An array that already is float32 C-contiguous (memmaps
    included) is returned as it is: no copy.
    """
    if isinstance(embeddings, (str, os.PathLike)):
        path = os.fspath(embeddings)
        if os.path.isdir(path):
            raise ValueError(f"{name}: {path!r} is a directory, not a .npy file")
        if not os.path.exists(path):
            raise ValueError(f"{name}: no such file {path!r}")
        if not path.endswith(".npy"):
            raise ValueError(f"{name}: expected a .npy file, got {path!r}")
        embeddings = np.load(path, mmap_mode="r")
    embeddings = tensor_to_numpy(embeddings)
    if isinstance(embeddings, np.ndarray):
        x = embeddings
    else:
        try:
            x = np.asarray(embeddings)
        except Exception as exc:  # ragged lists, objects
            raise TypeError(f"{name} must be convertible to a float32 array: {exc}") from None
    # complex would silently lose its imaginary part in the float32 cast
    if not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating) or x.dtype == bool):
        raise TypeError(f"{name} must be numeric (real), got dtype {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D (N x d), got {x.ndim}-D {_describe(x)}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{name} is empty: shape {x.shape}")
    if x.dtype != np.float32 or not x.flags.c_contiguous:
        x = np.ascontiguousarray(x, dtype=np.float32)
    check_finite(x, name)
    return x


def check_graph(graph: Any, num_nodes: int | None = None, name: str = "graph") -> sp.csr_matrix:
    """Return ``graph`` as a square CSR matrix with int64 indices and float32 weights.

    A scipy sparse matrix or array is accepted; a dense array is refused (it defeats the
    point of a sparse graph). ``num_nodes`` checks the size.
    """
    if not sp.issparse(graph):
        raise TypeError(f"{name} must be a scipy.sparse matrix (CSR), got {type(graph).__name__}")
    if graph.ndim != 2 or graph.shape[0] != graph.shape[1]:
        raise ValueError(f"{name} must be square, got shape {graph.shape}")
    if num_nodes is not None and graph.shape[0] != num_nodes:
        raise ValueError(f"{name} has {graph.shape[0]} nodes but the data has {num_nodes} examples")
    g = sp.csr_matrix(graph, dtype=np.float32)
    if g is graph:
        g = g.copy()
    g.sum_duplicates()
    if g.nnz and not np.isfinite(g.data).all():
        raise ValueError(f"{name} has NaN or inf edge weights")
    return to_int64(g)


def to_int64(matrix: sp.csr_matrix) -> sp.csr_matrix:
    """Give a CSR matrix int64 ``indices`` and ``indptr`` (scipy downcasts to int32
    whenever it can; int32 overflows past 2**31 stored entries)."""
    matrix.indices = matrix.indices.astype(np.int64, copy=False)
    matrix.indptr = matrix.indptr.astype(np.int64, copy=False)
    return matrix


def check_labels(labels: Any, num_examples: int, name: str = "labels", allow_unlabeled: bool = False) -> np.ndarray:
    """Return labels as a 1-D int64 array of length ``num_examples``; -1 marks an
    unlabeled example when ``allow_unlabeled``."""
    labels = tensor_to_numpy(labels)
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {y.shape}")
    if y.shape[0] != num_examples:
        raise ValueError(f"{name} has length {y.shape[0]} but there are {num_examples} examples")
    if not (np.issubdtype(y.dtype, np.integer) or (np.issubdtype(y.dtype, np.floating) and np.all(np.mod(y, 1) == 0))):
        raise TypeError(f"{name} must hold integer class ids, got dtype {y.dtype}")
    y = y.astype(np.int64)
    lowest = -1 if allow_unlabeled else 0
    if y.size and y.min() < lowest:
        raise ValueError(f"{name} must be >= {lowest}, found {int(y.min())}")
    return y


def check_seed(seed: Any) -> int:
    """Seeds are non-negative integers (they are combined with the epoch)."""
    return check_int(seed, "seed", minimum=0)


def check_indices(indices: Any, num_examples: int, name: str = "indices") -> np.ndarray:
    """Return example indices as a 1-D int64 array, checked to lie in ``[0, N)``."""
    indices = tensor_to_numpy(indices)
    idx = np.asarray(indices)
    if idx.ndim == 0:
        idx = idx.reshape(1)
    if idx.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {idx.shape}")
    if idx.size and not np.issubdtype(idx.dtype, np.integer):
        raise TypeError(f"{name} must be integers, got dtype {idx.dtype}")
    idx = idx.astype(np.int64, copy=False)
    if idx.size and (idx.min() < 0 or idx.max() >= num_examples):
        bad = idx[(idx < 0) | (idx >= num_examples)][0]
        raise ValueError(f"{name} must be in [0, {num_examples}), found {int(bad)}")
    return idx


def check_rows(values: Any, count: int, name: str, ndim: int) -> np.ndarray:
    """Feedback values (losses: 1-D, logits / embeddings: 2-D) as a finite float array
    with one row per index."""
    values = tensor_to_numpy(values)
    try:
        v = np.asarray(values, dtype=np.float64 if ndim == 1 else np.float32)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be numeric: {exc}") from None
    if v.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {v.shape}")
    if v.shape[0] != count:
        raise ValueError(f"{name} has {v.shape[0]} rows but {count} indices were given")
    if not np.isfinite(v).all():
        raise ValueError(f"{name} contains NaN or inf")
    return v
