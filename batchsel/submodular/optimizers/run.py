"""The state of one greedy run (:class:`GreedyRun`: the function, its initial items, the
costs, the gain evaluations and the picks' gains) and its result (:class:`Selection`),
shared by every optimizer family and by adapters that drive the loops
(:mod:`batchsel.apricot`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from batchsel.submodular.functions.base import SetFunction

# Gains per gains() call when every candidate is evaluated (bounds temporaries).
_CHUNK = 1 << 16


@dataclass
class Selection:
    """The result of :func:`~batchsel.submodular.optimizers.maximize` (and of the other
    maximizers: GreeDi, sieve-streaming).

    Attributes
    ----------
    indices : numpy.ndarray
        Selected items (int64), in selection order; the ``initial`` items are not listed.
    gains : numpy.ndarray
        Marginal gain (float64) of each selected item when it was added.
    value : float
        ``f(initial + indices)``.
    optimizer : str, default "lazy"
        The optimizer that produced it.
    evaluations : int, default 0
        Number of marginal gains computed (the cost measure of greedy algorithms).
    extra : dict
        Optimizer details (GreeDi: ``parts``, ``merged_value``, ``part_values``).

    Example
    -------
    >>> sel = Selection(np.array([3, 1]), np.array([2.0, 0.5]), 2.5)
    >>> len(sel), sel.optimizer
    (2, 'lazy')
    """

    indices: np.ndarray
    gains: np.ndarray
    value: float
    optimizer: str = "lazy"
    evaluations: int = 0
    extra: dict = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return int(self.indices.shape[0])


class GreedyRun:
    """The state of one greedy optimization, shared by
    :func:`~batchsel.submodular.optimizers.maximize` and the greedy loops
    (:func:`~batchsel.submodular.optimizers.naive_greedy`,
    :func:`~batchsel.submodular.optimizers.lazy_greedy`,
    :func:`~batchsel.submodular.optimizers.approximate_lazy_greedy`,
    :func:`~batchsel.submodular.optimizers.bidirectional_greedy`, ...): the function, its initial items, the costs, the count of
    gain evaluations and the gains of the picks (as ``f.add`` computed them).

    Constructing it resets ``f`` and adds the initial items (and rows) to it.

    Parameters
    ----------
    f : SetFunction
        The function to maximize; it holds the current set.
    init : numpy.ndarray
        Indices (int64) of the items in the set before the first pick.
    cost : numpy.ndarray or None
        Positive cost (float64) of every item (length ``f.n``): gains are then compared per
        unit cost and the budget is a total cost; None: unit costs, the budget a count.
    progress : bool
        Show a tqdm progress bar over the picks.
    rows : numpy.ndarray or None
        Rows (examples given by their features) in the set before the first pick, for the
        functions with ``add_rows``; None: none.

    Attributes
    ----------
    evaluations : int
        Marginal gains computed so far (:meth:`ratios` counts them).
    picked_gains : list of float
        Marginal gain of each item :meth:`take` added since the last :meth:`start`.

    Example
    -------
    >>> import numpy as np
    >>> from batchsel import FacilityLocation
    >>> from batchsel.submodular.optimizers import lazy_greedy
    >>> x = np.random.default_rng(0).normal(size=(200, 8)).astype(np.float32)
    >>> run = GreedyRun(FacilityLocation.from_embeddings(x), np.empty(0, np.int64), None, False)
    >>> picks = lazy_greedy(run, np.arange(200), 5)
    >>> sel = run.finish(picks, "lazy")
    >>> len(sel), len(run.picked_gains)
    (5, 5)
    """

    def __init__(
        self, f: SetFunction, init: np.ndarray, cost: np.ndarray | None, progress: bool, rows: Any = None
    ) -> None:
        self.f, self.init, self.cost, self.progress, self.rows = f, init, cost, progress, rows
        self.evaluations = 0
        self.start()

    def start(self) -> None:
        """Reset ``f`` to the initial items (and rows) and forget the picks' gains; the count
        of evaluations goes on."""
        self.f.reset()
        for j in self.init:
            self.f.add(int(j))
        if self.rows is not None:
            self.f.add_rows(self.rows)
        self.picked_gains: list[float] = []

    def ratios(self, idx: np.ndarray) -> np.ndarray:
        """Marginal gains of the items ``idx`` on the current set, per unit cost when there are
        costs, computed in chunks and counted in :attr:`evaluations`.

        Parameters
        ----------
        idx : numpy.ndarray
            Item indices (int64).

        Returns
        -------
        numpy.ndarray
            One gain (ratio) per item of ``idx``.

        Raises
        ------
        ValueError
            If a gain is not finite.
        """
        self.evaluations += idx.size
        if idx.size <= _CHUNK:
            g = self.f.gains(idx)
        else:
            g = np.concatenate([self.f.gains(idx[s : s + _CHUNK]) for s in range(0, idx.size, _CHUNK)])
        if not np.isfinite(g).all():
            # NaN compares false with everything: lazy greedy's queue would never settle
            # (and grow without bound), the others would pick arbitrary items
            bad = int(np.flatnonzero(~np.isfinite(g))[0])
            raise ValueError(
                f"the gain of item {int(idx[bad])} is {g[bad]} (not finite): the similarity or "
                f"features of {type(self.f).__name__} overflowed or hold NaN; rescale the "
                f"embeddings (e.g. divide them by their standard deviation)"
            )
        return g if self.cost is None else g / self.cost[idx]

    def affordable(self, idx: np.ndarray, remaining: float) -> np.ndarray:
        """The items of ``idx`` whose cost is at most ``remaining`` (all of them without costs).

        Parameters
        ----------
        idx : numpy.ndarray
            Item indices (int64).
        remaining : float
            The budget left.

        Returns
        -------
        numpy.ndarray
            The affordable items, in the order of ``idx``.
        """
        return idx if self.cost is None else idx[self.cost[idx] <= remaining]

    def take(self, j: int) -> float:
        """Add item ``j`` to the set and its marginal gain to :attr:`picked_gains`.

        Parameters
        ----------
        j : int
            The item.

        Returns
        -------
        float
            The budget spent: its cost, or 1 without costs.
        """
        self.picked_gains.append(self.f.add(j))
        return 1.0 if self.cost is None else float(self.cost[j])

    def bar(self, total: float, desc: str) -> Any:
        """A tqdm progress bar over ``total`` budget, labelled ``desc`` (disabled unless
        ``progress``)."""
        return tqdm(total=total, desc=desc, disable=not self.progress, leave=False)

    def finish(self, picks: list[int], name: str) -> Selection:
        """The result: ``picks`` with :attr:`picked_gains`, the function's value and the
        evaluations.

        Parameters
        ----------
        picks : list of int
            The picked items, in pick order (the gains of exactly these in :attr:`picked_gains`).
        name : str
            The optimizer's name (``Selection.optimizer``).

        Returns
        -------
        Selection
        """
        return Selection(
            indices=np.asarray(picks, dtype=np.int64),
            gains=np.asarray(self.picked_gains, dtype=np.float64),
            value=float(self.f.value),
            optimizer=name,
            evaluations=self.evaluations,
        )
