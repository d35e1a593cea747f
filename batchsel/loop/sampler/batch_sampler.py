"""The batch sampler: DistributedSampler's contract over a batchsel selector.

:class:`SelectionBatchSampler` keeps the contract (rank and world size, ``set_epoch``,
iteration, ``len``), the feedback (``observe``), the checks that every rank works from
the same plan (``fingerprint``, ``verify``) and resume (``state_dict`` /
``load_state_dict``), and hands the work to its parts:
:class:`~batchsel.loop.sampler.profile.SelectorProfile` (what kind of selector it drives),
:class:`~batchsel.loop.sampler.world.RankWorld` (ranks and communicator),
:class:`~batchsel.loop.sampler.lengths.EpochLengths`,
:class:`~batchsel.loop.sampler.resume.IterationRecord` (exact resume, its state typed in
:class:`~batchsel.loop.sampler.resume.SamplerState`),
:class:`~batchsel.loop.sampler.exchange.FeedbackExchange` (feedback across ranks and the
selection ahead) and :class:`~batchsel.loop.sampler.mistakes.LoopChecks` (the warnings).
Each part pickles as it is (threads and the DataLoader's iterator stay behind).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import sys
import time
from typing import Any, Iterator

import numpy as np

from batchsel.core.checks import check_int
from batchsel.core.state import check_version
from batchsel.core.world import World
from batchsel.distributed.comm import Communicator
from batchsel.loop.feedback import in_round_order
from batchsel.loop.sampler.elastic import elastic_remainder
from batchsel.loop.sampler.exchange import FeedbackExchange, gather_timeout
from batchsel.loop.sampler.frameworks import (
    EpochSetter,
    check_not_resharded,
    loader_iterator,
    saves_sampler_at_dispatch,
)
from batchsel.loop.sampler.lengths import EpochLengths
from batchsel.loop.sampler.mistakes import LoopChecks
from batchsel.loop.sampler.profile import SelectorProfile
from batchsel.loop.sampler.resume import EpochPosition, IterationRecord, RunRecord, SamplerState, every_rank
from batchsel.loop.sampler.weighted import WeightedBatch
from batchsel.loop.sampler.world import RankWorld
from batchsel.selectors.hashing import digest
from batchsel.selectors.selector import Selector

#: seconds a state call across ranks (``state_dict(all_ranks=True)``, ``verify``) waits
#: for every rank by default before it raises, naming the call: such calls come at fixed
#: points of a loop, where ranks meet within moments unless one does not make the call
STATE_CALL_TIMEOUT = 30.0


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
    selector : Selector
        A :class:`~batchsel.selectors.Selector` (random, submodular, loss-rank, ...).
    rank, world_size : int, optional
        This process's rank and the number of ranks. Missing values come from the
        communicator (torch.distributed if initialized, else MPI under mpiexec, else
        torchrun's variables, else one process), looked up when an epoch's iteration
        starts: a sampler built before the process group exists (in a Lightning module's
        ``__init__``) still gets the right rank. Explicit values that contradict an
        initialized torch.distributed raise ``ValueError``.
    seed : int, optional
        DistributedSampler's ``seed``: the seed lives in the selector, so this only checks
        that it is the selector's (``ValueError`` otherwise). Every rank must use the same
        seed: :meth:`verify` checks that.
    comm : Communicator, optional
        A :class:`~batchsel.distributed.comm.Communicator`; default chosen by
        :func:`~batchsel.distributed.comm.get_communicator` (under mpiexec with
        torch.distributed set up from MPI: MPI, whose shared-memory collectives carry a
        step's feedback faster than gloo; under torchrun: torch.distributed). With explicit
        ``rank`` and ``world_size`` that do not match the environment (e.g. simulating
        ranks in one process) there is none, and feedback stays local.
    sync_every : int, default 4
        For online selectors in a multi-rank job, every ``sync_every``-th call of
        :meth:`observe` all-gathers the buffered feedback so each rank's selector sees
        everyone's. ``observe`` is then collective: every rank must call it equally often
        (one call per step in a DDP loop does that). With 4 a selector sees the other
        ranks' feedback up to 3 steps late, for a quarter of the collectives (why 4:
        docs/design/sampler.md). 1 shares every step's feedback at once.
    weighted : bool, optional
        Yield each batch as a :class:`WeightedBatch`: ``(index, weight)`` pairs with the
        plan's weights (weighted coresets, InfoBatch), instead of plain indices: wrap the
        dataset in :class:`WeightedDataset` to get ``(x, y, w)`` items, or index tensors
        with the batch's ``indices`` and ``weights`` arrays. Offline selectors only.
        Default ``None``: plain indices, with a warning when the selector's plans carry
        weights (``weighted_plans``: :class:`~batchsel.InfoBatchSelector`,
        :class:`~batchsel.CoresetSelector`), whose batches are then trained on without
        them; ``weighted=False`` drops them knowingly, without the warning.
    drop_last : bool, default False
        BatchSampler's: drop each rank's last batch when it is short (RandomSelector and
        CoresetSelector, whose batches are full but the last; the same on every rank).
        The selector's own ``drop_last`` is DistributedSampler's (pad or drop examples).
    prefetch : int, optional
        How many batches are selected ahead of the one the loop asks for: the feedback lag.
        Default ``None``: the selector's ``default_prefetch``, 1 for SMDL (its selection
        is hidden beside the step), 0 for the rest (loss-rank's cheap selection is not
        worth a lag that cost it accuracy on short runs; offline plans are made at the
        epoch's start). On an accelerator ``prefetch=1`` also spares loss-rank a device
        sync per step (:meth:`observe`). The batches depend on the lag only, never on
        whether a thread did the work: a background thread selects while the training step
        runs when this process has two cores of its own
        (:func:`~batchsel.loop.prefetch.cores_of_this_rank`) and a selection costs more
        than handing it over; otherwise the training thread selects each batch when it is
        needed, from the same feedback. :meth:`cost` reports what selection cost and what
        the training thread still paid.

        A DataLoader with workers asks for ``num_workers * prefetch_factor`` batches ahead
        of the loop (``workers_ahead``): that window is part of the lag, and the sampler
        selects only the rest ahead itself. With ``prefetch`` at least the window the
        batches are those of ``num_workers=0`` with the same ``prefetch``; a smaller one
        gets the window's lag and a warning. Selectors without feedback (random, graph
        blocks, offline plans) yield exactly the batches of ``prefetch=0``.

        In the usual loop (``for batch in loader: step; observe``) batch ``t + 1`` is
        selected from the feedback of batches ``<= t - 1`` with ``prefetch=1`` (``<= t``
        with ``prefetch=0``). While an iteration with prefetch is running, feedback must go
        through :meth:`observe` (not ``selector.observe``) and settings of the selector
        must not change. The exact rule, the thread and their measurements:
        docs/design/sampler.md.
    timeout : float or None, default 1800.0
        Seconds a feedback all-gather waits for every rank (torch's process-group
        default) before it raises ``RuntimeError`` naming the collective; under mpiexec
        the abort hook then ends every rank, so a rank that stopped calling :meth:`observe`
        ends the job instead of hanging it; one that exited (``sys.exit``) tells the
        waiting ranks at once, which raise then, naming it. ``None``: wait as long as it
        takes. Over torch.distributed the process group's own ``timeout`` applies. Each
        all-gather also checks that every rank is at the same :meth:`observe` call of the
        same epoch (``RuntimeError`` naming each rank's call otherwise).

    workers_ahead : int, default 0
        The batches the DataLoader's workers fetch ahead of the training loop:
        ``num_workers * prefetch_factor`` (torch's ``prefetch_factor`` is 2 by default),
        0 without workers. Stated, not guessed: the feedback lag (``prefetch``) counts it,
        and :meth:`state_dict` subtracts it from the batches handed out, so a checkpoint
        counts the batches the loop trained, not those the workers fetched. Where the
        DataLoader is seen to fetch another number ahead, a warning names the value and
        :meth:`state_dict` refuses to count (``batches_done=step`` is exact in any loop).
        The Lightning and Hugging Face integrations pass their step count themselves.

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
        workers_ahead: int = 0,
    ) -> None:
        profile = self._profile = SelectorProfile(selector)  # TypeError for anything else
        profile.check_seed(seed)
        self.selector = selector
        self.sync_every = check_int(sync_every, "sync_every", minimum=1)
        self.prefetch = profile.default_prefetch if prefetch is None else check_int(prefetch, "prefetch", minimum=0)
        self.timeout = gather_timeout(timeout)
        self.workers_ahead = check_int(workers_ahead, "workers_ahead", minimum=0)
        self._checks = LoopChecks(profile)
        self._checks.weights_dropped(weighted)
        self.weighted, self.drop_last = bool(weighted), bool(drop_last)
        profile.check_options(self.weighted, self.drop_last)
        #: what Lightning and accelerate call ``set_epoch`` on (``batch_sampler.sampler``)
        self.sampler = EpochSetter(self)
        self._world = RankWorld(rank, world_size, comm, check=selector.check_world)
        self.epoch = 0
        self._lengths = EpochLengths(profile, self.drop_last)
        self._record = IterationRecord()
        self._feedback = FeedbackExchange(profile, self._world, self._record, self._batches_in_epoch)
        self._waited, self._handed = 0.0, 0  # the training thread's seconds in the sampler; batches
        # the latest batch handed out as a list: (that list, a copy, its array). The README's
        # loop hands that list back to observe, which then reads the array, not the list
        self._last_list: tuple[list[int], list[int], np.ndarray] | None = None

    # -- rank and world size ------------------------------------------------------------
    @property
    def rank(self) -> int:
        """This process's rank (looked up on first use when not given)."""
        return self._world.rank

    @property
    def world_size(self) -> int:
        """The number of ranks (looked up on first use when not given)."""
        return self._world.world_size

    @property
    def comm(self) -> Communicator | None:
        """The communicator feedback and :meth:`verify` go through (None: local only)."""
        return self._world.comm

    @comm.setter
    def comm(self, comm: Communicator | None) -> None:
        self._world.found = comm

    @property
    def batch_size(self) -> int:
        """The selector's batch size (BatchSampler's attribute, read by frameworks)."""
        return self.selector.batch_size

    @property
    def resume_point(self) -> tuple[int, int] | None:
        """``(epoch, batches done in it)`` of the state :meth:`load_state_dict` read, until
        that epoch's iteration begins; None otherwise. A framework that places its own
        resumed step from its step count (the Hugging Face Trainer) takes it from here
        where epochs differ from the ones it counted (a state of another number of ranks).

        >>> from batchsel import RandomSelector
        >>> sampler = SelectionBatchSampler(RandomSelector(10, 2), rank=0, world_size=1)
        >>> sampler.set_epoch(1)
        >>> it = iter(sampler)
        >>> done = [next(it) for _ in range(3)]
        >>> sampler.load_state_dict(sampler.state_dict(batches_done=3))
        >>> sampler.resume_point
        (1, 3)
        """
        place = self._record.resume
        return None if place is None else (place.epoch, place.batches_done)

    @property
    def interrupted_epoch(self) -> int | None:
        """The epoch that a state saved on another number of ranks left to finish here (its
        length on this rank is the steps done before the save and those left, as
        ``len(sampler)`` and :meth:`total_batches` count it); None without one."""
        rest = self._record.remainder
        return None if rest is None else rest.epoch

    # -- the DistributedSampler contract ------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose batches the next iteration yields."""
        self.epoch = check_int(epoch, "epoch", minimum=0)

    def __len__(self) -> int:
        """This rank's batches in the epoch set by :meth:`set_epoch`."""
        return self._batches_in_epoch(self.epoch)

    def batches_in_epoch(self, epoch: int) -> int:
        """This rank's batches in ``epoch``: ``len(sampler)`` once ``set_epoch(epoch)`` is
        called; after loading a state saved on another number of ranks, the interrupted
        epoch's as it finishes on this world (its steps before the interruption included).

        >>> from batchsel import RandomSelector
        >>> SelectionBatchSampler(RandomSelector(10, 4), rank=0, world_size=1).batches_in_epoch(0)
        3
        """
        return self._batches_in_epoch(check_int(epoch, "epoch", minimum=0))

    def _batches_in_epoch(self, epoch: int) -> int:
        # the sampler's own calls (every observe of a multi-rank job): the epoch is its own
        rest = self._record.remainder
        if rest is not None and rest.epoch == epoch:  # finishing an epoch saved on another number of ranks
            return rest.length
        return self._lengths.of(epoch, self.world_size)

    def total_batches(self, epochs: int) -> int:
        """This rank's batches over epochs ``0 .. epochs - 1``: the optimizer steps of the
        run, to size a learning-rate schedule with (``OneCycleLR(total_steps=...)``).
        Exact, also where epochs differ in length (:class:`~batchsel.InfoBatchSelector`;
        ``epochs`` must then be the run the selector was built for, else ``ValueError``).

        >>> from batchsel import RandomSelector
        >>> SelectionBatchSampler(RandomSelector(10, 4), rank=0, world_size=1).total_batches(epochs=5)
        15

        After loading a state saved on another number of ranks, the interrupted epoch
        counts the steps done before and those left on this world.
        """
        total = self._lengths.total(epochs, self.world_size)
        rest = self._record.remainder
        if rest is not None and rest.epoch < epochs:
            total += rest.length - self._lengths.of(rest.epoch, self.world_size)
        return total

    def __iter__(self) -> Iterator[Any]:  # lists of indices; WeightedBatch with weighted=True
        # a process group may exist now (one process so far), and it must agree with
        # explicit values; a multi-rank answer is final
        self._world.refresh()
        # torch's frames are read to refuse accelerate's re-sharding and to warn where the
        # loader's look-ahead is not the one stated; no batch depends on them
        caller = sys._getframe(1)
        check_not_resharded(caller, self)
        loader = loader_iterator(caller, self)
        del caller
        window = self.workers_ahead
        seen, mismatch = self._checks.loader(loader, self.weighted, self.prefetch, window)
        feedback, record = self._feedback, self._record
        feedback.background.stop()  # an earlier iteration left unfinished: its selection ends first
        epoch = self.epoch
        self._checks.previous_pass(record, epoch, feedback.fed)
        start, pending, skip = record.begin(epoch)
        if loader is not None and saves_sampler_at_dispatch(loader):
            record.attach(None, 0)  # torchdata's loader saves the sampler as it dispatches: that count is its own
        else:
            record.attach(loader, window, mismatch)
        del loader  # the generator must not keep the loop's iterator alive
        feedback.restart()
        unfed_after = feedback.unfed_after(self.prefetch, seen)  # observe() forgotten after these
        for _ in range(skip):  # finished batches that the framework skips itself, unseen
            record.yielded += 1
            yield []
        # the replayed batches were drawn before the checkpoint; the selector resumes after them
        source: Any = itertools.chain(((np.asarray(b), None) for b in pending), self._batches_from(epoch, start))
        source = itertools.islice(source, max(len(self) - record.base, 0))
        source = feedback.background.run(source, feedback.depth(self.prefetch, window))
        keep = self._profile.records_batches
        try:
            while True:
                asked = time.perf_counter()
                try:
                    batch, weights = next(source)
                except StopIteration:
                    record.finish()
                    return
                finally:
                    self._waited += time.perf_counter() - asked
                if (
                    unfed_after is not None
                    and not feedback.fed
                    and len(record.history) >= unfed_after
                    and self.selector.wants_feedback()
                ):
                    self._checks.unfed(epoch, len(record.history))
                record.handed(batch, keep)
                self._handed += 1
                if weights is not None:
                    yield WeightedBatch(batch, weights)
                    continue
                handed = batch.tolist()
                if keep:
                    self._last_list = (handed, handed.copy(), batch)
                yield handed
        finally:  # a loop that breaks early: the prefetch thread stops now, not at garbage collection
            source.close()

    def _batches_from(self, epoch: int, start: int) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        """The rank's ``(batch, weights)`` of ``epoch`` from step ``start`` on: the selector's,
        or the remainder of an epoch saved on another number of ranks."""
        rest = self._record.remainder
        if rest is None or rest.epoch != epoch:
            return self._profile.batches(epoch, self.rank, self.world_size, start, self.weighted)
        if rest.batches is None:  # an online selector's run, rejoined at ``rest.start``
            return self._profile.batches(epoch, self.rank, self.world_size, start - rest.first + rest.start)
        if not self.weighted:
            return ((b, None) for b, _ in rest.items(start))
        return ((b, np.ones(len(b), np.float32) if w is None else w) for b, w in rest.items(start))

    # -- feedback -----------------------------------------------------------------------
    def observe(self, indices: Any, losses: Any = None, logits: Any = None, embeddings: Any = None) -> None:
        """Hand the selector feedback on the examples ``indices`` (a batch just trained
        on): per-example ``losses``, ``logits`` (rows), ``embeddings`` (rows); numpy
        arrays or tensors (detached here). A selector that does not read feedback
        (e.g. RandomSelector) costs nothing here.

        Only what the selector reads (its ``feedback_fields``) is kept; a call whose
        feedback is all unread is dropped (SubmodularSelector at its default weights reads
        embeddings only, so logits cost nothing). In a multi-rank job with a selector
        that uses feedback, the rest is buffered and all-gathered every ``sync_every``
        calls (a collective); every rank's selector then observes every rank's feedback,
        in the same order. So every rank calls ``observe`` alike: as often, with the same
        kinds of feedback. A selector that no longer reads it (``selector.wants_feedback()``
        False: AutoSelector after its fallback to random batches) costs nothing here either.
        """
        if not self._profile.uses_feedback or not self.selector.wants_feedback():
            return
        start = time.perf_counter()
        last = self._last_list
        if last is not None and indices is last[0] and indices == last[1]:
            indices = last[2]  # the list handed out, unchanged: its array, not a conversion
        try:
            self._feedback.observe(
                indices, losses, logits, embeddings, sync_every=self.sync_every, timeout=self.timeout
            )
        finally:
            self._waited += time.perf_counter() - start

    def sync(self) -> None:
        """All-gather the buffered feedback now (collective) and hand it to the selector:
        round by round (call order), rank by rank within a round."""
        self._feedback.sync(self.timeout)

    def batch_indices(self, batch: int) -> np.ndarray:
        """The example indices of batch number ``batch`` (counted from the epoch's start) of
        the epoch being iterated, as handed out: for a framework that gives feedback after
        the fact by batch number (Lightning's ``batch_idx``), without an index column in
        the data. Recorded for selectors that use feedback.

        >>> from batchsel import LossRankSelector
        >>> sampler = SelectionBatchSampler(LossRankSelector(10, 2), rank=0, world_size=1)
        >>> first = next(iter(sampler))
        >>> sampler.batch_indices(0).tolist() == first
        True
        """
        batch = check_int(batch, "batch", minimum=0)
        if not self._profile.records_batches:
            raise ValueError(f"{self._profile.name} uses no feedback: its batches are not recorded")
        return self._record.batch(batch)

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
        clock = self._feedback.background.clock
        exposed = max(0.0, self._waited - clock.compile)
        return {
            "batches": float(self._handed),
            "selection": clock.select,
            "compile": clock.compile,
            "training_thread": exposed,
            "ms_per_batch": 1e3 * exposed / max(self._handed, 1),
        }

    # -- agreement across ranks -----------------------------------------------------------
    def fingerprint(self, epoch: int | None = None) -> str:
        """16 hex digits identifying the epoch's plan: the plan's own fingerprint for an
        offline selector. An online selector draws its batches as training goes, and part
        of its state (the examples this rank used) differs between ranks by design; its
        fingerprint covers what must agree: epoch, world size, batches per rank and
        :meth:`Selector.fingerprint <batchsel.selectors.Selector.fingerprint>` (class,
        settings such as seed and weights, and a digest of the data: embeddings, shards).

        >>> from batchsel import RandomSelector
        >>> sampler = SelectionBatchSampler(RandomSelector(10, 2, seed=0), rank=0, world_size=1)
        >>> sampler.verify() == sampler.fingerprint(), len(sampler.fingerprint())
        (True, 16)
        """
        epoch = self.epoch if epoch is None else check_int(epoch, "epoch", minimum=0)
        if not self._profile.online:
            self._feedback.background.apply_held_back()  # a plan drawn now must see the feedback so far
            return self.selector.plan(epoch, self.world_size).fingerprint()
        h = hashlib.sha256()
        digest([epoch, self.world_size, len(self), self.selector.fingerprint(self.world_size)], h)
        return h.hexdigest()[:16]

    def verify(self, epoch: int | None = None, timeout: float | None = STATE_CALL_TIMEOUT) -> str:
        """All-gather every rank's :meth:`fingerprint` (collective) and raise
        ``RuntimeError`` if they differ (different seeds, data or selector settings on
        different ranks would give overlapping or missing batches). Returns the
        fingerprint. A rank that does not make the call fails the others within
        ``timeout`` seconds (MPI, torch.distributed over gloo), naming it."""
        mine = self.fingerprint(epoch)
        comm = self.comm
        if comm is None or self.world_size == 1:
            return mine
        wait = getattr(comm, "wait_for_ranks", None)
        if wait is not None:
            wait("sampler.verify(), a collective", timeout)
        prints = comm.allgather(mine)
        if len(set(prints)) != 1:
            raise RuntimeError(
                f"ranks disagree on the plan of epoch {self.epoch if epoch is None else epoch}: "
                f"fingerprints by rank {prints}"
            )
        return mine

    # -- resume -------------------------------------------------------------------------
    def state_dict(
        self, batches_done: int | None = None, all_ranks: bool = False, timeout: float | None = STATE_CALL_TIMEOUT
    ) -> dict[str, Any]:
        """Everything needed to resume this rank mid-epoch (arrays as torch tensors, so
        ``torch.save`` / ``torch.load(weights_only=True)`` handle it with the model's state).

        ``batches_done``: the batches of the current epoch the loop has finished. The
        default, the batches handed out less the ``workers_ahead`` the DataLoader's
        workers hold, is exact for a checkpoint taken after a step; in an epoch's last
        ``workers_ahead`` batches it needs the loader's own count, and without one it
        raises ``ValueError`` naming the exact form: pass your step count.
        Batches an online selector drew ahead of that point are replayed first on resume.

        ``all_ranks=True`` (collective: every rank calls it) returns every rank's state in
        one dict, so that rank 0 alone can save the checkpoint; :meth:`load_state_dict`
        picks its own part. A rank that does not make the call fails the others within
        ``timeout`` seconds (MPI, torch.distributed over gloo), naming the call.

        With ``prefetch``, the selections in flight are waited for: their batches are saved
        as pending (replayed first on resume), the feedback not yet handed to the selector
        under ``deferred``, and the selector's state is the one after those selections.
        """
        ahead, deferred = self._feedback.held()
        place = self._record.saved(self.epoch, batches_done, ahead, self._profile.online)
        run = RunRecord.of(self.selector, self.rank, self.world_size, self._batches_in_epoch(place.epoch))
        rest = self._record.remainder
        rest = rest if rest is not None and rest.epoch == place.epoch else None
        state = SamplerState(run, place, self.selector.state_dict(), list(self._feedback.buffer), deferred, rest)
        saved = state.to_dict()
        return every_rank(saved, self.comm, self.world_size, timeout) if all_ranks else saved

    def load_state_dict(self, state: dict[str, Any], placeholders: bool = False) -> None:
        """Restore :meth:`state_dict`'s output (this version's, or 0.1.0's): the next
        iteration over the saved epoch yields exactly the batches that were still to come
        (call :meth:`set_epoch` with that epoch as usual; another epoch starts from its
        beginning). A state that does not load (another seed, method, dataset size or
        batch size, a truncated or foreign dict) raises ``ValueError`` naming the
        difference and leaves the sampler as it was.

        Every rank's state (``state_dict(all_ranks=True)``) also loads on another number of
        ranks (elastic resume): the saved epoch's batches not trained yet are dealt over
        this job's ranks, the same number of steps on each, and the feedback is kept; an
        online selector draws the steps left from it. :meth:`total_batches` then counts
        the steps left, to rebuild a learning-rate schedule; later epochs are this world's
        own (docs: the distributed guide, "Preemption and elastic resume").

        ``placeholders=True`` is for a framework that skips the finished batches itself
        (the Hugging Face Trainer's ``skip_first_batches`` drops the first ``k`` batches of
        the batch sampler unseen): the next iteration first yields one empty batch for
        each finished one, so the framework's count and the sampler's agree and no batch
        is skipped twice."""
        before = self._restore_point()
        try:
            self._load(state, placeholders)
        except BaseException:
            self._roll_back(before)
            raise

    def _load(self, state: Any, placeholders: bool) -> None:
        if not isinstance(state, dict):
            raise ValueError(f"a sampler state is a dict, got {type(state).__name__}")
        state = check_version(state, "SelectionBatchSampler")
        ranks = state.get("ranks")
        if isinstance(ranks, (list, tuple)) and len(ranks) != self.world_size:
            self._load_elastic([SamplerState.from_dict(r, lambda: (self.rank, self.world_size)) for r in ranks])
            self._record.placeholders = bool(placeholders)
            return
        saved = SamplerState.from_dict(state, lambda: (self.rank, self.world_size))
        if saved.run.world_size == 1 and self.world_size > 1:  # a one-rank job's state is every rank's
            self._load_elastic([saved])
            self._record.placeholders = bool(placeholders)
            return
        if saved.run.world_size != self.world_size:
            raise ValueError(
                f"the state is rank {saved.run.rank}'s of {saved.run.world_size} ranks, this sampler is rank "
                f"{self.rank} of {self.world_size}: to resume on another number of ranks save every rank's "
                f"state, sampler.state_dict(all_ranks=True)"
            )
        place = saved.place
        self._record.remainder = saved.remainder
        epoch_length = self._batches_in_epoch(place.epoch)
        saved.run.check_resumed_by(RunRecord.of(self.selector, self.rank, self.world_size, epoch_length))
        if place.position > epoch_length:
            raise ValueError(f"the state's position {place.position} is past the epoch's {epoch_length} batches")
        self._feedback.background.stop(flush=False)  # an iteration with prefetch still running: its thread stops first
        self.selector.load_state_dict(saved.selector)
        self._feedback.restore(saved.observations, saved.deferred)
        self._record.restart_at(place, placeholders)
        self.epoch = place.epoch

    def _load_elastic(self, saved: list[SamplerState]) -> None:
        """Continue the saved epoch of every old rank's ``saved`` state on this world."""
        if not self._profile.capabilities.elastic_resume:
            raise ValueError(
                f"{self._profile.name} cannot resume on another number of ranks (the state holds {len(saved)} "
                f"ranks, this job has {self.world_size}): a step's batches are cut for the ranks that drew them. "
                f"Resume on {len(saved)} ranks, or start the next epoch here without the state"
            )
        for state in saved:
            mine = RunRecord.of(self.selector, state.run.rank, state.run.world_size, None)
            dataclasses.replace(state.run, num_batches=None).check_resumed_by(mine)
        self._feedback.background.stop(flush=False)
        self.selector.load_state_dict(saved[0].selector)
        # the old ranks' feedback not applied yet: what a prefetch run held back (the same on
        # every rank), then every rank's buffer in the order their all-gather would apply it
        unapplied = list(saved[0].deferred) + in_round_order([list(s.observations) for s in saved])
        self._record.remainder = None
        rest = elastic_remainder(
            saved,
            self._profile,
            self._lengths,
            World(self.rank, self.world_size),
            feed=lambda: self._feedback.feed_selector([dict(o) for o in unapplied]),
        )
        self._feedback.restore([], [])
        self._record.remainder = rest
        self._record.restart_at(EpochPosition(rest.epoch, rest.first), False)
        self.epoch = rest.epoch

    def _restore_point(self) -> tuple[Any, ...]:
        """What a load changes, to put back where it fails."""
        record, feedback = self._record, self._feedback
        return (
            self.selector.state_dict(),
            record.resume,
            record.placeholders,
            record.remainder,
            list(feedback.buffer),
            list(feedback.background.deferred),
            self.epoch,
        )

    def _roll_back(self, before: tuple[Any, ...]) -> None:
        selector_state, resume, placeholders, remainder, buffer, deferred, epoch = before
        self.selector.load_state_dict(selector_state)
        record = self._record
        record.resume, record.placeholders, record.remainder = resume, placeholders, remainder
        self._feedback.restore(buffer, deferred)
        self.epoch = epoch

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "_record" not in state:  # the flat form 0.1.0 pickled
            raise ValueError(
                "this SelectionBatchSampler was pickled by batchsel 0.1.0, whose pickled form this release "
                "does not read: save sampler.state_dict() and load it into a new sampler (states carry "
                "across releases)"
            )
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return (
            f"SelectionBatchSampler({self.selector!r}, rank={self.rank}, world_size={self.world_size}, "
            f"epoch={self.epoch}, sync_every={self.sync_every}, prefetch={self.prefetch})"
        )


__all__ = ["SelectionBatchSampler"]
