"""GreeDi (Mirzasoleiman et al., 2013): the items split into random parts (simulated in one
process, or one part per rank of a communicator), greedy on each part, then greedy on the
union of their picks; the better of that and the best part wins. :func:`greedi` runs it on
a whole set function (``maximize``'s ``"greedi"``); :func:`greedi_facility_location` builds
only each part's facility location, so no rank holds the ``N x N`` similarity.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np

from batchsel.core.checks import check_int, check_seed, load_embeddings
from batchsel.core.communicator import Communicator, check_ranks_agree
from batchsel.submodular.functions.base import SetFunction
from batchsel.submodular.functions.facility_location import METRICS, CoverRows, FacilityLocation, rows_similarity
from batchsel.submodular.optimizers.greedy import lazy_greedy
from batchsel.submodular.optimizers.run import GreedyRun, Selection


def greedi_splits(pool: np.ndarray, seed: int, parts: int | None, comm: Communicator | None) -> list[np.ndarray]:
    """GreeDi's random split of ``pool`` into one sorted part per rank of ``comm`` (or
    ``parts``, default 4), the same on every rank.

    Parameters
    ----------
    pool : numpy.ndarray
        The items to split (int64).
    seed : int
        Seed of the split.
    parts : int or None
        Number of parts in one process (default 4); with ``comm``, None or its size.
    comm : Communicator or None
        One part per rank.

    Returns
    -------
    list of numpy.ndarray
        The parts, each sorted.

    Raises
    ------
    ValueError
        If ``parts`` is not the communicator's size.

    Example
    -------
    >>> [p.tolist() for p in greedi_splits(np.arange(6), 0, 2, None)]
    [[2, 3, 5], [0, 1, 4]]
    """
    if comm is not None:
        if parts is not None and parts != comm.size:
            raise ValueError(f"parts={parts} but the communicator has {comm.size} ranks")
        m = int(comm.size)
    else:
        m = check_int(parts if parts is not None else 4, "parts", minimum=1)
    perm = np.random.default_rng(seed).permutation(pool)
    return [np.sort(s) for s in np.array_split(perm, m)]


def greedi(
    run: GreedyRun, pool: np.ndarray, budget: float, seed: int, parts: int | None, comm: Communicator | None
) -> Selection:
    """GreeDi on a whole set function (``maximize``'s ``"greedi"``): ``pool`` split by
    :func:`greedi_splits`, lazy greedy for the budget in each part, lazy greedy on the union
    of the parts' picks; the better of that and the best part is the result. Over ranks,
    every rank holds the whole function and runs its part; every rank returns the same
    result (checked: ranks whose functions differ raise).

    Parameters
    ----------
    run : GreedyRun
        The run: restarted for each part and for the merge.
    pool : numpy.ndarray
        Sorted indices (int64) of the items that may be picked.
    budget : float
        Number of picks (an int) or, when ``run.cost`` is set, the total cost the picks may
        spend (then each part spends it too).
    seed : int
        Seed of the split.
    parts : int or None
        Number of parts in one process (default 4).
    comm : Communicator or None
        One part per rank (``rank``, ``size`` and ``allgather`` are used).

    Returns
    -------
    Selection
        ``optimizer="greedi"``; ``extra`` holds ``parts``, ``merged_value`` and
        ``part_values``.

    Example
    -------
    >>> from batchsel import FacilityLocation
    >>> f = FacilityLocation.from_embeddings(np.random.default_rng(0).normal(size=(200, 8)).astype(np.float32))
    >>> sel = greedi(GreedyRun(f, np.empty(0, np.int64), None, False), np.arange(200), 5, 0, 2, None)
    >>> len(sel), sel.extra["parts"]
    (5, 2)
    """
    splits = greedi_splits(pool, seed, parts, comm)
    m = len(splits)
    per_part = budget if run.cost is not None else None

    def local(part: np.ndarray) -> tuple[list[int], float]:
        run.start()
        if part.size == 0:
            return [], -np.inf
        b = per_part if per_part is not None else min(int(budget), part.size)
        picks = lazy_greedy(run, part, b)
        return picks, float(run.f.value)

    if comm is None:
        results = [local(p) for p in splits]
    else:
        check_ranks_agree(
            comm, "the set function", function=type(run.f).__name__, n=int(run.f.n), pool=_digest(pool), budget=budget
        )
        results = comm.allgather(local(splits[int(comm.rank)]))
    union = np.unique(np.concatenate([np.asarray(p, dtype=np.int64) for p, _ in results]))
    run.start()
    b = budget if run.cost is not None else min(int(budget), union.size)
    merged = lazy_greedy(run, union, b)
    merged_value = float(run.f.value)
    best_local = max(range(m), key=lambda i: (results[i][1], -i))
    picks = merged
    if results[best_local][1] > merged_value:
        picks = results[best_local][0]
        run.start()
        for j in picks:
            run.take(j)
    sel = run.finish(picks, "greedi")
    sel.extra.update(parts=m, merged_value=merged_value, part_values=[v for _, v in results])
    if comm is not None:  # the merge ran on every rank's own function: equal only if the functions are
        _check_same_selection(comm, sel)
    return sel


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).view(np.uint8)).hexdigest()[:16]  # type: ignore[arg-type]


def _check_same_selection(comm: Communicator, sel: Selection) -> None:
    """Collective: ranks whose functions differ in content (same n, other data) would return
    different selections, or the same picks with different values; they raise instead.
    Values are compared to a relative 1e-6: ranks on different CPUs may round differently."""
    every = comm.allgather((_digest(sel.indices.astype(np.int64)), float(sel.value)))
    if all(d == every[0][0] and math.isclose(v, every[0][1], rel_tol=1e-6) for d, v in every):
        return
    held = "; ".join(f"rank {r}: picks {d}, value {v:.9g}" for r, (d, v) in enumerate(every))
    raise RuntimeError(
        f"the ranks disagree on the GreeDi result ({held}): their set functions differ "
        f"(built from different data?); every rank must build the same function"
    )


def _lazy(f: SetFunction, k: int) -> Selection:
    """``maximize(f, k)``: lazy greedy over every item of ``f``, from the empty set."""
    run = GreedyRun(f, np.empty(0, np.int64), None, False)
    return run.finish(lazy_greedy(run, np.arange(f.n, dtype=np.int64), k), "lazy")


def greedi_facility_location(
    embeddings: Any,
    k: int,
    *,
    metric: str = "euclidean",
    comm: Communicator | None = None,
    parts: int | None = None,
    seed: int = 0,
) -> Selection:
    """GreeDi for facility location over embeddings, with each part's function on its part
    only (the decomposable GreeDi of Mirzasoleiman et al., 2013): no rank builds the
    ``N x N`` similarity.

    The N points are split into ``m`` random parts (the ranks of ``comm``, or ``parts``
    in one process, default 4); each part runs lazy greedy for k picks on the facility
    location of its own points (``FacilityLocation.from_embeddings`` of the part: an
    ``(N/m)^2`` similarity); the ``m * k`` picks are gathered; lazy greedy picks k of them
    on the facility location over all N points, which needs only their ``m k x N``
    similarity rows. The better of that and the best part's picks (on the same function)
    is returned, identical on every rank. Work per rank: about ``1 / m^2`` of the
    similarity plus ``m k N d`` for the merge, against ``N^2 d`` for one process.

    Parameters
    ----------
    embeddings : array-like
        ``N x d`` rows (every rank passes the same ones).
    k : int
        Number of picks (``1 <= k <= N``).
    metric : str, default "euclidean"
        ``"euclidean"`` or ``"cosine"``, as ``FacilityLocation.from_embeddings``.
    comm : Communicator, optional
        One part per rank (``rank``, ``size`` and ``allgather`` are used); all ranks call
        with the same arguments.
    parts : int, optional
        Number of parts in one process (default 4).
    seed : int, default 0
        Seed of the split.

    Returns
    -------
    Selection
        ``value`` is the facility location of the picks with the floor (for euclidean) at
        the smallest similarity among the gathered rows, not the ``N x N`` matrix's
        (unknown without it): it ranks selections like ``FacilityLocation.from_embeddings``'
        value, and differs from it by a constant; cosine has floor 0 in both. ``extra``
        holds ``parts``, ``merged_value`` and ``part_values``.

    Example
    -------
    >>> x = np.random.default_rng(0).normal(size=(400, 8)).astype(np.float32)
    >>> sel = greedi_facility_location(x, 10, parts=2)
    >>> len(sel), sel.optimizer
    (10, 'greedi')
    """
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    given_dtype = str(getattr(embeddings, "dtype", ""))
    x = load_embeddings(embeddings)
    k = check_int(k, "k", minimum=1, maximum=x.shape[0])
    seed = check_seed(seed)
    if comm is not None:
        check_ranks_agree(comm, "the embeddings", shape=x.shape, dtype=given_dtype or str(x.dtype), k=k, seed=seed)
    splits = greedi_splits(np.arange(x.shape[0]), seed, parts, comm)

    def local(part: np.ndarray) -> np.ndarray:
        if part.size == 0:
            return np.empty(0, np.int64)
        f = FacilityLocation.from_embeddings(x[part], metric=metric, dense_max=part.size)
        return part[_lazy(f, min(k, part.size)).indices].astype(np.int64)

    picks = [local(p) for p in splits] if comm is None else comm.allgather(local(splits[int(comm.rank)]))
    sel = _merge_parts(x, picks, k, metric)
    if comm is not None:
        _check_same_selection(comm, sel)
    return sel


def _merge_parts(x: np.ndarray, picks: list[np.ndarray], k: int, metric: str) -> Selection:
    """The merge of :func:`greedi_facility_location`: lazy greedy for k picks on the facility
    location of the rows of ``x`` over the union of the parts' ``picks``; the better of that
    and the best part's picks (on the same function)."""
    union = np.unique(np.concatenate(picks))
    sim = rows_similarity(x, union, metric)
    g = CoverRows(sim, float(sim.min()) if metric == "euclidean" else 0.0)
    merged = _lazy(g, min(k, union.size))
    # the parts' own picks on the same function (GreeDi keeps the best of all)
    part_values = [g.evaluate(np.searchsorted(union, p)) if p.size else -np.inf for p in picks]
    best = max(range(len(picks)), key=lambda i: (part_values[i], -i))
    if part_values[best] > merged.value:
        chosen = np.searchsorted(union, picks[best])
        g.reset()
        gains = [g.add(int(j)) for j in chosen]
        sel = Selection(
            indices=union[chosen],
            gains=np.asarray(gains),
            value=float(g.value),
            optimizer="greedi",
            evaluations=merged.evaluations,
        )
    else:
        sel = Selection(
            indices=union[merged.indices],
            gains=merged.gains,
            value=merged.value,
            optimizer="greedi",
            evaluations=merged.evaluations,
        )
    sel.extra.update(parts=len(picks), merged_value=merged.value, part_values=part_values)
    return sel
