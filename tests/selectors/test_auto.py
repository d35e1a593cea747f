"""AutoSelector: the pressure follows the misfit share; wrong labels latch random batches."""

from __future__ import annotations

import logging
import math
import warnings

import numpy as np
import pytest

import batchsel
from batchsel import AutoSelector, SelectionBatchSampler

N, B, C = 200, 10, 10
LABELS = np.arange(N) % C


def _epoch(sel: AutoSelector, losses_of, epoch: int = 0) -> np.ndarray:
    """Draw a whole epoch, feeding back ``losses_of(batch)`` after each batch; the examples drawn."""
    drawn = []
    for batch in sel.iter_batches(epoch):
        sel.observe(batch, losses=losses_of(batch))
        drawn.append(batch)
    return np.concatenate(drawn)


def _noisy(share: float):
    """Losses of a run that fits every example but a ``share`` of them (their loss stays 5 > ln 10)."""
    wrong = np.arange(N) < round(share * N)
    return lambda batch: np.where(wrong[batch], 5.0, 0.05)


@pytest.mark.parametrize("world_size", [1, 2])
def test_random_batches_are_random_selectors_batches(world_size):
    # while no batch of the epoch was pressured, AutoSelector's batches are the baseline's own
    for rank in range(world_size):
        sel = AutoSelector(N, B, labels=LABELS, seed=5)
        baseline = batchsel.RandomSelector(N, B, seed=5)
        for epoch in range(2):
            ours = list(sel.iter_batches(epoch, rank=rank, world_size=world_size))
            theirs = list(baseline.iter_batches(epoch, rank=rank, world_size=world_size))
            assert len(ours) == len(theirs) and all(np.array_equal(a, b) for a, b in zip(ours, theirs))


def test_warm_up_is_random_until_nearly_every_example_has_a_loss():
    sel = AutoSelector(N, B, labels=LABELS)
    batches = sel.iter_batches(0)
    for _ in range(int(0.9 * N / B)):
        batch = next(batches)
        sel.observe(batch, losses=np.full(len(batch), 0.01))
        assert (sel.mode_, sel.pressure_now_) == ("warm-up", 1.0)
    for batch in batches:
        sel.observe(batch, losses=np.full(len(batch), 0.01))
    assert sel.mode_ == "select" and sel.pressure_now_ == pytest.approx(100.0)


@pytest.mark.parametrize(("share", "expected"), [(0.0, 100.0), (0.10, 10.0), (0.20, None)])
def test_pressure_follows_the_misfit_share(share, expected):
    sel = AutoSelector(N, B, labels=LABELS)
    for epoch in range(3):  # wrong labels: a misfit share that stays over two passes
        _epoch(sel, _noisy(share), epoch)
    assert sel.misfit_share_ == pytest.approx(share, abs=0.01)
    if expected is None:  # >= noise_high with most examples fitted: wrong labels, random from now on
        assert (sel.mode_, sel.pressure_now_) == ("noisy", 1.0)
    else:
        assert sel.mode_ == "select" and sel.pressure_now_ == pytest.approx(expected, rel=0.1)


def test_the_fallback_to_random_batches_is_kept_when_the_wrong_labels_are_memorized(caplog):
    sel = AutoSelector(N, B, labels=LABELS)
    with caplog.at_level(logging.INFO, logger="batchsel.selectors.auto"):
        _epoch(sel, _noisy(0.25))
        _epoch(sel, _noisy(0.25), 1)
        assert sel.mode_ == "select" and sel.pressure_now_ == 1.0  # held for one pass only
        _epoch(sel, _noisy(0.25), 2)
    assert sel.mode_ == "noisy" and "wrong labels" in caplog.text
    _epoch(sel, lambda batch: np.full(len(batch), 0.01), epoch=3)  # memorized: the signal is gone
    assert (sel.mode_, sel.pressure_now_) == ("noisy", 1.0)


def test_a_model_that_fits_late_or_fast_is_not_taken_for_wrong_labels():
    sel = AutoSelector(N, B, labels=LABELS)
    _epoch(sel, lambda batch: np.full(len(batch), 3.0))  # nothing fitted yet: misfit 100 %
    assert (sel.mode_, sel.pressure_now_) == ("select", 1.0)
    # then it fits everything within an epoch: half fitted and the rest stale on the way
    for epoch in (1, 2):
        _epoch(sel, lambda batch: np.full(len(batch), 0.05), epoch)
    assert sel.mode_ == "select" and sel.pressure_now_ == pytest.approx(100.0)


def test_random_fallback_draws_the_suspected_wrong_labels_as_often_as_the_rest():
    sel = AutoSelector(N, B, labels=LABELS)
    for epoch in range(3):
        _epoch(sel, _noisy(0.25), epoch)
    counts = np.zeros(N)
    for epoch in range(3, 13):
        np.add.at(counts, _epoch(sel, _noisy(0.25), epoch), 1)
    wrong = np.arange(N) < 50
    assert counts[wrong].mean() / counts[~wrong].mean() == pytest.approx(1.0, abs=0.15)
    # plain loss-rank on the same feedback draws them about 4x as often
    lr = batchsel.LossRankSelector(N, B)
    lr_counts = np.zeros(N)
    for epoch in range(11):
        drawn = _epoch(lr, _noisy(0.25), epoch)
        if epoch:
            np.add.at(lr_counts, drawn, 1)
    assert lr_counts[wrong].mean() / lr_counts[~wrong].mean() > 2


def _fallen_back(sampler_kwargs=None):
    """A sampler whose AutoSelector has fallen back to random batches for good."""
    sampler = SelectionBatchSampler(AutoSelector(N, B, labels=LABELS), **(sampler_kwargs or {}))
    feedback = _noisy(0.25)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for batch in sampler:
            sampler.observe(batch, losses=feedback(np.asarray(batch)))
    assert sampler.selector.mode_ == "noisy"
    return sampler


def test_after_the_fallback_the_feedback_path_is_skipped_and_epochs_stay_a_shuffle(monkeypatch):
    """Nothing reads the losses once the run fell back for good: the sampler's observe
    returns before any conversion or exchange, and each epoch is a shuffle (every example
    once), drawn at once, as a planned epoch is handed out."""
    sampler = _fallen_back(dict(rank=0, world_size=1))
    assert not sampler.selector.wants_feedback()
    calls = []
    monkeypatch.setattr(sampler._feedback, "observe", lambda *a, **k: calls.append(a))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "observe() forgotten": the losses are not wanted
        for epoch in (3, 4):
            sampler.set_epoch(epoch)
            seen = []
            for batch in sampler:
                sampler.observe(batch, losses=np.full(len(batch), np.nan))  # not even checked: not read
                seen += batch
            assert sorted(seen) == list(range(N))
    assert calls == []
    # noisy_pressure above 1 still reads the losses (the misfit examples rank as learnt)
    assert AutoSelector(N, B, labels=LABELS, noisy_pressure=100).wants_feedback()


def test_after_the_fallback_a_mid_epoch_resume_is_exact():
    sampler = _fallen_back(dict(rank=0, world_size=1))
    sampler.set_epoch(3)
    it = iter(sampler)
    first = [next(it) for _ in range(4)]
    state = sampler.state_dict(batches_done=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not fed and not warned: the selector reads no losses now
        rest = list(it)
    resumed = SelectionBatchSampler(AutoSelector(N, B, labels=LABELS), rank=0, world_size=1)
    resumed.load_state_dict(state)
    resumed.set_epoch(3)
    assert list(resumed) == rest and len(first) + len(rest) == len(sampler)


def _graded_noisy(share: float):
    """As :func:`_noisy`, the misfit examples' losses graded (5 + i / N), so the cut's order is known."""
    wrong = np.arange(N) < round(share * N)
    return lambda batch: np.where(wrong[batch], 5.0 + batch / N, 0.05)


@pytest.mark.parametrize("world_size", [1, 2])
def test_noisy_cut_leaves_out_the_highest_misfit_losses_and_keeps_randoms_batch_count(world_size):
    """At the fallback, ``noisy_cut`` of the misfit examples (highest losses first) leave the
    random batches for good; every epoch keeps random's number and sizes of batches, the kept
    examples fill them (each once before any twice) and no batch holds an example twice."""
    sel = AutoSelector(N, B, labels=LABELS, noisy_cut=0.4)
    reference = AutoSelector(N, B, labels=LABELS)
    feedback = _graded_noisy(0.25)  # examples 0..49 misfit, 49 the highest loss
    for epoch in range(3):
        for rank in range(world_size):
            for batch in sel.iter_batches(epoch, rank=rank, world_size=world_size):
                sel.observe(batch, losses=feedback(batch))
    assert sel.mode_ == "noisy" and not sel.wants_feedback()
    assert sel.left_out_.tolist() == list(range(30, 50))  # 40 % of the 50 misfit examples
    for epoch in (3, 4):
        counts = np.zeros(N, int)
        for rank in range(world_size):
            batches = list(sel.iter_batches(epoch, rank=rank, world_size=world_size))
            sizes = [len(b) for b in reference.iter_batches(epoch, rank=rank, world_size=world_size)]
            assert [len(b) for b in batches] == sizes
            for b in batches:
                assert len(set(b.tolist())) == len(b)
                np.add.at(counts, b, 1)
        assert counts[30:50].sum() == 0
        kept = np.delete(counts, np.arange(30, 50))
        assert kept.min() >= 1 and kept.max() <= 2 and kept.sum() == N


def test_noisy_cut_resumes_exactly_and_zero_cuts_nothing():
    sel = AutoSelector(N, B, labels=LABELS, noisy_cut=0.5)
    for epoch in range(3):
        _epoch(sel, _graded_noisy(0.25), epoch)
    it = sel.iter_batches(3)
    head = [next(it) for _ in range(5)]
    state = sel.state_dict()
    rest = list(it)
    resumed = AutoSelector(N, B, labels=LABELS, noisy_cut=0.5)
    resumed.load_state_dict(state)
    assert resumed.left_out_.tolist() == sel.left_out_.tolist() == list(range(25, 50))
    again = list(resumed.iter_batches(3, start=5))
    assert [b.tolist() for b in again] == [b.tolist() for b in rest] and len(head) == 5
    plain = AutoSelector(N, B, labels=LABELS)
    for epoch in range(3):
        _epoch(plain, _graded_noisy(0.25), epoch)
    assert plain.mode_ == "noisy" and len(plain.left_out_) == 0
    with pytest.raises(ValueError, match="noisy_cut"):
        AutoSelector(N, B, noisy_cut=1.5)


def test_noisy_pressure_ranks_the_misfit_examples_as_learnt():
    sel = AutoSelector(N, B, labels=LABELS, noisy_pressure=100)
    for epoch in range(3):
        _epoch(sel, _noisy(0.25), epoch)
    assert sel.mode_ == "noisy" and sel.pressure_now_ == 100
    counts = np.zeros(N)
    for epoch in range(3, 8):
        np.add.at(counts, _epoch(sel, _noisy(0.25), epoch), 1)
    wrong = np.arange(N) < 50
    assert counts[wrong].mean() < 0.5 * counts[~wrong].mean()


def test_threshold_comes_from_labels_then_logits_then_the_first_batch():
    assert AutoSelector(N, B, labels=LABELS).threshold_ == pytest.approx(math.log(C))
    sel = AutoSelector(N, B)
    batch = next(sel.iter_batches(0))
    sel.observe(batch, losses=np.ones(len(batch)), logits=np.zeros((len(batch), 4)))
    assert sel.threshold_ == pytest.approx(math.log(4))
    sel = AutoSelector(N, B)
    batch = next(sel.iter_batches(0))
    sel.observe(batch, losses=np.linspace(1.0, 3.0, len(batch)))
    assert sel.threshold_ == pytest.approx(2.0)


def test_same_feedback_gives_the_same_batches_and_decisions():
    runs = []
    for _ in range(2):
        sel = AutoSelector(N, B, labels=LABELS, seed=3)
        drawn = [_epoch(sel, _noisy(share), epoch) for epoch, share in enumerate((0.3, 0.08, 0.0))]
        runs.append((np.concatenate(drawn), sel.mode_, sel.pressure_now_))
    assert np.array_equal(runs[0][0], runs[1][0]) and runs[0][1:] == runs[1][1:]


def test_state_dict_resumes_the_decision_and_the_batches():
    feedback = _noisy(0.08)
    sel = AutoSelector(N, B, labels=LABELS)
    _epoch(sel, feedback)
    batches = sel.iter_batches(1)
    for _ in range(5):
        batch = next(batches)
        sel.observe(batch, losses=feedback(batch))
    state = sel.state_dict()
    rest = [b for b in batches]
    resumed = AutoSelector(N, B, labels=LABELS)
    resumed.load_state_dict(state)
    assert (resumed.mode_, resumed.pressure_now_, resumed.misfit_share_) == (
        sel.mode_,
        sel.pressure_now_,
        sel.misfit_share_,
    )
    assert sel.mode_ == "select" and sel.misfit_share_ == pytest.approx(0.08, abs=0.01)
    again = list(resumed.iter_batches(1, start=5))
    assert len(again) == len(rest) and all(np.array_equal(a, b) for a, b in zip(again, rest))


@pytest.mark.filterwarnings("ignore:SelectionBatchSampler")  # the all-gather is played here, not by the sampler
def test_two_ranks_fed_the_same_feedback_decide_alike():
    ranks = [SelectionBatchSampler(AutoSelector(N, B, labels=LABELS), rank=r, world_size=2) for r in range(2)]
    feedback = _noisy(0.3)
    for epoch in range(4):
        for sampler in ranks:
            sampler.set_epoch(epoch)
        for pair in zip(*ranks):
            both = np.concatenate([np.asarray(b) for b in pair])  # what an all-gather hands every rank
            for sampler in ranks:
                sampler.selector.observe(both, losses=feedback(both))
    assert {(s.selector.mode_, s.selector.pressure_now_) for s in ranks} == {("noisy", 1.0)}


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"labels": np.zeros(N - 1, int)}, ValueError, "labels"),
        ({"noise_low": 0.2, "noise_high": 0.1}, ValueError, "noise_low"),
        ({"noise_high": 1.5}, ValueError, "noise_high"),
        ({"fitted_share": "half"}, ValueError, "fitted_share"),
        ({"noisy_pressure": 0.5}, ValueError, "noisy_pressure"),
        ({"pressure": 0.0}, ValueError, "pressure"),
    ],
)
def test_bad_settings_name_the_value(kwargs, error, match):
    with pytest.raises(error, match=match):
        AutoSelector(N, B, **kwargs)


def test_feedback_before_the_first_batch_or_nan_losses_is_an_error():
    sel = AutoSelector(N, B, labels=LABELS)
    with pytest.raises(ValueError, match="before the first batch"):
        sel.observe(np.arange(B), losses=np.ones(B))
    batch = next(sel.iter_batches(0))
    with pytest.raises(ValueError, match="NaN"):
        sel.observe(batch, losses=np.full(len(batch), np.nan))


def test_the_switch_to_random_batches_is_one_warning_at_the_default_level_and_a_property(caplog):
    # no caplog.at_level: what a run with logging left as it is shows (WARNING and above)
    sel = AutoSelector(N, B, labels=LABELS)
    _epoch(sel, _noisy(0.25))
    assert (sel.mode, sel.pressure_now) == ("select", 1.0) and sel.pressure == 100.0
    for epoch in range(1, 6):
        _epoch(sel, _noisy(0.25), epoch)
    assert (sel.mode, sel.pressure_now) == ("noisy", 1.0)  # while `pressure` still reads the most, 100
    assert (sel.mode_, sel.pressure_now_) == (sel.mode, sel.pressure_now)
    shown = [r for r in caplog.records if r.name == "batchsel.selectors.auto" and r.levelno >= logging.WARNING]
    assert len(shown) == 1 and "wrong labels" in shown[0].getMessage()
    assert "setLevel" in shown[0].getMessage()  # it says how to silence it
    with pytest.raises(AttributeError):
        sel.mode = "select"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        sel.pressure_now = 100.0  # type: ignore[misc]


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_unpressured_epochs_are_random_selectors_batches_with_its_short_last_batch(world_size, drop_last):
    n, b = 100, 32  # shards of 100, 50 or 34 (33 dropped) examples: not multiples of B
    sels = [AutoSelector(n, b, labels=np.arange(n) % C, seed=7, drop_last=drop_last) for _ in range(world_size)]
    baseline = batchsel.RandomSelector(n, b, seed=7, drop_last=drop_last)
    for epoch in range(3):  # the warm-up, then a model that fits nothing yet: pressure 1
        for rank, sel in enumerate(sels):
            ours = []
            for batch in sel.iter_batches(epoch, rank=rank, world_size=world_size):
                sel.observe(batch, losses=np.full(len(batch), 3.0))
                ours.append(batch)
            theirs = list(baseline.iter_batches(epoch, rank=rank, world_size=world_size))
            assert [len(x) for x in ours] == [len(x) for x in theirs]
            assert all(np.array_equal(x, y) for x, y in zip(ours, theirs))
            assert sel.pressure_now == 1.0
    assert len({s.num_batches(world_size) for s in sels} | {baseline.num_batches(world_size)}) == 1


def test_negative_losses_without_labels_count_as_misfit_or_fitted_never_both():
    # a loss that goes below 0 (a log-likelihood ratio, a shifted loss): the first batch's
    # mean is the threshold; half of a negative mean lies above it
    rng = np.random.default_rng(0)
    sel = AutoSelector(N, B)
    stuck = lambda batch: rng.uniform(-1.2, -0.8, len(batch))  # noqa: E731 - an untrained model's losses
    for epoch in range(5):
        for batch in sel.iter_batches(epoch):
            sel.observe(batch, losses=stuck(batch))
            assert sel.misfit_share_ + sel.fitted_share_ <= 1.0
    assert sel.threshold_ == pytest.approx(-1.0, abs=0.1) and sel.fitted_below_ < sel.threshold_
    assert (sel.mode, sel.pressure_now) == ("select", 1.0)  # nothing fitted: random batches, no latch
    for epoch in range(5, 7):  # then it fits every example
        _epoch(sel, lambda batch: np.full(len(batch), -3.0), epoch)
    assert (sel.mode, sel.pressure_now) == ("select", pytest.approx(100.0))
    resumed = AutoSelector(N, B)
    resumed.load_state_dict(sel.state_dict())
    assert (resumed.fitted_below_, resumed.fitted_share_) == (sel.fitted_below_, sel.fitted_share_)


def test_negative_losses_still_tell_wrong_labels():
    sel = AutoSelector(N, B)
    wrong = np.arange(N) < N // 4
    _epoch(sel, lambda batch: np.full(len(batch), -1.0))
    for epoch in range(1, 5):  # the wrong labels stay at the untrained loss, the rest is fitted
        _epoch(sel, lambda batch: np.where(wrong[batch], -0.9, -3.0), epoch)
    assert (sel.mode, sel.pressure_now) == ("noisy", 1.0)


def test_a_selector_pickled_before_the_read_only_properties_loads():
    import pickle

    sel = AutoSelector(100, batch_size=10, labels=np.arange(100) % 10, seed=0)
    old = dict(sel.__dict__)  # as an earlier version pickled it: mode_ / pressure_now_ plain attributes
    old["mode_"], old["pressure_now_"] = old.pop("_mode"), old.pop("_pressure_now")
    del old["fitted_below_"]
    restored = AutoSelector.__new__(AutoSelector)
    restored.__setstate__(old)
    assert (restored.mode, restored.pressure_now) == ("warm-up", 1.0)
    assert restored.fitted_below_ == pytest.approx(np.log(10) / 2)
    assert pickle.loads(pickle.dumps(sel)).mode == "warm-up"
