"""State dicts that ``torch.load(weights_only=True)`` reads: numpy arrays travel as
tensors, numpy scalars as Python ones, so a checkpoint holding a batchsel state loads
with torch's safe default."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchsel.core.checks import tensor_to_numpy


def to_portable(obj: Any) -> Any:
    """Make a state dict loadable by ``torch.load(weights_only=True)``.

    numpy arrays -> torch tensors (copies), numpy scalars -> Python scalars, recursively
    through dicts, lists and tuples.

    Parameters
    ----------
    obj : Any
        A state: a dict, list or tuple (walked recursively), a numpy array or scalar, or
        any other value (returned as it is). Arrays of dtype ``object`` stay numpy arrays.

    Returns
    -------
    Any
        The same structure (the same container types) with the arrays as tensors and the
        numpy scalars as Python ones. torch is imported only when an array is met.

    See Also
    --------
    from_portable : the inverse.

    Examples
    --------
    >>> to_portable({"a": np.arange(2), "b": [np.float64(1.5)]})
    {'a': tensor([0, 1]), 'b': [1.5]}
    """
    if isinstance(obj, dict):
        return {k: to_portable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_portable(v) for v in obj)
    if isinstance(obj, np.ndarray) and obj.dtype != object:
        import torch

        return torch.from_numpy(np.array(obj, copy=True))
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def from_portable(obj: Any) -> Any:
    """The inverse of :func:`to_portable`: tensors back to numpy arrays (numpy input
    passes through, so states saved either way load).

    Parameters
    ----------
    obj : Any
        A state as :func:`to_portable` made it (or as saved before, with numpy arrays):
        dicts, lists and tuples are walked recursively.

    Returns
    -------
    Any
        The same structure with every tensor as a numpy array (detached, on the CPU;
        bfloat16 and other float dtypes numpy lacks as float32); other values unchanged.

    See Also
    --------
    to_portable : the conversion this undoes.

    Examples
    --------
    >>> from_portable(to_portable({"a": np.arange(2)}))["a"].tolist()
    [0, 1]
    """
    if isinstance(obj, dict):
        return {k: from_portable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(from_portable(v) for v in obj)
    if hasattr(obj, "detach") and hasattr(obj, "numpy"):
        return np.asarray(tensor_to_numpy(obj))
    return obj
