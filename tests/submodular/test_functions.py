"""Set functions: identical to apricot-select 0.6.1, consistent state, input checks."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from batchsel import (
    FacilityLocation,
    FeatureBased,
    GraphCut,
    LogDeterminant,
    Mixture,
    Modular,
    SaturatedCoverage,
    SumRedundancy,
    knn_graph,
    maximize,
)

apricot = pytest.importorskip("apricot")


def _rng(seed=0):
    return np.random.default_rng(seed)


def _points(n, d=16, seed=0):
    return _rng(seed).normal(size=(n, d)).astype(np.float32)


def _rbf(x):
    sq = ((x[:, None, :].astype(np.float64) - x[None, :, :]) ** 2).sum(-1)
    return np.exp(-sq / (2 * x.shape[1]))


def _knn_similarity(x, k=8):
    g = knn_graph(x, k=k, metric="l2", progress=False)
    return (g + sp.identity(x.shape[0], format="csr", dtype=np.float32)).tocsr()


def _int32(g):
    """apricot's numba kernels are typed int32: give it an int32 copy."""
    g = g.copy()
    g.indices, g.indptr = g.indices.astype(np.int32), g.indptr.astype(np.int32)
    return g


def _assert_same(sel, ref, k):
    """Same first-k ranking; gains equal to 1e-5 relative (plus a tiny absolute slack for
    gains that apricot computes as a difference of two large sums)."""
    np.testing.assert_array_equal(sel.indices[:k], ref.ranking[:k])
    scale = np.abs(ref.gains).max()
    np.testing.assert_allclose(sel.gains[:k], ref.gains[:k], rtol=1e-5, atol=1e-9 * scale)


def _fit(selector, data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return selector.fit(data)


# -- identical to apricot ---------------------------------------------------------------------
@pytest.mark.parametrize("n", [150, 600])
def test_facility_location_dense_euclidean_matches_apricot(n):
    x = _points(n, seed=n)
    k = n // 10
    ref = _fit(apricot.FacilityLocationSelection(k, metric="euclidean", optimizer="lazy"), x.astype(np.float64))
    _assert_same(maximize(FacilityLocation.from_embeddings(x), k), ref, k)


def test_facility_location_double_precision_on_tight_far_clusters():
    """Blobs far from the origin (submodlib's benchmark data): the float64 path still
    matches apricot; the default float32 path reaches the same objective value."""
    from sklearn.datasets import make_blobs

    x, _ = make_blobs(n_samples=500, centers=10, n_features=256, cluster_std=2, center_box=(0, 100), random_state=4)
    x = x.astype(np.float32)
    ref = _fit(apricot.FacilityLocationSelection(50, metric="euclidean", optimizer="lazy"), x.astype(np.float64))
    _assert_same(maximize(FacilityLocation.from_embeddings(x, precision="double"), 50), ref, 50)
    single = maximize(FacilityLocation.from_embeddings(x), 50)
    assert single.value == pytest.approx(ref.gains.sum(), rel=1e-5)


def test_facility_location_cosine_matches_apricot():
    x = _points(300, seed=3)
    ref = _fit(apricot.FacilityLocationSelection(30, metric="cosine", optimizer="lazy"), x.astype(np.float64))
    _assert_same(maximize(FacilityLocation.from_embeddings(x, metric="cosine"), 30), ref, 30)


def test_facility_location_sparse_knn_matches_apricot():
    x = _points(800, seed=4)
    g = _knn_similarity(x)
    ref = _fit(apricot.FacilityLocationSelection(60, metric="precomputed", optimizer="lazy"), _int32(g))
    f = FacilityLocation(g)
    assert f.similarity.indices.dtype == np.int64 and f.similarity.indptr.dtype == np.int64
    _assert_same(maximize(f, 60), ref, 60)


@pytest.mark.parametrize("sparse", [False, True])
def test_feature_based_sqrt_matches_apricot(sparse):
    if sparse:
        feats = sp.random(400, 60, density=0.1, random_state=5, format="csr")
        ref_data = _int32(feats)
    else:
        feats = np.abs(_points(400, seed=5))
        ref_data = feats.astype(np.float64)
    ref = _fit(apricot.FeatureBasedSelection(40, concave_func="sqrt", optimizer="lazy"), ref_data)
    _assert_same(maximize(FeatureBased(feats, "sqrt"), 40), ref, 40)


@pytest.mark.parametrize("sparse", [False, True])
def test_graph_functions_match_apricot(sparse):
    x = _points(300, seed=6)
    sim = _knn_similarity(x) if sparse else _rbf(x)
    ref_sim = _int32(sim) if sparse else sim
    cases = [
        (GraphCut(sim, lam=1.0), apricot.GraphCutSelection(30, metric="precomputed", alpha=1, optimizer="lazy")),
        (
            SaturatedCoverage(sim, alpha=0.2),
            apricot.SaturatedCoverageSelection(30, metric="precomputed", alpha=0.2, optimizer="lazy"),
        ),
    ]
    if not sparse:  # apricot's sparse SumRedundancy indexes X[idx, idx] of a CSR: same values
        cases.append((SumRedundancy(sim), apricot.SumRedundancySelection(30, metric="precomputed", optimizer="lazy")))
    for f, selector in cases:
        _assert_same(maximize(f, 30), _fit(selector, ref_sim), 30)


def test_mixture_matches_apricot():
    x = _points(300, seed=7)
    sim = _rbf(x)
    weights = np.array([1.0, 0.3])
    f = Mixture([FacilityLocation(sim), GraphCut(sim)], weights)
    ref = _fit(
        apricot.MixtureSelection(
            30,
            [
                apricot.FacilityLocationSelection(30, metric="precomputed"),
                apricot.GraphCutSelection(30, metric="precomputed"),
            ],
            weights=weights,
            metric="precomputed",
            optimizer="lazy",
        ),
        sim,
    )
    _assert_same(maximize(f, 30), ref, 30)


# -- state consistency ---------------------------------------------------------------------
def _all_functions(seed=8):
    x = _points(120, d=6, seed=seed)
    sim = _rbf(x)
    g = _knn_similarity(x, k=6)
    return {
        "fl_dense": FacilityLocation(sim),
        "fl_sparse": FacilityLocation(g),
        "fl_euclid": FacilityLocation.from_embeddings(x),
        "feature_sqrt": FeatureBased(np.abs(x)),
        "feature_log_sparse": FeatureBased(sp.csr_matrix(np.maximum(x, 0)), "log"),
        "feature_inverse": FeatureBased(np.abs(x), "inverse"),
        "feature_min": FeatureBased(np.abs(x), "min", saturation=2.0),
        "feature_callable": FeatureBased(np.abs(x), np.cbrt),
        "graph_cut": GraphCut(g, lam=2.0),
        "sum_redundancy": SumRedundancy(sim),
        "saturated": SaturatedCoverage(sim, alpha=0.1),
        "logdet": LogDeterminant(sim),
        "modular": Modular(_rng(seed).normal(size=120)),
        "mixture": Mixture([FacilityLocation(g), Modular(np.abs(x[:, 0]))], [1.0, 2.0]),
    }


@pytest.mark.parametrize("name", sorted(_all_functions()))
def test_gains_add_evaluate_agree(name):
    f = _all_functions()[name]
    rng = _rng(1)
    order = rng.permutation(f.n)[:12]
    brute_prev = 0.0
    for j in order:
        predicted = f.gains(np.array([j]))[0]
        gain = f.add(int(j))
        assert gain == predicted
        brute = f.evaluate(f.selected)
        # The gain is f(S + j) - f(S) computed from scratch.
        assert gain == pytest.approx(brute - brute_prev, rel=1e-6, abs=1e-6 * max(1.0, abs(brute)))
        brute_prev = brute
        assert f.value == pytest.approx(brute, rel=1e-6, abs=1e-6)
    # Items in the set gain nothing; evaluate leaves the state alone; reset empties it.
    assert np.all(f.gains(order) == 0)
    before = f.gains(np.arange(f.n))
    f.evaluate(rng.permutation(f.n)[:30])
    np.testing.assert_array_equal(f.gains(np.arange(f.n)), before)
    with pytest.raises(ValueError, match="already in the set"):
        f.add(int(order[0]))
    f.reset()
    assert f.selected == [] and f.value == 0.0
    assert f.evaluate([]) == 0.0


@pytest.mark.parametrize("name", ["fl_dense", "fl_sparse", "feature_sqrt", "saturated", "logdet", "graph_cut"])
def test_gains_do_not_increase(name):
    """Submodularity, in floating point too: lazy greedy's stale bounds rely on it."""
    f = _all_functions()[name]
    everything = np.arange(f.n)
    prev = f.gains(everything)
    for j in _rng(2).permutation(f.n)[:20]:
        f.add(int(j))
        cur = f.gains(everything)
        assert np.all(cur <= prev)
        prev = cur


def test_gains_do_not_depend_on_the_batch():
    f = FacilityLocation.from_embeddings(_points(500, d=32, seed=9))
    f.add(3)
    all_gains = f.gains(np.arange(f.n))
    single = np.array([f.gains(np.array([j]))[0] for j in range(0, f.n, 7)])
    np.testing.assert_array_equal(single, all_gains[::7])


# -- construction ----------------------------------------------------------------------------
def test_from_embeddings_sparse_and_auto():
    x = _points(300, d=8, seed=10)
    f = FacilityLocation.from_embeddings(x, neighbors=5)
    assert f.sparse and f.similarity.indices.dtype == np.int64
    np.testing.assert_array_equal(f.similarity.diagonal(), 1.0)  # every item covers itself
    assert f.similarity.getnnz(axis=1).min() >= 6
    auto = FacilityLocation.from_embeddings(x, dense_max=299)
    assert auto.sparse
    assert not FacilityLocation.from_embeddings(x, dense_max=300).sparse


def test_dense_euclidean_is_apricots_similarity():
    x = _points(200, d=12, seed=11).astype(np.float64) * 5 + 40  # far from the origin
    sq = ((x[:, None] - x[None]) ** 2).sum(-1)
    expected = sq.max() - sq
    for precision in ("single", "double"):
        f = FacilityLocation.from_embeddings(x, precision=precision)
        got = f.similarity.astype(np.float64) - f.floor
        np.testing.assert_allclose(got, expected, rtol=0, atol=2e-5 * sq.max())


def test_functions_accept_int32_sparse_and_store_int64():
    g = _int32(_knn_similarity(_points(100, d=4, seed=12)))
    for f in (FacilityLocation(g), GraphCut(g), SaturatedCoverage(g), SumRedundancy(g)):
        assert f.similarity.indices.dtype == np.int64 and f.similarity.indptr.dtype == np.int64


# -- bad input ---------------------------------------------------------------------------------
def test_bad_similarities():
    sim = _rbf(_points(20, d=3))
    bad = sim.copy()
    bad[3, 4] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        FacilityLocation(bad)
    with pytest.raises(ValueError, match="square"):
        FacilityLocation(sim[:, :10])
    with pytest.raises(ValueError, match="square"):
        GraphCut(sp.csr_matrix(sim[:10]))
    negative = sim.copy()
    negative[2, 5] = -0.5
    with pytest.raises(ValueError, match="non-negative, found -0.5"):
        FacilityLocation(negative)
    with pytest.raises(ValueError, match="non-negative"):
        SaturatedCoverage(sp.csr_matrix(-sim))
    with pytest.raises(ValueError, match="non-negative"):
        FeatureBased(-np.ones((3, 2)))
    with pytest.raises(ValueError, match="concave"):
        FeatureBased(np.ones((3, 2)), "cube")
    with pytest.raises(ValueError, match="saturation"):
        FeatureBased(np.ones((3, 2)), "min")
    with pytest.raises(ValueError, match="positive semi-definite"):
        LogDeterminant(np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="same ground set"):
        Mixture([Modular(np.ones(3)), Modular(np.ones(4))])
    with pytest.raises(ValueError, match="weights"):
        Mixture([Modular(np.ones(3)), Modular(np.ones(3))], [1.0, -1.0])
    with pytest.raises(ValueError, match="metric"):
        FacilityLocation.from_embeddings(np.ones((5, 2)), metric="manhattan")
    with pytest.raises(ValueError, match="NaN"):
        FacilityLocation.from_embeddings(np.full((5, 2), np.nan))


def test_bad_items():
    f = Modular(np.ones(5))
    with pytest.raises(ValueError, match=r"\[0, 5\), found 7"):
        f.gains([1, 7])
    with pytest.raises(ValueError, match=r"\[0, 5\), got -1"):
        f.add(-1)
    with pytest.raises(TypeError, match="integer"):
        f.add(1.5)


def test_knn_graph_is_marked_symmetric_and_skips_the_check(monkeypatch):
    from batchsel import EmbeddingIndex
    from batchsel.submodular.functions import base

    x = np.random.default_rng(0).normal(size=(500, 8)).astype(np.float32)
    g = EmbeddingIndex(x, metric="l2", progress=False).knn_graph(k=6, self_weight=1.0)
    assert np.all(g.diagonal() == 1) and g.indices.dtype == np.int64 and base.is_symmetric(g)
    checked = []
    monkeypatch.setattr(base, "is_symmetric", lambda m: checked.append(1) or True)
    assert FacilityLocation(g).symmetric and not checked  # the mark, no transposition
    assert FacilityLocation(g.copy()).symmetric and checked  # a copy has no mark: checked
    monkeypatch.undo()
    edited = g.copy()
    edited.data[np.flatnonzero(edited.indices[: edited.indptr[1]] != 0)[0]] *= 0.5  # off the diagonal
    assert not FacilityLocation(edited).symmetric
    g.data = g.data.copy()  # new arrays drop the mark
    assert not base.known_symmetric(g)
    with pytest.raises(ValueError, match="self_weight"):
        EmbeddingIndex(x, metric="l2", progress=False).knn_graph(k=6, self_weight=2.0)


# -- issue #15: MaxCoverage, corr, graph functions from embeddings, float64 sparse ----------
def test_max_coverage_is_min_saturated_feature_based():
    x = _rng(1).uniform(0, 1, (120, 30)) * (_rng(2).random((120, 30)) < 0.2)
    from batchsel import MaxCoverage

    f, ref = MaxCoverage(x, threshold=0.7), FeatureBased(x, "min", saturation=0.7)
    np.testing.assert_array_equal(f.gains(np.arange(120)), ref.gains(np.arange(120)))
    sel = maximize(f, 12)
    np.testing.assert_array_equal(sel.indices, maximize(ref, 12).indices)
    covered = np.minimum(x[sel.indices].sum(axis=0), 0.7).sum()
    assert sel.value == pytest.approx(covered, rel=1e-12)
    for bad in (0, -1.0, np.inf, "1"):
        with pytest.raises(ValueError, match="threshold"):
            MaxCoverage(x, threshold=bad)


@pytest.mark.parametrize("neighbors", [None, 6])
def test_corr_metric_is_the_squared_pearson_correlation(neighbors):
    x = _points(150, d=12, seed=3) + np.linspace(0, 5, 12, dtype=np.float32)  # rows with offsets
    r2 = np.corrcoef(x.astype(np.float64)) ** 2
    if neighbors is None:
        double = FacilityLocation.from_embeddings(x, "corr", precision="double").similarity
        np.testing.assert_allclose(double, r2, atol=1e-12)
        single = FacilityLocation.from_embeddings(x, "corr").similarity
        assert single.dtype == np.float32
        np.testing.assert_allclose(single, r2, atol=2e-6)
        # corr is not cosine: the row offsets matter to one and not to the other
        assert np.abs(FacilityLocation.from_embeddings(x, "cosine").similarity - r2).max() > 0.1
    else:
        g = FacilityLocation.from_embeddings(x, "corr", neighbors=neighbors).similarity
        centered = x - x.mean(axis=1, keepdims=True, dtype=np.float64)
        ref = FacilityLocation.from_embeddings(centered, "cosine", neighbors=neighbors).similarity
        np.testing.assert_array_equal(g.indices, ref.indices)
        np.testing.assert_allclose(g.data, ref.data, rtol=1e-6)
    from batchsel import greedi_facility_location

    assert len(greedi_facility_location(x, 5, metric="corr", parts=2)) == 5


def _sq_distances(x):
    x = x.astype(np.float64)
    sq = (x * x).sum(1)
    return np.maximum(sq[:, None] + sq[None, :] - 2 * x @ x.T, 0)


@pytest.mark.parametrize(
    "cls,kwargs", [(GraphCut, {"lam": 2.0}), (SumRedundancy, {}), (SaturatedCoverage, {"alpha": 0.2})]
)
def test_graph_functions_from_embeddings(cls, kwargs):
    """apricot's similarity when dense (euclidean: max d^2 - d^2, cosine / corr: squared),
    the symmetric k-NN graph with neighbors or beyond dense_max."""
    x = _points(120, d=8, seed=4)
    d2 = _sq_distances(x)
    f = cls.from_embeddings(x, "euclidean", precision="double", **kwargs)
    np.testing.assert_allclose(f.similarity, d2.max() - d2, atol=1e-9 * d2.max())
    single = cls.from_embeddings(x, **kwargs)
    assert single.similarity.dtype == np.float32 and single.similarity.min() >= 0
    np.testing.assert_allclose(single.similarity, d2.max() - d2, rtol=1e-5, atol=1e-5 * d2.max())
    cos = cls.from_embeddings(x, "cosine", **kwargs).similarity
    np.testing.assert_allclose(cos, FacilityLocation.from_embeddings(x, "cosine").similarity)
    for sparse in (cls.from_embeddings(x, neighbors=5, **kwargs), cls.from_embeddings(x, dense_max=100, **kwargs)):
        s = sparse.similarity
        assert sp.issparse(s) and np.all(s.diagonal() == 1) and (s != s.T).nnz == 0
    if cls is SaturatedCoverage:
        assert cls.from_embeddings(x, neighbors=5, **kwargs).symmetric  # lazy greedy tracks its gains
    with pytest.raises(ValueError, match="metric must be one of"):
        cls.from_embeddings(x, "manhattan", **kwargs)


@pytest.mark.parametrize("cls", [FacilityLocation, GraphCut, SaturatedCoverage, SumRedundancy])
def test_float64_sparse_similarity_is_kept_float64(cls):
    x = _points(200, d=8, seed=5)
    dense = FacilityLocation.from_embeddings(x, "cosine", precision="double").similarity
    dense[dense < 0.3] = 0
    g64 = sp.csr_matrix(dense)
    f64 = cls(g64)
    assert f64.similarity.dtype == np.float64 and f64.similarity.indices.dtype == np.int64
    assert cls(g64.astype(np.float32)).similarity.dtype == np.float32
    ref = cls(dense)  # the same values, dense float64: the same picks and gains
    a, b = maximize(f64, 15), maximize(ref, 15)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_allclose(a.gains, b.gains, rtol=1e-12, atol=1e-12)


def test_rows_apply_to_feature_based_functions_only():
    x = np.abs(_points(50))
    mix = Mixture([FeatureBased(x, "sqrt"), FeatureBased(x, "log")], weights=[1.0, 0.5])
    gain = mix.add_rows(x[:3])
    assert gain == pytest.approx(mix.evaluate([0, 1, 2]), rel=1e-12) and mix.value == gain
    assert mix.selected == []
    with pytest.raises(TypeError, match="GraphCut takes no rows"):
        GraphCut(np.ones((5, 5))).add_rows(np.ones((1, 5)))
    with pytest.raises(ValueError, match="non-negative"):
        FeatureBased(x).add_rows(-x[:1])
