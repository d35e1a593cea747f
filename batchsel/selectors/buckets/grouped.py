"""Another selector's batches regrouped by cost: :class:`CostGroupedSelector` (the selector
decides which examples, and their weights, an epoch trains on; the grouping decides which
of them share a batch)."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Iterator

import numpy as np

from batchsel.core.checks import check_int
from batchsel.core.world import World
from batchsel.plans.plan import EpochPlan
from batchsel.selectors.buckets.bucket import check_costs_digest, owned_costs_digest
from batchsel.selectors.buckets.costs import check_costs
from batchsel.selectors.buckets.kernels import regroup_windows
from batchsel.selectors.capabilities import SelectorCapabilities
from batchsel.selectors.hashing import digest
from batchsel.selectors.selector import Selector
from batchsel.selectors.sharding import epoch_rng

#: the generator stream of the regrouping, apart from the selector's own draws
GROUP_STREAM = 0x6B75

#: the most windows an epoch's batches are regrouped by one call, one after another: the
#: first call one window (a first batch soon), each next call twice as many
WINDOWS_AT_ONCE = 512

#: the key :meth:`CostGroupedSelector.state_dict` adds to the selector's state: a digest
#: of the costs the batches were regrouped by
GROUP_COSTS_KEY = "grouped_costs_digest"


class CostGroupedSelector(Selector):
    """The batches of ``selector``, regrouped by cost within windows of ``window`` steps:
    less padding, the same examples, weights, batch sizes and number of batches.

    Within each window the examples of its batches are sorted by cost (ties in a random
    order) and cut into batches of the original sizes; the batches of one step come from
    neighbouring cost ranges and the steps of a window come in a random order. The sizes
    stay fixed, so the ranks are not balanced: on heavy-tailed lengths the batch that gets
    a window's longest examples costs far more than its step's other batches (use
    :class:`~batchsel.BucketSelector` where ranks wait for each other). An
    offline selector's windows pool every rank's batches of those steps (its plan is known
    on every rank); an online selector's (loss-rank) pool one rank's ``window`` batches,
    drawn together when the window starts, so the feedback lag grows by up to ``window -
    1`` batches. Feedback (``observe``), the state dict, the weights
    (``weighted_loss``), the epoch lengths and the capabilities (but ``full_batches``:
    :meth:`capabilities`) are the selector's.

    ``window=1`` on one rank leaves the batches as they are; a larger window groups more
    (less padding) and mixes less (the shorter and the longer halves of two random
    batches, at ``window=2``).

    Parameters
    ----------
    selector : Selector
        The selector whose batches are regrouped (``RandomSelector``,
        ``InfoBatchSelector``, ``LossRankSelector``, ...).
    costs : array-like
        One cost ``>= 0`` per example (its length).
    window : int, default 2
        Steps per window.
    packed : bool, default False
        Balance the ranks' packed costs ``sum(costs[batch])`` instead of the padded ones.

    See Also
    --------
    batchsel.BucketSelector : token-budget batches of similar cost over every example.

    Example
    -------
    >>> from batchsel import RandomSelector
    >>> costs = np.array([3, 90, 4, 80, 5, 70, 6, 60])
    >>> sel = CostGroupedSelector(RandomSelector(8, 2, seed=0), costs, window=4)
    >>> sorted(int(costs[b].max()) for b in sel.plan(0).batches(0))
    [4, 6, 70, 90]
    """

    def __init__(self, selector: Selector, costs: Any, *, window: int = 2, packed: bool = False) -> None:
        if not isinstance(selector, Selector):
            raise TypeError(f"selector must be a batchsel Selector, got {type(selector).__name__}")
        if isinstance(selector, CostGroupedSelector):
            raise ValueError("selector is already a CostGroupedSelector: regroup its selector with one window")
        self.selector = selector
        self.costs = check_costs(costs, selector.num_examples)
        self.window = check_int(window, "window", minimum=1)
        self.packed = bool(packed)
        super().__init__(
            selector.num_examples,
            min(selector.batch_size, selector.num_examples),
            seed=selector.seed,
            drop_last=selector.drop_last,
        )
        self.batch_size = selector.batch_size
        if hasattr(selector, "epochs"):
            self.epochs = selector.epochs

    def capabilities(self) -> SelectorCapabilities:
        """The selector's, but ``full_batches``: a window's steps come in a random order,
        so its short batch need not be the epoch's last."""
        return dataclasses.replace(self.selector.capabilities(), full_batches=False)

    def get_params(self) -> dict[str, Any]:
        return {"selector": self.selector, "costs": self.costs, "window": self.window, "packed": self.packed}

    def fingerprint(self, world_size: int = 1) -> str:
        """The selector's fingerprint with the grouping's settings and costs."""
        h = hashlib.sha256()
        digest([type(self).__name__, self.selector.fingerprint(world_size), self.costs, self.window, self.packed], h)
        return h.hexdigest()[:16]

    def world_error(self, world_size: int) -> str | None:
        return self.selector.world_error(world_size)

    def num_batches(self, world_size: int = 1, epoch: int = 0) -> int:
        """Batches per rank in ``epoch``: the selector's."""
        if self.epoch_lengths_vary:
            return self.selector.num_batches(world_size, epoch=epoch)  # type: ignore[call-arg]
        return self.selector.num_batches(world_size)

    def _num_batches(self, world: World) -> int:
        return self.selector.num_batches(world.size)

    def _check_start(self, start: int, world: World) -> int:
        return check_int(start, "start", minimum=0)  # the selector checks it against its epoch

    # -- regrouping -------------------------------------------------------------------
    def _window_rng(self, epoch: int, rank: int | None, first_step: int) -> np.random.Generator:
        # rank None: a window pooled over every rank
        keys = (0, first_step) if rank is None else (1, rank, first_step)
        return epoch_rng(self.seed, epoch, GROUP_STREAM, *keys)

    def _plan(self, epoch: int, world: World) -> EpochPlan:
        plan = self.selector.plan(epoch, world.size)
        batches, weights = self._regrouped(epoch, plan, 0, plan.num_batches)
        return EpochPlan(
            batches,
            weights,
            num_examples=self.num_examples,
            epoch=epoch,
            seed=self.seed,
            method=f"grouped {plan.method}",
            copy=False,  # the regrouped batches are views of fresh arrays: the plan keeps them
        )

    def _regrouped(
        self, epoch: int, plan: EpochPlan, first: int, stop: int
    ) -> tuple[list[list[np.ndarray]], list[list[np.ndarray]] | None]:
        """Every rank's batches of ``plan``'s steps ``first`` to ``stop - 1`` regrouped, and
        their weights (None without); ``first`` is a window's first step, ``stop`` another's
        or the epoch's end. Each window draws from its own generator, so a resume starts at
        its window; the windows are regrouped together, by one compiled call."""
        pooled = not self.online  # an offline plan is known on every rank: pool the ranks
        firsts = range(first, stop, self.window)
        spans = np.array([min(self.window, stop - f) for f in firsts], np.int64)
        weighted = plan.weights(0) is not None
        out_b: list[list[np.ndarray]] = [[] for _ in range(plan.world_size)]
        out_w: list[list[np.ndarray]] = [[] for _ in range(plan.world_size)]
        for group in [list(range(plan.world_size))] if pooled else [[r] for r in range(plan.world_size)]:
            ranks = [plan.batches(r) for r in group]
            listed = [rank[t] for t in range(first, stop) for rank in ranks]
            if not listed:
                continue
            ranks_w = [plan.weights(r) for r in group] if weighted else []
            weights = [rank[t] for t in range(first, stop) for rank in ranks_w] if weighted else None
            rngs = [self._window_rng(epoch, None if pooled else group[0], f) for f in firsts]
            examples, bounds, carried = regroup_windows(
                np.concatenate(listed),
                self.costs,
                np.array([len(b) for b in listed], np.int64),
                spans * len(group),
                len(group),
                rngs,
                self.packed,
                None if weights is None else np.concatenate(weights),
            )
            ends = bounds.tolist()
            for g, r in enumerate(group):
                mine = range(g, len(ends) - 1, len(group))
                out_b[r] = [examples[ends[i] : ends[i + 1]] for i in mine]
                if carried is not None:
                    out_w[r] = [carried[ends[i] : ends[i + 1]] for i in mine]
        return out_b, out_w if weighted else None

    def _iter_batches(self, epoch: int, world: World, start: int) -> Iterator[np.ndarray]:
        if not self.online:  # from the resume's window on, in growing runs of windows
            plan = self.selector.plan(epoch, world.size)
            first = start - start % self.window
            steps = self.window
            while first < plan.num_batches:
                stop = min(first + steps, plan.num_batches)
                batches, _ = self._regrouped(epoch, plan, first, stop)
                yield from batches[world.rank][max(start - first, 0) :]
                first, steps = stop, min(2 * steps, WINDOWS_AT_ONCE * self.window)
            return
        first = start - start % self.window
        inner = self.selector.iter_batches(epoch, world.rank, world.size, start=first)
        while True:
            window = [b for _, b in zip(range(self.window), inner)]
            if not window:
                return
            examples, bounds, _ = regroup_windows(
                np.concatenate(window),
                self.costs,
                np.array([len(b) for b in window], np.int64),
                np.array([len(window)], np.int64),
                1,
                [self._window_rng(epoch, world.rank, first)],
                self.packed,
            )
            for k in range(max(start - first, 0), len(window)):
                yield examples[bounds[k] : bounds[k + 1]]
            first += len(window)

    # -- the selector's own -------------------------------------------------------------
    def examples_drawn(self, state: dict[str, Any], epoch: int, world: World, batches: int) -> np.ndarray:
        """The online selector's :meth:`~batchsel.selectors.online.OnlineSelector.examples_drawn`."""
        inner = {k: v for k, v in state.items() if k != GROUP_COSTS_KEY}
        return self.selector.examples_drawn(inner, epoch, world, batches)  # type: ignore[attr-defined]

    def rejoin_steps(self, epoch: int, world_size: int, drawn: np.ndarray, examples: int) -> int:
        """The online selector's :meth:`~batchsel.selectors.online.OnlineSelector.rejoin_steps`."""
        return self.selector.rejoin_steps(epoch, world_size, drawn, examples)  # type: ignore[attr-defined]

    def rejoin(self, epoch: int, world: World, steps: int, drawn: np.ndarray) -> int:
        """The online selector's :meth:`~batchsel.selectors.online.OnlineSelector.rejoin`,
        at a window's first step (a window is drawn whole): up to ``window - 1`` steps more."""
        start = max(self.selector.num_batches(world.size) - steps, 0)
        start -= start % self.window
        return self.selector.rejoin(epoch, world, self.selector.num_batches(world.size) - start, drawn)  # type: ignore[attr-defined]

    def observe(self, indices: Any, losses: Any = None, logits: Any = None, embeddings: Any = None) -> None:
        """The selector's ``observe``."""
        self.selector.observe(indices, losses=losses, logits=logits, embeddings=embeddings)

    def wants_feedback(self) -> bool:
        """The selector's ``wants_feedback``."""
        return self.selector.wants_feedback()

    def weighted_loss(self, losses: Any, weights: Any) -> Any:
        """The selector's ``weighted_loss``."""
        return self.selector.weighted_loss(losses, weights)

    def state_dict(self) -> dict[str, Any]:
        """The selector's state, with a digest of the costs (the regrouping keeps no other)."""
        return {**self.selector.state_dict(), GROUP_COSTS_KEY: owned_costs_digest(self)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the selector's state, once the costs are checked to be the saved run's
        (other costs regroup the batches otherwise: ``ValueError``)."""
        check_costs_digest(state, GROUP_COSTS_KEY, self)
        self.selector.load_state_dict({k: v for k, v in state.items() if k != GROUP_COSTS_KEY})

    def __repr__(self) -> str:
        return f"CostGroupedSelector({self.selector!r}, window={self.window})"


__all__ = ["CostGroupedSelector", "GROUP_COSTS_KEY", "GROUP_STREAM"]
