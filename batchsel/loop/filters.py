"""Online batch selection inside the training loop: score a candidate batch, train on the best B.

The sampler yields ``ratio x B`` candidates, the loop runs a no-grad forward on them and
:class:`CandidateFilter` returns the positions of the B to train on: by training loss
(Loshchilov & Hutter 2015), a gradient-norm bound (Katharopoulos & Fleuret 2018), RHO-LOSS's
reducible loss (Mindermann et al. 2022) or Selective-Backprop's loss percentile (Jiang et al.
2019), optionally diverse (facility location) and mixed with a uniform share. Every rank
filters its own candidates and keeps as many as the others, so DDP stays in lock-step.

The scores, the RHO-LOSS guard, costs and measurements: docs/design/filters.md.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
import zlib
from typing import Any, Iterator, cast

import numpy as np

from batchsel.core.checks import check_int, check_number, check_scale, check_seed, load_embeddings, tensor_to_numpy
from batchsel.selectors.scores import gradnorm_scores, loss_scores

logger = logging.getLogger(__name__)

SCORES = ("loss", "gradnorm", "rho")
PICKS = ("top", "percentile")
STATE_VERSION = 1
# settings a checkpoint must agree on (the counters are restored, these are checked)
_SETTINGS = (
    "batch_size",
    "ratio",
    "score",
    "irreducible_weight",
    "diversity",
    "uniform_fraction",
    "warmup_steps",
    "min_il_skill",
    "min_il_decisive",
    "reference_accuracy",
    "seed",
    "pick",
    "beta",
    "window",
)
_COUNTERS = (
    "steps_",
    "candidates_",
    "kept_",
    "kept_uniform_",
    "forward_seconds_",
    "select_seconds_",
    "elapsed_seconds_",
)


def _similarity(x: np.ndarray) -> np.ndarray:
    """``exp(-|x_i - x_j|^2 / sigma^2)`` (float32), sigma^2 the mean squared distance of
    distinct points (1 for every pair when all points coincide)."""
    x = x - x.mean(axis=0)  # centered: the Gram trick loses less precision
    sq = np.einsum("ij,ij->i", x, x)
    d2 = x @ x.T
    d2 *= -2.0
    d2 += sq[:, None]
    d2 += sq[None, :]
    np.maximum(d2, 0.0, out=d2)
    np.fill_diagonal(d2, 0.0)
    n = len(x)
    sigma2 = float(d2.sum(dtype=np.float64)) / max(n * (n - 1), 1)
    if sigma2 <= 0:
        return np.ones((n, n), dtype=np.float32)
    d2 *= -1.0 / sigma2
    return np.exp(d2, out=d2)


# -- the filter --------------------------------------------------------------------------
class CandidateFilter:
    """Chooses the B examples to train on from a scored candidate batch (docs: design/filters.md).

    Parameters
    ----------
    batch_size:
        B, the examples trained on per step and rank.
    ratio:
        Candidates per kept example (>= 1): the sampler's batches should hold
        :attr:`candidate_size` ``= ceil(ratio * B)`` examples. A smaller candidate batch
        (the last of an epoch) keeps ``ceil(n / ratio)`` of its n examples.
    score:
        ``"loss"``, ``"gradnorm"`` or ``"rho"``: what :meth:`scores` (and calling the
        filter) computes from the logits. :meth:`select` takes any scores.
    irreducible_losses:
        For ``"rho"``: the irreducible loss of every example (length N, NaN for examples
        that must not be trained on, such as a holdout), or a fitted
        :class:`~batchsel.loop.irreducible.IrreducibleLoss`.
    irreducible_weight:
        w >= 0 in ``"rho"``'s score ``loss - w * irreducible_loss`` (1: RHO-LOSS as
        published, 0: the plain loss), or ``"auto"`` (default): 0.5 up to 7.5 % and 1 from
        15 % of examples the fitted :class:`~batchsel.loop.irreducible.IrreducibleLoss` decisively
        puts in another class (``confident_disagreement_``), linear in between, and the
        term of examples the IL model is not decisive about scaled by the same ramp
        (``indecisive_trust_``); 0.5 for irreducible losses given as an array. The
        resolved weight is ``irreducible_weight_``. Why: docs/design/filters.md.
    diversity:
        lambda >= 0 of the facility-location term (0: plain top-B by score); needs the
        candidates' ``embeddings`` in :meth:`select`.
    uniform_fraction:
        Share in [0, 1] of every kept batch drawn uniformly from the candidates (default
        0.25: a bad score cannot take training far from random batches).

    warmup_steps:
        Over the first ``warmup_steps`` steps the uniform share falls linearly from 1 to
        ``uniform_fraction``.
    pick:
        How the examples not drawn uniformly are chosen: ``"top"`` (default) the largest
        scores; ``"percentile"``, Selective-Backprop's rule (Jiang et al. 2019): candidate
        i is drawn with probability proportional to ``P_i = CDF(score_i) ** beta``, the
        CDF over the scores of the last ``window`` candidates seen (this batch's
        included), without replacement and always ``keep_count(n)`` of them, so every rank
        backpropagates as many examples. Selective-Backprop's ``beta=1`` keeps half of
        its candidates on average: ``ratio=2`` keeps as many.
    beta, window:
        ``pick="percentile"``'s exponent (> 0) and history length (>= 1).
    min_il_skill, min_il_decisive:
        The guard against a weak irreducible-loss model (``"rho"`` with a fitted
        :class:`~batchsel.loop.irreducible.IrreducibleLoss`): when its skill
        ``(accuracy_ - chance_) / (1 - chance_)`` is below ``min_il_skill`` (0.3) or it is
        decisive on fewer than ``min_il_decisive`` (0.5) of the examples, the filter warns
        and keeps uniform draws only (``guard_ = "uniform"``); better, check ``guard_`` and
        train on plain random batches. 0 switches a criterion off; plain arrays of
        irreducible losses are trusted. How the thresholds were chosen:
        docs/design/filters.md.
    reference_accuracy:
        Optional: the held-out accuracy the trained model reaches, measured against labels
        like the IL model's (e.g. a random-batch run scored on a held-out part of the
        training set). When the IL model is less accurate, its term is shrunk in
        proportion of the skills, ``irreducible_weight * skill(IL) / skill(reference)``
        (``guard_ = "downweight"``, a warning).
    seed:
        Seeds the uniform draws: step t on candidates ``indices`` uses the generator of
        ``(seed, t, crc32(indices))``, so ranks draw independently and a resumed run draws
        what the uninterrupted one did.

    The defaults (``uniform_fraction=0.25``, ratio 4) were chosen on a validation split;
    every loss-seeking filter can end below random batches on a model that does not
    overfit: measure on your own validation split (docs/design/filters.md).
    The models of the benchmark have no dropout or batch norm; with such layers run the
    scoring forward in ``model.eval()`` mode.

    Attributes
    ----------
    steps_, candidates_, kept_, kept_uniform_:
        Calls of :meth:`select`, candidates seen, examples kept, of which drawn uniformly.
    guard_, irreducible_weight_, indecisive_trust_, il_accuracy_, il_skill_:
        What the guard did (None, ``"uniform"`` or ``"downweight"``), the weight of the
        irreducible losses in use, the share of it applied where the IL model is not
        decisive (1 unless ``irreducible_weight="auto"``), and the IL model's accuracy and
        skill (None when unknown).
    forward_seconds_, select_seconds_, elapsed_seconds_:
        Time inside :meth:`timed` (the scoring forward), inside the filter (scores and
        selection) and the wall time of the steps (from the first :meth:`timed` or
        :meth:`select` to the latest :meth:`select`). See :meth:`cost`.

    Example
    -------
    >>> import numpy as np
    >>> filt = CandidateFilter(batch_size=2, ratio=3, score="loss", uniform_fraction=0.0)  # top-B only
    >>> filt.candidate_size
    6
    >>> logits = np.array([[3.0, 0], [0, 3], [1, 0], [0, 1], [2, 0], [0, 0]])
    >>> labels = np.zeros(6, dtype=np.int64)              # rows 1 and 3 fit worst
    >>> keep = filt(np.arange(10, 16), logits, labels)    # the candidates' dataset indices: 10..15
    >>> keep.tolist(), filt.steps_, filt.kept_
    ([1, 3], 1, 2)

    The guard: an irreducible-loss model that knows nothing (labels unrelated to the
    features) makes the filter draw uniformly, i.e. train on random batches:

    >>> from batchsel import IrreducibleLoss
    >>> rng = np.random.default_rng(0)
    >>> x, y = rng.normal(size=(200, 4)).astype(np.float32), rng.integers(0, 4, 200)
    >>> CandidateFilter(2, score="rho", irreducible_losses=IrreducibleLoss().fit(x, y)).guard_
    'uniform'
    """

    # counters and clocks (reset in __init__, restored by load_state_dict): see Attributes
    steps_: int
    candidates_: int
    kept_: int
    kept_uniform_: int
    forward_seconds_: float
    select_seconds_: float
    elapsed_seconds_: float

    def __init__(
        self,
        batch_size: int,
        ratio: float = 4.0,
        score: str = "loss",
        *,
        irreducible_losses: Any = None,
        irreducible_weight: float | str = "auto",
        diversity: float = 0.0,
        uniform_fraction: float = 0.25,
        warmup_steps: int = 0,
        min_il_skill: float = 0.3,
        min_il_decisive: float = 0.5,
        reference_accuracy: float | None = None,
        seed: int = 0,
        pick: str = "top",
        beta: float = 1.0,
        window: int = 1024,
    ) -> None:
        self.batch_size = check_int(batch_size, "batch_size", minimum=1)
        self.ratio = check_number(ratio, "ratio", low=1.0)
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {score!r}")
        self.score = score
        self.diversity = check_number(diversity, "diversity", low=0.0)
        self.uniform_fraction = check_number(uniform_fraction, "uniform_fraction", low=0.0, high=1.0)
        self.warmup_steps = check_int(warmup_steps, "warmup_steps", minimum=0)
        self.seed = check_seed(seed)
        if pick not in PICKS:
            raise ValueError(f"pick must be one of {PICKS}, got {pick!r}")
        if pick == "percentile" and self.diversity > 0:
            raise ValueError(f"pick='percentile' draws by score alone; diversity={self.diversity} needs pick='top'")
        self.pick = pick
        self.beta = check_number(beta, "beta", low=0.0)
        if self.beta == 0:
            raise ValueError(f"beta must be > 0, got {beta!r}")
        self.window = check_int(window, "window", minimum=1)
        self._history = np.empty(0)  # pick="percentile": the latest ``window`` scores, oldest first
        self.irreducible_losses = None if irreducible_losses is None else _check_irreducible(irreducible_losses)
        self.irreducible_weight = (
            irreducible_weight
            if isinstance(irreducible_weight, str) and irreducible_weight == "auto"
            else check_number(irreducible_weight, "irreducible_weight", low=0.0)
        )
        if score == "rho" and self.irreducible_losses is None:
            raise ValueError("score='rho' needs irreducible_losses (an array, or a fitted IrreducibleLoss)")
        self.min_il_skill = check_number(min_il_skill, "min_il_skill", low=0.0, high=1.0)
        self.min_il_decisive = check_number(min_il_decisive, "min_il_decisive", low=0.0, high=1.0)
        self.reference_accuracy = (
            None
            if reference_accuracy is None
            else check_number(reference_accuracy, "reference_accuracy", low=0.0, high=1.0)
        )
        self._guard(irreducible_losses)
        for name in _COUNTERS:
            setattr(self, name, 0.0 if name.endswith("seconds_") else 0)
        self._clock: float | None = None  # end of the latest step (or start of the first)

    def _guard(self, il: Any) -> None:
        """Sets ``guard_``, ``irreducible_weight_`` and ``il_skill_``: the IL model's skill
        ``(accuracy - chance) / (1 - chance)`` (chance: the share of the most frequent label)
        decides whether its irreducible losses can be trusted; its confident disagreement
        with the labels sets the ``"auto"`` weight."""
        self.guard_, self.irreducible_weight_ = None, self.irreducible_weight
        self.indecisive_trust_, self._scored_il = 1.0, self.irreducible_losses
        if self.irreducible_weight == "auto":
            evidence = getattr(il, "confident_disagreement_", None)
            ramp = 0.0 if evidence is None else min(1.0, max(0.0, (evidence - 0.075) / 0.075))
            self.irreducible_weight_ = 0.5 + 0.5 * ramp
            decisive = getattr(il, "decisive_mask_", None)
            if decisive is not None:
                # without evidence of label noise, an IL model's doubt says nothing about the label
                self.indecisive_trust_ = ramp
                self._scored_il = self.irreducible_losses * np.where(decisive, 1.0, ramp)
        self.il_accuracy_ = getattr(il, "accuracy_", None)
        chance = getattr(il, "chance_", None)
        self.il_skill_ = None
        if self.score != "rho" or self.il_accuracy_ is None or chance is None or chance >= 1:
            return  # plain arrays carry no accuracy: the user vouches for them
        skill = lambda acc: (acc - chance) / (1.0 - chance)  # noqa: E731
        self.il_skill_ = skill(self.il_accuracy_)
        decisive_share = getattr(il, "decisive_", None)
        if self.min_il_skill > 0 and self.il_skill_ < self.min_il_skill:
            # a near-chance IL model scores its own errors, not label noise: random batches
            self.guard_ = "uniform"
            logger.warning(
                "irreducible-loss model accuracy %.3f is near chance (%.3f; skill %.2f < min_il_skill "
                "%.2f): the filter falls back to uniform batches",
                self.il_accuracy_,
                chance,
                self.il_skill_,
                self.min_il_skill,
            )
        elif decisive_share is not None and decisive_share < self.min_il_decisive:
            # an IL model unsure of most examples cannot tell a wrong label from a hard example
            self.guard_ = "uniform"
            logger.warning(
                "irreducible-loss model is decisive (IrreducibleLoss.decisive_) on only %.3f of the "
                "examples (< min_il_decisive %.2f): the filter falls back to uniform batches",
                decisive_share,
                self.min_il_decisive,
            )
        elif self.reference_accuracy is not None and self.il_accuracy_ < self.reference_accuracy:
            # the trained model knows more than the IL model: shrink the IL term in proportion
            ref = skill(self.reference_accuracy)
            share = self.il_skill_ / ref if ref > 0 else 0.0
            weight = self.irreducible_weight_
            self.irreducible_weight_ = weight * max(0.0, min(1.0, share))  # type: ignore[operator]
            self.guard_ = "downweight"
            logger.warning(
                "irreducible-loss model accuracy %.3f is below the reference accuracy %.3f: "
                "irreducible_weight %.3g -> %.3g",
                self.il_accuracy_,
                self.reference_accuracy,
                weight,
                self.irreducible_weight_,
            )

    # -- sizes --------------------------------------------------------------------------
    @property
    def candidate_size(self) -> int:
        """``ceil(ratio * batch_size)``: the batch size to build the sampler's selector with."""
        return math.ceil(self.ratio * self.batch_size - 1e-9)

    def keep_count(self, num_candidates: int) -> int:
        """Examples kept from ``num_candidates``: ``min(B, ceil(num_candidates / ratio))``."""
        n = check_int(num_candidates, "num_candidates", minimum=1)
        return max(1, min(self.batch_size, math.ceil(n / self.ratio - 1e-9)))

    def uniform_share(self, step: int | None = None) -> float:
        """The share of a kept batch drawn uniformly at ``step`` (default: the next one)."""
        t = self.steps_ if step is None else check_int(step, "step", minimum=0)
        if self.guard_ == "uniform":
            return 1.0
        if t >= self.warmup_steps:
            return self.uniform_fraction
        return self.uniform_fraction + (1.0 - self.uniform_fraction) * (1.0 - t / self.warmup_steps)

    # -- scores -------------------------------------------------------------------------
    def scores(self, indices: Any, logits: Any, labels: Any, hidden: Any = None) -> np.ndarray:
        """This filter's ``score`` of the candidates ``indices`` (dataset indices) from
        their ``logits`` and ``labels`` (and ``hidden`` for ``"gradnorm"``)."""
        if self.score == "gradnorm":
            s = gradnorm_scores(logits, labels, hidden)
        else:
            s = loss_scores(logits, labels)
        idx = _check_candidates(indices, len(s))  # one row of logits per candidate
        if self.score == "rho":
            s = s - self.irreducible_weight_ * self._irreducible_of(idx)
        return s

    def _irreducible_of(self, idx: np.ndarray) -> np.ndarray:
        il = self._scored_il
        if idx.size and idx.max() >= len(il):
            raise ValueError(f"index {int(idx.max())} is past the {len(il)} irreducible losses")
        il = il[idx]
        if np.isnan(il).any():
            bad = int(idx[np.isnan(il)][0])
            raise ValueError(
                f"example {bad} has no irreducible loss (NaN: it is in the IL model's holdout, "
                f"which must not be trained on; sample from IrreducibleLoss.train_indices_)"
            )
        return il

    def __call__(
        self, indices: Any, logits: Any, labels: Any, *, hidden: Any = None, embeddings: Any = None
    ) -> np.ndarray:
        """:meth:`scores` then :meth:`select`: the positions (into the candidate batch) to
        train on.

        Logits that are a torch tensor on an accelerator (CUDA, MPS) are scored and picked
        in torch on that device (:mod:`batchsel.loop.filter_device`): only the kept positions
        come to the host, in one transfer; the same positions as the numpy path. On the
        CPU numpy is faster (0.34 against 0.80 ms for 1024 x 10 logits); ``diversity`` (a
        facility location greedy) runs on the host."""
        device = getattr(logits, "device", None)
        if device is not None and getattr(device, "type", "cpu") != "cpu" and not self._diverse_now():
            return self._call_on_device(indices, logits, labels, hidden)
        start = time.perf_counter()
        s = self.scores(indices, logits, labels, hidden)
        self.select_seconds_ += time.perf_counter() - start
        return self.select(indices, s, embeddings=embeddings)

    def _diverse_now(self) -> bool:
        return self.diversity > 0 and self.uniform_share() < 1.0  # a wholly uniform draw needs none

    def _call_on_device(self, indices: Any, logits: Any, labels: Any, hidden: Any) -> np.ndarray:
        import torch

        from batchsel.loop import filter_device as device

        start = time.perf_counter()
        if self._clock is None:
            self._clock = start
        idx = _check_candidates(indices)
        n = len(idx)
        if logits.ndim != 2 or logits.shape[0] == 0 or logits.shape[1] == 0:
            raise ValueError(f"logits must be a non-empty 2-D array (n x classes), got shape {tuple(logits.shape)}")
        if logits.dtype.is_complex or logits.dtype == torch.bool:
            raise TypeError(f"logits must be numeric, got dtype {logits.dtype}")
        if logits.shape[0] != n:
            _check_candidates(idx, logits.shape[0])  # names logits and the count of indices
        y = labels if hasattr(labels, "detach") else torch.as_tensor(np.asarray(labels))
        if y.ndim != 1 or y.shape[0] != n:
            raise ValueError(f"labels must be 1-D with one entry per row of logits ({n}), got shape {tuple(y.shape)}")
        if n and (y.dtype.is_floating_point or y.dtype == torch.bool):
            raise TypeError(f"labels must be integer class ids, got dtype {y.dtype}")
        if hidden is not None and (not hasattr(hidden, "detach") or hidden.shape[0] != n):
            raise ValueError(f"hidden must be a tensor with one row per example ({n}), got {type(hidden).__name__}")
        il = self._irreducible_of(idx) if self.score == "rho" else None
        s, flags = device.scores(logits, y, self.score, hidden, il, float(self.irreducible_weight_ or 0.0))
        k = self.keep_count(n)
        m, rng, uniform = self._uniform_draw(idx, n, k)
        if k - m == 0:
            picked = torch.empty(0, dtype=torch.int64, device=s.device)
        elif self.pick == "percentile":
            rest = np.setdiff1d(np.arange(n), uniform)
            history = self._history if hasattr(self._history, "detach") else torch.as_tensor(self._history)
            order, self._history = device.percentile(history, s, rest, rng.random(len(rest)), self.beta, self.window)
            picked = order[: k - m]
        else:
            picked = device.top(s, uniform, k - m)
        host = torch.cat([picked, flags]).cpu().numpy()  # the one transfer
        row, label, hid = (int(v) for v in host[k - m :])
        if row < n:
            raise ValueError(f"logits contain NaN or inf (first at row {row}): has training diverged?")
        if label < n:
            bad = int(y[label])
            raise ValueError(
                f"labels must be in [0, {logits.shape[1]}) (the classes of logits of shape "
                f"{tuple(logits.shape)}), found {bad}"
            )
        if hid < n:
            raise ValueError("hidden contains NaN or inf")
        keep = np.sort(np.concatenate([uniform, host[: k - m]]).astype(np.int64))
        self._account(n, k, m, start)
        return keep

    # -- selection ----------------------------------------------------------------------
    def select(self, indices: Any, scores: Any, embeddings: Any = None) -> np.ndarray:
        """Positions (sorted, int64) of the candidates to train on: ``keep_count(n)`` of
        the n candidates, ``round(share * k)`` drawn uniformly and the rest by largest
        score (ties to the smaller position) or, with ``diversity``, by the greedy
        score-plus-facility-location objective over ``embeddings`` (n x d).

        ``indices`` are the candidates' dataset indices (they seed the uniform draw);
        ``scores`` one finite number per candidate, larger = more worth training on."""
        start = time.perf_counter()
        if self._clock is None:
            self._clock = start
        idx = _check_candidates(indices)
        n = len(idx)
        s = np.asarray(tensor_to_numpy(scores))
        if s.dtype == object or not np.issubdtype(s.dtype, np.number):
            raise TypeError(f"scores must be numeric, got dtype {s.dtype}")
        s = s.astype(np.float64).reshape(-1) if s.ndim <= 1 else s
        if s.shape != (n,):
            raise ValueError(f"scores has shape {s.shape}, expected ({n},): one score per candidate")
        if not np.isfinite(s).all():
            pos = int(np.flatnonzero(~np.isfinite(s))[0])
            raise ValueError(f"scores contain NaN or inf (first at position {pos}: {s[pos]})")
        emb = None
        if self._diverse_now():
            if embeddings is None:
                raise ValueError(f"diversity={self.diversity} needs the candidates' embeddings")
            emb = load_embeddings(embeddings, "embeddings")
            if emb.shape[0] != n:
                raise ValueError(f"embeddings has {emb.shape[0]} rows, expected {n} (one per candidate)")
            # distances of huge embeddings overflow float32: name the input, not the similarity
            check_scale(emb, "embeddings", center=emb.mean(axis=0, dtype=np.float64), underflow=False)
        k = self.keep_count(n)
        m, rng, uniform = self._uniform_draw(idx, n, k)
        if k - m == 0:
            picked = np.empty(0, np.int64)
        elif self.pick == "percentile":
            picked = self._percentile_draw(s, np.setdiff1d(np.arange(n), uniform), k - m, rng)
        elif emb is None:
            rest = np.setdiff1d(np.arange(n), uniform)
            picked = rest[np.argsort(-s[rest], kind="stable")[: k - m]]
        else:
            picked = self._diverse(s, emb, uniform, k)
        keep = np.sort(np.concatenate([uniform, picked]).astype(np.int64))
        self._account(n, k, m, start)
        return keep

    def _uniform_draw(self, idx: np.ndarray, n: int, k: int) -> tuple[int, np.random.Generator, np.ndarray]:
        """The uniform share's count ``m`` of the ``k`` kept, its generator (seeded by the
        step and the candidates) and its positions."""
        m = int(math.floor(self.uniform_share() * k + 0.5))
        rng = np.random.default_rng([self.seed, self.steps_, zlib.crc32(idx.astype("<i8").tobytes())])
        uniform = np.sort(rng.choice(n, size=m, replace=False)) if m else np.empty(0, np.int64)
        return m, rng, uniform

    def _account(self, n: int, k: int, m: int, start: float) -> None:
        self.steps_ += 1
        self.candidates_ += n
        self.kept_ += k
        self.kept_uniform_ += m
        end = time.perf_counter()
        self.select_seconds_ += end - start
        self.elapsed_seconds_ += end - cast(float, self._clock)
        self._clock = end

    def _percentile_draw(self, s: np.ndarray, rest: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` of the positions ``rest``, drawn without replacement with weights
        ``CDF(score) ** beta`` over the history (Efraimidis-Spirakis keys ``log(u) / w``)."""
        self._history = np.concatenate([tensor_to_numpy(self._history), s])[-self.window :]
        cdf = np.searchsorted(np.sort(self._history), s[rest], side="right") / len(self._history)
        keys = np.log(rng.random(len(rest))) / np.maximum(cdf**self.beta, 1e-300)
        return rest[np.argsort(-keys, kind="stable")[:count]]

    def _diverse(self, s: np.ndarray, emb: np.ndarray, uniform: np.ndarray, k: int) -> np.ndarray:
        from scipy.stats import rankdata

        from batchsel.submodular.functions import FacilityLocation, Mixture, Modular
        from batchsel.submodular.optimizers import maximize

        n = len(s)
        scaled = (rankdata(s) - 1.0) / max(n - 1, 1)  # score ranks in [0, 1], ties share a rank
        f = Mixture([Modular(scaled), FacilityLocation(_similarity(emb))], weights=[1.0, self.diversity * k / n])
        # naive greedy: one vectorized gain pass over the |C| candidates per pick beats the lazy
        # queue's Python bookkeeping at these sizes (same picks: ties go to the smaller index)
        return maximize(f, k - len(uniform), "naive", initial=uniform if len(uniform) else None).indices

    # -- cost ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        """Time the scoring forward: ``with torch.no_grad(), filt.timed(): logits = model(xb)``."""
        start = time.perf_counter()
        if self._clock is None:
            self._clock = start
        try:
            yield
        finally:
            self.forward_seconds_ += time.perf_counter() - start

    def cost(self) -> dict[str, float]:
        """The filter's overhead so far: seconds in the scoring forward (:meth:`timed`)
        and in the filter, and their fractions of the steps' wall time (the time from
        the first step's scoring forward to the latest :meth:`select`, so it includes
        whatever the loop does between steps: data loading, backward, evaluation).

        Example
        -------
        >>> import numpy as np
        >>> filt = CandidateFilter(batch_size=1, ratio=2)
        >>> with filt.timed():
        ...     pass
        >>> _ = filt.select([0, 1], [0.5, 1.5])
        >>> sorted(filt.cost())
        ['elapsed_seconds', 'forward_fraction', 'forward_seconds', 'select_fraction', 'select_seconds', 'steps']
        """
        elapsed = self.elapsed_seconds_
        return {
            "steps": int(self.steps_),
            "forward_seconds": self.forward_seconds_,
            "select_seconds": self.select_seconds_,
            "elapsed_seconds": elapsed,
            "forward_fraction": self.forward_seconds_ / elapsed if elapsed > 0 else 0.0,
            "select_fraction": self.select_seconds_ / elapsed if elapsed > 0 else 0.0,
        }

    # -- resume -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Counters and settings (plain Python values: ``torch.save`` / ``torch.load``
        with ``weights_only`` handle it). The step counter makes a resumed run draw its
        uniform shares as the uninterrupted one did. It is the same on every rank (only
        the timers differ), so rank 0's state can resume every rank."""
        return {
            "version": STATE_VERSION,
            "class": type(self).__name__,
            "settings": {k: getattr(self, k) for k in _SETTINGS},
            "counters": {k: getattr(self, k) for k in _COUNTERS},
            "history": np.asarray(tensor_to_numpy(self._history), dtype=np.float64).tolist(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (the settings must be this filter's)."""
        if (
            not isinstance(state, dict)
            or state.get("version") != STATE_VERSION
            or state.get("class") != type(self).__name__
        ):
            raise ValueError(f"not a CandidateFilter state (version {STATE_VERSION})")
        # as torch's load_state_dict: name every missing and unexpected key at once
        # (settings may lack the guards added later; older states have no history)
        missing = sorted({"settings", "counters"} - set(state))
        missing += sorted(f"counters.{k}" for k in set(_COUNTERS) - set(state.get("counters") or {}))
        unexpected = sorted(set(state) - {"version", "class", "settings", "counters", "history"})
        unexpected += sorted(f"settings.{k}" for k in set(state.get("settings") or {}) - set(_SETTINGS))
        unexpected += sorted(f"counters.{k}" for k in set(state.get("counters") or {}) - set(_COUNTERS))
        if missing or unexpected:
            raise ValueError(
                f"not a complete CandidateFilter state: missing keys {missing}, unexpected keys "
                f"{unexpected}; pass what CandidateFilter.state_dict() returned"
            )
        for key, mine in ((k, getattr(self, k)) for k in _SETTINGS):
            if key in state["settings"] and state["settings"][key] != mine:  # (older states lack the guard's)
                raise ValueError(
                    f"the state was saved with {key}={state['settings'].get(key)!r}, this filter has {mine!r}"
                )
        for key in _COUNTERS:
            value = state["counters"][key]
            setattr(self, key, float(value) if key.endswith("seconds_") else int(value))
        self._history = np.asarray(state.get("history", []), dtype=np.float64)  # (older states: none)
        self._clock = None  # the wall clock restarts at the next step

    def __repr__(self) -> str:
        extra = "".join(
            f", {k}={getattr(self, k)!r}" for k in ("diversity", "uniform_fraction", "warmup_steps") if getattr(self, k)
        )
        if self.pick != "top":
            extra += f", pick={self.pick!r}, beta={self.beta:g}, window={self.window}"
        if self.score == "rho" and self.irreducible_weight != "auto":
            extra = f", irreducible_weight={self.irreducible_weight!r}" + extra
        return (
            f"CandidateFilter(batch_size={self.batch_size}, ratio={self.ratio:g}, score={self.score!r}"
            f"{extra}, seed={self.seed})"
        )


def _check_candidates(indices: Any, count: int | None = None) -> np.ndarray:
    idx = np.asarray(tensor_to_numpy(indices))
    if idx.ndim != 1 or idx.size == 0:
        raise ValueError(f"indices must be a non-empty 1-D array of dataset indices, got shape {idx.shape}")
    if not np.issubdtype(idx.dtype, np.integer):
        raise TypeError(f"indices must be integers, got dtype {idx.dtype}")
    if idx.min() < 0:
        raise ValueError(f"indices must be >= 0, found {int(idx.min())}")
    if count is not None and len(idx) != count:
        raise ValueError(f"logits has {count} rows but {len(idx)} indices were given: one row per candidate")
    return idx.astype(np.int64, copy=False)


def _check_irreducible(values: Any) -> np.ndarray:
    values = getattr(values, "losses_", values)  # a fitted IrreducibleLoss
    il = np.asarray(tensor_to_numpy(values))
    if il.dtype == object or not np.issubdtype(il.dtype, np.number):
        raise TypeError(f"irreducible_losses must be numeric, got dtype {il.dtype}")
    il = il.astype(np.float64)
    if il.ndim != 1 or il.size == 0:
        raise ValueError(f"irreducible_losses must be a non-empty 1-D array (one per example), got shape {il.shape}")
    if np.isinf(il).any():
        raise ValueError(f"irreducible_losses contain inf (first at example {int(np.flatnonzero(np.isinf(il))[0])})")
    return il


__all__ = ["CandidateFilter", "loss_scores", "gradnorm_scores", "SCORES"]
