"""InfoBatch dynamic pruning: the pruned share is the one asked for, the kept examples'
weights keep every example's expected weight at 1, epoch lengths and the run's total are
known before the run (a OneCycleLR sized from them ends with the run), bad input is
refused, and the sampler resumes mid-epoch exactly, in one process and on 2 MPI ranks."""
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from batchsel import InfoBatchSelector
from batchsel.integrations import SelectionBatchSampler

from test_integrations_mp import MPIEXEC, TIMEOUT, clean_env  # puts tests/mp_scripts on sys.path

from common import run_command  # noqa: E402

JOB = Path(__file__).resolve().parent / "mp_scripts" / "pruning_job.py"


def observed(n=101, batch=8, epochs=8, seed=0, **kw):
    sel = InfoBatchSelector(n, batch, epochs=epochs, seed=seed, **kw)
    sel.observe(np.arange(n), losses=np.random.default_rng(seed).random(n))
    return sel


def test_pruned_epochs_skip_the_share_asked_for_from_the_well_learnt_half():
    sel = observed(prune_ratio=0.4)
    plan = sel.plan(epoch=3)
    kept = plan.indices()
    weights = np.concatenate(plan.weights(0))
    learnt = np.argsort(sel.losses_, kind="stable")[:50]  # floor(101 / 2) lowest losses
    dropped = np.setdiff1d(np.arange(101), kept)
    assert len(dropped) == round(0.4 * 50) and np.isin(dropped, learnt).all()
    assert len(np.unique(kept)) == len(kept) == sel.epoch_size(3) == 81
    assert sel.pruned_share_[3] == pytest.approx(20 / 101)
    # kept well-learnt examples carry C / (C - P), the others 1
    w_of = dict(zip(kept.tolist(), weights.tolist()))
    assert np.allclose([w_of[i] for i in np.intersect1d(kept, learnt)], 50 / 30)
    assert {w_of[i] for i in np.setdiff1d(kept, learnt)} == {1.0}


def test_every_example_keeps_an_expected_weight_of_one():
    total = np.zeros(60)
    for seed in range(400):
        sel = observed(60, 6, seed=seed)
        sel.losses_ = np.arange(60.0)  # the same ranking for every seed; the drop is the seed's
        plan = sel.plan(epoch=1)
        np.add.at(total, plan.indices(), np.concatenate(plan.weights(0)))
    assert np.abs(total / 400 - 1).max() < 0.15  # binomial noise over 400 draws
    assert total[30:].tolist() == [400.0] * 30  # the worse-learnt half is never skipped


def test_first_and_annealing_epochs_train_on_everything_and_lengths_are_known_ahead():
    sel = InfoBatchSelector(100, 10, epochs=8, seed=0)
    assert [sel.prunes(e) for e in range(8)] == [False] + [True] * 6 + [False]  # 7 = ceil(0.875 * 8)
    lengths = [sel.num_batches(epoch=e) for e in range(8)]
    assert lengths == [10, 8, 8, 8, 8, 8, 8, 10] and sel.total_batches() == sum(lengths)
    # the lengths do not depend on the losses: known before the run
    sel.observe(np.arange(100), losses=np.random.default_rng(1).random(100))
    assert [len(sel.plan(e).batches(0)) for e in range(8)] == lengths
    assert sel.num_batches(world_size=3, epoch=1) == -(-25 // 10)
    assert InfoBatchSelector(100, 10, epochs=8, prune_ratio=0).total_batches() == 80


def test_the_plan_of_an_epoch_is_fixed_when_first_asked_for():
    sel = observed()
    first = sel.plan(epoch=2).indices()
    sel.observe(np.arange(101), losses=np.linspace(1, 0, 101))  # feedback during epoch 2
    assert np.array_equal(sel.plan(epoch=2).indices(), first)
    assert not np.array_equal(np.sort(sel.plan(epoch=3).indices()), np.sort(first))  # epoch 3 uses it


def test_bad_input_is_refused_with_the_value():
    for ratio in (1.0, 1.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match="prune_ratio"):
            InfoBatchSelector(10, 2, epochs=3, prune_ratio=ratio)
    with pytest.raises(ValueError, match="epochs"):
        InfoBatchSelector(10, 2, epochs=0)
    sel = InfoBatchSelector(10, 2, epochs=3)
    with pytest.raises(ValueError, match="NaN"):
        sel.observe([0, 1], losses=[0.5, float("nan")])
    with pytest.raises(ValueError, match="3 rows but 2 indices"):
        sel.observe([0, 1], losses=[0.5, 0.1, 0.2])
    with pytest.raises(ValueError, match="epoch 3 is past this run's epochs=3"):
        sel.plan(epoch=3)
    with pytest.raises(ValueError, match="epochs=4 disagrees"):
        sel.total_batches(epochs=4)
    sampler = SelectionBatchSampler(sel, rank=0, world_size=1, weighted=True)
    with pytest.raises(ValueError, match="epochs=2 disagrees with the run of epochs=3"):
        sampler.total_batches(epochs=2)
    with pytest.raises(ValueError, match="missing keys"):
        sel.load_state_dict({"losses": np.zeros(10)})


def run(sampler, epochs, stop=None, losses_of=None):
    """A loop over the sampler's weighted batches; returns (batches, weights) per step and
    the sampler's state after ``stop`` steps."""
    seen = []
    for epoch in range(sampler.epoch, epochs):
        sampler.set_epoch(epoch)
        for batch in sampler:
            idx = np.array([i for i, _ in batch])
            seen.append((idx, np.array([w for _, w in batch])))
            sampler.observe(idx, losses=losses_of(idx))
            if len(seen) == stop:
                buf = io.BytesIO()
                torch.save(sampler.state_dict(), buf)
                return seen, buf.getvalue()
    return seen, None


def test_sampler_lengths_total_and_exact_mid_epoch_resume():
    n, b, epochs = 203, 16, 6
    losses_of = lambda idx: np.sin(idx * 1.3) ** 2  # noqa: E731  (the same feedback in every run)
    make = lambda: SelectionBatchSampler(InfoBatchSelector(n, b, epochs=epochs, seed=3),  # noqa: E731
                                         rank=0, world_size=1, weighted=True)
    full, _ = run(make(), epochs, losses_of=losses_of)
    sampler = make()
    lengths = []
    for e in range(epochs):
        sampler.set_epoch(e)
        lengths.append(len(sampler))
    assert len(full) == sum(lengths) == sampler.total_batches(epochs) == 13 + 10 * 5
    first, state = run(make(), epochs, stop=13 + 10 + 4, losses_of=losses_of)  # mid-epoch 2
    resumed = make()
    resumed.load_state_dict(torch.load(io.BytesIO(state), weights_only=True))
    rest, _ = run(resumed, epochs, losses_of=losses_of)
    assert len(first) + len(rest) == len(full)
    for (i, w), (j, v) in zip(first + rest, full):
        assert np.array_equal(i, j) and np.array_equal(w, v)
    assert resumed.selector.pruned_share_[5] == pytest.approx(round(0.5 * 101) / n)


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [1, 2])
def test_ddp_loop_with_one_cycle_schedule(ranks, tmp_path):
    """The job asserts on every rank: equal batch counts, disjoint ranks covering each
    epoch's kept examples, OneCycleLR stepped exactly to its end, same model, exact resume."""
    out = tmp_path / "result"
    if ranks == 1:
        cmd = [sys.executable, str(JOB), str(out)]
    else:
        if not MPIEXEC.exists():
            pytest.skip("no mpiexec")
        cmd = [str(MPIEXEC), "--allow-run-as-root", "--oversubscribe", "-n", str(ranks), sys.executable, str(JOB),
               str(out)]
    run_command(cmd, clean_env(), TIMEOUT)
    result = json.loads(Path(f"{out}.json").read_text())
    assert result["world_size"] == ranks
    assert result["steps"] == sum(result["lengths"]) and result["lengths"][1] < result["lengths"][0]
    assert result["pruned_share"]["0"] == 0 and result["pruned_share"]["2"] == pytest.approx(round(0.5 * (1797 // 2)) / 1797)
    assert result["accuracy"] > 0.9
