"""The torch side: a batch sampler for ``DataLoader(batch_sampler=...)`` and a weighted
dataset wrapper.

:class:`SelectionBatchSampler` is a drop-in for ``DistributedSampler`` + ``BatchSampler``
whose batches come from a batchsel :class:`~batchsel.selectors.Selector`. It adds what
DistributedSampler lacks: exact mid-epoch resume, feedback from the training loop
(per-example losses / logits / embeddings, shared across ranks), and a check that every
rank works from the same plan. torch itself is imported only where a tensor is touched,
so ``import batchsel`` stays light.
"""
from __future__ import annotations

import hashlib
import inspect
import itertools
import logging
from typing import Any, Iterator

import numpy as np

from batchsel._checks import check_int, check_seed, tensor_to_numpy
from batchsel.selectors.base import Selector, digest

from .comm import Communicator, get_communicator

logger = logging.getLogger(__name__)

STATE_VERSION = 1
_FEEDBACK = ("losses", "logits", "embeddings")


def _to_numpy(x: Any) -> np.ndarray:
    return np.asarray(tensor_to_numpy(x))


def _portable(obj: Any) -> Any:
    """numpy arrays -> torch tensors, numpy scalars -> Python scalars (recursively), so a
    state saved with ``torch.save`` loads with ``torch.load``'s default ``weights_only``."""
    if isinstance(obj, dict):
        return {k: _portable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_portable(v) for v in obj)
    if isinstance(obj, np.ndarray) and obj.dtype != object:
        import torch

        return torch.from_numpy(np.array(obj, copy=True))
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def _from_portable(obj: Any) -> Any:
    """The inverse of :func:`_portable`: tensors back to numpy arrays."""
    if isinstance(obj, dict):
        return {k: _from_portable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_from_portable(v) for v in obj)
    if hasattr(obj, "detach") and hasattr(obj, "numpy"):
        return _to_numpy(obj)
    return obj


class SelectionBatchSampler:
    """Yields this rank's batches (lists of int indices) of a selector's epoch plan.

    Use it as ``DataLoader(dataset, batch_sampler=sampler)``; ``num_workers > 0`` works
    (the sampler runs in the main process, where the training loop also calls
    :meth:`observe`).

    Parameters
    ----------
    selector:
        A :class:`~batchsel.selectors.Selector` (random, submodular, loss-rank, ...).
    rank, world_size:
        This process's rank and the number of ranks. Missing values come from the
        communicator (torch.distributed if initialized, else MPI under mpiexec, else
        torchrun's variables, else one process).
    seed:
        DistributedSampler's ``seed``: the seed lives in the selector, so this only checks
        that it is the selector's (``ValueError`` otherwise). Every rank must use the same
        seed: :meth:`verify` checks that.
    comm:
        A :class:`~batchsel.integrations.comm.Communicator`; default chosen by
        :func:`~batchsel.integrations.comm.get_communicator`. With explicit ``rank`` and
        ``world_size`` that do not match the environment (e.g. simulating ranks in one
        process) there is none, and feedback stays local.
    sync_every:
        For online selectors in a multi-rank job, every ``sync_every``-th call of
        :meth:`observe` all-gathers the buffered feedback so each rank's selector sees
        everyone's. ``observe`` is then collective: every rank must call it equally often
        (one call per step in a DDP loop does that).
    weighted:
        Yield ``(index, weight)`` pairs with the plan's weights (weighted coresets)
        instead of plain indices; wrap the dataset in :class:`WeightedDataset` to get
        ``(x, y, w)`` items. Offline selectors only.

    The contract is DistributedSampler's: call :meth:`set_epoch` before each epoch,
    ``len(sampler)`` batches on every rank (padding or dropping follows the selector's
    ``drop_last``), randomness from (seed, epoch) only.

    Example
    -------
    >>> from batchsel import RandomSelector
    >>> sampler = SelectionBatchSampler(RandomSelector(10, batch_size=4, seed=0), rank=0, world_size=2)
    >>> sampler.set_epoch(1)
    >>> len(sampler), [len(b) for b in sampler]
    (2, [4, 1])
    >>> state = sampler.state_dict()     # resume point: here, the end of epoch 1
    """

    def __init__(
        self,
        selector: Selector,
        rank: int | None = None,
        world_size: int | None = None,
        seed: int | None = None,
        comm: Communicator | None = None,
        sync_every: int = 1,
        weighted: bool = False,
    ) -> None:
        if not isinstance(selector, Selector):
            raise TypeError(f"selector must be a batchsel Selector, got {type(selector).__name__}")
        if seed is not None and check_seed(seed) != selector.seed:
            # a selector may have used its seed already (coresets, GreedMax shards): no override
            raise ValueError(f"seed={seed} but the selector was built with seed={selector.seed}; "
                             f"build it with seed={seed}")
        self.selector = selector
        self.sync_every = check_int(sync_every, "sync_every", minimum=1)
        self.weighted = bool(weighted)
        if self.weighted and selector.online:
            raise ValueError(f"weighted=True needs an offline selector (a plan with weights); "
                             f"{type(selector).__name__} is online")
        self.comm, self.rank, self.world_size = self._resolve_world(rank, world_size, comm)
        selector._check_world(self.world_size, self.rank)
        try:
            self._takes_start = "start" in inspect.signature(selector.iter_batches).parameters
        except (TypeError, ValueError):
            self._takes_start = False
        self.epoch = 0
        self._len: int | None = None
        self._resume: dict[str, Any] | None = None
        self._iter_epoch: int | None = None  # epoch of the latest iteration
        self._iter_base = 0                  # batch number the latest iteration started from
        self._yielded = 0                    # batches of _iter_epoch handed out so far
        self._history: list[np.ndarray] = []  # batches handed out by the latest iteration (online)
        self._iter_pending: list[np.ndarray] = []  # batches that iteration replays from a checkpoint
        # feedback is gathered across ranks only for selectors that use it (not RandomSelector)
        self._uses_feedback = type(selector).observe is not Selector.observe
        self._buffer: list[dict[str, np.ndarray | None]] = []  # feedback not yet all-gathered
        self._warned_local = False

    @staticmethod
    def _resolve_world(rank: int | None, world_size: int | None,
                       comm: Communicator | None) -> tuple[Communicator | None, int, int]:
        if rank is not None:
            rank = check_int(rank, "rank", minimum=0)
        if world_size is not None:
            world_size = check_int(world_size, "world_size", minimum=1)
        if comm is None:
            found = get_communicator("auto")
            if rank is None or world_size is None or (found.rank, found.size) == (rank, world_size):
                comm = found
            else:
                logger.debug("rank %d / world %d given and not this job's %r: no communicator",
                             rank, world_size, found)
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
        if self._len is None:  # the same every epoch (the selector contract); may cost a plan
            self._len = self.selector.num_batches(self.world_size)
        return self._len

    def __iter__(self) -> Iterator[list]:
        epoch = self.epoch
        start, pending = 0, []
        if self._resume is not None and self._resume["epoch"] == epoch:
            start, pending = self._resume["position"], self._resume["pending"]
        self._resume = None
        self._iter_epoch, self._iter_base, self._iter_pending = epoch, start - len(pending), list(pending)
        self._yielded, self._history = self._iter_base, []
        # the replayed batches were drawn before the checkpoint; the selector resumes after them
        source = itertools.chain(((np.asarray(b), None) for b in pending), self._batches(epoch, start))
        for batch, weights in source:
            self._yielded += 1
            if self.selector.online:
                self._history.append(batch)
            if weights is None:
                yield batch.tolist()
            else:
                yield list(zip(batch.tolist(), weights.tolist()))

    def _batches(self, epoch: int, start: int) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        if self.weighted:
            plan = self.selector.plan(epoch, self.world_size)
            batches, weights = plan.batches(self.rank), plan.weights(self.rank)
            for t in range(start, len(batches)):
                w = np.ones(len(batches[t]), np.float32) if weights is None else weights[t]
                yield batches[t], w
            return
        if self._takes_start:
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
        """
        if self._resume is not None:  # loaded and not iterated yet: unchanged
            state = dict(self._resume, selector=self.selector.state_dict(), observations=list(self._buffer))
        else:
            active = self._iter_epoch == self.epoch
            yielded = self._yielded if active else 0
            done = yielded if batches_done is None else check_int(batches_done, "batches_done", minimum=0)
            if done > yielded:
                raise ValueError(f"batches_done={done} but only {yielded} batches of epoch {self.epoch} were handed out")
            pending: list[np.ndarray] = []
            if self.selector.online and active:
                if done < self._iter_base:
                    raise ValueError(f"batches_done={done} is before this iteration's start ({self._iter_base})")
                # batches drawn so far: the replayed ones (some maybe not handed out yet) and the new ones
                drawn = self._history if len(self._history) >= len(self._iter_pending) else self._iter_pending
                pending = [np.array(b, dtype=np.int64) for b in drawn[done - self._iter_base:]]
            state = {"epoch": self.epoch, "position": done + len(pending), "pending": pending,
                     "selector": self.selector.state_dict(), "observations": list(self._buffer)}
        state.update(version=STATE_VERSION, rank=self.rank, world_size=self.world_size, seed=self.selector.seed,
                     method=type(self.selector).__name__, batches_done=state["position"] - len(state["pending"]),
                     num_examples=self.selector.num_examples, batch_size=self.selector.batch_size,
                     num_batches=len(self))
        if all_ranks:
            if self.comm is None:
                raise ValueError("all_ranks=True needs a communicator (this sampler has none)")
            state = {"version": STATE_VERSION, "world_size": self.world_size, "ranks": self.comm.allgather(state)}
        return _portable(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output: the next iteration over the saved epoch
        yields exactly the batches that were still to come (call :meth:`set_epoch` with
        that epoch as usual; another epoch starts from its beginning)."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError(f"not a SelectionBatchSampler state (version {STATE_VERSION}): {type(state).__name__}")
        state = _from_portable(state)
        if "ranks" in state:
            if len(state["ranks"]) != self.world_size:
                raise ValueError(f"the state holds {len(state['ranks'])} ranks, this job has {self.world_size}")
            state = state["ranks"][self.rank]
        missing = sorted({"rank", "world_size", "seed", "method", "epoch", "position", "pending", "selector",
                          "observations"} - set(state))
        if missing:
            raise ValueError(f"the state lacks {missing}: pass what SelectionBatchSampler.state_dict() returned")
        # Another dataset size, batch size or batch count puts the saved position at
        # another point of the epoch (offline selectors have no state of their own to
        # object). States written before these were recorded skip them.
        for key, mine in (("rank", self.rank), ("world_size", self.world_size), ("seed", self.selector.seed),
                          ("method", type(self.selector).__name__), ("num_examples", self.selector.num_examples),
                          ("batch_size", self.selector.batch_size), ("num_batches", len(self))):
            if key in state and state[key] != mine:
                raise ValueError(f"the state was saved with {key}={state[key]!r}, this sampler has {mine!r}; "
                                 f"resume with the data and selector settings of the saved run")
        position = check_int(state["position"], "position", minimum=0)
        if position > len(self):
            raise ValueError(f"the state's position {position} is past the epoch's {len(self)} batches")
        self.selector.load_state_dict(state["selector"])
        self._buffer = [dict(o) for o in state["observations"]]
        self._resume = {"epoch": int(state["epoch"]), "position": position,
                        "pending": [np.asarray(b, dtype=np.int64) for b in state["pending"]]}
        self.epoch = int(state["epoch"])

    # -- feedback -----------------------------------------------------------------------
    def observe(self, indices: Any, losses: Any = None, logits: Any = None, embeddings: Any = None) -> None:
        """Hand the selector feedback on the examples ``indices`` (a batch just trained
        on): per-example ``losses``, ``logits`` (rows), ``embeddings`` (rows); numpy
        arrays or tensors (detached here). A selector that does not override
        ``Selector.observe`` (e.g. RandomSelector) costs nothing here.

        In a multi-rank job with a selector that uses feedback, it is buffered and
        all-gathered every ``sync_every`` calls (a collective); every rank's selector
        then observes every rank's feedback, in the same order.
        """
        if not self._uses_feedback:
            return
        idx = _to_numpy(indices)
        if idx.dtype == object or not (np.issubdtype(idx.dtype, np.integer) or idx.size == 0):
            raise TypeError(f"indices must be integers, got dtype {idx.dtype}")
        obs: dict[str, np.ndarray | None] = {"indices": idx.astype(np.int64).reshape(-1)}
        for name, value in zip(_FEEDBACK, (losses, logits, embeddings)):
            if value is not None:
                value = _to_numpy(value)
                if value.shape[:1] != (idx.size,):
                    raise ValueError(f"{name} has shape {value.shape}, expected {idx.size} rows (one per index)")
            obs[name] = value
        if self.comm is None or self.world_size == 1:
            if self.world_size > 1 and not self._warned_local:
                logger.warning("no communicator: rank %d's feedback is not shared with the other ranks", self.rank)
                self._warned_local = True
            self._apply([obs])
            return
        self._buffer.append(obs)
        if len(self._buffer) >= self.sync_every:
            self.sync()

    def sync(self) -> None:
        """All-gather the buffered feedback now (collective) and hand it to the selector:
        round by round (call order), rank by rank within a round."""
        if self.comm is None or self.world_size == 1:
            self._apply(self._buffer)
            self._buffer = []
            return
        gathered = self.comm.allgather(self._buffer)
        self._buffer = []
        rounds = max(len(g) for g in gathered)
        self._apply([g[c] for c in range(rounds) for g in gathered if c < len(g)])

    def _apply(self, observations: list[dict[str, np.ndarray | None]]) -> None:
        for obs in observations:
            self.selector.observe(obs["indices"], losses=obs["losses"], logits=obs["logits"],
                                  embeddings=obs["embeddings"])

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
            raise RuntimeError(f"ranks disagree on the plan of epoch {self.epoch if epoch is None else epoch}: "
                               f"fingerprints by rank {prints}")
        return mine

    def __repr__(self) -> str:
        return (f"SelectionBatchSampler({self.selector!r}, rank={self.rank}, world_size={self.world_size}, "
                f"epoch={self.epoch}, sync_every={self.sync_every})")


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

    def __init__(self, dataset: Any, weights: Any = None) -> None:
        self.dataset = dataset
        if weights is not None:
            weights = _to_numpy(weights).astype(np.float32).reshape(-1)
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


__all__ = ["SelectionBatchSampler", "WeightedDataset"]
