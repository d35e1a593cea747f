"""Per-example costs for cost-balanced batches: from an array of lengths, a column of a
Hugging Face ``datasets.Dataset`` (or any mapping of columns), or a callable applied to
each example. Checked once: finite, ``>= 0``, one per example."""

from __future__ import annotations

import logging
from typing import Any, Callable

import numpy as np

from batchsel.core.checks import check_int, tensor_to_numpy

logger = logging.getLogger(__name__)


def check_costs(costs: Any, num_examples: int | None = None, name: str = "costs") -> np.ndarray:
    """``costs`` as a float64 vector, checked: 1-D, numbers (not booleans), finite,
    ``>= 0``, and ``num_examples`` long when given.

    Parameters
    ----------
    costs : array-like
        One cost per example (a length in tokens, a duration, a node-and-edge count).
    num_examples : int or None, default None
        The length it must have.
    name : str, default "costs"
        The argument's name, for the messages.

    Returns
    -------
    numpy.ndarray
        float64, C-contiguous (a copy).

    Raises
    ------
    TypeError
        Booleans, strings or objects.
    ValueError
        Not 1-D, empty, the wrong length, or a NaN, infinite or negative value (named,
        with its position), or values so large that their sum overflows float64.

    Notes
    -----
    A torch tensor of a float dtype numpy lacks (bfloat16, float8) is read as float32,
    which holds each of its values exactly.

    Example
    -------
    >>> check_costs([3, 5, 2]).tolist()
    [3.0, 5.0, 2.0]
    >>> check_costs([3, -1])
    Traceback (most recent call last):
    ...
    ValueError: costs must be >= 0, got -1.0 at position 1
    """
    array = np.asarray(tensor_to_numpy(costs))  # bfloat16 / float8 tensors widen to float32
    if array.dtype == bool or not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        raise TypeError(f"{name} must be numbers, got an array of {array.dtype}")
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array (one cost per example), got shape {array.shape}")
    if num_examples is not None and len(array) != num_examples:
        raise ValueError(f"{name} has {len(array)} values but there are {num_examples} examples")
    array = np.array(array, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise ValueError(f"{name} must be finite, got {array[bad[0]]} at position {bad[0]}")
    bad = np.flatnonzero(array < 0)
    if bad.size:
        raise ValueError(f"{name} must be >= 0, got {array[bad[0]]} at position {bad[0]}")
    with np.errstate(over="ignore"):
        if not np.isfinite(array.sum() + array.max() * len(array)):
            raise ValueError(f"{name} are too large: their sum overflows float64 (largest {array.max():g})")
    return array


def value_cost(value: Any, where: str) -> float:
    """A column value's cost: its length for a sequence, itself for a number (a 0-d
    tensor or array, a numpy scalar included: a ``datasets`` column in torch or numpy
    format gives one per example).

    Parameters
    ----------
    value : Any
        The value.
    where : str
        Where it comes from, for the message.

    Returns
    -------
    float
        Its cost.

    Example
    -------
    >>> value_cost([4, 5, 6], "column 'input_ids'"), value_cost(np.int64(7), "column 'n'")
    (3.0, 7.0)
    """
    if isinstance(value, (str, bytes)):
        return float(len(value))
    shape = getattr(value, "shape", None)
    if shape is not None and len(shape) > 0:
        return float(shape[0])
    if shape is not None:  # 0-d: the number itself (len() of it raises)
        number = np.asarray(tensor_to_numpy(value))
        if number.dtype == bool or not (
            np.issubdtype(number.dtype, np.integer) or np.issubdtype(number.dtype, np.floating)
        ):
            raise TypeError(f"{where} holds a 0-d value of dtype {number.dtype}; costs must be numbers or sequences")
        return float(number)
    if hasattr(value, "__len__"):
        return float(len(value))
    return float(value)


def example_costs(source: Any, column: str | None = None, cost: Callable[[Any], float] | None = None) -> np.ndarray:
    """Per-example costs from what a training set already has.

    Parameters
    ----------
    source : array-like, mapping or dataset
        An array of costs (lengths, durations); a Hugging Face ``datasets.Dataset`` or a
        mapping of columns (with ``column``); or any dataset ``source[i]`` (with
        ``cost``).
    column : str or None, default None
        The column whose values give the costs: a sequence's length (token ids) or a
        number (a precomputed length; a 0-d tensor or numpy scalar, as a column in torch
        or numpy format gives it, is that number).
    cost : callable or None, default None
        ``cost(source[i])``, the cost of example ``i`` (one pass over the data, logged
        every 10 % of it).

    Returns
    -------
    numpy.ndarray
        float64 costs, checked (:func:`check_costs`).

    Raises
    ------
    ValueError
        Both ``column`` and ``cost`` given, a column the source lacks, or bad costs.

    See Also
    --------
    batchsel.BucketSelector : batches of similar cost under a budget.

    Example
    -------
    >>> example_costs({"input_ids": [[1, 2, 3], [4], [5, 6]]}, column="input_ids").tolist()
    [3.0, 1.0, 2.0]
    >>> example_costs(["a long one", "short"], cost=len).tolist()
    [10.0, 5.0]
    """
    if column is not None and cost is not None:
        raise ValueError("give column or cost, not both")
    if column is not None:
        names = getattr(source, "column_names", None)
        if names is None and hasattr(source, "keys"):
            names = list(source.keys())
        if names is not None and column not in names:
            raise ValueError(f"column {column!r} is not one of the source's columns {list(names)}")
        values = source[column]
        where = f"column {column!r}"
        whole = tensor_to_numpy(values)
        if isinstance(whole, np.ndarray) and whole.ndim == 1 and whole.dtype.kind in "biuf":
            return check_costs(whole, name=where)  # a column of numbers in torch / numpy format
        return check_costs([value_cost(v, where) for v in values], name=where)
    if cost is not None:
        if not callable(cost):
            raise TypeError(f"cost must be callable, got {type(cost).__name__}")
        n = check_int(len(source), "len(source)", minimum=1)
        out = np.empty(n, dtype=np.float64)
        tenth = max(n // 10, 1)
        for i in range(n):
            out[i] = cost(source[i])
            if (i + 1) % tenth == 0:
                logger.info("example_costs: %d of %d examples", i + 1, n)
        return check_costs(out)
    return check_costs(source)


__all__ = ["check_costs", "example_costs", "value_cost"]
