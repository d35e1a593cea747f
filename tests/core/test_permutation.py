"""``core.permutation``: numpy's permutation, the same numbers and the generator left in
the same state, whichever path (numpy's below ``FAST_LEAST``, the compiled one above)."""

from __future__ import annotations

import numpy as np
import pytest

from batchsel.core import permutation as P


@pytest.mark.parametrize("n", [0, 1, 2, 3, 100, P.FAST_LEAST - 1, P.FAST_LEAST, 200_003])
def test_permutation_is_numpys_and_leaves_the_generator_where_numpy_does(n):
    for seed in (0, 1, 12345):
        theirs, ours = np.random.default_rng(seed), np.random.default_rng(seed)
        expected = theirs.permutation(n)
        got = P.permutation(ours, n)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, expected)
        # the next draws agree: the same number of 32-bit draws, the buffered half included
        assert ours.integers(0, 2**40) == theirs.integers(0, 2**40)
        assert ours.random() == theirs.random()


def test_the_compiled_shuffle_is_numpys_on_other_bit_generators():
    for kind in (np.random.PCG64DXSM, np.random.Philox, np.random.SFC64, np.random.MT19937):
        theirs, ours = np.random.Generator(kind(5)), np.random.Generator(kind(5))
        np.testing.assert_array_equal(P.permutation(ours, 100_000), theirs.permutation(100_000))
        assert ours.random() == theirs.random()


def test_numpys_own_permutation_where_the_check_fails(monkeypatch):
    calls = []
    monkeypatch.setattr(P, "agrees_with_numpy", lambda: calls.append(1) or False)
    monkeypatch.setattr(P, "_fast", lambda rng, out: pytest.fail("the compiled shuffle ran after a failed check"))
    got = P.permutation(np.random.default_rng(0), P.FAST_LEAST * 2)
    np.testing.assert_array_equal(got, np.random.default_rng(0).permutation(P.FAST_LEAST * 2))
    assert calls


def test_state_address_is_the_ctypes_interfaces():
    for kind in (np.random.PCG64, np.random.Philox):
        bits = kind(3)
        assert P.state_address(bits) == bits.ctypes.state_address


@pytest.mark.parametrize("n", [0, 3, P.FAST_LEAST, 150_001])
def test_permutation_of_an_array_is_numpys(n):
    values = np.arange(n, dtype=np.int64) * 7 + 3
    theirs, ours = np.random.default_rng(4), np.random.default_rng(4)
    got = P.permutation(ours, values)
    np.testing.assert_array_equal(got, theirs.permutation(values))
    np.testing.assert_array_equal(values, np.arange(n, dtype=np.int64) * 7 + 3)  # a new array
    assert ours.random() == theirs.random()


@pytest.mark.parametrize("n", [5, P.FAST_LEAST + 7])
def test_shuffle_in_place_is_numpys_shuffle_of_a_view(n):
    theirs, ours = np.random.default_rng(9), np.random.default_rng(9)
    x, y = np.arange(n + 3, dtype=np.int64), np.arange(n + 3, dtype=np.int64)
    theirs.shuffle(x[3:])
    P.shuffle_in_place(ours, y[3:])
    np.testing.assert_array_equal(x, y)  # the view's entries only, in numpy's order
    assert ours.random() == theirs.random()
