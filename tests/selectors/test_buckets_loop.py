"""BucketSelector in the training loop (issue #48): its batches through
``SelectionBatchSampler`` and a DataLoader with ``pad_collate``, over log-normal sequence
lengths.

Each epoch trains every example exactly once in ``len(sampler)`` batches and
``total_batches`` is exact; a run stopped mid-epoch resumes with exactly the batches still
to come (with DataLoader workers too); two ranks get as many batches, disjoint and covering,
with steps of near-equal padded size; DDP runs over gloo (torch.multiprocessing and mpiexec,
tests/mp_scripts/buckets_ddp.py); the Lightning callback and the Hugging Face Trainer train
``len(sampler)`` steps per epoch; and ``pad_collate`` pads each batch to its longest member.
"""

import functools
import io
import json
import logging
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from paths import MP_SCRIPTS
from test_integrations_mp import MPIEXEC, TIMEOUT, clean_env

# isort: split
import buckets_ddp as D  # in tests/mp_scripts
from common import run_command
from torch.utils.data import DataLoader

from batchsel import BucketSelector, RandomSelector, SelectionBatchSampler
from batchsel.loop.collate import pad_collate

JOB = MP_SCRIPTS / "buckets_ddp.py"
COSTS = D.make_costs()  # N = 600, median 55 tokens, up to 512


def make_sampler(rank=0, world_size=1, seed=D.SEED):
    return SelectionBatchSampler(BucketSelector(COSTS, batch_size=D.BATCH, seed=seed), rank=rank, world_size=world_size)


def epoch_batches(sampler, epoch, num_workers=0, collate=pad_collate):
    """The epoch's batches as the loop sees them: (indices, padded tokens, mask)."""
    sampler.set_epoch(epoch)
    loader = DataLoader(D.Tokens(COSTS), batch_sampler=sampler, collate_fn=collate, num_workers=num_workers)
    return [(idx.tolist(), tokens, mask) for tokens, mask, _, idx in loader]


def roundtrip(state):
    """A state through torch.save / torch.load, as a checkpoint holds it."""
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


# -- one process ------------------------------------------------------------------------------
def test_every_example_once_per_epoch_in_len_sampler_padded_batches():
    sampler = make_sampler()
    per_epoch, epochs, seen = len(sampler), 3, []
    for epoch in range(epochs):
        batches = epoch_batches(sampler, epoch)
        assert len(batches) == per_epoch == len(sampler)
        assert sorted(i for b, _, _ in batches for i in b) == list(range(D.N))
        for idx, tokens, mask in batches:
            lengths = COSTS[idx].astype(np.int64)
            # padded to the batch's longest member, not to a global maximum
            assert tokens.shape == (len(idx), lengths.max()) and mask.dtype == torch.bool
            assert mask.sum(1).tolist() == lengths.tolist() and torch.equal(mask, tokens != 0)
            assert tokens.numel() <= sampler.selector.max_cost_
        seen.append([b for b, _, _ in batches])
    assert sampler.total_batches(epochs) == epochs * per_epoch == sum(len(s) for s in seen)
    assert seen[0] != seen[1] != seen[2]  # each epoch its own batches
    # what the loader padded is the selector's padding, and far below random batches' of as many steps
    padded = sum(t.numel() for _, t, _ in batches)
    assert 1 - COSTS.sum() / padded == pytest.approx(sampler.selector.padding_share(epochs - 1))
    random = RandomSelector(D.N, -(-D.N // per_epoch), seed=0).plan(0, 1).batches(0)
    random_padded = sum(len(b) * COSTS[b].max() for b in random)
    assert padded < 0.6 * random_padded, (padded, random_padded)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_mid_epoch_yields_exactly_the_rest(num_workers):
    full = [b for b, _, _ in epoch_batches(make_sampler(), 1)]
    stop = 7
    run = make_sampler()
    run.set_epoch(1)
    loader = DataLoader(D.Tokens(COSTS), batch_sampler=run, collate_fn=pad_collate, num_workers=num_workers)
    it = iter(loader)
    first = [next(it)[3].tolist() for _ in range(stop)]
    # workers fetch batches ahead: the loop's count is what it finished
    state = roundtrip(run.state_dict(batches_done=stop))
    del it
    resumed = make_sampler()
    resumed.load_state_dict(state)
    rest = [b for b, _, _ in epoch_batches(resumed, 1, num_workers=num_workers)]
    assert first == full[:stop] and rest == full[stop:]
    assert [b for b, _, _ in epoch_batches(resumed, 2)] == [b for b, _, _ in epoch_batches(make_sampler(), 2)]


def test_two_ranks_get_as_many_disjoint_covering_batches_of_equal_cost_per_step():
    ranks = [make_sampler(rank=r, world_size=2) for r in (0, 1)]
    assert len(ranks[0]) == len(ranks[1]) == ranks[0].selector.num_batches(2)
    for epoch in (0, 1):
        batches = [epoch_batches(s, epoch) for s in ranks]
        assert [len(b) for b in batches] == [len(ranks[0])] * 2
        flat = [[i for b, _, _ in rank for i in b] for rank in batches]
        assert not set(flat[0]) & set(flat[1]) and sorted(flat[0] + flat[1]) == list(range(D.N))
        # a step's cost on each rank: the padded tokens its batch holds
        sizes = np.array([[t.numel() for _, t, _ in rank] for rank in batches], dtype=np.float64).T
        assert np.array_equal(sizes, ranks[0].selector.step_costs(epoch, 2))
        gap = np.median((sizes.max(1) - sizes.min(1)) / sizes.max(1))
        assert gap <= 0.10, f"epoch {epoch}: the median step's ranks differ by {gap:.1%}"
    assert ranks[0].total_batches(4) == 4 * len(ranks[0]) < make_sampler().total_batches(4)


# -- several processes ------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torch", "mpi"])
def test_ddp_loop_on_two_processes(launcher, tmp_path):
    """The job asserts on every rank: equal batch counts, disjoint and covering epochs,
    padded batches within the budget, OneCycleLR ended with the run, same model on both
    ranks, median step gap <= 10 %, and an exact resume from rank 0's all-ranks state."""
    out = tmp_path / "result"
    cmd = [sys.executable, str(JOB), str(out)]
    if launcher == "mpi":
        if not MPIEXEC.exists():
            pytest.skip("no mpiexec")
        cmd = [str(MPIEXEC), "--allow-run-as-root", "--oversubscribe", "-n", "2", *cmd]
    else:
        cmd += ["--torch", "2"]
    run_command(cmd, clean_env(), TIMEOUT)
    result = json.loads(Path(f"{out}.json").read_text())
    assert result["comm"] == {"torch": "TorchDistComm", "mpi": "MPIComm"}[launcher]
    per_rank = BucketSelector(COSTS, batch_size=D.BATCH, seed=D.SEED).num_batches(2)
    assert result["world_size"] == 2 and result["lengths"] == [per_rank] * D.EPOCHS
    assert result["median_gap"] <= 0.10


# -- frameworks -------------------------------------------------------------------------------
SMALL = D.make_costs(96, seed=1) // 8 + 1  # 96 short sequences: a quick framework run
SMALL_BATCH, FRAMEWORK_EPOCHS = 8, 2


def small_selector():
    return BucketSelector(SMALL, batch_size=SMALL_BATCH, seed=2)


def test_lightning_trains_len_sampler_steps_per_epoch(tmp_path):
    pytest.importorskip("lightning")
    import lightning.pytorch as pl
    from lightning_job import quiet

    from batchsel.integrations.lightning import BatchselCallback

    quiet()

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = D.Pool()
            self.sampler = SelectionBatchSampler(small_selector())
            self.seen = []

        def train_dataloader(self):
            return DataLoader(D.Tokens(SMALL), batch_sampler=self.sampler, collate_fn=pad_collate)

        def training_step(self, batch, batch_idx):
            tokens, mask, labels, idx = batch
            self.seen.append((self.current_epoch, idx.tolist()))
            return torch.nn.functional.cross_entropy(self.net(tokens, mask), labels)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model = Module()
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=FRAMEWORK_EPOCHS,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        default_root_dir=str(tmp_path),
        callbacks=[BatchselCallback()],
    )
    trainer.fit(model)
    sampler = model.sampler
    assert trainer.global_step == len(model.seen) == sampler.total_batches(FRAMEWORK_EPOCHS)
    plan = small_selector()
    for epoch in range(FRAMEWORK_EPOCHS):
        got = [b for e, b in model.seen if e == epoch]
        assert got == [b.tolist() for b in plan.plan(epoch, 1).batches(0)]  # set_epoch reached the sampler


class Classifier(torch.nn.Module):
    """The Trainer's model: ``input_ids`` and ``attention_mask`` in, loss and logits out."""

    def __init__(self):
        super().__init__()
        self.pool = D.Pool()

    def forward(self, input_ids, attention_mask, labels=None):
        logits = self.pool(input_ids, attention_mask.bool())
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.cross_entropy(logits, labels)
        return out


def test_hf_trainer_trains_len_sampler_steps_per_epoch(tmp_path, caplog):
    pytest.importorskip("transformers")
    import hf_job as H

    H.quiet()
    data = [{"input_ids": D.Tokens(SMALL)[i][0].tolist(), "labels": i % 2} for i in range(len(SMALL))]
    selector = small_selector()
    with caplog.at_level(logging.WARNING, logger="batchsel"):
        trainer = H.Recording(
            model=Classifier(),
            args=H.args(str(tmp_path), epochs=FRAMEWORK_EPOCHS),
            train_dataset=data,
            data_collator=pad_collate,
            selector=selector,
        )
        trainer.train()
    sampler = trainer.batchsel_sampler
    assert trainer.state.global_step == len(trainer.seen) == sampler.total_batches(FRAMEWORK_EPOCHS)
    per_epoch = len(sampler)
    for epoch in range(FRAMEWORK_EPOCHS):
        got = trainer.seen[epoch * per_epoch : (epoch + 1) * per_epoch]
        assert got == [b.tolist() for b in small_selector().plan(epoch, 1).batches(0)]
    # batches hold as many examples as the budget allows: no batch size to compare with
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [m for m in warned if "per_device_train_batch_size" in m], warned


# -- pad_collate --------------------------------------------------------------------------------
def test_pad_collate_pads_sequences_to_the_longest_and_masks_the_real_positions():
    padded, mask = pad_collate([torch.tensor([3, 4, 5]), np.array([6]), [7, 8]], pad_value=-1)
    assert padded.tolist() == [[3, 4, 5], [6, -1, -1], [7, 8, -1]] and padded.dtype == torch.int64
    assert mask.tolist() == [[True] * 3, [True, False, False], [True, True, False]]
    floats, _ = pad_collate([torch.tensor([0.5]), torch.tensor([1.5, 2.5])])
    assert floats.dtype == torch.float32 and floats.tolist() == [[0.5, 0.0], [1.5, 2.5]]
    empty, mask = pad_collate([[], [1]])
    assert empty.tolist() == [[0], [1]] and mask.tolist() == [[False], [True]]
    tokens, mask, labels, weights = pad_collate([(torch.tensor([1, 2]), 0, 0.5), (torch.tensor([3]), 1, 2.0)])
    assert tokens.tolist() == [[1, 2], [3, 0]] and mask.sum().item() == 3
    assert labels.tolist() == [0, 1] and weights.tolist() == [0.5, 2.0]


def test_pad_collate_dicts_pad_the_varying_fields_and_add_the_attention_mask():
    items = [
        {"input_ids": [1, 2, 3], "labels": [5, 6, 7], "features": [0.5, 0.5], "image": torch.zeros(2, 2), "y": 0},
        {"input_ids": [4], "labels": [8], "features": [1.0, 1.0], "image": torch.ones(2, 2), "y": 1},
    ]
    batch = pad_collate(items, pad_value={"labels": -100})
    assert list(batch) == ["input_ids", "labels", "features", "image", "y", "attention_mask"]
    assert batch["input_ids"].tolist() == [[1, 2, 3], [4, 0, 0]]
    assert batch["labels"].tolist() == [[5, 6, 7], [8, -100, -100]]  # ignored by the loss
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]] and batch["attention_mask"].dtype == torch.int64
    assert batch["features"].shape == (2, 2) and batch["image"].shape == (2, 2, 2) and batch["y"].tolist() == [0, 1]
    # a batch whose sequences are all of one length has the same keys (the mask follows input_ids)
    same = pad_collate(
        [{"features": [0.0, 0.0], "input_ids": [1, 2, 3]}, {"features": [1.0, 1.0], "input_ids": [4, 5, 6]}]
    )
    assert same["attention_mask"].tolist() == [[1, 1, 1]] * 2 and same["features"].shape == (2, 2)
    # the items' own attention mask is padded with 0, not replaced
    own = pad_collate([{"input_ids": [1, 2], "attention_mask": [1, 1]}, {"input_ids": [3], "attention_mask": [1]}])
    assert own["attention_mask"].tolist() == [[1, 1], [1, 0]]


def test_pad_collate_pickles_for_workers_with_its_settings_in_a_partial():
    collate = functools.partial(pad_collate, pad_value=-1)
    assert pickle.loads(pickle.dumps(collate))([[1], [2, 3]])[0].tolist() == [[1, -1], [2, 3]]
    batches = epoch_batches(make_sampler(), 0, num_workers=2, collate=collate)
    assert len(batches) == len(make_sampler())
    for idx, tokens, mask in batches:
        assert torch.equal(tokens == -1, ~mask) and mask.sum(1).tolist() == COSTS[idx].astype(int).tolist()


@pytest.mark.parametrize(
    "examples, error, match",
    [
        ([], ValueError, "empty batch"),
        ([torch.zeros(2, 3)], ValueError, r"item 0 has shape \(2, 3\).*1-D"),
        ([[1, 2], "ab"], TypeError, "item 1 is a str"),
        ([torch.tensor(3)], TypeError, "item 0 is a Tensor"),
        ("abc", TypeError, "examples must be a list"),
        ([(torch.tensor([1]), 0), (torch.tensor([2]),)], TypeError, "item 1 is tuple"),
        ([{"y": 1}, {"y": 2}], ValueError, "no field of the items"),
        ([{"x": [1]}, {"z": [1]}], ValueError, r"item 1 has the keys \['z'\]"),
        ([{"a": [1, 2], "b": [1]}, {"a": [1], "b": [1, 2]}], ValueError, "vary in length .* differently"),
        ([np.array([1, 2], dtype=np.uint8)], ValueError, "pad_value=-1 cannot pad"),
    ],
)
def test_pad_collate_refuses_bad_input_naming_it(examples, error, match):
    with pytest.raises(error, match=match):
        pad_collate(examples, pad_value=-1)


def test_pad_collate_refuses_bad_pad_values():
    with pytest.raises(TypeError, match="pad_value must be a number, got 'x'"):
        pad_collate([[1]], pad_value="x")
    with pytest.raises(ValueError, match=r"pad_value=0.5 cannot pad the items, whose values are torch.int64"):
        pad_collate([[1], [2, 3]], pad_value=0.5)
    with pytest.raises(ValueError, match=r"pad_value names fields \['label'\]"):
        pad_collate([{"input_ids": [1]}], pad_value={"label": -100})
