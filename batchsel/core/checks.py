"""Input checks shared by every module: one place that turns user input into the
canonical forms (float32 C-contiguous embeddings, CSR graphs with int64 indices) or
raises a ``ValueError`` / ``TypeError`` that names the bad value."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import scipy.sparse as sp

# Bytes of input checked for NaN/inf at a time: bounds the temporaries (and what is read
# of a memory-mapped file at once) whatever the row width.
_FINITE_BLOCK_BYTES = 1 << 24

# Squared euclidean norms and distances are computed in float32 (faiss, the BLAS Gram
# matrices): the largest must stay below float32's maximum, with room for |a - b|^2 <= 4 r^2,
# and the spread must stay above the range where float32 products underflow or are
# subnormal (below ~1e-30 nearly every bit of a squared distance is lost).
SQUARED_MAX = float(np.finfo(np.float32).max) / 8
SQUARED_MIN = 1e-30


def tensor_to_numpy(x: Any) -> Any:
    """A torch tensor as a numpy array (detached, on the CPU); anything else unchanged.
    Duck-typed, so checking input never imports torch. Float dtypes numpy lacks (bfloat16,
    float8) become float32, which holds each of their values exactly.

    A CPU tensor that needs no gradient is viewed as it is (``.numpy()``, no copy): this
    runs for every batch's feedback, where ``.detach().cpu()`` and a dtype name cost more
    than the conversion.

    Parameters
    ----------
    x : Any
        A torch tensor (anything with ``detach`` and ``numpy``) on any device, or any other value.

    Returns
    -------
    Any
        ``x`` as a numpy array when it is a tensor; ``x`` itself otherwise (numpy arrays included).
    """
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "detach") and hasattr(x, "numpy"):
        if getattr(x, "requires_grad", True):
            x = x.detach()
        if not getattr(x, "is_cpu", False):
            x = x.cpu()
        dtype = getattr(x, "dtype", None)
        widen = _WIDEN.get(dtype)
        if widen is None:
            widen = bool(getattr(x, "is_floating_point", lambda: False)()) and str(dtype) not in _NUMPY_FLOATS
            try:
                _WIDEN[dtype] = widen
            except TypeError:  # an unhashable dtype of a duck-typed array: not remembered
                pass
        if widen:
            x = x.float()
        return x.numpy()
    return x


_NUMPY_FLOATS = ("torch.float16", "torch.float32", "torch.float64")
_WIDEN: dict[Any, bool] = {}  # tensor dtype -> whether it converts through float32


def _describe(x: Any) -> str:
    if isinstance(x, np.ndarray):
        return f"array of shape {x.shape} and dtype {x.dtype}"
    return repr(x) if len(repr(x)) < 80 else f"{type(x).__name__} object"


def check_int(value: Any, name: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an ``int`` after checking its type and range.

    Parameters
    ----------
    value : Any
        The value to check: a Python or numpy integer (bools are refused).
    name : str
        The argument's name, for the messages.
    minimum, maximum : int or None, default None
        The smallest and largest values allowed; ``None``: no bound on that side.

    Returns
    -------
    int
        ``value`` as a Python int.

    Raises
    ------
    TypeError
        ``value`` is not an integer (or is a bool).
    ValueError
        ``value`` is below ``minimum`` or above ``maximum``.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def check_number(value: Any, name: str, low: float, high: float | None = None) -> float:
    """Return ``value`` as a ``float`` after checking it is a finite number in ``[low, high]``.

    Parameters
    ----------
    value : Any
        The value to check: a Python or numpy int or float (bools are refused).
    name : str
        The argument's name, for the message.
    low : float
        The smallest value allowed.
    high : float or None, default None
        The largest value allowed (``high=None``: no upper bound).

    Returns
    -------
    float
        ``value`` as a Python float.

    Raises
    ------
    ValueError
        ``value`` is not a number, not finite, or outside ``[low, high]``.
    """
    if (
        isinstance(value, (bool, np.bool_))
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not math.isfinite(value)
        or value < low
        or (high is not None and value > high)
    ):
        span = f">= {low:g}" if high is None else f"in [{low:g}, {high:g}]"
        raise ValueError(f"{name} must be a finite number {span}, got {value!r}")
    return float(value)


def check_finite(x: np.ndarray, name: str, source: np.ndarray | None = None, first_row: int = 0) -> None:
    """Raise ``ValueError`` when ``x`` holds NaN or inf; scans in blocks so a memmap is
    read once and never copied whole.

    Parameters
    ----------
    x : numpy.ndarray
        The array to check, at least 1-D (its first axis: the rows).
    name : str
        The array's name, for the message.
    source : numpy.ndarray or None, default None
        The array ``x`` was cast from (same shape); a value finite there and
        infinite in ``x`` overflowed the cast, which the message says (with the fix).
    first_row : int, default 0
        The row number of ``x[0]`` in the data the user knows (a shard's
        offset), so messages name the row the user can look up.

    Raises
    ------
    ValueError
        ``x`` holds NaN or inf (the message names the first such row).
    """
    flat = x.reshape(x.shape[0], -1) if x.ndim > 1 else x.reshape(-1, 1)
    rows = max(1, _FINITE_BLOCK_BYTES // max(1, flat.shape[1] * flat.itemsize))
    for start in range(0, flat.shape[0], rows):
        block = flat[start : start + rows]
        if not np.isfinite(block).all():
            bad = np.argwhere(~np.isfinite(block))[0]
            row, col = start + int(bad[0]), int(bad[1])
            if source is not None:
                original = source.reshape(flat.shape)[row, col]
                if np.isfinite(original):
                    raise ValueError(
                        f"{name} holds {original:.3g} (row {first_row + row}), beyond the float32 range "
                        f"(+-{np.finfo(np.float32).max:.3g}) it is computed in; rescale it (e.g. divide "
                        f"by its largest absolute value)"
                    )
            raise ValueError(f"{name} contains NaN or inf (first at row {first_row + row}: {flat[row, col]})")


def check_scale(x: np.ndarray, name: str, center: np.ndarray | None = None, underflow: bool = True) -> None:
    """Raise ``ValueError`` when the squared euclidean norms of the rows of ``x`` (minus
    ``center`` if given) leave the range float32 distance computations handle: above
    ``SQUARED_MAX`` they overflow to inf (and NaN after a subtraction), below
    ``SQUARED_MIN`` (but not all 0) they underflow, and either way every distance, hence
    every pick, would be wrong without notice. Reads ``x`` in blocks, in float64.

    Parameters
    ----------
    x : numpy.ndarray
        The rows to check, ``N x d``.
    name : str
        The array's name, for the message.
    center : numpy.ndarray or None, default None
        A ``d``-vector subtracted from every row first; ``None``: none.
    underflow : bool, default True
        ``underflow=False`` checks overflow only (a few rows of a larger set may be tiny).

    Raises
    ------
    ValueError
        A squared norm beyond the range; the message says how to rescale.
    """
    flat = x.reshape(x.shape[0], -1)
    rows = max(1, _FINITE_BLOCK_BYTES // max(1, flat.shape[1] * 8))
    largest = 0.0
    for start in range(0, flat.shape[0], rows):
        block = np.asarray(flat[start : start + rows], dtype=np.float64)
        if center is not None:
            block = block - center
        largest = max(largest, float(np.einsum("ij,ij->i", block, block).max(initial=0.0)))
    centered = " (after centering)" if center is not None else ""
    if largest > SQUARED_MAX:
        raise ValueError(
            f"{name}: row squared norms reach {largest:.3g}{centered}, so squared distances overflow "
            f"float32 (max {np.finfo(np.float32).max:.3g}); rescale the embeddings (e.g. divide them "
            f"by their standard deviation)"
        )
    if underflow and 0.0 < largest < SQUARED_MIN:
        raise ValueError(
            f"{name}: row squared norms are at most {largest:.3g}{centered}, so squared distances "
            f"underflow float32; rescale the embeddings (e.g. divide them by their standard deviation)"
        )


def load_embeddings(embeddings: Any, name: str = "embeddings", first_row: int = 0) -> np.ndarray:
    """Return an ``N x d`` float32 C-contiguous array for ``embeddings``.

    Parameters
    ----------
    embeddings : array-like, torch.Tensor, str or os.PathLike
        ``embeddings`` is an array-like, a torch tensor, or the path of a ``.npy`` file, which
        is opened memory-mapped: ``N x d`` real numbers (integers and bools are cast), ``N, d >= 1``.
    name : str, default "embeddings"
        The argument's name, for the messages.
    first_row : int, default 0
        ``first_row``: the number of its first row in messages, for a shard.

    Returns
    -------
    numpy.ndarray
        ``N x d`` float32, C-contiguous, finite. An array that already is float32 C-contiguous
        (memmaps included) is returned as it is: no copy.

    Raises
    ------
    ValueError
        A path that is a folder, missing or not ``.npy``; data not 2-D, empty, or not finite in float32.
    TypeError
        Data that is not an array of real numbers (complex, objects, ragged lists).
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
    source = None
    if x.dtype != np.float32 or not x.flags.c_contiguous:
        source = x if x.dtype.itemsize > 4 and np.issubdtype(x.dtype, np.floating) else None
        with np.errstate(over="ignore"):  # an overflow is reported below, with its fix
            x = np.ascontiguousarray(x, dtype=np.float32)
    check_finite(x, name, source=source, first_row=first_row)
    return x


def check_graph(
    graph: Any, num_nodes: int | None = None, name: str = "graph", dtype: Any = np.float32
) -> sp.csr_matrix:
    """Return ``graph`` as a square CSR matrix with int64 indices and float32 weights.

    A scipy sparse matrix or array is accepted; a dense array is refused (it defeats the
    point of a sparse graph).

    Parameters
    ----------
    graph : scipy.sparse matrix or array
        A square ``N x N`` graph with finite edge weights; it is not modified.
    num_nodes : int or None, default None
        ``num_nodes`` checks the size: the number of nodes it must have (the data's examples); ``None``: any.
    name : str, default "graph"
        The argument's name, for the messages.
    dtype : numpy dtype, default numpy.float32
        The weights' dtype: ``dtype=np.float64`` keeps float64 weights, for the set functions' float64 similarities.

    Returns
    -------
    scipy.sparse.csr_matrix
        Duplicates summed, explicit zeros dropped, int64 indices; a symmetric mark kept.

    Raises
    ------
    TypeError
        ``graph`` is not a scipy sparse matrix.
    ValueError
        ``graph`` is not square, has the wrong size, or has NaN, inf or too large weights.
    """
    if not sp.issparse(graph):
        raise TypeError(f"{name} must be a scipy.sparse matrix (CSR), got {type(graph).__name__}")
    if graph.ndim != 2 or graph.shape[0] != graph.shape[1]:
        raise ValueError(f"{name} must be square, got shape {graph.shape}")
    if num_nodes is not None and graph.shape[0] != num_nodes:
        raise ValueError(f"{name} has {graph.shape[0]} nodes but the data has {num_nodes} examples")
    if graph.nnz and np.issubdtype(graph.dtype, np.number) and not np.isfinite(graph.data).all():
        bad = graph.data[~np.isfinite(graph.data)][0]
        raise ValueError(f"{name} has NaN or inf edge weights (e.g. {bad}); remove or replace them")
    with np.errstate(over="ignore"):  # reported below, with its fix
        g = sp.csr_matrix(graph, dtype=dtype)
    # sp.save_npz keeps explicit zeros: they are no edges, and a graph of nothing but them
    # would otherwise look like one with edges (METIS then got NaN weights)
    if g is graph or not g.has_canonical_format or (g.nnz and not g.data.all()):
        g = g.copy()  # sum_duplicates / eliminate_zeros work in place: never on the caller's arrays
        g.sum_duplicates()
        g.eliminate_zeros()
    if g.nnz and not np.isfinite(g.data).all():
        raise ValueError(
            f"{name} has edge weights beyond the float32 range (+-{np.finfo(np.float32).max:.3g}); "
            f"rescale them (e.g. divide by the largest)"
        )
    g = to_int64(g)
    # a float32 cast, summed duplicates and dropped zeros keep a matrix symmetric
    return mark_symmetric(g) if known_symmetric(graph) else g


def to_int64(matrix: sp.csr_matrix) -> sp.csr_matrix:
    """Give a CSR matrix int64 ``indices`` and ``indptr`` (scipy downcasts to int32
    whenever it can; int32 overflows past 2**31 stored entries).

    Parameters
    ----------
    matrix : scipy.sparse.csr_matrix
        The matrix, changed in place and returned.
    """
    matrix.indices = matrix.indices.astype(np.int64, copy=False)
    matrix.indptr = matrix.indptr.astype(np.int64, copy=False)
    return matrix


# A CSR matrix known to be symmetric (``knn_graph`` symmetrizes) carries its own arrays
# under this attribute: the set functions then skip the check (one transposition, a large
# share of a sparse facility location's time: docs/performance.md). Replacing an array drops the mark; editing
# one in place does not, and a wrong mark makes lazy greedy's result wrong (documented).
_SYMMETRIC_MARK = "_batchsel_symmetric"


def mark_symmetric(matrix: sp.csr_matrix) -> sp.csr_matrix:
    """Record on a CSR matrix that it is symmetric, as built (see :func:`known_symmetric`).

    Parameters
    ----------
    matrix : scipy.sparse.csr_matrix
        A symmetric matrix (not checked), marked in place and returned.
    """
    setattr(matrix, _SYMMETRIC_MARK, (matrix.indptr, matrix.indices, matrix.data))
    return matrix


def known_symmetric(matrix: Any) -> bool:
    """Whether ``matrix`` carries the mark of :func:`mark_symmetric` for its current arrays.

    Parameters
    ----------
    matrix : Any
        A matrix (any object: one without the mark gives ``False``).

    Returns
    -------
    bool
        ``True`` when marked and none of its three CSR arrays was replaced since.
    """
    mark = getattr(matrix, _SYMMETRIC_MARK, None)
    return mark is not None and all(a is b for a, b in zip(mark, (matrix.indptr, matrix.indices, matrix.data)))


def check_labels(labels: Any, num_examples: int, name: str = "labels", allow_unlabeled: bool = False) -> np.ndarray:
    """Return labels as a 1-D int64 array of length ``num_examples``.

    Parameters
    ----------
    labels : array-like or torch.Tensor
        Integer class ids (integral floats are accepted), one per example.
    num_examples : int
        The length ``labels`` must have.
    name : str, default "labels"
        The argument's name, for the messages.
    allow_unlabeled : bool, default False
        -1 marks an unlabeled example when ``allow_unlabeled``; otherwise every label must be >= 0.

    Returns
    -------
    numpy.ndarray
        The labels, 1-D int64.

    Raises
    ------
    ValueError
        ``labels`` is not 1-D, has another length, or holds values out of range.
    TypeError
        ``labels`` holds values that are not integers.
    """
    labels = tensor_to_numpy(labels)
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {y.shape}")
    if y.shape[0] != num_examples:
        raise ValueError(f"{name} has length {y.shape[0]} but there are {num_examples} examples")
    if not (np.issubdtype(y.dtype, np.integer) or (np.issubdtype(y.dtype, np.floating) and np.all(np.mod(y, 1) == 0))):
        raise TypeError(f"{name} must hold integer class ids, got dtype {y.dtype}")
    if np.issubdtype(y.dtype, np.floating) and y.size and np.abs(y).max() > 2**53:
        # integral floats that large are no class ids (and overflow the int64 cast)
        raise ValueError(f"{name} must hold class ids, found {float(np.abs(y).max()):.3g}")
    if y.dtype.kind == "u" and y.size and y.max() > np.iinfo(np.int64).max:
        # the int64 cast would wrap them to negative numbers, reported as such
        raise ValueError(f"{name} must hold class ids below 2**63 (int64), found {int(y.max())}")
    y = y.astype(np.int64)
    lowest = -1 if allow_unlabeled else 0
    if y.size and y.min() < lowest:
        raise ValueError(f"{name} must be >= {lowest}, found {int(y.min())}")
    return y


def check_seed(seed: Any) -> int:
    """Seeds are non-negative integers (they are combined with the epoch).

    Parameters
    ----------
    seed : Any
        The seed to check: a Python or numpy integer >= 0.

    Returns
    -------
    int
        ``seed`` as a Python int.

    Raises
    ------
    TypeError
        ``seed`` is not an integer.
    ValueError
        ``seed`` is negative.
    """
    return check_int(seed, "seed", minimum=0)


def check_indices(indices: Any, num_examples: int, name: str = "indices") -> np.ndarray:
    """Return example indices as a 1-D int64 array, checked to lie in ``[0, N)``.

    Parameters
    ----------
    indices : array-like or torch.Tensor
        Integer indices, 1-D (a single index becomes an array of one).
    num_examples : int
        ``N``, the number of examples the indices point into.
    name : str, default "indices"
        The argument's name, for the messages.

    Returns
    -------
    numpy.ndarray
        The indices, 1-D int64.

    Raises
    ------
    ValueError
        ``indices`` has two or more dimensions, or an index outside ``[0, N)``.
    TypeError
        ``indices`` are not integers.
    """
    idx = tensor_to_numpy(indices)
    if not isinstance(idx, np.ndarray):
        idx = np.asarray(idx)
    if idx.ndim != 1:
        if idx.ndim != 0:
            raise ValueError(f"{name} must be 1-D, got shape {idx.shape}")
        idx = idx.reshape(1)
    if not idx.size:
        return idx.astype(np.int64, copy=False)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, got dtype {idx.dtype}")
    idx = idx.astype(np.int64, copy=False)
    # one pass for both bounds: seen as unsigned, a negative index is >= 2**63 > N
    if np.maximum.reduce(idx.view(np.uint64)) >= num_examples:
        bad = idx[(idx < 0) | (idx >= num_examples)][0]
        raise ValueError(f"{name} must be in [0, {num_examples}), found {int(bad)}")
    return idx


def check_rows(values: Any, count: int, name: str, ndim: int) -> np.ndarray:
    """Feedback values (losses: 1-D, logits / embeddings: 2-D) as a finite float array with one row per index.

    Parameters
    ----------
    values : array-like or torch.Tensor
        Real numbers (bools are accepted), ``count`` rows.
    count : int
        The number of rows ``values`` must have (the number of indices it goes with).
    name : str
        The argument's name, for the messages.
    ndim : int
        The dimensions ``values`` must have: 1 (a float64 result) or 2 (float32).

    Returns
    -------
    numpy.ndarray
        ``values`` as float64 (``ndim`` 1) or float32 (``ndim`` 2).

    Raises
    ------
    TypeError
        ``values`` are complex or not numbers (e.g. hold ``None``).
    ValueError
        ``values`` has other dimensions or another number of rows, or holds NaN or inf.
    """
    values = tensor_to_numpy(values)
    if values.dtype.kind == "c" if isinstance(values, np.ndarray) else np.iscomplexobj(values):
        raise TypeError(
            f"{name} must be real numbers, got complex values"
        )  # a float cast would drop the imaginary part
    try:
        # the dtype before the cast: a float cast turns None into NaN, reported as "NaN or inf"
        raw = values if isinstance(values, np.ndarray) else np.asarray(values)
        if raw.dtype == object or not (np.issubdtype(raw.dtype, np.number) or raw.dtype == bool):
            raise TypeError(f"got dtype {raw.dtype} (None or other values that are not numbers?)")
        v = np.asarray(raw, dtype=np.float64 if ndim == 1 else np.float32)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be numeric: {exc}") from None
    if v.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {v.shape}")
    if v.shape[0] != count:
        raise ValueError(f"{name} has {v.shape[0]} rows but {count} indices were given")
    if not np.logical_and.reduce(np.isfinite(v), axis=None):  # (ndarray.all's Python wrapper costs more)
        raise ValueError(f"{name} contains NaN or inf")
    return v


# One vocabulary for metrics: "euclidean" and "cosine" (plus "ip" for the index and "corr"
# for facility location). "l2" is faiss's name for euclidean and was EmbeddingIndex's: it is
# accepted wherever a metric is given, and translated here only.
METRIC_SYNONYMS = {"l2": "euclidean"}


def check_metric(metric: Any, allowed: tuple[str, ...], name: str = "metric") -> str:
    """The canonical name of ``metric`` (``"l2"`` becomes ``"euclidean"``), which must be one of ``allowed``.

    Parameters
    ----------
    metric : Any
        The metric's name as the user gave it.
    allowed : tuple of str
        The canonical names the caller accepts (e.g. ``("euclidean", "cosine")``).
    name : str, default "metric"
        The argument's name, for the message.

    Returns
    -------
    str
        The canonical name, one of ``allowed``.

    Raises
    ------
    ValueError
        ``metric`` names none of ``allowed`` (nor a synonym of one): the message names the choices.

    Examples
    --------
    >>> check_metric("l2", ("euclidean", "cosine"))
    'euclidean'
    """
    canonical = METRIC_SYNONYMS.get(metric, metric) if isinstance(metric, str) else metric
    if not isinstance(canonical, str) or canonical not in allowed:
        synonyms = [f"{s!r} for {c!r}" for s, c in METRIC_SYNONYMS.items() if c in allowed]
        raise ValueError(
            f"{name} must be one of {tuple(allowed)}{' (or ' + ', '.join(synonyms) + ')' if synonyms else ''}, "
            f"got {metric!r}"
        )
    return canonical
