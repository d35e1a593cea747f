"""EmbeddingIndex: exact search against numpy, recall of the approximate kinds, the k-NN
graph's form, bad input, and memory mapping."""

import logging

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import batchsel.index.embedding_index as index_module
from batchsel.index import NPROBE_STEPS, NPROBE_TARGET, EmbeddingIndex, knn_graph
from batchsel.index.ivf import ivf_list_blocks


def clustered(n, d, clusters, seed=0, center_scale=0.5):
    """A gaussian mixture of (by default overlapping) clusters with a decaying spectrum
    inside each: clustered, with a low intrinsic dimension, as real embeddings are."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((clusters, d)) * center_scale
    spread = 1.0 / np.sqrt(np.arange(1, d + 1))
    x = centers[rng.integers(0, clusters, n)] + rng.standard_normal((n, d)) * spread
    return x.astype(np.float32)


def brute_force(x, q, k, metric):
    """(scores, indices) of the k best points for every query, in float64 numpy; scores
    are squared distances for l2 (ascending), similarities otherwise (descending)."""
    x, q = x.astype(np.float64), q.astype(np.float64)
    if metric == "cosine":
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
    if metric == "l2":
        scores = (q**2).sum(1)[:, None] - 2 * q @ x.T + (x**2).sum(1)[None, :]
        order = np.argsort(scores, axis=1, kind="stable")[:, :k]
    else:
        scores = q @ x.T
        order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, axis=1), order


def recall(found, truth):
    return np.mean([len(np.intersect1d(f, t)) / len(t) for f, t in zip(found, truth)])


@pytest.fixture(scope="module")
def small():
    return np.random.default_rng(1).normal(size=(400, 12)).astype(np.float32)


# -- exact search ---------------------------------------------------------------------
@pytest.mark.parametrize("metric", ["l2", "cosine", "ip"])
def test_exact_search_equals_numpy(small, metric):
    queries = np.random.default_rng(2).normal(size=(50, 12)).astype(np.float32)
    index = EmbeddingIndex(small, metric=metric, kind="flat", progress=False)
    for q in (queries, small[:30]):
        D, I = index.search(q, k=15)
        D_ref, I_ref = brute_force(small, q, 15, metric)
        assert D.shape == I.shape == (len(q), 15) and D.dtype == np.float32 and I.dtype == np.int64
        np.testing.assert_array_equal(I, I_ref)
        np.testing.assert_allclose(D, D_ref, rtol=1e-4, atol=1e-4)


def test_search_accepts_k_equal_to_n_and_one_query(small):
    index = EmbeddingIndex(small, metric="l2", kind="flat", progress=False)
    D, I = index.search(small[:1], k=len(small))
    assert sorted(I[0].tolist()) == list(range(len(small)))
    assert np.all(np.diff(D[0]) >= 0)


def test_auto_is_exact_when_small_and_approximate_beyond(small, monkeypatch):
    assert EmbeddingIndex(small, progress=False).kind == "flat"
    monkeypatch.setattr(index_module, "AUTO_EXACT_MAX", 100)
    assert EmbeddingIndex(small, progress=False).kind == "ivf"


def test_search_does_not_modify_the_callers_data(small):
    x, q = small.copy(), small[:5].copy()
    index = EmbeddingIndex(x, metric="cosine", kind="flat", progress=False)
    index.search(q, 3)
    index.knn_graph(k=3)
    np.testing.assert_array_equal(x, small)
    np.testing.assert_array_equal(q, small[:5])


# -- approximate search ----------------------------------------------------------------
@pytest.fixture(scope="module")
def blobs():
    return clustered(50_000, 32, clusters=500, seed=3)


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_approximate_recall_at_10(blobs, kind):
    """Default settings reach recall@10 >= 0.95, for queries and for the k-NN graph."""
    rng = np.random.default_rng(4)
    sample = np.sort(rng.choice(len(blobs), 300, replace=False))
    index = EmbeddingIndex(blobs, metric="l2", kind=kind, progress=False)
    assert index.kind == kind
    _, truth = brute_force(blobs, blobs[sample], 11, "l2")  # the point itself comes first
    _, I = index.search(blobs[sample], 10)
    default_recall = recall(I, truth[:, :10])
    assert default_recall >= 0.95
    if kind == "ivf":  # its graph has its own search path (queries taken list by list)
        graph = index.knn_graph(k=10, kernel="connectivity", symmetrize=False)
        neighbours = graph[sample].tolil().rows
        assert recall(neighbours, truth[:, 1:]) >= 0.95
        check_graph_form(graph, len(blobs), symmetric=False)
    # the data is not trivial: the cheapest setting loses neighbours
    if kind == "ivf":
        index.index.nprobe = 1
    else:
        index.index.hnsw.efSearch = 1
    assert recall(index.search(blobs[sample], 10)[1], truth[:, :10]) < min(default_recall, 0.95)


def test_ivf_nprobe_is_tuned_to_the_data(blobs, caplog):
    """nprobe=None picks the cheapest setting that reaches the recall target on a sample;
    harder data gets a larger nprobe, hopeless data a warning; a given nprobe is kept."""
    separated = clustered(20_000, 32, 200, seed=6, center_scale=2.0)
    easy = EmbeddingIndex(separated, metric="l2", kind="ivf", progress=False)
    assert easy.index.nprobe == easy.nprobe_ and easy.recall_ >= NPROBE_TARGET
    weak = clustered(20_000, 32, 200, seed=6, center_scale=0.3)
    hard = EmbeddingIndex(weak, metric="l2", kind="ivf", progress=False)
    assert hard.nprobe_ > easy.nprobe_
    sample = np.arange(0, 20_000, 97)
    _, truth = brute_force(weak, weak[sample], 11, "l2")
    assert recall(hard.search(weak[sample], 11)[1], truth) >= 0.95
    noise = np.random.default_rng(7).standard_normal((20_000, 64)).astype(np.float32)
    with caplog.at_level(logging.WARNING, logger="batchsel.index"):
        lost = EmbeddingIndex(noise, metric="l2", kind="ivf", progress=False)
    assert lost.nprobe_ == NPROBE_STEPS[-1] and lost.recall_ < 0.95
    assert any("recall@10 is only" in r.getMessage() for r in caplog.records)
    fixed = EmbeddingIndex(blobs[:20_000], metric="l2", kind="ivf", nprobe=3, progress=False)
    assert fixed.index.nprobe == fixed.nprobe_ == 3


@pytest.mark.parametrize("metric", ["l2", "cosine", "ip"])
def test_ivf_graph_search_in_list_order_equals_plain_search(small, metric, monkeypatch):
    """The k-NN graph of an IVF index takes its queries from the inverted lists, in
    blocks: it must find exactly what searching the points in data order finds."""
    # many blocks, lists cut across blocks (the index's module binds the function: patch it there)
    monkeypatch.setattr(index_module, "ivf_list_blocks", lambda index, dim: ivf_list_blocks(index, dim, 37))
    index = EmbeddingIndex(small, metric=metric, kind="ivf", nprobe=2, progress=False)
    assert index.index.nlist > 3
    D, I = index.neighbors(5)
    D_ref, I_ref = index.search(small, 6)
    not_self = I_ref != np.arange(len(small))[:, None]
    assert not_self.sum(1).min() >= 5
    order = np.argsort(~not_self, axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(I, np.take_along_axis(I_ref, order, axis=1))
    np.testing.assert_allclose(D, np.take_along_axis(D_ref, order, axis=1), rtol=1e-5, atol=1e-5)


# -- the k-NN graph -------------------------------------------------------------------
def check_graph_form(g, n, symmetric=True):
    assert isinstance(g, sp.csr_matrix) and g.shape == (n, n)
    assert g.indices.dtype == np.int64 and g.indptr.dtype == np.int64
    assert g.dtype == np.float32
    assert g.has_sorted_indices
    assert np.all(g.data > 0) and np.all(g.data <= 1)
    assert not g.diagonal().any()
    if symmetric:
        assert (g != g.T).nnz == 0


@pytest.mark.parametrize(
    "metric, kernel",
    [
        ("l2", "rbf"),
        ("cosine", "rbf"),
        ("l2", "cosine"),
        ("cosine", "cosine"),
        ("ip", "cosine"),
        ("l2", "connectivity"),
    ],
)
def test_knn_graph_form_and_weights(small, metric, kernel):
    k = 7
    index = EmbeddingIndex(small, metric=metric, kind="flat", progress=False)
    directed = index.knn_graph(k=k, kernel=kernel, symmetrize=False)
    graph = index.knn_graph(k=k, kernel=kernel)
    check_graph_form(graph, len(small))
    check_graph_form(directed, len(small), symmetric=False)
    # directed: exactly the k nearest other points of every row
    assert np.all(np.diff(directed.indptr) == k)
    _, I_ref = brute_force(small, small, k + 1, metric)
    for i in range(0, len(small), 37):
        assert set(directed[i].indices) == set(I_ref[i][I_ref[i] != i][:k])
    # symmetrized: w = max(W, W^T), every point keeps at least its k neighbours
    np.testing.assert_array_equal(graph.toarray(), np.maximum(directed.toarray(), directed.toarray().T))
    assert np.diff(graph.indptr).min() >= k
    rows, cols = directed.nonzero()
    w = np.asarray(directed[rows, cols]).ravel()
    a, b = small[rows].astype(np.float64), small[cols].astype(np.float64)
    if kernel == "connectivity":
        np.testing.assert_array_equal(w, 1.0)
    elif kernel == "cosine":
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        np.testing.assert_allclose(w, np.clip(cos, np.finfo(np.float32).tiny, 1), rtol=1e-4, atol=1e-5)
    else:
        if metric == "cosine":
            a = a / np.linalg.norm(a, axis=1, keepdims=True)
            b = b / np.linalg.norm(b, axis=1, keepdims=True)
        sq = ((a - b) ** 2).sum(1)
        kth = np.array([sq[rows == i].max() for i in range(len(small))])
        np.testing.assert_allclose(index.sigma_**2, np.median(kth), rtol=1e-4)  # documented bandwidth
        np.testing.assert_allclose(w, np.exp(-sq / index.sigma_**2), rtol=1e-3, atol=1e-6)


def test_knn_graph_given_sigma_and_shortcut(small):
    g = knn_graph(small, k=5, metric="l2", sigma=2.0, progress=False, kind="flat")
    check_graph_form(g, len(small))
    index = EmbeddingIndex(small, metric="l2", kind="flat", progress=False)
    assert (index.knn_graph(k=5, sigma=2.0) != g).nnz == 0
    assert (index.knn_graph(k=5) != g).nnz > 0
    with pytest.raises(ValueError, match="sigma must be > 0, got 0"):
        index.knn_graph(k=5, sigma=0.0)


def test_duplicates_give_no_self_loops():
    # with exact duplicates faiss may list the twin before the point itself
    base = np.random.default_rng(5).normal(size=(60, 4)).astype(np.float32)
    x = np.concatenate([base, base, base])
    index = EmbeddingIndex(x, metric="l2", kind="flat", progress=False)
    D, I = index.neighbors(4)
    assert not (I == np.arange(len(x))[:, None]).any()
    np.testing.assert_allclose(D[:, :2], 0, atol=1e-5)  # the two twins first
    g = index.knn_graph(k=4)
    check_graph_form(g, len(x))


def test_knn_graph_of_constant_data_is_well_defined():
    g = EmbeddingIndex(np.ones((20, 3), np.float32), metric="l2", kind="flat", progress=False).knn_graph(k=3)
    check_graph_form(g, 20)
    np.testing.assert_array_equal(g.data, 1.0)


# -- bad input ------------------------------------------------------------------------
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_embeddings_and_queries(small, value):
    x = small.copy()
    x[17, 3] = value
    with pytest.raises(ValueError, match=rf"embeddings contains NaN or inf \(first at row 17: {value}\)"):
        EmbeddingIndex(x, progress=False)
    q = small[:3].copy()
    q[2, 0] = value
    with pytest.raises(ValueError, match=rf"queries contains NaN or inf \(first at row 2: {value}\)"):
        EmbeddingIndex(small, progress=False).search(q, 1)


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.zeros(8, np.float32), "must be 2-D .*got 1-D array of shape \\(8,\\)"),
        (np.zeros((4, 3, 2), np.float32), "must be 2-D .*got 3-D array of shape \\(4, 3, 2\\)"),
        (np.zeros((0, 8), np.float32), "is empty: shape \\(0, 8\\)"),
        (np.zeros((8, 0), np.float32), "is empty: shape \\(8, 0\\)"),
    ],
)
def test_bad_shapes(small, bad, match):
    with pytest.raises(ValueError, match="embeddings " + match):
        EmbeddingIndex(bad, progress=False)
    index = EmbeddingIndex(small, progress=False)
    with pytest.raises(ValueError, match="queries " + match):
        index.search(bad, 1)


def test_k_out_of_range(small):
    index = EmbeddingIndex(small, progress=False)
    n = len(small)
    for k in (n, n + 1):
        with pytest.raises(ValueError, match=rf"k must be smaller than the number of points \({n}\), got {k}"):
            index.knn_graph(k=k)
        with pytest.raises(ValueError, match=rf"k must be smaller than the number of points \({n}\), got {k}"):
            index.neighbors(k)
    with pytest.raises(ValueError, match=rf"k must be <= {n}, got {n + 1}"):
        index.search(small[:2], n + 1)
    with pytest.raises(ValueError, match="k must be >= 1, got 0"):
        index.search(small[:2], 0)
    with pytest.raises(ValueError, match="k must be >= 1, got 0"):
        index.knn_graph(k=0)
    with pytest.raises(TypeError, match="k must be an integer, got 2.5"):
        index.knn_graph(k=2.5)


def test_query_dimension_mismatch(small):
    index = EmbeddingIndex(small, progress=False)
    with pytest.raises(ValueError, match="queries have dimension 11 but the index has dimension 12"):
        index.search(small[:3, :11], 2)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            dict(metric="manhattan"),
            r"metric must be one of \('cosine', 'euclidean', 'ip'\) \(or 'l2' for 'euclidean'\), "
            r"got 'manhattan'",
        ),
        (dict(kind="annoy"), r"kind must be one of \('auto', 'flat', 'ivf', 'hnsw'\), got 'annoy'"),
        (dict(nprobe=0), "nprobe must be >= 1, got 0"),
    ],
)
def test_unknown_options(small, kwargs, match):
    with pytest.raises(ValueError, match=match):
        EmbeddingIndex(small, progress=False, **kwargs)


def test_unknown_kernel_and_rbf_without_distance(small):
    with pytest.raises(ValueError, match=r"kernel must be one of \('rbf', 'cosine', 'connectivity'\), got 'gauss'"):
        EmbeddingIndex(small, progress=False).knn_graph(k=3, kernel="gauss")
    with pytest.raises(ValueError, match="kernel='rbf' needs a distance"):
        EmbeddingIndex(small, metric="ip", progress=False).knn_graph(k=3, kernel="rbf")


def test_bad_paths(tmp_path):
    with pytest.raises(ValueError, match="no such file .*missing.npy"):
        EmbeddingIndex(tmp_path / "missing.npy", progress=False)
    np.savez(tmp_path / "x.npz", x=np.ones((3, 2)))
    with pytest.raises(ValueError, match=r"expected a \.npy file"):
        EmbeddingIndex(tmp_path / "x.npz", progress=False)


# -- memory ---------------------------------------------------------------------------
def test_npy_path_is_memory_mapped_not_read(tmp_path, small):
    path = tmp_path / "emb.npy"
    np.save(path, small)
    index = EmbeddingIndex(str(path), metric="l2", kind="flat", progress=False)
    assert isinstance(index.embeddings, np.memmap) and index.embeddings.mode == "r"
    assert index.embeddings.filename == str(path.resolve())
    D, I = index.search(small[:4], 3)
    np.testing.assert_array_equal(I[:, 0], np.arange(4))
    check_graph_form(index.knn_graph(k=4), len(small))


def test_float32_c_contiguous_input_is_not_copied(small):
    index = EmbeddingIndex(small, metric="cosine", progress=False)
    assert np.shares_memory(index.embeddings, small)
    t = torch.from_numpy(small)
    assert np.shares_memory(EmbeddingIndex(t, progress=False).embeddings, small)
    other = EmbeddingIndex(small.astype(np.float64), progress=False).embeddings
    assert other.dtype == np.float32 and other.flags.c_contiguous


def test_progress_and_logging(small, caplog, capsys):
    with caplog.at_level(logging.INFO, logger="batchsel.index"):
        EmbeddingIndex(small, kind="ivf", progress=False).knn_graph(k=3)
    assert any("training IVF index" in r.getMessage() for r in caplog.records)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""  # no prints, no bar with progress=False


# -- issue 14: scale ---------------------------------------------------------------------
@pytest.mark.parametrize("scale", [1e20, 1e-30])
@pytest.mark.parametrize("kernel", ["cosine", "rbf"])
def test_cosine_results_do_not_depend_on_the_scale(small, scale, kernel):
    # float32 norms of 1e20 vectors overflow (NaN vectors, an empty graph), of 1e-30
    # vectors underflow (zero vectors): the normalization is done in float64
    ref = knn_graph(small, k=6, metric="cosine", kernel=kernel, progress=False)
    scaled = knn_graph(small * np.float32(scale), k=6, metric="cosine", kernel=kernel, progress=False)
    assert scaled.nnz == ref.nnz > 0
    np.testing.assert_array_equal(scaled.indices, ref.indices)
    np.testing.assert_allclose(scaled.data, ref.data, rtol=1e-5)
    _, I = EmbeddingIndex(small * np.float32(scale), metric="cosine", progress=False).search(small[:5], k=3)
    np.testing.assert_array_equal(I, EmbeddingIndex(small, metric="cosine", progress=False).search(small[:5], k=3)[1])


@pytest.mark.parametrize("metric", ["l2", "ip"])
@pytest.mark.parametrize("scale, match", [(1e20, "overflow"), (1e-30, "underflow")])
def test_distances_out_of_float32_range_are_refused(small, metric, scale, match):
    # before: faiss returned -1 neighbours (1e20) or ties everywhere (1e-30) and the
    # k-NN graph came back empty or arbitrary without a word
    with pytest.raises(ValueError, match=f"{match} float32.*rescale"):
        EmbeddingIndex(small * np.float32(scale), metric=metric, progress=False)


def test_missing_neighbours_and_empty_graphs_raise(small, monkeypatch):
    index = EmbeddingIndex(small, metric="l2", kind="flat", progress=False)
    real = index.index.search

    def search_with_holes(q, k):
        D, I = real(q, k)
        I[3, 1:] = -1  # exact search never does this unless distances were NaN
        return D, I

    monkeypatch.setattr(index.index, "search", search_with_holes)
    with pytest.raises(ValueError, match="no neighbour for 1 of 400 points"):
        index.knn_graph(k=4)
    monkeypatch.undo()
    ivf = EmbeddingIndex(small, metric="l2", kind="ivf", progress=False)
    none = (np.zeros((400, 4), np.float32), np.full((400, 4), -1, np.int64))
    monkeypatch.setattr(ivf, "neighbors", lambda k: none)
    with pytest.raises(ValueError, match="graph of 400 points is empty"):
        ivf.knn_graph(k=4)


def test_rows_of_gives_the_embeddings_of_points_as_the_index_holds_them(small):
    # public (data/dedup.py reads an index's rows, a ShardedIndex's included): it was _rows_of
    index = EmbeddingIndex(small.astype(np.float64), metric="cosine", kind="flat", progress=False)
    rows = index.rows_of(np.array([3, 0]))
    assert rows.dtype == np.float32 and np.array_equal(rows, small[[3, 0]].astype(np.float32))
