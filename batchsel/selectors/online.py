"""The online kind of selector: :class:`OnlineSelector` draws batch after batch from the
scores known at that moment, keeps each rank's draw of the current epoch as a
:class:`~batchsel.selectors.runs.Run`, and resumes it exactly from its state dict."""

from __future__ import annotations

from typing import Any, Generic, Iterator, TypeVar

import numpy as np

from batchsel.core.checks import check_int
from batchsel.core.state import STATE_VERSION, check_version, from_portable, to_portable
from batchsel.core.world import World
from batchsel.plans.plan import EpochPlan
from batchsel.selectors.runs import Run
from batchsel.selectors.selector import Selector
from batchsel.selectors.sharding import epoch_rng, shard_length

R = TypeVar("R", bound=Run)  # an online selector's run type


class OnlineSelector(
    Selector,
    Generic[R],
    online=True,
    uses_feedback=True,  # the scores observed so far choose the batches
):
    """The kind of selector that draws each batch from the scores known at that moment.

    Subclasses implement :meth:`_next_batch`. Batch ``t`` of (epoch, rank) uses the
    generator ``epoch_rng(seed, epoch, rank, t)`` (or the subclass's own key of those,
    :meth:`_batch_rng`), the rank's shard of the epoch (:meth:`rank_shards`), the scores
    observed so far and the run state (:class:`~batchsel.selectors.runs.Run`: the examples
    already used this epoch; a subclass keeps more in a ``Run`` subclass, its
    ``run_type``). Drawn batches are remembered per (rank, world size) for the current
    epoch: iterating an epoch again, or from ``start`` after :meth:`load_state_dict`,
    replays the batches already drawn (a DataLoader prefetches ahead of training) and
    draws the rest.

    Parameters
    ----------
    num_examples, batch_size : int
        N and B.
    **kwargs
        ``seed``, ``drop_last``, ``partition``: :class:`Selector`'s.
    """

    #: the class of this selector's runs (``OnlineSelector[ItsRun]`` types them)
    run_type: type[Run] = Run

    def __init__(self, num_examples: int, batch_size: int, **kwargs: Any) -> None:
        super().__init__(num_examples, batch_size, **kwargs)
        self._runs: dict[tuple[int, int], R] = {}

    # -- subclass hooks ---------------------------------------------------------------
    def _next_batch(self, run: R, rng: Any) -> np.ndarray:
        """Draw the next batch of ``run`` (example indices), updating the run state."""
        raise NotImplementedError

    def _scores_state(self) -> dict[str, Any]:
        """The scores' part of :meth:`state_dict`: arrays nothing writes into afterwards
        (fresh copies, or a :class:`~batchsel.core.journal.WriteJournal`'s state), which
        the state's tensors share."""
        return {}

    def _load_scores(self, state: dict[str, Any]) -> None:
        pass

    def _check_epoch(self, epoch: int) -> int:
        return check_int(epoch, "epoch", minimum=0)

    # -- runs -------------------------------------------------------------------------
    def _new_run(self, epoch: int, world: World) -> R:
        """A fresh run of ``epoch`` for ``world``'s rank (checked by the caller)."""
        shard = self._rank_shards(epoch, world)[world.rank]
        return self.run_type.start(epoch, world.rank, shard, self.batch_size)  # type: ignore[return-value]

    def _restore_run(self, run: R) -> None:
        """Called on each run rebuilt by :meth:`load_state_dict` (``order``, ``m`` and
        ``drawn`` restored), so a subclass can bring it to the form it keeps; the sizes of
        a state written by an earlier version are re-cut (:meth:`Run.recut_sizes`)."""
        run.recut_sizes()

    def _batch_rng(self, run: Any, rank: int, t: int) -> Any:
        """The randomness handed to :meth:`_next_batch` for batch ``t`` of ``run``:
        ``epoch_rng(seed, epoch, rank, t)``. A subclass whose compiled kernel draws its own
        numbers may return a cheaper key of the same (seed, epoch, rank, t) instead."""
        return epoch_rng(self.seed, run.epoch, rank, t)

    def _draw(self, run: R, rank: int) -> np.ndarray:
        t = len(run.drawn)
        batch = np.asarray(self._next_batch(run, self._batch_rng(run, rank, t)), dtype=np.int64)
        run.drawn.append(batch)
        return batch

    def _num_batches(self, world: World) -> int:
        return -(-shard_length(self.num_examples, world.size, self.drop_last) // self.batch_size)

    def _iter_batches(self, epoch: int, world: World, start: int) -> Iterator[np.ndarray]:
        total = self._num_batches(world)
        key = (world.rank, world.size)
        run = self._runs.get(key)
        if run is None or run.epoch != epoch:
            run = self._runs[key] = self._new_run(epoch, world)
        t = min(start, len(run.drawn))
        while t < total:
            batch = run.drawn[t] if t < len(run.drawn) else self._draw(run, world.rank)
            if t >= start:
                yield batch
            t += 1

    def _plan(self, epoch: int, world: World) -> EpochPlan:
        # as drawn now, from the scores known now; the runs in progress are not touched
        total = self._num_batches(world)
        per_rank = []
        for r in range(world.size):
            run = self._new_run(epoch, World(r, world.size))
            per_rank.append([self._draw(run, r) for _ in range(total)])
        return EpochPlan(
            per_rank, num_examples=self.num_examples, epoch=epoch, seed=self.seed, method=type(self).__name__
        )

    # -- elastic resume ---------------------------------------------------------------
    @staticmethod
    def examples_drawn(state: dict[str, Any], epoch: int, world: World, batches: int) -> np.ndarray:
        """The examples of the first ``batches`` batches that ``world``'s rank drew in
        ``epoch``, read from that rank's :meth:`state_dict`.

        Parameters
        ----------
        state : dict
            The rank's saved selector state.
        epoch : int
            The epoch.
        world : World
            The rank and the number of ranks the state was saved with.
        batches : int
            How many of the run's first batches.

        Returns
        -------
        numpy.ndarray
            Their examples, concatenated (empty where the state has no such run).
        """
        for record in from_portable(state)["runs"]:
            if (int(record["rank"]), int(record["world_size"]), int(record["epoch"])) == (
                world.rank,
                world.size,
                epoch,
            ):
                sizes = np.asarray(record["drawn_sizes"], dtype=np.int64)
                return np.asarray(record["drawn"], dtype=np.int64)[: int(sizes[:batches].sum())]
        return np.empty(0, np.int64)

    def rejoin_steps(self, epoch: int, world_size: int, drawn: np.ndarray, examples: int) -> int:
        """The steps every rank of a new world takes to finish ``epoch`` after a resume on
        another number of ranks: enough for the ``examples`` the old ranks had left, and
        for each new rank's examples of the epoch not in ``drawn`` in batches of at most
        ``batch_size`` (:meth:`rejoin`); at most the epoch's batches.

        Parameters
        ----------
        epoch : int
            The epoch being finished.
        world_size : int
            The new number of ranks.
        drawn : numpy.ndarray
            The examples trained in the epoch before the interruption, on every old rank.
        examples : int
            The examples the old ranks had left to train in the epoch.

        Returns
        -------
        int
            The same on every rank of the new world.
        """
        world = self.world(world_size)
        trained = np.zeros(self.num_examples, np.bool_)
        trained[np.asarray(drawn, dtype=np.int64)] = True
        untrained = max(int((~trained[shard]).sum()) for shard in self._rank_shards(epoch, world))
        per_step = world_size * self.batch_size
        steps = max(-(-int(examples) // per_step), -(-untrained // self.batch_size))
        return min(steps, self._num_batches(world))

    def rejoin(self, epoch: int, world: World, steps: int, drawn: np.ndarray) -> int:
        """Continue ``epoch`` on ``world``'s rank for its last ``steps`` batches, after a
        resume on another number of ranks (:meth:`rejoin_steps`): the run of ``epoch``
        for ``world`` starts at batch ``num_batches - steps`` as if its batches so far had
        drawn the shard's examples in ``drawn``, without drawing them; the batches to
        come share the shard's other examples (a selector that draws without
        replacement trains each once). Runs of other world sizes are dropped.

        Parameters
        ----------
        epoch : int
            The epoch being finished.
        world : World
            This rank in the new world.
        steps : int
            The batches left to draw in the epoch (at most ``num_batches``).
        drawn : numpy.ndarray
            The examples trained in the epoch before the interruption, on every old rank.

        Returns
        -------
        int
            The batch number the run continues at.
        """
        start = max(self._num_batches(world) - check_int(steps, "steps", minimum=0), 0)
        self._runs = {key: run for key, run in self._runs.items() if key[1] == world.size}
        run = self._new_run(epoch, world)
        if start:
            trained = np.zeros(self.num_examples, np.bool_)  # (a mask: np.isin sorts both)
            trained[np.asarray(drawn, dtype=np.int64)] = True
            used = trained[run.shard]
            run.order = np.concatenate([np.flatnonzero(~used), np.flatnonzero(used)]).astype(np.int64, copy=False)
            run.m = int((~used).sum())
            # batch 0 holds the shard's examples trained, the others none: their numbers key the draws to come
            run.drawn = [run.shard[used]] + [np.empty(0, np.int64) for _ in range(start - 1)]
        self._restore_run(run)  # the sizes of the batches to come: the shard's other examples, evenly
        self._runs[(world.rank, world.size)] = run
        return start

    # -- resume -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Scores, GreedMax shards and, per (rank, world size), the current epoch's run:
        enough for a fresh selector built from the same inputs to continue exactly.

        Returns
        -------
        dict
            Portable (``torch.load(weights_only=True)`` reads it).
        """
        return to_portable(
            {
                "version": STATE_VERSION,
                "class": type(self).__name__,
                "num_examples": self.num_examples,
                "batch_size": self.batch_size,
                "drop_last": self.drop_last,
                "seed": self.seed,
                "runs": [run.record(world_size) for (_, world_size), run in self._runs.items()],
                "partitions": {int(w): owner.copy() for w, owner in self._shard_of.items()},
                "scores": self._scores_state(),
            },
            copy=False,  # no array above is written into afterwards (_scores_state's and Run.record's contract)
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state_dict` (also one written by an earlier version).

        Parameters
        ----------
        state : dict
            What :meth:`state_dict` returned, for a selector built from the same inputs.
        """
        check_version(state, type(self).__name__)
        if state.get("class") != type(self).__name__:
            raise ValueError(f"state is from a {state.get('class')!r}, not a {type(self).__name__}")
        state = from_portable(state)
        missing = sorted({"num_examples", "seed", "runs", "partitions", "scores"} - set(state))
        if missing:
            raise ValueError(f"{type(self).__name__} state lacks {missing}: pass what state_dict() returned")
        # a run of another N, batch size or padding policy would resume at the wrong
        # batch; states written before batch_size / drop_last were recorded skip those
        for key in ("num_examples", "seed", "batch_size", "drop_last"):
            if key in state and state[key] != getattr(self, key):
                raise ValueError(
                    f"state is for {key}={state[key]!r}, this selector has {key}={getattr(self, key)!r}; "
                    f"build the selector as the one whose state this is"
                )
        self._shard_of = {int(w): np.asarray(o, dtype=np.int64).copy() for w, o in state["partitions"].items()}
        self._load_scores(state["scores"])
        self._runs = {}
        for record in state["runs"]:
            world = self.world(record["world_size"], rank=record["rank"])
            run = self._new_run(record["epoch"], world)
            run.resume(record)
            self._restore_run(run)
            self._runs[(world.rank, world.size)] = run


__all__ = ["OnlineSelector", "STATE_VERSION"]  # STATE_VERSION: batchsel.core.state's
