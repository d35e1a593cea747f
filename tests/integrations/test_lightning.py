"""BatchselCallback in Lightning: one process here, two DDP processes (gloo, CPU) through
tests/mp_scripts/lightning_job.py. Each test reproduces a case of issue #17 that used to
train silently wrong batches."""

import os
import sys

import numpy as np
import pytest
import torch
from paths import MP_SCRIPTS, REPO
from torch.utils.data import DataLoader

pytest.importorskip("lightning")

import lightning_job as J  # noqa: E402
from frameworks import run_example, run_ranks  # noqa: E402
from test_integrations_mp import clean_env  # noqa: E402

from batchsel import RandomSelector, SelectionBatchSampler, StepBalancedSelector  # noqa: E402
from batchsel.integrations import WeightedDataset  # noqa: E402
from batchsel.integrations.lightning import BatchselCallback  # noqa: E402

J.quiet()


def by_epoch(seen, epoch):
    return [b for e, b in seen if e == epoch]


class TinyLate(J.Tiny):
    """The sampler built in train_dataloader (found by the callback in the DataLoader)."""

    def train_dataloader(self):
        self.sampler = SelectionBatchSampler(J.make_selector(self.kind))
        return DataLoader(J.data(), batch_sampler=self.sampler, num_workers=self.workers)

    def __init__(self, kind="random", workers=0):
        super().__init__(kind, workers)
        self.kind = kind
        del self.sampler  # nothing for the callback to find at setup


def test_one_process_epochs_differ_and_follow_the_plan(tmp_path):
    """Lightning calls batch_sampler.sampler.set_epoch only: every epoch used to replay epoch 0."""
    model = J.Tiny("random")
    J.trainer(str(tmp_path), epochs=2).fit(model)
    plan = RandomSelector(J.N, J.BATCH, seed=3)
    for epoch in (0, 1):
        got = by_epoch(model.seen, epoch)
        assert got == [b.tolist() for b in plan.plan(epoch, 1).batches(0)]
        assert sorted(i for b in got for i in b) == list(range(J.N))
    assert by_epoch(model.seen, 0) != by_epoch(model.seen, 1)


def test_feedback_reaches_the_selector_without_an_index_column(tmp_path):
    model = J.Tiny("loss_rank")
    J.trainer(str(tmp_path), epochs=1).fit(model)
    losses = model.sampler.selector.losses_
    trained = {i for _, b in model.seen for i in b}
    assert np.isfinite(losses[sorted(trained)]).all()
    assert not np.isfinite(np.delete(losses, sorted(trained))).any()


@pytest.mark.parametrize("module", [J.Tiny, TinyLate], ids=["sampler-in-init", "sampler-in-train_dataloader"])
def test_resume_mid_epoch_with_two_workers_is_exact(tmp_path, module):
    """Workers fetch ahead: the checkpoint used to record the fetched batches (4 skipped)."""
    first = module("loss_rank", workers=2)
    J.trainer(str(tmp_path), every=1).fit(first)
    per_epoch = len(first.sampler)
    step = per_epoch + 3  # epoch 1, three batches done
    resumed = module("loss_rank", workers=2)
    J.trainer(str(tmp_path)).fit(resumed, ckpt_path=str(tmp_path / "ckpt" / f"step={step}.ckpt"))
    assert resumed.seen == first.seen[step:]
    assert len(first.seen) == 2 * per_epoch


class TinyWeighted(J.Tiny):
    """Batches of ``(x, y, index, weight)`` from a weighted sampler (``self.sampler``)."""

    def train_dataloader(self):
        return DataLoader(WeightedDataset(J.data()), batch_sampler=self.sampler)

    def losses_and_weights(self, batch):
        """The batch's per-example losses and weights; its indices recorded."""
        x, y, idx, w = batch
        self.seen.append((self.current_epoch, idx.tolist()))
        return torch.nn.functional.cross_entropy(self.layer(x), y, reduction="none"), w


class TinyStepBalanced(TinyWeighted):
    """Two weighted micro-batches per optimizer step, trained on selector.weighted_loss."""

    def __init__(self):
        super().__init__()
        self.selector = StepBalancedSelector(RandomSelector(J.N, 8, seed=3), np.arange(J.N) % 7 + 1, accumulation=2)
        self.sampler = SelectionBatchSampler(self.selector, weighted=True)

    def training_step(self, batch, batch_idx):
        return self.selector.weighted_loss(*self.losses_and_weights(batch))


def test_step_balanced_is_one_argument_and_its_steps_are_the_plans(tmp_path):
    """The callback sets accumulate_grad_batches from the selector and undoes Lightning's
    division of each micro-batch's loss by it: the weights after one epoch are a
    hand-written loop's over the plan (Lightning's division halved every step's gradient)."""
    module = TinyStepBalanced()
    trainer = J.trainer(str(tmp_path), epochs=1)
    trainer.fit(module)
    assert trainer.accumulate_grad_batches == 2
    plan = module.selector.plan(0, 1)
    assert [b for _, b in module.seen] == [b.tolist() for b in plan.batches(0)]
    torch.manual_seed(0)
    layer = torch.nn.Linear(J.DIM, J.CLASSES)
    opt = torch.optim.SGD(layer.parameters(), lr=0.5)
    x, y, _ = J.data().tensors
    batches, weights = plan.batches(0), plan.weights(0)
    for t in range(0, len(batches), 2):
        opt.zero_grad()
        for k in (t, t + 1):
            ib = torch.as_tensor(batches[k])
            losses = torch.nn.functional.cross_entropy(layer(x[ib]), y[ib], reduction="none")
            module.selector.weighted_loss(losses, torch.as_tensor(weights[k])).backward()
        opt.step()
    assert torch.allclose(module.layer.weight, layer.weight, atol=1e-6)
    with pytest.raises(ValueError, match="accumulate_grad_batches=2"):
        J.trainer(str(tmp_path), epochs=1, accumulate_grad_batches=3).fit(TinyStepBalanced())


class TinyStepBalancedLate(TinyStepBalanced):
    """The sampler built in train_dataloader: the callback meets it after the optimizers."""

    def __init__(self):
        super().__init__()
        del self.sampler

    def train_dataloader(self):
        self.sampler = SelectionBatchSampler(self.selector, weighted=True)
        return super().train_dataloader()


def test_step_balanced_sampler_built_late_needs_the_accumulation_named(tmp_path):
    """Found only when training starts, after configure_optimizers sized a schedule from
    accumulate_grad_batches=1: refused, naming both ways; given it, the run trains."""
    with pytest.raises(ValueError, match=r"accumulate_grad_batches=2.*BatchselCallback\(sampler\)"):
        J.trainer(str(tmp_path), epochs=1).fit(TinyStepBalancedLate())
    module = TinyStepBalancedLate()
    J.trainer(str(tmp_path), epochs=1, accumulate_grad_batches=2).fit(module)
    assert [b for _, b in module.seen] == [b.tolist() for b in module.selector.plan(0, 1).batches(0)]


def test_callback_checks_its_arguments():
    with pytest.raises(TypeError, match="SelectionBatchSampler"):
        BatchselCallback(RandomSelector(10, 2))
    cb = BatchselCallback()
    assert cb.state_dict() == {}
    cb.load_state_dict({})  # a checkpoint written without the callback: nothing to restore


@pytest.fixture(scope="module")
def ddp2(tmp_path_factory):
    out = tmp_path_factory.mktemp("lightning_ddp") / "result"
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(MP_SCRIPTS), env.get("PYTHONPATH", "")])
    # Lightning starts rank 1 by running the script again
    return run_ranks([sys.executable, str(MP_SCRIPTS / "lightning_job.py"), str(out)], out, env)


@pytest.mark.slow
def test_ddp_sampler_built_in_init_gives_disjoint_covering_batches(ddp2):
    """Lightning sets no RANK before fit: a sampler built in __init__ used to settle on
    world size 1, and both ranks trained identical batches."""
    assert [r["sampler_world"] for r in ddp2] == [2, 2] and ddp2[0]["len"] == ddp2[1]["len"]
    per_rank = ddp2[0]["len"]
    for epoch in (0, 1):
        batches = [by_epoch([tuple(s) for s in r["seen"]], epoch) for r in ddp2]
        assert len(batches[0]) == len(batches[1]) == per_rank
        flat = [[i for b in rank_batches for i in b] for rank_batches in batches]
        assert not set(flat[0]) & set(flat[1])
        assert sorted(flat[0] + flat[1]) == list(range(J.N))
        plan = RandomSelector(J.N, J.BATCH, seed=3).plan(epoch, 2)
        assert batches == [[b.tolist() for b in plan.batches(r)] for r in (0, 1)]


@pytest.mark.slow
def test_ddp_resume_restores_every_ranks_state(ddp2):
    """A 2-rank checkpoint used to keep only rank 0's sampler state."""
    for r in ddp2:
        step = r["resume_step"]
        assert [list(s) for s in r["resumed"]] == [list(s) for s in r["seen"][step:]], f"rank {r['rank']}"


def _epoch_1_covered_once(before, after):
    """Epoch 1's examples over the steps before the checkpoint and the resumed ones."""
    seen = sorted([i for b in before for i in b] + [i for b in after for i in b])
    assert seen == list(range(J.N)), seen


@pytest.mark.slow
def test_a_2_process_checkpoint_resumes_on_one_process(ddp2, tmp_path):
    """Elastic resume: the DDP run's mid-epoch checkpoint, loaded by one process, finishes
    the epoch with the examples the two ranks had not trained, once."""
    per_rank = ddp2[0]["len"]
    step = per_rank + 2  # epoch 1, two steps done on each rank
    resumed = J.Tiny("random")
    J.trainer(str(tmp_path)).fit(resumed, ckpt_path=os.path.join(ddp2[0]["checkpoints"], f"step={step}.ckpt"))
    before = [b for r in ddp2 for b in by_epoch([tuple(s) for s in r["seen"]], 1)[:2]]
    after = by_epoch([tuple(s) for s in resumed.seen], 1)
    _epoch_1_covered_once(before, after)
    assert len(after) == -(-(J.N - 2 * 2 * J.BATCH) // J.BATCH)  # the steps left, on one rank


@pytest.mark.slow
def test_a_one_process_checkpoint_resumes_on_2_processes(tmp_path):
    first = J.Tiny("random")
    J.trainer(str(tmp_path), every=1).fit(first)
    per_epoch = len(first.sampler)
    step = per_epoch + 3  # epoch 1, three steps done
    out = tmp_path / "elastic"
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(MP_SCRIPTS), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, str(MP_SCRIPTS / "lightning_job.py"), str(out), str(tmp_path / "ckpt" / f"step={step}.ckpt")]
    ranks = run_ranks(cmd, out, env)
    before = by_epoch(first.seen, 1)[:3]
    after = [b for r in ranks for b in by_epoch([tuple(s) for s in r["resumed"]], 1)]
    _epoch_1_covered_once(before, after)
    steps = [len(by_epoch([tuple(s) for s in r["resumed"]], 1)) for r in ranks]
    assert steps[0] == steps[1] == -(-(J.N - 3 * J.BATCH) // (2 * J.BATCH))  # the same steps on each rank


@pytest.mark.slow
def test_ddp_refuses_use_distributed_sampler(ddp2):
    for r in ddp2:
        assert r["refused"] and "use_distributed_sampler=False" in r["refused"]


def test_example_runs(tmp_path):
    accuracy = run_example(
        REPO / "examples" / "train_lightning.py", "--epochs", "1", "--batch-size", "128", cwd=tmp_path
    )
    assert accuracy > 0.3  # 15 steps; chance is 0.1


class TinyPruned(TinyWeighted):
    """InfoBatch batches (weighted, epochs of different lengths) with a OneCycleLR sized
    from ``sampler.total_batches``, stepped every optimizer step."""

    EPOCHS = 4

    def __init__(self):
        super().__init__("random")
        from batchsel import InfoBatchSelector

        self.sampler = SelectionBatchSampler(InfoBatchSelector(J.N, J.BATCH, epochs=self.EPOCHS, seed=3), weighted=True)
        self.lrs: list[float] = []

    def training_step(self, batch, batch_idx):
        losses, w = self.losses_and_weights(batch)
        self.lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])
        return {"loss": (losses * w).mean(), "losses": losses.detach()}

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.5)
        total = self.sampler.total_batches(self.EPOCHS)
        schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.5, total_steps=total)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


def test_pruned_epochs_with_one_cycle_schedule(tmp_path):
    """Lightning trains every epoch's len(sampler) batches and the schedule ends with the run."""
    model = TinyPruned()
    J.trainer(str(tmp_path), epochs=TinyPruned.EPOCHS).fit(model)
    lengths = [len(by_epoch(model.seen, e)) for e in range(TinyPruned.EPOCHS)]
    selector = model.sampler.selector
    assert lengths == [selector.num_batches(epoch=e) for e in range(TinyPruned.EPOCHS)]
    assert lengths[1] < lengths[0] and sum(lengths) == model.sampler.total_batches(TinyPruned.EPOCHS)
    assert model.lrs[-1] == pytest.approx(0.5 / 25 / 1e4)  # OneCycleLR's final rate, at the last step
    assert np.isfinite(selector.losses_).all()  # the feedback reached the selector
    assert 0 < selector.pruned_share_[1] < 0.5
