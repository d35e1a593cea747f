"""batchsel.sharded: the sharded index and distributed k-NN graph equal the single-process
EmbeddingIndex (one rank in process; two ranks under mpiexec), and a dead rank ends the job."""
import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from batchsel.index import EmbeddingIndex
from batchsel.integrations import SingleProcessComm
from batchsel.sharded import (ShardedIndex, _merge, facility_location, gather_graph, load_graph_shards,
                              save_graph_shard, shard_range)

from test_integrations_mp import MPIEXEC, clean_env  # puts tests/mp_scripts on sys.path

from common import run_command  # noqa: E402

JOB = Path(__file__).resolve().parent / "mp_scripts" / "sharded_job.py"
needs_mpi = pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec")


def clustered(n=3000, d=16, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(30, d)) * 3
    return (centers[rng.integers(0, 30, n)] + rng.normal(size=(n, d))).astype(np.float32)


@pytest.fixture(scope="module")
def data():
    return clustered()


@pytest.mark.parametrize("kind, metric, kernel", [
    ("flat", "euclidean", "rbf"), ("flat", "cosine", "cosine"), ("ivf", "euclidean", "cosine"),
    ("ivf", "cosine", "rbf"), ("ivf", "ip", "connectivity")])
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
    from batchsel.functions import FacilityLocation
    from batchsel.optimizers import maximize

    comm = SingleProcessComm()
    rows = ShardedIndex(data, comm, metric="euclidean", kind="ivf", progress=False).knn_graph(k=10, self_weight=1.0)
    ref = maximize(FacilityLocation(gather_graph(rows, comm)), 60)
    sel = facility_location(rows, 60, comm, 0)
    assert np.array_equal(sel.indices, ref.indices) and sel.value == pytest.approx(ref.value, rel=1e-12)
    with pytest.raises(ValueError, match="ranks hold 2999 rows"):
        facility_location(rows[1:], 5, comm, 1)


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
    cmd = [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-n", "2", sys.executable, JOB, tmp_path / "out",
           tmp_path / "data.npy", *opts]
    start = time.monotonic()
    output = run_command(cmd, clean_env(), 120, succeed=succeed)
    return output, time.monotonic() - start


@pytest.mark.slow
@needs_mpi
def test_two_mpi_ranks_equal_one_process(tmp_path):
    launch(tmp_path)
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["size"] == 2
    for key in ("flat-euclidean", "ivf-euclidean", "ivf-cosine"):
        r = result[key]
        assert r["graph_diff"] == 0 and r["files_diff"] == 0 and r["graph_nnz"] > 0, (key, r)
        assert r["search_same"], key
        assert r["fl_same"], key  # sharded facility location = one process's lazy greedy
        assert r["nprobe"][0] == r["nprobe"][1], key


@pytest.mark.slow
@needs_mpi
def test_a_dead_rank_ends_the_job_naming_it(tmp_path):
    output, seconds = launch(tmp_path, "--die-rank", "1", succeed=False)
    assert seconds < 60, (seconds, output[-3000:])
    assert "survived" not in output
    assert ",1]" in output and "Exit code:    3" in output, output[-3000:]  # Open MPI names rank 1


@pytest.mark.slow
@needs_mpi
def test_cli_under_mpiexec_equals_one_process(tmp_path):
    """``mpiexec -n 2 batchsel plan --method graph`` builds the graph sharded; rank 0 writes
    the same graph and plan (fingerprint) as one process. ``batchsel select --neighbors``
    (sparse facility location, lazy greedy) runs sharded and prints the same selection."""
    np.save(tmp_path / "emb.npy", clustered(n=1500))
    exe = Path(sys.executable).parent / "batchsel"
    args = ["plan", str(tmp_path / "emb.npy"), "--method", "graph", "--batch-size", "50", "--workers", "2",
            "--quiet", "--json"]
    one = run_command([exe, *args, "--out", tmp_path / "p1.npz", "--save-graph", tmp_path / "g1.npz"], clean_env(), 120)
    two = run_command([MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-n", "2", exe, *args,
                       "--out", tmp_path / "p2.npz", "--save-graph", tmp_path / "g2.npz"], clean_env(), 120)
    f1 = [json.loads(line)["epochs"][0]["fingerprint"] for line in one.splitlines() if line.startswith("{")]
    f2 = [json.loads(line)["epochs"][0]["fingerprint"] for line in two.splitlines() if line.startswith("{")]
    assert len(f1) == 1 and f2 == f1  # rank 0 alone reports
    assert (sp.load_npz(tmp_path / "g1.npz") != sp.load_npz(tmp_path / "g2.npz")).nnz == 0
    select = ["select", tmp_path / "emb.npy", "--k", "20", "--neighbors", "8", "--json", "--quiet"]
    one = run_command([exe, *select], clean_env(), 120)
    two = run_command([MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-n", "2", exe, *select], clean_env(), 120)
    assert [json.loads(line) for line in two.splitlines() if line.startswith("{")] == [json.loads(one)]
