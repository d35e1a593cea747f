"""The in-loop candidate filter in a DDP loop, as tests/loop/test_filter_mp.py launches it:

    python filter_job.py OUT                    (one process)
    python filter_job.py OUT --torch N          (torch.multiprocessing, torchrun's variables)
    mpiexec -n N python filter_job.py OUT       (MPI, torch.distributed set up from MPI)

On sklearn's digits, every rank fits the same cross-fitted irreducible-loss model, draws
candidate batches of ``ratio x B`` from SelectionBatchSampler and trains (DDP, gloo) on
the B its CandidateFilter keeps (RHO-LOSS + diversity + a uniform share with warm-up).
Asserted on every rank: the ranks fit the same irreducible losses, keep equally many
examples at every step and end with the same model; a run stopped mid-epoch and resumed
from rank 0's checkpoint (model, optimizer, sampler, filter) trains on exactly the batches
of the uninterrupted run and ends with the same model. Rank 0 writes OUT.json.
"""

import io
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import spawn_torch  # noqa: E402
from job import digits, flat_params  # noqa: E402

from batchsel import CandidateFilter, IrreducibleLoss, RandomSelector  # noqa: E402
from batchsel.integrations import SelectionBatchSampler, get_communicator, init_torch_distributed_from_mpi  # noqa: E402

EPOCHS, BATCH, RATIO, SEED = 2, 16, 4, 0


def build(x, y, il):
    """Model, optimizer, sampler over candidate batches, filter: everything a run needs."""
    torch.manual_seed(SEED)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    filt = CandidateFilter(
        BATCH, RATIO, "rho", irreducible_losses=il, diversity=1.0, uniform_fraction=0.25, warmup_steps=3, seed=SEED
    )
    sampler = SelectionBatchSampler(RandomSelector(len(x), filt.candidate_size, seed=SEED))
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, y, torch.arange(len(x))), batch_sampler=sampler
    )
    return model, opt, sampler, filt, loader


def train(x, y, il, start=None, stop=None):
    """The loop. ``start``: a checkpoint to resume from; ``stop``: return a checkpoint
    after that many steps. Returns (kept indices per step, checkpoint or None, model, filter)."""
    model, opt, sampler, filt, loader = build(x, y, il)
    first_epoch, step = 0, 0
    if start is not None:
        state = torch.load(io.BytesIO(start), weights_only=True)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        sampler.load_state_dict(state["sampler"])
        filt.load_state_dict(state["filter"])
        first_epoch, step = state["epoch"], state["step"]
    kept = []
    for epoch in range(first_epoch, EPOCHS):
        sampler.set_epoch(epoch)
        sampler.verify()
        for xb, yb, ib in loader:
            # -- the filter: 4 lines -----------------------------------------------
            with torch.no_grad(), filt.timed():
                logits = model.module(xb)  # .module: no DDP hooks for a no-grad forward
            keep = torch.from_numpy(filt(ib, logits, yb, embeddings=xb))
            xb, yb, ib = xb[keep], yb[keep], ib[keep]
            # ---------------------------------------------------------------------
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
            kept.append(ib.numpy().copy())
            step += 1
            if step == stop:
                buf = io.BytesIO()
                torch.save(
                    {
                        "model": model.module.state_dict(),
                        "opt": opt.state_dict(),
                        "sampler": sampler.state_dict(all_ranks=True),
                        "filter": filt.state_dict(),
                        "epoch": epoch,
                        "step": step,
                    },
                    buf,
                )
                return kept, buf.getvalue(), model, filt
    return kept, None, model, filt


def job(out):
    init_torch_distributed_from_mpi(timeout=60)
    comm = get_communicator()
    torch.set_num_threads(1)
    x, y = digits()
    il = IrreducibleLoss(folds=5, seed=SEED).fit(x.numpy(), y.numpy())
    ils = comm.allgather(il.losses_)
    assert all(np.array_equal(v, ils[0]) for v in ils), "ranks fit different irreducible losses"

    full, _, model, filt = train(x, y, il)
    sizes = np.array([len(b) for b in full])
    assert all(np.array_equal(s, sizes) for s in comm.allgather(sizes)), "ranks kept different batch sizes"
    per_epoch = len(full) // EPOCHS
    assert sizes[0] == BATCH and sizes[per_epoch - 1] <= BATCH
    params = comm.allgather(flat_params(model.module))
    assert all(np.array_equal(p, params[0]) for p in params), "ranks ended with different models"
    stop = per_epoch + per_epoch // 3  # mid-epoch 1

    first, checkpoint, _, _ = train(x, y, il, stop=stop)
    checkpoint = comm.broadcast(checkpoint, root=0)  # only rank 0 saved it
    rest, _, resumed, rfilt = train(x, y, il, start=checkpoint)
    assert len(first) + len(rest) == len(full)
    assert all(np.array_equal(a, b) for a, b in zip(first + rest, full)), "the resumed run trained on other batches"
    assert np.array_equal(flat_params(resumed.module), params[0]), "the resumed run ended with another model"
    assert rfilt.steps_ == filt.steps_ == len(full)

    cost = filt.cost()
    union = np.concatenate([b for rank_batches in comm.allgather(full) for b in rank_batches])
    result = {
        "world_size": comm.size,
        "steps": len(full),
        "per_epoch": per_epoch,
        "kept": int(sizes.sum()),
        "examples_trained": int(len(np.unique(union))),
        "il_accuracy": il.accuracy_,
        "forward_fraction": cost["forward_fraction"],
        "select_fraction": cost["select_fraction"],
        "accuracy": float((model.module(x).argmax(1) == y).float().mean()),
    }
    everyone = comm.allgather({k: result[k] for k in ("steps", "kept", "examples_trained")})
    assert all(e == everyone[0] for e in everyone), everyone
    if comm.rank == 0:
        with open(out + ".json", "w") as f:
            json.dump(result, f)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    out, opts = sys.argv[1], sys.argv[2:]
    if "--torch" in opts:
        spawn_torch(job, int(opts[opts.index("--torch") + 1]), out)
    else:
        job(out)
