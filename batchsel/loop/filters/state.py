"""CandidateFilter's checkpoint: the settings a saved state must agree on, the counters it
restores, and the refusal of a state that is not a filter's."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchsel.core.checks import tensor_to_numpy
from batchsel.core.state import STATE_VERSION, check_version

# settings a checkpoint must agree on (the counters are restored, these are checked)
SETTINGS = (
    "batch_size",
    "ratio",
    "score",
    "irreducible_weight",
    "diversity",
    "uniform_fraction",
    "warmup_steps",
    "min_il_skill",
    "min_il_decisive",
    "reference_accuracy",
    "seed",
    "pick",
    "beta",
    "window",
)
COUNTERS = (
    "steps_",
    "candidates_",
    "kept_",
    "kept_uniform_",
    "forward_seconds_",
    "select_seconds_",
    "elapsed_seconds_",
)


def filter_state(filt: Any, history: Any) -> dict[str, Any]:
    """``filt``'s state as plain Python values (``torch.save`` / ``torch.load`` with
    ``weights_only`` handle it).

    Parameters
    ----------
    filt : CandidateFilter
        The filter (its :data:`SETTINGS` and :data:`COUNTERS` are read).
    history : array-like or tensor
        ``pick="percentile"``'s latest scores, oldest first.

    Returns
    -------
    dict
        ``version``, ``class``, ``settings``, ``counters`` and ``history``.
    """
    return {
        "version": STATE_VERSION,
        "class": type(filt).__name__,
        "settings": {k: getattr(filt, k) for k in SETTINGS},
        "counters": {k: getattr(filt, k) for k in COUNTERS},
        "history": np.asarray(tensor_to_numpy(history), dtype=np.float64).tolist(),
    }


def restored_state(filt: Any, state: dict[str, Any]) -> tuple[dict[str, int | float], np.ndarray]:
    """Check ``state`` (:func:`filter_state`'s output) against ``filt`` and return what
    it restores.

    Parameters
    ----------
    filt : CandidateFilter
        The filter to restore: the state's settings must be its own.
    state : dict
        A saved state.

    Returns
    -------
    counters : dict
        Every counter of :data:`COUNTERS`, as ``int`` (``float`` for the seconds).
    history : numpy.ndarray
        The percentile history (empty in older states).

    Raises
    ------
    ValueError
        For what is not a filter's state, naming every missing and unexpected key at
        once (as torch's ``load_state_dict``), or a setting that differs.
    """
    check_version(state, "CandidateFilter")
    if state.get("class") != type(filt).__name__:
        raise ValueError(f"not a {type(filt).__name__} state: its class is {state.get('class')!r}")
    # settings may lack the guards added later; older states have no history
    missing = sorted({"settings", "counters"} - set(state))
    missing += sorted(f"counters.{k}" for k in set(COUNTERS) - set(state.get("counters") or {}))
    unexpected = sorted(set(state) - {"version", "class", "settings", "counters", "history"})
    unexpected += sorted(f"settings.{k}" for k in set(state.get("settings") or {}) - set(SETTINGS))
    unexpected += sorted(f"counters.{k}" for k in set(state.get("counters") or {}) - set(COUNTERS))
    if missing or unexpected:
        raise ValueError(
            f"not a complete CandidateFilter state: missing keys {missing}, unexpected keys "
            f"{unexpected}; pass what CandidateFilter.state_dict() returned"
        )
    for key, mine in ((k, getattr(filt, k)) for k in SETTINGS):
        if key in state["settings"] and state["settings"][key] != mine:  # (older states lack the guard's)
            raise ValueError(f"the state was saved with {key}={state['settings'].get(key)!r}, this filter has {mine!r}")
    counters = {
        key: float(state["counters"][key]) if key.endswith("seconds_") else int(state["counters"][key])
        for key in COUNTERS
    }
    return counters, np.asarray(state.get("history", []), dtype=np.float64)  # (older states: none)


__all__ = ["SETTINGS", "COUNTERS", "filter_state", "restored_state"]
