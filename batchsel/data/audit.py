"""Know the data before choosing a method: near-duplicates, label noise, class balance,
outliers and cluster structure from one k-NN search of the embeddings, and what the regime
benchmark measured on data like it.

Everything comes from the ``k`` nearest neighbours (cosine) of every row, one search
(:class:`~batchsel.EmbeddingIndex`, or :class:`~batchsel.distributed.sharded.ShardedIndex` over MPI ranks):

- near-duplicates: the share of rows :func:`~batchsel.deduplicate` would remove, at
  several thresholds (all-zero rows: exact duplicates of one another, with a warning; where
  random pairs are nearly as alike, as raw non-negative features are, a warning to centre
  the features or use an embedding instead of advice to remove rows);
- label noise (with labels): class probabilities of every row from its neighbours' labels
  (leave-one-out: a row never votes for itself), or the out-of-sample ``probabilities`` of
  a model of the user's (cross-validated: what cleanlab takes), then confident learning
  (Northcutt et al., JAIR 2021): per-class thresholds, the calibrated confident joint, the
  estimated share of wrong labels, and the rows most likely mislabelled, ranked. The
  estimate is as good as the probabilities: embeddings that separate the classes poorly
  count the neighbours' errors as wrong labels, a model that classifies well does not
  (measured: docs/guide/cli.md, the audit);
- outliers: rows far less similar to their neighbours than rows usually are;
- cluster structure: how much more similar neighbours are than random pairs.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from batchsel.core.checks import check_int, check_labels, tensor_to_numpy
from batchsel.core.communicator import Communicator
from batchsel.data.dedup import (
    NPROBE,
    SIMILARITY_SLACK,
    check_threshold,
    cosine_index,
    crowded_warning,
    groups_of_pairs,
    neighbour_pairs,
    random_pair_similarities,
    unique_pairs,
    warn_zero_rows,
    with_zero_pairs,
    zero_rows,
)
from batchsel.index import EmbeddingIndex

logger = logging.getLogger(__name__)

#: thresholds of the near-duplicate curve
DUPLICATE_THRESHOLDS = (0.9, 0.95, 0.98, 0.99, 1.0)
#: a row is an outlier when its dissimilarity to its neighbours exceeds the median by this
#: many (scaled) median absolute deviations
OUTLIER_MADS = 5.0
#: weight of the class prior in the neighbours' vote (pseudo-counts)
PRIOR_WEIGHT = 0.5
#: below this mean share of the neighbours' vote for their top class, the embeddings
#: separate the classes too poorly for the noise estimate: it then counts the model's
#: errors as wrong labels (measured: docs/guide/cli.md, the audit; bench_labels.py)
MIN_AGREEMENT = 0.5
#: where the class probabilities of the noise estimate came from, as the report says it
SOURCES = {"neighbours": "from the neighbours' votes", "given": "from the given probabilities"}


@dataclass
class Audit:
    """What :func:`audit` found. ``to_dict()`` gives it as plain values (JSON).

    Attributes
    ----------
    num_examples, dim : int
        The number of rows ``N`` and the embeddings' dimension ``d``.
    duplicates : dict of float to float
        For every threshold of the curve, the share of rows :func:`~batchsel.deduplicate` would remove.
    threshold : float
        The near-duplicate threshold of ``duplicate_group`` (and of the advice).
    duplicate_group : numpy.ndarray
        For every row, the row its group keeps at ``threshold``.
    outlier_score : numpy.ndarray
        For every row, 1 - its mean cosine similarity to its ``k`` neighbours.
    outliers : numpy.ndarray
        The rows flagged as outliers, most isolated first.
    neighbor_similarity, random_similarity : float
        The mean cosine similarity of rows to their neighbours, and of random pairs of rows.
    class_counts : dict of int to int or None, default None
        Rows per class (with labels).
    noise_rate : float or None, default None
        The estimated share of wrong labels (with labels).
    label_issues : numpy.ndarray or None, default None
        The rows most likely mislabelled, most likely first (with labels).
    probabilities : numpy.ndarray or None, default None
        The ``N x C`` class probabilities the noise estimate used.
    classes, label_positions : numpy.ndarray or None, default None
        The classes of the columns of ``probabilities``, and each row's label as a column.
    neighbor_agreement : float or None, default None
        The mean probability of each row's most probable class (below ``MIN_AGREEMENT``: unreliable noise rate).
    probability_source : str or None, default None
        ``"neighbours"`` (leave-one-out votes) or ``"given"`` (a model's probabilities).
    advice : list of str, default []
        What the regime benchmark measured on data like this.
    seconds : float, default 0.0
        Wall time of the audit.
    zero_rows : numpy.ndarray, default empty
        The all-zero rows (no direction: exact duplicates of one another in ``duplicates``).
    crowded : str or None, default None
        The warning (also in ``advice``) when random pairs of rows are nearly as alike as
        ``threshold``: the near-duplicates are mostly the rows' common direction.

    Examples
    --------
    >>> report = Audit(4, 2, {0.95: 0.25}, 0.95, np.array([0, 0, 2, 3]), np.zeros(4), np.zeros(0, np.int64), 0.9, 0.1)
    >>> report.to_dict()["near_duplicates"], report.imbalance
    ({'0.95': 0.25}, None)
    """

    num_examples: int
    dim: int
    duplicates: dict[float, float]  # threshold -> share of rows removed
    threshold: float
    duplicate_group: np.ndarray  # per row, the row its group keeps (at ``threshold``)
    outlier_score: np.ndarray  # 1 - mean cosine similarity to the k neighbours
    outliers: np.ndarray  # rows flagged, most isolated first
    neighbor_similarity: float  # mean cosine similarity of rows to their neighbours
    random_similarity: float  # ... and of random pairs
    class_counts: dict[int, int] | None = None
    noise_rate: float | None = None  # estimated share of wrong labels
    label_issues: np.ndarray | None = None  # rows most likely mislabelled, most likely first
    probabilities: np.ndarray | None = None  # N x C class probabilities the noise estimate used
    classes: np.ndarray | None = None  # the classes of the columns of probabilities
    label_positions: np.ndarray | None = None  # each row's label as a column of probabilities
    neighbor_agreement: float | None = None  # mean probability of each row's most probable class
    probability_source: str | None = None  # "neighbours" (leave-one-out votes) or "given" (a model's)
    advice: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: the all-zero rows (no direction: exact duplicates of one another in ``duplicates``)
    zero_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    crowded: str | None = None  # the near-duplicates are mostly the rows' common direction

    @property
    def imbalance(self) -> float | None:
        """Largest class count over the smallest (>= 1); ``None`` without labels."""
        if not self.class_counts:
            return None
        counts = np.array(list(self.class_counts.values()))
        return float(counts.max() / max(counts.min(), 1))

    def to_dict(self, top: int = 20) -> dict[str, Any]:
        """The audit as plain values, for JSON (the core of what ``batchsel audit --json``
        prints).

        Parameters
        ----------
        top : int, default 20
            How many outliers and flagged rows to list (>= 0), first ones first; the counts cover all.

        Returns
        -------
        dict
            Plain Python values (floats rounded, thresholds as strings); with labels also the
            class counts, imbalance, noise rate, its reliability and the flagged rows.
        """
        out: dict[str, Any] = {
            "num_examples": self.num_examples,
            "dim": self.dim,
            "near_duplicates": {f"{t:g}": round(v, 6) for t, v in self.duplicates.items()},
            "threshold": self.threshold,
            "outlier_share": round(self.outliers.size / max(self.num_examples, 1), 6),
            "outliers": self.outliers[:top].tolist(),
            "neighbor_similarity": round(self.neighbor_similarity, 4),
            "random_similarity": round(self.random_similarity, 4),
            "zero_rows": int(self.zero_rows.size),
            "seconds": round(self.seconds, 3),
            "advice": self.advice,
        }
        if self.crowded is not None:
            out["duplicates_warning"] = self.crowded
        if self.class_counts is not None:
            out.update(
                class_counts={str(c): n for c, n in self.class_counts.items()},
                imbalance=self.imbalance,
                noise_rate=None if self.noise_rate is None else round(self.noise_rate, 4),
                neighbor_agreement=round(self.neighbor_agreement, 4),
                noise_rate_reliable=self.neighbor_agreement >= MIN_AGREEMENT,
                probability_source=self.probability_source,
                label_issues=self.label_issues[:top].tolist(),
                num_label_issues=int(self.label_issues.size),
            )
        return out

    def format(self) -> str:
        """A short text report: one line per finding, then the advice.

        Returns
        -------
        str
            The report, lines separated by newlines.
        """
        d = self.to_dict()
        curve = ", ".join(f"{v:.1%} at {t}" for t, v in d["near_duplicates"].items())
        lines = [
            f"{self.num_examples} rows x {self.dim}",
            f"near-duplicates (cosine >= T): {curve}",
            f"outliers: {d['outlier_share']:.1%} of rows (most isolated: {d['outliers'][:5]})",
            f"cluster structure: neighbours {self.neighbor_similarity:.2f} vs random pairs "
            f"{self.random_similarity:.2f} cosine similarity",
        ]
        if self.class_counts is not None:
            lines += [
                f"classes: {len(self.class_counts)}, largest / smallest {self.imbalance:.1f}",
                f"label noise ({SOURCES.get(self.probability_source or '', '')}): about {self.noise_rate:.1%} of labels look wrong; {self.label_issues.size} rows "
                f"flagged (most likely: {self.label_issues[:5].tolist()})",
            ]
        lines += [f"advice: {a}" for a in self.advice]
        return "\n".join(lines)


def neighbor_probabilities(I: np.ndarray, S: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Leave-one-out class probabilities of every row from its neighbours ``I`` (``-1``:
    none) weighted by their similarities ``S`` (negative ones count 0), plus
    ``PRIOR_WEIGHT`` pseudo-counts spread by the class prior.

    Parameters
    ----------
    I, S : numpy.ndarray
        Every row's neighbours (``N x k`` row ids, never the row itself; -1: none) and their similarities.
    labels : numpy.ndarray
        Every row's class, int in ``[0, num_classes)``, length ``N``.
    num_classes : int
        The number of classes ``C``, >= 1.

    Returns
    -------
    numpy.ndarray
        ``N x C`` float64 class probabilities, rows summing to 1.

    Examples
    --------
    >>> I = np.array([[1, 2], [0, 2], [0, 1]]); S = np.ones((3, 2))
    >>> neighbor_probabilities(I, S, np.array([0, 0, 1]), 2).round(2).tolist()
    [[0.53, 0.47], [0.53, 0.47], [0.93, 0.07]]
    """
    n = I.shape[0]
    prior = np.bincount(labels, minlength=num_classes) / labels.size
    valid = I >= 0
    w = np.where(valid, np.maximum(S, 0.0), 0.0).astype(np.float64)
    rows = np.repeat(np.arange(n), I.shape[1])[valid.ravel()]
    votes = np.bincount(rows * num_classes + labels[I[valid]], weights=w[valid], minlength=n * num_classes).reshape(
        n, num_classes
    )
    votes += PRIOR_WEIGHT * prior  # type: ignore[arg-type]
    return votes / votes.sum(axis=1, keepdims=True)


def _round_keeping_row_sums(counts: np.ndarray) -> np.ndarray:
    """Every row of ``counts`` rounded to integers whose sum is the row's rounded sum: the
    cells rounded, then the difference moved by one at a time to or from the cells
    rounded furthest from their value."""
    out = counts.round()
    for row, target in enumerate(counts.sum(axis=1).round()):
        diff = int(target - out[row].sum())
        if diff:
            step = 1 if diff > 0 else -1
            order = np.argsort(counts[row] - out[row], kind="stable")[::-step]  # most under-rounded first
            out[row, order[: abs(diff)]] += step
    return out.astype(np.int64)


def confident_learning(probs: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    """The estimated share of wrong labels and the rows flagged as mislabelled (most
    likely first), by confident learning from out-of-sample class probabilities: the rule
    of cleanlab's ``find_label_issues`` (``filter_by="prune_by_noise_rate"``, its default).

    Per class j the threshold t_j is the mean probability of j over rows labelled j; a
    row counts as "really" class j when p_j >= t_j (of several such classes, the most
    probable). The confident joint of (given label, real class), its diagonal at least 1,
    is calibrated to the label counts; its mass off the diagonal is the noise rate. Flagged:
    in every cell (given, real) off the diagonal, its calibrated count (rounded, each row
    keeping its total) of rows labelled `given`, those with the largest margin
    p_real - p_given; never a row whose given label is its most probable class (ties
    count for the label); ranked by the probability of their given label.

    Parameters
    ----------
    probs : numpy.ndarray
        ``N x C`` out-of-sample class probabilities, rows summing to 1.
    labels : numpy.ndarray
        The given labels as columns of ``probs``: ints in ``[0, C)``, length ``N``.

    Returns
    -------
    noise_rate : float
        The estimated share of wrong labels, in [0, 1].
    flagged : numpy.ndarray
        The rows flagged as mislabelled (int64), lowest probability of their given label
        first.

    Examples
    --------
    >>> p = np.array([[.9, .1], [.8, .2], [.2, .8], [.1, .9], [.85, .15]])
    >>> rate, flagged = confident_learning(p, np.array([0, 0, 1, 1, 1]))
    >>> round(rate, 2), flagged.tolist()
    (0.2, [4])
    """
    n, c = probs.shape
    counts = np.bincount(labels, minlength=c)
    present = counts > 0
    thresholds = np.full(c, 2.0)  # a class no row carries: no probability reaches it
    np.divide(
        np.bincount(labels, weights=probs[np.arange(n), labels], minlength=c), counts, out=thresholds, where=present
    )
    above = probs >= thresholds[None, :] - 1e-6
    confident = above.sum(axis=1)
    real = np.where(confident > 1, probs.argmax(axis=1), above.argmax(axis=1))
    counted = confident > 0
    joint = np.zeros((c, c))
    np.add.at(joint, (labels[counted], real[counted]), 1.0)
    np.fill_diagonal(joint, np.maximum(joint.diagonal(), 1.0))
    row_sums = joint.sum(axis=1, keepdims=True)
    calibrated = joint / row_sums * counts[:, None]
    calibrated *= counts.sum() / max(calibrated.sum(), 1e-12)
    total = calibrated.sum()
    noise_rate = float(1.0 - np.trace(calibrated) / total) if total > 0 else 0.0
    # prune by noise rate: each off-diagonal cell (given, real) flags its count of rows
    # labelled `given`, those with the largest margin p_real - p_given
    prune = _round_keeping_row_sums(calibrated)
    flagged = np.zeros(n, dtype=bool)
    for given in np.flatnonzero(present):
        rows = np.flatnonzero(labels == given)
        if rows.size <= 1:  # cleanlab's min_examples_per_class: a class's last row stays
            continue
        for other in range(c):
            want = int(prune[given, other])
            if other == given or want <= 0:
                continue
            margin = probs[rows, other] - probs[rows, given]
            flagged[rows[np.argsort(-margin, kind="stable")[:want]]] = True
    own = probs[np.arange(n), labels] + 1e-6  # a tie with another class counts for the label
    flagged &= own < probs.max(axis=1)
    flagged_rows = np.flatnonzero(flagged)
    order = np.argsort(probs[flagged_rows, labels[flagged_rows]], kind="stable")
    return noise_rate, flagged_rows[order].astype(np.int64)


def _advice(a: Audit) -> list[str]:
    """What the regime benchmark measured on data like this, without its figures (they are in
    docs: which-method.md, which each tip names)."""
    tips = []
    if a.neighbor_agreement is not None and a.neighbor_agreement < MIN_AGREEMENT:
        if a.probability_source == "given":
            tips.append(
                f"the given probabilities are spread (the most probable class holds {a.neighbor_agreement:.0%} "
                f"on average): the model classifies poorly, so the label-noise estimate also counts its "
                f"own errors"
            )
        else:
            tips.append(
                f"the neighbours' votes are split (their top class holds {a.neighbor_agreement:.0%} on "
                f"average): the embeddings separate the classes poorly, so the label-noise estimate also "
                f"counts the neighbours' own errors; use better embeddings (a trained model's) or pass "
                f"a model's out-of-sample probabilities to audit labels"
            )
    if a.noise_rate is not None and a.noise_rate >= 0.05:
        tips.append(
            f"about {a.noise_rate:.0%} of labels look wrong: under wrong labels no method beat random "
            f"batches at equal wall time, and loss-seeking ones (loss-rank, loss / gradient-norm filters) "
            f"ended below it; keep random batches (shorter runs did best), or clean the flagged labels "
            f"first (docs: which-method.md)"
        )
    if a.zero_rows.size:
        tips.append(
            f"{a.zero_rows.size} rows are all zero (rows {a.zero_rows[:5].tolist()}"
            f"{', ...' if a.zero_rows.size > 5 else ''}): cosine similarity is undefined for them, so they "
            f"count as exact duplicates of one another (one kept) and of no other row; drop them, or embed "
            f"their inputs again if the zeros mark failed or empty ones"
        )
    removed = a.duplicates.get(a.threshold, 0.0)
    if a.crowded is not None:  # removal would drop rows that only share the common direction
        tips.append(a.crowded)
    elif removed >= 0.05:
        tips.append(
            f"{removed:.0%} of rows are near-duplicates at cosine >= {a.threshold:g}: removing them "
            f"(batchsel dedup) saves that share of every epoch's steps; on redundant data loss-rank "
            f"ended above random at the full budget (docs: which-method.md)"
        )
    if a.imbalance is not None and a.imbalance >= 5:
        tips.append(
            f"classes are imbalanced ({a.imbalance:.0f}x): loss-rank saved wall time on the long-tailed "
            f"tasks whose step dominates; pass labels to InfoBatchSelector, whose rule without them lost "
            f"accuracy on long tails (docs: which-method.md)"
        )
    if not tips:
        tips.append(
            "no label noise, duplication or imbalance stands out: loss-rank is the method to try first "
            "(it saved wall time on the clean tasks whose step dominates); with a model that overfits, "
            "nothing beat random batches (docs: which-method.md)"
        )
    return tips


def audit(
    embeddings: Any,
    labels: Any = None,
    *,
    k: int = 10,
    threshold: float = 0.95,
    thresholds: tuple[float, ...] = DUPLICATE_THRESHOLDS,
    nprobe: int | None = NPROBE,
    comm: Communicator | None = None,
    progress: bool = True,
    seed: int = 0,
    probabilities: Any = None,
) -> Audit:
    """Audit ``embeddings`` and, if given, their integer ``labels``: see the module docstring.

    All-zero rows have no direction: they count as exact duplicates of one another (one kept) at every threshold
    and of no other row, as in :func:`~batchsel.deduplicate`; a warning and the advice give their count (``zero_rows``).

    Parameters
    ----------
    embeddings : array-like, torch.Tensor or path
        ``N x d`` array, tensor or ``.npy`` path.
    labels : array-like or None, default None
        Integer class ids, length N.
    k : int, default 10
        Neighbours per row (cosine).
    threshold : float, default 0.95
        The near-duplicate threshold of the groups returned (and of the advice).
    thresholds : sequence of float, or float, default DUPLICATE_THRESHOLDS
        The near-duplicate curve's thresholds, numbers in (0, 1].
    nprobe, comm, progress, seed : int or None, Communicator or None, bool, int
        As :func:`~batchsel.deduplicate` (defaults ``NPROBE``, None, True, 0): with
        ``comm`` the search runs sharded over its ranks and every rank returns the same.
    probabilities : array-like or None, default None
        ``N x C`` out-of-sample class probabilities of the labels' model (column c = label c; rows summing to 1), for
        the label-noise estimate and the flagged rows instead of the neighbours' votes; they need ``labels`` in [0, C).

    Returns
    -------
    Audit
        What was found, with advice.

    Raises
    ------
    ValueError
        Thresholds outside (0, 1], ``k < 1``, under 2 rows, bad labels or ``probabilities``.

    Examples
    --------
    >>> rng = np.random.default_rng(0); y = rng.integers(0, 3, 300)
    >>> x = (np.eye(3, 8)[y] * 4 + rng.normal(size=(300, 8))).astype(np.float32)
    >>> noisy = y.copy(); noisy[:30] = (y[:30] + 1) % 3; report = audit(x, noisy, progress=False)  # 10 % wrong
    >>> 0.05 < report.noise_rate < 0.15, bool(np.isin(report.label_issues[:10], np.arange(30)).all())
    (True, True)
    """
    threshold = check_threshold(threshold)
    curve = sorted({check_threshold(t, "thresholds") for t in _threshold_list(thresholds)} | {threshold})
    k = check_int(k, "k", minimum=1)
    start = time.perf_counter()
    index, comm = cosine_index(embeddings, comm, nprobe, progress, seed)
    n, d = index.num_examples, index.dim
    y = None if labels is None else check_labels(labels, n)
    given = None if probabilities is None else check_probabilities(probabilities, y, n)
    if n < 2:
        raise ValueError(f"an audit needs at least 2 rows, got {n}")
    S, I = index.neighbors(min(k, n - 1))
    if comm is not None:  # every rank holds all neighbour lists (N x k): the same report everywhere
        parts = comm.allgather((S, I))
        S, I = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    zeros, duplicates, group = _near_duplicates(index, S, I, curve, threshold)
    score, mean_sim, outliers = _outliers(S, I)
    sims = random_pair_similarities(index, seed)
    result = Audit(n, d, duplicates, threshold, group, score, outliers, float(mean_sim.mean()), float(sims.mean()))
    result.zero_rows, result.crowded = zeros, crowded_warning(sims, threshold, duplicates[threshold], "audit")
    if y is not None:
        _audit_labels(result, y, S, I, given)
    result.advice = _advice(result)
    result.seconds = time.perf_counter() - start
    logger.info("audit of %d x %d in %.1f s", n, d, result.seconds)
    return result


def _near_duplicates(
    index: EmbeddingIndex, S: np.ndarray, I: np.ndarray, curve: list[float], threshold: float
) -> tuple[np.ndarray, dict[float, float], np.ndarray]:
    """The all-zero rows (with their warning), the share of rows removed at every
    threshold of ``curve``, and the groups at ``threshold``: all from the same pairs."""
    n = S.shape[0]
    zeros = zero_rows(index, S, I, 0)
    warn_zero_rows(zeros, n, "audit")
    i, j, s = unique_pairs(*with_zero_pairs(*neighbour_pairs(S, I, 0, curve[0]), zeros), n)
    duplicates, group = {}, np.arange(n)
    for t in curve:
        at = s >= t - SIMILARITY_SLACK
        g = groups_of_pairs(i[at], j[at], n)
        duplicates[t] = 1.0 - np.count_nonzero(g == np.arange(n)) / n
        if t == threshold:
            group = g
    return zeros, duplicates, group


def _outliers(S: np.ndarray, I: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every row's outlier score (1 - mean similarity to its neighbours), that mean, and
    the rows whose score is ``OUTLIER_MADS`` robust deviations above the median, most
    isolated first."""
    valid = I >= 0
    mean_sim = np.where(valid, S, 0.0).sum(axis=1) / np.maximum(valid.sum(axis=1), 1)
    score = 1.0 - mean_sim
    med = float(np.median(score))
    mad = float(np.median(np.abs(score - med))) * 1.4826
    flagged = np.flatnonzero(score > med + OUTLIER_MADS * max(mad, 1e-12))
    return score, mean_sim, flagged[np.argsort(-score[flagged], kind="stable")].astype(np.int64)


def _audit_labels(result: Audit, y: np.ndarray, S: np.ndarray, I: np.ndarray, given: np.ndarray | None) -> None:
    """The label figures of ``result``: class counts, the class probabilities (the
    neighbours' votes, or ``given``), and confident learning's noise rate and flagged rows."""
    classes, positions = np.unique(y, return_inverse=True)
    positions = positions.reshape(-1)
    result.class_counts = {int(c): int(m) for c, m in zip(classes, np.bincount(positions))}
    if given is None:
        result.probabilities = neighbor_probabilities(I, S, positions, classes.size)
        result.probability_source = "neighbours"
    else:  # the model's columns are the classes 0..C-1, present in the labels or not
        classes, positions = np.arange(given.shape[1]), y
        result.probabilities, result.probability_source = given, "given"
    result.classes, result.label_positions = classes, positions
    result.noise_rate, result.label_issues = confident_learning(result.probabilities, positions)
    result.neighbor_agreement = float(result.probabilities.max(axis=1).mean())


def _threshold_list(thresholds: Any) -> list[Any]:
    """``thresholds`` as a list: a sequence (or array) of numbers, or one number."""
    if isinstance(thresholds, (int, float, np.integer, np.floating)) and not isinstance(thresholds, (bool, np.bool_)):
        return [thresholds]
    if isinstance(thresholds, (str, bytes)) or not hasattr(thresholds, "__iter__"):
        raise TypeError(f"thresholds must be a sequence of numbers in (0, 1] or one number, got {thresholds!r}")
    return list(np.asarray(thresholds).reshape(-1)) if isinstance(thresholds, np.ndarray) else list(thresholds)


def check_probabilities(probabilities: Any, labels: np.ndarray | None, num_examples: int) -> np.ndarray:
    """``N x C`` class probabilities as float64, checked: labels given, one row per example,
    finite, in [0, 1], rows summing to 1 (within 1e-3), every label a column.

    Parameters
    ----------
    probabilities : array-like or torch.Tensor
        ``N x C`` class probabilities (column c = label c).
    labels : numpy.ndarray or None
        The checked labels (int64); ``None`` is refused.
    num_examples : int
        ``N``, the number of rows the table must have.

    Returns
    -------
    numpy.ndarray
        The probabilities, ``N x C`` float64.

    Raises
    ------
    ValueError
        No labels; a table of the wrong shape; values outside [0, 1] or not finite; a row
        not summing to 1; a label that is not a column.
    TypeError
        Values that are not real numbers.

    """
    if labels is None:
        raise ValueError("probabilities need labels: they are the model's probabilities of each label")
    p = np.asarray(tensor_to_numpy(probabilities))
    if p.ndim != 2 or p.shape[0] != num_examples:
        raise ValueError(f"probabilities must be N x C with N = {num_examples} rows, got shape {p.shape}")
    if not np.issubdtype(p.dtype, np.number) or np.issubdtype(p.dtype, np.complexfloating):
        raise TypeError(f"probabilities must be real numbers, got dtype {p.dtype}")
    p = p.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(p).all(axis=1) | (p < 0).any(axis=1) | (p > 1).any(axis=1))
    if bad.size:
        raise ValueError(f"probabilities must be finite and in [0, 1]: row {bad[0]} is {p[bad[0]].tolist()[:6]}")
    sums = p.sum(axis=1)
    off = np.flatnonzero(np.abs(sums - 1.0) > 1e-3)
    if off.size:
        raise ValueError(
            f"probabilities must sum to 1 in every row (softmax outputs): row {off[0]} sums to {sums[off[0]]:.4g}"
        )
    if labels.max(initial=0) >= p.shape[1] or labels.min(initial=0) < 0:
        raise ValueError(
            f"labels must be column numbers of probabilities, in [0, {p.shape[1]}): got labels "
            f"{int(labels.min())}..{int(labels.max())}"
        )
    return p


__all__ = ["audit", "Audit", "confident_learning", "neighbor_probabilities", "DUPLICATE_THRESHOLDS"]
