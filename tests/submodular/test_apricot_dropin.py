"""batchsel.apricot, apricot-select 0.6.1's API over batchsel: names, arguments, results.

Side by side with apricot where it is installed (small data, float64: the same rankings
and gains), else against batchsel's own functions. apricot's own test files, run against
this module, are described in docs/guide/apricot.md.
"""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

import batchsel.apricot as apricot
from batchsel import FacilityLocation, FeatureBased, maximize

rng = np.random.RandomState(0)
X = rng.uniform(0, 1, (120, 10))
BINARY = (rng.uniform(size=(150, 60)) < 0.05).astype(np.float64)

SELECTIONS = [
    "FacilityLocationSelection",
    "FeatureBasedSelection",
    "GraphCutSelection",
    "SumRedundancySelection",
    "SaturatedCoverageSelection",
    "MaxCoverageSelection",
    "MixtureSelection",
    "CustomSelection",
    "CustomGraphSelection",
]
OPTIMIZER_CLASSES = [
    "NaiveGreedy",
    "LazyGreedy",
    "ApproximateLazyGreedy",
    "TwoStageGreedy",
    "StochasticGreedy",
    "SampleGreedy",
    "GreeDi",
    "ModularGreedy",
    "BidirectionalGreedy",
    "SieveGreedy",
]


@pytest.fixture(scope="module", autouse=True)
def _no_sieve_compilation():
    """apricot compiles its streaming kernels in every fit (seconds); nothing here streams
    through apricot (as in test_apricot_parity.py)."""
    import importlib

    if importlib.util.find_spec("apricot") is None:
        yield
        return
    mp = pytest.MonkeyPatch()
    for name in ("facilityLocation", "featureBased", "maxCoverage", "graphCut"):
        module = importlib.import_module(f"apricot.functions.{name}")
        for attr in ("calculate_gains_sieve", "calculate_gains_sieve_sparse"):
            if hasattr(module, attr):
                mp.setattr(module, attr, lambda *args, **kwargs: None)
    yield
    mp.undo()


def _fit(selector, data, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # apricot's numba / sklearn warnings
        return selector.fit(data, **kwargs)


def test_names_and_optimizer_keys_are_apricots():
    for name in SELECTIONS + OPTIMIZER_CLASSES:
        assert hasattr(apricot, name), name
    assert set(apricot.OPTIMIZERS) == {
        "random",
        "modular",
        "naive",
        "lazy",
        "approximate-lazy",
        "two-stage",
        "stochastic",
        "sample",
        "greedi",
        "bidirectional",
        "sieve",
    }
    ref = pytest.importorskip("apricot")
    import inspect

    for name in SELECTIONS:
        ours = list(inspect.signature(getattr(apricot, name)).parameters)
        theirs = list(inspect.signature(getattr(ref, name)).parameters)
        assert ours == theirs, name


def test_attributes_transform_and_fit_transform():
    sel = apricot.FacilityLocationSelection(10, metric="euclidean", optimizer="lazy")
    assert sel.fit(X) is sel
    assert sel.ranking.dtype == np.int64 and sel.ranking.shape == (10,)
    assert sel.gains.dtype == np.float64 and np.all(np.diff(sel.gains) <= 1e-9)
    np.testing.assert_array_equal(sel.subset, X[sel.ranking])
    assert sel.idxs.size == X.shape[0] - 10
    y, w = np.arange(120), np.linspace(0, 1, 120)
    np.testing.assert_array_equal(sel.transform(X), X[sel.ranking])
    xs, ys = sel.transform(X, y)
    np.testing.assert_array_equal(ys, y[sel.ranking])
    xs, none, ws = sel.transform(X, sample_weight=w)
    assert none is None and np.array_equal(ws, w[sel.ranking])
    again = apricot.FacilityLocationSelection(10, metric="euclidean", optimizer="lazy").fit_transform(X, y)
    np.testing.assert_array_equal(again[1], ys)


def test_gains_are_batchsel_functions_gains():
    """The adapters delegate: ranking and gains are maximize()'s on the same function."""
    sel = _fit(apricot.FeatureBasedSelection(15, "sqrt", optimizer="naive"), X)
    ref = maximize(FeatureBased(X, "sqrt"), 15, "naive")
    np.testing.assert_array_equal(sel.ranking, ref.indices)
    np.testing.assert_allclose(sel.gains, ref.gains, rtol=1e-12)
    sim = X @ X.T
    sel = _fit(apricot.FacilityLocationSelection(15, "precomputed", optimizer="lazy"), sim)
    ref = maximize(FacilityLocation(sim), 15, "lazy")
    np.testing.assert_array_equal(sel.ranking, ref.indices)
    assert sel.subset.shape == (0, 120)  # apricot keeps no rows for a precomputed similarity


# apricot compiles its kernels on every fit: serially for lazy greedy (~0.4 s), in parallel
# mode for the other optimizers (~2.5 s); the cases keep to lazy where the optimizer is not
# what they check.
CASES = {
    "fl-euclidean": lambda m: m.FacilityLocationSelection(12, "euclidean", optimizer="lazy"),
    "fl-cosine": lambda m: m.FacilityLocationSelection(12, "cosine", optimizer="lazy"),
    "fl-corr-init": lambda m: m.FacilityLocationSelection(12, "corr", optimizer="lazy", initial_subset=[3, 7]),
    "gc": lambda m: m.GraphCutSelection(12, "euclidean", optimizer="lazy"),
    "sum": lambda m: m.SumRedundancySelection(12, "cosine", optimizer="lazy"),
    # naive: apricot's lazy greedy takes a gain of 0 while positive ones remain (see
    # test_apricot_parity.py); its saturated-coverage kernels compile once, at import
    "sat": lambda m: m.SaturatedCoverageSelection(12, "cosine", optimizer="naive"),
    "fb-log": lambda m: m.FeatureBasedSelection(12, "log", optimizer="lazy"),
    "fb-rows": lambda m: m.FeatureBasedSelection(12, "sqrt", optimizer="lazy", initial_subset=X[:3] * 2),
    "stochastic": lambda m: m.FacilityLocationSelection(12, "cosine", optimizer="stochastic", random_state=3),
    "sample": lambda m: m.FeatureBasedSelection(12, "sqrt", optimizer="sample", random_state=1),
    "approximate": lambda m: m.FeatureBasedSelection(12, "sqrt", optimizer="approximate-lazy"),
    "mixture": lambda m: m.MixtureSelection(
        12,
        [m.FacilityLocationSelection(12), m.GraphCutSelection(12)],
        np.array([1.0, 0.3]),
        metric="euclidean",
        optimizer="lazy",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_ranking_and_gains_as_apricot(case):
    ref = pytest.importorskip("apricot")
    ours = _fit(CASES[case](apricot), X)
    theirs = _fit(CASES[case](ref), X)
    np.testing.assert_array_equal(ours.ranking, theirs.ranking)
    np.testing.assert_allclose(ours.gains, theirs.gains, rtol=1e-9, atol=1e-9 * np.abs(theirs.gains).max())


def test_greedi_as_apricot():
    """apricot 0.6.1's GreeDi (8 parts, k // 4 picks each, its RandomState's deal): its
    result with naive greedy inside, stored (apricot compiles its kernels for each of the 10
    functions, ~50 s). With lazy greedy inside apricot's picks part from its naive ones
    from the 4th on, here they do not (docs/guide/apricot.md)."""
    expected = [47, 11, 56, 41, 39, 26, 92, 15, 12, 8, 44, 87]
    gains = [85.619, 4.4657, 3.5702, 0.988, 0.56, 0.633, 0.8632, 0.2315, 0.7264, 0.4544, 0.5808, 0.9487]
    for inner in ("naive", "lazy"):
        kwds = {"optimizer1": inner, "optimizer2": inner}
        sel = apricot.FacilityLocationSelection(12, "cosine", optimizer="greedi", optimizer_kwds=kwds, random_state=0)
        sel.fit(X)
        np.testing.assert_array_equal(sel.ranking, expected)
        np.testing.assert_array_almost_equal(sel.gains, gains, 4)


@pytest.mark.parametrize("optimizer", ["lazy", "stochastic"])
def test_knapsack_as_apricot(optimizer):
    ref = pytest.importorskip("apricot")
    cost = np.abs(np.random.RandomState(0).randn(X.shape[0])) + 0.1
    make = lambda m: m.FeatureBasedSelection(10, "sqrt", optimizer=optimizer, random_state=0)  # noqa: E731
    ours, theirs = _fit(make(apricot), X, sample_cost=cost), _fit(make(ref), X, sample_cost=cost)
    np.testing.assert_array_equal(ours.ranking, theirs.ranking)
    np.testing.assert_allclose(ours.gains, theirs.gains, rtol=1e-9)
    assert cost[ours.ranking].sum() <= 10


def test_sparse_precomputed_and_max_coverage():
    sim = sp.csr_matrix(np.where(X @ X.T > 3.0, X @ X.T, 0.0))
    dense = _fit(apricot.FacilityLocationSelection(10, "precomputed", optimizer="lazy"), sim.toarray())
    sparse = _fit(apricot.FacilityLocationSelection(10, "precomputed", optimizer="lazy"), sim)
    np.testing.assert_array_equal(dense.ranking, sparse.ranking)
    cov = _fit(apricot.MaxCoverageSelection(10, optimizer="naive"), sp.csr_matrix(BINARY))
    assert cov.subset.shape == (10, 60)
    assert (np.diff(cov.gains) <= 0).all()


def test_modular_keeps_apricots_tie_order():
    """Exact ties come in apricot's order: ``argsort()[::-1]`` (NumPy's sort, reversed)."""
    x = np.ones((30, 4))  # every singleton gain ties
    sel = _fit(apricot.FeatureBasedSelection(5, "sqrt", optimizer="modular"), x)
    np.testing.assert_array_equal(sel.ranking, np.zeros(30).argsort()[::-1][:5])


def test_mixture_takes_list_weights():
    """apricot's MixtureSelection fails on NumPy 2 with list weights (array(copy=False))."""
    sel = apricot.MixtureSelection(
        5, [apricot.FeatureBasedSelection(5), apricot.FeatureBasedSelection(5, "log")], [1, 2]
    )
    assert _fit(sel, X).ranking.shape == (5,)


def test_partial_fit_streams_chunks():
    whole = apricot.FeatureBasedSelection(10, "sqrt").partial_fit(X)
    chunked = apricot.FeatureBasedSelection(10, "sqrt")
    for part in np.array_split(X, 4):
        chunked.partial_fit(part)
    np.testing.assert_array_equal(whole.ranking, chunked.ranking)
    np.testing.assert_array_equal(chunked.subset, X[chunked.ranking])
    fl = apricot.FacilityLocationSelection(8, "cosine", reservoir=X)
    for part in np.array_split(X, 3):
        fl.partial_fit(part)
    assert fl.ranking.size == 8 and np.array_equal(fl.subset, X[fl.ranking])
    with pytest.raises(NotImplementedError, match="GraphCutSelection"):
        apricot.GraphCutSelection(5).partial_fit(X)


def test_argument_errors_as_apricot():
    with pytest.raises(ValueError, match="n_samples must be a positive value"):
        apricot.FeatureBasedSelection(0)
    with pytest.raises(ValueError, match="Optimizer must be"):
        apricot.FeatureBasedSelection(5, optimizer="fast")
    with pytest.raises(ValueError, match="Cannot select more examples"):
        apricot.FeatureBasedSelection(500).fit(X)
    with pytest.raises(ValueError, match="negative"):
        apricot.FeatureBasedSelection(5).fit(X - 0.5)
    with pytest.raises(ValueError, match="k must be smaller than m"):
        apricot.FeatureBasedSelection(3, optimizer="greedi").fit(X)  # l = 3 // 4 = 0 per part


def test_optimizer_objects_equal_their_names():
    """apricot's optimizer classes (``apricot.optimizers``) give what their names give."""
    pairs = [
        ("two-stage", apricot.TwoStageGreedy()),
        ("naive", apricot.NaiveGreedy()),
        ("approximate-lazy", apricot.ApproximateLazyGreedy()),
        ("modular", apricot.ModularGreedy()),
    ]
    for name, obj in pairs:
        by_name = apricot.FacilityLocationSelection(10, "cosine", optimizer=name).fit(X)
        by_object = apricot.FacilityLocationSelection(10, "cosine", optimizer=obj).fit(X)
        np.testing.assert_array_equal(by_name.ranking, by_object.ranking)
    by_name = apricot.FeatureBasedSelection(10, optimizer="stochastic", random_state=4).fit(X)
    by_object = apricot.FeatureBasedSelection(10, optimizer=apricot.StochasticGreedy(random_state=4)).fit(X)
    np.testing.assert_array_equal(by_name.ranking, by_object.ranking)
    greedi = apricot.GreeDi(optimizer1="naive", optimizer2="lazy", random_state=0)
    sel = apricot.FacilityLocationSelection(16, "cosine", optimizer=greedi).fit(X)
    assert (greedi.m, greedi.l) == (8, 4) and sel.ranking.size == 16
    bidirectional = apricot.FeatureBasedSelection(10, optimizer="bidirectional", random_state=0).fit(X)
    assert 0 < bidirectional.ranking.size <= 10


# apricot 0.6.1's own outputs on these inputs (recorded with apricot-select 0.6.1, NumPy 2.4)
APRICOT_SIEVE = {
    "fl_short": (
        [0, 4, 8, 13, 43],
        [2.698573109465911, 0.25294195859665974, 0.11219885380900939, 0.08589878265727233, 0.08257035442795219],
    ),  # noqa: E501
    "fl_60_60": (
        [0, 4, 8, 13, 89],
        [2.6603094341802906, 0.2785653797232349, 0.11531814424657101, 0.09928683586847234, 0.09120953127304453],
    ),  # noqa: E501
    "fl_40x3": (
        [0, 13, 43, 49, 55],
        [2.4680185806014054, 0.3100334287916158, 0.5819637282294171, 0.14533966707867463, 0.10229546075733631],
    ),  # noqa: E501
    "fl_fit_sieve": (
        [0, 4, 8, 10, 11, 12],
        [
            0.6924635251426641,
            0.03197779312013961,
            0.027229087333763752,
            0.021070103861117937,
            0.02160775201310985,
            0.005632441574377393,
        ],
    ),  # noqa: E501
    "fb_chunks": (
        [0, 1, 2, 11, 27, 47],
        [
            7.76234255119168,
            2.794173983298564,
            2.3335514158835373,
            2.4514388299884704,
            2.289111765821964,
            2.0959712051629964,
        ],
    ),  # noqa: E501
    "mc_chunks": ([53, 65, 81, 95, 105, 107], [11.0, 5.0, 7.0, 5.0, 4.0, 1.0]),
}


def _assert_apricots(sel, key, rows=X):
    ranking, gains = APRICOT_SIEVE[key]
    np.testing.assert_array_equal(sel.ranking, ranking)
    np.testing.assert_allclose(sel.gains, gains, rtol=1e-10)
    np.testing.assert_array_equal(sel.subset, rows[sel.ranking])


def test_partial_fit_on_a_short_stream_selects_k_as_apricot():
    """60 rows, k = 5, no reservoir given: apricot's reservoir grows with the stream, so the
    first chunk already selects (batchsel's fixed reference of 1 000 rows never filled)."""
    sel = apricot.FacilityLocationSelection(5, "euclidean", random_state=0).partial_fit(X[:60])
    _assert_apricots(sel, "fl_short")


@pytest.mark.parametrize(("key", "chunks"), [("fl_60_60", [60, 60]), ("fl_40x3", [40, 40, 40])])
def test_partial_fit_reservoir_sampling_as_apricot(key, chunks):
    """The reservoir (50 rows) fills at the second chunk, then is resampled by
    ``random_state`` as apricot's (this raised ``KeyError: 0`` before)."""
    sel = apricot.FacilityLocationSelection(5, "euclidean", max_reservoir_size=50, random_state=0)
    start = 0
    for size in chunks:
        sel.partial_fit(X[start : start + size])
        start += size
    _assert_apricots(sel, key)
    assert isinstance(sel.optimizer, apricot.SieveGreedy)  # apricot swaps it in too


def test_fit_accepts_the_sieve_as_apricot():
    _assert_apricots(apricot.FacilityLocationSelection(6, "cosine", optimizer="sieve").fit(X), "fl_fit_sieve")
    by_fit = apricot.FeatureBasedSelection(6, "sqrt", optimizer="sieve").fit(X)
    by_stream = apricot.FeatureBasedSelection(6, "sqrt").partial_fit(X)
    np.testing.assert_array_equal(by_fit.ranking, by_stream.ranking)
    np.testing.assert_array_equal(by_fit.gains, by_stream.gains)
    assert by_fit.idxs.shape == (X.shape[0],)


def test_feature_based_and_max_coverage_stream_as_apricot():
    fb = apricot.FeatureBasedSelection(6, "sqrt")
    for part in np.array_split(X, 4):
        fb.partial_fit(part)
    _assert_apricots(fb, "fb_chunks")
    mc = apricot.MaxCoverageSelection(6)
    for part in np.array_split(BINARY, 3):
        mc.partial_fit(sp.csr_matrix(part))
    _assert_apricots(mc, "mc_chunks", BINARY)


def test_sieve_thresholds_are_apricots():
    """A first sieve at 1, then (1 + eps)^j - 1 up to the largest singleton gain times k,
    opened as that gain grows and never dropped."""
    sel = apricot.FeatureBasedSelection(4, "sqrt", optimizer_kwds={"epsilon": 0.1})
    sel.partial_fit(X[:10])
    top = np.sqrt(X[:10]).sum(axis=1).max()
    expected = [1] + [1.1**j - 1 for j in range(1, 200) if 1.1**j - 1 <= top * 4]
    np.testing.assert_allclose(sel.optimizer.thresholds, expected)
    sel.partial_fit(X[10:] / 10.0)  # smaller gains: no new sieve
    assert len(sel.optimizer.thresholds) == len(expected)


def test_max_coverage_ties_in_apricots_queue_order():
    """Counts tie: lazy and approximate lazy greedy take the entry pushed first, as apricot
    (naive greedy and the other functions: the smallest index)."""
    b = (np.random.RandomState(4).uniform(size=(8, 6)) < 0.4).astype(np.float64)
    expected = {"lazy": [1, 4, 5], "approximate-lazy": [1, 5, 3], "naive": [1, 4, 2]}  # apricot 0.6.1's
    for optimizer, ranking in expected.items():
        sel = _fit(apricot.MaxCoverageSelection(3, optimizer=optimizer), b)
        np.testing.assert_array_equal(sel.ranking, ranking)
        np.testing.assert_array_equal(sel.gains, [3.0, 2.0, 1.0])


def test_max_coverage_lazy_does_not_take_a_zero_gain_before_a_positive_one():
    """apricot's lazy greedy here takes item 6 (gain 0) while item 4 still gains 1: its
    shortcut at a second zero gain in a row, not followed."""
    b = (np.random.RandomState(0).uniform(size=(8, 6)) < 0.4).astype(np.float64)
    sel = _fit(apricot.MaxCoverageSelection(3, optimizer="lazy"), b)
    np.testing.assert_array_equal(sel.ranking, [2, 7, 4])
    np.testing.assert_array_equal(sel.gains, [3.0, 2.0, 1.0])
