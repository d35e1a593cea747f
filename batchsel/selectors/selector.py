"""The selector interface: :class:`Selector`, the base of every kind of selector.

Its public entry points (:meth:`Selector.plan`, ``iter_batches``, ``num_batches``,
``rank_shards``) check their ``(rank, world size)`` once, into a
:class:`~batchsel.core.world.World` (:meth:`Selector.world`), and hand that on to the
underscored forms a kind implements (``_plan(epoch, world)``, ...), which trust it. Worker
assignment is shared: ``"random"`` is DistributedSampler's split of a fresh permutation
every epoch, ``"submodular"`` gives every rank a GreedMax shard
(:mod:`batchsel.submodular.partition`).
"""

from __future__ import annotations

import hashlib
import inspect
import warnings
from typing import Any, Iterator

import numpy as np

from batchsel.core.checks import check_int, check_seed
from batchsel.core.world import World
from batchsel.plans.plan import EpochPlan
from batchsel.selectors.capabilities import PARTITIONS, Capabilities
from batchsel.selectors.hashing import digest
from batchsel.selectors.sharding import epoch_order, epoch_rng, epoch_shards, even_split


def weighted_sum(losses: Any, weights: Any) -> Any:
    """``sum(losses * weights)``, as one dot product where both are vectors of one dtype
    (torch tensors or numpy arrays): on a short step the multiply's extra op, forward and
    backward, costs as much as a selector's work per step.

    Parameters
    ----------
    losses, weights : torch.Tensor or numpy.ndarray
        Per-example losses and their weights.

    Returns
    -------
    scalar of the inputs' kind
        The weighted sum.

    Example
    -------
    >>> float(weighted_sum(np.array([1.0, 3.0]), np.array([1.0, 2.0])))
    7.0
    """
    one_dtype = getattr(losses, "dtype", None) == getattr(weights, "dtype", 0)
    if one_dtype and getattr(losses, "ndim", 0) == 1 and getattr(weights, "ndim", 0) == 1:
        return losses.dot(weights)
    return (losses * weights).sum()


class Selector(Capabilities):
    """Base class of all selectors.

    A selector of one's own derives from a kind:
    :class:`~batchsel.selectors.offline.OfflineSelector` (implements ``_plan(epoch,
    world)``: the whole epoch at once), :class:`~batchsel.selectors.online.OnlineSelector`
    (draws batch after batch from the feedback) or
    :class:`~batchsel.selectors.epoch_feedback.EpochFeedbackSelector` (plans each epoch
    from the feedback of the ones before). Deriving from ``Selector`` itself and
    overriding the public :meth:`plan` or :meth:`iter_batches` works as well. What it
    can do and needs from the loop is :meth:`capabilities`
    (:class:`~batchsel.selectors.capabilities.SelectorCapabilities`), declared once as
    keywords of its class statement (``class Mine(OfflineSelector, uses_feedback=True)``).

    Parameters
    ----------
    num_examples : int
        N, the examples of the data set.
    batch_size : int
        B, at most N.
    seed : int, default 0
        Seeds every random choice.
    drop_last : bool, default False
        DistributedSampler's: ``False`` pads ranks to equal size by repeating examples,
        ``True`` drops the tail.
    partition : str, default "random"
        How examples are assigned to ranks: ``"random"`` or, for selectors with
        embeddings, ``"submodular"``.

    Example
    -------
    >>> Selector(10, 2).world(4, rank=3)
    World(rank=3, size=4)
    """

    @property
    def epoch_examples(self) -> int:
        """How many examples an epoch's plan shards over the ranks: ``num_examples`` (a
        coreset: its size). With :attr:`full_batches` it fixes the short last batch."""
        return self.num_examples

    def __init__(
        self, num_examples: int, batch_size: int, *, seed: int = 0, drop_last: bool = False, partition: str = "random"
    ) -> None:
        self.num_examples = check_int(num_examples, "num_examples", minimum=1)
        self.batch_size = check_int(batch_size, "batch_size", minimum=1)
        if self.batch_size > self.num_examples:
            raise ValueError(f"batch_size must be <= the number of examples ({self.num_examples}), got {batch_size}")
        self.seed = check_seed(seed)
        self.drop_last = bool(drop_last)
        if partition not in PARTITIONS:
            raise ValueError(f"partition must be one of {PARTITIONS}, got {partition!r}")
        supported = type(self).partitions  # the class's: checked before a subclass sets its data
        if partition not in supported:
            raise ValueError(f"{type(self).__name__} supports partition in {supported}, got {partition!r}")
        self.partition = partition
        # world_size -> shard id of every example (GreedMax); depends only on data and seed
        self._shard_of: dict[int, np.ndarray] = {}

    # -- the world: checked here, once per entry point --------------------------------
    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "check_world" in cls.__dict__:  # the extension point before 0.2: now a silent no-op
            warnings.warn(
                f"{cls.__name__} overrides check_world, which plan() and iter_batches() no longer "
                "call: return the reason a world size does not fit from world_error(world_size) instead",
                UserWarning,
                stacklevel=2,
            )

    def world(self, world_size: int = 1, *, rank: int | None = None) -> World:
        """The checked :class:`~batchsel.core.world.World` of ``rank`` (0 when None) of
        ``world_size`` ranks: a valid range, and this selector's own limits
        (:meth:`world_error`). The one place a world is checked: every public entry point
        calls it once and hands the result on. Raises as :meth:`check_world`. ``rank`` is
        keyword-only: ``World`` takes ``(rank, size)``, this the size first, and two ints
        in the wrong order would be another world without a word."""
        world = World(0, world_size)
        error = self.world_error(world.size)
        if error is not None:
            raise ValueError(error)
        return world if rank is None else World(rank, world.size)  # the size first: its range is checked first

    def world_error(self, world_size: int) -> str | None:
        """Why this selector cannot plan for ``world_size`` ranks (a count >= 1), or None:
        the hook where a selector declares its limits (an example, a batch, a coreset
        member per rank). Here: at most one rank per example.

        >>> Selector(10, 2).world_error(11)
        'world_size must be <= the number of examples (10), got 11'
        """
        if world_size > self.num_examples:
            return f"world_size must be <= the number of examples ({self.num_examples}), got {world_size}"
        return None

    def check_world(self, world_size: int, rank: int | None = None) -> None:
        """Raise ``ValueError`` unless this selector can plan for ``world_size`` ranks
        (and ``rank`` is one of them): every rank needs at least one example (subclasses
        add their own limits, e.g. one batch or one coreset member per rank:
        :meth:`world_error`); ``TypeError`` for a value that is not an integer.

        >>> Selector(10, 2).check_world(4, rank=3)
        >>> Selector(10, 2).check_world(11)
        Traceback (most recent call last):
        ...
        ValueError: world_size must be <= the number of examples (10), got 11
        """
        self.world(world_size, rank=rank)

    def _check_start(self, start: int, world: World) -> int:
        start = check_int(start, "start", minimum=0)
        total = self._num_batches(world)
        if start > total:
            raise ValueError(f"start must be <= the number of batches per rank ({total}), got {start}")
        return start

    def _check_epoch(self, epoch: int) -> int:
        """An entry point's epoch, checked as the kind checks it (here: taken as given)."""
        return epoch

    # -- worker assignment ------------------------------------------------------------
    def _partition_data(self) -> Any:
        """Embeddings or a similarity graph for ``partition="submodular"``."""
        raise ValueError(f"{type(self).__name__} has no embeddings or graph for partition='submodular'")

    def shard_assignment(self, world_size: int) -> np.ndarray:
        """``partition="submodular"``: the shard (rank) of every example, from GreedMax;
        computed once per world size, the same on every rank."""
        return self._shard_owner(self.world(world_size))

    def _shard_owner(self, world: World) -> np.ndarray:
        if world.size not in self._shard_of:
            from batchsel.submodular.partition import shard_of_each, submodular_partition

            parts = submodular_partition(self._partition_data(), world.size, seed=self.seed)
            self._shard_of[world.size] = shard_of_each(parts, self.num_examples)
        return self._shard_of[world.size]

    def rank_shards(self, epoch: int, world_size: int = 1) -> list[np.ndarray]:
        """Every rank's examples for ``epoch``, in a random order, all of the same length
        (:func:`~batchsel.selectors.sharding.epoch_shards`): ``"random"`` is
        DistributedSampler's split of a fresh permutation; ``"submodular"`` shuffles each
        GreedMax shard and pads it by repeating its own examples (or drops its extra
        example) to the common length."""
        return self._rank_shards(epoch, self.world(world_size))

    def _rank_shards(self, epoch: int, world: World) -> list[np.ndarray]:
        # the last epoch's split is kept (read-only): an epoch's runs, a resume's restore
        # and an elastic rejoin each ask for it, and a split of N costs a permutation of N
        rng = epoch_rng(self.seed, epoch)
        if self.partition != "random":  # GreedMax shards: the owners may be loaded from a state
            return epoch_shards(self.num_examples, world.size, self.drop_last, rng, self._shard_owner(world))
        key = (epoch, world.size, self.drop_last, self.seed, self.num_examples)
        cached = self.__dict__.get("_shards_cache")
        if cached is not None and cached[0] == key:
            return list(cached[1])
        # the epoch's permutation is the same on every number of ranks: an elastic resume
        # splits it for the old world and the new one, drawing it once
        order_key = (epoch, self.seed, self.num_examples)
        order = self.__dict__.get("_order_cache")
        if order is None or order[0] != order_key:
            order = (order_key, epoch_order(self.num_examples, rng))
            order[1].setflags(write=False)
            self.__dict__["_order_cache"] = order
        shards = even_split(order[1], world.size, self.drop_last)  # epoch_shards' split of that order
        for shard in shards:
            shard.setflags(write=False)
        self.__dict__["_shards_cache"] = (key, shards)
        return list(shards)

    def __getstate__(self) -> dict[str, Any]:
        # a pickled copy (a DataLoader worker's, a checkpoint's) leaves the cached split behind
        state = self.__dict__.copy()
        state.pop("_shards_cache", None)
        state.pop("_order_cache", None)
        return state

    # -- the interface: the public forms check, the underscored ones trust ----------------
    def plan(self, epoch: int = 0, world_size: int = 1) -> EpochPlan:
        """Every rank's batches for ``epoch`` (online selectors: as drawn with the scores
        known now)."""
        epoch = self._check_epoch(epoch)
        return self._plan(epoch, self.world(world_size))

    def _plan(self, epoch: int, world: World) -> EpochPlan:
        # for a subclass that defines only the public iter_batches: every rank's batches
        per_rank = [list(self.iter_batches(epoch, r, world.size)) for r in range(world.size)]
        return EpochPlan.from_rank_batches(
            per_rank,
            drop_last=self.drop_last,
            num_examples=self.num_examples,
            epoch=epoch,
            seed=self.seed,
            method=type(self).__name__,
        )

    def iter_batches(self, epoch: int, rank: int = 0, world_size: int = 1, start: int = 0) -> Iterator[np.ndarray]:
        """This rank's batches for ``epoch``, one at a time, from batch number ``start`` on."""
        epoch = self._check_epoch(epoch)
        world = self.world(world_size, rank=rank)
        start = self._check_start(start, world)
        yield from self._iter_batches(epoch, world, start)

    def _iter_batches(self, epoch: int, world: World, start: int) -> Iterator[np.ndarray]:
        # for a subclass that defines only the public plan: this rank's part of it
        yield from self.plan(epoch, world.size).batches(world.rank)[start:]

    def num_batches(self, world_size: int = 1) -> int:
        """Batches per rank per epoch (the same on every rank and every epoch)."""
        return self._num_batches(self.world(world_size))

    def _num_batches(self, world: World) -> int:
        return self.plan(0, world.size).num_batches

    def observe(self, indices: Any, losses: Any = None, logits: Any = None, embeddings: Any = None) -> None:
        """Feedback from the training loop; offline selectors ignore it."""

    def wants_feedback(self) -> bool:
        """Whether ``observe`` still changes later batches, for a selector that uses
        feedback (``capabilities().uses_feedback``): True until it says otherwise, as
        :class:`~batchsel.AutoSelector` does once it has fallen back to random batches for
        good. While it is False a sampler skips the feedback path and its all-gathers;
        every rank's selector saw the same feedback, so every rank agrees.

        >>> Selector(4, 2).wants_feedback()
        True
        """
        return True

    def weighted_loss(self, losses: Any, weights: Any) -> Any:
        """A batch's training loss from its per-example ``losses`` and the plan's
        ``weights`` (torch tensors or numpy arrays): the mean of their products, so
        weights of expectation 1 (:class:`~batchsel.InfoBatchSelector`) keep the expected
        gradient of the full epoch. Selectors with :attr:`weighted_plans` define it.

        >>> import numpy as np
        >>> float(Selector(4, 2).weighted_loss(np.array([1.0, 3.0]), np.array([1.0, 2.0])))
        3.5
        """
        return weighted_sum(losses, weights) * (1.0 / max(len(losses), 1))

    # -- identity ---------------------------------------------------------------------
    @classmethod
    def _param_names(cls) -> list[str]:
        """The constructor's named parameters; a constructor that passes ``**kwargs`` on
        contributes those of the next ``__init__`` up the class hierarchy."""
        names: list[str] = []
        for klass in cls.__mro__:
            init = klass.__dict__.get("__init__")
            if init is None:
                continue
            params = list(inspect.signature(init).parameters.values())[1:]
            names += [p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name not in names]
            if klass is Selector or not any(p.kind == p.VAR_KEYWORD for p in params):
                break
        return names

    def get_params(self) -> dict[str, Any]:
        """The constructor's parameters with their current values (scikit-learn's
        convention: each is stored as the attribute of the same name), so that
        ``type(s)(**s.get_params())`` builds an equivalent selector. Data arguments
        (embeddings, labels, graph) are the arrays the selector holds now (after
        ``observe(embeddings=...)`` refreshes, the refreshed ones); settings resolved at
        construction hold the resolved value (SMDL's ``pool_size=None`` gives ``8 * B``).

        A subclass stores every constructor parameter under its own name or overrides
        this method.

        >>> Selector(10, 3, seed=4).get_params()
        {'num_examples': 10, 'batch_size': 3, 'seed': 4, 'drop_last': False, 'partition': 'random'}
        """
        params = {}
        for name in self._param_names():
            if not hasattr(self, name):
                raise AttributeError(
                    f"{type(self).__name__} does not store its constructor parameter {name!r} as "
                    f"self.{name}: store it, or override get_params()"
                )
            params[name] = getattr(self, name)
        return params

    def fingerprint(self, world_size: int = 1) -> str:
        """16 hex digits over what this selector's batches depend on besides (epoch,
        feedback): its class, :meth:`get_params` (settings such as seed, weights and
        pressure, and a digest of the data arrays: embeddings, labels, graph) and, with
        ``partition="submodular"``, the GreedMax shards for ``world_size``. Ranks that built
        their selectors from the same inputs agree; ranks whose data or any setting
        differ (and so would draw overlapping or missing batches) do not.

        Arrays go in by :func:`~batchsel.selectors.hashing.digest`: whole up to
        ``DIGEST_FULL_BYTES``, by a strided sample of rows beyond. Scores learned from
        feedback (``losses_``, ``entropy_``) are not parameters; what
        :attr:`unplanned_params` names (where a cache lives) is left out.

        >>> Selector(10, 3).fingerprint() == Selector(10, 3).fingerprint()
        True
        >>> Selector(10, 3).fingerprint() == Selector(10, 3, seed=1).fingerprint()
        False
        """
        params = {k: v for k, v in self.get_params().items() if k not in self.unplanned_params}
        h = hashlib.sha256()
        digest([type(self).__name__, params], h)
        if self.partition == "submodular":
            digest(self.shard_assignment(world_size), h)
        return h.hexdigest()[:16]

    def state_dict(self) -> dict[str, Any]:
        """What an online selector needs to resume (scores); empty for offline ones."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_examples={self.num_examples}, batch_size={self.batch_size}, seed={self.seed})"
        )


__all__ = ["Selector", "weighted_sum", "PARTITIONS"]
