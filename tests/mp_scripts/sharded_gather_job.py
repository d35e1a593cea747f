"""Gather to one rank and GreedMax from the distributed graph, the job the tests launch.

    mpiexec -n W python sharded_gather_job.py OUT DATA.npy check
    mpiexec -n W python sharded_gather_job.py OUT DATA.npy rss K

``check``: ``MPIComm.gather`` and ``TorchDistComm.gather`` (arrays of every rank's own
size and dtype, empty ones, pickled objects, root 0 and 1, payloads cut into many chunks),
``gather_graph(root=r)`` against the single-process graph, and the sharded GreedMax
partition against the single-process one. ``rss K``: the K-NN graph gathered to rank 0,
then to every rank (``root=None``); every rank reports its peak RSS (``ru_maxrss``) of
the build and of each hand-over (the high-water mark reset before it). Rank 0
writes OUT.json.
"""

import gc
import json
import resource
import sys

import numpy as np

from batchsel.distributed.comm import mpi_comm as comm_module
from batchsel.distributed.sharded import ShardedIndex, gather_graph, submodular_partition
from batchsel.index import EmbeddingIndex
from batchsel.integrations import MPIComm, TorchDistComm
from batchsel.submodular.partition import submodular_partition as one_process


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def reset_peak() -> None:
    """Start a new peak: Linux resets the high-water mark of RSS (ru_maxrss) on this write."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def payloads(rank: int) -> list:
    """What rank ``rank`` contributes: its own sizes and dtypes, an empty array, a 0-d
    array, a non-contiguous view, a mixed object (pickled)."""
    return [
        np.arange(1000 * (rank + 1), dtype=np.int64) * (rank + 1),
        np.full((rank + 2, 3), rank, dtype=np.float32),
        np.empty(0, dtype=np.float64) if rank else np.ones(4, dtype=bool),
        np.array(rank + 0.5),
        np.arange(40, dtype=np.int32).reshape(8, 5)[::2, 1:],
        {"rank": rank, "name": "r" * rank, "a": np.arange(rank + 1)},
    ]


def same(a, b) -> bool:
    if isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    if isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in b)
    return a == b


def check_gather(comm) -> dict:
    """For every payload and root: the root gets every rank's object, the others None."""
    out = {}
    for root in range(comm.size):
        ok = True
        for i, obj in enumerate(payloads(comm.rank)):
            got = comm.gather(obj, root=root)
            if comm.rank == root:
                expected = [payloads(r)[i] for r in range(comm.size)]
                ok &= len(got) == comm.size and all(same(g, e) for g, e in zip(got, expected))
            else:
                ok &= got is None
        # scatter (used where one rank computed every rank's part): rank r gets entry r
        parts = [payloads(r) for r in range(comm.size)] if comm.rank == root else None
        mine = comm.scatter(parts, root=root)
        ok &= len(mine) == len(payloads(comm.rank)) and all(same(g, e) for g, e in zip(mine, payloads(comm.rank)))
        out[f"root{root}"] = bool(all(comm.allgather(bool(ok))))
    try:
        comm.gather(1, root=comm.size)
    except ValueError as exc:
        out["bad_root"] = str(exc)
    return out


def main() -> None:
    out, data, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    comm = MPIComm()
    x = np.load(data, mmap_mode="r")
    result = {"size": comm.size}
    if mode == "check":
        result["mpi"] = check_gather(comm)
        chunk = comm_module._GATHER_CHUNK_BYTES
        comm_module._GATHER_CHUNK_BYTES = 7  # every payload in many messages, the last one short
        result["mpi_chunked"] = check_gather(comm)
        comm_module._GATHER_CHUNK_BYTES = chunk

        from batchsel.integrations import init_torch_distributed_from_mpi

        init_torch_distributed_from_mpi(timeout=60)
        result["torch"] = check_gather(TorchDistComm())

        index = ShardedIndex(data, comm, metric="euclidean", kind="ivf", progress=False, block_rows=500)
        rows = index.knn_graph(k=10)
        graphs = {root: gather_graph(rows, comm, root=root) for root in range(comm.size)}
        ref = EmbeddingIndex(data, metric="euclidean", kind="ivf", progress=False).knn_graph(k=10)
        result["gather_graph"] = {
            str(root): comm.allgather(None if g is None else int((g != ref).nnz)) for root, g in graphs.items()
        }
        # the graph GreedMax builds from embeddings: euclidean, kind "auto", RBF, k = 10
        rows = ShardedIndex(data, comm, metric="euclidean", progress=False).knn_graph(k=10)
        for seed, parts in ((0, 4), (3, 3)):
            mine = submodular_partition(rows, parts, comm, seed=seed, root=comm.size - 1)
            expected = one_process(np.asarray(x), parts, seed=seed)
            equal = len(mine) == parts and all(np.array_equal(a, b) for a, b in zip(mine, expected))
            result[f"greedmax_seed{seed}_parts{parts}"] = comm.allgather(bool(equal))
        try:
            submodular_partition(rows, x.shape[0] + 1, comm)
        except ValueError as exc:
            result["too_many_parts"] = str(exc)
    else:  # rss K
        k = int(sys.argv[4])
        index = ShardedIndex(data, comm, metric="euclidean", progress=False)
        rows = index.knn_graph(k=k)
        del index
        build = peak_mib()
        for root in (0, None):
            # the peak of the hand-over alone: the build's peak (alike on every rank) is
            # behind us, and would hide what the gather adds
            gc.collect()
            reset_peak()
            start = peak_mib()
            graph = gather_graph(rows, comm, root=root)
            sizes = 0 if graph is None else (graph.data.nbytes + graph.indices.nbytes + graph.indptr.nbytes) / 2**20
            if root == 0 and graph is not None:
                result["nnz"] = int(graph.nnz)
            del graph
            result[f"root_{root}"] = comm.allgather(
                {"build": build, "start": start, "peak": peak_mib(), "graph_mib": sizes}
            )
    if comm.rank == 0:
        with open(f"{out}.json", "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
