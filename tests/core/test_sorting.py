"""The radix argsorts equal numpy's stable argsort on every kind of float64 input and on integers."""

import numpy as np
import pytest

from batchsel.core.sorting import sort_into_rows, stable_argsort, stable_argsort_int


def _cases(rng, n):
    yield rng.random(n)  # one exponent range: the high bytes' passes skipped
    yield -rng.lognormal(0, 3, n)  # negatives over many exponents
    yield np.round(rng.normal(size=n), 1)  # many ties: index order among them
    special = rng.choice([0.0, -0.0, np.inf, -np.inf, 5e-324, -5e-324, 1.0, -1.0], n)
    yield special  # signed zeros equal, infinities at the ends, subnormals
    yield np.full(n, 3.5)  # every pass skipped


@pytest.mark.parametrize("n", [1, 7, 1023, 1024, 5000, 100_003])
def test_equals_numpys_stable_argsort(n):
    rng = np.random.default_rng(n)
    for values in _cases(rng, n):
        np.testing.assert_array_equal(stable_argsort(values), np.argsort(values, kind="stable"))


@pytest.mark.parametrize("n", [1, 1023, 1024, 5000, 100_003])
@pytest.mark.parametrize("positions", [np.int32, np.int64])
def test_sort_into_rows_lays_numpys_stable_order_out_in_rows(n, positions):
    # the j-th value of the stable order and its index at row j // fill, column j % fill;
    # the rest of each row untouched; a zero written as 0.0 (equal to -0.0 all the same)
    rng = np.random.default_rng(n)
    fill = 8
    rows = -(-n // fill)
    for values in [
        *_cases(rng, n),
        np.array([2.0, 1.0] * (n // 2) + [1.0] * (n % 2)),
    ]:  # (one pass, the first the last)
        out, at = np.full((rows, fill + 2), -7.0), np.full((rows, fill + 2), -1, positions)
        sort_into_rows(values, out, at, 3)
        want = np.argsort(values, kind="stable")
        np.testing.assert_array_equal(at[:, :fill].reshape(-1)[:n], want)
        np.testing.assert_array_equal(out[:, :fill].reshape(-1)[:n], values[want])
        assert not np.signbit(out[:, :fill].reshape(-1)[:n][values[want] == 0.0]).any()
        assert (out[:, fill:] == -7.0).all() and (at[:, fill:] == -1).all()


def test_a_pass_that_moves_keys_is_not_skipped():
    # two values differing in one low byte only: the pass on that byte must run
    a = np.float64(1.0)
    b = np.frombuffer((a.view(np.uint64) + np.uint64(1)).tobytes(), np.float64)[0]
    values = np.array([b, a] * 2000)
    np.testing.assert_array_equal(stable_argsort(values), np.argsort(values, kind="stable"))


@pytest.mark.parametrize("n", [0, 1, 1000, 5000])
def test_integers_equal_numpys_stable_argsort(n):
    rng = np.random.default_rng(n)
    for top in (1, 255, 70_000, 2**40):  # one byte, several, a high byte alone varying
        keys = rng.integers(0, top, n)
        np.testing.assert_array_equal(stable_argsort_int(keys), np.argsort(keys, kind="stable"))
