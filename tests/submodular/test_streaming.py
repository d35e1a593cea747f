"""Sieve streaming (batchsel.submodular.streaming): the sieve rule checked against a row-by-row
implementation written from the paper, chunking invariance, exact resume, the values
against the offline functions and lazy greedy, files read chunk by chunk, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

import batchsel
from batchsel import FeatureBased, ReferenceFacilityLocation, SieveStreaming, maximize
from batchsel.submodular.streaming import read_npy_chunks


def features(n: int = 3000, d: int = 16, seed: int = 0) -> np.ndarray:
    """Clustered non-negative rows (ReLU of a gaussian mixture), like penultimate features."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(12, d))
    x = centers[rng.integers(0, 12, n)] + 0.6 * rng.normal(size=(n, d))
    return np.maximum(x, 0).astype(np.float32)


def sieve_by_the_paper(x: np.ndarray, k: int, eps: float) -> tuple[list[int], float]:
    """Sieve-streaming row by row (Badanidiyuru et al. 2014, Algorithm 'Sieve-Streaming'
    with m the running largest singleton value), with FeatureBased for the gains."""
    f = FeatureBased(x)
    singles = f.gains(np.arange(len(x)))
    sieves: dict[int, FeatureBased] = {}
    best_dropped: tuple[float, list[int]] = (0.0, [])
    m = 0.0
    step = math.log1p(eps)
    for t in range(len(x)):
        m = max(m, singles[t])
        if m <= 0:
            continue
        lo, hi = math.ceil(math.log(m) / step), math.floor(math.log(2 * k * m) / step)
        for i in sorted(sieves):
            if i < lo:  # threshold below m: dropped, remembered if best
                s = sieves.pop(i)
                if s.selected and s.value > best_dropped[0]:
                    best_dropped = (s.value, list(s.selected))
        for i in range(lo, hi + 1):
            s = sieves.setdefault(i, FeatureBased(x))
            if len(s.selected) < k:
                v = (1 + eps) ** i
                gain = s.gains([t])[0]
                if gain > 0 and gain >= (v / 2 - s.value) / (k - len(s.selected)):
                    s.add(t)
    best = best_dropped
    for i in sorted(sieves):
        if sieves[i].selected and sieves[i].value > best[0]:
            best = (sieves[i].value, list(sieves[i].selected))
    return best[1], best[0]


@pytest.mark.parametrize("k,eps", [(5, 0.2), (20, 0.1)])
def test_sieve_rule_matches_a_row_by_row_implementation(k, eps):
    x = features(600, 8, seed=1)
    x[:40] *= 0.01  # small values first: m grows, low sieves close while the stream runs
    expected, value = sieve_by_the_paper(x, k, eps)
    got = SieveStreaming("feature-based", k, epsilon=eps, refine=False).fit(x, chunk_rows=97)
    assert got.indices_.tolist() == expected
    assert got.value_ == pytest.approx(value, rel=1e-12)
    assert got.selection_.optimizer == "sieve" and got.selection_.extra["refined"] is False


def test_any_chunking_gives_the_same_result_and_values_are_the_functions():
    x = features()
    whole = SieveStreaming("feature-based", 30).fit(x, chunk_rows=len(x))
    for rows in (1000, 257):
        other = SieveStreaming("feature-based", 30).fit(x, chunk_rows=rows)
        np.testing.assert_array_equal(other.indices_, whole.indices_)
        np.testing.assert_array_equal(other.gains_, whole.gains_)
    pieces = SieveStreaming("feature-based", 30).fit(iter(np.array_split(x, 11)))
    np.testing.assert_array_equal(pieces.indices_, whole.indices_)
    assert len(whole.indices_) == 30 and len(set(whole.indices_.tolist())) == 30
    assert FeatureBased(x).evaluate(whole.indices_) == pytest.approx(whole.value_, rel=1e-9)
    assert whole.gains_.sum() == pytest.approx(whole.value_, rel=1e-12)


@pytest.mark.parametrize("objective", ["feature-based", "facility-location"])
def test_resume_from_any_chunk_equals_the_uninterrupted_run(objective):
    x = features(2400, 12, seed=2)
    chunks = np.array_split(x, 8)
    kwargs = {"reference_size": 500} if objective == "facility-location" else {}
    full = SieveStreaming(objective, 15, **kwargs)
    states = []
    for c in chunks:
        full.partial_fit(c)
        states.append(full.state_dict())
    for stop in (0, 3, 6):  # the reference (first 500 rows) is still held back after chunk 0
        resumed = SieveStreaming(objective, 15, **kwargs)
        resumed.load_state_dict(states[stop])
        for c in chunks[stop + 1 :]:
            resumed.partial_fit(c)
        np.testing.assert_array_equal(resumed.indices_, full.indices_)
        np.testing.assert_array_equal(resumed.gains_, full.gains_)
        assert resumed.n_seen_ == full.n_seen_ == len(x)
    with pytest.raises(ValueError, match="saved by"):
        SieveStreaming(objective, 16, **kwargs).load_state_dict(states[0])


def test_value_against_offline_lazy_greedy():
    x = features(4000, 16, seed=3)
    offline = maximize(FeatureBased(x), 40)
    sieve = SieveStreaming("feature-based", 40, epsilon=0.1).fit(x)
    plain = SieveStreaming("feature-based", 40, epsilon=0.1, refine=False).fit(x)
    assert plain.value_ >= (0.5 - 0.1) * offline.value  # the guarantee, against greedy's value
    assert sieve.value_ >= max(plain.value_, 0.9 * offline.value)
    assert sieve.selection_.extra["sieve_value"] == pytest.approx(plain.value_)


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_facility_location_over_a_reference_sample(metric):
    x = features(3000, 8, seed=4)
    ref = x[np.random.default_rng(0).choice(len(x), 300, replace=False)]
    sieve = SieveStreaming("facility-location", 12, metric=metric, reference=ref).fit(x, chunk_rows=700)
    f = ReferenceFacilityLocation(x, ref, metric)
    assert f.evaluate(sieve.indices_) == pytest.approx(sieve.value_, rel=1e-5)
    assert sieve.value_ >= 0.9 * maximize(f, 12).value
    same = SieveStreaming("facility-location", 12, metric=metric, reference=ref).fit(x, chunk_rows=3000)
    np.testing.assert_array_equal(same.indices_, sieve.indices_)


def test_reference_sample_is_seeded_and_first_rows_without_length():
    x = features(2000, 8, seed=5)
    a = SieveStreaming("facility-location", 10, reference_size=200, seed=1).fit(x)
    b = SieveStreaming("facility-location", 10, reference_size=200, seed=1).fit(x, chunk_rows=333)
    c = SieveStreaming("facility-location", 10, reference_size=200, seed=2).fit(x)
    np.testing.assert_array_equal(a.indices_, b.indices_)
    assert not np.array_equal(a.state_dict()["reference"], c.state_dict()["reference"])
    # an iterator has no length: the reference is its first rows, as if given
    first = SieveStreaming("facility-location", 10, reference_size=200).fit(iter(np.array_split(x, 30)))
    given = SieveStreaming("facility-location", 10, reference=x[:200]).fit(x)
    np.testing.assert_array_equal(first.indices_, given.indices_)
    np.testing.assert_allclose(first.gains_, given.gains_, rtol=1e-6)


def test_npy_file_is_read_in_chunks_and_matches_the_array(tmp_path):
    x = features(1500, 8, seed=6)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "x64.npy", x.astype(np.float64))
    np.save(tmp_path / "xf.npy", np.asfortranarray(x))
    expected = SieveStreaming("feature-based", 10).fit(x, chunk_rows=200)
    for name in ("x.npy", "x64.npy", "xf.npy"):
        got = SieveStreaming("feature-based", 10).fit(str(tmp_path / name), chunk_rows=200)
        np.testing.assert_array_equal(got.indices_, expected.indices_)
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")
    np.testing.assert_array_equal(SieveStreaming("feature-based", 10).fit(mm, 64).indices_, expected.indices_)
    for name in ("x.npy", "xf.npy"):  # plain reads, and memmap slices for Fortran order
        tail = np.concatenate(list(read_npy_chunks(str(tmp_path / name), 300, start=1100)))
        np.testing.assert_array_equal(tail, x[1100:])
    with pytest.raises(ValueError, match="start must be <= 1500"):
        read_npy_chunks(str(tmp_path / "x.npy"), 10, start=1501)


def test_fewer_rows_than_k_and_zero_rows():
    x = features(6, 4)
    s = SieveStreaming("feature-based", 10).fit(x)
    assert 0 < len(s.indices_) <= 6
    zero = SieveStreaming("feature-based", 3).fit(np.zeros((50, 4), np.float32))
    assert zero.indices_.size == 0 and zero.value_ == 0.0


def test_bad_input_names_the_problem(tmp_path):
    x = features(100, 4)
    with pytest.raises(ValueError, match="objective"):
        SieveStreaming("graph-cut", 5)
    with pytest.raises(ValueError, match="k must be >= 1"):
        SieveStreaming("feature-based", 0)
    with pytest.raises(ValueError, match="epsilon"):
        SieveStreaming("feature-based", 5, epsilon=1.0)
    with pytest.raises(ValueError, match="reference applies"):
        SieveStreaming("feature-based", 5, reference=x)
    with pytest.raises(ValueError, match="row 57 has"):
        bad = x.copy()
        bad[57, 2] = -1
        SieveStreaming("feature-based", 5).fit(bad, chunk_rows=50)
    s = SieveStreaming("feature-based", 5).partial_fit(x)
    with pytest.raises(ValueError, match="3 columns, earlier rows had 4"):
        s.partial_fit(x[:, :3])
    nan = x.copy()
    nan[7, 1] = np.nan
    with pytest.raises(ValueError, match="first at row 107"):
        s.partial_fit(nan)
    with pytest.raises(ValueError, match="no such file"):
        SieveStreaming("feature-based", 5).fit(str(tmp_path / "none.npy"))
    with pytest.raises(ValueError, match="overflow float32"):
        SieveStreaming("facility-location", 5).fit(x * np.float32(1e20))
    with pytest.raises(ValueError, match="no rows"):
        SieveStreaming("feature-based", 5).fit(iter([]))


def test_exported():
    assert batchsel.SieveStreaming is SieveStreaming and "SieveStreaming" in batchsel.__all__


def test_callable_concave_uses_the_numpy_path_with_the_same_rule():
    x = features(1500, 8, seed=7)
    compiled = SieveStreaming("feature-based", 15).fit(x, chunk_rows=400)
    generic = SieveStreaming("feature-based", 15, concave=np.sqrt).fit(x, chunk_rows=400)
    np.testing.assert_array_equal(generic.indices_, compiled.indices_)
    assert generic.value_ == pytest.approx(compiled.value_, rel=1e-9)
