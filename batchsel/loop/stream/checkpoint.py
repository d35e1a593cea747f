"""The checks of a :class:`~batchsel.loop.stream.stream.StreamBatches` state: one to load
(:func:`check_state`: a state of this version, with every key, saved with this stream's
options) and a loaded position to resume from (:func:`check_resume`: the same reader, and
the losses the epoch had seen, which live in the stream's own state, not the loader's)."""

from __future__ import annotations

from typing import Any

from batchsel.core.state import check_version
from batchsel.loop.stream.feedback import LossTable

STATE_KEYS = ("version", "config", "epoch", "position", "losses")
_OWN_STATE = "load the stream's own state (stream.load_state_dict) before the loader's"


def check_state(state: Any, config: dict[str, Any]) -> None:
    """Refuse a state that is not a ``StreamBatches.state_dict`` of this version, lacks a
    key, or was saved with other options than ``config``.

    Raises
    ------
    ValueError
        Naming the missing keys, the version, or the option that differs.

    Example
    -------
    >>> check_state({"version": 1}, {})
    Traceback (most recent call last):
    ...
    ValueError: not a StreamBatches state (state_dict's output): missing keys ['config', 'epoch', 'losses', 'position']
    """
    if not isinstance(state, dict):
        raise ValueError(f"not a StreamBatches state (state_dict's output): got a {type(state).__name__}")
    missing = sorted(set(STATE_KEYS) - set(state))
    if missing:
        raise ValueError(f"not a StreamBatches state (state_dict's output): missing keys {missing}")
    check_version(state, "StreamBatches")
    saved = state["config"]
    if not isinstance(saved, dict) or set(config) - set(saved):
        got = sorted(saved) if isinstance(saved, dict) else type(saved).__name__
        raise ValueError(f"the state's config must hold {sorted(config)}, got {got}")
    for key, value in saved.items():
        if config.get(key) != value:
            raise ValueError(f"the state was saved with {key}={value!r}, this stream has {key}={config.get(key)!r}")


def check_resume(
    resume: dict[str, Any], reader: tuple[int, int], losses: LossTable, mode: str, own_state: bool
) -> None:
    """Refuse to resume from ``resume`` (a position of the epoch running) in reader
    ``(reader, readers)`` when it was saved by another reader, or without the losses the
    loop had observed when it was saved.

    The losses live in the training process (the stream's own state); a loader's state
    holds the workers' positions only. A position of a feedback mode after some batches
    (their losses observed), in a copy with no loss and no stream state loaded, lost them:
    in the first epoch too, whose losses order the next one. After the first epoch the
    copy must also know as many losses from before the epoch as the epoch started with.

    Parameters
    ----------
    resume : dict
        The loaded position.
    reader : tuple of int
        ``(reader, readers)`` of this iteration.
    losses : LossTable
        The losses of this copy of the stream.
    mode : str
        The stream's mode.
    own_state : bool
        Whether a state holding the losses (the training process's) was loaded.

    Raises
    ------
    ValueError
        Naming the readers, or saying to load the stream's own state first.
    """
    if (resume["reader"], resume["readers"]) != reader:
        raise ValueError(
            f"the state was saved by reader {resume['reader']} of {resume['readers']} (rank x workers), "
            f"this is reader {reader[0]} of {reader[1]}: resume with the same world_size and num_workers"
        )
    known = losses.known_before(resume["epoch"])
    if known < resume["known"]:
        raise ValueError(
            f"the state's epoch started with losses of {resume['known']} examples, this copy has {known}: {_OWN_STATE}"
        )
    if mode != "random" and resume["done"] > 0 and not own_state and not len(losses):
        raise ValueError(
            f"the state was saved after {resume['done']} batches of epoch {resume['epoch']} in mode={mode!r}, and "
            f"this copy has none of the losses observed before it: {_OWN_STATE}"
        )


__all__ = ["STATE_KEYS", "check_resume", "check_state"]
