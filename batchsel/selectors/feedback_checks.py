"""The check every step's feedback passes, at one numba pass where it can: a batch's
indices and losses, as the training loop hands them to an online selector's ``observe``.

The usual feedback (int64 indices, a float loss per index, all in range and finite)
costs one kernel call; anything else, and any bad value, goes through
:func:`~batchsel.core.checks.check_indices` and :func:`~batchsel.core.checks.check_rows`,
which name what is wrong. The results are the same either way.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from batchsel.core.checks import check_indices, check_rows, tensor_to_numpy


@njit(cache=True, nogil=True)
def in_range_and_finite(idx, values, num_examples):  # pragma: no cover - numba
    """Whether every index is in ``[0, num_examples)`` and every value finite: the check of
    one step's feedback, for the kernels that store it (callable inside them)."""
    for i in range(idx.size):
        j = idx[i]
        if j < 0 or j >= num_examples or not np.isfinite(values[i]):
            return False
    return True


def checked_losses(indices: Any, losses: Any, num_examples: int, *, cast: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """A batch's indices and per-example losses, checked: int64 indices in ``[0, N)`` and
    as many finite float64 losses.

    Parameters
    ----------
    indices : array-like or torch.Tensor
        The batch's example indices.
    losses : array-like or torch.Tensor
        One loss per index.
    num_examples : int
        ``N``.
    cast : bool, default True
        Return float64 losses. ``False``: float32 ones come back as they are, for a
        compiled kernel that reads either (a cast is a numpy call on every step).

    Returns
    -------
    tuple of numpy.ndarray
        ``(indices, losses)``: 1-D int64 and 1-D float64 (or float32 where ``cast`` is False).

    Raises
    ------
    TypeError, ValueError
        As :func:`~batchsel.core.checks.check_indices` and
        :func:`~batchsel.core.checks.check_rows` do, naming the bad value.

    Examples
    --------
    >>> idx, losses = checked_losses([3, 1], np.array([0.5, 2.0], np.float32), num_examples=4)
    >>> idx.tolist(), losses.dtype.name
    ([3, 1], 'float64')
    >>> checked_losses([3, 4], [0.5, 2.0], num_examples=4)
    Traceback (most recent call last):
    ...
    ValueError: indices must be in [0, 4), found 4
    """
    pair = feedback_arrays(indices, losses)
    if pair is not None and in_range_and_finite(pair[0], pair[1], num_examples):
        idx, values = pair
        return idx, values if values.dtype == np.float64 or not cast else values.astype(np.float64)
    idx = check_indices(indices, num_examples)
    return idx, check_rows(losses, len(idx), "losses", ndim=1)


def feedback_arrays(indices: Any, losses: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """A batch's indices and losses as the arrays a compiled kernel reads, where they
    already have its types (1-D int64 indices, as many 1-D float32 or float64 losses);
    None otherwise. Their values are not checked: a kernel that takes them checks the
    range and finiteness itself, and :func:`checked_losses` names what is wrong.

    Parameters
    ----------
    indices, losses : array-like or torch.Tensor
        As :func:`checked_losses` takes them.

    Returns
    -------
    tuple of numpy.ndarray or None
        ``(indices, losses)``, views where they were arrays or CPU tensors.

    Examples
    --------
    >>> idx, losses = feedback_arrays([3, 1], np.array([0.5, 2.0], np.float32))
    >>> idx.dtype.name, losses.dtype.name, feedback_arrays([3, 1], [0.5, 2.0])
    ('int64', 'float32', None)
    """
    idx = tensor_to_numpy(indices)
    if not isinstance(idx, np.ndarray):
        idx = np.asarray(idx)  # (a list of ints: int64)
    values = tensor_to_numpy(losses)
    if (
        isinstance(values, np.ndarray)
        and idx.dtype == np.int64
        and idx.ndim == 1
        and values.ndim == 1
        and (values.dtype == np.float32 or values.dtype == np.float64)
        and values.shape[0] == idx.shape[0]
    ):
        return idx, values
    return None


__all__ = ["checked_losses", "feedback_arrays", "in_range_and_finite"]
