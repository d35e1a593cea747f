"""Weighted coresets (CRAIG; Mirzasoleiman, Bilmes, Leskovec, ICML 2020).

Per class, greedy facility location over the examples' vectors (embeddings, or gradient
proxies ``softmax(logits) - onehot(y)``: :func:`gradient_proxies`) picks a ``fraction`` of
the class; every picked example gets as weight the number of class members it represents
(those closer to it than to any other pick, itself included). Weights therefore sum to
N, and the weighted loss over the coreset, ``sum_i w_i loss_i / N``, estimates the
full-data loss. Per-class budgets are proportional to class sizes (largest remainders, at
least one pick per class). Each epoch trains on the coreset, shuffled; the batches carry
the weights (``plan.weights(rank)``).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from batchsel.core.checks import check_indices, check_int, check_labels, check_metric, check_rows, load_embeddings
from batchsel.core.world import World
from batchsel.plans.plan import EpochPlan
from batchsel.selectors.offline import OfflineSelector
from batchsel.selectors.selector import weighted_sum
from batchsel.selectors.sharding import epoch_rng, even_split, shard_length, split_batches

logger = logging.getLogger(__name__)

METRICS = ("euclidean", "cosine")


def gradient_proxies(logits: Any, labels: Any) -> np.ndarray:
    """CRAIG's per-example gradient proxy: ``softmax(logits) - onehot(labels)`` (the
    gradient of the cross-entropy w.r.t. the logits), float32 ``N x C``.

    >>> gradient_proxies(np.zeros((1, 2)), [1]).tolist()
    [[0.5, -0.5]]
    """
    z = np.asarray(load_embeddings(logits, name="logits"), dtype=np.float64)
    y = check_labels(labels, z.shape[0])
    if y.size and y.max() >= z.shape[1]:
        raise ValueError(f"labels go up to {int(y.max())} but logits have {z.shape[1]} classes")
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1.0
    return p.astype(np.float32)


def class_budgets(counts: np.ndarray, fraction: float) -> np.ndarray:
    """Picks per class: ``fraction * count`` rounded by largest remainders (so the total
    is ``round(fraction * N)``), at least one for every non-empty class.

    >>> class_budgets(np.array([50, 30, 20]), 0.1).tolist()
    [5, 3, 2]
    """
    counts = np.asarray(counts, dtype=np.int64)
    exact = fraction * counts
    budget = np.floor(exact).astype(np.int64)
    short = int(round(fraction * counts.sum())) - int(budget.sum())
    if short > 0:
        order = np.lexsort((np.arange(len(counts)), -(exact - budget)))  # largest remainder, then lowest class
        budget[order[:short]] += 1
    budget = np.where(counts > 0, np.maximum(budget, 1), 0)
    return np.minimum(budget, counts)


class CoresetSelector(
    OfflineSelector,
    uses_feedback=True,  # observe(embeddings=...) refreshes the vectors the coreset is fit to
    feedback_fields=("embeddings",),
    weighted_plans=True,
    full_batches=True,  # DistributedSampler's policy over the coreset
):
    """A weighted CRAIG coreset of ``fraction`` of the data, batched every epoch.

    Parameters
    ----------
    embeddings:
        ``N x d`` vectors: embeddings or gradient proxies (:func:`gradient_proxies`).
    labels:
        N class ids (facility location runs per class); ``None`` treats all as one class.
    batch_size:
        B (at most the coreset size).
    fraction:
        Share of each class kept, in (0, 1].
    seed:
        Seeds the per-epoch shuffles (and ``optimizer="stochastic"``).
    metric:
        ``"euclidean"`` (or its synonym ``"l2"``) or ``"cosine"``, for the facility location
        (:meth:`FacilityLocation.from_embeddings`) and for assigning members to picks.
    neighbors:
        ``None``: dense similarity per class (sparse k-NN above 20 000 members); an int:
        sparse k-NN similarity.
    optimizer:
        Passed to :func:`batchsel.maximize` (``"lazy"`` default).
    drop_last:
        DistributedSampler's policy over the coreset.

    Attributes
    ----------
    indices_, weights_, budgets_:
        The coreset (sorted), its weights (float32, summing to N) and the picks per class;
        computed on first use, recomputed after ``observe(embeddings=...)``.

    Example
    -------
    >>> import numpy as np
    >>> x = np.random.default_rng(0).normal(size=(200, 8)).astype(np.float32)
    >>> y = np.repeat([0, 1], [150, 50])
    >>> sel = CoresetSelector(x, y, batch_size=10, fraction=0.1, seed=0)
    >>> len(sel.indices_), float(sel.weights_.sum()), sel.budgets_.tolist()
    (20, 200.0, [15, 5])
    >>> plan = sel.plan(epoch=0, world_size=2)
    >>> plan.num_batches, plan.weights(0) is not None
    (1, True)
    """

    @property
    def epoch_examples(self) -> int:
        return self.coreset_size

    def __init__(
        self,
        embeddings: Any,
        labels: Any,
        batch_size: int,
        *,
        fraction: float = 0.1,
        seed: int = 0,
        metric: str = "euclidean",
        neighbors: int | None = None,
        optimizer: str = "lazy",
        drop_last: bool = False,
    ) -> None:
        self.embeddings = load_embeddings(embeddings)
        n = self.embeddings.shape[0]
        self.labels = np.zeros(n, dtype=np.int64) if labels is None else check_labels(labels, n)
        if (
            isinstance(fraction, bool)
            or not isinstance(fraction, (int, float, np.integer, np.floating))
            or not 0 < fraction <= 1
        ):
            raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
        self.fraction = float(fraction)
        self.metric = check_metric(metric, METRICS)
        self.neighbors = None if neighbors is None else check_int(neighbors, "neighbors", minimum=1)
        self.optimizer = optimizer
        self.budgets_ = class_budgets(np.bincount(self.labels), self.fraction)
        self.coreset_size = int(self.budgets_.sum())
        super().__init__(n, batch_size, seed=seed, drop_last=drop_last)
        if self.batch_size > self.coreset_size:
            raise ValueError(
                f"batch_size must be <= the coreset size ({self.coreset_size} = "
                f"{self.fraction:g} of {n}), got {batch_size}"
            )
        self._coreset: tuple[np.ndarray, np.ndarray] | None = None
        self._refreshed = False  # whether self.embeddings is our copy (observe(embeddings=...))

    # -- the coreset ------------------------------------------------------------------
    def _fit(self) -> tuple[np.ndarray, np.ndarray]:
        from batchsel.index import EmbeddingIndex
        from batchsel.submodular.functions import FacilityLocation
        from batchsel.submodular.optimizers import maximize

        picks, weights = [], []
        for c in np.flatnonzero(self.budgets_):
            members = np.flatnonzero(self.labels == c)
            k = int(self.budgets_[c])
            x = self.embeddings[members]
            if k == len(members):
                chosen, counts = np.arange(k), np.ones(k)
            else:
                neighbors = None if self.neighbors is None else min(self.neighbors, len(members) - 1)
                f = FacilityLocation.from_embeddings(x, metric=self.metric, neighbors=neighbors)
                chosen = np.asarray(maximize(f, k, self.optimizer, seed=self.seed).indices, dtype=np.int64)
                del f
                # every member is represented by its nearest pick (the pick covering it best)
                index = EmbeddingIndex(x[chosen], metric=self.metric, kind="flat", progress=False)
                _, nearest = index.search(x, 1)
                nearest = nearest[:, 0]
                nearest[chosen] = np.arange(k)  # a pick represents itself (duplicates / ties)
                counts = np.bincount(nearest, minlength=k)  # type: ignore[assignment]
            picks.append(members[chosen])
            weights.append(counts)
        idx = np.concatenate(picks).astype(np.int64)
        w = np.concatenate(weights).astype(np.float32)
        order = np.argsort(idx)
        logger.info(
            "CRAIG coreset: %d of %d examples, weights %g..%g",
            len(idx),
            self.num_examples,
            float(w.min()),
            float(w.max()),
        )
        return idx[order], w[order]

    @property
    def indices_(self) -> np.ndarray:
        if self._coreset is None:
            self._coreset = self._fit()
        return self._coreset[0]

    def weighted_loss(self, losses: Any, weights: Any) -> Any:
        """CRAIG's weighted mean, ``sum(w * loss) / sum(w)``: it estimates the mean loss
        over the whole data set."""
        return weighted_sum(losses, weights) / weights.sum()

    @property
    def weights_(self) -> np.ndarray:
        if self._coreset is None:
            self._coreset = self._fit()
        return self._coreset[1]

    def observe(self, indices: Any, losses: Any = None, logits: Any = None, embeddings: Any = None) -> None:
        """Refresh the vectors of ``indices`` (e.g. new gradient proxies); the coreset is
        recomputed at the next plan. Losses and logits are not used."""
        if embeddings is None:
            return
        idx = check_indices(indices, self.num_examples)
        e = check_rows(embeddings, len(idx), "embeddings", ndim=2)
        if e.shape[1] != self.embeddings.shape[1]:
            raise ValueError(f"embeddings have dimension {e.shape[1]}, expected {self.embeddings.shape[1]}")
        if not self._refreshed:  # never write the caller's array (load_embeddings did not copy it)
            self.embeddings = np.array(self.embeddings, dtype=np.float32, order="C")
            self._refreshed = True
        self.embeddings[idx] = e
        self._coreset = None

    # -- the interface ----------------------------------------------------------------
    def world_error(self, world_size: int) -> str | None:
        """At most one rank per coreset member (so at most one per example)."""
        error = super().world_error(world_size)
        if error is None and world_size > self.coreset_size:
            error = f"world_size must be <= the coreset size ({self.coreset_size}), got {world_size}"
        return error

    def _plan(self, epoch: int, world: World) -> EpochPlan:
        idx, w = self.indices_, self.weights_
        perm = epoch_rng(self.seed, epoch).permutation(len(idx))
        shards = even_split(perm, world.size, self.drop_last)
        batches = [[idx[b] for b in split_batches(s, self.batch_size)] for s in shards]
        weights = [[w[b] for b in split_batches(s, self.batch_size)] for s in shards]
        return EpochPlan(batches, weights, num_examples=self.num_examples, epoch=epoch, seed=self.seed, method="craig")

    def _num_batches(self, world: World) -> int:
        return -(-shard_length(self.coreset_size, world.size, self.drop_last) // self.batch_size)

    def __repr__(self) -> str:
        return (
            f"CoresetSelector(num_examples={self.num_examples}, coreset_size={self.coreset_size}, "
            f"batch_size={self.batch_size}, fraction={self.fraction:g}, seed={self.seed})"
        )


__all__ = ["CoresetSelector", "gradient_proxies", "class_budgets"]
