"""``Generator.permutation(n)`` for large ``n``: the same numbers, sooner.

numpy's shuffle swaps one pair at a time, and each swap waits for a read from a random
place of the array (an epoch's order of ten million examples is 80 MB: most reads miss
the caches). :func:`permutation` draws a block's swap positions first, from the same bit
generator by the same rule, reads them together (the reads overlap), then swaps: the
same permutation and the generator left in the same state. A check on first use compares
it with numpy's; where they differ (another numpy's rule) numpy's own is used.
"""

from __future__ import annotations

import ctypes
import functools
import logging

import numpy as np
from numba import njit

logger = logging.getLogger(__name__)

#: below this many entries numpy's permutation is used as it is (its array fits the caches)
FAST_LEAST = 1 << 16

#: swaps whose positions are drawn, then read, together
_BLOCK = 256


@njit(nogil=True, inline="always")
def interval(next_uint32, next_uint64, state, largest):  # pragma: no cover - numba
    """A number of ``0 .. largest`` (``numpy.uint64``) drawn by numpy's
    ``random_interval`` from a bit generator's C functions and state (its ``ctypes``): the
    smallest bit mask covering ``largest``, draws rejected above it (32-bit draws while
    ``largest`` fits). Compiled code only."""
    if largest == 0:
        return np.uint64(0)
    mask = largest
    mask |= mask >> np.uint64(1)
    mask |= mask >> np.uint64(2)
    mask |= mask >> np.uint64(4)
    mask |= mask >> np.uint64(8)
    mask |= mask >> np.uint64(16)
    mask |= mask >> np.uint64(32)
    if largest <= np.uint64(0xFFFFFFFF):
        while True:
            value = np.uint64(next_uint32(state)) & mask
            if value <= largest:
                return value
    while True:
        value = np.uint64(next_uint64(state)) & mask
        if value <= largest:
            return value


@njit(cache=True, nogil=True)
def shuffle(next_uint32, next_uint64, state, out):  # pragma: no cover - numba
    """Shuffle ``out`` in place as numpy's ``Generator.shuffle`` does (for ``i`` from the
    last down to 1: swap ``out[i]`` with ``out[random_interval(i)]``), a block of swaps at
    a time, from a bit generator's C functions and state (its ``ctypes``). Returns a sum
    of the values read (kept so that the reads are not compiled away)."""
    where = np.empty(_BLOCK, np.int64)
    read = 0
    i = out.size - 1
    while i > 0:
        count = min(_BLOCK, i)
        for t in range(count):
            where[t] = np.int64(interval(next_uint32, next_uint64, state, np.uint64(i - t)))
        for t in range(count):  # the reads, issued together
            read += out[where[t]]
        for t in range(count):
            j = where[t]
            out[i - t], out[j] = out[j], out[i - t]
        i -= count
    return read


def _fast(rng: np.random.Generator, out: np.ndarray) -> np.ndarray:
    bits = rng.bit_generator
    with bits.lock:  # as numpy's shuffle holds it
        shuffle(bits.ctypes.next_uint32, bits.ctypes.next_uint64, bits.ctypes.state_address, out)
    return out


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def state_address(bits: np.random.BitGenerator) -> int:
    """``bits.ctypes.state_address`` without building the ctypes interface (three function
    casts, which cost more than drawing a window's numbers): the ``state`` field, first of
    the ``bitgen_t`` that the bit generator's capsule holds (numpy's C API).

    Example
    -------
    >>> bits = np.random.default_rng(0).bit_generator
    >>> state_address(bits) == bits.ctypes.state_address
    True
    """
    return int(ctypes.c_void_p.from_address(_capsule_pointer(bits.capsule, b"BitGenerator")).value)


@functools.lru_cache(maxsize=1)
def agrees_with_numpy() -> bool:
    """Whether :func:`permutation`'s compiled shuffle gives numpy's permutations and leaves
    the generator where numpy's does (checked once per process, on a few sizes).

    Example
    -------
    >>> agrees_with_numpy()
    True
    """
    for n in (2, 5, 1000):
        theirs, ours = np.random.default_rng(n), np.random.default_rng(n)
        if not np.array_equal(theirs.permutation(n), _fast(ours, np.arange(n))) or theirs.random() != ours.random():
            logger.warning("numpy's permutation differs from batchsel's copy of its rule: numpy's is used")
            return False
    return True


def permutation(rng: np.random.Generator, x: int | np.ndarray) -> np.ndarray:
    """``rng.permutation(x)``: the same permutation, ``rng`` left in the same state, in a
    fraction of the time for large ``x`` (module docstring).

    Parameters
    ----------
    rng : numpy.random.Generator
        The generator, used by this call alone while it runs (as numpy's: its lock is held).
    x : int or numpy.ndarray
        ``n >= 0`` (a permutation of ``0 .. n - 1``) or a 1-D array (its entries
        permuted, in a new array).

    Returns
    -------
    numpy.ndarray
        int64 for ``n``; a 1-D array of ``x``'s dtype.

    See Also
    --------
    numpy.random.Generator.permutation : the same result.

    Example
    -------
    >>> a, b = np.random.default_rng(7), np.random.default_rng(7)
    >>> bool((permutation(a, 100_000) == b.permutation(100_000)).all()), a.random() == b.random()
    (True, True)
    >>> bool((permutation(a, np.arange(5, 100_005)) == b.permutation(np.arange(5, 100_005))).all())
    True
    """
    out = x.copy() if isinstance(x, np.ndarray) else np.arange(int(x), dtype=np.int64)
    shuffle_in_place(rng, out)  # numpy's permutation: a copy (or arange) shuffled
    return out


def shuffle_in_place(rng: np.random.Generator, x: np.ndarray) -> None:
    """``rng.shuffle(x)``: the same order, ``rng`` left in the same state (the draws of
    ``rng.permutation(len(x))``), without a new array; the compiled shuffle for a large 1-D
    int64 array (a view too), numpy's for anything else.

    Example
    -------
    >>> a, b = np.random.default_rng(3), np.random.default_rng(3)
    >>> x, y = np.arange(100_000), np.arange(100_000)
    >>> shuffle_in_place(a, x[10:]); b.shuffle(y[10:])
    >>> bool((x == y).all()), a.random() == b.random()
    (True, True)
    """
    if x.ndim != 1 or x.dtype != np.int64 or x.size < FAST_LEAST or not agrees_with_numpy():
        rng.shuffle(x)
        return
    _fast(rng, x)


__all__ = ["FAST_LEAST", "agrees_with_numpy", "interval", "permutation", "shuffle", "shuffle_in_place", "state_address"]
