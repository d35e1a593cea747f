"""The sieves of sieve-streaming: one candidate set (:class:`Sieve`) per threshold
``(1 + eps)^i`` in ``[m, 2 k m]``, m the largest singleton value seen so far, opened and
closed as m grows (:class:`SieveSet`), the rows they hold (for the refinement), the best
closed sieve, and the result: the best sieve, or lazy greedy over their rows.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable

import numpy as np

from batchsel.submodular.functions.base import SetFunction
from batchsel.submodular.optimizers import Selection, maximize
from batchsel.submodular.streaming.kernels import scan, singletons

# Rows processed at a time inside a chunk: bounds the float64 temporaries (block x d) and
# the facility-location similarity block (block x m float32, 64 MB at m = 1000).
_BLOCK_ROWS = 1 << 14
# Candidate gains evaluated at once while scanning a sieve for its next row: the first
# accepted row ends the scan (the gains after it change), so start small, then double.
_FIRST_BATCH = 16
_MAX_BATCH = 4096


class Sieve:
    """One threshold's candidate set: k slots of indices and gains, the objective's state.

    Parameters
    ----------
    k : int
        Slots (the most rows the sieve takes).
    state_size : int
        Length of the objective's state (float64).

    Attributes
    ----------
    size : int
        Rows taken.
    value : float
        Their value, the sum of their gains.
    indices, gains : numpy.ndarray
        Global row indices (int64, -1 for a free slot) and gains (float64) of the rows taken.
    state : numpy.ndarray
        The objective's state over the rows taken.

    Example
    -------
    >>> sieve = Sieve(3, 2)
    >>> sieve.size, sieve.indices.tolist()
    (0, [-1, -1, -1])
    """

    __slots__ = ("size", "value", "indices", "gains", "state")

    def __init__(self, k: int, state_size: int) -> None:
        self.size = 0
        self.value = 0.0
        self.indices = np.full(k, -1, dtype=np.int64)
        self.gains = np.zeros(k, dtype=np.float64)
        self.state = np.zeros(state_size, dtype=np.float64)

    def scan(
        self, fn: Any, v: float, block: np.ndarray, single: np.ndarray, start: int, stop: int, base: int
    ) -> tuple[int, list[int]]:
        """Offer the sieve the rows ``start .. stop - 1`` of a prepared block, in order: it
        takes a row when its gain is at least ``(v / 2 - value) / (k - size)`` (and > 0),
        until it holds k rows.

        Parameters
        ----------
        fn : FeatureRows or ReferenceRows
            The objective over rows (the compiled loop when it has a ``kind``, else numpy
            gains in batches).
        v : float
            The sieve's threshold ``(1 + eps)^i``.
        block : numpy.ndarray
            The rows as ``fn.prepare`` returned them.
        single : numpy.ndarray
            Their singleton values (a gain never exceeds it: rows below the threshold are
            skipped unevaluated).
        start, stop : int
            The run of rows of ``block`` the sieve is open on.
        base : int
            Global index of the block's first row.

        Returns
        -------
        tuple
            ``(evaluations, added)``: the gains computed and the positions in ``block`` of
            the rows taken.

        Example
        -------
        >>> from batchsel.submodular.streaming.scoring import FeatureRows
        >>> fn, block = FeatureRows("sqrt", None), np.array([[1.0, 0.0], [0.0, 4.0], [1.0, 0.0]])
        >>> sieve = Sieve(2, 2)
        >>> sieve.scan(fn, 2.0, block, np.array([1.0, 2.0, 1.0]), 0, 3, 100), sieve.indices.tolist()
        ((2, [0, 1]), [100, 101])
        """
        k = self.indices.shape[0]
        if fn.kind >= 0:
            added = np.empty(k, dtype=np.int64)
            self.size, self.value, evaluations, n_added = scan(
                fn.kind, fn.param, block, single, start, stop, k, v, self.state, self.indices, self.gains,
                self.size, self.value, base, added,
            )  # fmt: skip
            return evaluations, added[:n_added].tolist()
        evaluations, taken = 0, []
        pos = start
        while pos < stop and self.size < k:
            threshold = (v / 2.0 - self.value) / (k - self.size)
            # a gain never exceeds the singleton value (submodularity, and so in floating
            # point for these gains): rows below the threshold need no evaluation
            seg = single[pos:stop]
            candidates = np.flatnonzero(seg >= threshold if threshold > 0 else seg > 0) + pos
            found, batch, at = -1, _FIRST_BATCH, 0
            while at < candidates.size:
                rows = candidates[at : at + batch]
                g = fn.gains(self.state, block, rows)
                evaluations += rows.size
                ok = (g >= threshold) & (g > 0)
                if ok.any():
                    j = int(np.argmax(ok))
                    found, gain = int(rows[j]), float(g[j])
                    break
                at += rows.size
                batch = min(2 * batch, _MAX_BATCH)
            if found < 0:
                break
            fn.add(self.state, block, found)
            taken.append(found)
            self.indices[self.size] = base + found
            self.gains[self.size] = gain
            self.value += gain
            self.size += 1
            pos = found + 1
        return evaluations, taken


class SieveSet:
    """The sieves of one stream, keyed by their threshold's exponent ``i``: sieve i is open
    while ``m <= (1 + eps)^i <= 2 k m`` (m the largest singleton value so far) and takes a
    row when its gain is at least ``(v / 2 - value) / (k - size)``, ``v = (1 + eps)^i``.
    A sieve that closes is forgotten, but the best closed one is remembered; with
    ``refine``, the rows of the sieves' sets are kept once each for the refinement.

    Parameters
    ----------
    k : int
        Number of rows to pick.
    epsilon : float
        Threshold spacing (``0 < epsilon < 1``).
    refine : bool
        Keep the sieves' rows, for :meth:`selection`'s lazy greedy over them.

    Attributes
    ----------
    sieves : dict of int to Sieve
        The open sieves.
    kept : dict of int to numpy.ndarray
        With ``refine``: the rows (by global index) the open and the best closed sieve hold.
    dropped : tuple or None
        The best closed sieve: ``(value, (i, indices, gains))``.
    max_singleton : float
        The largest singleton value seen.
    evaluations : int
        Marginal gains computed.

    Example
    -------
    >>> from batchsel.submodular.streaming.scoring import FeatureRows
    >>> x = np.abs(np.random.default_rng(0).normal(size=(500, 8)))
    >>> sieves = SieveSet(5, 0.1, refine=False)
    >>> sieves.consume(FeatureRows("sqrt", None), x, 0)
    >>> value, indices, gains = sieves.best()
    >>> len(indices), bool(np.isclose(value, gains.sum()))
    (5, True)
    """

    def __init__(self, k: int, epsilon: float, refine: bool) -> None:
        self.k, self.epsilon, self.refine = k, epsilon, refine
        self.sieves: dict[int, Sieve] = {}
        self.kept: dict[int, np.ndarray] = {}
        self.dropped: tuple[float, tuple[int, np.ndarray, np.ndarray]] | None = None
        self.max_singleton = 0.0
        self.evaluations = 0

    def consume(self, fn: Any, x: np.ndarray, base: int) -> None:
        """Process the rows ``x``, numbered ``base ..`` in the stream, as if they arrived one
        at a time, in blocks (bounded temporaries).

        Parameters
        ----------
        fn : FeatureRows or ReferenceRows
            The objective over rows.
        x : numpy.ndarray
            The rows (``n x d``).
        base : int
            Global index of the first row.
        """
        for s in range(0, x.shape[0], _BLOCK_ROWS):
            self._block(fn, x[s : s + _BLOCK_ROWS], base + s)

    def held_indices(self) -> np.ndarray:
        """Global row indices of the rows the sieves hold, once each, sorted: every open
        sieve's and the remembered best closed sieve's (the rows a later chunk may still make
        part of the result).

        Returns
        -------
        numpy.ndarray
            int64 row indices (numbered in the order the rows arrived).
        """
        held = [sv.indices[: sv.size] for sv in self.sieves.values()]
        if self.dropped is not None:
            held.append(np.asarray(self.dropped[1][1], dtype=np.int64))
        return np.unique(np.concatenate(held)).astype(np.int64) if held else np.empty(0, np.int64)

    def best(self) -> tuple[float, np.ndarray, np.ndarray]:
        """The best sieve by value; ties to the smaller threshold (the closed sieve's is
        smaller than every open one's).

        Returns
        -------
        tuple
            ``(value, indices, gains)``; ``(0.0, [], [])`` while no sieve holds a row.
        """
        best: tuple[float, np.ndarray, np.ndarray] = (0.0, np.empty(0, np.int64), np.empty(0, np.float64))
        if self.dropped is not None:
            best = (self.dropped[0], self.dropped[1][1], self.dropped[1][2])
        for i in sorted(self.sieves):
            sv = self.sieves[i]
            if sv.size and sv.value > best[0]:
                best = (sv.value, sv.indices[: sv.size], sv.gains[: sv.size])
        return best

    def selection(self, rows_seen: int, function: Callable[[np.ndarray], SetFunction] | None) -> Selection:
        """The result: the best sieve or, when it did better, lazy greedy over the kept rows.

        Parameters
        ----------
        rows_seen : int
            Rows of the stream so far (``extra["rows_seen"]``).
        function : callable or None
            The set function over kept rows (``function(rows)``) for the refinement; None:
            no refinement.

        Returns
        -------
        Selection
            ``optimizer="sieve"``; ``extra`` holds ``rows_seen``, ``sieves``,
            ``max_singleton``, ``sieve_value``, ``kept_rows`` and ``refined``.
        """
        best = self.best()
        extra = {
            "rows_seen": rows_seen,
            "sieves": len(self.sieves),
            "max_singleton": self.max_singleton,
            "sieve_value": float(best[0]),
            "kept_rows": len(self.kept),
            "refined": False,
        }
        evaluations = self.evaluations
        if function is not None and self.kept:
            # Lazy greedy over the union of the kept rows (every open sieve's and the best
            # dropped one's): it holds the best sieve, so its greedy picks are worth at least
            # (1 - 1/e) of it; the better of the two is kept, so the guarantee stays.
            order = np.array(sorted(self.kept), dtype=np.int64)  # ties to the smallest row
            rows = np.stack([self.kept[j] for j in order.tolist()])
            greedy = maximize(function(rows), min(self.k, order.size), "lazy")
            evaluations += greedy.evaluations
            if greedy.value > best[0]:
                best = (greedy.value, order[greedy.indices], greedy.gains)
                extra["refined"] = True
        return Selection(
            best[1].copy(), best[2].copy(), float(best[0]), optimizer="sieve", evaluations=evaluations, extra=extra
        )

    def state(self, d: int | None, state_size: int) -> dict[str, Any]:
        """The sieves as arrays, copies (the part of ``SieveStreaming.state_dict`` after
        the reference and the rows held back).

        Parameters
        ----------
        d : int or None
            Columns of the rows (None before the first row).
        state_size : int
            Length of a sieve's state.

        Returns
        -------
        dict
            ``exponents``, ``sizes``, ``values``, ``indices``, ``gains``, ``states``,
            ``dropped``, ``kept_indices`` and ``kept_rows``.
        """
        exps = sorted(self.sieves)
        sieves = [self.sieves[i] for i in exps]
        return {
            "exponents": np.array(exps, dtype=np.int64),
            "sizes": np.array([sv.size for sv in sieves], dtype=np.int64),
            "values": np.array([sv.value for sv in sieves], dtype=np.float64),
            "indices": np.array([sv.indices for sv in sieves], dtype=np.int64).reshape(len(exps), self.k),
            "gains": np.array([sv.gains for sv in sieves], dtype=np.float64).reshape(len(exps), self.k),
            "states": np.array([sv.state for sv in sieves], dtype=np.float64).reshape(len(exps), state_size),
            "dropped": None if self.dropped is None else (self.dropped[0], copy.deepcopy(self.dropped[1])),
            "kept_indices": np.array(sorted(self.kept), dtype=np.int64),
            "kept_rows": (
                np.stack([self.kept[j] for j in sorted(self.kept)]) if self.kept else np.empty((0, d or 0), np.float32)
            ),
        }

    def load(self, state: dict[str, Any], state_size: int) -> None:
        """Restore the sieves, the counters and the kept rows from a ``state_dict``.

        Parameters
        ----------
        state : dict
            ``SieveStreaming.state_dict()``'s, as arrays (``from_portable``).
        state_size : int
            Length of a sieve's state.
        """
        self.max_singleton, self.evaluations = float(state["max_singleton"]), int(state["evaluations"])
        self.sieves = {}
        for row, i in enumerate(state["exponents"].tolist()):
            sv = Sieve(self.k, state_size)
            sv.size, sv.value = int(state["sizes"][row]), float(state["values"][row])
            sv.indices[:] = state["indices"][row]
            sv.gains[:] = state["gains"][row]
            sv.state[:] = state["states"][row]
            self.sieves[i] = sv
        self.dropped = None if state["dropped"] is None else (state["dropped"][0], copy.deepcopy(state["dropped"][1]))
        self.kept = {int(j): np.array(r) for j, r in zip(state["kept_indices"].tolist(), state["kept_rows"])}

    def _block(self, fn: Any, x: np.ndarray, base: int) -> None:
        """Process rows ``base ..`` as if they arrived one at a time."""
        k = self.k
        block = fn.prepare(x, base)
        b = x.shape[0]
        zero = np.zeros(fn.state_size(x.shape[1]), dtype=np.float64)
        if fn.kind >= 0:
            single = np.empty(b, dtype=np.float64)
            singletons(fn.kind, fn.param, block, zero, single)
        else:  # in parts: bounds the rows x d float64 temporaries
            single = np.concatenate(
                [fn.gains(zero, block, np.arange(s, min(s + _MAX_BATCH, b))) for s in range(0, b, _MAX_BATCH)]
            )
        self.evaluations += b
        # m_t: the largest singleton value up to and including row t
        m = np.maximum.accumulate(np.maximum(single, self.max_singleton))
        self.max_singleton = float(m[-1])
        if self.max_singleton <= 0:
            return  # no row has value yet: no sieve
        log_step = math.log1p(self.epsilon)
        positive = m > 0
        # sieve i is open at row t when m_t <= (1 + eps)^i <= 2 k m_t; none while m_t = 0
        # (those rows come first: lo = hi = min keeps both non-decreasing)
        lo = np.full(b, np.iinfo(np.int64).min, dtype=np.int64)
        hi = lo.copy()
        lo[positive] = np.ceil(np.log(m[positive]) / log_step).astype(np.int64)
        hi[positive] = np.floor(np.log(2.0 * k * m[positive]) / log_step).astype(np.int64)
        first = min(min(self.sieves, default=int(lo[positive][0])), int(lo[positive][0]))
        closed = False
        for i in range(first, int(hi[-1]) + 1):
            # lo and hi grow with t, so sieve i is open on one run of rows [start, stop)
            start = int(np.searchsorted(hi, i, side="left"))
            stop = int(np.searchsorted(lo, i, side="right"))
            sieve = self.sieves.get(i)
            if sieve is None:
                if start >= stop:
                    continue
                sieve = self.sieves[i] = Sieve(k, fn.state_size(x.shape[1]))
            if sieve.size < k:
                evaluations, added = sieve.scan(fn, (1.0 + self.epsilon) ** i, block, single, start, stop, base)
                self.evaluations += evaluations
                if self.refine:  # the rows of the sieves' sets, once each (for the refinement)
                    for t in added:
                        if base + t not in self.kept:
                            self.kept[base + t] = x[t].copy()
            if stop < b:  # m passed (1 + eps)^i: the sieve closes
                del self.sieves[i]
                closed = True
                if sieve.size and (self.dropped is None or sieve.value > self.dropped[0]):
                    self.dropped = (
                        sieve.value,
                        (i, sieve.indices[: sieve.size].copy(), sieve.gains[: sieve.size].copy()),
                    )
        if closed and self.kept:  # forget the rows only closed sieves held
            used = set(self.held_indices().tolist())
            self.kept = {j: r for j, r in self.kept.items() if j in used}
