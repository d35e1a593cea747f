"""batchsel.distributed.sharded: the sharded index and distributed k-NN graph equal the single-process
EmbeddingIndex (one rank in process; two ranks under mpiexec), and a dead rank ends the job."""

import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from common import run_command  # noqa: E402
from paths import MP_SCRIPTS
from test_integrations_mp import MPIEXEC, clean_env

from batchsel.distributed.sharded import (
    ShardedIndex,
    facility_location,
    gather_graph,
    load_graph_shards,
    save_graph_shard,
    shard_range,
    submodular_partition,
)
from batchsel.distributed.sharded.exchange import merge_topk as _merge
from batchsel.index import EmbeddingIndex
from batchsel.integrations import SingleProcessComm
from batchsel.submodular.partition import submodular_partition as one_process_partition

JOB = MP_SCRIPTS / "sharded_job.py"
GATHER_JOB = JOB.with_name("sharded_gather_job.py")
needs_mpi = pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec")


def clustered(n=3000, d=16, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(30, d)) * 3
    return (centers[rng.integers(0, 30, n)] + rng.normal(size=(n, d))).astype(np.float32)


@pytest.fixture(scope="module")
def data():
    return clustered()


@pytest.mark.parametrize(
    "kind, metric, kernel",
    [
        ("flat", "euclidean", "rbf"),
        ("flat", "cosine", "cosine"),
        ("ivf", "euclidean", "cosine"),
        ("ivf", "cosine", "rbf"),
        ("ivf", "ip", "connectivity"),
    ],
)
def test_one_rank_equals_embedding_index(data, kind, metric, kernel):
    comm = SingleProcessComm()
    ref = EmbeddingIndex(data, metric=metric, kind=kind, progress=False)
    index = ShardedIndex(data, comm, metric=metric, kind=kind, progress=False, block_rows=700)
    assert getattr(index, "nprobe_", None) == getattr(ref, "nprobe_", None)
    g0 = ref.knn_graph(k=10, kernel=kernel, self_weight=0.5)
    g = gather_graph(index.knn_graph(k=10, kernel=kernel, self_weight=0.5), comm)
    assert g.indices.dtype == np.int64 and g.indptr.dtype == np.int64
    assert (g != g0).nnz == 0
    D, I = index.search(data[:50], k=4)
    D0, I0 = ref.search(data[:50], k=4)
    assert np.array_equal(I, I0) and np.allclose(D, D0)


def test_facility_location_equals_lazy_greedy(data):
    from batchsel.submodular.functions import FacilityLocation
    from batchsel.submodular.optimizers import maximize

    comm = SingleProcessComm()
    rows = ShardedIndex(data, comm, metric="euclidean", kind="ivf", progress=False).knn_graph(k=10, self_weight=1.0)
    ref = maximize(FacilityLocation(gather_graph(rows, comm)), 60)
    sel = facility_location(rows, 60, comm, 0)
    assert np.array_equal(sel.indices, ref.indices) and sel.value == pytest.approx(ref.value, rel=1e-12)
    with pytest.raises(ValueError, match="row_start=1 and 2999 rows do not make the 3000 rows"):
        facility_location(rows[1:], 5, comm, 1)


def test_gather_to_one_rank(data):
    comm = SingleProcessComm()
    assert comm.gather({"a": 1}) == [{"a": 1}]
    with pytest.raises(ValueError, match=r"root must be in \[0, 1\), got 1"):
        comm.gather(1, root=1)
    rows = ShardedIndex(data[:500], comm, metric="euclidean", progress=False).knn_graph(k=5)
    g = gather_graph(rows, comm, root=0)
    assert g.indices.dtype == np.int64 and (g != gather_graph(rows, comm)).nnz == 0 and g.nnz == rows.nnz
    with pytest.raises(ValueError, match=r"root must be None or a rank in \[0, 1\), got 1"):
        gather_graph(rows, comm, root=1)


@pytest.mark.parametrize("parts, seed", [(4, 0), (7, 5)])
def test_greedmax_from_row_shards_equals_one_process(data, parts, seed):
    """The graph GreedMax builds from embeddings (euclidean, RBF, k = 10), given as row
    shards, gives the same shards as the single-process partition of the embeddings."""
    comm = SingleProcessComm()
    rows = ShardedIndex(data, comm, metric="euclidean", progress=False).knn_graph(k=10)
    got = submodular_partition(rows, parts, comm, seed=seed)
    expected = one_process_partition(data, parts, seed=seed)
    assert len(got) == parts and all(np.array_equal(a, b) for a, b in zip(got, expected))
    assert all(a.dtype == np.int64 for a in got)
    with pytest.raises(ValueError, match="num_parts must be <= 3000, got 3001"):
        submodular_partition(rows, 3001, comm)
    negative = rows.copy()
    negative.data[0] = -1.0
    with pytest.raises(ValueError, match="graph weights must be >= 0"):  # raised at the root, on every rank
        submodular_partition(negative, 2, comm)


def test_greedmax_of_an_asymmetric_graph_in_row_shards():
    """symmetric=False: the root symmetrizes as the one-process function does (claiming
    symmetry of an asymmetric graph gives other shards, so the flag matters)."""
    g = sp.random(400, 400, density=0.03, random_state=1, format="csr", dtype=np.float32)
    g.setdiag(0)
    g.eliminate_zeros()
    expected = one_process_partition(g, 3, seed=2)
    got = submodular_partition(g, 3, SingleProcessComm(), seed=2, symmetric=False)
    assert all(np.array_equal(a, b) for a, b in zip(got, expected))
    claimed = submodular_partition(g, 3, SingleProcessComm(), seed=2)
    assert not all(np.array_equal(a, b) for a, b in zip(claimed, expected))


def test_merge_keeps_nearest_ties_to_smaller_index_missing_last():
    D = [np.array([[1.0, 3.0, np.inf]], np.float32), np.array([[1.0, 2.0, 5.0]], np.float32)]
    I = [np.array([[7, 2, -1]]), np.array([[4, 9, 1]])]
    Dm, Im = _merge(D, I, 4, larger_is_closer=False)
    assert Im.tolist() == [[4, 7, 9, 2]] and Dm.tolist() == [[1, 1, 2, 3]]
    Dm, Im = _merge([np.array([[0.9, -np.inf]], np.float32)], [np.array([[3, -1]])], 2, larger_is_closer=True)
    assert Im.tolist() == [[3, -1]]


def test_shard_range_tiles_the_rows():
    bounds = [shard_range(10, r, 4) for r in range(4)]
    assert bounds[0][0] == 0 and bounds[-1][1] == 10
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    with pytest.raises(ValueError, match="rank"):
        shard_range(10, 4, 4)


def test_graph_shards_roundtrip(tmp_path, data):
    g = EmbeddingIndex(data[:500], metric="euclidean", progress=False).knn_graph(k=5)
    save_graph_shard(tmp_path / "b.npz", g[200:], 200)
    save_graph_shard(tmp_path / "a.npz", g[:200], 0)
    assert (load_graph_shards([tmp_path / "b.npz", tmp_path / "a.npz"]) != g).nnz == 0
    with pytest.raises(ValueError, match="starts at row 200, expected 0"):
        load_graph_shards([tmp_path / "b.npz"])


def test_errors_name_the_problem(data):
    comm = SingleProcessComm()
    with pytest.raises(ValueError, match="hnsw"):
        ShardedIndex(data, comm, kind="hnsw")
    with pytest.raises(TypeError, match="Communicator"):
        ShardedIndex(data, object())
    bad = data[:100].copy()
    bad[42, 3] = np.nan
    with pytest.raises(ValueError, match="row 42"):
        ShardedIndex(bad, comm, progress=False)
    with pytest.raises(ValueError, match="no such file"):
        ShardedIndex("/nonexistent/x.npy", comm)

    class Three(SingleProcessComm):
        size = 3

    with pytest.raises(ValueError, match="2 rows, fewer than the 3 ranks"):
        ShardedIndex(data[:2], Three())
    index = ShardedIndex(data[:200], comm, progress=False)
    with pytest.raises(ValueError, match="self_weight"):
        index.knn_graph(k=3, self_weight=2.0)


def launch(tmp_path: Path, *opts: str, succeed: bool = True) -> tuple[str, float]:
    np.save(tmp_path / "data.npy", clustered())
    cmd = [
        MPIEXEC,
        "--allow-run-as-root",
        "--oversubscribe",
        "-n",
        "2",
        sys.executable,
        JOB,
        tmp_path / "out",
        tmp_path / "data.npy",
        *opts,
    ]
    start = time.monotonic()
    output = run_command(cmd, clean_env(), 120, succeed=succeed)
    return output, time.monotonic() - start


@pytest.mark.slow
@needs_mpi
def test_two_mpi_ranks_equal_one_process(tmp_path):
    launch(tmp_path)
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["size"] == 2
    for key in ("flat-euclidean", "ivf-euclidean", "ivf-cosine", "flat-euclidean-leader", "ivf-cosine-leader"):
        r = result[key]
        assert r["graph_diff"] == 0 and r["files_diff"] == 0 and r["graph_nnz"] > 0, (key, r)
        assert r["search_same"], key
        assert r["fl_same"], key  # sharded facility location = one process's lazy greedy
        assert r["nprobe"][0] == r["nprobe"][1], key


@pytest.mark.slow
@needs_mpi
def test_cli_under_mpiexec_equals_one_process(tmp_path):
    """``mpiexec -n 2 batchsel plan --method graph`` builds the graph sharded; rank 0 writes
    the same graph and plan (fingerprint) as one process. ``batchsel select --neighbors``
    (sparse facility location, lazy greedy) runs sharded and prints the same selection."""
    np.save(tmp_path / "emb.npy", clustered(n=1500))
    exe = Path(sys.executable).parent / "batchsel"
    args = [
        "plan",
        str(tmp_path / "emb.npy"),
        "--method",
        "graph",
        "--batch-size",
        "50",
        "--workers",
        "2",
        "--quiet",
        "--json",
    ]
    one = run_command([exe, *args, "--out", tmp_path / "p1.npz", "--save-graph", tmp_path / "g1.npz"], clean_env(), 120)
    two = run_command(
        [
            MPIEXEC,
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            "2",
            exe,
            *args,
            "--out",
            tmp_path / "p2.npz",
            "--save-graph",
            tmp_path / "g2.npz",
        ],
        clean_env(),
        120,
    )
    f1 = [json.loads(line)["epochs"][0]["fingerprint"] for line in one.splitlines() if line.startswith("{")]
    f2 = [json.loads(line)["epochs"][0]["fingerprint"] for line in two.splitlines() if line.startswith("{")]
    assert len(f1) == 1 and f2 == f1  # rank 0 alone reports
    assert (sp.load_npz(tmp_path / "g1.npz") != sp.load_npz(tmp_path / "g2.npz")).nnz == 0
    select = ["select", tmp_path / "emb.npy", "--k", "20", "--neighbors", "8", "--json", "--quiet"]
    one = run_command([exe, *select], clean_env(), 120)
    two = run_command([MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-n", "2", exe, *select], clean_env(), 120)
    assert [json.loads(line) for line in two.splitlines() if line.startswith("{")] == [json.loads(one)]


def launch_gather(tmp_path: Path, data: np.ndarray, *opts: str) -> dict:
    np.save(tmp_path / "data.npy", data)
    cmd = [
        MPIEXEC,
        "--allow-run-as-root",
        "--oversubscribe",
        "-n",
        "2",
        sys.executable,
        GATHER_JOB,
        tmp_path / "out",
        tmp_path / "data.npy",
        *opts,
    ]
    run_command(cmd, clean_env(), 180)
    return json.loads((tmp_path / "out.json").read_text())


@pytest.mark.slow
@needs_mpi
def test_two_mpi_ranks_gather_to_one_and_partition_as_one_process(tmp_path):
    """MPIComm.gather and TorchDistComm.gather (own sizes and dtypes per rank, empty and
    0-d arrays, pickled objects, both roots, payloads cut into 7-byte messages);
    gather_graph to either rank equals the single-process graph, None on the other; the
    GreedMax partition of the distributed graph equals the one-process partition."""
    result = launch_gather(tmp_path, clustered(), "check")
    for comm in ("mpi", "mpi_chunked", "torch"):
        assert result[comm]["root0"] and result[comm]["root1"], (comm, result[comm])
        assert result[comm]["bad_root"] == "root must be in [0, 2), got 2"
    assert result["gather_graph"] == {"0": [0, None], "1": [None, 0]}
    assert result["greedmax_seed0_parts4"] == [True, True] and result["greedmax_seed3_parts3"] == [True, True]
    assert result["too_many_parts"] == "num_parts must be <= 3000, got 3001"


@pytest.mark.slow
@needs_mpi
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="resets the RSS high-water mark the Linux way")
def test_gather_to_root_leaves_the_other_rank_s_memory_alone(tmp_path):
    """200k x 16, k = 20 (a 74 MiB graph) on 2 ranks: while the graph is gathered to rank
    0, rank 1's peak RSS does not grow, rank 0's grows by about the graph; gathered to
    every rank (root=None) rank 1's grows as much (so the measure can tell them apart).
    Peaks are of the hand-over alone: the build's peak, alike on both ranks and some
    300 MiB, would hide it (the high-water mark is reset before each gather)."""
    result = launch_gather(tmp_path, clustered(n=200_000, d=16), "rss", "20")
    (root, other), (root_all, other_all) = result["root_0"], result["root_None"]
    graph = root["graph_mib"]
    assert graph > 50 and other["graph_mib"] == 0, result
    grow = {
        name: r["peak"] - r["start"]
        for name, r in (("root", root), ("other", other), ("root_all", root_all), ("other_all", other_all))
    }
    assert grow["root"] > 0.5 * graph and grow["other_all"] > 0.5 * graph, (grow, result)
    assert grow["other"] < 0.1 * grow["root"], (grow, result)


@pytest.mark.slow
@needs_mpi
def test_cli_greedmax_partition_under_mpiexec_equals_one_process(tmp_path):
    """``mpiexec -n 2 batchsel plan --method submodular --partition submodular``: the k-NN
    graph of the GreedMax partition is built over the ranks and partitioned on rank 0;
    the plans (3 workers, 2 epochs) have the one-process fingerprints, and only rank 0
    reports."""
    np.save(tmp_path / "emb.npy", clustered(n=1500))
    exe = Path(sys.executable).parent / "batchsel"
    args = [
        "plan",
        str(tmp_path / "emb.npy"),
        "--method",
        "submodular",
        "--partition",
        "submodular",
        "--batch-size",
        "50",
        "--workers",
        "3",
        "--epochs",
        "2",
        "--seed",
        "4",
        "--quiet",
        "--json",
    ]
    one = run_command([exe, *args, "--out", tmp_path / "p1.npz"], clean_env(), 120)
    two = run_command(
        [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-n", "2", exe, *args, "--out", tmp_path / "p2.npz"],
        clean_env(),
        120,
    )
    f1 = [[e["fingerprint"] for e in json.loads(line)["epochs"]] for line in one.splitlines() if line.startswith("{")]
    f2 = [[e["fingerprint"] for e in json.loads(line)["epochs"]] for line in two.splitlines() if line.startswith("{")]
    assert len(f1) == 1 and len(f1[0]) == 2 and f2 == f1
    from batchsel import load_plans

    for p1, p2 in zip(load_plans(tmp_path / "p1.npz"), load_plans(tmp_path / "p2.npz")):
        assert all(np.array_equal(a, b) for r in range(3) for a, b in zip(p1.batches(r), p2.batches(r)))
