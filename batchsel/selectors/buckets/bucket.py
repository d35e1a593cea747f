"""Token-budget batches of examples of similar cost, balanced across ranks:
:class:`BucketSelector`."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import numpy as np

from batchsel.core.checks import check_int, check_number
from batchsel.core.permutation import shuffle_in_place
from batchsel.core.world import World
from batchsel.plans.plan import EpochPlan
from batchsel.selectors.buckets.cost_model import CostModel
from batchsel.selectors.buckets.costs import check_costs
from batchsel.selectors.buckets.kernels import (
    NUM_OFFSETS,
    batch_costs,
    batch_longest,
    batch_padding,
    bucket_counts,
    bucket_starts,
    cost_groups,
    deal_steps,
    fill_bucket,
    order_by_cost,
    run_longest,
    segment_bounds,
    split_largest,
)
from batchsel.selectors.hashing import digest
from batchsel.selectors.offline import OfflineSelector
from batchsel.selectors.sharding import epoch_rng, shard_length

logger = logging.getLogger(__name__)

#: :class:`BucketSelector`'s ``bucket_width`` when none is given
DEFAULT_WIDTH = 1.5

#: the key of :meth:`BucketSelector.state_dict`: a digest of the costs the batches follow
COSTS_KEY = "costs_digest"


def costs_digest(costs: np.ndarray) -> str:
    """16 hex digits identifying ``costs`` (values, dtype and length), for a resume state
    to record the costs its batches were cut from.

    Example
    -------
    >>> costs_digest(np.array([1.0, 2.0])) == costs_digest(np.array([2.0, 1.0]))
    False
    """
    h = hashlib.sha256()
    digest(costs, h)
    return h.hexdigest()[:16]


def owned_costs_digest(owner: Any) -> str:
    """``costs_digest(owner.costs)``, computed once per owner: its costs are fixed once
    checked, and hashing them on every ``state_dict()`` would cost a checkpoint per step
    O(N) (a new ``costs`` array is hashed anew).

    Example
    -------
    >>> class Owner:
    ...     costs = np.array([1.0, 2.0])
    >>> owned_costs_digest(Owner()) == costs_digest(np.array([1.0, 2.0]))
    True
    """
    cached = owner.__dict__.get("_costs_digest")
    if cached is None or cached[0] is not owner.costs:
        cached = owner.__dict__["_costs_digest"] = (owner.costs, costs_digest(owner.costs))
    return cached[1]


def check_costs_digest(state: Any, key: str, owner: Any) -> None:
    """Refuse a state whose ``key`` records other costs than ``owner.costs`` (its batches
    were cut from other costs: resumed here, some examples would train twice in the epoch
    and others never). A state without ``key`` (an older version's) is accepted.

    Parameters
    ----------
    state : dict
        The saved state.
    key : str
        Where ``state`` holds the digest.
    owner : object
        The resuming selector (its ``costs``; their digest, :func:`owned_costs_digest`,
        is computed once per selector).
    """
    name = type(owner).__name__
    if not isinstance(state, dict):
        raise TypeError(f"{name} state must be a dict (what state_dict() returned), got {type(state).__name__}")
    saved = state.get(key)
    if saved is None:
        return
    mine = owned_costs_digest(owner)
    if str(saved) != mine:
        raise ValueError(
            f"the {name} state was saved with other costs (digest {saved}) than this selector's ({mine}, "
            f"{len(owner.costs)} examples): its batches would train some examples twice and others never; build the "
            f"selector from the costs of the saved run, or start the epoch afresh without loading the state"
        )


class BucketSelector(OfflineSelector, variable_batch_size=True):
    """Batches of examples of similar cost (length, duration, size) under a cost budget,
    with the batches of every step nearly equal in cost across ranks.

    Every epoch, from a generator seeded by (seed, epoch):

    1. the examples, sorted by cost (ties in a random order), are cut into buckets of
       costs within a ratio of ``bucket_width`` (largest to smallest) whose boundaries
       shift by an offset drawn from 16 (so an example near a boundary meets different
       neighbours from epoch to epoch); examples over ``max_cost`` form a bucket of their
       own and train alone, one per batch;
    2. each bucket is shuffled and cut into as few batches as its costs allow: a batch's
       padded cost ``len(batch) * max(costs[batch])`` (``packed=True``:
       ``sum(costs[batch])``) stays within ``max_cost``;
    3. the largest batches are split until the epoch has its fixed number of batches
       (the largest count any offset needs, rounded up to a multiple of the world size):
       every epoch as long as the first, so ``total_batches`` and a learning-rate
       schedule are exact;
    4. the batches, sorted by cost, are dealt in runs of ``world_size`` to the steps (the
       batches of one step cost nearly the same, so no rank waits for another), and the
       steps are shuffled (no trend of batch length over the epoch).

    Every example is in exactly one batch per epoch (no padding by repetition, nothing
    dropped). ``bucket_width`` trades padding for mixing: a bucket's padding stays under
    ``1 - 1 / bucket_width``; a wide bucket is a random sample of a wide range of costs
    (more padding, batches more mixed), a narrow one of nearly one cost. Batches differ in
    the number of examples they hold (many short ones, few long ones): sum the batch's
    losses and divide by ``batch_size`` (the mean batch size), so that every example
    weighs the same over the epoch; the batch's mean weighs an example in a batch of many
    short ones less (docs: guide/variable-length.md).

    Parameters
    ----------
    costs : array-like
        One number ``>= 0`` per example: its length in tokens, its duration, its node and
        edge count (:func:`~batchsel.selectors.buckets.costs.example_costs` reads them
        from a column or a callable).
    max_cost : float or None, default None
        The budget of one batch's cost. Give it or ``batch_size``.
    batch_size : int or None, default None
        Sets ``max_cost`` to the smallest budget whose epochs need at most ``ceil(N /
        batch_size)`` batches, and gives every epoch as many batches per rank as random
        batches of that size (``shuffle=True``): the same steps, so a learning rate and
        schedule carry over, about ``batch_size`` examples' real cost per step.
    bucket_width : float, default 1.5
        The ratio of a bucket's largest cost to its smallest (> 1): 1.1 groups most.
    max_examples : int or None, default None
        The most examples one batch holds (None: as many as the budget allows).
    packed : bool, default False
        Budget the packed cost ``sum(costs[batch])`` (for models that take packed input)
        instead of the padded cost.
    cost_model : CostModel, optional
        What a batch costs to train (:class:`~batchsel.CostModel`, fitted to your model
        with ``CostModel.calibrate``): step 4 then deals the batches sorted by that cost,
        so each step's batches cost nearly the same under it. Default: sorted by the
        longest member, then by padded tokens (steps that match in length and in tokens).
        The budget stays ``max_cost``.
    seed : int, default 0
        Seeds every epoch's buckets, shuffles and order.

    Keyword groups:
        the budget: ``max_cost``, ``batch_size``, ``max_examples``, ``packed``; the
        grouping: ``bucket_width``, ``seed``; the ranks: ``cost_model``.

    Attributes
    ----------
    costs : numpy.ndarray
        The checked costs (float64).
    max_cost_ : float
        The budget in use (``max_cost``, or the one ``batch_size`` sets).

    See Also
    --------
    batchsel.CostGroupedSelector : another selector's batches (loss-rank, InfoBatch),
        regrouped by cost.
    batchsel.pad_collate : pads a batch to its longest member and returns the mask.

    Example
    -------
    >>> costs = np.array([5, 50, 6, 48, 7, 52, 5, 49])
    >>> sel = BucketSelector(costs, max_cost=110, seed=0)
    >>> plan = sel.plan(epoch=0, world_size=2)
    >>> sorted(plan.indices().tolist()) == list(range(8))
    True
    >>> all(len(b) * costs[b].max() <= 110 for r in range(2) for b in plan.batches(r))
    True
    """

    def __init__(
        self,
        costs: Any,
        *,
        max_cost: float | None = None,
        batch_size: int | None = None,
        bucket_width: float = DEFAULT_WIDTH,
        max_examples: int | None = None,
        packed: bool = False,
        cost_model: CostModel | None = None,
        seed: int = 0,
    ) -> None:
        self.costs = check_costs(costs)
        if cost_model is not None and not isinstance(cost_model, CostModel):
            raise TypeError(f"cost_model must be a CostModel, got {type(cost_model).__name__}")
        if cost_model is not None and packed:
            raise ValueError(
                "cost_model prices batches padded to their longest example, and packed=True budgets the packed "
                "cost sum(costs[batch]): leave cost_model out, or packed False"
            )
        self.cost_model = cost_model
        n = len(self.costs)
        if (max_cost is None) == (batch_size is None):
            raise ValueError(
                f"give max_cost (the budget of a batch's cost) or batch_size (as many batches as random "
                f"batches of that size), not {'both' if max_cost is not None else 'neither'}"
            )
        self.bucket_width = check_number(bucket_width, "bucket_width", 1.0)
        if self.bucket_width <= 1:
            raise ValueError(
                f"bucket_width must be > 1 (a bucket's largest cost over its smallest), got {bucket_width!r}"
            )
        self.max_examples = None if max_examples is None else check_int(max_examples, "max_examples", minimum=1)
        self.packed = bool(packed)
        self.max_cost = max_cost
        self.budget_batch_size = batch_size
        # the distinct costs and each example's among them: an epoch's sort by cost is then
        # a counting pass (order_by_cost)
        groups = cost_groups(self.costs)
        distinct, self._cost_group, self._sorted_costs = groups.distinct, groups.group, groups.sorted_costs
        self._cost_groups = len(distinct)
        if self._cost_groups < 2**31:  # half the memory to read at random each epoch
            self._cost_group = self._cost_group.astype(np.int32)
        self._cumulative = np.concatenate([[0.0], np.cumsum(self._sorted_costs)])
        # each offset's bucket boundaries (the budget adds one): all an epoch's count needs
        self._starts = [
            bucket_starts(self._sorted_costs, self.bucket_width, j / NUM_OFFSETS, (distinct, groups.firsts))
            for j in range(NUM_OFFSETS)
        ]
        if max_cost is not None:
            self.max_cost_ = check_number(max_cost, "max_cost", 0.0)
            if self.max_cost_ <= 0:
                raise ValueError(f"max_cost must be > 0, got {max_cost!r}")
        else:
            steps = -(-n // check_int(batch_size, "batch_size", minimum=1, maximum=n))
            self.max_cost_ = self._budget_for(steps)
        positive = self.costs[self.costs > 0]
        widest = (
            n if positive.size == 0 or self.max_cost_ / n >= positive.min() else int(self.max_cost_ // positive.min())
        )
        super().__init__(n, min(max(widest, 1), self.max_examples or n), seed=seed)
        over = int(np.count_nonzero(self.costs > self.max_cost_))
        if over:
            logger.warning(
                "%d of %d examples cost more than max_cost=%g: each trains alone in its batch",
                over,
                n,
                self.max_cost_,
            )
        # every offset's batch count: an epoch has the largest, so all epochs are as long
        self._offset_counts = [int(self._bucket_counts(j, self.max_cost_).sum()) for j in range(NUM_OFFSETS)]

    def _budget_for(self, steps: int) -> float:
        """The smallest budget whose epochs need at most ``steps`` batches (bisection; the
        count falls as the budget grows), or the one that fits every bucket in a batch."""
        top = float(self._sorted_costs[-1])
        if top == 0:
            return 1.0
        # high is finite: check_costs refuses costs whose largest times their number overflows
        low, high = max(top / len(self.costs) / 4, np.nextafter(0.0, 1.0)), top * len(self.costs)

        def fits(budget: float) -> bool:
            return max(int(self._bucket_counts(j, budget).sum()) for j in range(NUM_OFFSETS)) <= steps

        if not fits(high):
            logger.warning(
                "bucket_width=%g cuts the costs into more buckets than the %d steps of batch_size=%d: "
                "each bucket is one batch; a wider bucket_width keeps the steps",
                self.bucket_width,
                steps,
                self.budget_batch_size,
            )
            return high
        for _ in range(64):
            product = low * high
            # costs near float64's limits: low * high overflows (or underflows), the
            # geometric mean of the square roots does not
            middle = float(np.sqrt(product) if 0 < product < np.inf else np.sqrt(low) * np.sqrt(high))
            low, high = (low, middle) if fits(middle) else (middle, high)
        return high

    def state_dict(self) -> dict[str, Any]:
        """A digest of the costs (plain types: ``torch.load(weights_only=True)`` reads
        it): the plan depends on nothing else that a resume state could miss.

        Example
        -------
        >>> sel = BucketSelector([3, 5, 2], max_cost=8)
        >>> BucketSelector([3, 5, 2], max_cost=8).load_state_dict(sel.state_dict())
        >>> BucketSelector([5, 3, 2], max_cost=8).load_state_dict(sel.state_dict())
        Traceback (most recent call last):
        ...
        ValueError: the BucketSelector state was saved with other costs ...
        """
        return {COSTS_KEY: owned_costs_digest(self)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Check that ``state`` (:meth:`state_dict`'s) was saved with these costs.

        Raises
        ------
        ValueError
            The state records other costs (resumed, its epoch's batches would train some
            examples twice and others never). A state without the digest (an earlier
            version's) is accepted.
        """
        check_costs_digest(state, COSTS_KEY, self)

    def get_params(self) -> dict[str, Any]:
        return {
            "costs": self.costs,
            "max_cost": self.max_cost,
            "batch_size": self.budget_batch_size,
            "bucket_width": self.bucket_width,
            "max_examples": self.max_examples,
            "packed": self.packed,
            "cost_model": self.cost_model,
            "seed": self.seed,
        }

    def _bounds(self, offset: int, budget: float) -> np.ndarray:
        return segment_bounds(
            self._sorted_costs, self.bucket_width, offset / NUM_OFFSETS, budget, starts=self._starts[offset]
        )

    def _bucket_counts(self, offset: int, budget: float) -> np.ndarray:
        cap = self.max_examples or len(self.costs)
        return bucket_counts(
            self._sorted_costs, self._bounds(offset, budget), budget, cap, self.packed, cumulative=self._cumulative
        )

    def _batches_per_rank(self, world_size: int) -> int:
        per_rank = -(-max(self._offset_counts) // world_size)
        if self.budget_batch_size is not None:  # as many as random batches of that size
            per_rank = max(per_rank, -(-shard_length(len(self.costs), world_size, False) // self.budget_batch_size))
        return per_rank

    def world_error(self, world_size: int) -> str | None:
        """As many batches on every rank, each with at least one example."""
        needed = self._batches_per_rank(world_size) * world_size
        if needed > self.num_examples:
            return (
                f"{self.num_examples} examples cannot fill {world_size} ranks with "
                f"{self._batches_per_rank(world_size)} batches each: use fewer ranks or a larger max_cost"
            )
        return None

    def _num_batches(self, world: World) -> int:
        return self._batches_per_rank(world.size)

    def _plan(self, epoch: int, world: World) -> EpochPlan:
        rng = epoch_rng(self.seed, epoch)
        order = order_by_cost(self._cost_group, self._cost_groups, rng.random(self.num_examples))
        offset = int(rng.integers(NUM_OFFSETS))
        bounds = self._bounds(offset, self.max_cost_)
        counts = self._bucket_counts(offset, self.max_cost_)
        cap = self.max_examples or self.num_examples
        batches: list[np.ndarray] = []
        for begin, end, count in zip(bounds[:-1], bounds[1:], counts):
            members = order[begin:end]
            shuffle_in_place(rng, members)  # rng.permutation's draws, in order's own memory
            top = self._sorted_costs[end - 1] if end > begin else None  # its largest cost: the last by cost
            batches += fill_bucket(members, self.costs, int(count), self.max_cost_, cap, self.packed, top)
        batches = split_largest(batches, self._batches_per_rank(world.size) * world.size)
        # the batches are consecutive runs of order (buckets cut into runs, runs into halves)
        sizes = np.fromiter((len(b) for b in batches), np.int64, len(batches))
        longest = None if self.packed else run_longest(order, sizes, self.costs)
        if self.cost_model is None:
            steps = deal_steps(batch_costs(batches, self.costs, self.packed, longest), world.size, rng, longest)
        else:  # the model's cost is the one to match: it sorts alone
            steps = deal_steps(self._batch_costs(batches, longest), world.size, rng)
        per_rank = [[batches[i] for i in steps[:, r]] for r in range(world.size)]
        # (the batches are views of this epoch's fresh bucket arrays: the plan keeps them)
        return EpochPlan(
            per_rank, num_examples=self.num_examples, epoch=epoch, seed=self.seed, method="buckets", copy=False
        )

    def _batch_costs(self, batches: list[np.ndarray], longest: np.ndarray | None = None) -> np.ndarray:
        """Each batch's cost: under ``cost_model``, else padded (or packed) tokens."""
        if self.cost_model is None:
            return batch_costs(batches, self.costs, self.packed)
        if longest is None:
            longest = batch_longest(batches, self.costs)
        sizes = np.fromiter((len(b) for b in batches), np.float64, len(batches))
        return np.asarray(self.cost_model.batch_cost(sizes, longest), dtype=np.float64)

    def step_costs(self, epoch: int = 0, world_size: int = 1) -> np.ndarray:
        """Every step's batch costs (padded, or packed with ``packed=True``; under
        ``cost_model`` where one is given).

        Parameters
        ----------
        epoch : int, default 0
            The epoch.
        world_size : int, default 1
            The ranks.

        Returns
        -------
        numpy.ndarray
            ``(steps, world_size)`` float64: the cost of each rank's batch at each step.

        Example
        -------
        >>> sel = BucketSelector(np.arange(1, 41), batch_size=4)
        >>> costs = sel.step_costs(0, world_size=2)
        >>> bool((costs.max(axis=1) <= sel.max_cost_).all())
        True
        """
        plan = self.plan(epoch, world_size)
        return np.stack([self._batch_costs(plan.batches(r)) for r in range(world_size)], axis=1)

    def padding_share(self, epoch: int = 0, world_size: int = 1) -> float:
        """The share of padded cost that is padding in ``epoch``:
        ``1 - sum(costs) / sum(len(b) * max(costs[b]))`` over every rank's batches.

        Example
        -------
        >>> BucketSelector(np.full(10, 3.0), batch_size=2).padding_share()
        0.0
        """
        plan = self.plan(epoch, world_size)
        batches = [b for r in range(world_size) for b in plan.batches(r)]
        padded = float(batch_costs(batches, self.costs, False).sum())
        # the padding summed per position (>= 0 each), not padded - real: no -0.0 from rounding
        return float(batch_padding(batches, self.costs).sum()) / padded if padded > 0 else 0.0

    def __repr__(self) -> str:
        return (
            f"BucketSelector(num_examples={self.num_examples}, max_cost={self.max_cost_:g}, "
            f"bucket_width={self.bucket_width:g}, seed={self.seed})"
        )


__all__ = ["BucketSelector", "COSTS_KEY", "DEFAULT_WIDTH", "check_costs_digest", "costs_digest"]
