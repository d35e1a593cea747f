"""SelectionBatchSampler, WeightedDataset and the communicators, in one process.

Ranks are simulated with explicit ``rank`` / ``world_size``; the real multi-process runs
are in test_integrations_mp.py."""

import io
import os
import pickle
import subprocess
import sys
from collections import deque

import numpy as np
import pytest
import torch
from common import TinyOnline, fake_loss
from torch.utils.data import DataLoader, TensorDataset

from batchsel import AutoSelector, InfoBatchSelector, RandomSelector, SelectionBatchSampler
from batchsel.distributed.comm import Communicator, SingleProcessComm, get_communicator
from batchsel.integrations import WeightedBatch, WeightedDataset
from batchsel.selectors import CoresetSelector, LossRankSelector, SubmodularSelector

# Online selectors: the project's, and a tiny one that does not replay its drawn batches
# itself (the sampler's checkpoint then carries the batches drawn ahead).
ONLINE = {
    "loss_rank": lambda n, b, seed: LossRankSelector(n, b, seed=seed),
    # pressure after a warm-up of shuffled batches, set from the losses fed back
    "auto": lambda n, b, seed: AutoSelector(n, b, labels=np.arange(n) % 3, seed=seed),
    "submodular": lambda n, b, seed: SubmodularSelector(
        np.random.default_rng(seed).normal(size=(n, 8)).astype(np.float32), b, seed=seed, pool_size=20
    ),
    "tiny": lambda n, b, seed: TinyOnline(n, b, seed=seed),
}


def online_selector(n=40, batch_size=4, seed=0, kind="loss_rank"):
    return ONLINE[kind](n, batch_size, seed)


def latest_losses(selector):
    return selector.losses_ if isinstance(selector, LossRankSelector) else selector.scores


def sampler_for(selector, rank=0, world_size=1, **kw):
    return SelectionBatchSampler(selector, rank=rank, world_size=world_size, **kw)


class IndexDataset(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor(float(i)), i


# -- the DistributedSampler contract ----------------------------------------------------
@pytest.mark.parametrize("world_size", [1, 3])
def test_batches_are_the_plans_and_cover_the_data(world_size):
    sel = RandomSelector(30, batch_size=4, seed=5)
    seen = []
    for rank in range(world_size):
        s = sampler_for(sel, rank, world_size)
        s.set_epoch(2)
        batches = list(s)
        assert len(batches) == len(s) == sel.num_batches(world_size)
        assert all(isinstance(b, list) and all(type(i) is int for i in b) for b in batches)
        assert batches == [b.tolist() for b in sel.plan(2, world_size).batches(rank)]
        seen += [i for b in batches for i in b]
    assert sorted(seen) == list(range(30))  # 30 = 3 * 10: disjoint and covering


def test_epoch_and_seed_decide_the_order_without_global_rng():
    np_state, torch_state = np.random.get_state()[1].copy(), torch.random.get_rng_state().clone()
    a = sampler_for(RandomSelector(50, 5, seed=1))
    b = sampler_for(RandomSelector(50, 5, seed=1))
    e0 = list(a)
    a.set_epoch(1)
    e1 = list(a)
    assert e0 == list(b) and e0 != e1
    b.set_epoch(1)
    assert list(b) == e1
    assert list(sampler_for(RandomSelector(50, 5, seed=2))) != e0
    assert list(sampler_for(RandomSelector(50, 5, seed=1), seed=1)) == e0
    with pytest.raises(ValueError, match="seed=2"):
        sampler_for(RandomSelector(50, 5, seed=1), seed=2)  # the seed lives in the selector
    assert (np.random.get_state()[1] == np_state).all() and torch.equal(torch.random.get_rng_state(), torch_state)


def test_arguments_are_checked():
    with pytest.raises(TypeError, match="Selector"):
        SelectionBatchSampler([1, 2, 3])
    with pytest.raises(ValueError, match="rank"):
        sampler_for(RandomSelector(10, 2), rank=2, world_size=2)
    with pytest.raises(ValueError, match="sync_every"):
        sampler_for(RandomSelector(10, 2), sync_every=0)
    with pytest.raises(ValueError, match="disagrees"):
        SelectionBatchSampler(RandomSelector(10, 2), world_size=2, comm=SingleProcessComm())
    with pytest.raises(ValueError, match="online"):
        sampler_for(online_selector(), weighted=True)
    with pytest.raises(ValueError, match="epoch"):
        sampler_for(RandomSelector(10, 2)).set_epoch(-1)


# -- DataLoader -------------------------------------------------------------------------
def test_dataloader_with_workers_and_feedback():
    sel = online_selector(40, 4)
    sampler = sampler_for(sel)
    loader = DataLoader(IndexDataset(40), batch_sampler=sampler, num_workers=2)
    got, expected = [], np.full(40, np.inf)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, idx in loader:
            assert torch.equal(x, idx.float())
            got.append(idx.tolist())
            losses = fake_loss(idx.numpy(), epoch)
            sampler.observe(idx, losses=torch.as_tensor(losses))
            expected[idx.numpy()] = losses
    assert len(got) == 2 * len(sampler) and all(len(b) == 4 for b in got)
    # every batch's feedback reached the selector (loss-rank: the latest loss of each example)
    assert np.isfinite(expected).sum() > 20 and np.array_equal(latest_losses(sel), expected)


def test_weighted_coreset_batches_reach_the_dataset_through_workers():
    x = np.random.default_rng(0).normal(size=(200, 8)).astype(np.float32)
    y = np.repeat([0, 1], [150, 50])
    sel = CoresetSelector(x, y, batch_size=5, fraction=0.1, seed=0)
    data = WeightedDataset(TensorDataset(torch.arange(200), torch.from_numpy(y)))
    sampler = sampler_for(sel, rank=1, world_size=2, weighted=True)
    sampler.set_epoch(3)
    plan = sel.plan(3, 2)
    batches = list(DataLoader(data, batch_sampler=sampler, num_workers=2))
    assert len(batches) == len(sampler) == plan.num_batches
    for (ib, yb, wb), b, w in zip(batches, plan.batches(1), plan.weights(1)):
        assert wb.dtype == torch.float32
        assert ib.tolist() == b.tolist() and torch.equal(yb, torch.from_numpy(y[b]))
        assert np.array_equal(wb.numpy(), w) and not np.all(w == 1)  # the coreset's weights, per example


def test_weighted_batches_are_the_plans_pairs_and_arrays():
    y = np.arange(60) % 3
    sel = InfoBatchSelector(60, 8, epochs=4, labels=y, seed=0)
    sel.observe(np.arange(60), losses=np.random.default_rng(0).random(60))
    sampler = sampler_for(sel, weighted=True)
    sampler.set_epoch(1)
    got = list(sampler)
    plan = sel.plan(1)
    assert len(got) == len(plan.batches(0)) == len(sampler)
    for batch, b, w in zip(got, plan.batches(0), plan.weights(0)):
        assert (
            isinstance(batch, WeightedBatch) and batch.indices.dtype == np.int64 and batch.weights.dtype == np.float32
        )
        assert np.array_equal(batch.indices, b) and np.array_equal(batch.weights, w)
        pairs = list(zip(b.tolist(), w.tolist()))
        assert list(batch) == pairs and batch == pairs and len(batch) == len(b)  # the pairs as before
        assert batch[0] == pairs[0] and batch[-1] == pairs[-1] and batch[1:3] == pairs[1:3]
        assert isinstance(batch[0][0], int) and isinstance(batch[0][1], float)
        again = pickle.loads(pickle.dumps(batch))  # DataLoader workers receive it pickled
        assert again == batch and np.array_equal(again.weights, batch.weights)
    assert any((batch.weights > 1).any() for batch in got)  # the kept well-learnt examples, up-weighted
    assert got[0] != got[1] and got[0] != "not a batch"
    with pytest.raises(ValueError, match="3 indices but 2 weights"):
        WeightedBatch(np.arange(3), np.ones(2, np.float32))


def test_weighted_loss_is_the_mean_of_products_in_one_op_or_two():
    losses = torch.rand(6, dtype=torch.float64, requires_grad=True)
    weights = torch.rand(6, dtype=torch.float64)
    sel = InfoBatchSelector(10, 2, epochs=3)
    for w in (weights, weights.float()):  # one dtype: a dot product; mixed: the multiply, promoted
        loss = sel.weighted_loss(losses, w)
        (grad,) = torch.autograd.grad(loss, losses)
        assert torch.allclose(loss, (losses * w).mean()) and torch.allclose(grad, w.double() / 6)
    assert sel.weighted_loss(np.array([1.0, 3.0]), np.array([1.0, 2.0])) == 3.5
    assert float(sel.weighted_loss(torch.zeros(0), torch.zeros(0))) == 0.0  # an empty batch: no division by 0


def test_weighted_dataset_per_example_weights():
    data = WeightedDataset([(10, 0), (11, 1), (12, 0)], weights=np.array([1.0, 2.0, 3.0]))
    assert data[2] == (12, 0, np.float32(3.0)) and len(data) == 3
    assert WeightedDataset([(10, 0)])[0][-1] == 1.0
    with pytest.raises(ValueError, match="entries"):
        WeightedDataset([(10, 0)], weights=[1.0, 2.0])
    with pytest.raises(ValueError, match=">= 0"):
        WeightedDataset([(10, 0)], weights=[-1.0])


# -- resume -----------------------------------------------------------------------------
def roundtrip(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf)  # weights_only default: the state must be plain tensors and Python


@pytest.mark.parametrize("workers_ahead", [0, 3])
def test_resume_offline_mid_epoch(workers_ahead):
    full = sampler_for(RandomSelector(60, 4, seed=3), rank=1, world_size=2)
    full.set_epoch(4)
    expected = list(full)
    run = sampler_for(RandomSelector(60, 4, seed=3), rank=1, world_size=2)
    run.set_epoch(4)
    it = iter(run)
    done = 3
    for _ in range(done + workers_ahead):  # a DataLoader with workers fetches ahead
        next(it)
    state = roundtrip(run.state_dict(batches_done=done if workers_ahead else None))
    resumed = sampler_for(RandomSelector(60, 4, seed=3), rank=1, world_size=2)
    resumed.load_state_dict(state)
    resumed.set_epoch(4)
    assert list(resumed) == expected[done:]
    assert list(resumed) == expected  # the next pass over the epoch starts from its beginning


def simulate(sampler, epoch, prefetch, stop_after=None):
    """A training loop over a DataLoader that keeps ``prefetch`` batches in flight: batch
    t + prefetch + 1 is drawn after the feedback of batch t. Returns the batches trained
    on and, with ``stop_after``, the state saved after that many batches."""
    sampler.set_epoch(epoch)
    trained, done = [], sampler.state_dict()["batches_done"]
    it = iter(sampler)
    queue = deque(b for _, b in zip(range(prefetch), it))
    while True:
        queue.extend(b for _, b in zip(range(1), it))  # the loop asks for its next batch
        if not queue:
            break
        batch = queue.popleft()
        trained.append(batch)
        done += 1
        sampler.observe(batch, losses=fake_loss(np.array(batch), epoch))
        if stop_after is not None and len(trained) == stop_after:
            return trained, roundtrip(sampler.state_dict(batches_done=done))
    return trained, None


@pytest.mark.parametrize("kind", sorted(ONLINE))
@pytest.mark.parametrize("prefetch", [0, 2])
def test_resume_online_mid_epoch_replays_prefetched_batches(prefetch, kind):
    def fresh():  # a DataLoader's look-ahead (simulated), no selection ahead of its own
        return sampler_for(online_selector(40, 4, seed=1, kind=kind), rank=0, world_size=2, prefetch=0)

    full = fresh()
    simulate(full, 0, prefetch)
    expected, _ = simulate(full, 1, prefetch)

    run = fresh()
    simulate(run, 0, prefetch)
    first, state = simulate(run, 1, prefetch, stop_after=2)
    assert len(state["pending"]) == prefetch
    resumed = fresh()
    resumed.load_state_dict(state)
    assert resumed.state_dict()["position"] == state["position"]  # loaded, not iterated: unchanged
    rest, _ = simulate(resumed, 1, prefetch)
    assert first + rest == expected
    if kind != "submodular":  # the resumed selector ends with the same scores
        assert np.array_equal(latest_losses(resumed.selector), latest_losses(full.selector))


def test_load_state_dict_rejects_other_runs():
    s = sampler_for(RandomSelector(40, 4, seed=0), rank=0, world_size=2)
    state = s.state_dict()
    with pytest.raises(ValueError, match="rank"):
        sampler_for(RandomSelector(40, 4, seed=0), rank=1, world_size=2).load_state_dict(state)
    with pytest.raises(ValueError, match="seed"):
        sampler_for(RandomSelector(40, 4, seed=9), rank=0, world_size=2).load_state_dict(state)
    with pytest.raises(ValueError, match="method"):
        sampler_for(online_selector(40, 4), rank=0, world_size=2).load_state_dict(state)
    with pytest.raises(ValueError, match="not a SelectionBatchSampler state"):
        s.load_state_dict({"epoch": 0})
    with pytest.raises(ValueError, match="batches_done"):
        s.state_dict(batches_done=1)  # nothing handed out yet


# -- feedback and agreement across ranks --------------------------------------------------
class FakeComm(Communicator):
    """Rank 0 of a pretend 2-rank job whose peer sends ``peer`` to every all-gather."""

    def __init__(self, peer):
        self.rank, self.size, self.peer, self.calls = 0, 2, peer, 0

    def allgather(self, obj):
        self.calls += 1
        self.sent = obj
        peer = self.peer
        if isinstance(obj, list) and isinstance(peer, list):
            # feedback: a peer that called observe alike (the same steps), with ``peer``'s
            # observations, or empty ones past them
            empty = {"indices": np.empty(0, np.int64), "losses": None, "logits": None, "embeddings": None}
            peer = [dict(peer[i] if i < len(peer) else empty, step=o.get("step")) for i, o in enumerate(obj)]
        return [obj, peer]


def test_observe_converts_checks_and_forwards():
    sel = online_selector(20, 4)
    s = sampler_for(sel)
    s.observe(torch.tensor([3, 4]), losses=torch.tensor([0.5, 0.25], requires_grad=True))
    assert sel.losses_[3] == 0.5 and sel.losses_[4] == 0.25
    with pytest.raises(ValueError, match="rows"):
        s.observe([1, 2], losses=[0.1])
    with pytest.raises(TypeError, match="integers"):
        s.observe([0.5])
    comm = FakeComm(peer=[])
    sampler_for(RandomSelector(20, 4), rank=0, world_size=2, comm=comm).observe([1], losses=[1.0])
    assert comm.calls == 0  # RandomSelector ignores feedback: no collective


def test_batches_in_epoch_is_each_epochs_length_and_sums_to_the_runs_total():
    """InfoBatch's epochs differ in length: ``batches_in_epoch(e)`` is ``len`` after
    ``set_epoch(e)``, the batches an iteration of that epoch hands out, and the epochs add up
    to ``total_batches``."""
    losses = np.random.default_rng(0).random(200)
    sel = InfoBatchSelector(200, 8, epochs=6, seed=0)
    s = sampler_for(sel, weighted=False)  # (the weights are not what is counted here)
    lengths = []
    for epoch in range(6):
        s.set_epoch(epoch)
        handed = 0
        for batch in s:
            s.observe(batch, losses=losses[batch])
            handed += 1
        lengths.append(s.batches_in_epoch(epoch))
        assert lengths[-1] == len(s) == handed
    assert len(set(lengths)) > 1 and sum(lengths) == s.total_batches(6)
    with pytest.raises(ValueError, match="epoch"):
        s.batches_in_epoch(-1)


def test_observe_reads_the_list_it_handed_out_as_it_is_now():
    """The README's loop hands the sampler's list back to observe; the sampler then reads
    the batch's own array, unless the list was changed since (then the list, as it is)."""
    sel = LossRankSelector(20, 4, seed=0)
    s = sampler_for(sel)
    it = iter(s)
    batch = next(it)
    s.observe(batch, losses=torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert sel.losses_[batch].tolist() == [1.0, 2.0, 3.0, 4.0]
    changed = next(it)
    other = next(i for i in range(20) if i not in changed)
    changed[0] = other  # a loop that rewrites the list in place (its own indices now)
    s.observe(changed, losses=torch.tensor([5.0, 6.0, 7.0, 8.0]))
    assert sel.losses_[other] == 5.0 and sel.losses_[changed[1:]].tolist() == [6.0, 7.0, 8.0]
    with pytest.raises(ValueError, match="in \\[0, 20\\)"):
        bad = next(it)
        bad[0] = 20  # out of range: refused by name as before
        s.observe(bad, losses=torch.tensor([1.0, 1.0, 1.0, 1.0]))


def test_observe_shares_only_the_feedback_the_selector_reads():
    """SMDL at its default weights reads embeddings only: logits are neither shared nor a
    collective; with the uncertainty term they are. Loss-rank reads losses only."""
    x = np.random.default_rng(0).normal(size=(40, 3)).astype(np.float32)
    logits = np.zeros((2, 5), np.float32)
    for sel, given, calls in (
        (SubmodularSelector(x, 4), {"logits": logits}, 0),
        (SubmodularSelector(x, 4), {"embeddings": x[:2]}, 1),
        (SubmodularSelector(x, 4, weights=(1, 1, 0, 0)), {"logits": logits}, 1),
        (LossRankSelector(40, 4), {"logits": logits}, 0),
        (LossRankSelector(40, 4), {"losses": [1.0, 2.0], "logits": logits}, 1),
    ):
        comm = FakeComm(peer=[])
        s = SelectionBatchSampler(sel, comm=comm, sync_every=1)
        s.observe([1, 2], **given)
        assert comm.calls == calls, (sel.feedback_fields, list(given))
    comm = FakeComm(peer=[])
    s = SelectionBatchSampler(LossRankSelector(40, 4), comm=comm, sync_every=1)
    s.observe([1, 2], losses=[1.0, 2.0], logits=logits)
    sent = comm.sent[0]
    assert sent["logits"] is None and sent["losses"].tolist() == [1.0, 2.0]


def test_sync_every_gathers_feedback_from_all_ranks_in_order():
    peer_obs = [{"indices": np.array([7]), "losses": np.array([0.9]), "logits": None, "embeddings": None}] * 2
    sel = online_selector(20, 4, kind="tiny")
    comm = FakeComm(peer=peer_obs)
    s = SelectionBatchSampler(sel, comm=comm, sync_every=2)
    s.observe([1], losses=[0.1])
    assert comm.calls == 0 and sel.observed.sum() == 0  # buffered until the second call
    s.observe([2], losses=[0.2])
    assert comm.calls == 1
    assert sel.observed[[1, 2, 7]].tolist() == [1, 1, 2] and sel.scores[7] == 0.9


def test_feedback_is_shared_every_fourth_call_by_default():
    """One small all-gather costs more than a small model's step over gloo: by default the
    sampler gathers four calls' feedback at once (benchmarks/results/quality/sync_every/)."""
    sel = online_selector(20, 4, kind="tiny")
    comm = FakeComm(peer=[])
    s = SelectionBatchSampler(sel, comm=comm)
    assert s.sync_every == 4
    for i in range(8):
        s.observe([i], losses=[0.1 * i])
        assert comm.calls == (i + 1) // 4
    assert len(comm.sent) == 4 and sel.observed[:8].tolist() == [1] * 8


def test_verify_compares_fingerprints():
    s = SelectionBatchSampler(RandomSelector(20, 4), comm=FakeComm(peer=None))
    mine = s.fingerprint()
    assert mine == RandomSelector(20, 4).plan(0, 2).fingerprint()
    s.comm.peer = mine
    assert s.verify() == mine
    s.comm.peer = "0" * 16
    with pytest.raises(RuntimeError, match="disagree"):
        s.verify()
    on = SelectionBatchSampler(online_selector(), comm=FakeComm(peer=None))
    assert on.fingerprint() != on.fingerprint(epoch=1)
    assert on.fingerprint() != SelectionBatchSampler(online_selector(seed=3), comm=FakeComm(peer=None)).fingerprint()


# -- communicators ------------------------------------------------------------------------
def test_single_process_communicator(monkeypatch):
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    comm = get_communicator()
    assert isinstance(comm, SingleProcessComm) and (comm.rank, comm.size) == (0, 1)
    assert comm.broadcast({"a": 1}) == {"a": 1} and comm.allgather(3) == [3]
    assert comm.allreduce(np.array([1.5, 2.0]), op="max").tolist() == [1.5, 2.0]
    comm.barrier = lambda: None
    with pytest.raises(ValueError, match="op"):
        comm.allreduce([1], op="mean")
    with pytest.raises(ValueError, match="kind"):
        get_communicator("nccl")
    with pytest.raises(ValueError, match="root"):
        comm.broadcast(1, root=1)


def test_import_initializes_neither_mpi_nor_torch_distributed():
    code = (
        "import sys, batchsel, batchsel.integrations, torch.distributed as d; "
        "assert 'mpi4py.MPI' not in sys.modules, 'mpi4py.MPI imported'; "
        "assert not d.is_initialized(); print('clean')"
    )
    env = dict(os.environ, OMPI_COMM_WORLD_SIZE="2")  # even as if started by mpiexec
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "clean" in out.stdout, out.stderr


# -- issue 14: resume and verify() catch runs and ranks that differ -------------------------
@pytest.mark.parametrize("other", [lambda: RandomSelector(80, 4, seed=0), lambda: RandomSelector(40, 5, seed=0)])
def test_load_state_dict_rejects_another_dataset_size_or_batch_size(other):
    s = sampler_for(RandomSelector(40, 4, seed=0), rank=0, world_size=2)
    s.set_epoch(1)
    it = iter(s)
    next(it), next(it)
    state = s.state_dict()
    # the position (2 batches of 4 of 40 examples) means another point of another epoch
    with pytest.raises(ValueError, match="num_examples|batch_size"):
        sampler_for(other(), rank=0, world_size=2).load_state_dict(state)
    with pytest.raises(ValueError, match="lacks"):
        sampler_for(RandomSelector(40, 4, seed=0), rank=0, world_size=2).load_state_dict(
            {k: v for k, v in state.items() if k != "position"}
        )


def test_online_selector_state_of_another_batch_size_is_refused():
    state = online_selector(40, 4).state_dict()
    with pytest.raises(ValueError, match="batch_size=4"):
        online_selector(40, 5).load_state_dict(state)


def test_verify_catches_ranks_whose_embeddings_or_weights_differ():
    x = np.random.default_rng(0).normal(size=(120, 8)).astype(np.float32)
    noisy = x + np.random.default_rng(1).normal(scale=1e-2, size=x.shape).astype(np.float32)

    def fingerprint(emb, rank=0, **kw):
        sel = SubmodularSelector(emb, 10, seed=0, partition="submodular", **kw)
        return SelectionBatchSampler(sel, rank=rank, world_size=2, comm=FakeComm(peer=None)).fingerprint()

    same = fingerprint(x)
    assert fingerprint(x.copy(), rank=0) == same  # same inputs: same fingerprint
    assert fingerprint(noisy) != same  # data differ by 1e-2: the GreedMax shards and the batches differ
    assert fingerprint(x, weights=(0.2, 0.5, 0.1, 0.2)) != same  # a tuple setting
    comm = FakeComm(peer=fingerprint(noisy))
    s = SelectionBatchSampler(SubmodularSelector(x, 10, seed=0, partition="submodular"), comm=comm)
    with pytest.raises(RuntimeError, match="disagree"):
        s.verify()


def test_selector_fingerprint_samples_large_embeddings(monkeypatch):
    import batchsel.selectors.hashing as base

    monkeypatch.setattr(base, "DIGEST_FULL_BYTES", 1024)  # 32 rows of 8 float32: the rest is sampled
    x = np.random.default_rng(0).normal(size=(400, 8)).astype(np.float32)
    a = SubmodularSelector(x, 10, seed=0).fingerprint()
    assert a == SubmodularSelector(x.copy(), 10, seed=0).fingerprint()
    assert a != SubmodularSelector(x + np.float32(1e-2), 10, seed=0).fingerprint()


# -- what DistributedSampler + BatchSampler accept (issue #15) ---------------------------
@pytest.mark.parametrize("shuffle", [False, True])
def test_batch_counts_and_sizes_match_torch(shuffle):
    """Over a grid with batches larger than the data, more ranks than examples, both
    drop_last flags: the same number of batches and batch sizes per rank as
    ``BatchSampler(DistributedSampler(...), B, drop_last)`` (and, unshuffled, the same
    batches)."""
    from torch.utils.data import BatchSampler, DistributedSampler

    cases = 0
    for n in (1, 3, 7, 10):
        for batch_size in (1, 3, 4, 12):
            for world_size in (1, 2, 3, 5, 12):
                for drop_examples in (False, True):
                    for drop_batch in (False, True):
                        sel = RandomSelector(n, batch_size, seed=4, drop_last=drop_examples, shuffle=shuffle)
                        for rank in range(world_size):
                            ours = sampler_for(sel, rank, world_size, drop_last=drop_batch)
                            ours.set_epoch(1)
                            dist = DistributedSampler(
                                range(n),
                                num_replicas=world_size,
                                rank=rank,
                                shuffle=shuffle,
                                seed=4,
                                drop_last=drop_examples,
                            )
                            dist.set_epoch(1)
                            theirs = list(BatchSampler(dist, batch_size, drop_last=drop_batch))
                            got = list(ours)
                            case = (n, batch_size, world_size, drop_examples, drop_batch, rank)
                            assert len(ours) == len(got) == len(theirs), case
                            assert [len(b) for b in got] == [len(b) for b in theirs], case
                            if not shuffle:
                                assert got == theirs, case
                            cases += 1
    assert cases == 2 * 4 * 4 * (1 + 2 + 3 + 5 + 12) * 2


def test_batch_drop_last_resumes_and_refuses_selectors_with_balanced_batches():
    sel = RandomSelector(10, 4, seed=0)
    s = sampler_for(sel, 0, 1, drop_last=True)
    assert len(s) == 2 and [len(b) for b in s] == [4, 4]
    it = iter(s)
    first = next(it)
    state = s.state_dict(batches_done=1)
    resumed = sampler_for(RandomSelector(10, 4, seed=0), 0, 1, drop_last=True)
    resumed.load_state_dict(state)
    assert list(resumed) == [next(it)] and first != []
    with pytest.raises(ValueError, match="drop_last=True"):
        sampler_for(online_selector(), drop_last=True)

    class FullBatches(RandomSelector):  # a selector of one's own states the capability, no isinstance
        pass

    FullBatches.full_batches = False
    with pytest.raises(ValueError, match="full_batches"):
        sampler_for(FullBatches(10, 4, seed=0), 0, 1, drop_last=True)


# -- frameworks (issue #17) ---------------------------------------------------------------
def test_frameworks_reach_set_epoch_through_batch_sampler_sampler():
    """Lightning calls only loader.sampler.set_epoch and loader.batch_sampler.sampler.set_epoch."""
    s = sampler_for(RandomSelector(12, 4))
    loader = DataLoader(IndexDataset(12), batch_sampler=s)
    loader.batch_sampler.sampler.set_epoch(3)
    assert s.epoch == 3 and s.batch_size == 4
    assert [idx.tolist() for _, idx in loader] == [b.tolist() for b in RandomSelector(12, 4).plan(3).batches(0)]


def test_placeholders_let_a_framework_skip_the_finished_batches_once():
    sel = online_selector(40, 4)
    s = sampler_for(sel)
    it = iter(s)
    batches = [next(it) for _ in range(5)]  # 5 fetched, 3 finished
    state = s.state_dict(batches_done=3)
    resumed = sampler_for(online_selector(40, 4))
    resumed.load_state_dict(state, placeholders=True)
    got = list(resumed)
    assert got[:3] == [[], [], []] and got[3:5] == batches[3:] and len(got) == len(s)
    assert resumed.batch_indices(4).tolist() == batches[4]
    with pytest.raises(ValueError, match="batch=2"):
        resumed.batch_indices(2)  # a placeholder: never handed out
    with pytest.raises(ValueError, match="no feedback"):
        sampler_for(RandomSelector(10, 2)).batch_indices(0)


def test_rank_and_world_are_read_when_iteration_starts(tmp_path, monkeypatch):
    """A sampler built before the process group exists (a Lightning module's __init__)
    used to settle on one process; explicit values that contradict the group are refused."""
    import torch.distributed as dist

    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"):
        monkeypatch.delenv(var, raising=False)
    early = SelectionBatchSampler(RandomSelector(12, 4))
    explicit = sampler_for(RandomSelector(12, 4), rank=1, world_size=2)  # simulating rank 1: fine alone
    assert explicit.comm is None and len(list(explicit)) == 2
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        assert len(list(early)) == 3 and type(early.comm).__name__ == "TorchDistComm"
        with pytest.raises(ValueError, match="torch.distributed has rank 0 of 1"):
            list(explicit)
        with pytest.raises(ValueError, match="torch.distributed has rank 0 of 1"):
            sampler_for(RandomSelector(12, 4), rank=1, world_size=2)
    finally:
        dist.destroy_process_group()


def test_merged_feedback_concatenates_only_runs_a_selector_reads_alike():
    from batchsel.loop.feedback import merged

    def obs(idx, losses=None, logits=None):
        return {
            "indices": np.array(idx),
            "losses": None if losses is None else np.array(losses, float),
            "logits": None if logits is None else np.array(logits, float),
            "embeddings": None,
        }

    one = merged([obs([0, 1], [1, 2]), obs([2], [3]), obs([3], logits=[[1.0, 0.0]]), obs([4], logits=[[0.0, 1.0]])])
    assert [o["indices"].tolist() for o in one] == [[0, 1, 2], [3, 4]]  # a new kind of feedback starts a run
    assert one[0]["losses"].tolist() == [1, 2, 3] and one[1]["logits"].shape == (2, 2)
    repeated = merged([obs([0, 1], [1, 2]), obs([1], [5])])  # an index twice: order matters, kept apart
    assert [o["indices"].tolist() for o in repeated] == [[0, 1], [1]]
    ragged = merged([obs([0], logits=[[1.0, 0.0]]), obs([1], logits=[[1.0, 0.0, 0.0]])])
    assert len(ragged) == 2  # shapes that differ: left for the selector's check to name
    # a bad (negative) index is left for the selector's check to name; empty batches merge
    assert len(merged([obs([0], [1]), obs([-1], [2])])) == 2
    assert [o["indices"].tolist() for o in merged([obs([], []), obs([], [])])] == [[]]


# -- common mistakes in the training loop: each gets a warning that names the fix --------


def _loader_epoch(sampler, data, feedback=True, **loader_kwargs):
    out = []
    for xb, ib in DataLoader(data, batch_sampler=sampler, **loader_kwargs):
        out.append(ib.tolist())
        if feedback:
            sampler.observe(ib, losses=xb.sum(1))
    return out


def _no_warning(fn):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn()


@pytest.mark.parametrize(
    "make",
    [
        lambda: InfoBatchSelector(60, 6, epochs=4, seed=0),
        lambda: CoresetSelector(
            np.random.default_rng(0).normal(size=(60, 4)).astype(np.float32), None, 6, fraction=0.5
        ),
    ],
    ids=["infobatch", "coreset"],
)
def test_a_weighted_plan_without_weighted_warns_and_false_is_a_choice(make):
    with pytest.warns(UserWarning, match=r"weighted=True .*weighted=False"):
        plain = SelectionBatchSampler(make(), rank=0, world_size=1)
    assert not plain.weighted
    _no_warning(lambda: SelectionBatchSampler(make(), rank=0, world_size=1, weighted=False))
    _no_warning(lambda: SelectionBatchSampler(make(), rank=0, world_size=1, weighted=True))
    _no_warning(lambda: SelectionBatchSampler(LossRankSelector(60, 6), rank=0, world_size=1))  # no weights


def test_a_loop_that_never_observes_is_warned_within_the_epoch_and_once():
    sampler = SelectionBatchSampler(LossRankSelector(400, 8, seed=0), rank=0, world_size=1)
    with pytest.warns(
        UserWarning, match=r"none came in 8 batches of epoch 0.*sampler\.observe\(batch, losses="
    ) as seen:
        for _ in sampler:
            pass
        sampler.set_epoch(1)
        list(sampler)
    assert sum("observe" in str(w.message) for w in seen) == 1  # once per sampler


def test_a_short_epoch_without_feedback_is_warned_when_the_next_starts():
    sampler = SelectionBatchSampler(InfoBatchSelector(40, 8, epochs=3, seed=0), rank=0, world_size=1, weighted=True)
    _no_warning(lambda: list(sampler))  # 5 batches: the loop may still be on its way
    sampler.set_epoch(1)
    with pytest.warns(UserWarning, match=r"InfoBatchSelector .* losses .*none came in 5 batches of epoch 0"):
        list(sampler)


def test_feedback_or_an_unfinished_peek_is_not_warned():
    data = TensorDataset(torch.randn(200, 4), torch.arange(200))
    fed = SelectionBatchSampler(LossRankSelector(200, 8, seed=0), rank=0, world_size=1, prefetch=4, workers_ahead=4)

    def run():
        for epoch in range(2):
            fed.set_epoch(epoch)
            _loader_epoch(fed, data, num_workers=2)  # the workers' batches ahead come unfed at first

    _no_warning(run)
    peeked = SelectionBatchSampler(LossRankSelector(200, 8, seed=0), rank=0, world_size=1)
    next(iter(peeked))
    _no_warning(lambda: next(iter(peeked)))  # a pass that did not end: no mistake shown yet


def test_feedback_the_selector_does_not_read_counts_as_none():
    sampler = SelectionBatchSampler(LossRankSelector(400, 8, seed=0), rank=0, world_size=1)
    with pytest.warns(UserWarning, match="losses"):
        for batch in sampler:
            sampler.observe(batch, logits=np.zeros((len(batch), 3)))  # loss-rank reads losses only


def test_a_second_pass_without_set_epoch_is_warned():
    sampler = SelectionBatchSampler(RandomSelector(40, 8, seed=0), rank=0, world_size=1)
    first = list(sampler)
    with pytest.warns(UserWarning, match=r"repeats epoch 0's batches: call sampler\.set_epoch\(epoch\)"):
        again = list(sampler)
    assert again == first  # DistributedSampler's behaviour, now said out loud
    sampler.set_epoch(1)
    _no_warning(lambda: list(sampler))
    state = sampler.state_dict(batches_done=2)
    sampler.load_state_dict(state)
    _no_warning(lambda: list(sampler))  # a resume of epoch 1 is no repeat


def test_infobatch_without_set_epoch_is_warned_before_its_schedule_overruns():
    sampler = SelectionBatchSampler(InfoBatchSelector(40, 4, epochs=4, seed=0), rank=0, world_size=1, weighted=True)
    for batch in sampler:
        sampler.observe(batch.indices, losses=np.ones(len(batch)))
    with pytest.warns(UserWarning, match="set_epoch"):
        list(sampler)


@pytest.mark.parametrize("prefetch", [4, 6])
def test_batches_do_not_depend_on_num_workers_when_prefetch_covers_the_window(prefetch):
    """DataLoader(num_workers=2) asks for 4 batches ahead (2 x prefetch_factor 2): with that
    window stated (workers_ahead=4) and prefetch >= 4 the sampler selects only the rest
    ahead, the batches of num_workers=0."""
    data = TensorDataset(torch.randn(160, 4), torch.arange(160))

    def run(workers, stated):
        selector = LossRankSelector(160, 8, seed=0)
        sampler = SelectionBatchSampler(selector, rank=0, world_size=1, prefetch=prefetch, workers_ahead=stated)
        return _loader_epoch(sampler, data, num_workers=workers)

    assert _no_warning(lambda: run(2, stated=4)) == run(0, stated=0)
    # a look-ahead not stated is the loader's window on top of the sampler's own: warned, with both fixes
    with pytest.warns(UserWarning, match=rf"late, not {prefetch}.*prefetch={prefetch}, workers_ahead=4\)"):
        unstated = run(2, stated=0)
    sampler = SelectionBatchSampler(LossRankSelector(160, 8, seed=0), rank=0, world_size=1, prefetch=prefetch + 4)
    assert unstated == _loader_epoch(sampler, data, num_workers=0)


def test_num_workers_beyond_prefetch_is_warned_with_the_prefetch_that_matches():
    data = TensorDataset(torch.randn(160, 4), torch.arange(160))

    def run(workers, prefetch):
        sampler = SelectionBatchSampler(LossRankSelector(160, 8, seed=0), rank=0, world_size=1, prefetch=prefetch)
        return _loader_epoch(sampler, data, num_workers=workers)

    with pytest.warns(UserWarning, match=r"num_workers=2\) asks for batches 4 ahead.*prefetch=4"):
        workers = run(2, 0)
    assert workers == run(0, 4)  # the documented rule: the window is part of the lag
    random = SelectionBatchSampler(RandomSelector(160, 8, seed=0), rank=0, world_size=1)
    _no_warning(lambda: _loader_epoch(random, data, feedback=False, num_workers=2))  # no feedback, no lag


def test_weighted_batches_into_an_unwrapped_dataset_are_warned():
    data = TensorDataset(torch.randn(40, 4), torch.arange(40))
    sampler = SelectionBatchSampler(InfoBatchSelector(40, 8, epochs=3, seed=0), rank=0, world_size=1, weighted=True)
    with pytest.warns(UserWarning, match=r"WeightedDataset\(dataset\)"), pytest.raises(IndexError):
        next(iter(DataLoader(data, batch_sampler=sampler)))
    x, i, w = _no_warning(lambda: next(iter(DataLoader(WeightedDataset(data), batch_sampler=sampler))))
    assert w.dtype == torch.float32 and len(w) == 8


# -- the README's checkpoint, sampler.state_dict() in a loop with DataLoader workers --------
def _checkpointed_run(make, workers, stop=None, state=None, prefetch=0, stated=None):
    """The README's loop over two epochs, the sampler told the loader's look-ahead
    (``stated``, default ``2 * workers``); ``stop``: checkpoint with the plain
    ``sampler.state_dict()`` after that many steps of epoch 1 and end there."""
    data = TensorDataset(torch.arange(104))
    ahead = 2 * workers if stated is None else stated
    sampler = SelectionBatchSampler(make(), rank=0, world_size=1, prefetch=prefetch, workers_ahead=ahead)
    first = 0 if state is None else int(state["epoch"])
    if state is not None:
        sampler.load_state_dict(state)
    got = []
    for epoch in range(first, 2):
        sampler.set_epoch(epoch)
        for step, (idx,) in enumerate(DataLoader(data, batch_sampler=sampler, num_workers=workers)):
            got.append(idx.tolist())
            sampler.observe(idx, losses=torch.as_tensor(fake_loss(idx.numpy(), epoch)))
            if epoch == 1 and step + 1 == stop:
                return got, sampler.state_dict()
    return got, None


_RESUMED = {
    "random": lambda: RandomSelector(104, 8, seed=0),
    "loss-rank": lambda: LossRankSelector(104, 8, seed=0),
    "auto": lambda: AutoSelector(104, 8, labels=np.arange(104) % 3, seed=0),
}


@pytest.mark.parametrize("workers", [0, 2, 4])
@pytest.mark.parametrize("kind, prefetch", [("random", 0), ("loss-rank", 0), ("loss-rank", 4), ("auto", 4)], ids=str)
def test_plain_state_dict_with_workers_resumes_the_batches_still_to_train(kind, prefetch, workers):
    """The README's loop, the look-ahead stated: before, the state counted the batches the
    workers had fetched ahead as trained, so the resumed run skipped them (5 + 4 of 13,
    silently). 4 workers fetch 8 ahead: at step 5 the sampler has handed out all 13."""
    make = _RESUMED[kind]
    full, _ = _checkpointed_run(make, workers, prefetch=prefetch)
    before, state = _checkpointed_run(make, workers, stop=5, prefetch=prefetch)
    after, _ = _checkpointed_run(make, workers, state=state, prefetch=prefetch)
    assert len(before) == 13 + 5 and len(full) == 26
    assert before + after == full


def test_a_look_ahead_not_stated_is_refused_naming_the_value():
    """The loader is seen to fetch 4 ahead, the sampler was told 0: the plain form would
    count 4 untrained batches as trained, so it refuses, naming both exact forms."""
    with pytest.raises(ValueError, match=r"workers_ahead=4\).*batches_done=step"):
        _checkpointed_run(_RESUMED["random"], 2, stop=5, stated=0)


def test_batches_and_the_checkpoint_do_not_depend_on_torchs_private_names(monkeypatch):
    """The sampler finds the DataLoader's iterator in torch's frames only to warn and, in an
    epoch's tail, to read its count: with that lookup gone (torch renamed its names) the
    batches are the same and a checkpoint mid-epoch resumes exactly; one in the tail is
    refused, naming the exact form, never counted wrong."""
    make = _RESUMED["loss-rank"]
    full, _ = _checkpointed_run(make, 2, prefetch=4)
    before, state = _checkpointed_run(make, 2, stop=5, prefetch=4)
    monkeypatch.setattr("batchsel.loop.sampler.batch_sampler.loader_iterator", lambda caller, sampler: None)
    assert _checkpointed_run(make, 2, prefetch=4)[0] == full
    blind_before, blind_state = _checkpointed_run(make, 2, stop=5, prefetch=4)
    assert blind_before == before and blind_state["position"] == state["position"]
    after, _ = _checkpointed_run(make, 2, state=blind_state, prefetch=4)
    assert before + after == full
    with pytest.raises(ValueError, match=r"last 4 batches.*state_dict\(batches_done=step\)"):
        _checkpointed_run(make, 2, stop=11, prefetch=4)  # the sampler ran out at step 10


def test_the_window_warning_points_at_the_users_loop_not_at_torch():
    data = TensorDataset(torch.randn(160, 4), torch.arange(160))
    sampler = SelectionBatchSampler(LossRankSelector(160, 8, seed=0), rank=0, world_size=1, workers_ahead=4)
    with pytest.warns(UserWarning, match="asks for batches 4 ahead") as seen:
        _loader_epoch(sampler, data, num_workers=2)
    (warning,) = [w for w in seen if "ahead" in str(w.message)]
    assert warning.filename == _loader_epoch.__code__.co_filename, warning.filename  # before: dataloader.py


def _break_after(sampler, data, steps, **loader_kwargs):
    """A loop that leaves the epoch after ``steps`` steps (a preemption signal, a step
    limit) and drops its iterator; the batches it trained."""
    got = []
    for (idx,) in DataLoader(data, batch_sampler=sampler, num_workers=2, **loader_kwargs):
        got.append(idx.tolist())
        if len(got) == steps:
            break
    return got


def _random_sampler(**kwargs):
    return SelectionBatchSampler(RandomSelector(104, 8, seed=0), rank=0, world_size=1, workers_ahead=4, **kwargs)


@pytest.mark.parametrize("steps", [3, 9, 10, 12, 13])
def test_a_checkpoint_after_leaving_the_loop_is_exact(steps):
    """The loop leaves the epoch (13 batches) after ``steps`` and drops its iterator. Up to
    step 9 the workers hold 4 batches; from step 10 the sampler has run out and torch's
    own count says how far the loop got (before: the whole epoch counted as trained)."""
    data = TensorDataset(torch.arange(104))
    full = _break_after(_random_sampler(), data, 13)
    sampler = _random_sampler()
    head = _break_after(sampler, data, steps)
    state = sampler.state_dict()
    resumed = _random_sampler()
    resumed.load_state_dict(state)
    assert head + _break_after(resumed, data, 13) == full


def test_a_copy_of_the_sampler_counts_mid_epoch_and_refuses_in_the_tail():
    data = TensorDataset(torch.arange(104))
    sampler = _random_sampler()
    _break_after(sampler, data, 3)  # the iterator is gone with 4 more batches in its workers
    assert pickle.loads(pickle.dumps(sampler)).state_dict()["position"] == 3
    _break_after(sampler, data, 11)  # the tail: only the loader's count tells, and a copy has no loader
    copy = pickle.loads(pickle.dumps(sampler))
    assert copy.state_dict(batches_done=11)["position"] == 11
    with pytest.raises(ValueError, match=r"state_dict\(batches_done=step\)"):
        copy.state_dict()


def test_batches_out_of_order_are_warned_and_their_position_refused():
    data = TensorDataset(torch.arange(104))
    sampler = _random_sampler()
    with pytest.warns(UserWarning, match=r"in_order=False\) hands batches to the loop in the order"):
        loader = iter(DataLoader(data, batch_sampler=sampler, num_workers=2, in_order=False))
        next(loader)
    with pytest.raises(ValueError, match="out of order"):
        sampler.state_dict()
    del loader
