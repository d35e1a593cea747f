"""Input checks (batchsel.core.checks) and file I/O (batchsel.core.io)."""

import os
import stat

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from batchsel.core.checks import (
    check_finite,
    check_graph,
    check_int,
    check_labels,
    check_scale,
    check_seed,
    load_embeddings,
    to_int64,
)
from batchsel.core.io import array_shape, atomic_group, atomic_write, c_stdout_to_stderr, load_array, save_npy


# -- check_int / check_seed ------------------------------------------------------------
@pytest.mark.parametrize("value", [True, 1.0, "3", None, np.float32(2)])
def test_check_int_refuses_non_integers(value):
    with pytest.raises(TypeError, match="k must be an integer"):
        check_int(value, "k")


def test_check_int_range_names_value():
    assert check_int(np.int32(5), "k", minimum=1, maximum=5) == 5
    assert type(check_int(np.int64(3), "k")) is int
    with pytest.raises(ValueError, match=r"k must be >= 1, got 0"):
        check_int(0, "k", minimum=1)
    with pytest.raises(ValueError, match=r"k must be <= 5, got 6"):
        check_int(6, "k", maximum=5)


def test_check_seed():
    assert check_seed(np.int64(7)) == 7
    with pytest.raises(ValueError, match="seed must be >= 0, got -1"):
        check_seed(-1)


# -- embeddings ------------------------------------------------------------------------
def test_load_embeddings_float32_c_contiguous_is_not_copied():
    x = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
    assert load_embeddings(x) is x


@pytest.mark.parametrize(
    "make",
    [
        lambda x: x.astype(np.float64),
        lambda x: np.asfortranarray(x),
        lambda x: x[::2],  # strided rows: not contiguous
        lambda x: x.tolist(),
        lambda x: torch.from_numpy(x.astype(np.float64)),
    ],
)
def test_load_embeddings_converts_to_float32_c(make):
    x = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
    src = make(x)
    out = load_embeddings(src)
    assert out.dtype == np.float32 and out.flags.c_contiguous and out.ndim == 2
    np.testing.assert_allclose(out, np.asarray(src, dtype=np.float64), rtol=1e-6)


def test_load_embeddings_torch_float32_shares_memory():
    t = torch.randn(10, 3)
    out = load_embeddings(t)
    assert np.shares_memory(out, t.numpy())


def test_load_embeddings_npy_path_is_memory_mapped(tmp_path):
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    np.save(tmp_path / "x.npy", x)
    out = load_embeddings(str(tmp_path / "x.npy"))
    assert isinstance(out, np.memmap) and out.mode == "r"
    np.testing.assert_array_equal(out, x)


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.zeros(5, np.float32), r"2-D \(N x d\), got 1-D array of shape \(5,\)"),
        (np.zeros((2, 3, 4), np.float32), r"2-D \(N x d\), got 3-D array of shape \(2, 3, 4\)"),
        (np.zeros((0, 4), np.float32), r"embeddings is empty: shape \(0, 4\)"),
        (np.zeros((4, 0), np.float32), r"embeddings is empty: shape \(4, 0\)"),
    ],
)
def test_load_embeddings_bad_shapes(bad, match):
    with pytest.raises(ValueError, match=match):
        load_embeddings(bad)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_load_embeddings_non_finite_names_row(value):
    x = np.zeros((70_000, 2), np.float32)  # more than one scan block
    x[69_999, 1] = value
    with pytest.raises(ValueError, match=rf"embeddings contains NaN or inf \(first at row 69999: {value}\)"):
        load_embeddings(x)


def test_load_embeddings_non_numeric():
    with pytest.raises(TypeError, match=r"must be numeric \(real\), got dtype <U1"):
        load_embeddings([["a", "b"]])
    with pytest.raises(TypeError, match="convertible to a float32 array"):
        load_embeddings([[1.0, 2.0], [3.0]])
    with pytest.raises(TypeError, match=r"must be numeric \(real\), got dtype complex64"):
        load_embeddings(np.ones((3, 2), np.complex64))


def test_load_embeddings_bad_paths(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        load_embeddings(str(tmp_path / "missing.npy"))
    with pytest.raises(ValueError, match="is a directory"):
        load_embeddings(tmp_path)
    (tmp_path / "x.csv").write_text("1,2\n")
    with pytest.raises(ValueError, match=r"expected a \.npy file, got .*x\.csv"):
        load_embeddings(tmp_path / "x.csv")


def test_check_finite_1d():
    with pytest.raises(ValueError, match=r"w contains NaN or inf \(first at row 2: nan\)"):
        check_finite(np.array([0.0, 1.0, np.nan]), "w")


# -- graphs ----------------------------------------------------------------------------
def test_check_graph_canonical_form_and_no_side_effect():
    g = sp.csr_matrix((np.array([1.0, 2.0, 3.0]), (np.array([0, 0, 1]), np.array([1, 1, 2]))), shape=(3, 3))
    g.has_canonical_format = False
    g_data = g.data.copy()
    out = check_graph(g, num_nodes=3)
    assert out.indices.dtype == np.int64 and out.indptr.dtype == np.int64 and out.dtype == np.float32
    assert out[0, 1] == 3.0  # duplicates summed
    np.testing.assert_array_equal(g.data, g_data)  # the caller's matrix is untouched
    assert check_graph(sp.coo_matrix(g.toarray())).format == "csr"


def test_check_graph_errors():
    with pytest.raises(TypeError, match="must be a scipy.sparse matrix .*got ndarray"):
        check_graph(np.eye(3))
    with pytest.raises(ValueError, match=r"must be square, got shape \(2, 3\)"):
        check_graph(sp.csr_matrix((2, 3)))
    with pytest.raises(ValueError, match="has 3 nodes but the data has 4 examples"):
        check_graph(sp.eye(3, format="csr"), num_nodes=4)
    bad = sp.eye(3, format="csr")
    bad.data[1] = np.nan
    with pytest.raises(ValueError, match="NaN or inf edge weights"):
        check_graph(bad)


def test_to_int64():
    g = to_int64(sp.random(50, 50, density=0.1, format="csr", random_state=0))
    assert g.indices.dtype == np.int64 and g.indptr.dtype == np.int64


# -- labels ----------------------------------------------------------------------------
def test_check_labels():
    assert check_labels(np.array([0.0, 2.0]), 2).dtype == np.int64
    np.testing.assert_array_equal(check_labels(torch.tensor([1, -1]), 2, allow_unlabeled=True), [1, -1])
    with pytest.raises(ValueError, match="must be >= 0, found -1"):
        check_labels([1, -1], 2)
    with pytest.raises(ValueError, match="must be >= -1, found -2"):
        check_labels([1, -2], 2, allow_unlabeled=True)
    with pytest.raises(ValueError, match="has length 3 but there are 2 examples"):
        check_labels([0, 1, 2], 2)
    with pytest.raises(ValueError, match=r"must be 1-D, got shape \(1, 2\)"):
        check_labels([[0, 1]], 2)
    with pytest.raises(TypeError, match="integer class ids, got dtype float64"):
        check_labels([0.5, 1.0], 2)


# -- atomic_write ----------------------------------------------------------------------
def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_atomic_write_text_and_binary(tmp_path):
    with atomic_write(tmp_path / "a.txt", "w") as f:
        f.write("hello")
    assert (tmp_path / "a.txt").read_text() == "hello"
    with atomic_write(str(tmp_path / "a.txt"), "wb") as f:
        f.write(b"new")
    assert (tmp_path / "a.txt").read_bytes() == b"new"
    assert _leftovers(tmp_path) == []


def test_atomic_write_failure_keeps_old_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old content")
    with pytest.raises(RuntimeError, match="disk on fire"):
        with atomic_write(target) as f:
            f.write(b"half of the new")
            raise RuntimeError("disk on fire")
    assert target.read_bytes() == b"old content"
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C too
        with atomic_write(tmp_path / "never.bin") as f:
            f.write(b"x")
            raise KeyboardInterrupt
    assert not (tmp_path / "never.bin").exists()
    assert _leftovers(tmp_path) == []


def test_atomic_write_refusals(tmp_path):
    (tmp_path / "exists.txt").write_text("keep")
    with pytest.raises(FileExistsError, match="exists"):
        with atomic_write(tmp_path / "exists.txt", "w", overwrite=False) as f:
            f.write("replace")
    assert (tmp_path / "exists.txt").read_text() == "keep"
    with pytest.raises(ValueError, match="is a directory"):
        with atomic_write(tmp_path, "w"):
            pass
    with pytest.raises(ValueError, match="folder .*nowhere.* does not exist"):
        with atomic_write(tmp_path / "nowhere" / "x.txt", "w"):
            pass


def test_atomic_write_permissions_follow_umask_or_existing_file(tmp_path):
    # mkstemp creates 0600 files; a plan shared with other users / nodes must not be.
    old = os.umask(0o022)
    try:
        with atomic_write(tmp_path / "new.txt", "w") as f:
            f.write("x")
        assert stat.S_IMODE(os.stat(tmp_path / "new.txt").st_mode) == 0o644
        (tmp_path / "old.txt").write_text("y")
        os.chmod(tmp_path / "old.txt", 0o640)
        with atomic_write(tmp_path / "old.txt", "w") as f:
            f.write("z")
        assert stat.S_IMODE(os.stat(tmp_path / "old.txt").st_mode) == 0o640
    finally:
        os.umask(old)


def test_save_npy_round_trip_keeps_name(tmp_path):
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    save_npy(tmp_path / "x.data", x)
    assert (tmp_path / "x.data").exists() and not (tmp_path / "x.data.npy").exists()
    np.testing.assert_array_equal(np.load(tmp_path / "x.data"), x)
    with pytest.raises(FileExistsError):
        save_npy(tmp_path / "x.data", x, overwrite=False)


# -- load_array ------------------------------------------------------------------------
def test_load_array_npy_is_memory_mapped(tmp_path):
    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = load_array(tmp_path / "x.npy")
    assert isinstance(out, np.memmap)
    np.testing.assert_array_equal(out, x)


def test_load_array_npz_keys(tmp_path):
    a, b = np.arange(3), np.ones((2, 2))
    np.savez(tmp_path / "one.npz", only=a)
    np.savez(tmp_path / "two.npz", a=a, b=b)
    np.testing.assert_array_equal(load_array(tmp_path / "one.npz"), a)
    np.testing.assert_array_equal(load_array(tmp_path / "two.npz", key="b"), b)
    np.testing.assert_array_equal(load_array(f"{tmp_path / 'two.npz'}:a"), a)
    with pytest.raises(ValueError, match=r"holds arrays \['a', 'b'\]; name one"):
        load_array(tmp_path / "two.npz")
    with pytest.raises(ValueError, match=r"has no array 'c' \(it has \['a', 'b'\]\)"):
        load_array(f"{tmp_path / 'two.npz'}:c")


def test_load_array_pt(tmp_path):
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    torch.save(t, tmp_path / "t.pt")
    torch.save({"emb": t, "other": t * 2}, tmp_path / "d.pt")
    torch.save({"x": 1}, tmp_path / "notensor.pt")
    np.testing.assert_array_equal(load_array(tmp_path / "t.pt"), t.numpy())
    np.testing.assert_array_equal(load_array(tmp_path / "d.pt", key="other"), (t * 2).numpy())
    np.testing.assert_array_equal(load_array(f"{tmp_path / 'd.pt'}:emb"), t.numpy())
    with pytest.raises(ValueError, match=r"holds \['emb', 'other'\]; name one"):
        load_array(tmp_path / "d.pt")
    with pytest.raises(ValueError, match="has no tensor 'nope'"):
        load_array(tmp_path / "d.pt", key="nope")
    with pytest.raises(ValueError, match="does not hold a tensor .*int"):
        load_array(tmp_path / "notensor.pt")


def test_load_array_bad_files(tmp_path):
    with pytest.raises(ValueError, match="no such file .*missing.npy"):
        load_array(tmp_path / "missing.npy")
    with pytest.raises(ValueError, match="is a directory"):
        load_array(tmp_path)
    (tmp_path / "x.csv").write_text("1,2")
    with pytest.raises(ValueError, match=r"x\.csv.*unknown file type"):
        load_array(tmp_path / "x.csv")
    x = np.arange(1000, dtype=np.float64)
    for name, save in [
        ("t.npy", lambda p: np.save(p, x)),
        ("t.npz", lambda p: np.savez(p, x=x)),
        ("t.pt", lambda p: torch.save(torch.from_numpy(x), p)),
    ]:
        path = tmp_path / name
        save(path)
        path.write_bytes(path.read_bytes()[: os.path.getsize(path) // 2])  # truncated
        with pytest.raises(ValueError, match=rf"cannot read .*{name}"):
            load_array(path)
        path.write_bytes(b"garbage, not an array file" * 10)
        with pytest.raises(ValueError, match=rf"cannot read .*{name}"):
            load_array(path)


# -- issue 14: numeric range, explicit zeros, special files, groups of files -----------------
def test_check_graph_drops_explicit_zeros_without_touching_the_callers_graph(tmp_path):
    g = sp.random(20, 20, density=0.3, format="csr", random_state=0, dtype=np.float64)
    g.data[:] = 0.0  # sp.save_npz keeps these: a graph whose stored weights are all 0
    sp.save_npz(tmp_path / "zero.npz", g)
    loaded = sp.load_npz(tmp_path / "zero.npz")
    stored = loaded.nnz
    assert stored > 0
    assert check_graph(loaded).nnz == 0
    assert loaded.nnz == stored  # eliminate_zeros ran on a copy, not on the caller's arrays
    mixed = sp.csr_matrix((np.array([0.0, 2.0]), np.array([0, 1]), np.array([0, 2, 2])), shape=(2, 2))
    assert check_graph(mixed).nnz == 1 and mixed.nnz == 2


def test_check_graph_weight_overflowing_float32_names_the_fix():
    g = sp.csr_matrix(np.array([[0, 1e300], [1e300, 0]]))
    with pytest.raises(ValueError, match="beyond the float32 range.*rescale"):
        check_graph(g)


def test_load_embeddings_overflowing_float32_says_so_not_nan():
    x = np.ones((4, 3))
    x[2, 1] = 1e300  # finite in float64, inf in float32
    with pytest.raises(ValueError, match=r"1e\+300 \(row 2\), beyond the float32 range.*rescale"):
        load_embeddings(x)


def test_labels_too_large_for_class_ids():
    with pytest.raises(ValueError, match=r"class ids, found 1e\+300"):
        check_labels(np.full(3, 1e300), 3)


def test_bfloat16_tensors_load_as_float32(tmp_path):
    x = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    torch.save(x.to(torch.bfloat16), tmp_path / "bf16.pt")
    loaded = load_array(tmp_path / "bf16.pt")
    assert loaded.dtype == np.float32 and np.array_equal(loaded, x.numpy())
    assert load_embeddings(x.to(torch.bfloat16)).dtype == np.float32


@pytest.mark.parametrize("scale, match", [(1e20, "overflow"), (1e-30, "underflow")])
def test_check_scale_refuses_squared_norms_out_of_float32_range(scale, match):
    x = np.random.default_rng(0).normal(size=(50, 8)).astype(np.float32)
    check_scale(x, "x")
    check_scale(np.zeros((3, 2), np.float32), "zeros")  # identical points are fine
    with pytest.raises(ValueError, match=f"{match} float32.*rescale"):
        check_scale(x * np.float32(scale), "x")
    # centering: a large offset with a normal spread is fine for centered computations
    shifted = x + np.float32(1e19)
    check_scale(shifted, "x", center=shifted.mean(axis=0, dtype=np.float64))
    with pytest.raises(ValueError, match="overflow"):
        check_scale(shifted, "x")


def test_atomic_write_writes_through_a_symlink(tmp_path):
    (tmp_path / "real.txt").write_text("old")
    os.symlink("real.txt", tmp_path / "link.txt")
    with atomic_write(tmp_path / "link.txt", "w") as f:
        f.write("new")
    assert os.path.islink(tmp_path / "link.txt")  # the link is kept ...
    assert (tmp_path / "real.txt").read_text() == "new"  # ... and its target replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "real.txt"]


def test_atomic_write_refuses_special_files(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        with atomic_write(fifo, "w") as f:
            f.write("x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # not replaced by a regular file
    os.symlink(os.devnull, tmp_path / "to_null")
    with pytest.raises(ValueError, match="not a regular file"):
        save_npy(tmp_path / "to_null", np.zeros(2))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "to_null"]


def test_atomic_group_renames_all_or_none(tmp_path):
    (tmp_path / "a.txt").write_text("old a")
    with pytest.raises(OSError, match="disk full"):
        with atomic_group() as group:
            with group.open(tmp_path / "a.txt", "w") as f:
                f.write("new a")
            with group.open(tmp_path / "b.txt", "w") as f:
                raise OSError("disk full")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]  # no b, no temporary file
    assert (tmp_path / "a.txt").read_text() == "old a"  # a was not replaced either


def test_c_stdout_to_stderr_keeps_c_output_out_of_stdout(capfd):
    import ctypes

    libc = ctypes.CDLL(None)
    with c_stdout_to_stderr():
        libc.printf(b"from C\n")  # buffered by C's stdio: flushed before fd 1 comes back
        os.write(1, b"from fd 1\n")
    print("after", flush=True)
    out, err = capfd.readouterr()
    assert out == "after\n"
    assert "from C" in err and "from fd 1" in err


def test_array_shape_reads_headers(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((7, 3)))
    np.savez(tmp_path / "b.npz", a=np.zeros((5, 2)), b=np.zeros(4))
    assert array_shape(tmp_path / "x.npy") == (7, 3)
    assert array_shape(f"{tmp_path / 'b.npz'}:a") == (5, 2)
    with pytest.raises(ValueError, match="name one"):
        array_shape(tmp_path / "b.npz")
