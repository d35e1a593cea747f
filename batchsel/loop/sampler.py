"""The torch side: a batch sampler for ``DataLoader(batch_sampler=...)`` and a weighted
dataset wrapper.

:class:`SelectionBatchSampler` is a drop-in for ``DistributedSampler`` + ``BatchSampler``
whose batches come from a batchsel :class:`~batchsel.selectors.Selector`. It adds what
DistributedSampler lacks: exact mid-epoch resume, feedback from the training loop
(per-example losses / logits / embeddings, shared across ranks), and a check that every
rank works from the same plan. Its selection ahead of the training step (``prefetch``)
is :class:`~batchsel.loop.prefetch.BackgroundSelection`. torch itself is imported
only where a tensor is touched, so ``import batchsel`` stays light.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import sys
import time
import warnings
from collections.abc import Sequence
from typing import Any, Iterator, cast, overload

import numpy as np

from batchsel.core.checks import check_int, check_number, check_seed, tensor_to_numpy
from batchsel.core.state import from_portable, to_portable
from batchsel.distributed.comm import Communicator, get_communicator
from batchsel.loop.feedback import FEEDBACK, exchange, merged, observation, settle
from batchsel.loop.prefetch import BackgroundSelection, Observation
from batchsel.selectors.base import Selector, digest, shard_length

logger = logging.getLogger(__name__)

STATE_VERSION = 1


def _torch_dist_world() -> tuple[int, int] | None:
    """(rank, world size) of torch.distributed's default group, None if there is none."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


def _loader_iterator(caller: Any, sampler: "SelectionBatchSampler") -> Any:
    """The DataLoader iterator whose ``_next_index`` asked ``sampler`` for its first batch
    (torch's single- and multi-process iterators both do), None for a loop of its own.
    Only that one frame's ``self`` is read, and not kept."""
    if caller is None or caller.f_code.co_name != "_next_index":
        return None
    owner = caller.f_locals.get("self")
    return owner if getattr(owner, "_index_sampler", None) is sampler else None


class _EpochSetter:
    """What a framework finds at ``batch_sampler.sampler``: Lightning calls ``set_epoch``
    only there (and on ``loader.sampler``), accelerate there and on the batch sampler; both
    reach :meth:`SelectionBatchSampler.set_epoch` this way."""

    def __init__(self, owner: "SelectionBatchSampler") -> None:
        self._owner = owner

    def set_epoch(self, epoch: int) -> None:
        self._owner.set_epoch(epoch)

    def __repr__(self) -> str:
        return f"<set_epoch of {type(self._owner).__name__}>"


class SelectionBatchSampler:
    """Yields this rank's batches (lists of int indices) of a selector's epoch plan.

    Use it as ``DataLoader(dataset, batch_sampler=sampler)``; ``num_workers > 0`` works
    (the sampler runs in the main process, where the training loop also calls
    :meth:`observe`), and its workers' batches ahead count in the feedback lag
    (``prefetch``). Mistakes in the loop that change what is trained get a warning that
    names the fix: a pass without :meth:`set_epoch`, a feedback selector given no feedback,
    a weighted plan yielded without its weights (docs: guide/training-loop.md, "Common
    mistakes").

    Parameters
    ----------
    selector:
        A :class:`~batchsel.selectors.Selector` (random, submodular, loss-rank, ...).
    rank, world_size:
        This process's rank and the number of ranks. Missing values come from the
        communicator (torch.distributed if initialized, else MPI under mpiexec, else
        torchrun's variables, else one process), looked up when an epoch's iteration
        starts: a sampler built before the process group exists (in a Lightning module's
        ``__init__``) still gets the right rank. Explicit values that contradict an
        initialized torch.distributed raise ``ValueError``.
    seed:
        DistributedSampler's ``seed``: the seed lives in the selector, so this only checks
        that it is the selector's (``ValueError`` otherwise). Every rank must use the same
        seed: :meth:`verify` checks that.
    comm:
        A :class:`~batchsel.distributed.comm.Communicator`; default chosen by
        :func:`~batchsel.distributed.comm.get_communicator` (under mpiexec with
        torch.distributed set up from MPI: MPI, whose shared-memory collectives carry a
        step's feedback faster than gloo; under torchrun: torch.distributed). With explicit ``rank`` and
        ``world_size`` that do not match the environment (e.g. simulating ranks in one
        process) there is none, and feedback stays local.
    sync_every:
        For online selectors in a multi-rank job, every ``sync_every``-th call of
        :meth:`observe` all-gathers the buffered feedback so each rank's selector sees
        everyone's. ``observe`` is then collective: every rank must call it equally often
        (one call per step in a DDP loop does that). Default 4: a selector then sees the
        other ranks' feedback up to 3 steps late, for a quarter of the collectives (why
        4: docs/design/sampler.md). 1 shares every step's feedback at once.
    weighted:
        Yield each batch as a :class:`WeightedBatch`: ``(index, weight)`` pairs with the
        plan's weights (weighted coresets, InfoBatch), instead of plain indices: wrap the
        dataset in :class:`WeightedDataset` to get ``(x, y, w)`` items, or index tensors
        with the batch's ``indices`` and ``weights`` arrays. Offline selectors only.
        Default ``None``: plain indices, with a warning when the selector's plans carry
        weights (``weighted_plans``: :class:`~batchsel.InfoBatchSelector`,
        :class:`~batchsel.CoresetSelector`), whose batches are then trained on without
        them; ``weighted=False`` drops them knowingly, without the warning.
    drop_last:
        BatchSampler's: drop each rank's last batch when it is short (RandomSelector and
        CoresetSelector, whose batches are full but the last; the same on every rank).
        The selector's own ``drop_last`` is DistributedSampler's (pad or drop examples).
    prefetch:
        How many batches are selected ahead of the one the loop asks for: the feedback lag.
        Default ``None``: the selector's ``default_prefetch``, 1 for SMDL (a batch's
        selection costs 1.7 ms at N = 50k, hidden beside the step), 0 for the rest
        (loss-rank's 0.2 ms is not worth a lag that cost it 1-2.5 points on short runs;
        offline plans are made at the epoch's start). On an accelerator ``prefetch=1``
        also spares loss-rank a device sync per step (:meth:`observe`). The batches
        depend on the lag only, never on whether a thread did the work: a background
        thread selects while the training step runs when this process has two cores of its
        own (:func:`~batchsel.loop.prefetch.cores_of_this_rank`) and a selection
        costs more than handing it over; otherwise the training thread selects each batch
        when it is needed, from the same feedback. The thread is a daemon, stopped when
        the iteration ends, is closed or is garbage collected; an exception in it is
        raised in the training thread at the next batch. The compiled selection kernels
        release the GIL, so selection and a torch step can use two cores.
        :meth:`cost` reports what selection cost and what the training thread still
        paid. The rules and their measurements: docs/design/sampler.md.

        A DataLoader with workers asks for ``num_workers * prefetch_factor`` batches ahead
        of the loop: that window is part of the lag, and the sampler selects only the rest
        ahead itself. With ``prefetch`` at least the window the batches are those of
        ``num_workers=0`` with the same ``prefetch``; a smaller one gets the window's lag
        (the batches of ``num_workers=0`` with ``prefetch`` = the window) and a warning.

        Selectors without feedback (random, graph blocks, offline plans) yield exactly the
        batches of ``prefetch=0``. For selectors that use feedback the lag is fixed, never
        a matter of thread timing: when the loop asks for batch ``t``, the selection of
        batch ``t + prefetch`` starts, after the selector is handed, in call order, every
        observation given to :meth:`observe` since the previous selection started. In the
        usual loop (``for batch in loader: step; observe``) batch ``t + 1`` is selected
        from the feedback of batches ``<= t - 1`` with ``prefetch=1`` (``<= t`` with
        ``prefetch=0``). While an iteration with prefetch is running, feedback must go
        through :meth:`observe` (not ``selector.observe``) and settings of the selector
        (e.g. a loss-rank pressure schedule) must not change; collectives (``sync_every``)
        stay in the training thread. :meth:`state_dict` waits for the selection in flight
        and saves its batch among the pending ones, so a resumed run yields what the
        uninterrupted one would have.
    timeout:
        Seconds a feedback all-gather waits for every rank (default 1800, torch's
        process-group default) before it raises ``RuntimeError`` naming the collective;
        under mpiexec the abort hook then ends every rank, so a rank that stopped calling
        :meth:`observe` ends the job instead of hanging it; one that exited (``sys.exit``)
        tells the waiting ranks at once, which raise then, naming it. ``None``: wait as long as it
        takes. Over torch.distributed the process group's own ``timeout`` applies. Each
        all-gather also checks that every rank is at the same :meth:`observe` call of
        the same epoch (``RuntimeError`` naming each rank's call otherwise).

    Notes
    -----
    The contract is DistributedSampler's: call :meth:`set_epoch` before each epoch
    (Lightning and accelerate call ``batch_sampler.sampler.set_epoch``: :attr:`sampler`
    forwards it), ``len(sampler)`` batches on every rank (padding or dropping follows the
    selector's ``drop_last``), randomness from (seed, epoch) only.
    ``SelectionBatchSampler(RandomSelector(n, B, seed=s, drop_last=d), drop_last=b)``
    yields the batch counts and sizes of
    ``BatchSampler(DistributedSampler(data, seed=s, drop_last=d), B, drop_last=b)``.

    Example
    -------
    >>> from batchsel import RandomSelector
    >>> sampler = SelectionBatchSampler(RandomSelector(10, batch_size=4, seed=0), rank=0, world_size=2)
    >>> sampler.set_epoch(1)
    >>> batches = list(sampler)
    >>> len(sampler), [len(b) for b in batches]
    (2, [4, 1])
    >>> state = sampler.state_dict()     # resume point: here, the end of epoch 1
    >>> ahead = SelectionBatchSampler(RandomSelector(10, batch_size=4, seed=0), rank=0, world_size=2, prefetch=1)
    >>> ahead.set_epoch(1)
    >>> list(ahead) == batches           # selected in a background thread: the same batches
    True
    """

    def __init__(
        self,
        selector: Selector,
        rank: int | None = None,
        world_size: int | None = None,
        seed: int | None = None,
        comm: Communicator | None = None,
        sync_every: int = 4,
        weighted: bool | None = None,
        drop_last: bool = False,
        prefetch: int | None = None,
        timeout: float | None = 1800.0,
    ) -> None:
        if not isinstance(selector, Selector):
            raise TypeError(f"selector must be a batchsel Selector, got {type(selector).__name__}")
        if seed is not None and check_seed(seed) != selector.seed:
            # a selector may have used its seed already (coresets, GreedMax shards): no override
            raise ValueError(
                f"seed={seed} but the selector was built with seed={selector.seed}; build it with seed={seed}"
            )
        self.selector = selector
        self.sync_every = check_int(sync_every, "sync_every", minimum=1)
        self.prefetch = selector.default_prefetch if prefetch is None else check_int(prefetch, "prefetch", minimum=0)
        self.timeout = None if timeout is None else check_number(timeout, "timeout", low=0.0)
        if self.timeout == 0:
            raise ValueError("timeout must be > 0 seconds (or None: wait as long as it takes), got 0")
        if weighted is None and selector.weighted_plans:
            warnings.warn(
                f"{type(selector).__name__}'s batches carry weights (the loss's up-weights) and this "
                f"sampler yields plain indices, so training drops them: pass weighted=True (batches "
                f"with indices and weights; wrap the dataset in WeightedDataset), or weighted=False "
                f"to train unweighted knowingly",
                UserWarning,
                stacklevel=2,
            )
        self.weighted = bool(weighted)
        if self.weighted and selector.online:
            raise ValueError(
                f"weighted=True needs an offline selector (a plan with weights); {type(selector).__name__} is online"
            )
        self.drop_last = bool(drop_last)
        if self.drop_last and not selector.full_batches:
            # other selectors' batches differ in size by design (balanced sizes, graph
            # blocks): none is "the short last one", and dropping one could differ by rank
            raise ValueError(
                f"drop_last=True (BatchSampler's: drop a short last batch) needs a selector whose "
                f"batches are full but the last (full_batches: RandomSelector, CoresetSelector); "
                f"got {type(selector).__name__}"
            )
        #: what Lightning and accelerate call ``set_epoch`` on (``batch_sampler.sampler``)
        self.sampler = _EpochSetter(self)
        if rank is not None:
            rank = check_int(rank, "rank", minimum=0)
        if world_size is not None:
            world_size = check_int(world_size, "world_size", minimum=1)
        self._given = (rank, world_size, comm)
        # Missing values are looked up when first needed and again when an epoch starts
        # while they say one process: a sampler built before the framework creates the
        # process group (a Lightning module's __init__) must not settle on one process.
        self._lazy = comm is None and (rank is None or world_size is None)
        self._comm: Communicator | None = None
        self._rank = self._world_size = -1
        self._resolved = False
        if not self._lazy:
            self._resolve()
        self.epoch = 0
        self._len: int | None = None
        self._resume: dict[str, Any] | None = None
        self._iter_epoch: int | None = None  # epoch of the latest iteration
        self._iter_base = 0  # batch number the latest iteration started from
        self._yielded = 0  # batches of _iter_epoch handed out so far
        self._history: list[np.ndarray] = []  # batches handed out by the latest iteration (online / feedback)
        self._iter_pending: list[np.ndarray] = []  # batches that iteration replays from a checkpoint
        # feedback is gathered across ranks only for selectors that use it (not RandomSelector)
        self._uses_feedback = bool(selector.uses_feedback)
        self._feedback_fields = frozenset(getattr(selector, "feedback_fields", FEEDBACK))
        self._buffer: list[Observation] = []  # feedback not yet all-gathered
        self._observe_calls = 0  # buffered observe() calls of the latest iteration: ranks must agree
        # gathered feedback goes to the selector through this; while an iteration with
        # prefetch runs, each selection ahead applies what came before it (call order decides)
        self._background = self._new_background([])
        self._warned_local = False
        self._waited, self._handed = 0.0, 0  # the training thread's seconds in the sampler; batches
        # the feedback a selector has no other source of (embeddings it was built with; losses
        # and logits only from observe): an iteration without any is a forgotten observe()
        self._needed_fields = self._feedback_fields - {"embeddings"} if self._uses_feedback else frozenset()
        self._fed = 0  # observe() calls of the latest iteration that carried any of them
        self._passed = False  # whether the latest iteration ran to its end
        self._warned: set[str] = set()  # the training-loop mistakes warned of (once each)

    # -- rank and world size ------------------------------------------------------------
    @property
    def rank(self) -> int:
        """This process's rank (looked up on first use when not given)."""
        if not self._resolved:
            self._resolve()
        return self._rank

    @property
    def world_size(self) -> int:
        """The number of ranks (looked up on first use when not given)."""
        if not self._resolved:
            self._resolve()
        return self._world_size

    @property
    def comm(self) -> Communicator | None:
        """The communicator feedback and :meth:`verify` go through (None: local only)."""
        if not self._resolved:
            self._resolve()
        return self._comm

    @comm.setter
    def comm(self, comm: Communicator | None) -> None:
        self._comm = comm

    @property
    def batch_size(self) -> int:
        """The selector's batch size (BatchSampler's attribute, read by frameworks)."""
        return self.selector.batch_size

    def _resolve(self) -> None:
        rank, world_size, comm = self._given
        comm, rank, world_size = self._resolve_world(rank, world_size, comm)
        if self._resolved and (rank, world_size) != (self._rank, self._world_size):
            logger.info(
                "rank %d / world %d now (was %d / %d when first used): torch.distributed was set up after that",
                rank,
                world_size,
                self._rank,
                self._world_size,
            )
            self._len = None
        self.selector.check_world(world_size, rank)
        self._comm, self._rank, self._world_size, self._resolved = comm, rank, world_size, True

    @staticmethod
    def _resolve_world(
        rank: int | None, world_size: int | None, comm: Communicator | None
    ) -> tuple[Communicator | None, int, int]:
        if comm is None:
            found = get_communicator("auto")
            if rank is None or world_size is None or (found.rank, found.size) == (rank, world_size):
                comm = found
            elif _torch_dist_world() is not None:
                # explicit values that contradict the process group would train overlapping
                # or missing batches without a word
                raise ValueError(
                    f"rank={rank}, world_size={world_size} given, but torch.distributed has rank "
                    f"{found.rank} of {found.size}: leave them out (they are read from the process "
                    f"group) or pass the group's"
                )
            else:  # simulating ranks in one process (tests, planning): no communicator
                logger.debug("rank %d / world %d given and not this job's %r: no communicator", rank, world_size, found)
                return None, rank, world_size
        for name, given, actual in (("rank", rank, comm.rank), ("world_size", world_size, comm.size)):
            if given is not None and given != actual:
                raise ValueError(f"{name}={given} disagrees with the communicator's {actual} ({comm!r})")
        return comm, comm.rank, comm.size

    # -- the DistributedSampler contract ------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose batches the next iteration yields."""
        self.epoch = check_int(epoch, "epoch", minimum=0)

    def __len__(self) -> int:
        """This rank's batches in the epoch set by :meth:`set_epoch`."""
        return self._num_batches_of(self.epoch)

    def _num_batches_of(self, epoch: int) -> int:
        if self.selector.epoch_lengths_vary:  # known before the epoch starts (dynamic pruning)
            return self.selector.num_batches(self.world_size, epoch=epoch)  # type: ignore[call-arg]
        if self._len is None:  # the same every epoch (the selector contract); may cost a plan
            total = self.selector.num_batches(self.world_size)
            if self.drop_last and total and self._last_batch_short():
                total -= 1
            self._len = total
        return self._len

    def total_batches(self, epochs: int) -> int:
        """This rank's batches over epochs ``0 .. epochs - 1``: the optimizer steps of the
        run, to size a learning-rate schedule with (``OneCycleLR(total_steps=...)``).
        Exact, also where epochs differ in length (:class:`~batchsel.InfoBatchSelector`;
        ``epochs`` must then be the run the selector was built for, else ``ValueError``).

        >>> from batchsel import RandomSelector
        >>> SelectionBatchSampler(RandomSelector(10, 4), rank=0, world_size=1).total_batches(epochs=5)
        15
        """
        epochs = check_int(epochs, "epochs", minimum=1)
        if not self.selector.epoch_lengths_vary:
            return epochs * len(self)
        run = cast(Any, self.selector).epochs  # selectors whose epochs vary know their run
        if epochs != run:
            raise ValueError(
                f"epochs={epochs} disagrees with the run of epochs={run} that "
                f"{type(self.selector).__name__} was built for (its schedule depends on it)"
            )
        return sum(self._num_batches_of(e) for e in range(epochs))

    def _last_batch_short(self) -> bool:
        # full_batches: every rank's shard has the same length and is cut into full
        # batches and a last one, as DistributedSampler + BatchSampler do
        sel = self.selector
        return shard_length(sel.epoch_examples, self.world_size, sel.drop_last) % sel.batch_size != 0

    def __iter__(self) -> Iterator[Any]:  # lists of indices; WeightedBatch with weighted=True
        # A process group may exist now (one process so far), and it must agree with
        # explicit values; a multi-rank answer is final.
        if (
            not self._resolved
            or (self._lazy and self._world_size == 1)
            or (self._comm is None and _torch_dist_world() is not None)
        ):
            self._resolve()
        caller = sys._getframe(1)
        self._check_not_resharded(caller)
        window = self._check_loader(_loader_iterator(caller, self))
        self._background.stop()  # an earlier iteration left unfinished: its selection ends first
        epoch = self.epoch
        self._check_previous_pass(epoch)
        start, pending, skip = 0, [], 0
        if self._resume is not None and self._resume["epoch"] == epoch:
            start, pending = self._resume["position"], self._resume["pending"]
            skip = start - len(pending) if self._resume.get("placeholders") else 0
        self._resume = None
        self._iter_epoch, self._iter_base, self._iter_pending = epoch, start - len(pending), list(pending)
        self._yielded, self._history = self._iter_base - skip, []
        self._observe_calls = self._fed = 0
        self._passed = False
        # the loop has trained on a batch or two and not said a word of it: observe() forgotten
        # (the DataLoader's and the sampler's own batches ahead come on top)
        unfed_after = window + self.prefetch + 8 if self._needed_fields else None
        for _ in range(skip):  # finished batches that the framework skips itself, unseen
            self._yielded += 1
            yield []
        # the replayed batches were drawn before the checkpoint; the selector resumes after them
        source: Any = itertools.chain(((np.asarray(b), None) for b in pending), self._batches(epoch, start))
        source = itertools.islice(source, max(len(self) - self._iter_base, 0))
        # the DataLoader's workers select `window` batches ahead already: the sampler adds the
        # rest of its lag, so the batches are those of num_workers=0 wherever prefetch covers it
        source = self._background.run(source, max(self.prefetch - window, 0))
        try:
            while True:
                asked = time.perf_counter()
                try:
                    batch, weights = next(source)
                except StopIteration:
                    self._passed = True
                    return
                finally:
                    self._waited += time.perf_counter() - asked
                if unfed_after is not None and not self._fed and len(self._history) >= unfed_after:
                    self._warn_unfed(epoch, len(self._history))
                self._yielded += 1
                self._handed += 1
                if self.selector.online or self._uses_feedback:
                    self._history.append(batch)
                yield batch.tolist() if weights is None else WeightedBatch(batch, weights)
        finally:  # a loop that breaks early: the prefetch thread stops now, not at garbage collection
            source.close()

    def _check_previous_pass(self, epoch: int) -> None:
        """Warn of the training-loop mistakes the iteration before this one shows: it ran
        to its end and the epoch was not set anew (DistributedSampler repeats the epoch's
        batches then, silently), or it handed out batches and the loop gave no feedback."""
        if not self._passed or self._iter_epoch is None:
            return
        if self._resume is None and self._iter_epoch == epoch:
            self._warn_once(
                "set_epoch",
                f"this pass repeats epoch {epoch}'s batches: call sampler.set_epoch(epoch) before each "
                f"epoch (DistributedSampler's contract; Lightning, accelerate and BatchselTrainer call it)",
            )
        if self._needed_fields and self._history and not self._fed:
            self._warn_unfed(self._iter_epoch, len(self._history))

    def _warn_unfed(self, epoch: int, batches: int) -> None:
        fields = " or ".join(sorted(self._needed_fields))
        name = type(self.selector).__name__
        self._warn_once(
            "observe",
            f"{name} chooses batches from the {fields} the loop hands to sampler.observe(...), and none came "
            f"in {batches} batches of epoch {epoch}: its batches do not follow the training. Call "
            f"sampler.observe(batch, {sorted(self._needed_fields)[0]}=...) after each step",
        )

    def _warn_once(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            warnings.warn(f"SelectionBatchSampler: {message}", UserWarning, stacklevel=4)

    def _check_loader(self, loader: Any) -> int:
        """Warn of what a DataLoader iterating this sampler changes, and return how many
        batches it asks for ahead of the training loop (its workers' prefetch: the feedback
        lag it adds)."""
        if loader is None:
            return 0
        dataset = getattr(loader, "_dataset", None)
        if self.weighted and dataset is not None and not getattr(dataset, "accepts_weighted_keys", False):
            self._warn_once(
                "weighted_keys",
                f"weighted=True hands the DataLoader (index, weight) pairs as keys, which "
                f"{type(dataset).__name__} does not take: wrap the dataset, "
                f"DataLoader(WeightedDataset(dataset), batch_sampler=sampler), for (x, y, w) items (a dataset "
                f"that takes such keys itself says so with accepts_weighted_keys = True)",
            )
        workers = int(getattr(loader, "_num_workers", 0) or 0)
        window = workers * int(getattr(loader, "_prefetch_factor", None) or 0)
        if window > self.prefetch and self._uses_feedback and self.selector.online:  # offline: plans at the epoch start
            self._warn_once(
                "num_workers",
                f"DataLoader(num_workers={workers}) asks for batches {window} ahead of the training step, so "
                f"{type(self.selector).__name__} sees the feedback {window} batches late, not {self.prefetch} "
                f"(prefetch={self.prefetch}): its batches are those of num_workers=0 with prefetch={window}. Pass "
                f"SelectionBatchSampler(prefetch={window}) for batches that do not depend on num_workers, or "
                f"load in the main process (num_workers=0) where loading is cheap",
            )
        return window

    def _check_not_resharded(self, caller: Any) -> None:
        """Refuse to be iterated by accelerate's ``BatchSamplerShard`` over several ranks
        (``accelerator.prepare(DataLoader(batch_sampler=sampler))``): it would keep every
        ``W``-th of this rank's batches, so an epoch would see 1/W of the data, silently.
        The shard iterates this sampler from its own method, so that is the caller's code.
        (Only the code and the module are read: the caller's ``f_locals`` would keep its
        local objects alive, an iterator dropped by the caller among them.)"""
        code = caller.f_code if caller is not None else None
        name = code and (getattr(code, "co_qualname", None) or code.co_name)  # co_qualname: Python >= 3.11
        if not name or not (
            name.startswith("BatchSamplerShard.") or name in ("_iter_with_split", "_iter_with_no_split")
        ):
            return
        if not str(caller.f_globals.get("__name__", "")).startswith("accelerate") or self.world_size == 1:
            return
        owner = caller.f_locals.get("self")  # the shard itself: prepare() wraps only when W > 1
        if getattr(owner, "batch_sampler", None) is self:
            raise RuntimeError(
                f"accelerate's BatchSamplerShard (from accelerator.prepare(dataloader)) wraps this "
                f"SelectionBatchSampler, which already gives rank {self.rank} of {self.world_size} its own batches: "
                f"each rank would train on 1/{getattr(owner, 'num_processes', '?')} of its share. Leave the DataLoader out of "
                f"accelerator.prepare (prepare the model and optimizer only), or use "
                f"batchsel.integrations.hf.BatchselTrainer"
            )

    def batch_indices(self, batch: int) -> np.ndarray:
        """The example indices of batch number ``batch`` (counted from the epoch's start) of
        the epoch being iterated, as handed out: for a framework that gives feedback after
        the fact by batch number (Lightning's ``batch_idx``), without an index column in
        the data. Recorded for selectors that use feedback.

        >>> from batchsel.selectors import LossRankSelector
        >>> sampler = SelectionBatchSampler(LossRankSelector(10, 2), rank=0, world_size=1)
        >>> first = next(iter(sampler))
        >>> sampler.batch_indices(0).tolist() == first
        True
        """
        batch = check_int(batch, "batch", minimum=0)
        if not (self.selector.online or self._uses_feedback):
            raise ValueError(f"{type(self.selector).__name__} uses no feedback: its batches are not recorded")
        i = batch - self._iter_base
        if self._iter_epoch is None or not 0 <= i < len(self._history):
            raise ValueError(
                f"batch={batch} was not handed out by this iteration of epoch {self._iter_epoch} "
                f"(batches {self._iter_base} to {self._iter_base + len(self._history) - 1})"
            )
        return self._history[i]

    def _batches(self, epoch: int, start: int) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        if self.weighted:
            plan = self.selector.plan(epoch, self.world_size)
            batches, weights = plan.batches(self.rank), plan.weights(self.rank)
            for t in range(start, len(batches)):
                w = np.ones(len(batches[t]), np.float32) if weights is None else weights[t]
                yield batches[t], w
            return
        if self.selector.supports_start:
            it = self.selector.iter_batches(epoch, self.rank, self.world_size, start=start)
        else:  # an offline selector without ``start``: skipping reproduces the same batches
            it = itertools.islice(self.selector.iter_batches(epoch, self.rank, self.world_size), start, None)
        for b in it:
            yield np.asarray(b, dtype=np.int64), None

    # -- resume -------------------------------------------------------------------------
    def state_dict(self, batches_done: int | None = None, all_ranks: bool = False) -> dict[str, Any]:
        """Everything needed to resume this rank mid-epoch (arrays as torch tensors, so
        ``torch.save`` / ``torch.load`` handle it with the model's state).

        ``batches_done``: how many batches of the current epoch the training loop has
        finished. The default, all batches handed out so far, is exact with
        ``num_workers=0``; a DataLoader with workers fetches a few batches ahead, so pass
        your step count there. Batches an online selector drew ahead of that point are
        stored and replayed first on resume.

        ``all_ranks=True`` (collective) returns every rank's state in one dict, so that
        rank 0 alone can save the checkpoint; :meth:`load_state_dict` picks its own part.

        With ``prefetch``, the selections in flight are waited for: their batches are saved
        as pending (replayed first on resume), the feedback not yet handed to the selector
        under ``deferred``, and the selector's state is the one after those selections.
        """
        ahead, deferred = self._background.state()
        deferred = [settle(o) for o in deferred]
        self._buffer = [settle(o) for o in self._buffer]
        if self._resume is not None:  # loaded and not iterated yet: unchanged
            state = {k: v for k, v in self._resume.items() if k != "placeholders"}
            state.update(selector=self.selector.state_dict(), observations=list(self._buffer), deferred=deferred)
        else:
            active = self._iter_epoch == self.epoch
            yielded = self._yielded if active else 0
            done = yielded if batches_done is None else check_int(batches_done, "batches_done", minimum=0)
            if done > yielded:
                raise ValueError(
                    f"batches_done={done} but only {yielded} batches of epoch {self.epoch} were handed out"
                )
            pending: list[np.ndarray] = []
            if self.selector.online and active:
                if done < self._iter_base:
                    raise ValueError(f"batches_done={done} is before this iteration's start ({self._iter_base})")
                # batches drawn so far: the replayed ones (some maybe not handed out yet) and the
                # new ones, those selected ahead in the background included
                drawn = self._history + [batch for batch, _ in ahead]
                drawn = drawn if len(drawn) >= len(self._iter_pending) else self._iter_pending
                pending = [np.array(b, dtype=np.int64) for b in drawn[done - self._iter_base :]]
            state = {
                "epoch": self.epoch,
                "position": done + len(pending),
                "pending": pending,
                "selector": self.selector.state_dict(),
                "observations": list(self._buffer),
                "deferred": deferred,
            }
        state.update(
            version=STATE_VERSION,
            rank=self.rank,
            world_size=self.world_size,
            seed=self.selector.seed,
            method=type(self.selector).__name__,
            batches_done=state["position"] - len(state["pending"]),
            num_examples=self.selector.num_examples,
            batch_size=self.selector.batch_size,
            num_batches=len(self),
        )
        if all_ranks:
            if self.comm is None:
                raise ValueError("all_ranks=True needs a communicator (this sampler has none)")
            state = {"version": STATE_VERSION, "world_size": self.world_size, "ranks": self.comm.allgather(state)}
        return to_portable(state)

    def load_state_dict(self, state: dict[str, Any], placeholders: bool = False) -> None:
        """Restore :meth:`state_dict`'s output: the next iteration over the saved epoch
        yields exactly the batches that were still to come (call :meth:`set_epoch` with
        that epoch as usual; another epoch starts from its beginning).

        ``placeholders=True`` is for a framework that skips the finished batches itself
        (the Hugging Face Trainer's ``skip_first_batches`` drops the first ``k`` batches of
        the batch sampler unseen): the next iteration first yields one empty batch for
        each finished one, so the framework's count and the sampler's agree and no batch
        is skipped twice."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError(f"not a SelectionBatchSampler state (version {STATE_VERSION}): {type(state).__name__}")
        state = from_portable(state)
        if "ranks" in state:
            if len(state["ranks"]) != self.world_size:
                raise ValueError(f"the state holds {len(state['ranks'])} ranks, this job has {self.world_size}")
            state = state["ranks"][self.rank]
        missing = sorted(
            {"rank", "world_size", "seed", "method", "epoch", "position", "pending", "selector", "observations"}
            - set(state)
        )
        if missing:
            raise ValueError(f"the state lacks {missing}: pass what SelectionBatchSampler.state_dict() returned")
        # Another dataset size, batch size or batch count puts the saved position at
        # another point of the epoch (offline selectors have no state of their own to
        # object). States written before these were recorded skip them.
        epoch_length = self._num_batches_of(check_int(state["epoch"], "epoch", minimum=0))
        for key, mine in (
            ("rank", self.rank),
            ("world_size", self.world_size),
            ("seed", self.selector.seed),
            ("method", type(self.selector).__name__),
            ("num_examples", self.selector.num_examples),
            ("batch_size", self.selector.batch_size),
            ("num_batches", epoch_length),
        ):
            if key in state and state[key] != mine:
                raise ValueError(
                    f"the state was saved with {key}={state[key]!r}, this sampler has {mine!r}; "
                    f"resume with the data and selector settings of the saved run"
                )
        position = check_int(state["position"], "position", minimum=0)
        if position > epoch_length:
            raise ValueError(f"the state's position {position} is past the epoch's {epoch_length} batches")
        self._background.stop(flush=False)  # an iteration with prefetch still running: its thread stops first
        self.selector.load_state_dict(state["selector"])
        self._buffer = [dict(o) for o in state["observations"]]
        # feedback a prefetch run had gathered and not yet handed to the selector (states
        # written before prefetch existed have none)
        self._background.deferred = [dict(o) for o in state.get("deferred", [])]
        self._resume = {
            "epoch": int(state["epoch"]),
            "position": position,
            "placeholders": bool(placeholders),
            "pending": [np.asarray(b, dtype=np.int64) for b in state["pending"]],
        }
        self.epoch = int(state["epoch"])

    # -- feedback -----------------------------------------------------------------------
    def observe(self, indices: Any, losses: Any = None, logits: Any = None, embeddings: Any = None) -> None:
        """Hand the selector feedback on the examples ``indices`` (a batch just trained
        on): per-example ``losses``, ``logits`` (rows), ``embeddings`` (rows); numpy
        arrays or tensors (detached here). A selector that does not override
        ``Selector.observe`` (e.g. RandomSelector) costs nothing here.

        Only what the selector reads (its ``feedback_fields``) is kept; a call whose
        feedback is all unread is dropped (SubmodularSelector at its default weights reads
        embeddings only, so logits cost nothing). In a multi-rank job with a selector
        that uses feedback, the rest is buffered and all-gathered every ``sync_every``
        calls (a collective); every rank's selector then observes every rank's feedback,
        in the same order. So every rank calls ``observe`` alike: as often, with the same
        kinds of feedback.
        """
        if not self._uses_feedback:
            return
        start = time.perf_counter()
        try:
            self._observe(indices, losses, logits, embeddings)
        finally:
            self._waited += time.perf_counter() - start

    def _observe(self, indices: Any, losses: Any, logits: Any, embeddings: Any) -> None:
        obs = observation(indices, self._feedback_fields, losses, logits, embeddings)
        if obs is None:
            return
        if not self._fed and any(obs.get(name) is not None for name in self._needed_fields):
            self._fed = 1
        if self.comm is None or self.world_size == 1:
            if self.world_size > 1 and not self._warned_local:
                logger.warning("no communicator: rank %d's feedback is not shared with the other ranks", self.rank)
                self._warned_local = True
            self._background.observe([obs])
            return
        self._observe_calls += 1
        # which call this is, checked across ranks when gathered: a rank that calls observe
        # once less fails there, naming the call, instead of pairing other steps' feedback
        epoch = -1 if self._iter_epoch is None else self._iter_epoch
        obs["step"] = (epoch, self._observe_calls)  # type: ignore[assignment]
        self._buffer.append(obs)
        if len(self._buffer) >= self.sync_every or self._epoch_fed_back():
            self.sync()

    def _epoch_fed_back(self) -> bool:
        """Whether a selector that reads feedback only when it plans an epoch has just got
        the feedback of the epoch's last batch: sharing it now (every rank is at the same
        call) puts the whole epoch in the next plan, not up to ``sync_every - 1`` batches an
        epoch later."""
        if not self._background.per_iteration or self._iter_epoch is None:
            return False
        return self._iter_base + self._observe_calls >= self._num_batches_of(self._iter_epoch)

    def cost(self) -> dict[str, float]:
        """What selection has cost so far, in seconds, since the sampler was built.

        ``selection``: drawing batches and handing feedback to the selector, on whichever
        thread did it (``prefetch``); ``compile``: numba compiling kernels inside that
        (:func:`batchsel.warmup` moves it out of a timed run); ``training_thread``: what
        the training loop spent in the sampler (getting batches, waiting for the thread,
        :meth:`observe` with its conversions and all-gathers), compilation left out: the
        part of the selection it did not hide; ``batches`` handed out and
        ``ms_per_batch`` = ``training_thread`` per batch.

        >>> from batchsel import LossRankSelector
        >>> sampler = SelectionBatchSampler(LossRankSelector(100, 10), rank=0, world_size=1)
        >>> for batch in sampler:
        ...     sampler.observe(batch, losses=np.ones(len(batch)))
        >>> cost = sampler.cost()
        >>> cost["batches"], cost["selection"] > 0
        (10.0, True)
        """
        clock = self._background.clock
        exposed = max(0.0, self._waited - clock.compile)
        return {
            "batches": float(self._handed),
            "selection": clock.select,
            "compile": clock.compile,
            "training_thread": exposed,
            "ms_per_batch": 1e3 * exposed / max(self._handed, 1),
        }

    def sync(self) -> None:
        """All-gather the buffered feedback now (collective) and hand it to the selector:
        round by round (call order), rank by rank within a round."""
        if self.comm is None or self.world_size == 1:
            self._background.observe(self._buffer)
            self._buffer = []
            return
        gathered = exchange(self.comm, self._buffer, self.rank, self.timeout)
        self._buffer = []
        self._background.observe(gathered)

    def _feed_selector(self, observations: list[Observation]) -> None:
        # on the training thread, or on the prefetch thread right before a selection
        observations = [settle(obs) for obs in observations]
        if self._background.per_iteration:
            observations = merged(observations)
        for obs in observations:
            self.selector.observe(
                obs["indices"], losses=obs["losses"], logits=obs["logits"], embeddings=obs["embeddings"]
            )

    # -- agreement across ranks ---------------------------------------------------------
    def fingerprint(self, epoch: int | None = None) -> str:
        """16 hex digits identifying the epoch's plan: the plan's own fingerprint for an
        offline selector. An online selector draws its batches as training goes, and part
        of its state (the examples this rank used) differs between ranks by design; its
        fingerprint covers what must agree: epoch, world size, batches per rank and
        :meth:`Selector.fingerprint <batchsel.selectors.Selector.fingerprint>` (class,
        settings such as seed and weights, and a digest of the data: embeddings, shards)."""
        epoch = self.epoch if epoch is None else check_int(epoch, "epoch", minimum=0)
        if not self.selector.online:
            self._background.apply_held_back()  # a plan drawn now must see the feedback so far
            return self.selector.plan(epoch, self.world_size).fingerprint()
        h = hashlib.sha256()
        digest([epoch, self.world_size, len(self), self.selector.fingerprint(self.world_size)], h)
        return h.hexdigest()[:16]

    def verify(self, epoch: int | None = None) -> str:
        """All-gather every rank's :meth:`fingerprint` (collective) and raise
        ``RuntimeError`` if they differ (different seeds, data or selector settings on
        different ranks would give overlapping or missing batches). Returns the
        fingerprint."""
        mine = self.fingerprint(epoch)
        if self.comm is None or self.world_size == 1:
            return mine
        prints = self.comm.allgather(mine)
        if len(set(prints)) != 1:
            raise RuntimeError(
                f"ranks disagree on the plan of epoch {self.epoch if epoch is None else epoch}: "
                f"fingerprints by rank {prints}"
            )
        return mine

    # The pickled form is the one from before BackgroundSelection: the feedback held back
    # as ``_deferred`` and no thread (``_worker``), so pickles load in either version. A
    # thread does not copy or pickle; a copy's iteration starts its own.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_deferred"] = [settle(o) for o in state.pop("_background").deferred]
        state["_buffer"] = [settle(o) for o in state["_buffer"]]
        state["_worker"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        deferred = state.pop("_deferred", [])
        state.pop("_worker", None)
        state.setdefault("timeout", 1800.0)  # pickled before these existed
        state.setdefault("_observe_calls", 0)
        state.setdefault("_waited", 0.0)
        state.setdefault("_handed", 0)
        uses = state.get("_uses_feedback", False)
        state.setdefault("_needed_fields", state["_feedback_fields"] - {"embeddings"} if uses else frozenset())
        state.setdefault("_fed", 0)
        state.setdefault("_passed", False)
        state.setdefault("_warned", set())
        self.__dict__.update(state)
        self._background = self._new_background(deferred)

    def _new_background(self, deferred: list[Observation]) -> BackgroundSelection:
        # a selector that reads feedback only when it plans an epoch gets it then, in one call
        per_epoch = bool(getattr(self.selector, "feedback_per_epoch", False))
        return BackgroundSelection(self._feed_selector, deferred, per_iteration=per_epoch)

    def __repr__(self) -> str:
        return (
            f"SelectionBatchSampler({self.selector!r}, rank={self.rank}, world_size={self.world_size}, "
            f"epoch={self.epoch}, sync_every={self.sync_every}, prefetch={self.prefetch})"
        )


class WeightedBatch(Sequence[tuple[int, float]]):
    """A batch of a weighted sampler (``SelectionBatchSampler(..., weighted=True)``): the
    ``(index, weight)`` pairs a DataLoader hands to :class:`WeightedDataset`, and the same
    as two arrays, :attr:`indices` (int64) and :attr:`weights` (float32), for a loop that
    indexes tensors itself (``torch.from_numpy(batch.indices)``). The arrays are the
    plan's own (not to be written to): no list of pairs is built unless the batch is
    iterated (on a sub-millisecond step that list and its conversion back cost as much as
    the sampler's whole work).

    Example
    -------
    >>> batch = WeightedBatch(np.array([3, 5]), np.array([1.0, 2.0], np.float32))
    >>> list(batch), batch[1], batch.indices.tolist(), batch == [(3, 1.0), (5, 2.0)]
    ([(3, 1.0), (5, 2.0)], (5, 2.0), [3, 5], True)
    """

    __slots__ = ("indices", "weights")

    def __init__(self, indices: np.ndarray, weights: np.ndarray) -> None:
        if len(indices) != len(weights):
            raise ValueError(f"{len(indices)} indices but {len(weights)} weights")
        self.indices, self.weights = indices, weights

    def __len__(self) -> int:
        return len(self.indices)

    @overload
    def __getitem__(self, k: int) -> tuple[int, float]: ...

    @overload
    def __getitem__(self, k: slice) -> list[tuple[int, float]]: ...

    def __getitem__(self, k: int | slice) -> tuple[int, float] | list[tuple[int, float]]:
        if isinstance(k, slice):
            return list(zip(self.indices[k].tolist(), self.weights[k].tolist()))
        return int(self.indices[k]), float(self.weights[k])

    def __iter__(self) -> Iterator[tuple[int, float]]:
        return zip(self.indices.tolist(), self.weights.tolist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, WeightedBatch):
            return np.array_equal(self.indices, other.indices) and np.array_equal(self.weights, other.weights)
        if isinstance(other, (list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # equal to a list of pairs, which has no hash

    def __repr__(self) -> str:
        return f"WeightedBatch({list(self)!r})"


class WeightedDataset:
    """Wraps a map-style dataset so that items become ``(*item, w)``: e.g. ``(x, y, w)``.

    ``w`` (a float32 scalar, collated to a float32 tensor) is the weight carried by the
    key when the batch sampler yields ``(index, weight)`` pairs
    (``SelectionBatchSampler(..., weighted=True)``, exact per batch and across worker
    processes), else ``weights[index]``, else 1.

    Example
    -------
    >>> data = [(0.5, 1), (1.5, 0)]
    >>> WeightedDataset(data, weights=[2.0, 3.0])[1]
    (1.5, 0, np.float32(3.0))
    >>> WeightedDataset(data)[(0, 7.0)]
    (0.5, 1, np.float32(7.0))
    """

    #: takes the ``(index, weight)`` keys of a weighted sampler (the sampler checks it)
    accepts_weighted_keys = True

    def __init__(self, dataset: Any, weights: Any = None) -> None:
        self.dataset = dataset
        if weights is not None:
            weights = np.asarray(tensor_to_numpy(weights), dtype=np.float32).reshape(-1)
            if len(weights) != len(dataset):
                raise ValueError(f"weights has {len(weights)} entries, the dataset {len(dataset)}")
            if not np.isfinite(weights).all() or (weights < 0).any():
                raise ValueError("weights must be finite and >= 0")
        self.weights = weights

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: Any) -> tuple:
        if isinstance(key, tuple):
            index, w = key
        else:
            index, w = key, (1.0 if self.weights is None else self.weights[key])
        item = self.dataset[index]
        item = tuple(item) if isinstance(item, (tuple, list)) else (item,)
        return (*item, np.float32(w))


__all__ = ["SelectionBatchSampler", "WeightedBatch", "WeightedDataset"]
