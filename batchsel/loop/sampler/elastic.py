"""Elastic resume: an epoch interrupted on ``W`` ranks, finished on ``W'``.

A state saved with ``state_dict(all_ranks=True)`` holds every old rank's place in the
epoch. Loaded on another number of ranks, the rest of that epoch becomes a
:class:`Remainder` on each new rank:

- a selector that plans its epochs (offline, epoch feedback, buckets): the old ranks'
  batches not trained yet, whole and in step order, dealt over the new ranks
  (:func:`deal_batches`): every example of the plan once over the old and the new ranks
  together, the same number of steps on every new rank;
- an online selector (loss rank, AutoSelector): as many steps as the old ranks had
  examples left, drawn by the new world's own run of the epoch (its last steps), from
  the feedback carried over; the examples trained so far in the epoch are marked drawn.

Later epochs are the new world's own. Nothing here talks to other ranks: every new rank
computes the same deal from the same state.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np

from batchsel.core.checks import check_int
from batchsel.core.world import World

if TYPE_CHECKING:  # the sampler's parts, which import this module
    from batchsel.loop.sampler.lengths import EpochLengths
    from batchsel.loop.sampler.profile import SelectorProfile
    from batchsel.loop.sampler.resume import SamplerState

logger = logging.getLogger(__name__)

Item = tuple[np.ndarray, "np.ndarray | None"]


@dataclass
class Remainder:
    """The rest of an interrupted epoch on this rank, resumed on another number of ranks.

    The epoch's steps are numbered on as before: the remainder's are ``first`` to
    ``first + steps - 1``.

    Parameters
    ----------
    epoch : int
        The interrupted epoch.
    first : int
        The steps of the epoch trained before the interruption.
    steps : int
        The steps left, the same on every rank of the new world.
    batches : list of numpy.ndarray or None
        This rank's batches of them (a selector that plans its epochs); None for an
        online selector, which draws them.
    weights : list of numpy.ndarray or None
        Their weights, where the plan has weights.
    start : int
        An online selector's batch number for step ``first`` (its run of the epoch in
        the new world ends with the remainder's steps).

    Example
    -------
    >>> rest = Remainder(epoch=1, first=3, steps=2, batches=[np.array([4, 1]), np.array([7])])
    >>> rest.length, [b.tolist() for b, _ in rest.items(4)]
    (5, [[7]])
    """

    epoch: int
    first: int
    steps: int
    batches: list[np.ndarray] | None = None
    weights: list[np.ndarray] | None = None
    start: int = 0

    @property
    def length(self) -> int:
        """The epoch's steps on this world: those done before, and the remainder's."""
        return self.first + self.steps

    def items(self, position: int) -> Iterator[Item]:
        """A planned remainder's ``(batch, weights)`` from step ``position`` on.

        Parameters
        ----------
        position : int
            The epoch's step to start at, ``first <= position <= length``.

        Returns
        -------
        iterator of (numpy.ndarray, numpy.ndarray or None)
        """
        if self.batches is None:
            raise ValueError("an online selector's remainder is drawn by the selector, not listed")
        for i in range(position - self.first, self.steps):
            yield self.batches[i], None if self.weights is None else self.weights[i]

    def to_dict(self) -> dict[str, Any]:
        """The saved form (numpy arrays; the sampler's state makes them portable)."""
        return {
            "epoch": self.epoch,
            "first": self.first,
            "steps": self.steps,
            "batches": None if self.batches is None else list(self.batches),
            "weights": None if self.weights is None else list(self.weights),
            "start": self.start,
        }

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> Remainder:
        """Read :meth:`to_dict`'s output back, checked.

        Parameters
        ----------
        saved : dict
            A state's ``remainder``.

        Returns
        -------
        Remainder
            ``ValueError`` naming a missing or inconsistent field.
        """
        missing = sorted({"epoch", "first", "steps", "batches", "weights", "start"} - set(saved))
        if missing:
            raise ValueError(f"the state's remainder lacks {missing}: pass what state_dict() returned")
        batches = None if saved["batches"] is None else [np.asarray(b, dtype=np.int64) for b in saved["batches"]]
        weights = None if saved["weights"] is None else [np.asarray(w, dtype=np.float32) for w in saved["weights"]]
        rest = cls(
            check_int(saved["epoch"], "remainder epoch", minimum=0),
            check_int(saved["first"], "remainder first", minimum=0),
            check_int(saved["steps"], "remainder steps", minimum=0),
            batches,
            weights,
            check_int(saved["start"], "remainder start", minimum=0),
        )
        if batches is not None and len(batches) != rest.steps:
            raise ValueError(f"the state's remainder has {len(batches)} batches for {rest.steps} steps")
        if weights is not None and (batches is None or len(weights) != len(batches)):
            raise ValueError("the state's remainder has weights that do not match its batches")
        return rest


def deal_batches(items: list[Item], ranks: int) -> list[list[Item]]:
    """Deal ``(batch, weights)`` items over ``ranks`` ranks with the same number on each.

    The items stay whole and in order (step ``s`` of rank ``r`` is item ``s * ranks + r``),
    so each keeps what its selector built it for (a diverse batch, a graph block, a length
    bucket). While the count is not a multiple of ``ranks``, the largest item is split in
    two halves in place (the first of equal ones). With fewer examples than ranks, the
    last ranks repeat the final example (weight 0 where the items have weights): the only
    repeat a deal makes.

    Parameters
    ----------
    items : list of (numpy.ndarray, numpy.ndarray or None)
        The batches not trained yet, in step order, with their weights (None: unweighted).
    ranks : int
        The new number of ranks, ``>= 1``.

    Returns
    -------
    list of list
        Per rank, its items, as many on every rank.

    Example
    -------
    >>> items = [(np.array([0, 1, 2, 3]), None), (np.array([4, 5]), None)]
    >>> [[b.tolist() for b, _ in mine] for mine in deal_batches(items, 3)]
    [[[0, 1]], [[2, 3]], [[4, 5]]]
    """
    ranks = check_int(ranks, "ranks", minimum=1)
    items = [(np.asarray(b, dtype=np.int64), w) for b, w in items if len(b)]
    if not items:
        return [[] for _ in range(ranks)]
    while len(items) % ranks:
        sizes = [len(b) for b, _ in items]
        i = int(np.argmax(sizes))
        if sizes[i] < 2:  # fewer examples than ranks: the last ranks repeat the final one
            batch, weights = items[-1]
            spare = (batch[-1:], None if weights is None else np.zeros(1, np.float32))
            items += [spare] * (ranks - len(items) % ranks)
            break
        batch, weights = items[i]
        half = (len(batch) + 1) // 2
        items[i : i + 1] = [
            (batch[:half], None if weights is None else weights[:half]),
            (batch[half:], None if weights is None else weights[half:]),
        ]
    return [items[r::ranks] for r in range(ranks)]


def steps_for(examples: int, ranks: int, batch_size: int) -> int:
    """Whole steps of ``ranks`` batches of ``batch_size`` that hold ``examples`` examples.

    >>> steps_for(10, 2, 4), steps_for(0, 3, 4)
    (2, 0)
    """
    return -(-int(examples) // (int(ranks) * int(batch_size)))


def saved_place(saved: Sequence[SamplerState]) -> tuple[int, int]:
    """The epoch and the steps done that every old rank's state agrees on.

    Parameters
    ----------
    saved : sequence of SamplerState
        Every old rank's state, by rank (``state_dict(all_ranks=True)``'s ``ranks``).

    Returns
    -------
    tuple of int
        ``(epoch, steps_done)``; ``ValueError`` where the ranks disagree or a state is
        not its rank's.
    """
    for r, state in enumerate(saved):
        if state.run.rank != r or state.run.world_size != len(saved):
            raise ValueError(
                f"the state's rank {r} entry is rank {state.run.rank} of {state.run.world_size}: "
                f"pass what state_dict(all_ranks=True) returned"
            )
    places = sorted({(s.place.epoch, s.place.batches_done) for s in saved})
    if len(places) > 1:
        held = ", ".join(f"rank {r}: epoch {s.place.epoch} step {s.place.batches_done}" for r, s in enumerate(saved))
        raise ValueError(f"the ranks' states are at different steps ({held}): save every rank at the same step")
    return places[0]


def _old_length(state: SamplerState, epoch: int, lengths: EpochLengths) -> int:
    """The old rank's steps in ``epoch`` (its own remainder's, where it had one)."""
    rest = state.remainder
    if rest is not None and rest.epoch == epoch:
        return rest.length
    return lengths.of(epoch, state.run.world_size)


def _planned_items(state: SamplerState, epoch: int, done: int, plan: Any, lengths: EpochLengths) -> list[Item]:
    """The old rank's batches of ``epoch`` from step ``done`` on, with their weights, from
    its own remainder or from the epoch's ``plan`` for the old world."""
    rest = state.remainder
    if rest is not None and rest.epoch == epoch:
        return list(rest.items(done))
    stop = _old_length(state, epoch, lengths)  # a sampler's drop_last may leave the plan's last batch out
    rank = state.run.rank
    batches, weights = plan.batches(rank), plan.weights(rank)
    return [(batches[t], None if weights is None else weights[t]) for t in range(done, stop)]


def _drawn(state: SamplerState, epoch: int, done: int, selector: Any) -> np.ndarray:
    """The examples the old rank trained in ``epoch`` before step ``done``."""
    rest = state.remainder
    batches = done if rest is None or rest.epoch != epoch else done - rest.first + rest.start
    return selector.examples_drawn(state.selector, epoch, World(state.run.rank, state.run.world_size), batches)


def elastic_remainder(
    saved: Sequence[SamplerState],
    profile: SelectorProfile,
    lengths: EpochLengths,
    world: World,
    feed: Callable[[], None],
) -> Remainder:
    """The rest of the saved epoch for ``world``'s rank, the selector brought to it.

    The selector must hold old rank 0's state. A planned epoch's batches not trained yet
    are listed before ``feed`` hands the selector the feedback the old ranks had not
    applied (the plan of the epoch is the one they trained from), then dealt
    (:func:`deal_batches`); an online selector gets the feedback first, then rejoins the
    epoch for as many steps as the old ranks had examples left.

    Parameters
    ----------
    saved : sequence of SamplerState
        Every old rank's state, by rank, checked by :func:`saved_place`.
    profile : SelectorProfile
        The sampler's selector.
    lengths : EpochLengths
        The sampler's epoch lengths.
    world : World
        This rank in the new world.
    feed : callable
        Hands the selector the old ranks' feedback not applied yet.

    Returns
    -------
    Remainder
        This rank's.
    """
    epoch, done = saved_place(saved)
    old = len(saved)
    if not profile.online:
        # one plan of the epoch for the old world gives every old rank's batches
        needs_plan = any(s.remainder is None or s.remainder.epoch != epoch for s in saved)
        plan = profile.selector.plan(epoch, old) if needs_plan else None
        per_rank = [_planned_items(s, epoch, done, plan, lengths) for s in saved]
        feed()
        steps_left = max((len(items) for items in per_rank), default=0)
        items = [rank[t] for t in range(steps_left) for rank in per_rank if t < len(rank)]
        mine = deal_batches(items, world.size)[world.rank]
        weights = [np.ones(len(b), np.float32) if w is None else w for b, w in mine] if profile.weighted_plans else None
        rest = Remainder(epoch, done, len(mine), [b for b, _ in mine], weights)
        examples = sum(len(b) for b, _ in items)
    else:
        selector: Any = profile.selector  # an online selector: rejoin_steps, rejoin, examples_drawn
        drawn = np.concatenate([_drawn(s, epoch, done, selector) for s in saved] + [np.empty(0, np.int64)])
        examples = sum(_old_length(s, epoch, lengths) - done for s in saved) * selector.batch_size
        feed()
        start = selector.rejoin(epoch, world, selector.rejoin_steps(epoch, world.size, drawn, examples), drawn)
        rest = Remainder(epoch, done, lengths.of(epoch, world.size) - start, start=start)
    logger.info(
        "epoch %d saved on %d ranks at step %d continues on %d ranks: %d steps left (%d examples)",
        epoch,
        old,
        done,
        world.size,
        rest.steps,
        examples,
    )
    return rest


__all__ = ["Remainder", "deal_batches", "elastic_remainder", "saved_place", "steps_for"]
