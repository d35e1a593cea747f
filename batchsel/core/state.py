"""Resume state: the protocol every stateful part keeps, the one version number of the
saved forms, and dicts that ``torch.load(weights_only=True)`` reads (numpy arrays travel
as tensors, numpy scalars as Python ones, so a checkpoint holding a batchsel state loads
with torch's safe default)."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from batchsel.core.checks import tensor_to_numpy

#: the version of every saved form batchsel writes (samplers, selectors, streams,
#: filters): one number for the release's formats, raised when any of them changes.
#: 0.1.0 wrote 1.
STATE_VERSION = 1


@runtime_checkable
class Stateful(Protocol):
    """What can be checkpointed and resumed: torchdata's ``Stateful`` protocol.
    ``state_dict()`` returns plain containers, numbers, strings and tensors
    (:func:`to_portable`), which ``torch.save`` writes and ``torch.load(weights_only=True)``
    reads; ``load_state_dict(state)`` restores it.

    Example
    -------
    >>> from batchsel import RandomSelector
    >>> isinstance(RandomSelector(10, 2), Stateful)
    True
    """

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


def check_version(state: Any, what: str) -> dict[str, Any]:
    """``state`` if it is a saved form of a version this release reads, else ``ValueError``
    naming ``what`` should have been given.

    Parameters
    ----------
    state : Any
        A saved state (a dict with ``version``).
    what : str
        The class whose ``state_dict()`` made it, for the message.

    Returns
    -------
    dict
        ``state``, unchanged.

    Examples
    --------
    >>> check_version({"version": 1}, "Thing")
    {'version': 1}
    >>> check_version([], "Thing")
    Traceback (most recent call last):
    ...
    ValueError: not a Thing state (pass what Thing.state_dict() returned): got list
    """
    if not isinstance(state, dict):
        raise ValueError(f"not a {what} state (pass what {what}.state_dict() returned): got {type(state).__name__}")
    version = state.get("version")
    if not isinstance(version, int) or not 1 <= version <= STATE_VERSION:
        raise ValueError(
            f"not a {what} state of a version this release reads (1 to {STATE_VERSION}): version {version!r}"
        )
    return state


def to_portable(obj: Any, *, copy: bool = True) -> Any:
    """Make a state dict loadable by ``torch.load(weights_only=True)``.

    numpy arrays -> torch tensors (copies), numpy scalars -> Python scalars, recursively
    through dicts, lists and tuples. A 1-D array of one value repeated (stride 0, a
    broadcast) becomes a tensor of that one value expanded: saved, it takes one value's
    room.

    Parameters
    ----------
    obj : Any
        A state: a dict, list or tuple (walked recursively), a numpy array or scalar, or
        any other value (returned as it is). Arrays of dtype ``object`` stay numpy arrays.
    copy : bool, default True
        Copy the arrays. False: the tensors share their memory, for a state whose arrays
        are the caller's own fresh copies (a checkpoint taken every step copies once).

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
        return {k: to_portable(v, copy=copy) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_portable(v, copy=copy) for v in obj)
    if isinstance(obj, np.ndarray) and obj.dtype != object:
        import torch

        if obj.ndim == 1 and obj.size > 1 and obj.strides[0] == 0:  # one value repeated: saved once
            return torch.from_numpy(np.array(obj[:1])).expand(obj.shape[0])
        return torch.from_numpy(np.array(obj, copy=True) if copy or not obj.flags.writeable else obj)
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def restored_into(current: np.ndarray | None, saved: np.ndarray) -> np.ndarray:
    """``saved``'s values in an array the loader owns: written into ``current`` where its
    shape and dtype match, else a fresh copy of ``saved``.

    A part's arrays exist before it loads a state (built with the part, their pages already
    in memory); writing into them spares a resume at ten million examples the page faults
    of fresh arrays, which cost more than the copy itself. The state's own arrays are never
    kept: the caller may still hold them (or load them twice).

    Parameters
    ----------
    current : numpy.ndarray or None
        The part's array now (None: none yet); nothing else may hold it.
    saved : numpy.ndarray
        The values to restore, already checked and of the dtype wanted.

    Returns
    -------
    numpy.ndarray
        ``current`` holding ``saved``'s values, or a copy of ``saved``.

    Example
    -------
    >>> mine = np.zeros(3)
    >>> restored_into(mine, np.array([1.0, 2.0, 3.0])) is mine, mine.tolist()
    (True, [1.0, 2.0, 3.0])
    >>> restored_into(mine, np.array([1.0])).tolist()
    [1.0]
    """
    if (
        current is not None
        and current.shape == saved.shape
        and current.dtype == saved.dtype
        and current.flags.writeable
        and current.flags.c_contiguous
        and not np.may_share_memory(current, saved)
    ):
        np.copyto(current, saved)
        return current
    return np.array(saved, copy=True)


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
