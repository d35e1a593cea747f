"""How frameworks meet the sampler: who iterates it, and where they call ``set_epoch``.

A DataLoader iterator asks the sampler for batches from its ``_next_index`` (its workers'
window adds to the feedback lag); accelerate's ``BatchSamplerShard`` would shard the
rank's own batches again, which is refused; Lightning and accelerate call ``set_epoch``
on ``batch_sampler.sampler``, which :class:`EpochSetter` forwards.
"""

from __future__ import annotations

from typing import Any


class EpochSetter:
    """What a framework finds at ``batch_sampler.sampler``: Lightning calls ``set_epoch``
    only there (and on ``loader.sampler``), accelerate there and on the batch sampler; both
    reach :meth:`SelectionBatchSampler.set_epoch` this way.

    Parameters
    ----------
    owner : SelectionBatchSampler
        The sampler whose ``set_epoch`` is called.

    Example
    -------
    >>> class Owner:
    ...     def set_epoch(self, epoch):
    ...         print("epoch", epoch)
    >>> EpochSetter(Owner()).set_epoch(3)
    epoch 3
    """

    def __init__(self, owner: Any) -> None:
        self._owner = owner

    def set_epoch(self, epoch: int) -> None:
        """Set the owner's epoch.

        Parameters
        ----------
        epoch : int
            The epoch the next iteration yields.
        """
        self._owner.set_epoch(epoch)

    def __repr__(self) -> str:
        return f"<set_epoch of {type(self._owner).__name__}>"


def loader_iterator(caller: Any, sampler: Any) -> Any:
    """The DataLoader iterator whose ``_next_index`` asked ``sampler`` for its first batch
    (torch's single- and multi-process iterators both do), None for a loop of its own.
    Only that one frame's ``self`` is read, and not kept.

    Parameters
    ----------
    caller : frame or None
        The frame that started the sampler's iteration.
    sampler : SelectionBatchSampler
        The sampler.

    Returns
    -------
    DataLoader iterator or None
        The iterator, whose ``_index_sampler`` is ``sampler``.
    """
    if caller is None or caller.f_code.co_name != "_next_index":
        return None
    owner = caller.f_locals.get("self")
    return owner if getattr(owner, "_index_sampler", None) is sampler else None


def saves_sampler_at_dispatch(loader: Any) -> bool:
    """Whether ``loader`` (a DataLoader iterator) saves the sampler's state itself when it
    sends a batch to a worker, as torchdata's ``StatefulDataLoader`` does: that state must
    count the batches dispatched, not those the training loop received.

    Parameters
    ----------
    loader : DataLoader iterator
        The iterator asking for batches.

    Returns
    -------
    bool
        True for torchdata's iterators.
    """
    return type(loader).__module__.startswith("torchdata")


def hands_out_in_order(loader: Any) -> bool:
    """Whether ``loader`` (a DataLoader iterator) hands batches to the loop in the order
    the sampler gave them (``DataLoader(in_order=True)``, torch's default).

    Parameters
    ----------
    loader : DataLoader iterator or None
        The iterator asking for batches (None: a loop of its own).

    Returns
    -------
    bool
        False only for ``in_order=False``.
    """
    return getattr(loader, "_in_order", True) is not False


def check_not_resharded(caller: Any, sampler: Any) -> None:
    """Refuse to be iterated by accelerate's ``BatchSamplerShard`` over several ranks
    (``accelerator.prepare(DataLoader(batch_sampler=sampler))``): it would keep every
    ``W``-th of this rank's batches, so an epoch would see 1/W of the data, silently.
    The shard iterates the sampler from its own method, so that is the caller's code.
    (Only the code and the module are read: the caller's ``f_locals`` would keep its
    local objects alive, an iterator dropped by the caller among them.)

    Parameters
    ----------
    caller : frame or None
        The frame that started the sampler's iteration.
    sampler : SelectionBatchSampler
        The sampler (its rank and world size are read only for accelerate's frames).
    """
    code = caller.f_code if caller is not None else None
    name = code and (getattr(code, "co_qualname", None) or code.co_name)  # co_qualname: Python >= 3.11
    if not name or not (name.startswith("BatchSamplerShard.") or name in ("_iter_with_split", "_iter_with_no_split")):
        return
    if not str(caller.f_globals.get("__name__", "")).startswith("accelerate") or sampler.world_size == 1:
        return
    owner = caller.f_locals.get("self")  # the shard itself: prepare() wraps only when W > 1
    if getattr(owner, "batch_sampler", None) is sampler:
        raise RuntimeError(
            f"accelerate's BatchSamplerShard (from accelerator.prepare(dataloader)) wraps this "
            f"SelectionBatchSampler, which already gives rank {sampler.rank} of {sampler.world_size} its own batches: "
            f"each rank would train on 1/{getattr(owner, 'num_processes', '?')} of its share. Leave the DataLoader out of "
            f"accelerator.prepare (prepare the model and optimizer only), or use "
            f"batchsel.integrations.hf.BatchselTrainer"
        )


__all__ = ["EpochSetter", "check_not_resharded", "loader_iterator"]
