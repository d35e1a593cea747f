"""Random steps, balanced ranks: :class:`StepBalancedSelector` keeps each optimizer step's
examples those of another selector's global batch (every rank's batch of that step) and
splits them over the ranks and their micro-batches so that every rank's share costs nearly
the same."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Iterator

import numpy as np

from batchsel.core.checks import check_int
from batchsel.core.world import World
from batchsel.plans.plan import EpochPlan
from batchsel.selectors.buckets.bucket import check_costs_digest, owned_costs_digest
from batchsel.selectors.buckets.cost_model import CostModel
from batchsel.selectors.buckets.costs import check_costs
from batchsel.selectors.buckets.kernels import batch_longest
from batchsel.selectors.buckets.step_kernels import deal_micro_batches, improve_split, split_ranks_first, split_step
from batchsel.selectors.capabilities import SelectorCapabilities
from batchsel.selectors.hashing import digest
from batchsel.selectors.selector import Selector, weighted_sum
from batchsel.selectors.sharding import epoch_rng

#: the generator stream of the split (ties in length, the ranks' labels), apart from the selector's
STEP_STREAM = 0x5B5A

#: the key :meth:`StepBalancedSelector.state_dict` adds to the selector's state
STEP_COSTS_KEY = "step_balanced_costs_digest"


class StepBalancedSelector(Selector):
    """Every optimizer step a random draw, every rank equally busy.

    Step ``t``'s examples are those of ``selector``'s step ``t`` over all ranks (its global
    batch of about ``world_size * batch_size``: random batches, or an offline selection:
    InfoBatch, a coreset), as with the selector alone, so the steps are as random as its
    batches. They are sorted by cost, cut into ``world_size * accumulation`` contiguous
    micro-batches of nearly equal cost under ``cost_model`` (padding to each micro-batch's
    longest), and dealt to the ranks, ``accumulation`` each, the costliest first to the
    least loaded rank. Each rank trains its ``accumulation`` micro-batches and then the
    optimizer steps.

    The plan's weights make the step's gradient the global batch's mean, whatever the
    micro-batches' sizes: each example weighs ``world_size / G`` (``G`` the step's
    examples; times the selector's own weight), and :meth:`weighted_loss` is the *sum* of
    weight times loss, whose gradients DDP averages over the ranks and the loop adds over
    the micro-batches. So use ``SelectionBatchSampler(..., weighted=True)`` and
    ``loss = selector.weighted_loss(losses, w)`` with no scaling of one's own.

    Parameters
    ----------
    selector : Selector
        The offline selector whose steps are split (``RandomSelector``,
        ``InfoBatchSelector``, ``CoresetSelector``, ...): its plan must be known on every
        rank. An online selector (loss-rank) is refused: use
        :class:`~batchsel.CostGroupedSelector`.
    costs : array-like
        One cost ``>= 0`` per example (its length in tokens).
    accumulation : int, default 1
        Micro-batches per rank and step (gradient accumulation): more of them pad less
        and balance the ranks better.
    cost_model : CostModel, optional
        What a micro-batch costs; default padded tokens (:class:`CostModel`).

    Raises
    ------
    ValueError
        An online selector; costs of another length, negative or not finite; a step with
        fewer examples than ``world_size * accumulation`` micro-batches (when its plan is
        made, naming the step).

    See Also
    --------
    batchsel.BucketSelector : the epoch grouped by length (throughput over randomness).
    batchsel.CostGroupedSelector : regrouping by cost within windows of steps.

    Example
    -------
    >>> from batchsel import RandomSelector
    >>> lengths = np.random.default_rng(0).lognormal(4, 1, 64).round() + 1
    >>> sel = StepBalancedSelector(RandomSelector(64, 8, seed=0), lengths, accumulation=2)
    >>> plan = sel.plan(0, world_size=2)
    >>> [len(plan.batches(r)) for r in range(2)], sel.num_batches(world_size=2)
    ([8, 8], 8)
    >>> step0 = np.concatenate([plan.batches(r)[t] for r in range(2) for t in (0, 1)])
    >>> inner = RandomSelector(64, 8, seed=0).plan(0, 2)
    >>> sorted(step0.tolist()) == sorted(np.concatenate([inner.batches(r)[0] for r in range(2)]).tolist())
    True
    """

    def __init__(
        self, selector: Selector, costs: Any, *, accumulation: int = 1, cost_model: CostModel | None = None
    ) -> None:
        if not isinstance(selector, Selector):
            raise TypeError(f"selector must be a batchsel Selector, got {type(selector).__name__}")
        if selector.online:
            raise ValueError(
                f"{type(selector).__name__} draws its batches as training goes, so no rank knows the others' "
                "batches of a step to split: use CostGroupedSelector for an online selector"
            )
        if cost_model is not None and not isinstance(cost_model, CostModel):
            raise TypeError(f"cost_model must be a CostModel, got {type(cost_model).__name__}")
        self.selector = selector
        self.costs = check_costs(costs, selector.num_examples)
        self.accumulation = check_int(accumulation, "accumulation", minimum=1)
        self.cost_model = CostModel() if cost_model is None else cost_model
        super().__init__(selector.num_examples, selector.batch_size, seed=selector.seed, drop_last=selector.drop_last)
        if hasattr(selector, "epochs"):
            self.epochs = selector.epochs

    def capabilities(self) -> SelectorCapabilities:
        """The selector's, with micro-batches of varying sizes that carry weights (the
        step's normalization), none of them full, ``accumulation`` of them per rank and
        optimizer step; no elastic resume (a step's micro-batches are cut for the ranks that
        train them, their weights for that number of ranks)."""
        return dataclasses.replace(
            self.selector.capabilities(),
            variable_batch_size=True,
            weighted_plans=True,
            full_batches=False,
            elastic_resume=False,
            micro_batches_per_step=self.accumulation,
        )

    def get_params(self) -> dict[str, Any]:
        return {
            "selector": self.selector,
            "costs": self.costs,
            "accumulation": self.accumulation,
            "cost_model": self.cost_model,
        }

    def fingerprint(self, world_size: int = 1) -> str:
        """The selector's fingerprint with the split's settings and costs."""
        h = hashlib.sha256()
        model = dataclasses.astuple(self.cost_model)
        if self.cost_model.per_length == 0:  # the fingerprint of a model without it, as before the term
            model = model[:3]
        parts = [type(self).__name__, self.selector.fingerprint(world_size), self.costs, self.accumulation, model]
        digest(parts, h)
        return h.hexdigest()[:16]

    def world_error(self, world_size: int) -> str | None:
        return self.selector.world_error(world_size)

    def num_batches(self, world_size: int = 1, epoch: int = 0) -> int:
        """Micro-batches per rank in ``epoch``: the selector's steps times ``accumulation``."""
        if self.epoch_lengths_vary:
            return self.accumulation * self.selector.num_batches(world_size, epoch=epoch)  # type: ignore[call-arg]
        return self.accumulation * self.selector.num_batches(world_size)

    def _num_batches(self, world: World) -> int:
        return self.accumulation * self.selector.num_batches(world.size)

    # -- the split ------------------------------------------------------------------------
    def _plan(self, epoch: int, world: World) -> EpochPlan:
        plan = self.selector.plan(epoch, world.size)
        ranks = range(world.size)
        weighted = plan.weights(0) is not None
        out_b: list[list[np.ndarray]] = [[] for _ in ranks]
        out_w: list[list[np.ndarray]] = [[] for _ in ranks]
        model = self.cost_model
        for t in range(plan.num_batches):
            step = np.concatenate([plan.batches(r)[t] for r in ranks])
            inner_w = np.concatenate([plan.weights(r)[t] for r in ranks]) if weighted else None
            for r, members, weights in self._split(epoch, t, step, inner_w, world.size):
                out_b[r].extend(members)
                out_w[r].extend(weights)
        return EpochPlan(
            out_b,
            out_w,
            num_examples=self.num_examples,
            epoch=epoch,
            seed=self.seed,
            method=f"step-balanced {plan.method} x{self.accumulation}, {model}",
        )

    def _split(
        self, epoch: int, t: int, step: np.ndarray, inner_w: np.ndarray | None, world_size: int
    ) -> Iterator[tuple[int, list[np.ndarray], list[np.ndarray]]]:
        """Step ``t``'s examples as each rank's ``accumulation`` micro-batches and weights."""
        groups = world_size * self.accumulation
        if len(step) < groups:
            raise ValueError(
                f"step {t} of epoch {epoch} holds {len(step)} examples, fewer than world_size x accumulation = "
                f"{world_size} x {self.accumulation} micro-batches: lower accumulation, or drop the short last "
                "step (the selector's drop_last=True)"
            )
        rng = epoch_rng(self.seed, epoch, STEP_STREAM, t)
        lengths = self.costs[step]
        order = np.lexsort((rng.random(len(step)), -lengths))  # longest first, ties in a random order
        sorted_lengths = lengths[order]
        perm, starts, ranks = self._best_split(sorted_lengths, world_size)
        bounds = np.append(starts, len(step))
        rank_of = rng.permutation(world_size)[ranks]
        scale = world_size / len(step)
        for r in range(world_size):
            picks = [order[perm[bounds[g] : bounds[g + 1]]] for g in np.flatnonzero(rank_of == r)]
            members = [step[p] for p in picks]
            if inner_w is None:
                weights = [np.full(len(p), scale) for p in picks]
            else:
                weights = [scale * inner_w[p] for p in picks]
            yield r, members, weights

    def _best_split(self, sorted_lengths: np.ndarray, world_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Of two ways to split a step, the one whose costliest rank costs less: micro-batches
        of nearly equal cost dealt to the ranks, or the ranks' shares first, each cut into
        micro-batches (better where the longest example alone outweighs a micro-batch's
        share: a quadratic cost on long-tailed lengths). Returns the positions (into the
        step sorted longest first) in micro-batch order, the micro-batches' starts in it
        and their ranks."""
        model, per_rank = self.cost_model, self.accumulation
        terms = (model.per_token, model.per_token_squared, model.per_batch, model.per_length)
        perm = np.arange(len(sorted_lengths))
        starts = split_step(sorted_lengths, world_size * per_rank, *terms)
        costs = self._micro_costs(sorted_lengths, perm, starts)
        ranks = deal_micro_batches(costs, world_size, per_rank)
        if per_rank > 1:
            other_perm, other_starts, other_ranks = split_ranks_first(sorted_lengths, world_size, per_rank, *terms)
            if len(other_starts):
                other_costs = self._micro_costs(sorted_lengths, other_perm, other_starts)
                if np.bincount(other_ranks, other_costs).max() < np.bincount(ranks, costs).max():
                    perm, starts, ranks = other_perm, other_starts, other_ranks
        if world_size > 1:
            perm, starts = improve_split(sorted_lengths, perm, starts, ranks, world_size, *terms)
        return perm, starts, ranks

    def _micro_costs(self, sorted_lengths: np.ndarray, perm: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """The cost of each micro-batch: ``perm[starts[g]:starts[g + 1]]``, longest first."""
        return self.cost_model.batch_cost(np.diff(np.append(starts, len(perm))), sorted_lengths[perm[starts]])

    def step_costs(self, epoch: int = 0, world_size: int = 1) -> np.ndarray:
        """Each rank's cost at each optimizer step (its micro-batches' together), under the
        cost model.

        Parameters
        ----------
        epoch : int, default 0
            The epoch.
        world_size : int, default 1
            The ranks.

        Returns
        -------
        numpy.ndarray
            ``(steps, world_size)`` float64.
        """
        plan = self.plan(epoch, world_size)
        per_rank = []
        for r in range(world_size):
            batches = plan.batches(r)
            micro = self.cost_model.batch_cost(np.array([len(b) for b in batches]), batch_longest(batches, self.costs))
            per_rank.append(micro.reshape(-1, self.accumulation).sum(axis=1))  # a step's micro-batches together
        return np.stack(per_rank, axis=1)

    # -- the selector's own -------------------------------------------------------------
    def observe(self, indices: Any, losses: Any = None, logits: Any = None, embeddings: Any = None) -> None:
        """The selector's ``observe``."""
        self.selector.observe(indices, losses=losses, logits=logits, embeddings=embeddings)

    def weighted_loss(self, losses: Any, weights: Any) -> Any:
        """A micro-batch's training loss: the sum of weight times loss (the weights carry
        the step's normalization, ``world_size / G``, times the selector's own)."""
        return weighted_sum(losses, weights)

    def state_dict(self) -> dict[str, Any]:
        """The selector's state, with a digest of the costs."""
        return {**self.selector.state_dict(), STEP_COSTS_KEY: owned_costs_digest(self)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the selector's state, once the costs are checked to be the saved run's."""
        check_costs_digest(state, STEP_COSTS_KEY, self)
        self.selector.load_state_dict({k: v for k, v in state.items() if k != STEP_COSTS_KEY})

    def __repr__(self) -> str:
        return f"StepBalancedSelector({self.selector!r}, accumulation={self.accumulation}, {self.cost_model})"


__all__ = ["StepBalancedSelector"]
