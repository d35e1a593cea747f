"""StreamBatches: batches from a bounded buffer of a stream (generator, shards, a Hugging
Face IterableDataset, WebDataset tar shards), split across ranks and workers, exact resume
(plain and under torchdata's StatefulDataLoader with workers), and its errors."""

from __future__ import annotations

import pickle
import sys
import warnings
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from common import free_port, run_command
from paths import MP_SCRIPTS
from test_integrations_mp import clean_env
from torch.utils.data import DataLoader

from batchsel import LossRankSelector, RandomSelector, SelectionBatchSampler, StreamBatch, StreamBatches, pad_collate
from batchsel.loop.stream.feedback import LossTable
from batchsel.loop.stream.pools import LearntSkipping, group_by_cost, pool_order, rank_probabilities

SHARDS, PER_SHARD = 8, 50


def shard_examples(shard: int):
    """50 examples per shard, ids ``shard * 50 + i``, token lists of 1-40 tokens."""
    for i in range(shard * PER_SHARD, (shard + 1) * PER_SHARD):
        yield {"id": i, "x": float(i), "tokens": list(range(1 + zlib.crc32(str(i).encode()) % 40))}


def all_examples():
    for shard in range(SHARDS):
        yield from shard_examples(shard)


def ids_and_x(examples):  # picklable collate: the ids' x values as a tensor
    return torch.tensor([e["x"] for e in examples])


def loss_of(ids, epoch):
    """A loss that changes with the epoch (so a resume that used this epoch's losses differs)."""
    return np.array([(zlib.crc32(f"{i}:{epoch}".encode()) % 1000) / 100.0 for i in ids])


def make(mode="random", source=None, **options):
    options.setdefault("buffer_size", 40)
    options.setdefault("collate_fn", ids_and_x)
    if mode == "prune":
        options.setdefault("epochs", 8)
    if source is None:
        source, options["open_shard"] = list(range(SHARDS)), shard_examples
    return StreamBatches(source, 8, mode=mode, **options)


def train(stream, epoch, loader=None, stop=None, offset=0):
    """Iterate one epoch (observing epoch-dependent losses); the ids of each batch."""
    stream.set_epoch(epoch)
    out = []
    for batch in loader if loader is not None else stream:
        out.append(tuple(batch.ids))
        stream.observe(batch, losses=loss_of(batch.ids, epoch))
        if stop is not None and len(out) == stop:
            break
    return out


# -- the pool's parts ---------------------------------------------------------------------
def test_rank_probabilities_order_and_ratio():
    losses = np.array([0.5, 3.0, np.nan, 1.0])
    p = rank_probabilities(losses, 100.0, np.random.default_rng(0))
    assert np.argsort(-p).tolist() == [2, 1, 3, 0]
    # the first rank pressure times the last's, the loss-rank selector's rule (it was 100 ** (3 / 4))
    assert p.max() / p.min() == pytest.approx(100.0)
    assert np.allclose(np.sort(p)[::-1], LossRankSelector(4, 1, pressure=100.0).probabilities(4))
    assert np.allclose(rank_probabilities(losses, 1.0, np.random.default_rng(0)), 0.25)


def test_pool_order_is_a_shuffle_or_rank_draws():
    rng = np.random.default_rng(0)
    assert sorted(pool_order(50, None, 100.0, rng).tolist()) == list(range(50))
    draws = pool_order(1000, np.arange(1000.0), 1000.0, rng)
    assert len(draws) == 1000 and np.mean(draws >= 500) > 0.75  # high losses drawn more


def test_group_by_cost_cuts_sorted_runs():
    costs = np.array([5.0, 1.0, 9.0, 2.0, 8.0, 3.0])
    batches = group_by_cost(np.arange(6), costs, 2, np.random.default_rng(0))
    assert sorted(sorted(costs[b].tolist()) for b in batches) == [[1, 2], [3, 5], [8, 9]]
    plain = group_by_cost(np.arange(6), None, 4, np.random.default_rng(0))
    assert [b.tolist() for b in plain] == [[0, 1, 2, 3], [4, 5]]


def test_learnt_skipping_matches_infobatch_rule():
    rule = LearntSkipping(threshold=1.0, prune_ratio=0.5, seed=3, epoch=2)
    learnt = [rule.weight(i, 0.2) for i in range(4000)]
    assert set(learnt) == {0.0, 2.0} and np.mean(np.array(learnt) == 0.0) == pytest.approx(0.5, abs=0.03)
    assert rule.weight(7, 1.5) == 1.0 and rule.weight(7, float("nan")) == 1.0
    assert LearntSkipping(None, 0.5, 3, 2).weight(7, 0.1) == 1.0


def test_loss_table_keeps_the_loss_before_each_epoch():
    table = LossTable()
    table.record([1, 2], [3.0, 4.0], epoch=0)
    table.record([1], [1.0], epoch=1)
    table.record([1], [0.5], epoch=1)
    assert table.before(1, 1) == 3.0 and table.before(1, 2) == 0.5 and table.before(2, 1) == 4.0
    assert table.known_before(1) == 2 and table.mean_before(1) == pytest.approx(3.5)
    assert np.isnan(table.before(3, 5)) and LossTable().mean_before(1) is None


# -- one epoch ----------------------------------------------------------------------------
@pytest.mark.parametrize("source", ["shards", "generator", "list"])
def test_random_epoch_yields_every_example_once(source):
    def stream():
        if source == "shards":
            return make()
        return make(source=all_examples if source == "generator" else list(all_examples()))

    batches = train(stream(), 0)
    ids = [i for b in batches for i in b]
    assert sorted(ids) == list(range(SHARDS * PER_SHARD))
    assert all(len(b) == 8 for b in batches)
    assert ids != sorted(ids)  # shuffled within pools
    assert train(stream(), 0) == batches  # deterministic per (seed, epoch)
    assert train(stream(), 1) != batches


def test_batches_carry_collated_data_ids_and_weights():
    stream = StreamBatches(lambda: ({"id": i, "x": float(i)} for i in range(40)), 8, buffer_size=16)
    stream.set_epoch(0)
    batch = next(iter(DataLoader(stream, batch_size=None)))
    assert isinstance(batch, StreamBatch)
    assert batch.data["x"].tolist() == [float(i) for i in batch.ids]
    assert batch.weights.dtype == torch.float32 and batch.weights.tolist() == [1.0] * 8
    assert (batch.epoch, batch.reader, batch.number) == (0, 0, 0)


def test_loss_rank_draws_high_loss_examples_more():
    stream = make("loss-rank", pressure=100.0, source=all_examples)
    stream.set_epoch(0)
    first = [i for b in stream for i in b.ids]
    assert sorted(first) == list(range(400))  # nothing observed: a shuffle
    stream.observe(list(range(400)), losses=np.where(np.arange(400) % 2 == 0, 5.0, 0.1))
    stream.set_epoch(1)
    second = [i for b in stream for i in b.ids]
    assert len(second) == 400 and np.mean(np.array(second) % 2 == 0) > 0.8


def test_prune_skips_learnt_examples_weighted_and_anneals():
    stream = make("prune", prune_ratio=0.5, epochs=4, source=all_examples)
    train(stream, 0)
    stream.observe(list(range(400)), losses=np.where(np.arange(400) < 200, 0.1, 5.0))  # the first half learnt
    stream.set_epoch(1)
    batches = list(stream)
    ids = np.array([i for b in batches for i in b.ids])
    weights = np.concatenate([b.weights.numpy() for b in batches])
    assert len(ids) == len(set(ids.tolist()))
    learnt = ids < 200
    assert np.all(ids[~learnt] >= 200) and np.sum(~learnt) == 200  # every unlearnt one kept, weight 1
    assert 70 <= np.sum(learnt) <= 130 and np.all(weights[learnt] == 2.0) and np.all(weights[~learnt] == 1.0)
    stream.set_epoch(3)  # 3 + 1 > 0.875 * 4: the annealing epoch trains on everything
    assert sum(len(b.ids) for b in stream) == 400


def test_cost_grouping_cuts_padding():
    def padded(stream):
        stream.set_epoch(0)
        batches = list(stream)
        lengths = {e["id"]: len(e["tokens"]) for e in all_examples()}
        assert sorted(i for b in batches for i in b.ids) == list(range(400))
        return sum(max(lengths[i] for i in b.ids) * len(b.ids) for b in batches)

    plain = padded(make(source=all_examples, buffer_size=80))
    grouped = padded(make(source=all_examples, buffer_size=80, cost="tokens"))
    by_function = padded(make(source=all_examples, buffer_size=80, cost=lambda e: len(e["tokens"])))
    assert grouped == by_function and grouped < 0.75 * plain


@pytest.mark.parametrize("cost", [None, "tokens"])
def test_drop_last_drops_the_short_batch_wherever_it_is(cost):
    stream = make(source=lambda: (e for e in all_examples() if e["id"] < 396), cost=cost, drop_last=True)
    batches = train(stream, 0)
    assert len(batches) == 49 and all(len(b) == 8 for b in batches)


def test_pad_collate_batches_from_a_stream():
    stream = make(collate_fn=lambda ex: pad_collate([{"input_ids": e["tokens"]} for e in ex]), cost="tokens")
    stream.set_epoch(0)
    batch = next(iter(stream))
    assert batch.data["input_ids"].shape[0] == 8 and batch.data["attention_mask"].shape == batch.data["input_ids"].shape


# -- ranks and workers --------------------------------------------------------------------
@pytest.mark.parametrize("source", ["shards", "generator"])
def test_two_ranks_are_disjoint_and_equal_in_length(source):
    ranks = []
    for rank in range(2):
        src = None if source == "shards" else all_examples
        stream = make(source=src, rank=rank, world_size=2, batches_per_epoch=24)
        assert len(stream) == 24
        ranks.append(train(stream, 0))
    assert [len(r) for r in ranks] == [24, 24]
    first, second = ({i for b in r for i in b} for r in ranks)
    assert not first & second and len(first) == len(second) == 24 * 8


def test_workers_read_their_own_shards():
    stream = make()
    loader = DataLoader(stream, batch_size=None, num_workers=2)
    batches = train(stream, 0, loader)
    ids = [i for b in batches for i in b]
    assert sorted(ids) == list(range(400))
    readers = {i // PER_SHARD % 2 for b in batches[::2] for i in b}
    assert len(readers) == 1  # a worker reads every other shard


# -- resume -------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["random", "loss-rank", "prune"])
def test_resume_mid_epoch_is_exact(mode):
    options = {"cost": "tokens"} if mode == "random" else {}
    full = make(mode, **options)
    train(full, 0)
    expected = train(full, 1)
    run = make(mode, **options)
    train(run, 0)
    head = train(run, 1, stop=13)  # 13 batches: mid-pool (5 per pool)
    saved = pickle.loads(pickle.dumps(run.state_dict()))
    resumed = make(mode, **options)
    resumed.load_state_dict(saved)
    assert head + train(resumed, 1) == expected
    assert train(resumed, 2) == train(full, 2)  # the next epoch from the losses saved


@pytest.mark.parametrize("mode", ["random", "loss-rank", "prune"])
def test_resume_under_stateful_dataloader_with_two_workers(mode):
    from torchdata.stateful_dataloader import StatefulDataLoader

    def epoch_one(stream, stop=None, loader_state=None):
        loader = StatefulDataLoader(stream, batch_size=None, num_workers=2)
        if loader_state is not None:
            loader.load_state_dict(loader_state)
        out = train(stream, 1, loader, stop=stop)
        return out, (loader.state_dict(), stream.state_dict())

    full = make(mode)
    train(full, 0)
    expected, _ = epoch_one(full)
    run = make(mode)
    train(run, 0)
    head, saved = epoch_one(run, stop=7)
    loader_state, stream_state = pickle.loads(pickle.dumps(saved))
    resumed = make(mode)
    resumed.load_state_dict(stream_state)  # the losses first: the workers copy them
    tail, _ = epoch_one(resumed, loader_state=loader_state)
    assert head + tail == expected and len(expected) > 7


def test_forgetting_the_streams_own_state_is_an_error():
    from torchdata.stateful_dataloader import StatefulDataLoader

    run = make("loss-rank")
    train(run, 0)
    loader = StatefulDataLoader(run, batch_size=None, num_workers=0)
    train(run, 1, loader, stop=3)
    fresh = make("loss-rank")
    fresh.load_state_dict({**run.state_dict(), "losses": None})
    with pytest.raises(ValueError, match="load the stream's own state"):
        fresh.set_epoch(1)
        next(iter(fresh))


def test_state_from_another_configuration_is_refused():
    with pytest.raises(ValueError, match="buffer_size=40"):
        make(buffer_size=80).load_state_dict(make().state_dict())
    with pytest.raises(ValueError, match="not a StreamBatches state"):
        make().load_state_dict({"epoch": 0})


def test_map_style_sampler_under_stateful_dataloader():
    """Random batches resume exactly with workers; loss-rank's cannot (the loader saves the
    sampler when a batch is dispatched, before the batches in flight are observed), and the
    sampler says so."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    data = torch.arange(400).float()

    def run(selector, stop=None, state=None):
        sampler = SelectionBatchSampler(selector, rank=0, world_size=1)
        loader = StatefulDataLoader(data, batch_sampler=sampler, num_workers=2)
        if state is not None:
            loader.load_state_dict(state)
        out = []
        for batch in loader:
            out.append(batch.long().tolist())
            sampler.observe(batch.long(), losses=batch % 7)
            if len(out) == stop:
                return out, pickle.loads(pickle.dumps(loader.state_dict()))
        return out, None

    full, _ = run(RandomSelector(400, 8, seed=0))
    head, state = run(RandomSelector(400, 8, seed=0), stop=7)
    assert head + run(RandomSelector(400, 8, seed=0), state=state)[0] == full
    with pytest.warns(UserWarning, match="does not resume exactly"):
        run(LossRankSelector(400, 8, seed=0), stop=2)


# -- Hugging Face and WebDataset ----------------------------------------------------------
def hf_rows(shards):
    for shard in shards:
        yield from shard_examples(shard)


def test_hugging_face_iterable_dataset_with_workers_and_resume():
    datasets = pytest.importorskip("datasets")
    from torchdata.stateful_dataloader import StatefulDataLoader

    source = datasets.IterableDataset.from_generator(hf_rows, gen_kwargs={"shards": list(range(SHARDS))})
    assert source.n_shards == SHARDS

    def epoch(stream, stop=None, state=None):
        loader = StatefulDataLoader(stream, batch_size=None, num_workers=2)
        if state is not None:
            loader.load_state_dict(state)
        out = train(stream, 0, loader, stop=stop)
        return out, loader.state_dict()

    full, _ = epoch(make(source=source, cost="tokens"))
    assert sorted(i for b in full for i in b) == list(range(400))
    head, state = epoch(make(source=source, cost="tokens"), stop=9)
    tail, _ = epoch(make(source=source, cost="tokens"), state=pickle.loads(pickle.dumps(state)))
    assert head + tail == full
    # fewer shards than readers: split by example, as split_dataset_by_node does
    one_shard = datasets.IterableDataset.from_generator(all_examples)
    ranks = [train(make(source=one_shard, rank=r, world_size=2, batches_per_epoch=25), 0) for r in range(2)]
    assert sorted(i for r in ranks for b in r for i in b) == list(range(400))


@pytest.mark.parametrize("kind", ["generator", "hugging face", "webdataset"])
def test_each_source_selects_by_loss_from_the_buffer(kind, tmp_path):
    """Two epochs of a training loop in loss-rank mode: the second draws the examples whose
    losses were high more often, whatever the source."""
    if kind == "generator":
        stream = make("loss-rank", source=all_examples, pressure=1000.0)
    elif kind == "hugging face":
        datasets = pytest.importorskip("datasets")
        source = datasets.IterableDataset.from_generator(hf_rows, gen_kwargs={"shards": list(range(SHARDS))})
        stream = make("loss-rank", source=source, pressure=1000.0)
    else:
        urls = write_tar_shards(tmp_path)
        stream = StreamBatches(
            urls, 8, open_shard=open_tar, id_key="__key__", collate_fn=tar_collate, buffer_size=40,
            mode="loss-rank", pressure=1000.0,
        )  # fmt: skip

    def loss(example_id):  # the examples whose number is even are the hard ones
        return 5.0 if int(str(example_id).rsplit("-", 1)[-1]) % 2 == 0 else 0.1

    for epoch in range(2):
        stream.set_epoch(epoch)
        ids = []
        for batch in stream:
            ids += batch.ids
            stream.observe(batch, losses=[loss(i) for i in batch.ids])
        hard = np.mean([loss(i) == 5.0 for i in ids])
        assert len(ids) == 400 and (hard == 0.5 if epoch == 0 else hard > 0.8)


def write_tar_shards(folder: Path) -> list[str]:
    wds = pytest.importorskip("webdataset")
    urls = []
    for shard in range(SHARDS):
        path = folder / f"shard-{shard:02d}.tar"
        with wds.TarWriter(str(path)) as sink:
            for example in shard_examples(shard):
                sink.write({"__key__": f"s{shard}-{example['id']:04d}", "json": example})
        urls.append(str(path))
    return urls


def open_tar(url):
    import webdataset as wds

    return wds.WebDataset(url, shardshuffle=False, nodesplitter=None, workersplitter=None, empty_check=False).decode()


def tar_collate(examples):
    return torch.tensor([e["json"]["x"] for e in examples])


def test_webdataset_shards_with_workers_and_resume(tmp_path):
    from torchdata.stateful_dataloader import StatefulDataLoader

    urls = write_tar_shards(tmp_path)

    def epoch(stream, stop=None, state=None):
        loader = StatefulDataLoader(stream, batch_size=None, num_workers=2)
        if state is not None:
            loader.load_state_dict(state)
        return train(stream, 0, loader, stop=stop), loader.state_dict()

    def stream():
        return StreamBatches(urls, 8, open_shard=open_tar, id_key="__key__", collate_fn=tar_collate, buffer_size=40)

    full, _ = epoch(stream())
    assert len({i for b in full for i in b}) == 400
    head, state = epoch(stream(), stop=11)
    assert head + epoch(stream(), state=pickle.loads(pickle.dumps(state)))[0] == full


def test_two_ranks_under_torchrun(tmp_path):
    """2 ranks (gloo) with 2 workers each: disjoint ids, the same number of batches, an
    all-reduce per step (a rank that yielded fewer batches would hang it)."""
    out = tmp_path / "ranks"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
        "--master_port", str(free_port()), str(MP_SCRIPTS / "stream_job.py"), str(out),
    ]  # fmt: skip
    run_command(cmd, clean_env(), timeout=240)
    ranks = [np.load(f"{out}.rank{r}.npy") for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == 20 * 8
    assert not set(ranks[0].tolist()) & set(ranks[1].tolist())


# -- mistakes -----------------------------------------------------------------------------
def test_bad_options_are_named():
    with pytest.raises(ValueError, match="mode must be one of"):
        make("fastest")
    with pytest.raises(ValueError, match="multiple of batch_size 8"):
        make(buffer_size=20)
    with pytest.raises(ValueError, match="needs epochs="):
        StreamBatches(all_examples, 8, mode="prune")
    with pytest.raises(ValueError, match="needs batches_per_epoch="):
        make(rank=0, world_size=2)
    with pytest.raises(ValueError, match="rank must be in"):
        make(rank=2, world_size=2, batches_per_epoch=3)
    with pytest.raises(ValueError, match="pressure"):
        make("loss-rank", pressure=0.5)
    with pytest.raises(TypeError, match="it can be read once only"):
        StreamBatches(all_examples(), 8)
    with pytest.raises(TypeError, match="id_key"):
        StreamBatches(all_examples, 8, id_key=1.5)
    with pytest.raises(TypeError, match="has no length"):
        len(make())


def test_an_example_without_an_id():
    stream = StreamBatches(lambda: iter([{"x": 1.0}] * 8), 4, buffer_size=8)
    with pytest.raises(ValueError, match=r"has no id 'id' \(dict with keys \['x'\]\)"):
        list(stream)


def test_an_id_twice_in_one_buffer():
    def repeated():
        yield from ({"id": i % 30, "x": 0.0} for i in range(40))

    with pytest.raises(ValueError, match=r"id 0 appears twice in one buffer \(example 0 and example 30\)"):
        list(StreamBatches(repeated, 8, buffer_size=40))
    stream = StreamBatches(list(range(SHARDS)), 8, open_shard=lambda s: shard_examples(s % 4), buffer_size=400)
    with pytest.raises(ValueError, match=r"appears twice in one buffer \(shard \d #0 and shard \d #0\)"):
        list(stream)


def test_a_source_that_ends_early_on_one_rank():
    short = make(rank=1, world_size=2, batches_per_epoch=30)  # 4 shards, 200 examples: 25 batches
    with pytest.raises(ValueError, match="rank 1's source ended after 25 of the 30 batches"):
        train(short, 0)


def test_too_few_shards_for_the_readers():
    with pytest.raises(ValueError, match="2 shards for 4 readers"):
        train(StreamBatches([0, 1], 8, open_shard=shard_examples, rank=1, world_size=4, batches_per_epoch=2), 0)


def test_persistent_workers_are_refused():
    stream = make()
    loader = DataLoader(stream, batch_size=None, num_workers=1, persistent_workers=True)
    train(stream, 0, loader)
    with pytest.raises(ValueError, match="persistent_workers=False"):
        train(stream, 1, loader)


def test_forgotten_feedback_and_set_epoch_warn():
    stream = make("loss-rank")
    stream.set_epoch(1)
    with pytest.warns(UserWarning, match=r"call stream.observe\(batch, losses\)"):
        next(iter(stream))
    stream = make()
    train(stream, 0)
    with pytest.warns(UserWarning, match=r"call stream.set_epoch\(epoch\)"):
        for batch in stream:  # epoch 0 again
            stream.observe(batch, losses=np.zeros(len(batch.ids)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train(stream, 1)


def test_observe_checks_losses():
    stream = make()
    with pytest.raises(ValueError, match="losses has 2 values for a batch of 3 ids"):
        stream.observe([1, 2, 3], losses=[0.1, 0.2])
    with pytest.raises(ValueError, match="finite"):
        stream.observe([1], losses=[float("nan")])
    stream.observe(torch.tensor([4, 5]), losses=torch.tensor([1.0, 2.0]))
    assert stream.state_dict()["losses"][4][0] == 1.0  # tensor ids stored as ints
