"""The pickled form of a :class:`~batchsel.loop.sampler.SelectionBatchSampler`.

It is the flat attribute dict of the sampler from before its parts had classes of their
own and before ``BackgroundSelection``: the feedback held back as ``_deferred`` and no
thread (``_worker``), so pickles load in either version. A thread does not copy or pickle;
a copy's iteration starts its own. :func:`to_pickled` writes that form from the sampler's
parts, :func:`from_pickled` builds the parts from it (filling in what older pickles lack).
"""

from __future__ import annotations

from typing import Any

from batchsel.loop.feedback import settle
from batchsel.loop.sampler.exchange import FeedbackExchange
from batchsel.loop.sampler.lengths import EpochLengths
from batchsel.loop.sampler.mistakes import LoopChecks
from batchsel.loop.sampler.profile import SelectorProfile
from batchsel.loop.sampler.resume import IterationRecord
from batchsel.loop.sampler.world import RankWorld

# the sampler's parts, by attribute name; everything else in its dict is pickled as it is
PARTS = ("_profile", "_world", "_lengths", "_record", "_feedback", "_checks")
# (flat key, attribute) of the parts that keep their state in plain attributes
WORLD: tuple[tuple[str, str], ...] = (("_given", "given"), ("_lazy", "lazy"), ("_comm", "found"))
WORLD += (("_rank", "found_rank"), ("_world_size", "found_size"), ("_resolved", "resolved"))
RECORD: tuple[tuple[str, str], ...] = (("_resume", "resume"), ("_iter_epoch", "epoch"), ("_iter_base", "base"))
RECORD += (("_yielded", "yielded"), ("_history", "history"), ("_iter_pending", "pending"), ("_passed", "passed"))
# a copy keeps the loader's look-ahead, not its iterator: its checkpoint then asks for the step
RECORD += (("_iter_window", "window"), ("_iter_attached_at", "attached_at"), ("_iter_mismatch", "mismatch"))
FEEDBACK: tuple[tuple[str, str], ...] = (
    ("_observe_calls", "calls"),
    ("_fed", "fed"),
    ("_warned_local", "warned_local"),
)


def to_pickled(attributes: dict[str, Any]) -> dict[str, Any]:
    """The pickled form of a sampler whose ``__dict__`` is ``attributes``.

    Parameters
    ----------
    attributes : dict
        The sampler's attributes, its parts among them.

    Returns
    -------
    dict
        The flat form; the feedback held back and buffered is read into numpy arrays.
    """
    state = {k: v for k, v in attributes.items() if k not in PARTS}
    world, record, feedback = attributes["_world"], attributes["_record"], attributes["_feedback"]
    profile, lengths = attributes["_profile"], attributes["_lengths"]
    state.update({key: getattr(world, name) for key, name in WORLD})
    state.update({key: getattr(record, name) for key, name in RECORD})
    state.update({key: getattr(feedback, name) for key, name in FEEDBACK})
    cached = lengths.cached
    state["_len"] = cached[1] if cached is not None and cached[0] == world.found_size else None
    state["_uses_feedback"] = profile.uses_feedback
    state["_feedback_fields"] = profile.feedback_fields
    state["_needed_fields"] = profile.needed_fields
    state["_buffer"] = [settle(o) for o in feedback.buffer]
    state["_deferred"] = [settle(o) for o in feedback.background.deferred]
    state["_worker"] = None
    state["_warned"] = attributes["_checks"].warned
    return state


def from_pickled(owner: Any, state: dict[str, Any]) -> dict[str, Any]:
    """The attributes of a sampler unpickled from ``state`` (this version's or an older one's).

    Parameters
    ----------
    owner : SelectionBatchSampler
        The sampler being unpickled (its epoch lengths feed the feedback's bookkeeping).
    state : dict
        The pickled form.

    Returns
    -------
    dict
        The sampler's attributes, its parts built anew (no thread).
    """
    state = dict(state)
    deferred = state.pop("_deferred", [])
    state.pop("_worker", None)
    selector = state["selector"]
    profile = SelectorProfile.__new__(SelectorProfile)
    profile.selector = selector
    profile.uses_feedback = state.pop("_uses_feedback", False)
    profile.feedback_fields = state.pop("_feedback_fields")
    needed = profile.feedback_fields - {"embeddings"} if profile.uses_feedback else frozenset()
    profile.needed_fields = state.pop("_needed_fields", needed)  # pickled before it existed: derived
    world = RankWorld.__new__(RankWorld)
    world.check = selector.check_world
    for key, name in WORLD:
        setattr(world, name, state.pop(key))
    lengths = EpochLengths(profile, bool(state.get("drop_last", False)))
    known = state.pop("_len", None)
    lengths.cached = None if known is None else (world.found_size, known)
    record = IterationRecord()
    for key, name in RECORD:
        setattr(record, name, state.pop(key, getattr(record, name)))
    feedback = FeedbackExchange(profile, world, record, owner._num_batches_of, deferred)
    feedback.buffer = state.pop("_buffer")
    for key, name in FEEDBACK:
        setattr(feedback, name, state.pop(key, getattr(feedback, name)))
    checks = LoopChecks(profile)
    checks.warned = state.pop("_warned", set())
    state.setdefault("timeout", 1800.0)  # pickled before these existed
    state.setdefault("_waited", 0.0)
    state.setdefault("_handed", 0)
    state.setdefault("workers_ahead", 0)
    parts = dict(_profile=profile, _world=world, _lengths=lengths, _record=record, _feedback=feedback)
    return {**state, **parts, "_checks": checks}


__all__ = ["from_pickled", "to_pickled"]
