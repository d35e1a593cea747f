"""What makes a sieve-streaming checkpoint resumable: the options it was saved with
(:func:`stream_config`, compared on load) and the check of a state before it is restored
(:func:`check_state`). The arrays themselves come from the parts that hold them
(``SieveSet.state``, ``StreamReference.pending``).
"""

from __future__ import annotations

from typing import Any

from batchsel.core.state import from_portable

# SieveStreaming's options that a state must have been saved with
CONFIG = ("objective", "k", "epsilon", "concave", "saturation", "metric", "reference_size", "seed", "refine")


def stream_config(stream: Any) -> dict[str, Any]:
    """The options of ``stream`` that a state is saved with: a callable ``concave`` by its
    name.

    Parameters
    ----------
    stream : SieveStreaming
        The estimator.

    Returns
    -------
    dict
        One entry per name of :data:`CONFIG`.

    Example
    -------
    >>> from batchsel import SieveStreaming
    >>> stream_config(SieveStreaming("feature-based", 5))["k"]
    5
    """
    config = {name: getattr(stream, name) for name in CONFIG}
    if not isinstance(config["concave"], str):
        config["concave"] = getattr(config["concave"], "__name__", "callable")
    return config


def check_state(state: Any, config: dict[str, Any]) -> dict[str, Any]:
    """A state to restore, as arrays (``from_portable``), once it is known to come from a
    ``SieveStreaming.state_dict`` saved with ``config``.

    Parameters
    ----------
    state : dict
        The state.
    config : dict
        :func:`stream_config` of the estimator that restores it.

    Returns
    -------
    dict
        The state, its arrays as NumPy arrays.

    Raises
    ------
    TypeError
        If ``state`` is not a state dict.
    ValueError
        If it was saved with other options.

    Example
    -------
    >>> check_state({"config": {"k": 3}, "n_seen": 0}, {"k": 3})["n_seen"]
    0
    """
    if not isinstance(state, dict) or "config" not in state:
        raise TypeError("state must be a dict from SieveStreaming.state_dict()")
    if state["config"] != config:
        raise ValueError(f"the state was saved by SieveStreaming{state['config']}, not {config}")
    return from_portable(state)
