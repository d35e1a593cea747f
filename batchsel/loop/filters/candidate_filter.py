"""The candidate filter: :class:`CandidateFilter`, which of a candidate batch to train on, and
its counters and clocks. Its parts are this package's other modules (:mod:`batchsel.loop.filters`)."""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any, Iterator, cast

import numpy as np

from batchsel.core.checks import check_int, check_number, check_seed
from batchsel.loop.filters.checks import check_candidates, check_scores
from batchsel.loop.filters.diversity import check_embeddings, diverse_pick
from batchsel.loop.filters.rho import IrreducibleTerm, check_rho_settings
from batchsel.loop.filters.rules import check_pick, pick_rest, uniform_draw
from batchsel.loop.filters.state import COUNTERS, filter_state, restored_state
from batchsel.selectors.scores import gradnorm_scores, loss_scores

SCORES = ("loss", "gradnorm", "rho")


class _StepClock:
    """CandidateFilter's counters and clocks: what its steps kept and what they cost
    (read by ``cost``, saved by ``state_dict``), with the percentile rule's history.

    A mixin of the filter's own, kept in its module: both read the clock of this module's ``time``.
    """

    # counters and clocks (reset by _reset, restored by load_state_dict): CandidateFilter's Attributes
    steps_: int
    candidates_: int
    kept_: int
    kept_uniform_: int
    forward_seconds_: float
    select_seconds_: float
    elapsed_seconds_: float
    _clock: float | None  # end of the latest step (or start of the first)
    _history: Any  # pick="percentile": the latest ``window`` scores, oldest first

    def _reset(self) -> None:
        for name in COUNTERS:
            setattr(self, name, 0.0 if name.endswith("seconds_") else 0)
        self._clock = None
        self._history = np.empty(0)

    def _start(self) -> float:
        """Now; the start of the steps' wall clock if none has started."""
        start = time.perf_counter()
        if self._clock is None:
            self._clock = start
        return start

    def _account(self, n: int, k: int, m: int, start: float) -> None:
        """Count a step that kept ``k`` of ``n`` candidates (``m`` uniform), begun at ``start``."""
        self.steps_ += 1
        self.candidates_ += n
        self.kept_ += k
        self.kept_uniform_ += m
        end = time.perf_counter()
        self.select_seconds_ += end - start
        self.elapsed_seconds_ += end - cast(float, self._clock)
        self._clock = end

    @contextlib.contextmanager
    def _forward_clock(self) -> Iterator[None]:
        """Add the time inside the ``with`` block to ``forward_seconds_``."""
        start = self._start()
        try:
            yield
        finally:
            self.forward_seconds_ += time.perf_counter() - start

    def _cost_report(self) -> dict[str, float]:
        elapsed = self.elapsed_seconds_
        return {
            "steps": int(self.steps_),
            "forward_seconds": self.forward_seconds_,
            "select_seconds": self.select_seconds_,
            "elapsed_seconds": elapsed,
            "forward_fraction": self.forward_seconds_ / elapsed if elapsed > 0 else 0.0,
            "select_fraction": self.select_seconds_ / elapsed if elapsed > 0 else 0.0,
        }

    def _restore(self, counters: dict[str, int | float], history: np.ndarray) -> None:
        """Set the counters and the history of a saved state (checked by ``restored_state``)."""
        for key, value in counters.items():
            setattr(self, key, value)
        self._history = history
        self._clock = None  # the wall clock restarts at the next step


class CandidateFilter(_StepClock):
    """Chooses the B examples to train on from a scored candidate batch (docs: design/filters.md).

    Keyword groups: the score (`irreducible_losses`, `irreducible_weight`), the pick
    (`diversity`, `uniform_fraction`, `warmup_steps`, `pick`, `beta`, `window`), the guard
    (`min_il_skill`, `min_il_decisive`, `reference_accuracy`) and the draws (`seed`).

    Parameters
    ----------
    batch_size : int
        B, the examples trained on per step and rank.
    ratio : float, default 4.0
        Candidates per kept example (>= 1): the sampler's batches should hold
        :attr:`candidate_size` ``= ceil(ratio * B)`` examples. A smaller candidate batch
        (the last of an epoch) keeps ``ceil(n / ratio)`` of its n examples.
    score : {"loss", "gradnorm", "rho"}, default "loss"
        What :meth:`scores` (and calling the filter) computes from the logits.
        :meth:`select` takes any scores.
    irreducible_losses : array-like, IrreducibleLoss or None, default None
        For ``"rho"``: the irreducible loss of every example (length N, NaN for examples
        that must not be trained on, such as a holdout), or a fitted
        :class:`~batchsel.loop.irreducible.IrreducibleLoss`.
    irreducible_weight : float or "auto", default "auto"
        w >= 0 in ``"rho"``'s score ``loss - w * irreducible_loss`` (1: RHO-LOSS as
        published, 0: the plain loss), or ``"auto"``: 0.5 up to 7.5 % and 1 from
        15 % of examples the fitted :class:`~batchsel.loop.irreducible.IrreducibleLoss` decisively
        puts in another class (``confident_disagreement_``), linear in between, and the
        term of examples the IL model is not decisive about scaled by the same ramp
        (``indecisive_trust_``); 0.5 for irreducible losses given as an array. The
        resolved weight is ``irreducible_weight_``. Why: docs/design/filters.md.
    diversity : float, default 0.0
        lambda >= 0 of the facility-location term (0: plain top-B by score); needs the
        candidates' ``embeddings`` in :meth:`select`.
    uniform_fraction : float, default 0.25
        Share in [0, 1] of every kept batch drawn uniformly from the candidates (a bad
        score cannot take training far from random batches).
    warmup_steps : int, default 0
        Over the first ``warmup_steps`` steps the uniform share falls linearly from 1 to
        ``uniform_fraction``.
    min_il_skill, min_il_decisive : float, default 0.3 and 0.5
        The guard against a weak irreducible-loss model (``"rho"`` with a fitted
        :class:`~batchsel.loop.irreducible.IrreducibleLoss`): when its skill
        ``(accuracy_ - chance_) / (1 - chance_)`` is below ``min_il_skill`` or it is
        decisive on fewer than ``min_il_decisive`` of the examples, the filter warns
        and keeps uniform draws only (``guard_ = "uniform"``); better, check ``guard_`` and
        train on plain random batches. 0 switches a criterion off; plain arrays of
        irreducible losses are trusted. How the thresholds were chosen:
        docs/design/filters.md.
    reference_accuracy : float or None, default None
        Optional: the held-out accuracy the trained model reaches, measured against labels
        like the IL model's (e.g. a random-batch run scored on a held-out part of the
        training set). When the IL model is less accurate, its term is shrunk in
        proportion of the skills, ``irreducible_weight * skill(IL) / skill(reference)``
        (``guard_ = "downweight"``, a warning).
    seed : int, default 0
        Seeds the uniform draws: step t on candidates ``indices`` uses the generator of
        ``(seed, t, crc32(indices))``, so ranks draw independently and a resumed run draws
        what the uninterrupted one did.
    pick : {"top", "percentile"}, default "top"
        How the examples not drawn uniformly are chosen: ``"top"`` the largest
        scores; ``"percentile"``, Selective-Backprop's rule (Jiang et al. 2019): candidate
        i is drawn with probability proportional to ``P_i = CDF(score_i) ** beta``, the
        CDF over the scores of the last ``window`` candidates seen (this batch's
        included), without replacement and always ``keep_count(n)`` of them, so every rank
        backpropagates as many examples. Selective-Backprop's ``beta=1`` keeps half of
        its candidates on average: ``ratio=2`` keeps as many.
    beta, window : float and int, default 1.0 and 1024
        ``pick="percentile"``'s exponent (> 0) and history length (>= 1).

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
        self.pick, self.beta, self.window = check_pick(pick, beta, window, self.diversity)
        rho = check_rho_settings(
            irreducible_losses, irreducible_weight, score, min_il_skill, min_il_decisive, reference_accuracy
        )
        self.irreducible_losses, self.irreducible_weight = rho.losses, rho.weight
        self.min_il_skill, self.min_il_decisive = rho.min_il_skill, rho.min_il_decisive
        self.reference_accuracy = rho.reference_accuracy
        self._rho = IrreducibleTerm.resolve(irreducible_losses, rho, score)
        term = self._rho  # its fields, as the filter has always shown them
        self.guard_, self.irreducible_weight_, self.indecisive_trust_ = term.guard, term.weight, term.indecisive_trust
        self.il_accuracy_, self.il_skill_ = term.accuracy, term.skill
        self._reset()

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
        idx = check_candidates(indices, len(s))  # one row of logits per candidate
        if self.score == "rho":
            s = s - self.irreducible_weight_ * self._rho.of(idx)
        return s

    def __call__(
        self, indices: Any, logits: Any, labels: Any, *, hidden: Any = None, embeddings: Any = None
    ) -> np.ndarray:
        """:meth:`scores` then :meth:`select`: the positions (into the candidate batch) to
        train on.

        Logits that are a torch tensor on an accelerator (CUDA, MPS) are scored and picked
        in torch on that device (``batchsel.loop.filters.device``): only the kept positions
        come to the host, in one transfer; the same positions as the numpy path. On the
        CPU numpy is faster (figures: docs/design/filters.md); ``diversity`` (a
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
        from batchsel.loop.filters import device

        start = self._start()
        idx = check_candidates(indices)
        n = len(idx)
        y = device.check_inputs(idx, logits, labels, hidden)
        il = self._rho.of(idx) if self.score == "rho" else None
        s, flags = device.scores(logits, y, self.score, hidden, il, float(self.irreducible_weight_ or 0.0))
        k = self.keep_count(n)
        m, rng, uniform = uniform_draw(self.seed, self.steps_, idx, self.uniform_share(), k)
        picked, self._history = device.pick_rest(
            self.pick, s, uniform, k - m, rng, self._history, self.beta, self.window
        )
        keep = np.sort(np.concatenate([uniform, device.to_host(picked, flags, logits, y)]).astype(np.int64))
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
        start = self._start()
        idx = check_candidates(indices)
        n = len(idx)
        s = check_scores(scores, n)
        emb = check_embeddings(embeddings, n, self.diversity) if self._diverse_now() else None
        k = self.keep_count(n)
        m, rng, uniform = uniform_draw(self.seed, self.steps_, idx, self.uniform_share(), k)
        if emb is not None and k > m:  # (pick="top": "percentile" takes no diversity)
            picked = diverse_pick(s, emb, uniform, k, self.diversity)
        else:
            picked, self._history = pick_rest(self.pick, s, uniform, k - m, rng, self._history, self.beta, self.window)
        keep = np.sort(np.concatenate([uniform, picked]).astype(np.int64))
        self._account(n, k, m, start)
        return keep

    # -- cost ---------------------------------------------------------------------------
    def timed(self) -> contextlib.AbstractContextManager[None]:
        """Time the scoring forward: ``with torch.no_grad(), filt.timed(): logits = model(xb)``."""
        return self._forward_clock()

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
        return self._cost_report()

    # -- resume -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Counters and settings (plain Python values: ``torch.save`` / ``torch.load``
        with ``weights_only`` handle it). The step counter makes a resumed run draw its
        uniform shares as the uninterrupted one did. It is the same on every rank (only
        the timers differ), so rank 0's state can resume every rank."""
        return filter_state(self, self._history)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (the settings must be this filter's)."""
        self._restore(*restored_state(self, state))

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
