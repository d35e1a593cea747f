"""The multi-process job the tests launch.

    mpiexec -n N python job.py OUT [--checks] [--ddp] [--greedi] [--fail-rank R --fail-step S]
    python job.py OUT --torch N [...]     (torch.multiprocessing, torchrun's variables, gloo)

--checks  communicators, sampler batches disjoint and covering, fingerprints agree (and a
          seed mismatch is caught), online feedback shared across ranks, resume mid-epoch
          from rank 0's checkpoint reproduces the remaining batches; under mpiexec these
          run on MPIComm, with --torch on TorchDistComm.
--ddp     a standard DDP loop (gloo) on sklearn's digits fed by SelectionBatchSampler.
--greedi  GreeDi over the ranks vs the centralized lazy greedy.
--fail-rank R --fail-step S: rank R raises at DDP step S (the job must fail, not hang).

Every rank asserts; rank 0 writes OUT.npz (DDP parameters of every rank, the batches each
rank trained on) and OUT.json (everything else).
"""

import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import fake_loss, spawn_torch  # noqa: E402

from batchsel import RandomSelector, SelectionBatchSampler  # noqa: E402
from batchsel.integrations import TorchDistComm, get_communicator, init_torch_distributed_from_mpi  # noqa: E402
from batchsel.selectors import LossRankSelector  # noqa: E402

EPOCHS, BATCH, LR, SEED = 2, 32, 0.1, 0


# -- checks -------------------------------------------------------------------------------
def check_comm(comm):
    r, w = comm.rank, comm.size
    assert comm.broadcast({"from": r} if r == 1 else None, root=1) == {"from": 1}
    assert comm.allgather(("rank", r)) == [("rank", i) for i in range(w)]
    # arrays of different lengths travel as raw bytes and come back with their dtype
    arrays = comm.allgather(np.arange(r + 1, dtype=np.float32) * (r + 1))
    assert [a.tolist() for a in arrays] == [(np.arange(i + 1) * (i + 1)).tolist() for i in range(w)]
    assert arrays[0].dtype == np.float32
    mixed = comm.allgather(np.ones(2) if r else None)  # not all ranks send an array: pickled
    assert mixed[0] is None and all(np.array_equal(m, np.ones(2)) for m in mixed[1:])
    check_sizes(comm)
    assert comm.allreduce(np.array([r, 1], dtype=np.int64)).tolist() == [w * (w - 1) // 2, w]
    assert comm.allreduce(np.array([float(r)]), op="max").tolist() == [w - 1.0]
    comm.barrier()


def check_sizes(comm):
    """Objects past TorchDistComm's first capacity (4 KiB), past its largest (1 MiB), empty
    and 2-D arrays; then small ones again, each in one collective on TorchDistComm."""
    r, w = comm.rank, comm.size
    big = comm.allgather(np.arange(50_000 * (r + 1), dtype=np.int64))
    assert all(np.array_equal(b, np.arange(50_000 * (i + 1))) for i, b in enumerate(big))
    huge = comm.allgather({"rank": r, "blob": bytes([r]) * (3 << 20)})
    assert [h["rank"] for h in huge] == list(range(w)) and all(
        h["blob"] == bytes([i]) * (3 << 20) for i, h in enumerate(huge)
    )
    empty = comm.allgather(np.empty((0, 3), dtype=np.float32))
    assert all(e.shape == (0, 3) and e.dtype == np.float32 for e in empty)
    grids = comm.allgather(np.full((2, 3), r + 1j, dtype=np.complex128))
    assert all(np.array_equal(g, np.full((2, 3), i + 1j)) and g.flags.aligned for i, g in enumerate(grids))
    calls = []
    if isinstance(comm, TorchDistComm):
        real = comm._gather_flat
        comm._gather_flat = lambda *args: (calls.append(1), real(*args))
    feedback = [{"indices": np.arange(32) + 32 * r, "losses": np.full(32, r, dtype=np.float32)}]
    for _ in range(3):
        got = comm.allgather(feedback)
        assert [int(g[0]["losses"][0]) for g in got] == list(range(w))
    if isinstance(comm, TorchDistComm):
        del comm._gather_flat
        assert len(calls) == 3, f"{len(calls)} collectives for 3 small all-gathers"


def check_sampler(comm, n=120, batch=7):
    r, w = comm.rank, comm.size
    out = {}
    sampler = SelectionBatchSampler(RandomSelector(n, batch, seed=11))  # rank, world from the environment
    assert (sampler.rank, sampler.world_size) == (r, w), (sampler.rank, sampler.world_size)
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        mine = list(sampler)
        assert set(comm.allgather(len(mine))) == {len(sampler)}
        flat = np.concatenate(comm.allgather(np.array([i for b in mine for i in b], dtype=np.int64)))
        assert sorted(flat.tolist()) == list(range(n)), "ranks overlap or miss examples"
        out[f"fingerprint_{epoch}"] = sampler.verify()
    odd = SelectionBatchSampler(RandomSelector(n, batch, seed=11 + (r == w - 1)))
    try:
        odd.verify()
        raise AssertionError("verify() missed a seed mismatch")
    except RuntimeError as exc:
        assert "disagree" in str(exc)

    # online selector (loss rank), feedback all-gathered every 2 calls; with prefetch=1 selected
    # in a background thread, collectives on the training thread
    for prefetch in (0, 1):

        def fresh():
            return SelectionBatchSampler(
                LossRankSelector(n, batch, seed=5, pressure=50.0), sync_every=2, prefetch=prefetch
            )

        def train(s, epoch, stop=None):
            s.set_epoch(epoch)
            got = []
            for b in s:
                got.append(b)
                s.observe(b, losses=fake_loss(np.array(b), epoch))
                if len(got) == stop:
                    return got, s.state_dict(all_ranks=True)
            return got, None

        full = fresh()
        latest = np.full(n, np.inf)
        for epoch in (0, 1):
            expected, _ = train(full, epoch)
            for b in (i for rank_batches in comm.allgather(expected) for i in rank_batches):
                latest[b] = fake_loss(np.array(b), epoch)
        full.sync()
        losses = comm.allgather(full.selector.losses_)
        assert all(np.array_equal(v, losses[0]) for v in losses), "ranks' selectors saw different feedback"
        assert np.array_equal(losses[0], latest), "some rank's feedback was lost"
        run = fresh()
        train(run, 0)
        first, state = train(run, 1, stop=3)  # odd: a buffered observation is in the checkpoint
        state = comm.broadcast(state, root=0)  # only rank 0 saved the checkpoint
        resumed = fresh()
        resumed.load_state_dict(state)
        rest, _ = train(resumed, 1)
        assert first + rest == expected, "the resumed run differs from the uninterrupted one"
        resumed.sync()
        assert np.array_equal(resumed.selector.losses_, full.selector.losses_)
    out["online_batches"] = len(expected)

    # a lag (prefetch=1) is the same on every rank and never a matter of timing: random
    # sleeps in the step, other ones on each rank, change no batch, and the batches are those
    # of a loop without prefetch that observes each batch only after asking for the next one
    def lagged(delayed, sleep_seed):
        s = SelectionBatchSampler(LossRankSelector(n, batch, seed=6, pressure=50.0), sync_every=1, prefetch=1 - delayed)
        rng, got = np.random.default_rng(sleep_seed), []
        for epoch in (0, 1):
            s.set_epoch(epoch)
            last = None
            for b in s:
                time.sleep(float(rng.random()) * 0.002)
                if delayed and last is not None:
                    s.observe(last, losses=fake_loss(np.array(last), epoch))
                got.append(b)
                if not delayed:
                    s.observe(b, losses=fake_loss(np.array(b), epoch))
                last = b
            if delayed and last is not None:
                s.observe(last, losses=fake_loss(np.array(last), epoch))
        return got, s.selector.losses_

    a, losses_a = lagged(False, comm.rank + 1)
    b, _ = lagged(False, comm.rank + 11)
    ref, losses_ref = lagged(True, 0)
    assert a == b == ref, "the default prefetch lag depends on timing"
    assert all(np.array_equal(v, losses_a) for v in comm.allgather(losses_a)), "ranks saw different feedback"
    assert np.array_equal(losses_a, losses_ref)
    return out


# -- DDP ----------------------------------------------------------------------------------
def digits():
    """sklearn's digits (1797 x 64), read from its file without importing sklearn (which
    would cost every rank a second of start-up)."""
    import importlib.util

    folder = importlib.util.find_spec("sklearn").submodule_search_locations[0]
    data = np.loadtxt(os.path.join(folder, "datasets", "data", "digits.csv.gz"), delimiter=",")
    return torch.tensor(data[:, :-1] / 16.0, dtype=torch.float32), torch.tensor(data[:, -1], dtype=torch.int64)


def make_model():
    torch.manual_seed(SEED)
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))


def sgd_step(model, opt, x, y):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()  # mean loss: DDP averages over ranks
    opt.step()


def flat_params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


def train_single(batches):
    """The one-process reference: SGD on the given global batches, in order."""
    x, y = digits()
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for b in batches:
        sgd_step(model, opt, x[b], y[b])
    return flat_params(model)


def train_ddp(fail_rank=-1, fail_step=-1):
    from torch.utils.data import DataLoader, TensorDataset

    x, y = digits()
    sampler = SelectionBatchSampler(RandomSelector(len(x), BATCH, seed=SEED))
    loader = DataLoader(TensorDataset(x, y, torch.arange(len(x))), batch_sampler=sampler)
    model = torch.nn.parallel.DistributedDataParallel(make_model())
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    trained = []
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        sampler.verify()
        for t, (xb, yb, ib) in enumerate(loader):
            if sampler.rank == fail_rank and t == fail_step:
                raise RuntimeError(f"rank {sampler.rank} fails on purpose at step {t}")
            sgd_step(model, opt, xb, yb)
            trained.append(ib.numpy())
    comm = get_communicator()
    return comm.allgather(flat_params(model.module)), comm.allgather(trained)


# -- GreeDi -------------------------------------------------------------------------------
def check_greedi(comm, n=3000, k=50):
    from batchsel.submodular.functions import FacilityLocation
    from batchsel.submodular.optimizers import maximize

    rng = np.random.default_rng(0)
    centers = rng.normal(size=(40, 8)) * 3
    x = (centers[rng.integers(0, 40, n)] + rng.normal(size=(n, 8))).astype(np.float32)
    f = FacilityLocation.from_embeddings(x, neighbors=30)
    dist_sel = maximize(f, k, optimizer="greedi", comm=comm)
    central = maximize(f, k, optimizer="lazy")
    values = comm.allgather(float(dist_sel.value))
    assert len(set(values)) == 1, f"ranks got different GreeDi results {values}"
    return {
        "greedi_value": values[0],
        "central_value": float(central.value),
        "greedi_ratio": values[0] / float(central.value),
        "greedi_parts": dist_sel.extra["parts"],
    }


# -- driver -------------------------------------------------------------------------------
def job(out, opts):
    result, arrays = {}, {}
    if "--checks" in opts or "--greedi" in opts:
        comm = get_communicator()  # MPIComm under mpiexec (before torch.distributed exists)
        result["comm"] = type(comm).__name__
        if "--checks" in opts:
            check_comm(comm)
            result.update(check_sampler(comm))
        if "--greedi" in opts:
            result.update(check_greedi(comm))
    if "--ddp" in opts:
        fail = {}
        if "--fail-rank" in opts:
            fail = dict(
                fail_rank=int(opts[opts.index("--fail-rank") + 1]), fail_step=int(opts[opts.index("--fail-step") + 1])
            )
        rank, world = init_torch_distributed_from_mpi(timeout=60)
        params, batches = train_ddp(**fail)
        arrays["params"] = np.stack(params)
        for r in range(world):
            for s, b in enumerate(batches[r]):
                arrays[f"r{r}_s{s}"] = b
        result["steps"] = len(batches[0])
        result["ddp_comm"] = type(get_communicator()).__name__  # what the loop's sampler found
    comm = get_communicator()
    everyone = comm.allgather(result)
    if comm.rank == 0:
        assert all(x == everyone[0] for x in everyone), everyone
        result["world_size"] = comm.size
        with open(out + ".json", "w") as f:
            json.dump(result, f)
        if arrays:
            np.savez(out + ".npz", **arrays)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def torch_worker(out, opts):
    init_torch_distributed_from_mpi(timeout=60)  # torchrun's variables: env:// rendezvous
    job(out, opts)


if __name__ == "__main__":
    out, opts = sys.argv[1], sys.argv[2:]
    if "--torch" in opts:
        # no torch ops in the parent before the fork (OpenMP's threads do not survive it)
        spawn_torch(torch_worker, int(opts[opts.index("--torch") + 1]), out, opts)
    else:
        job(out, opts)
