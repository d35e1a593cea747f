"""The selector interface and the random baseline.

A selector turns the data it was built from into each rank's batches for an epoch. Every
selector is seeded; an epoch's plan depends only on (inputs, seed, epoch, world size) and,
for online selectors, on the scores observed so far. Randomness comes from a local
``numpy.random.Generator`` seeded from ``(seed, epoch, ...)``, never the global RNG.

Worker assignment (``partition``) is shared by all selectors: ``"random"`` is
DistributedSampler's split of a fresh permutation every epoch; ``"submodular"`` gives every
rank a representative shard computed by GreedMax (:mod:`batchsel.submodular.partition`),
identically on every rank from the seed, and each rank then selects only within its shard.

Online selectors (:class:`OnlineSelector`) draw batch after batch from the scores known at
that moment and remember, per (rank, world size), the batches already drawn in the current
epoch; :meth:`Selector.state_dict` carries that record so a resumed run yields exactly the
batches that were still to come. Every selector's batches hold ``batch_size`` examples
but a rank's last one of an epoch (:func:`batch_sizes`), as ``DataLoader(shuffle=True)``'s.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from typing import Any, Iterator

import numpy as np
import scipy.sparse as sp

from batchsel.core.checks import check_int, check_seed, tensor_to_numpy
from batchsel.core.state import from_portable, to_portable
from batchsel.plans.plan import EpochPlan

logger = logging.getLogger(__name__)

PARTITIONS = ("random", "submodular")
STATE_VERSION = 1
# Arrays up to this size are hashed whole by digest(); larger ones (a 1M x 128 float32
# embedding matrix is 512 MB) by an evenly strided sample of about this many bytes of rows.
DIGEST_FULL_BYTES = 1 << 26


def digest(obj: Any, h: Any) -> None:
    """Feed a nested structure of dicts / sequences / arrays / sparse matrices / scalars
    into the hash ``h`` (``hashlib``), independently of dict order and byte order.

    Arrays go in with their dtype and shape; one larger than ``DIGEST_FULL_BYTES`` goes in
    by a strided sample of its rows (first and last included): data that differ
    everywhere (noise, another data set) differ in the sample; a change in a few rows may
    not. Sparse matrices go in by their CSR arrays.
    """
    if isinstance(obj, dict):
        h.update(b"{%d" % len(obj))
        for key in sorted(obj, key=str):
            h.update(str(key).encode() + b":")
            digest(obj[key], h)
    elif isinstance(obj, (list, tuple)):
        h.update(b"[%d" % len(obj))
        for item in obj:
            digest(item, h)
    elif sp.issparse(obj):
        m = obj.tocsr()
        h.update(f"sparse{m.shape}".encode())
        for arr in (m.indptr, m.indices, m.data):
            digest(np.asarray(arr), h)
    elif isinstance(obj, np.ndarray) or hasattr(obj, "detach"):
        a = np.asarray(tensor_to_numpy(obj))
        if a.dtype == object:
            digest(a.tolist(), h)
            return
        h.update(f"{a.dtype.newbyteorder('<').str}{a.shape}".encode())
        if a.ndim and a.nbytes > DIGEST_FULL_BYTES:
            step = -(-a.nbytes // DIGEST_FULL_BYTES)
            rows = np.unique(np.append(np.arange(0, a.shape[0], step), a.shape[0] - 1))
            h.update(b"sample%d" % step)
            a = a[rows]
        h.update(np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes())
    else:
        h.update(repr(obj).encode())


def epoch_rng(seed: int, epoch: int, *stream: int) -> np.random.Generator:
    """The local generator for (seed, epoch, stream...): independent streams for
    independent uses, identical on every rank."""
    return np.random.default_rng([int(seed), int(epoch), *map(int, stream)])


def weighted_sum(losses: Any, weights: Any) -> Any:
    """``sum(losses * weights)``, as one dot product where both are vectors of one dtype
    (torch tensors or numpy arrays): on a sub-millisecond step the multiply's extra op,
    forward and backward, costs 8 us, as much as a selector's work per step."""
    one_dtype = getattr(losses, "dtype", None) == getattr(weights, "dtype", 0)
    if one_dtype and getattr(losses, "ndim", 0) == 1 and getattr(weights, "ndim", 0) == 1:
        return losses.dot(weights)
    return (losses * weights).sum()


def split_batches(indices: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Consecutive batches of ``batch_size`` (the last one may be smaller)."""
    return [indices[i : i + batch_size] for i in range(0, len(indices), batch_size)]


def batch_sizes(length: int, batch_size: int) -> np.ndarray:
    """Sizes of the ``ceil(length / batch_size)`` batches of an epoch that draws ``length``
    examples without replacement: ``batch_size`` each but the last, which holds the rest,
    as ``BatchSampler`` cuts a shuffled epoch. One shape for every step but the last keeps
    compiled and autotuned models (cuDNN, ``torch.compile``, CUDA graphs) from re-tuning.

    >>> batch_sizes(10, 4).tolist(), batch_sizes(8, 4).tolist()
    ([4, 4, 2], [4, 4])
    """
    length = check_int(length, "length", minimum=0)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    sizes = np.full(-(-length // batch_size), batch_size, dtype=np.int64)
    if length % batch_size:
        sizes[-1] = length % batch_size
    return sizes


def even_split(indices: np.ndarray, world_size: int, drop_last: bool) -> list[np.ndarray]:
    """DistributedSampler's split: pad by wrapping around (or drop the tail) to a multiple
    of ``world_size``, then rank r takes ``indices[r::world_size]``."""
    n = len(indices)
    if drop_last:
        indices = indices[: (n // world_size) * world_size]
    else:
        total = -(-n // world_size) * world_size
        if total > n:
            indices = np.concatenate([indices, np.resize(indices, total - n)])
    return [indices[r::world_size] for r in range(world_size)]


def shard_length(num_examples: int, world_size: int, drop_last: bool) -> int:
    """Examples per rank after padding (``ceil(N / W)``) or dropping (``N // W``)."""
    return num_examples // world_size if drop_last else -(-num_examples // world_size)


class Selector:
    """Base class of all selectors.

    Subclasses implement :meth:`plan` (offline selectors) or derive from
    :class:`OnlineSelector` (which draw batch after batch from the scores observed so
    far). ``drop_last`` is DistributedSampler's: ``False`` pads ranks to equal size by
    repeating examples, ``True`` drops the tail. ``partition`` chooses how examples are
    assigned to ranks (``"random"`` or, for selectors with embeddings, ``"submodular"``).
    """

    online: bool = False
    #: partition kinds a subclass supports ("submodular" needs embeddings or a graph)
    partitions: tuple[str, ...] = ("random",)
    #: True when :meth:`observe` changes later batches: a distributed sampler then
    #: all-gathers the feedback so every rank's selector sees the same. A subclass that
    #: overrides ``observe`` without declaring it gets True (gathering what is not needed
    #: costs a collective; not gathering what is needed makes the ranks' plans diverge).
    uses_feedback: bool = False
    #: the feedback :meth:`observe` reads, of ``("losses", "logits", "embeddings")``: a
    #: sampler drops the rest before sharing it, and shares nothing (no collective) for a
    #: call that gives none of these
    feedback_fields: tuple[str, ...] = ("losses", "logits", "embeddings")
    #: True when ``iter_batches(epoch, rank, world_size, start=t)`` yields exactly the
    #: batches from number ``t`` on without drawing the earlier ones again (resume). A
    #: subclass that overrides ``iter_batches`` without declaring it gets True when its
    #: ``iter_batches`` takes ``start``.
    supports_start: bool = True
    #: True when the number of batches differs between epochs (dynamic pruning): then
    #: ``num_batches(world_size, epoch)`` gives each epoch's, known before the epoch starts,
    #: and the selector's ``epochs`` is the run it was built for
    epoch_lengths_vary: bool = False
    #: True when the plans carry per-example weights that belong in the loss (weighted
    #: coresets, dynamic pruning's up-weighting): ``SelectionBatchSampler(weighted=True)``
    weighted_plans: bool = False
    #: True when every batch holds ``batch_size`` examples but an epoch's last, as
    #: ``BatchSampler``'s: then ``SelectionBatchSampler(drop_last=True)`` may drop that one
    full_batches: bool = False
    #: ``SelectionBatchSampler``'s ``prefetch`` when none is given: how many batches ahead
    #: of the loop this selector's batches are selected (the feedback lag); 1 where a
    #: batch's selection is not trivial and one step of lag costs nothing measurable
    default_prefetch: int = 0
    #: True when :meth:`observe` only matters to the next epoch's plan and applies feedback
    #: example by example, order kept (dynamic and score-based pruning): a sampler holds the
    #: feedback back until the next epoch is planned and hands each run of it over in one
    #: call (one check and one update instead of one per step)
    feedback_per_epoch: bool = False

    @property
    def epoch_examples(self) -> int:
        """How many examples an epoch's plan shards over the ranks: ``num_examples`` (a
        coreset: its size). With :attr:`full_batches` it fixes the short last batch."""
        return self.num_examples

    #: :meth:`get_params` entries that do not change the batches (where a cache lives),
    #: left out of :meth:`fingerprint` so that ranks may differ in them
    _unplanned_params: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "observe" in cls.__dict__ and "uses_feedback" not in cls.__dict__:
            cls.uses_feedback = True
        if "iter_batches" in cls.__dict__ and "supports_start" not in cls.__dict__:
            try:
                cls.supports_start = "start" in inspect.signature(cls.iter_batches).parameters
            except (TypeError, ValueError):  # a builtin or a callable object without a signature
                cls.supports_start = False

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
        if partition not in self.partitions:
            raise ValueError(f"{type(self).__name__} supports partition in {self.partitions}, got {partition!r}")
        self.partition = partition
        # world_size -> shard id of every example (GreedMax); depends only on data and seed
        self._shard_of: dict[int, np.ndarray] = {}

    # -- argument checks shared by subclasses -----------------------------------------
    def check_world(self, world_size: int, rank: int | None = None) -> None:
        """Raise ``ValueError`` unless this selector can plan for ``world_size`` ranks
        (and ``rank`` is one of them): every rank needs at least one example (subclasses
        add their own limits, e.g. one batch or one coreset member per rank).

        >>> Selector(10, 2).check_world(4, rank=3)
        >>> Selector(10, 2).check_world(11)
        Traceback (most recent call last):
        ...
        ValueError: world_size must be <= the number of examples (10), got 11
        """
        check_int(world_size, "world_size", minimum=1)
        if world_size > self.num_examples:
            raise ValueError(f"world_size must be <= the number of examples ({self.num_examples}), got {world_size}")
        if rank is not None:
            check_int(rank, "rank", minimum=0)
            if rank >= world_size:
                raise ValueError(f"rank must be in [0, {world_size}), got {rank}")

    def _check_start(self, start: int, world_size: int) -> int:
        start = check_int(start, "start", minimum=0)
        total = self.num_batches(world_size)
        if start > total:
            raise ValueError(f"start must be <= the number of batches per rank ({total}), got {start}")
        return start

    # -- worker assignment ------------------------------------------------------------
    def _partition_data(self) -> Any:
        """Embeddings or a similarity graph for ``partition="submodular"``."""
        raise ValueError(f"{type(self).__name__} has no embeddings or graph for partition='submodular'")

    def shard_assignment(self, world_size: int) -> np.ndarray:
        """``partition="submodular"``: the shard (rank) of every example, from GreedMax;
        computed once per world size, the same on every rank."""
        self.check_world(world_size)
        if world_size not in self._shard_of:
            from batchsel.submodular.partition import shard_of_each, submodular_partition

            parts = submodular_partition(self._partition_data(), world_size, seed=self.seed)
            self._shard_of[world_size] = shard_of_each(parts, self.num_examples)
        return self._shard_of[world_size]

    def rank_shards(self, epoch: int, world_size: int = 1) -> list[np.ndarray]:
        """Every rank's examples for ``epoch``, in a random order, all of the same length
        (:func:`shard_length`): ``"random"`` is DistributedSampler's split of a fresh
        permutation; ``"submodular"`` shuffles each GreedMax shard and pads it by
        repeating its own examples (or drops its extra example) to the common length."""
        self.check_world(world_size)
        rng = epoch_rng(self.seed, epoch)
        if self.partition == "random":
            return even_split(rng.permutation(self.num_examples).astype(np.int64), world_size, self.drop_last)
        owner = self.shard_assignment(world_size)
        length = shard_length(self.num_examples, world_size, self.drop_last)
        order = np.argsort(owner, kind="stable")
        bounds = np.searchsorted(owner[order], np.arange(world_size + 1))
        shards = []
        for r in range(world_size):
            part = order[bounds[r] : bounds[r + 1]]
            shards.append(np.resize(part[rng.permutation(len(part))], length).astype(np.int64))
        return shards

    # -- the interface ----------------------------------------------------------------
    def plan(self, epoch: int = 0, world_size: int = 1) -> EpochPlan:
        """Every rank's batches for ``epoch`` (online selectors: as drawn with the scores
        known now)."""
        self.check_world(world_size)
        per_rank = [list(self.iter_batches(epoch, r, world_size)) for r in range(world_size)]
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
        self.check_world(world_size, rank)
        start = self._check_start(start, world_size)
        yield from self.plan(epoch, world_size).batches(rank)[start:]

    def num_batches(self, world_size: int = 1) -> int:
        """Batches per rank per epoch (the same on every rank and every epoch)."""
        return self.plan(0, world_size).num_batches

    def observe(self, indices: Any, losses: Any = None, logits: Any = None, embeddings: Any = None) -> None:
        """Feedback from the training loop; offline selectors ignore it."""

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

        >>> RandomSelector(10, 3, seed=4).get_params()
        {'num_examples': 10, 'batch_size': 3, 'seed': 4, 'drop_last': False, 'partition': 'random', 'shuffle': True}
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

        Arrays go in by :func:`digest`: whole up to ``DIGEST_FULL_BYTES``, by a strided
        sample of rows beyond. Scores learned from feedback (``losses_``, ``entropy_``)
        are not parameters; where a cache lives (``cache_dir``) is left out.

        >>> RandomSelector(10, 3).fingerprint() == RandomSelector(10, 3).fingerprint()
        True
        >>> RandomSelector(10, 3).fingerprint() == RandomSelector(10, 3, seed=1).fingerprint()
        False
        """
        params = {k: v for k, v in self.get_params().items() if k not in self._unplanned_params}
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


class OnlineSelector(Selector):
    """Base of selectors that draw each batch from the scores known at that moment.

    Subclasses implement :meth:`_next_batch`. Batch ``t`` of (epoch, rank) uses the
    generator ``epoch_rng(seed, epoch, rank, t)`` (or the subclass's own key of those,
    :meth:`_batch_rng`), the rank's shard of the epoch
    (:meth:`rank_shards`), the scores observed so far and the run state (the examples
    already used this epoch). Drawn batches are remembered per (rank, world size) for the
    current epoch: iterating an epoch again, or from ``start`` after
    :meth:`load_state_dict`, replays the batches already drawn (a DataLoader prefetches
    ahead of training) and draws the rest.

    The run state is ``shard``, ``order`` and ``m`` (``order[:m]`` are the positions into
    ``shard`` still unused), ``drawn`` and ``sizes``: the batch sizes of an epoch drawn
    without replacement (:func:`batch_sizes`, ``sizes[t]`` for batch ``t``). Selectors
    that draw with replacement (loss rank) ignore ``sizes`` and ``order``.
    """

    online = True
    uses_feedback = True  # the scores observed so far choose the batches

    def __init__(self, num_examples: int, batch_size: int, **kwargs: Any) -> None:
        super().__init__(num_examples, batch_size, **kwargs)
        self._runs: dict[tuple[int, int], dict[str, Any]] = {}

    # -- subclass hooks ---------------------------------------------------------------
    def _next_batch(self, run: dict[str, Any], rng: np.random.Generator) -> np.ndarray:
        """Draw the next batch of ``run`` (example indices), updating the run state."""
        raise NotImplementedError

    def _scores_state(self) -> dict[str, Any]:
        return {}

    def _load_scores(self, state: dict[str, Any]) -> None:
        pass

    # -- runs -------------------------------------------------------------------------
    def _new_run(self, epoch: int, rank: int, world_size: int) -> dict[str, Any]:
        shard = self.rank_shards(epoch, world_size)[rank]
        # ``order[:m]`` are the positions (into ``shard``) still unused this epoch.
        return {
            "epoch": int(epoch),
            "shard": shard,
            "order": np.arange(len(shard), dtype=np.int64),
            "m": len(shard),
            "drawn": [],
            "sizes": batch_sizes(len(shard), self.batch_size),
        }

    def _restore_run(self, run: dict[str, Any]) -> None:
        """Called on each run rebuilt by :meth:`load_state_dict` (``order``, ``m`` and
        ``drawn`` restored), so a subclass can bring it to the form it keeps.

        A run drawn without replacement (its batches used the ``len(shard) - m`` examples
        no longer in ``order[:m]``) whose remaining ``sizes`` do not add up to ``m`` (a
        state written by an earlier version, which cut sizes that differ by at
        most one) gets the sizes of its remaining batches re-cut evenly from ``m``: every
        example is still used once, in as many batches as the epoch has."""
        drawn, sizes, m = run["drawn"], run["sizes"], run["m"]
        t = len(drawn)
        if t < len(sizes) and sum(len(b) for b in drawn) + m == len(run["shard"]) and int(sizes[t:].sum()) != m:
            sizes[:t] = [len(b) for b in drawn]
            rest = len(sizes) - t
            sizes[t:] = m // rest
            sizes[len(sizes) - m % rest :] += 1

    def _batch_rng(self, run: dict[str, Any], rank: int, t: int) -> Any:
        """The randomness handed to :meth:`_next_batch` for batch ``t`` of ``run``:
        ``epoch_rng(seed, epoch, rank, t)``. A subclass whose compiled kernel draws its own
        numbers may return a cheaper key of the same (seed, epoch, rank, t) instead."""
        return epoch_rng(self.seed, run["epoch"], rank, t)

    def _draw(self, run: dict[str, Any], rank: int) -> np.ndarray:
        t = len(run["drawn"])
        batch = np.asarray(self._next_batch(run, self._batch_rng(run, rank, t)), dtype=np.int64)
        run["drawn"].append(batch)
        return batch

    def num_batches(self, world_size: int = 1) -> int:
        self.check_world(world_size)
        return -(-shard_length(self.num_examples, world_size, self.drop_last) // self.batch_size)

    def iter_batches(self, epoch: int, rank: int = 0, world_size: int = 1, start: int = 0) -> Iterator[np.ndarray]:
        epoch = check_int(epoch, "epoch", minimum=0)
        self.check_world(world_size, rank)
        start = self._check_start(start, world_size)
        total = self.num_batches(world_size)
        key = (int(rank), int(world_size))
        run = self._runs.get(key)
        if run is None or run["epoch"] != epoch:
            run = self._runs[key] = self._new_run(epoch, rank, world_size)
        t = min(start, len(run["drawn"]))
        while t < total:
            batch = run["drawn"][t] if t < len(run["drawn"]) else self._draw(run, rank)
            if t >= start:
                yield batch
            t += 1

    def plan(self, epoch: int = 0, world_size: int = 1) -> EpochPlan:
        """Every rank's batches as they would be drawn now, from the scores known now;
        does not touch the runs in progress."""
        epoch = check_int(epoch, "epoch", minimum=0)
        self.check_world(world_size)
        total = self.num_batches(world_size)
        per_rank = []
        for r in range(world_size):
            run = self._new_run(epoch, r, world_size)
            per_rank.append([self._draw(run, r) for _ in range(total)])
        return EpochPlan(
            per_rank, num_examples=self.num_examples, epoch=epoch, seed=self.seed, method=type(self).__name__
        )

    # -- resume -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Scores, GreedMax shards and, per (rank, world size), the current epoch's run:
        enough for a fresh selector built from the same inputs to continue exactly."""
        runs = []
        for (rank, world_size), run in self._runs.items():
            drawn = run["drawn"]
            runs.append(
                {
                    "rank": rank,
                    "world_size": world_size,
                    "epoch": run["epoch"],
                    "order": run["order"].copy(),
                    "m": int(run["m"]),
                    "drawn": np.concatenate(drawn) if drawn else np.empty(0, np.int64),
                    "drawn_sizes": np.array([len(b) for b in drawn], dtype=np.int64),
                }
            )
        return to_portable(
            {
                "version": STATE_VERSION,
                "class": type(self).__name__,
                "num_examples": self.num_examples,
                "batch_size": self.batch_size,
                "drop_last": self.drop_last,
                "seed": self.seed,
                "runs": runs,
                "partitions": {int(w): owner.copy() for w, owner in self._shard_of.items()},
                "scores": self._scores_state(),
            }
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError(
                f"not a {type(self).__name__} state (version {state.get('version') if isinstance(state, dict) else None!r})"
            )
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
        for r in state["runs"]:
            run = self._new_run(r["epoch"], r["rank"], r["world_size"])
            sizes = np.asarray(r["drawn_sizes"], dtype=np.int64)
            run["drawn"] = np.split(np.asarray(r["drawn"], dtype=np.int64), np.cumsum(sizes)[:-1]) if sizes.size else []
            run["order"] = np.asarray(r["order"], dtype=np.int64).copy()
            run["m"] = int(r["m"])
            self._restore_run(run)
            self._runs[(int(r["rank"]), int(r["world_size"]))] = run


class RandomSelector(Selector):
    """Random batches: the same distribution and per-rank coverage as torch's
    ``DistributedSampler(shuffle=True)`` followed by ``BatchSampler(drop_last=False)``.

    Each epoch shuffles all examples with a generator seeded from (seed, epoch), pads by
    wrapping (or drops the tail, ``drop_last=True``) to a multiple of the world size, gives
    rank r every world_size-th example from r on, and cuts that into batches; the last
    batch of a rank may be smaller. ``shuffle=False`` keeps the examples in order
    (``DistributedSampler(shuffle=False)``: the same batches as torch's). As with torch, a
    batch larger than the data and more ranks than examples (padded by repetition) are
    fine.

    Example
    -------
    >>> sel = RandomSelector(10, batch_size=3, seed=0)
    >>> plan = sel.plan(epoch=0, world_size=2)
    >>> plan.num_batches, sorted(plan.indices().tolist())
    (2, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    """

    uses_feedback = False
    supports_start = True
    full_batches = True

    def __init__(
        self,
        num_examples: int,
        batch_size: int,
        *,
        seed: int = 0,
        drop_last: bool = False,
        partition: str = "random",
        shuffle: bool = True,
    ) -> None:
        # BatchSampler takes a batch larger than the data (one short batch per rank)
        batch_size = check_int(batch_size, "batch_size", minimum=1)
        super().__init__(
            num_examples,
            min(batch_size, check_int(num_examples, "num_examples", minimum=1)),
            seed=seed,
            drop_last=drop_last,
            partition=partition,
        )
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)

    def check_world(self, world_size: int, rank: int | None = None) -> None:
        # DistributedSampler pads by repetition: more ranks than examples is allowed
        world_size = check_int(world_size, "world_size", minimum=1)
        if rank is not None and check_int(rank, "rank", minimum=0) >= world_size:
            raise ValueError(f"rank must be in [0, {world_size}), got {rank}")

    def rank_shards(self, epoch: int, world_size: int = 1) -> list[np.ndarray]:
        if self.shuffle:
            return super().rank_shards(epoch, world_size)
        self.check_world(world_size)
        return even_split(np.arange(self.num_examples, dtype=np.int64), world_size, self.drop_last)

    def plan(self, epoch: int = 0, world_size: int = 1) -> EpochPlan:
        shards = self.rank_shards(epoch, world_size)
        return EpochPlan(
            [split_batches(s, self.batch_size) for s in shards],
            num_examples=self.num_examples,
            epoch=epoch,
            seed=self.seed,
            method="random",
        )

    def iter_batches(self, epoch: int, rank: int = 0, world_size: int = 1, start: int = 0) -> Iterator[np.ndarray]:
        # Only this rank's shard: building every rank's plan per epoch made the sampler
        # 2x slower than DistributedSampler + BatchSampler at small batches.
        self.check_world(world_size, rank)
        start = self._check_start(start, world_size)
        shard = self.rank_shards(epoch, world_size)[rank]
        for begin in range(start * self.batch_size, len(shard), self.batch_size):
            yield shard[begin : begin + self.batch_size]

    def num_batches(self, world_size: int = 1) -> int:
        self.check_world(world_size)
        return -(-shard_length(self.num_examples, world_size, self.drop_last) // self.batch_size)


__all__ = [
    "Selector",
    "OnlineSelector",
    "RandomSelector",
    "digest",
    "epoch_rng",
    "split_batches",
    "batch_sizes",
    "even_split",
    "shard_length",
    "PARTITIONS",
]
