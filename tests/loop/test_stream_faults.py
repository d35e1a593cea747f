"""StreamBatches' faults: a loader that collates its batches again, a first-epoch resume
without the stream's own state, tensor ids and costs (a dataset in torch format), the
independence of prune mode's skips, read errors that name where they came from, 2-D
losses and states missing keys; and the streaming guide's first loop."""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest
import torch
from paths import REPO as ROOT
from test_stream import PER_SHARD, SHARDS, all_examples, make, shard_examples, train
from torch.utils.data import DataLoader

from batchsel import StreamBatches
from batchsel.loop.stream.pools import LearntSkipping, id_uniform

NOT_BATCHED = r"DataLoader\(stream, batch_size=None\)"
OWN_STATE = "load the stream's own state"


# -- a loader that collates the batches again ---------------------------------------------
@pytest.mark.parametrize("ids", ["int", "str"])
def test_a_loader_without_batch_size_none_is_named_at_observe(ids):
    def examples():
        for i in range(32):
            yield {"id": i if ids == "int" else f"k{i}", "x": float(i)}

    stream = StreamBatches(examples, 8, buffer_size=16, mode="loss-rank")
    stream.set_epoch(0)
    batch = next(iter(DataLoader(stream)))  # batch_size=1: a batch of one StreamBatch
    with pytest.raises(ValueError, match=NOT_BATCHED):
        stream.observe(batch, losses=torch.zeros(8))
    with pytest.raises(ValueError, match=NOT_BATCHED):
        stream.observe(batch.ids, losses=torch.zeros(8))
    with pytest.raises(ValueError, match=NOT_BATCHED):
        stream.observe(next(iter(DataLoader(stream, batch_size=2, collate_fn=list))), losses=torch.zeros(16))
    assert len(stream.state_dict()["losses"]) == 0  # nothing recorded under the wrong keys
    good = next(iter(DataLoader(stream, batch_size=None)))
    stream.observe(good, losses=torch.zeros(8))


# -- a first-epoch resume without the stream's own state ----------------------------------
@pytest.mark.parametrize("mode", ["loss-rank", "prune"])
def test_first_epoch_resume_without_the_streams_state_is_an_error(mode):
    run = make(mode)
    head = train(run, 0, stop=3)
    assert head
    fresh = make(mode)
    fresh.load_state_dict({**run.state_dict(), "losses": None})  # a worker's state: no losses
    fresh.set_epoch(0)
    with pytest.raises(ValueError, match=OWN_STATE):
        next(iter(fresh))
    whole = make(mode)
    whole.load_state_dict(pickle.loads(pickle.dumps(run.state_dict())))
    assert head + train(whole, 0) == train(make(mode), 0)  # with the stream's state: exact


def test_first_epoch_resume_under_stateful_dataloader_needs_the_streams_state():
    from torchdata.stateful_dataloader import StatefulDataLoader

    def epoch_zero(stream, stop=None, loader_state=None):
        loader = StatefulDataLoader(stream, batch_size=None, num_workers=2)
        if loader_state is not None:
            loader.load_state_dict(loader_state)
        return train(stream, 0, loader, stop=stop), (loader.state_dict(), stream.state_dict())

    run = make("loss-rank")
    head, saved = epoch_zero(run, stop=5)
    loader_state, stream_state = pickle.loads(pickle.dumps(saved))
    with pytest.raises(ValueError, match=OWN_STATE):
        epoch_zero(make("loss-rank"), loader_state=loader_state)  # the loader's state only
    resumed = make("loss-rank")
    resumed.load_state_dict(stream_state)
    tail, _ = epoch_zero(resumed, loader_state=loader_state)
    assert len(resumed.state_dict()["losses"]) == SHARDS * PER_SHARD  # the head's losses kept
    assert sorted(i for b in head + tail for i in b) == list(range(SHARDS * PER_SHARD))


def test_random_mode_resumes_from_the_loaders_state_alone():
    run = make()
    head = train(run, 0, stop=3)
    fresh = make()
    fresh.load_state_dict({**run.state_dict(), "losses": None})
    assert head + train(fresh, 0) == train(make(), 0)


# -- tensor ids and costs (a dataset in torch format) -------------------------------------
def tensor_examples():
    for example in all_examples():
        yield {**example, "id": torch.tensor(example["id"]), "n": torch.tensor(len(example["tokens"]))}


def test_tensor_ids_are_ints_and_feed_loss_rank():
    stream = make("loss-rank", source=tensor_examples, pressure=100.0)
    stream.set_epoch(0)
    first = [i for b in stream for i in b.ids]
    assert {type(i) for i in first} == {int} and sorted(first) == list(range(400))
    stream.observe(torch.arange(400), losses=np.where(np.arange(400) % 2 == 0, 5.0, 0.1))
    stream.set_epoch(1)
    second = np.array([i for b in stream for i in b.ids])
    assert len(second) == 400 and np.mean(second % 2 == 0) > 0.8  # the random rate would be 0.5


def test_tensor_ids_feed_prune_and_repeats_are_found():
    stream = make("prune", source=tensor_examples, epochs=4)
    train(stream, 0)
    stream.observe([torch.tensor(i) for i in range(400)], losses=np.where(np.arange(400) < 200, 0.1, 5.0))
    stream.set_epoch(1)
    assert 270 <= sum(len(b.ids) for b in stream) <= 330  # about half the learnt half skipped

    def repeated():
        yield from ({"id": np.int64(i % 30), "x": 0.0} for i in range(40))

    with pytest.raises(ValueError, match=r"id 0 appears twice in one buffer"):
        list(StreamBatches(repeated, 8, buffer_size=40))


def test_tensor_costs_group_as_numbers():
    def batches(cost):
        stream = make(source=tensor_examples, buffer_size=80, cost=cost)
        stream.set_epoch(0)
        return [b.ids for b in stream]

    assert batches("n") == batches(lambda e: len(e["tokens"]))
    numpy_costs = make(source=lambda: ({**e, "n": np.int64(3)} for e in all_examples()), cost="n")
    assert len(train(numpy_costs, 0)) == 50
    with pytest.raises(TypeError, match="cost 'n' must be a sequence or a number, got a NoneType"):
        train(make(source=lambda: ({**e, "n": None} for e in all_examples()), cost="n"), 0)


# -- prune mode's skips -------------------------------------------------------------------
def skip_sets(ids, seeds=10, epochs=5, ratio=0.5):
    return np.array(
        [
            [LearntSkipping(1.0, ratio, seed, epoch).weight(i, 0.1) == 0.0 for i in ids]
            for seed in range(seeds)
            for epoch in range(1, epochs + 1)
        ]
    )


@pytest.mark.parametrize("ids", [list(range(1000, 1400)), [f"s{i // 50}-{i:04d}" for i in range(400)]])
def test_prune_skips_are_independent_across_epochs_and_seeds(ids):
    sets = skip_sets(ids)  # 50 (seed, epoch) rows
    assert len({row.tobytes() for row in sets}) == 50  # (a CRC gave 2 complementary sets)
    assert np.all(np.abs(sets.mean(axis=1) - 0.5) < 0.1)
    correlations = np.corrcoef(sets)[np.triu_indices(50, 1)]
    assert abs(correlations.mean()) < 0.02 and np.abs(correlations).max() < 0.3
    next_epoch = [np.corrcoef(sets[r], sets[r + 1])[0, 1] for r in range(50) if (r + 1) % 5]
    assert abs(np.mean(next_epoch)) < 0.05
    assert abs(skip_sets(ids, 2, 2, ratio=0.2).mean() - 0.2) < 0.04


def test_id_uniform_is_fixed_by_id_seed_and_epoch():
    assert id_uniform(7, 3, 2) == id_uniform(7, 3, 2)
    rule = LearntSkipping(1.0, 0.5, 3, 2)
    assert all((rule.weight(i, 0.1) == 0.0) == (id_uniform(i, 3, 2) < 0.5) for i in range(100))
    values = [id_uniform(7, seed, epoch) for seed in range(20) for epoch in range(20)]
    assert len(set(values)) == 400 and all(0.0 <= v < 1.0 for v in values)
    assert 0.0 <= id_uniform("x", 10**100, 0) < 1.0  # a seed of any size


# -- read errors --------------------------------------------------------------------------
def test_open_shard_errors_name_the_shard_and_reader():
    def missing(shard):
        raise FileNotFoundError(f"no such file: {shard}.tar")

    with pytest.raises(FileNotFoundError, match=r"open_shard\(\d\) for reader 0 of 1: no such file") as caught:
        train(make(source=list(range(SHARDS)), open_shard=missing), 0)
    assert isinstance(caught.value.__cause__, FileNotFoundError)
    with pytest.raises(TypeError, match=r"open_shard\(\d\) returned None for reader 0 of 1"):
        train(make(source=list(range(SHARDS)), open_shard=lambda shard: None), 0)
    with pytest.raises(TypeError, match=r"open_shard\(\d\) returned a float"):
        train(make(source=list(range(SHARDS)), open_shard=lambda shard: 1.5), 0)


def truncated(shard):
    for example in shard_examples(shard):
        if example["id"] % PER_SHARD == 17:
            raise OSError("unexpected end of tar")
        yield example


def test_a_shard_failing_mid_read_names_where():
    with pytest.raises(OSError, match=r"reading shard \d #17 \(reader 0 of 1\): unexpected end of tar"):
        train(make(source=list(range(SHARDS)), open_shard=truncated), 0)
    loader = DataLoader(make(source=list(range(SHARDS)), open_shard=truncated), batch_size=None, num_workers=1)
    with pytest.raises(OSError, match=r"reading shard \d #17 \(reader 0 of 1\)"):
        next(iter(loader))


def test_a_generator_failing_mid_read_names_the_example():
    def examples():
        yield from ({"id": i, "x": 0.0} for i in range(30))
        raise ValueError("bad record")

    with pytest.raises(ValueError, match="bad record") as caught:
        list(StreamBatches(examples, 8, buffer_size=16))
    if hasattr(caught.value, "add_note"):
        assert caught.value.__notes__ == ["while reading example 30 (reader 0 of 1)"]


# -- losses and states --------------------------------------------------------------------
def test_two_dimensional_losses_are_refused():
    stream = make()
    with pytest.raises(ValueError, match=r"losses must be 1-D .*got shape \(2, 2\)"):
        stream.observe([1, 2, 3, 4], losses=torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"got shape \(4, 1\)"):
        stream.observe([1, 2, 3, 4], losses=np.ones((4, 1)))
    assert len(stream.state_dict()["losses"]) == 0


def test_a_state_missing_keys_lists_them():
    with pytest.raises(ValueError, match=r"missing keys \['config', 'epoch', 'losses', 'position'\]"):
        make().load_state_dict({"version": 1})
    state = make().state_dict()
    with pytest.raises(ValueError, match=r"missing keys \['position'\]"):
        make().load_state_dict({k: v for k, v in state.items() if k != "position"})
    with pytest.raises(ValueError, match="version 0"):
        make().load_state_dict({**state, "version": 0})
    with pytest.raises(ValueError, match="got a list"):
        make().load_state_dict([])


# -- the guide ----------------------------------------------------------------------------
def test_the_guides_first_loop_is_the_recommended_one():
    page = (ROOT / "docs" / "guide" / "streaming.md").read_text()
    first = re.findall(r"```python\n(.*?)```", page, flags=re.S)[0]
    assert 'mode="random"' in first and "cost=" in first and "loss-rank" not in first
    assert "batch_size=None" in first


def test_tuple_ids_are_named_as_such_not_as_a_collated_batch():
    def rows():
        for i in range(16):
            yield {"id": ("doc", i), "x": float(i)}

    stream = StreamBatches(rows, batch_size=4, buffer_size=8, seed=0, mode="loss-rank")
    batch = next(iter(DataLoader(stream, batch_size=None)))  # the loader makes the tuples lists
    with pytest.raises(TypeError, match="tuple ids into lists.*one int or string id"):
        stream.observe(batch, losses=torch.ones(len(batch.ids)))
