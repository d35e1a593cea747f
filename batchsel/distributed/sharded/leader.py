"""``node_work="leader"``: when every rank runs on one machine, rank 0 does the faiss
work alone, with every core of the machine, and the other ranks wait without spinning,
then take their part of the results (docs: design/sharded.md, "Ranks on one machine").
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Any, Callable, Iterator

import faiss
import numpy as np

from batchsel.core.checks import check_int, load_embeddings
from batchsel.core.communicator import Communicator
from batchsel.distributed.sharded.rows import rows_by_rank

NODE_WORK = ("auto", "leader", "shard")


def check_node_work(node_work: str) -> None:
    """``ValueError`` unless ``node_work`` is one of :data:`NODE_WORK`.

    Examples
    --------
    >>> check_node_work("auto")
    """
    if node_work not in NODE_WORK:
        raise ValueError(f"node_work must be one of {NODE_WORK}, got {node_work!r}")


def resolve_node_work(node_work: str, comm: Communicator) -> str:
    """Collective for ``"auto"``: ``"leader"`` when there are several ranks and all share
    one host name, else ``"shard"``; ``"leader"`` and ``"shard"`` as they are.

    Examples
    --------
    >>> from batchsel.distributed.comm import SingleProcessComm
    >>> resolve_node_work("auto", SingleProcessComm())
    'shard'
    """
    if node_work == "auto":
        return "leader" if comm.size > 1 and len(set(comm.allgather(socket.gethostname()))) == 1 else "shard"
    return node_work


@contextlib.contextmanager
def all_cores() -> Iterator[None]:
    """Every core of the machine for faiss, for a while: a rank is often bound to one
    (mpiexec's default for few ranks) or started with OMP_NUM_THREADS=1.

    Examples
    --------
    >>> with all_cores():
    ...     pass
    """
    cores = os.cpu_count() or 1
    before_threads = faiss.omp_get_max_threads()
    before_cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    try:
        if before_cpus is not None:
            try:
                os.sched_setaffinity(0, range(cores))
            except OSError:  # a cgroup that forbids it: the cores it allows
                pass
        faiss.omp_set_num_threads(len(os.sched_getaffinity(0)) if before_cpus is not None else cores)
        yield
    finally:
        faiss.omp_set_num_threads(before_threads)
        if before_cpus is not None:
            os.sched_setaffinity(0, before_cpus)


def from_rank0(comm: Communicator, what: str, compute: Callable[[], Any], per_rank: bool = False) -> Any:
    """Collective: ``compute()`` on rank 0, with every core of the machine; every rank
    gets the result.

    The others wait in a sleeping poll (``comm.wait_for_ranks`` where it has one: an MPI
    collective would spin on cores rank 0's threads use). A ``ValueError`` or
    ``TypeError`` of ``compute`` is raised on every rank.

    Parameters
    ----------
    comm : Communicator
        The ranks.
    what : str
        The work, named in a timeout's message.
    compute : callable
        Run on rank 0 only.
    per_rank : bool, default False
        The result is a list with an entry per rank: rank r gets its entry (by the
        communicator's ``scatter`` where it has one, else a broadcast of all).

    Returns
    -------
    object
        The result, or this rank's entry of it.

    Examples
    --------
    >>> from batchsel.distributed.comm import SingleProcessComm
    >>> from_rank0(SingleProcessComm(), "a sum", lambda: [1 + 1], per_rank=True)
    2
    """
    result, error = None, None
    if comm.rank == 0:
        try:
            with all_cores():
                result = compute()
        except (ValueError, TypeError) as exc:  # raised on every rank, not only here
            error = exc
    wait = getattr(comm, "wait_for_ranks", None)
    if wait is not None:
        wait(what, float("inf"))
    scatter = getattr(comm, "scatter", None)  # not in the Communicator protocol
    if per_rank and scatter is not None:
        failed = comm.broadcast(error, root=0)
        if failed is not None:
            raise failed
        return scatter(result, root=0)
    result, error = comm.broadcast((result, error), root=0)
    if error is not None:
        raise error
    return result[comm.rank] if per_rank else result


class RankZeroIndex:
    """``node_work="leader"``: rank 0's index of all rows does the faiss work of every
    rank, each of which gets its part of the results.

    Every method is collective. :class:`~batchsel.distributed.sharded.ShardedIndex` owns
    one when its ranks share a machine.

    Parameters
    ----------
    comm : Communicator
        The ranks.
    bounds : numpy.ndarray
        Where every rank's rows start, then N
        (:func:`~batchsel.distributed.sharded.rows.shard_bounds`).

    Examples
    --------
    >>> from batchsel.distributed.comm import SingleProcessComm
    >>> from batchsel.index import EmbeddingIndex
    >>> x = np.random.default_rng(0).normal(size=(20, 3)).astype(np.float32)
    >>> leader = RankZeroIndex(SingleProcessComm(), np.array([0, 20]))
    >>> leader.build(lambda: EmbeddingIndex(x, progress=False))
    {}
    >>> leader.neighbors(2)[1].shape
    (20, 2)
    """

    def __init__(self, comm: Communicator, bounds: np.ndarray) -> None:
        self.comm = comm
        self.bounds = bounds
        #: rank 0's index of all rows, None elsewhere
        self.whole: Any = None

    def build(self, make: Callable[[], Any]) -> dict:
        """``make()`` on rank 0 (an :class:`~batchsel.index.EmbeddingIndex` of all rows);
        returns its tuned attributes (``nprobe_``, ``train_size_``, ``recall_``) on every rank."""

        def build() -> dict:
            self.whole = make()
            return {k: getattr(self.whole, k) for k in ("nprobe_", "train_size_", "recall_") if hasattr(self.whole, k)}

        return from_rank0(self.comm, "ShardedIndex (rank 0 indexes all rows)", build)

    def search(self, queries: Any, k: int, dim: int, num_examples: int) -> tuple[np.ndarray, np.ndarray]:
        """Every rank's queries gathered to rank 0, searched in its index of all rows, and
        each rank's answers sent back (``dim``, ``num_examples``: the index's, to check)."""
        q = load_embeddings(queries, name="queries") if len(queries) else np.empty((0, dim), np.float32)
        if q.shape[1] != dim:
            raise ValueError(f"queries have dimension {q.shape[1]} but the index has dimension {dim}")
        k = check_int(k, "k", minimum=1, maximum=num_examples)
        blocks = self.comm.gather(q, root=0)

        def answer() -> list:
            sizes = np.cumsum([0] + [len(b) for b in blocks])
            D, I = self.whole.search(np.concatenate(blocks), k) if sizes[-1] else (np.empty((0, k)), np.empty((0, k)))
            return [(D[a:z], I[a:z]) for a, z in zip(sizes[:-1], sizes[1:])]

        D, I = from_rank0(self.comm, "ShardedIndex.search (rank 0 answers)", answer, per_rank=True)
        return np.asarray(D, dtype=np.float32), np.asarray(I, dtype=np.int64)

    def neighbors(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """This rank's rows of rank 0's ``whole.neighbors(k)``."""
        return from_rank0(
            self.comm,
            "ShardedIndex.neighbors (rank 0 searches)",
            lambda: rows_by_rank(self.whole.neighbors(k), self.bounds),
            per_rank=True,
        )


__all__ = ["NODE_WORK", "check_node_work", "resolve_node_work", "all_cores", "from_rank0", "RankZeroIndex"]
