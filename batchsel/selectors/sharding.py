"""How an epoch's examples are dealt to the ranks and cut into batches, as torch's
``DistributedSampler`` and ``BatchSampler`` do, from a seeded local generator
(:func:`epoch_rng`) that is the same on every rank."""

from __future__ import annotations

import numpy as np

from batchsel.core.checks import check_int
from batchsel.core.permutation import permutation


def epoch_rng(seed: int, epoch: int, *stream: int) -> np.random.Generator:
    """The local generator for (seed, epoch, stream...): independent streams for
    independent uses, identical on every rank.

    Parameters
    ----------
    seed : int
        The selector's seed.
    epoch : int
        The epoch.
    *stream : int
        More keys (a rank, a batch number, a use): each tuple its own stream.

    Returns
    -------
    numpy.random.Generator
        ``default_rng([seed, epoch, *stream])``.

    Example
    -------
    >>> int(epoch_rng(0, 1, 2).integers(10**6)) == int(epoch_rng(0, 1, 2).integers(10**6))
    True
    """
    return np.random.default_rng([int(seed), int(epoch), *map(int, stream)])


def split_batches(indices: np.ndarray, batch_size: int) -> list[np.ndarray]:
    """Consecutive batches of ``batch_size`` (the last one may be smaller).

    Parameters
    ----------
    indices : numpy.ndarray
        A rank's examples, in order.
    batch_size : int
        Examples per batch.

    Returns
    -------
    list of numpy.ndarray
        Views of ``indices``, ``ceil(len(indices) / batch_size)`` of them.

    Example
    -------
    >>> [b.tolist() for b in split_batches(np.arange(5), 2)]
    [[0, 1], [2, 3], [4]]
    """
    return [indices[i : i + batch_size] for i in range(0, len(indices), batch_size)]


def batch_sizes(length: int, batch_size: int) -> np.ndarray:
    """Sizes of the ``ceil(length / batch_size)`` batches of an epoch that draws ``length``
    examples without replacement: ``batch_size`` each but the last, which holds the rest,
    as ``BatchSampler`` cuts a shuffled epoch. One shape for every step but the last keeps
    compiled and autotuned models (cuDNN, ``torch.compile``, CUDA graphs) from re-tuning.

    Parameters
    ----------
    length : int
        Examples drawn in the epoch (>= 0).
    batch_size : int
        Examples per batch (>= 1).

    Returns
    -------
    numpy.ndarray
        int64 batch sizes, summing to ``length``.

    Example
    -------
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
    of ``world_size``, then rank r takes ``indices[r::world_size]``.

    Parameters
    ----------
    indices : numpy.ndarray
        The epoch's examples over all ranks, in order.
    world_size : int
        The number of ranks.
    drop_last : bool
        Drop the tail (True) or pad by repeating from the start (False).

    Returns
    -------
    list of numpy.ndarray
        One array per rank, all of the same length (:func:`shard_length`).

    Example
    -------
    >>> [s.tolist() for s in even_split(np.arange(5), 2, drop_last=False)]
    [[0, 2, 4], [1, 3, 0]]
    """
    n = len(indices)
    total = -(-n // world_size) * world_size
    if drop_last or total == n:
        indices = indices[: (n // world_size) * world_size]
        return [indices[r::world_size] for r in range(world_size)]
    # the wrap: the first total - n (np.resize would copy all of them first), appended to
    # the shards whose positions pass n; the others stay views (no copy of all N)
    wrap = indices[: total - n] if total - n <= n else np.resize(indices, total - n)
    shards = []
    for r in range(world_size):
        head = indices[r::world_size]
        tail = wrap[r + world_size * len(head) - n :: world_size]  # rank r's first position past n on
        shards.append(np.concatenate([head, tail]) if len(tail) else head)
    return shards


def shard_length(num_examples: int, world_size: int, drop_last: bool) -> int:
    """Examples per rank after padding (``ceil(N / W)``) or dropping (``N // W``).

    Parameters
    ----------
    num_examples : int
        N, the examples of the epoch over all ranks.
    world_size : int
        W, the number of ranks.
    drop_last : bool
        DistributedSampler's policy: drop the tail (True) or pad (False).

    Returns
    -------
    int
        Examples of every rank's shard.

    Example
    -------
    >>> shard_length(10, 3, drop_last=False), shard_length(10, 3, drop_last=True)
    (4, 3)
    """
    return num_examples // world_size if drop_last else -(-num_examples // world_size)


def epoch_order(num_examples: int, rng: np.random.Generator) -> np.ndarray:
    """The epoch's examples in a random order, before DistributedSampler's split
    (:func:`even_split`): the same on every number of ranks.

    Parameters
    ----------
    num_examples : int
        N.
    rng : numpy.random.Generator
        The epoch's generator (:func:`epoch_rng`).

    Returns
    -------
    numpy.ndarray
        int64, a permutation of ``0 .. N - 1``.

    Example
    -------
    >>> sorted(epoch_order(4, epoch_rng(0, 0)).tolist())
    [0, 1, 2, 3]
    """
    return permutation(rng, num_examples)


def epoch_shards(
    num_examples: int, world_size: int, drop_last: bool, rng: np.random.Generator, owner: np.ndarray | None = None
) -> list[np.ndarray]:
    """Every rank's examples for an epoch, in a random order, all of the same length
    (:func:`shard_length`).

    Parameters
    ----------
    num_examples : int
        N.
    world_size : int
        The number of ranks.
    drop_last : bool
        DistributedSampler's policy: drop (True) or pad (False) to equal shards.
    rng : numpy.random.Generator
        The epoch's generator (:func:`epoch_rng`).
    owner : numpy.ndarray or None, default None
        None: DistributedSampler's split of a fresh permutation. Else the rank of every
        example (GreedMax shards): each shard shuffled and padded by repeating its own
        examples (or cut) to the common length.

    Returns
    -------
    list of numpy.ndarray
        One int64 array per rank.

    Example
    -------
    >>> shards = epoch_shards(10, 2, False, epoch_rng(0, 0))
    >>> [len(s) for s in shards], sorted(np.concatenate(shards).tolist()) == list(range(10))
    ([5, 5], True)
    """
    if owner is None:
        return even_split(epoch_order(num_examples, rng), world_size, drop_last)
    length = shard_length(num_examples, world_size, drop_last)
    order = np.argsort(owner, kind="stable")
    bounds = np.searchsorted(owner[order], np.arange(world_size + 1))
    shards = []
    for r in range(world_size):
        part = order[bounds[r] : bounds[r + 1]]
        shards.append(np.resize(part[permutation(rng, len(part))], length).astype(np.int64))
    return shards


__all__ = ["epoch_rng", "split_batches", "batch_sizes", "even_split", "shard_length", "epoch_order", "epoch_shards"]
