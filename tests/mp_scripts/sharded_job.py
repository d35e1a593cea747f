"""The sharded index / k-NN graph job the tests launch.

    mpiexec -n W python sharded_job.py OUT DATA.npy [--die-rank R]

Every rank builds a ShardedIndex over DATA.npy (flat and IVF), its rows of the k-NN graph,
searches its own queries, gathers and saves the graph; rank 0 compares everything with a
single-process EmbeddingIndex (and the sharded facility location with one process's lazy
greedy) and writes OUT.json. ``--die-rank R``: rank R calls
``os._exit(3)`` in the middle of the IVF build's collectives (the job must end, not hang).
"""

import json
import os
import sys
import time

import numpy as np

from batchsel.distributed.sharded import (
    ShardedIndex,
    facility_location,
    gather_graph,
    load_graph_shards,
    save_graph_shard,
)
from batchsel.index import EmbeddingIndex
from batchsel.integrations import MPIComm
from batchsel.submodular.functions import FacilityLocation
from batchsel.submodular.optimizers import maximize


def same_neighbours(D, I, D0, I0, tol=1e-5):
    """Rows agree up to distance ties: equal distances, and equal index sets where the
    distances are not tied with the k-th."""
    if not np.allclose(D, D0, rtol=tol, atol=tol):
        return False
    for d, i, i0 in zip(D, I, I0):
        strict = d < d[-1] - tol if d[0] <= d[-1] else d > d[-1] + tol
        if set(i[strict]) != set(i0[strict]):
            return False
    return True


def main() -> None:
    out, data = sys.argv[1], sys.argv[2]
    die = int(sys.argv[sys.argv.index("--die-rank") + 1]) if "--die-rank" in sys.argv else None
    comm = MPIComm()
    x = np.load(data, mmap_mode="r")
    result = {"size": comm.size}
    if die is not None:
        if comm.rank == die:
            comm.barrier()
            os._exit(3)  # a hard death: no exception, no MPI_Finalize
        comm.barrier()
        ShardedIndex(data, comm, metric="euclidean", kind="ivf", progress=False)  # waits on the dead rank
        raise AssertionError("the job survived a dead rank")
    # "shard": the algorithm of ranks on several machines; "auto" on one machine: rank 0
    # does the faiss work with every core, the others get their rows
    runs = [(k, m, "shard") for k, m in (("flat", "euclidean"), ("ivf", "euclidean"), ("ivf", "cosine"))]
    runs += [("flat", "euclidean", "auto"), ("ivf", "cosine", "auto")]
    for kind, metric, node_work in runs:
        t = time.perf_counter()
        index = ShardedIndex(data, comm, metric=metric, kind=kind, progress=False, block_rows=500, node_work=node_work)
        assert index.node_work == ("leader" if node_work == "auto" else "shard")
        lo, hi = index.row_range
        rows = index.knn_graph(k=10)
        assert rows.shape == (hi - lo, x.shape[0]) and rows.indices.dtype == np.int64
        graph = gather_graph(rows, comm)
        save_graph_shard(f"{out}.{kind}.{metric}.{comm.rank}.npz", rows, lo)
        # each rank searches its own, different number of queries
        queries = np.asarray(x[comm.rank * 7 : comm.rank * 7 + 5 + 40 * comm.rank])
        if comm.rank == 1 and kind == "ivf" and metric == "cosine":
            queries = queries[:0]  # a rank without queries still takes part
        D, I = index.search(queries, k=5)
        allq = comm.allgather(queries)
        allD, allI = comm.allgather(D), comm.allgather(I)
        picks = facility_location(index.knn_graph(k=10, self_weight=1.0), 40, comm, lo)
        comm.barrier()
        key = f"{kind}-{metric}" + ("" if node_work == "shard" else "-leader")
        if comm.rank == 0:
            ref = EmbeddingIndex(data, metric=metric, kind=kind, progress=False)
            g0 = ref.knn_graph(k=10)
            from_files = load_graph_shards([f"{out}.{kind}.{metric}.{r}.npz" for r in range(comm.size)])
            D0, I0 = ref.search(np.concatenate(allq), k=5)
            result[key] = {
                "graph_diff": int((graph != g0).nnz),
                "graph_nnz": int(g0.nnz),
                "files_diff": int((from_files != g0).nnz),
                "search_same": bool(same_neighbours(np.concatenate(allD), np.concatenate(allI), D0, I0)),
                "nprobe": [getattr(index, "nprobe_", None), getattr(ref, "nprobe_", None)],
                "seconds": time.perf_counter() - t,
                "fl_same": bool(
                    np.array_equal(
                        picks.indices, maximize(FacilityLocation(ref.knn_graph(k=10, self_weight=1.0)), 40).indices
                    )
                ),
            }
        comm.barrier()
    if comm.rank == 0:
        with open(f"{out}.json", "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
