"""The default selector: loss-rank pressure where the run's own losses say it pays, random batches where they say it would hurt.

Loss-rank (:class:`~batchsel.selectors.loss_rank.LossRankSelector`) trains faster on clean
data and worse under wrong labels: the wrong labels hold the top losses, so pressure keeps
drawing them and the model memorizes them. :class:`AutoSelector` measures, from the losses
fed back, the share of examples the model does not fit (latest loss above the loss of a
guess, ``ln C``) and sets the pressure from it, every batch:

- warm-up: random batches until nearly every example has a loss;
- while the misfit share falls from ``noise_high`` to ``noise_low``, the pressure rises
  geometrically from 1 to ``pressure``;
- once the model fits most examples (``fitted_share`` of them below half the guess's loss)
  and the misfit share stays at least ``noise_high`` over two passes' worth of feedback
  (``2 N`` losses), the misfit is taken for wrong labels (logged once, at WARNING)
  and the run stays at ``noisy_pressure`` (random batches by default) to its end; above 1,
  the misfit examples are ranked as learnt (the small-loss trick).

Details and measurements: docs/design/auto.md.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from batchsel.core.checks import check_labels, check_number
from batchsel.core.journal import saved_parts, saved_values
from batchsel.core.world import World
from batchsel.selectors.auto_kernels import mark, record_losses
from batchsel.selectors.feedback_checks import checked_losses, feedback_arrays
from batchsel.selectors.loss_rank import LossRankRun, LossRankSelector

logger = logging.getLogger(__name__)

_LATCH_PASSES = 2

#: the decision's phases, in the order a run passes them
MODES = ("warm-up", "select", "noisy")


@dataclass(eq=False)
class AutoRun(LossRankRun):
    """A loss-rank run with a shuffle for its random batches.

    Parameters
    ----------
    used : numpy.ndarray or None, default None
        Per example: drawn this epoch (rebuilt from ``drawn`` after a restore).
    shuffled : numpy.ndarray or None, default None
        The shard in the epoch's shuffle (random's order for this rank), drawn when a
        random batch first reads it (:meth:`AutoSelector._shuffle`).
    world : World or None, default None
        The run's rank and world size (what its shuffle is drawn for).
    cursor : int, default 0
        How far the random batches have read ``shuffled``.
    in_order : int, default 0
        How many of the epoch's first batches are the shuffle's, in order, with nothing
        else drawn (then the next random batch is the shuffle's next slice, unchecked).
    **fields
        :class:`~batchsel.selectors.loss_rank.LossRankRun`'s.
    """

    used: np.ndarray | None = None
    shuffled: np.ndarray | None = None
    world: World | None = None
    cursor: int = 0
    in_order: int = 0


def _ramp(value: float, zero: float, one: float) -> float:
    """0 at ``zero``, 1 at ``one``, linear between and clipped (``zero > one`` ramps down)."""
    return min(1.0, max(0.0, (value - zero) / (one - zero)))


def _first_batch_cuts(losses: np.ndarray) -> tuple[float, float]:
    """The misfit threshold and the fitted cut from the first batch's losses (an untrained
    model's): their mean, and half of it where the losses are >= 0 (as ``ln C / 2``). A loss
    that goes below 0 has no floor at 0, so half the mean means nothing (at a negative mean
    it lies above it and a loss would count as misfit and fitted at once): the cut is then
    as far below the mean as half its size, and at least two of the batch's standard
    deviations, so an untrained model's spread is not taken for fitted examples."""
    mean = float(losses.mean())
    if losses.min() >= 0.0:
        return mean, mean / 2
    return mean, mean - max(abs(mean) / 2, 2 * float(losses.std()))


def _cut_of(threshold: float) -> float:
    """The fitted cut of a state saved without one (before losses below 0 had their own):
    :func:`_first_batch_cuts`'s for a spread of 0, half the threshold where it is >= 0."""
    return threshold - abs(threshold) / 2


def _shuffled_batch(run: AutoRun, size: int) -> np.ndarray:
    """The next ``size`` examples of the run's shuffle (drawn) that no batch of the epoch
    drew yet, so random batches are a shuffle's: each example once an epoch."""
    assert run.shuffled is not None  # AutoSelector._shuffle drew it
    taken: list[np.ndarray] = []
    while size > 0:
        if run.cursor >= len(run.shuffled):  # pressured batches drew the rest (or a cut): a new pass
            run.used[run.shard] = False
            for part in taken:  # a batch holds an example once
                run.used[part] = True
            run.cursor = 0
        chunk = run.shuffled[run.cursor : run.cursor + 2 * size]
        unused = np.flatnonzero(~run.used[chunk])
        fresh = chunk[unused[:size]]
        # the cursor passes the examples taken and the used ones before them
        run.cursor += int(unused[size - 1]) + 1 if len(unused) >= size else len(chunk)
        run.used[fresh] = True
        taken.append(fresh)
        size -= len(fresh)
    return np.concatenate(taken)


def _rest_of_shuffle(run: AutoRun, sizes: np.ndarray) -> list[np.ndarray]:
    """Batches of ``sizes`` from the examples of the run's shuffle that no batch drew yet,
    in one pass: :func:`_shuffled_batch`'s batches, one after the other."""
    assert run.shuffled is not None  # AutoSelector._shuffle drew it
    need = int(np.sum(sizes))
    rest = run.shuffled[run.cursor :]
    unused = np.flatnonzero(~run.used[rest])
    if len(unused) < need:  # pressured batches drew part of it: a new pass, batch by batch
        return [_shuffled_batch(run, int(size)) for size in sizes]
    taken = rest[unused[:need]]
    if need:
        run.cursor += int(unused[need - 1]) + 1
    run.used[taken] = True
    ends = np.cumsum(sizes).tolist()
    return [taken[a:b] for a, b in zip([0, *ends[:-1]], ends)]


class AutoSelector(LossRankSelector):
    """Loss-rank batches at a pressure the run's losses choose; random batches where they point to wrong labels.

    Used like :class:`~batchsel.LossRankSelector`: ``observe(indices, losses=...)`` after
    each step (``logits=`` optional: their width gives the number of classes).

    Parameters
    ----------
    num_examples : int
        N.
    batch_size : int
        B.
    labels : array-like of int, shape (N,), optional
        The training labels: their number of classes C sets the misfit threshold ``ln C``.
        Without labels, C comes from the first logits observed; without either, the
        threshold is the mean loss of the first batch observed (an untrained model's).
    seed : int, default 0
        Seeds the per-epoch shards and every draw.
    pressure : float, default 100
        The most selection pressure (loss-rank's ``s_e``), applied once the misfit share is
        at most ``noise_low``; the pressure in use is :attr:`pressure_now`.
    noise_low, noise_high : float, default 0.05 and 0.15
        Misfit shares between which the pressure falls from ``pressure`` to 1.
    fitted_share : float, default 0.5
        The share of examples with a loss below half the threshold from which a misfit share
        of at least ``noise_high``, held over ``2 N`` losses fed back, counts as wrong labels
        (the run falls back for good); also the fitted share at which pressure starts.
    fitted_full : float, default 0.9
        The fitted share from which the full pressure is allowed: between ``fitted_share``
        and it, the pressure's exponent is at most the fitted share's place between them (a
        model unsure of most examples gains nothing from ranking them).
    noisy_pressure : float, default 1
        The pressure after that fallback; above 1 the misfit examples rank as learnt.
    noisy_cut : float, default 0
        At the fallback to random batches (``noisy_pressure`` 1): the share of the misfit
        examples, highest losses first, that the random batches leave out to the run's end
        (the small-loss idea, sized by the run's own misfit share, its estimate of the
        wrong labels). Each epoch keeps random's number of batches; the other examples fill
        them. 0: no example left out.
    drop_last : bool, default False
        DistributedSampler's padding or dropping of the per-rank shards.

    Keyword groups:
        the data: ``labels``; the draws: ``seed``, ``pressure``, ``drop_last``; the
        decision: ``noise_low``, ``noise_high``, ``fitted_share``, ``fitted_full``,
        ``noisy_pressure``, ``noisy_cut``.

    Attributes
    ----------
    mode, pressure_now : str and float
        Read-only: the phase (``"warm-up"``, ``"select"`` or ``"noisy"``) and the pressure
        of the next batch (1: random batches). ``mode_`` and ``pressure_now_`` are the same.
    misfit_share_, fitted_share_ : float
        The shares of examples with a loss above the threshold, and below the fitted cut.
    threshold_, fitted_below_ : float or None
        The misfit threshold and the fitted cut (None until they are known); the cut is half
        the threshold, lower for losses below 0 (see the design page).
    left_out_ : numpy.ndarray
        The examples ``noisy_cut`` leaves out (sorted; empty before the fallback).

    Raises
    ------
    ValueError
        Labels of another length than N, a share outside [0, 1] or ``noise_low >=
        noise_high``; ``observe`` before the first batch was drawn, or NaN losses.

    See Also
    --------
    LossRankSelector : the batches it draws, at a fixed pressure.
    InfoBatchSelector : skips learnt examples instead of ranking them.

    Examples
    --------
    >>> import numpy as np
    >>> sel = AutoSelector(100, batch_size=10, labels=np.arange(100) % 10)
    >>> batch = next(sel.iter_batches(epoch=0))
    >>> sel.observe(batch, losses=np.full(10, 0.1))
    >>> sel.mode, sel.pressure_now
    ('warm-up', 1.0)
    """

    run_type = AutoRun

    def __init__(
        self,
        num_examples: int,
        batch_size: int,
        *,
        labels: Any = None,
        seed: int = 0,
        pressure: float = 100.0,
        noise_low: float = 0.05,
        noise_high: float = 0.15,
        fitted_share: float = 0.5,
        fitted_full: float = 0.9,
        noisy_pressure: float = 1.0,
        noisy_cut: float = 0.0,
        drop_last: bool = False,
    ) -> None:
        super().__init__(num_examples, batch_size, seed=seed, pressure=pressure, drop_last=drop_last)
        self.labels = None if labels is None else check_labels(labels, self.num_examples)
        self.noise_low = check_number(noise_low, "noise_low", 0.0, 1.0)
        self.noise_high = check_number(noise_high, "noise_high", 0.0, 1.0)
        if self.noise_low >= self.noise_high:
            raise ValueError(f"noise_low must be below noise_high, got {noise_low!r} >= {noise_high!r}")
        self.fitted_share = check_number(fitted_share, "fitted_share", 0.0, 1.0)
        self.fitted_full = check_number(fitted_full, "fitted_full", 0.0, 1.0)
        if self.fitted_share >= self.fitted_full:
            raise ValueError(f"fitted_share must be below fitted_full, got {fitted_share!r} >= {fitted_full!r}")
        self.noisy_pressure = check_number(noisy_pressure, "noisy_pressure", 1.0)
        self.noisy_cut = check_number(noisy_cut, "noisy_cut", 0.0, 1.0)
        classes = None if self.labels is None else int(self.labels.max()) + 1
        self.threshold_: float | None = math.log(classes) if classes and classes > 1 else None
        self.fitted_below_: float | None = None if self.threshold_ is None else self.threshold_ / 2
        self.raw_losses_ = np.full(self.num_examples, np.inf)  # the losses as observed (+inf: unseen)
        self._journal.filled(self._journaled())  # with the raw losses
        self._mode = "warm-up"
        self._pressure_now = 1.0
        self._started = False
        self._counts = np.zeros(3, np.int64)  # seen, misfit, fitted
        self._suspect_seen = 0  # losses observed since the wrong-label signal holds
        self._kept: np.ndarray | None = None  # per example: drawn after the fallback (None: all)

    # -- the signal -------------------------------------------------------------------
    @property
    def mode(self) -> str:
        """The phase the next batch is drawn in (read-only).

        Returns
        -------
        str
            ``"warm-up"`` (random batches until nearly every example has a loss),
            ``"select"`` (the pressure the shares set, :attr:`pressure_now`; 1 where they
            point to wrong labels not confirmed yet) or ``"noisy"`` (taken for wrong labels:
            ``noisy_pressure``, random batches by default, to the run's end).
        """
        return self._mode

    @property
    def pressure_now(self) -> float:
        """The pressure the next batch is drawn at (read-only).

        Returns
        -------
        float
            Loss-rank's ``s_e`` for the next batch: 1 is random batches (the warm-up, wrong
            labels); ``pressure`` is only the most it may reach.
        """
        return self._pressure_now

    mode_ = mode
    pressure_now_ = pressure_now

    def __setstate__(self, state: dict) -> None:
        # pickled before mode and pressure_now were read-only, and before the fitted cut
        state = dict(state)
        state.setdefault("_mode", state.pop("mode_", "warm-up"))
        state.setdefault("_pressure_now", state.pop("pressure_now_", 1.0))
        threshold = state.get("threshold_")
        state.setdefault("fitted_below_", None if threshold is None else _cut_of(threshold))
        state.setdefault("noisy_cut", 0.0)
        state.setdefault("_kept", None)
        super().__setstate__(state)

    @property
    def left_out_(self) -> np.ndarray:
        """The examples ``noisy_cut`` left out at the fallback, sorted (read-only).

        Returns
        -------
        numpy.ndarray
            int64 indices; empty before the fallback, or with ``noisy_cut`` 0.
        """
        return np.zeros(0, np.int64) if self._kept is None else np.flatnonzero(~self._kept)

    @property
    def misfit_share_(self) -> float:
        return float(self._counts[1] / max(self._counts[0], 1))

    @property
    def fitted_share_(self) -> float:
        return float(self._counts[2] / max(self._counts[0], 1))

    def _recount(self) -> None:
        tau = self.threshold_ if self.threshold_ is not None else np.inf
        below = self.fitted_below_ if self.fitted_below_ is not None else -np.inf
        seen = np.isfinite(self.raw_losses_)
        self._counts = np.array(
            [seen.sum(), (seen & (self.raw_losses_ > tau)).sum(), (seen & (self.raw_losses_ < below)).sum()],
            dtype=np.int64,
        )

    def observe(self, indices: Any, losses: Any = None, logits: Any = None, embeddings: Any = None) -> None:
        """Record the latest per-example ``losses`` of ``indices`` and update the pressure.

        Raises
        ------
        ValueError
            Before the first batch was drawn (the losses would rank examples no batch has
            shown the model), or on NaN or infinite losses.
        """
        if losses is None:
            return
        if not self._started:
            raise ValueError(
                "observe() came before the first batch was drawn: feed back the losses of the batches "
                "the selector gave (iterate the sampler or iter_batches first)"
            )
        if not self.wants_feedback():  # random batches to the run's end: nothing reads losses now
            return
        pair = feedback_arrays(indices, losses)
        if pair is None or self.threshold_ is None or not self._recorded(*pair):
            # other types, a value out of range or not finite (checked, named), or the first batch
            pair = checked_losses(indices, losses, self.num_examples, cast=False)  # record_losses reads float32
            if self.threshold_ is None:
                width = None if logits is None else np.shape(logits)[-1]
                if width and width > 1:
                    self.threshold_ = math.log(width)
                    self.fitted_below_ = self.threshold_ / 2
                else:
                    self.threshold_, self.fitted_below_ = _first_batch_cuts(pair[1].astype(np.float64))
                self._recount()
            recorded = self._recorded(*pair)
            assert recorded  # (in range and finite now)
        self._decide(len(pair[0]))

    def _recorded(self, idx: np.ndarray, values: np.ndarray) -> bool:
        """Store a batch's losses and keep the counts, where every index is in range and
        every loss finite (one compiled pass); False, and nothing written, otherwise."""
        cut = self._mode == "noisy" and self.noisy_pressure > 1.0
        log, at = self._changes.room(idx.size)
        stored = record_losses(
            self.raw_losses_,
            self._losses,
            self._pending,
            self._counts,
            idx,
            values,
            self.threshold_,
            self.fitted_below_,
            cut,
            self.num_examples,
            log,
            at,
        )
        if not stored:
            return False
        self._changes.added(idx.size)
        self._journal.wrote(idx)
        return True

    def _decide(self, observed: int) -> None:
        if self._mode == "noisy":
            return
        counted, misfit_count, fitted_count = self._counts[:3].tolist()  # Python numbers: this runs every step
        seen = counted / self.num_examples
        misfit, fitted = misfit_count / max(counted, 1), fitted_count / max(counted, 1)
        if seen < 0.95:  # the first epoch: random batches, the shares would speak for part of the data
            self._mode, self._pressure_now = "warm-up", 1.0
            return
        # a model that learns fast passes through "half fitted, the rest still stale": wrong
        # labels are the misfit that stays over _LATCH_PASSES passes' worth of feedback
        suspect = fitted >= self.fitted_share and misfit >= self.noise_high
        self._suspect_seen = self._suspect_seen + observed if suspect else 0
        if self._suspect_seen >= _LATCH_PASSES * self.num_examples:
            self._mode, self._pressure_now = "noisy", self.noisy_pressure
            if self.noisy_pressure > 1.0:  # the misfit examples rank as learnt from now on
                self._losses[np.isfinite(self.raw_losses_) & (self.raw_losses_ > self.threshold_)] = 0.0
                self._rewrote_all()
            self._kept = self._kept_after_fallback()
            for run in self._runs.values():  # the epoch in progress goes on without the cut
                assert isinstance(run, AutoRun)  # run_type
                if self._kept is not None:
                    if run.shuffled is not None:  # (a shuffle not drawn yet is cut when drawn: _shuffle)
                        run.shuffled = run.shuffled[self._kept[run.shuffled]]
                    run.cursor, run.in_order = 0, -1  # ``used`` says what the epoch drew; the cursor saves a scan
            # WARNING: the run gives up loss-rank for good, a user should see it without
            # configuring logging; it happens once (the mode never leaves "noisy")
            logger.warning(
                "AutoSelector: %.0f %% of the examples are fitted and %.0f %% stay above the loss of a guess "
                "(%.3g): taken for wrong labels, pressure %g (1: random batches) to the run's end; "
                "silence with logging.getLogger('batchsel.selectors.auto').setLevel(logging.ERROR)",
                100 * fitted,
                100 * misfit,
                self.threshold_,
                self.noisy_pressure,
            )
            return
        gain = min(
            _ramp(misfit, self.noise_high, self.noise_low),  # few examples misfit
            _ramp(fitted, self.fitted_share, self.fitted_full),  # and most of them fitted
        )
        now = float(self._pressure**gain)
        if self._mode != "select" or abs(math.log(now / self._pressure_now)) > math.log(2):
            logger.info("AutoSelector: misfit share %.3f, fitted share %.3f, pressure %.3g", misfit, fitted, now)
        self._mode, self._pressure_now = "select", now

    def _kept_after_fallback(self) -> np.ndarray | None:
        """Per example, whether random batches draw it after the fallback (None: all), from
        the losses at the fallback: they do not change after it (nothing reads feedback
        then), so a restored state finds the same examples."""
        if self.noisy_pressure > 1.0 or self.noisy_cut == 0.0 or self.threshold_ is None:
            return None
        misfit = np.flatnonzero(np.isfinite(self.raw_losses_) & (self.raw_losses_ > self.threshold_))
        count = int(self.noisy_cut * len(misfit))
        if count == 0:
            return None
        kept = np.ones(self.num_examples, np.bool_)
        kept[misfit[np.argsort(-self.raw_losses_[misfit], kind="stable")[:count]]] = False
        return kept

    def wants_feedback(self) -> bool:
        """False once the run has fallen back to random batches for good (``"noisy"`` at
        ``noisy_pressure`` 1): nothing reads the losses after that, so a sampler's step costs
        random's. :attr:`misfit_share_` and :attr:`fitted_share_` then stay as they were at
        the fallback."""
        return self._mode != "noisy" or self.noisy_pressure > 1.0

    # -- drawing ----------------------------------------------------------------------
    def _draw(self, run: AutoRun, rank: int) -> np.ndarray:  # type: ignore[override]
        if self._pressure_now > 1.0:
            return super()._draw(run, rank)
        if self.wants_feedback():  # a random batch reads the shuffle: no generator to seed
            batch = self._next_batch(run, None)
            run.drawn.append(batch)
            return batch
        # fallen back for good: the rest of the epoch's shuffle at once, in the sizes left,
        # so each later batch of the epoch is handed out as a planned one is
        t = len(run.drawn)
        self._ensure_used(run)
        self._shuffle(run)
        run.drawn.extend(_rest_of_shuffle(run, run.sizes[t:]))
        return run.drawn[t]

    def _ensure_used(self, run: AutoRun) -> None:
        if run.used is None:  # a new run, or one restored from a state: what it drew is used
            run.used = np.zeros(self.num_examples, np.bool_)
            for batch in run.drawn:
                run.used[batch] = True

    def _next_batch(self, run: AutoRun, rng: Any) -> np.ndarray:  # type: ignore[override]
        self._started = True
        t = len(run.drawn)
        if self._pressure_now > 1.0:
            self._ensure_used(run)
            batch = super()._next_batch(run, rng)
            mark(run.used, batch)
            return batch
        size = int(run.sizes[t])  # random's size too: B but the epoch's last, which holds the rest
        shuffled = self._shuffle(run)
        if run.used is None and run.in_order == t and run.cursor + size <= len(shuffled):
            # only the shuffle's batches so far, in order: the next is its next slice
            batch = shuffled[run.cursor : run.cursor + size].copy()
            run.cursor += size
            run.in_order += 1
        else:
            self._ensure_used(run)
            batch = _shuffled_batch(run, size)
        mark(self._pending_marks(run), batch)
        self._wrote(batch)
        return batch

    def _new_run(self, epoch: int, world: World) -> AutoRun:
        run = super()._new_run(epoch, world)
        assert isinstance(run, AutoRun)  # run_type
        run.world = world
        return run

    def _shuffle(self, run: AutoRun) -> np.ndarray:
        """The run's shard in the epoch's shuffle, drawn the first time a random batch reads
        it (a run of pressured batches, as a resume in the select mode, never draws it).

        Loss rank sorts the shard by index; the random batches read it in the epoch's own
        shuffle, the order RandomSelector (DistributedSampler) batches it: while no batch of
        the epoch is pressured, they are random's batches. After the fallback, the examples
        it cut are left out."""
        if run.shuffled is None:
            assert run.world is not None  # _new_run's
            shuffled = self._rank_shards(run.epoch, run.world)[run.world.rank]
            run.shuffled = shuffled if self._kept is None else shuffled[self._kept[shuffled]]
        return run.shuffled

    # -- state ------------------------------------------------------------------------
    def _journaled(self) -> dict[str, np.ndarray]:
        return {**super()._journaled(), "raw_losses": self.raw_losses_}

    def _scores_state(self) -> dict[str, Any]:
        return {
            **super()._scores_state(),
            "mode": self._mode,
            "pressure_now": self._pressure_now,
            "threshold": self.threshold_,
            "fitted_below": self.fitted_below_,
            "started": self._started,
            "suspect_seen": self._suspect_seen,
        }

    def _load_scores(self, state: dict[str, Any]) -> None:
        super()._load_scores(state)
        raw, _, written = saved_parts(state["raw_losses"], np.float64)
        if raw.shape != (self.num_examples,) or np.isnan(raw).any() or np.isnan(written).any():
            raise ValueError(f"state has raw losses of shape {raw.shape} (or NaN), expected ({self.num_examples},)")
        if state["mode"] not in MODES:
            raise ValueError(f"state has mode {state['mode']!r}; expected one of {MODES}")
        self.raw_losses_ = saved_values(state["raw_losses"], self.raw_losses_, np.float64)
        self._rewrote_all()
        self._mode = state["mode"]
        self._pressure_now = float(state["pressure_now"])
        self.threshold_ = None if state["threshold"] is None else float(state["threshold"])
        self.fitted_below_ = None
        if self.threshold_ is not None:  # (older states have no cut: half the threshold, below it)
            below = state.get("fitted_below")
            below = _cut_of(self.threshold_) if below is None else float(below)
            self.fitted_below_ = min(below, self.threshold_)
        self._started = bool(state["started"])
        self._suspect_seen = int(state["suspect_seen"])
        self._recount()
        self._kept = self._kept_after_fallback() if self._mode == "noisy" else None

    def __repr__(self) -> str:
        return (
            f"AutoSelector(num_examples={self.num_examples}, batch_size={self.batch_size}, "
            f"pressure={self.pressure:g}, noisy_cut={self.noisy_cut:g}, mode={self._mode!r}, seed={self.seed})"
        )


__all__ = ["AutoSelector", "MODES"]
