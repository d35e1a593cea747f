"""InfoBatch pruning in a DDP loop with a OneCycleLR schedule, as tests/selectors/test_pruning.py launches it:

    python pruning_job.py OUT [METHOD ...]                (one process)
    mpiexec -n N python pruning_job.py OUT [METHOD ...]   (MPI, torch.distributed set up from MPI)

METHOD: ``infobatch`` (the default) or ``score`` (ScorePruningSelector: EL2N from the
training logits of the first epoch, then the kept 60 %, weights all 1). Several methods
run one after the other in the same job (one launch), each writing OUT_METHOD.json.

On sklearn's digits every rank draws weighted batches from
``SelectionBatchSampler(InfoBatchSelector(...), weighted=True)``, trains a DDP model with
``OneCycleLR(total_steps=sampler.total_batches(EPOCHS))`` and feeds its per-example losses
back (shared across ranks). Asserted on every rank: each epoch has ``len(sampler)`` batches
on every rank, the ranks' batches are disjoint and cover the epoch's kept examples, the pruned
share is the one asked for, every batch's losses reached the selector (InfoBatch: the last
epoch's last batches too), the schedule is stepped exactly to its end (no scheduler error),
the ranks end with the same model, and a run stopped mid-epoch and resumed from rank 0's
checkpoint trains on exactly the batches and weights of the uninterrupted run. Rank 0 writes
OUT.json (one METHOD).
"""

import io
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from job import digits, flat_params  # noqa: E402

from batchsel import InfoBatchSelector, ScorePruningSelector  # noqa: E402
from batchsel.integrations import SelectionBatchSampler, get_communicator, init_torch_distributed_from_mpi  # noqa: E402

EPOCHS, BATCH, SEED, MAX_LR = 5, 32, 0, 0.2
METHOD = "infobatch"  # the job's method (set by __main__)


def make_selector(y):
    if METHOD == "score":
        return ScorePruningSelector(y, BATCH, epochs=EPOCHS, keep=0.6, seed=SEED)
    return InfoBatchSelector(len(y), BATCH, epochs=EPOCHS, seed=SEED)


def build(x, y, distributed):
    torch.manual_seed(SEED)
    net = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    model = torch.nn.parallel.DistributedDataParallel(net) if distributed else net
    opt = torch.optim.SGD(model.parameters(), lr=MAX_LR, momentum=0.9)
    sampler = SelectionBatchSampler(make_selector(y), weighted=True)
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=MAX_LR, total_steps=sampler.total_batches(EPOCHS))
    return net, model, opt, schedule, sampler


def train(x, y, distributed, start=None, stop=None):
    """Returns (per step: indices, weights), the checkpoint taken after ``stop`` steps (or None),
    the network, the schedule and the sampler."""
    net, model, opt, schedule, sampler = build(x, y, distributed)
    first_epoch, step, lengths = 0, 0, []
    if start is not None:
        state = torch.load(io.BytesIO(start), weights_only=True)
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        schedule.load_state_dict(state["schedule"])
        sampler.load_state_dict(state["sampler"])
        first_epoch, step = state["epoch"], state["step"]
    seen = []
    for epoch in range(first_epoch, EPOCHS):
        sampler.set_epoch(epoch)
        lengths.append(len(sampler))
        for batch in sampler:
            idx = torch.tensor([i for i, _ in batch])
            w = torch.tensor([w for _, w in batch])
            logits = model(x[idx])
            losses = F.cross_entropy(logits, y[idx], reduction="none")
            opt.zero_grad()
            (losses * w).mean().backward()
            lr = opt.param_groups[0]["lr"]
            opt.step()
            schedule.step()
            sampler.observe(idx, losses=losses.detach(), logits=logits.detach())
            seen.append((idx.numpy().copy(), w.numpy().copy(), lr, losses.detach().numpy().copy()))
            step += 1
            if step == stop:
                buf = io.BytesIO()
                torch.save(
                    {
                        "model": net.state_dict(),
                        "opt": opt.state_dict(),
                        "schedule": schedule.state_dict(),
                        "sampler": sampler.state_dict(all_ranks=distributed),
                        "epoch": epoch,
                        "step": step,
                    },
                    buf,
                )
                return seen, buf.getvalue(), net, schedule, sampler, lengths
    return seen, None, net, schedule, sampler, lengths


def job(out, distributed):
    comm = get_communicator()
    torch.set_num_threads(1)
    x, y = digits()
    full, _, net, schedule, sampler, lengths = train(x, y, distributed)
    selector = sampler.selector
    total = sampler.total_batches(EPOCHS)
    assert len(full) == total == sum(lengths), (len(full), total, lengths)
    # the schedule ran to its end: the last step at OneCycleLR's final rate, and one more step
    # raises its "Tried to step" error
    assert abs(full[-1][2] - MAX_LR / 25 / 1e4) < 1e-12, full[-1][2]
    assert abs(max(lr for _, _, lr, _ in full) - MAX_LR) < 0.01 * MAX_LR  # the peak falls between two steps
    try:
        schedule.step()
    except ValueError as exc:
        assert "Tried to step" in str(exc)
    else:
        raise AssertionError("OneCycleLR took a step past its total")
    every = comm.allgather([(i, w) for i, w, _, _ in full])
    assert all(len(e) == len(full) for e in every), "ranks yielded different numbers of batches"
    start = 0
    shares = {}
    for epoch, length in enumerate(lengths):
        union = np.concatenate([i for rank in every for i, _ in rank[start : start + length]])
        weights = np.concatenate([w for rank in every for _, w in rank[start : start + length]])
        if METHOD == "infobatch":  # up-weighted exactly where it prunes
            assert (weights == 1).all() == (selector.pruned_share_[epoch] == 0), epoch
        else:
            assert (weights == 1).all(), epoch
        kept = selector.epoch_size(epoch)
        assert len(np.unique(union)) == kept and len(union) >= kept, (epoch, len(np.unique(union)), kept)
        shares[epoch] = selector.pruned_share_[epoch]
        start += length
    if METHOD == "infobatch":
        # every batch's losses reached the selector, the last epoch's last batches too (they are
        # shared after the epoch's last batch, not sync_every - 1 of them an epoch later): its
        # latest loss per example is the last one fed back on any rank, in the sampler's order
        fed = comm.allgather([(i, f) for i, _, _, f in full])
        latest = np.full(len(y), np.inf)
        for step in range(len(full)):
            for rank in fed:
                latest[rank[step][0]] = rank[step][1]
        sampler.fingerprint()  # hands the feedback held back for the next plan to the selector
        assert np.allclose(selector.losses_, latest), "feedback missing from the selector"
    params = comm.allgather(flat_params(net))
    assert all(np.array_equal(p, params[0]) for p in params), "ranks ended with different models"

    stop = lengths[0] + lengths[1] + lengths[2] // 2  # mid-epoch 2, a pruned one
    first, checkpoint, _, _, _, _ = train(x, y, distributed, stop=stop)
    if distributed:
        checkpoint = comm.broadcast(checkpoint, root=0)  # only rank 0 saved it
    rest, _, resumed, _, _, _ = train(x, y, distributed, start=checkpoint)
    assert len(first) + len(rest) == len(full)
    assert all(
        np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2] == b[2] for a, b in zip(first + rest, full)
    ), "the resumed run trained on other batches or weights"
    assert np.array_equal(flat_params(resumed), params[0]), "the resumed run ended with another model"
    result = {
        "world_size": comm.size,
        "steps": len(full),
        "lengths": lengths,
        "pruned_share": shares,
        "accuracy": float((net(x).argmax(1) == y).float().mean()),
    }
    if comm.rank == 0:
        with open(out + ".json", "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    distributed = "OMPI_COMM_WORLD_SIZE" in os.environ
    if distributed:
        init_torch_distributed_from_mpi(timeout=60)
    methods = sys.argv[2:] or ["infobatch"]
    for METHOD in methods:
        job(sys.argv[1] if len(methods) == 1 else f"{sys.argv[1]}_{METHOD}", distributed)
    if distributed:
        torch.distributed.destroy_process_group()
