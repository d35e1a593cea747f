"""Feedback from the training loop: one step's observation, and its exchange across ranks.

The sampler's :class:`~batchsel.loop.sampler.exchange.FeedbackExchange` keeps the buffer
and the call count; this module builds an observation from what the loop hands over (only
the fields the selector reads) and all-gathers a buffer of them, checking that every rank is at the same
``observe`` call, so that every rank's selector sees every rank's feedback in one order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from batchsel.core.checks import tensor_to_numpy
from batchsel.distributed.comm import Communicator
from batchsel.loop.prefetch import Observation

#: the kinds of feedback a selector may read (its ``feedback_fields``)
FEEDBACK = ("losses", "logits", "embeddings")
GATHER = "SelectionBatchSampler's feedback all-gather (observe / sync)"


class DeviceCopy:
    """A tensor on an accelerator on its way to the host: copied without blocking into
    pinned memory (CUDA), read only when the feedback is applied (:func:`settle`). The
    training loop then never waits for the device in ``observe``: by the time a selection
    ahead (``prefetch``) or an all-gather needs the values, the step that made them is long
    done.

    Parameters
    ----------
    tensor : torch.Tensor
        The feedback on its device (detached here).

    Example
    -------
    >>> import torch
    >>> DeviceCopy(torch.ones(2)).numpy().tolist()    # a CPU tensor: a plain copy
    [1.0, 1.0]
    """

    __slots__ = ("host", "event", "shape")

    def __init__(self, tensor: Any) -> None:
        import torch

        tensor = tensor.detach()
        self.shape = tuple(tensor.shape)
        self.event = None
        if tensor.device.type == "cuda":
            self.host = torch.empty(self.shape, dtype=tensor.dtype, pin_memory=True)
            self.host.copy_(tensor, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record(torch.cuda.current_stream(tensor.device))
        else:  # other devices (MPS, XPU): a plain copy, which may wait for the device
            self.host = tensor.to("cpu")

    def numpy(self) -> np.ndarray:
        """The values, once the copy has arrived.

        Returns
        -------
        numpy.ndarray
            A host copy of the tensor.
        """
        if self.event is not None:
            self.event.synchronize()
        return np.array(tensor_to_numpy(self.host))  # a copy: the pinned buffer goes back to torch's cache


def settle(obs: Observation) -> Observation:
    """``obs`` with every :class:`DeviceCopy` read into a numpy array (in place).

    Parameters
    ----------
    obs : Observation
        One ``observe`` call's feedback.

    Returns
    -------
    Observation
        ``obs`` itself.

    Example
    -------
    >>> settle({"indices": np.array([0]), "losses": np.array([1.0])})["losses"].tolist()
    [1.0]
    """
    for name in FEEDBACK:
        value = obs.get(name)
        if isinstance(value, DeviceCopy):
            obs[name] = value.numpy()
    return obs


def observation(
    indices: Any, fields: frozenset[str], losses: Any = None, logits: Any = None, embeddings: Any = None
) -> Observation | None:
    """The feedback of one batch as the selector reads it (copies; the fields it does not
    read left out), or None when all that was given is unread. Tensors on an accelerator
    become :class:`DeviceCopy` (no wait for the device); :func:`settle` reads them.

    Parameters
    ----------
    indices : array-like or tensor
        The batch's example indices (integers).
    fields : frozenset of str
        The kinds of feedback the selector reads (:data:`FEEDBACK`).
    losses, logits, embeddings : array-like or tensor, optional
        Per-example feedback, one row per index.

    Returns
    -------
    Observation or None
        ``indices`` and each kind of feedback (None where not given or not read).

    Example
    -------
    >>> obs = observation([3, 4], frozenset({"losses"}), losses=[0.5, 1.5], logits=np.zeros((2, 3)))
    >>> obs["indices"].tolist(), obs["losses"].tolist(), obs["logits"]
    ([3, 4], [0.5, 1.5], None)
    """
    # one conversion and one copy per array, no more: this runs every step, and on a
    # sub-millisecond step every numpy call counts (copies: feedback held back, by prefetch,
    # sync_every or a per-epoch selector, must not change with the caller's array)
    idx = np.array(tensor_to_numpy(indices))
    if idx.dtype.kind not in "iu" and (idx.size or idx.dtype == object):
        raise TypeError(f"indices must be integers, got dtype {idx.dtype}")
    if idx.dtype != np.int64 or idx.ndim != 1:
        idx = idx.astype(np.int64).reshape(-1)
    obs: Observation = {"indices": idx}
    for name, value in zip(FEEDBACK, (losses, logits, embeddings)):
        if value is not None and name in fields:  # else: the selector would not read it, nor is it shared
            if hasattr(value, "detach") and not getattr(value, "is_cpu", True):
                value = DeviceCopy(value)  # an accelerator's tensor: no wait for the device
            else:
                value = np.array(tensor_to_numpy(value))
            if value.shape[:1] != (idx.size,):
                raise ValueError(f"{name} has shape {value.shape}, expected {idx.size} rows (one per index)")
            obs[name] = value
        else:
            obs[name] = None
    if all(obs[name] is None for name in FEEDBACK) and any(v is not None for v in (losses, logits, embeddings)):
        return None  # nothing the selector reads (the same on every rank that calls alike)
    return obs


def merged(observations: list[Observation]) -> list[Observation]:
    """Consecutive settled observations with the same kinds of feedback and no index in
    common, concatenated into one (order kept): what a selector that applies feedback
    example by example (``feedback_per_epoch``) reads the same from one call as from many.
    A run in which an index repeats stays as it was.

    Parameters
    ----------
    observations : list of Observation
        Settled observations, in call order.

    Returns
    -------
    list of Observation
        The same feedback in as few observations as the rule allows.

    Example
    -------
    >>> a = {"indices": np.array([0, 1]), "losses": np.array([1.0, 2.0]), "logits": None, "embeddings": None}
    >>> b = {"indices": np.array([2]), "losses": np.array([3.0]), "logits": None, "embeddings": None}
    >>> [o["indices"].tolist() for o in merged([a, b])], [o["indices"].tolist() for o in merged([a, a])]
    ([[0, 1, 2]], [[0, 1], [0, 1]])
    """
    out: list[Observation] = []
    run: list[Observation] = []
    run_kinds: list[bool] = []

    def close() -> None:
        if len(run) > 1:
            idx = np.concatenate([o["indices"] for o in run])
            # no index twice (bad ones, negative, are left to the selector's check to name)
            if not idx.size or (idx.min() >= 0 and np.bincount(idx).max() <= 1):
                one: Observation = {"indices": idx}
                try:
                    for name in FEEDBACK:
                        one[name] = None if run[0][name] is None else np.concatenate([o[name] for o in run])
                except ValueError:  # shapes that differ: the selector's own check names them
                    pass
                else:
                    out.append(one)
                    return
        out.extend(run)

    for obs in observations:
        kinds = [obs.get(name) is None for name in FEEDBACK]
        if run and kinds != run_kinds:
            close()
            run = []
        run.append(obs)
        run_kinds = kinds
    close()
    return out


def exchange(comm: Communicator, buffer: list[Observation], rank: int, timeout: float | None) -> list[Observation]:
    """All-gather every rank's buffered observations (collective) and return them in the
    order every rank applies them: round by round (call order), rank by rank within a
    round. ``RuntimeError`` when a rank is missing past ``timeout`` or the ranks' buffers
    hold different ``observe`` calls (their ``"step"`` tags).

    Parameters
    ----------
    comm : Communicator
        The ranks' communicator.
    buffer : list of Observation
        This rank's buffered observations, each tagged with its ``"step"``.
    rank : int
        This rank (named in errors).
    timeout : float or None
        Seconds to wait for every rank (None: no limit), where the communicator can bound it.

    Returns
    -------
    list of Observation
        Every rank's observations in the order every rank applies them.

    Example
    -------
    >>> from batchsel.distributed.comm import SingleProcessComm
    >>> obs = {"indices": np.array([1]), "losses": None, "logits": None, "embeddings": None}
    >>> len(exchange(SingleProcessComm(), [obs], rank=0, timeout=None))
    1
    """
    buffer = [settle(o) for o in buffer]
    wait = getattr(comm, "wait_for_ranks", None)
    if wait is not None:  # batchsel's communicators: bounded by ``timeout``
        wait(GATHER, timeout)
    try:
        gathered = comm.allgather(buffer)
    except RuntimeError as exc:  # e.g. gloo's own timeout: say which collective it was
        raise RuntimeError(f"{GATHER} failed on rank {rank}: {exc}") from exc
    steps = [[o.get("step") for o in g] for g in gathered]
    if any(s != steps[0] for s in steps):

        def where(calls: list) -> str:
            return ", ".join("?" if c is None else f"epoch {c[0]} call {c[1]}" for c in calls) or "nothing"

        held = "; ".join(f"rank {r}: {where(calls)}" for r, calls in enumerate(steps))
        raise RuntimeError(
            f"the ranks called observe() differently before this feedback all-gather ({held}); "
            f"every rank must call observe once per step, alike"
        )
    return in_round_order(gathered)


def in_round_order(buffers: list[list[Observation]]) -> list[Observation]:
    """Every rank's buffered observations in the order every rank applies them: round by
    round (call order), rank by rank within a round.

    Parameters
    ----------
    buffers : list of list
        The observations of each rank, by rank.

    Returns
    -------
    list
        One list.

    Example
    -------
    >>> in_round_order([["a0", "a1"], ["b0"]])
    ['a0', 'b0', 'a1']
    """
    rounds = max((len(g) for g in buffers), default=0)
    return [g[c] for c in range(rounds) for g in buffers if c < len(g)]
