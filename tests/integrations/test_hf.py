"""BatchselTrainer (Hugging Face Trainer): one process here, two processes under torchrun
(gloo, CPU) through tests/mp_scripts/hf_job.py. Each test reproduces a case of issue #17
that used to train silently wrong batches."""

import os

import numpy as np
import pytest
from paths import MP_SCRIPTS, REPO

pytest.importorskip("transformers")

import hf_job as H  # noqa: E402
from common import TinyOnline  # noqa: E402
from frameworks import run_example, run_ranks, torchrun  # noqa: E402
from test_integrations_mp import clean_env  # noqa: E402

from batchsel import RandomSelector  # noqa: E402
from batchsel.integrations.hf import STATE_FILE, BatchselTrainer, per_example_feedback  # noqa: E402
from batchsel.selectors import LossRankSelector  # noqa: E402

H.quiet()


def test_one_process_epochs_follow_the_plan_and_cover_the_data(tmp_path):
    """A plain DataLoader never got set_epoch; the index column was dropped by
    remove_unused_columns (KeyError); len(loader) must be len(sampler)."""
    trainer = H.Recording(
        model=H.TinyModel(),
        args=H.args(str(tmp_path)),
        train_dataset=H.data(),
        selector=RandomSelector(H.N, H.BATCH, seed=3),
    )
    trainer.train()
    per_epoch = len(trainer.batchsel_sampler)
    assert trainer.lengths == [(per_epoch, per_epoch)] and len(trainer.seen) == 2 * per_epoch
    plan = RandomSelector(H.N, H.BATCH, seed=3)
    for epoch in (0, 1):
        got = trainer.seen[epoch * per_epoch : (epoch + 1) * per_epoch]
        assert got == [b.tolist() for b in plan.plan(epoch, 1).batches(0)]
        assert sorted(i for b in got for i in b) == list(range(H.N))


class DrawTimes(TinyOnline):
    """Records how many examples had been observed when each batch was drawn."""

    def iter_batches(self, epoch, rank=0, world_size=1, start=0):
        for batch in super().iter_batches(epoch, rank, world_size, start):
            self.drawn_after.append(int(self.observed.sum()))
            yield batch


def test_evaluation_losses_are_not_fed_back_and_nothing_is_drawn_ahead(tmp_path):
    """Losses from compute_loss used to arrive from evaluation too; accelerate's look-ahead
    drew batch t+1 before batch t was observed."""
    selector = DrawTimes(H.N, H.BATCH, seed=3)
    selector.drawn_after = []
    trainer = H.Recording(
        model=H.TinyModel(),
        args=H.args(str(tmp_path), eval_strategy="steps", eval_steps=2),
        train_dataset=H.data(),
        eval_dataset=H.data(),
        selector=selector,
    )
    trainer.train()
    trainer.evaluate()
    trained = np.zeros(H.N, dtype=np.int64)
    for batch in trainer.seen:
        np.add.at(trained, batch, 1)
    assert np.array_equal(selector.observed, trained)  # training steps only, each once
    assert selector.drawn_after == [t * H.BATCH for t in range(len(trainer.seen))]


def test_resume_mid_epoch_skips_once_and_is_exact(tmp_path):
    """The sampler's state and the Trainer's own skip used to skip the finished batches twice."""
    make = lambda: LossRankSelector(H.N, H.BATCH, seed=3, pressure=20.0)  # noqa: E731
    first, resumed = H.run_and_resume(str(tmp_path), make, step=13)
    assert (tmp_path / "checkpoint-13" / STATE_FILE).exists()
    assert resumed.seen == first.seen[13:]
    assert np.isfinite(first.batchsel_selector.losses_).sum() > H.N // 2  # feedback arrived


def test_a_checkpoint_of_2_processes_finishes_its_epoch_on_one(tmp_path):
    """Elastic resume: the epoch the two ranks left is finished here with the examples they
    had not trained, once; the run (and its linear schedule) ends after the checkpoint's
    steps, those left of that epoch here and the next epoch."""
    import torch

    from batchsel import SelectionBatchSampler

    make = lambda: RandomSelector(H.N, H.BATCH, seed=3)  # noqa: E731
    kw = {"lr_scheduler_type": "linear", "learning_rate": 0.1}
    first = H.Recording(
        model=H.TinyModel(), args=H.args(str(tmp_path), save_steps=3, **kw), train_dataset=H.data(), selector=make()
    )
    first.train()
    samplers = [SelectionBatchSampler(make(), rank=r, world_size=2) for r in range(2)]
    before = []
    for s in samplers:  # the 2-process run: one batch of epoch 0 done on each rank
        s.set_epoch(0)
        before.append(next(iter(s)))
    path = tmp_path / "checkpoint-3" / STATE_FILE  # the checkpoint's global step: 3
    torch.save({"version": 1, "world_size": 2, "ranks": [s.state_dict(batches_done=1) for s in samplers]}, path)
    resumed = H.Recording(
        model=H.TinyModel(), args=H.args(str(tmp_path / "resumed"), **kw), train_dataset=H.data(), selector=make()
    )
    resumed.train(resume_from_checkpoint=str(tmp_path / "checkpoint-3"))
    left = (H.N - 2 * H.BATCH) // H.BATCH
    epoch_0 = [i for b in before for i in b] + [i for b in resumed.seen[:left] for i in b]
    assert sorted(epoch_0) == list(range(H.N))
    assert resumed.seen[left:] == [b.tolist() for b in make().plan(1, 1).batches(0)]
    total = 3 + left + H.N // H.BATCH
    assert resumed.state.global_step == total and len(resumed.seen) == total - 3
    # the linear schedule sized to the steps the run took, reaching 0 at its last (the first
    # step after the checkpoint trains at the rate its optimizer saved, the Trainer's way)
    assert np.allclose(resumed.lrs[1:], [0.1 * (total - t) / total for t in range(4, total)])
    assert resumed.lr_scheduler.get_last_lr()[0] == 0.0


def test_pruned_epochs_with_the_trainers_schedule(tmp_path):
    """The Trainer sized its run as epochs x the first epoch's length (40 steps for 34):
    the learning rate never reached the end of its schedule, and resuming counted epochs wrong."""
    first, resumed = H.run_pruned(str(tmp_path), step=13)
    selector = first.batchsel_selector
    lengths = [selector.num_batches(1, e) for e in range(4)]
    assert lengths == [10, 8, 8, 10]  # InfoBatch's rule: epoch e prunes while e + 1 <= 0.875 * 4
    total = sum(lengths)
    assert len(first.seen) == first.state.global_step == total == first.batchsel_sampler.total_batches(4)
    assert np.allclose(first.lrs, [0.1 * (total - t) / total for t in range(total)])
    assert first.lr_scheduler.get_last_lr()[0] == 0.0
    assert resumed.seen == first.seen[13:] and np.allclose(resumed.lrs, first.lrs[13:])
    starts = np.cumsum([0, *lengths])
    for e, pruned in enumerate((False, True, True, False)):
        epoch = [i for b in first.seen[starts[e] : starts[e + 1]] for i in b]
        assert sorted(epoch) == sorted(set(epoch)) and len(epoch) == (30 if pruned else H.N)
    assert {w for b in first.weights for w in b} == {1.0, 2.0}  # kept low-loss examples count twice


def test_pruned_run_refuses_another_epoch_count(tmp_path):
    trainer = H.Recording(
        model=H.TinyModel(),
        args=H.args(str(tmp_path), epochs=3),
        train_dataset=H.data(),
        selector=H.infobatch(epochs=4),
    )
    with pytest.raises(ValueError, match="num_train_epochs=3 disagrees with the epochs=4"):
        trainer.train()
    trainer = H.Recording(
        model=H.TinyModel(),
        args=H.args(str(tmp_path), max_steps=37),
        train_dataset=H.data(),
        selector=H.infobatch(epochs=4),
    )
    with pytest.raises(ValueError, match="max_steps=37 is past the 36 steps"):
        trainer.train()


def _step_balanced(accumulation=2):
    from batchsel import StepBalancedSelector

    return StepBalancedSelector(RandomSelector(H.N, 8, seed=3), np.arange(H.N) % 7 + 1, accumulation=accumulation)


def test_step_balanced_is_one_argument_and_its_steps_are_the_plans(tmp_path):
    """The selector's micro-batches per step set gradient_accumulation_steps (left at 1),
    and the Trainer does not divide weighted_loss's sum by it: the weights after one epoch
    are a hand-written loop's over the plan (it divided, halving every step's gradient)."""
    import torch

    args = H.args(str(tmp_path), epochs=1, max_grad_norm=0)
    trainer = H.Recording(model=H.TinyModel(), args=args, train_dataset=H.data(), selector=_step_balanced())
    trainer.train()
    assert trainer.args.gradient_accumulation_steps == 2 and args.gradient_accumulation_steps == 1
    selector = _step_balanced()
    plan = selector.plan(0, 1)
    assert trainer.seen == [b.tolist() for b in plan.batches(0)]
    model = H.TinyModel()
    opt = torch.optim.SGD(model.parameters(), lr=args.learning_rate)
    rows = H.data()
    x, y = torch.stack([r["x"] for r in rows]), torch.tensor([r["labels"] for r in rows])
    batches, weights = plan.batches(0), plan.weights(0)
    for t in range(0, len(batches), 2):
        opt.zero_grad()
        for k in (t, t + 1):
            ib = torch.as_tensor(batches[k])
            losses = torch.nn.functional.cross_entropy(model(x[ib])["logits"], y[ib], reduction="none")
            selector.weighted_loss(losses, torch.as_tensor(weights[k])).backward()
        opt.step()
    assert torch.allclose(trainer.model.layer.weight, model.layer.weight, atol=1e-6)


def test_step_balanced_accumulation_reaches_positional_arguments(tmp_path):
    """BatchselTrainer(model, args, ...): the TrainingArguments given by position are the
    ones replaced (by a copy: the caller's stay as they were)."""
    args = H.args(str(tmp_path), epochs=1)
    trainer = BatchselTrainer(H.TinyModel(), args, train_dataset=H.data(), selector=_step_balanced(3))
    assert trainer.args.gradient_accumulation_steps == 3 and args.gradient_accumulation_steps == 1
    assert trainer.loss_is_scaled_for_ga is True


def test_step_balanced_refuses_another_accumulation(tmp_path):
    with pytest.raises(ValueError, match="gradient_accumulation_steps=2"):
        BatchselTrainer(
            model=H.TinyModel(),
            args=H.args(str(tmp_path), gradient_accumulation_steps=3),
            train_dataset=H.data(),
            selector=_step_balanced(),
        )


def test_bad_arguments():
    with pytest.raises(TypeError, match="Selector"):
        BatchselTrainer(model=H.TinyModel(), selector=[1, 2])
    with pytest.raises(ValueError, match="feedback="):
        per_example_feedback({"logits": None}, None)


@pytest.fixture(scope="module")
def torchrun2(tmp_path_factory):
    out = tmp_path_factory.mktemp("hf_torchrun") / "result"
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(MP_SCRIPTS), env.get("PYTHONPATH", "")])
    cmd = torchrun(str(MP_SCRIPTS / "hf_job.py"), str(out))
    return run_ranks(cmd, out, env)


@pytest.mark.slow
def test_torchrun_every_example_once_per_epoch(torchrun2):
    """accelerate's BatchSamplerShard used to give each rank every second batch of its own
    shard: len(loader) 4 against len(sampler) 7, 116 of 200 examples per epoch."""
    per_rank = RandomSelector(H.N, H.BATCH).num_batches(2)
    for r in torchrun2:
        assert r["world"] == 2 and r["lengths"] == [[per_rank, per_rank]] and len(r["seen"]) == 2 * per_rank
    plan = RandomSelector(H.N, H.BATCH, seed=3)
    for epoch in (0, 1):
        got = [r["seen"][epoch * per_rank : (epoch + 1) * per_rank] for r in torchrun2]
        assert got == [[b.tolist() for b in plan.plan(epoch, 2).batches(rank)] for rank in (0, 1)]
        assert sorted(i for rank in got for b in rank for i in b) == list(range(H.N))
    assert torchrun2[0]["params"] == torchrun2[1]["params"]  # DDP kept the ranks in step


@pytest.mark.slow
def test_torchrun_resume_is_exact_on_every_rank(torchrun2):
    for r in torchrun2:
        step = r["resume_step"]
        assert r["resumed"] == r["seen"][step:], f"rank {r['rank']}"
        assert r["online_resumed"] == r["online"][step:], f"rank {r['rank']} (loss-rank)"
    # feedback was all-gathered: both ranks' selectors know the losses of both ranks' batches
    assert torchrun2[0]["observed"] == torchrun2[1]["observed"] > H.N // 2


@pytest.mark.slow
def test_a_checkpoint_of_2_processes_finishes_on_one_process(torchrun2, tmp_path):
    step, per_rank = 6, H.N // (2 * H.BATCH)  # epoch 1, one batch done on each rank
    checkpoint = os.path.join(torchrun2[0]["root"], "random", f"checkpoint-{step}")
    kw = {"lr_scheduler_type": "linear", "learning_rate": 0.1}
    resumed = H.Recording(
        model=H.TinyModel(),
        args=H.args(str(tmp_path), **kw),
        train_dataset=H.data(),
        selector=H.RandomSelector(H.N, H.BATCH, seed=3),
    )
    resumed.train(resume_from_checkpoint=checkpoint)
    before = [i for r in torchrun2 for b in r["seen"][per_rank : per_rank + 1] for i in b]
    after = [i for b in resumed.seen for i in b]
    assert sorted(before + after) == list(range(H.N))  # epoch 1: every example once, old and new ranks
    assert len(resumed.seen) == (H.N - 2 * H.BATCH) // H.BATCH
    assert resumed.state.global_step == step + len(resumed.seen)
    assert resumed.lr_scheduler.get_last_lr()[0] == 0.0  # the schedule sized to the steps taken


@pytest.mark.slow
def test_a_one_process_checkpoint_finishes_on_2_processes(tmp_path):
    step = 13  # epoch 1, three batches done
    first = H.Recording(
        model=H.TinyModel(),
        args=H.args(str(tmp_path), save_steps=step, lr_scheduler_type="linear", learning_rate=0.1),
        train_dataset=H.data(),
        selector=H.RandomSelector(H.N, H.BATCH, seed=3),
    )
    first.train()
    out = tmp_path / "elastic" / "result"
    out.parent.mkdir()
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(MP_SCRIPTS), env.get("PYTHONPATH", "")])
    cmd = torchrun(str(MP_SCRIPTS / "hf_job.py"), str(out), "--resume", str(tmp_path / f"checkpoint-{step}"))
    ranks = run_ranks(cmd, out, env)
    per_epoch = H.N // H.BATCH
    before = [i for b in first.seen[per_epoch:step] for i in b]
    after = [i for r in ranks for b in r["resumed"] for i in b]
    assert sorted(before + after) == list(range(H.N))  # epoch 1: every example once
    steps = [len(r["resumed"]) for r in ranks]
    assert steps[0] == steps[1] == -(-(H.N - 3 * H.BATCH) // (2 * H.BATCH))  # the same steps on each rank
    for r in ranks:
        assert r["global_step"] == step + steps[0] and r["final_lr"] == 0.0


@pytest.mark.slow
def test_torchrun_pruned_epochs_with_the_trainers_schedule(torchrun2):
    """2 ranks: epochs of 5, 4, 4, 5 batches per rank; both ranks take 18 steps, the rate
    ends at 0, each epoch's examples are disjoint across ranks, and the resume is exact."""
    lengths = [H.infobatch().num_batches(2, e) for e in range(4)]
    assert lengths == [5, 4, 4, 5]
    total = sum(lengths)
    for r in torchrun2:
        assert len(r["pruned"]) == r["pruned_steps"] == total and r["pruned_final_lr"] == 0.0
        assert np.allclose(r["pruned_lrs"], [0.1 * (total - t) / total for t in range(total)])
        assert r["pruned_resumed"] == r["pruned"][7:] and np.allclose(r["pruned_resumed_lrs"], r["pruned_lrs"][7:])
    starts = np.cumsum([0, *lengths])
    for e, kept in enumerate((H.N, 30, 30, H.N)):
        epoch = [i for r in torchrun2 for b in r["pruned"][starts[e] : starts[e + 1]] for i in b]
        assert len(epoch) == kept and len(set(epoch)) == kept  # every kept example once over the ranks
    assert torchrun2[0]["pruned_params"] == torchrun2[1]["pruned_params"]


def test_example_runs(tmp_path):
    accuracy = run_example(REPO / "examples" / "train_hf.py", "--epochs", "1", "--batch-size", "128", cwd=tmp_path)
    assert accuracy > 0.3  # 15 steps; chance is 0.1
