"""Near-duplicate removal (batchsel.data.dedup, ``batchsel dedup``): planted groups are found
exactly, one row per group is kept by the stated rule, and 2 MPI ranks keep the same rows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from batchsel.data.dedup import deduplicate


def planted(n: int, d: int = 32, share: float = 0.2, noise: float = 0.03, seed: int = 0):
    """Rows from a Gaussian mixture; a ``share`` of them replaced by noisy copies of other
    rows (several copies of one row make a group). Returns x and the true root of every row."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((20, d))
    x = centers[rng.integers(0, 20, n)] + rng.standard_normal((n, d))  # few pairs at cosine >= 0.9 by chance
    copies = rng.choice(n, int(share * n), replace=False)
    originals = np.setdiff1d(np.arange(n), copies)
    root = np.arange(n)
    root[copies] = rng.choice(originals, copies.size)
    x[copies] = x[root[copies]] * rng.uniform(0.5, 2.0, (copies.size, 1)) + noise * rng.standard_normal(
        (copies.size, d)
    )
    return x.astype(np.float32), root


def true_groups(root: np.ndarray) -> np.ndarray:
    """Each row's group as the smallest row of its group."""
    smallest = np.full(root.size, root.size)
    np.minimum.at(smallest, root, np.arange(root.size))
    return smallest[root]


def test_planted_groups_are_found_and_the_smallest_row_of_each_is_kept():
    x, root = planted(3000)
    result = deduplicate(x, 0.95, progress=False)
    expected = true_groups(root)
    assert np.array_equal(result.group, expected)
    assert np.array_equal(result.keep, np.unique(expected))
    assert result.removed_fraction == pytest.approx(1 - np.unique(root).size / root.size)
    for g in result.groups():
        assert g[0] == g.min() and (result.group[g] == g[0]).all()
    i, j, s = result.pairs
    assert (i < j).all() and (s >= 0.95 - 1e-5).all() and (root[i] == root[j]).all()  # no false pair


def test_groups_are_transitive_and_exact_duplicates_need_threshold_one():
    rng = np.random.default_rng(1)
    base = rng.standard_normal((50, 8))
    a = np.array([1.0, 0, 0, 0, 0, 0, 0, 0])
    b = np.array([np.cos(0.2), np.sin(0.2), 0, 0, 0, 0, 0, 0])  # cos(a, b) = 0.980
    c = np.array([np.cos(0.4), np.sin(0.4), 0, 0, 0, 0, 0, 0])  # cos(a, c) = 0.921, cos(b, c) = 0.980
    x = np.vstack([base, [a * 10, b, c], base[:5] * 3]).astype(np.float32)
    result = deduplicate(x, 0.97, progress=False)
    assert result.group[50:53].tolist() == [50, 50, 50]  # a ~ b ~ c: one group, although a !~ c
    assert result.group[53:58].tolist() == list(range(5))  # scaled copies are duplicates
    exact = deduplicate(x, 1.0, progress=False)
    assert exact.group[53:58].tolist() == list(range(5)) and exact.group[51] == 51


def test_data_without_near_duplicates_keeps_every_row():
    x = np.eye(40, dtype=np.float32)  # orthogonal rows: cosine 0
    result = deduplicate(x, 0.5, progress=False)
    assert np.array_equal(result.keep, np.arange(40)) and result.pairs[0].size == 0 and result.groups() == []


def with_zero_rows(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """200 random rows, 12 of them (in both halves) set to all zeros; returns x and those rows."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((200, 16)).astype(np.float32)
    zeros = np.sort(rng.choice(200, 12, replace=False))
    x[zeros] = 0.0
    x[zeros[3]] = -0.0  # a negative zero is zero too
    return x, zeros


def test_all_zero_rows_are_exact_duplicates_of_one_another_with_a_warning(caplog):
    # cosine similarity is undefined for zero rows (the index saw 0 for every pair): before,
    # 10 identical zero rows were all kept, with no word about them
    with caplog.at_level("WARNING", logger="batchsel.data.dedup"):
        only = deduplicate(np.zeros((10, 4), np.float32), progress=False)
    assert only.keep.tolist() == [0] and only.group.tolist() == [0] * 10 and only.extra["zero_rows"] == 10
    assert "10 of 10 rows are all zero" in caplog.text and "drop them" in caplog.text
    x, zeros = with_zero_rows()
    result = deduplicate(x, 0.9, progress=False)
    assert np.all(result.group[zeros] == zeros[0]) and result.removed_fraction == pytest.approx(11 / 200)
    assert not np.isin(result.group[np.setdiff1d(np.arange(200), zeros)], zeros).any()  # no other row joins
    i, j, s = result.pairs
    assert {(a, b) for a, b in zip(zeros[:-1].tolist(), zeros[1:].tolist())} <= set(zip(i.tolist(), j.tolist()))
    assert np.all(s[np.isin(i, zeros)] == 1.0)
    assert deduplicate(np.eye(4, dtype=np.float32), progress=False).extra["zero_rows"] == 0


class ThreadComm:
    """A Communicator over threads of one process (every collective: a slot per rank and a barrier)."""

    def __init__(self, rank, shared):
        self.rank, self.size, self._shared = rank, len(shared["slots"]), shared

    def allgather(self, obj):
        slots, barrier = self._shared["slots"], self._shared["barrier"]
        slots[self.rank] = obj
        barrier.wait()
        out = list(slots)
        barrier.wait()
        return out

    def broadcast(self, obj, root=0):
        return self.allgather(obj)[root]

    def gather(self, obj, root=0):
        out = self.allgather(obj)
        return out if self.rank == root else None

    def allreduce(self, array, op="sum"):
        return {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}[op](self.allgather(array), axis=0)

    def barrier(self):
        self.allgather(None)

    def abort(self, errorcode=1):
        raise SystemExit(errorcode)


def test_zero_rows_in_several_shards_are_one_group_on_every_rank():
    import threading

    x, zeros = with_zero_rows(seed=1)
    assert zeros.min() < 100 <= zeros.max()  # in both ranks' rows
    shared = {"slots": [None, None], "barrier": threading.Barrier(2)}
    results = [None, None]

    def rank(r):
        results[r] = deduplicate(x, 0.9, comm=ThreadComm(r, shared), progress=False)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    alone = deduplicate(x, 0.9, progress=False)
    for r in results:
        assert np.array_equal(r.group, alone.group) and r.extra["zero_rows"] == 12
        assert all(np.array_equal(a, b) for a, b in zip(r.pairs, alone.pairs))


@pytest.mark.slow
def test_the_ivf_path_finds_the_planted_groups():
    x, root = planted(60_000, d=32, share=0.05)
    result = deduplicate(x, 0.95, progress=False)
    assert result.extra["kind"] == "ivf"
    assert np.array_equal(result.group, true_groups(root))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(threshold=0.0), "threshold must be in"),
        (dict(threshold=1.5), "threshold must be"),
        (dict(threshold=float("nan")), "threshold"),
        (dict(k=0), "k must be"),
    ],
)
def test_bad_arguments(kwargs, match):
    x, _ = planted(100)
    with pytest.raises(ValueError, match=match):
        deduplicate(x, **{"threshold": 0.9, **kwargs}, progress=False)


def run(*args: str, cwd: Path, mpi: int = 0) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "batchsel", *args]
    if mpi:
        from test_integrations_mp import MPIEXEC, clean_env

        if not MPIEXEC.exists():
            pytest.skip("no mpiexec")
        return subprocess.run(
            [str(MPIEXEC), "--allow-run-as-root", "--oversubscribe", "-n", str(mpi), *cmd],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=300,
            env=clean_env(),
        )
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_cli_on_one_process_and_two_mpi_ranks_keeps_the_same_rows(tmp_path):
    x, root = planted(4000)
    np.save(tmp_path / "emb.npy", x)
    one = run("dedup", "emb.npy", "--out", "keep1.npy", "--groups", "groups1.npy", "--json", "--quiet", cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    two = run(
        "dedup", "emb.npy", "--out", "keep2.npy", "--groups", "groups2.npy", "--json", "--quiet", cwd=tmp_path, mpi=2
    )
    assert two.returncode == 0, two.stderr + two.stdout
    assert np.array_equal(np.load(tmp_path / "keep1.npy"), np.load(tmp_path / "keep2.npy"))
    assert np.array_equal(np.load(tmp_path / "groups1.npy"), np.load(tmp_path / "groups2.npy"))
    assert np.array_equal(np.load(tmp_path / "groups1.npy"), true_groups(root))
    report = json.loads(one.stdout)
    assert report["kept"] == np.unique(root).size and report["num_examples"] == 4000
    assert json.loads(two.stdout.strip().splitlines()[-1])["kept"] == report["kept"]  # rank 0 alone reports


@pytest.mark.parametrize(
    "args, message",
    [
        (["--threshold", "0"], "--threshold must be in (0, 1]"),
        (["--threshold", "nan"], "--threshold must be in (0, 1]"),
        (["--k", "0"], "--k"),
        (["--out", "keep.txt"], "must end with .npy"),
        (["--out", "emb.npy", "--force"], "is the input EMB"),
        (["--out", "same.npy", "--groups", "same.npy"], "same file"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, args, message):
    x, _ = planted(200)
    np.save(tmp_path / "emb.npy", x)
    before = sorted(p.name for p in tmp_path.iterdir())
    out = run("dedup", "emb.npy", *args, cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before and out.stdout == ""
