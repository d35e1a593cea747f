"""BucketSelector batches of token sequences in a DDP loop, as tests/selectors/test_buckets_loop.py
launches it (one launch each):

    python buckets_ddp.py OUT --torch 2         (torch.multiprocessing, torchrun's variables, gloo)
    mpiexec -n 2 python buckets_ddp.py OUT      (MPI, torch.distributed set up from MPI, gloo)

Every rank draws its batches from ``SelectionBatchSampler(BucketSelector(costs, ...))`` (rank
and world size from the process group), collates them with ``pad_collate`` and trains a DDP
model (masked mean of token embeddings) under a OneCycleLR sized by ``total_batches``.
Asserted on every rank: every epoch has ``len(sampler)`` batches on each rank (DDP's
all-reduce would hang otherwise), the ranks' batches are disjoint and cover every example
once per epoch, each padded batch is ``len(batch) x its longest example`` and within the
budget, the schedule ran exactly to its end, the ranks end with the same model, and an epoch
stopped mid-way and resumed from rank 0's all-ranks state yields the rest exactly. Rank 0
writes OUT.json. The data, model and costs are shared with tests/selectors/test_buckets_loop.py.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import spawn_torch  # noqa: E402

from batchsel import BucketSelector, SelectionBatchSampler  # noqa: E402
from batchsel.integrations import get_communicator, init_torch_distributed_from_mpi  # noqa: E402
from batchsel.loop.collate import pad_collate  # noqa: E402

N, BATCH, VOCAB, DIM, SEED, EPOCHS = 600, 16, 50, 8, 1, 2


def make_costs(n: int = N, seed: int = 0) -> np.ndarray:
    """Sequence lengths, log-normal (median 55, a long tail), clipped to [4, 512]."""
    return np.clip(np.round(np.random.default_rng(seed).lognormal(4.0, 0.8, n)), 4, 512)


class Tokens(torch.utils.data.Dataset):
    """Item ``i``: ``(tokens, label, i)`` with ``costs[i]`` tokens, all non-zero (0 is the pad)."""

    def __init__(self, costs: np.ndarray) -> None:
        self.costs = costs.astype(np.int64)

    def __len__(self) -> int:
        return len(self.costs)

    def __getitem__(self, i: int):
        tokens = (i * 7 + torch.arange(int(self.costs[i]))) % (VOCAB - 1) + 1
        return tokens, i % 2, i


class Pool(torch.nn.Module):
    """Masked mean of token embeddings, then a linear layer: padding must not count."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(VOCAB, DIM)
        self.out = torch.nn.Linear(DIM, 2)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = mask.unsqueeze(-1).to(torch.float32)
        return self.out((self.embed(tokens) * m).sum(1) / m.sum(1).clamp(min=1))


def flat_params(model: torch.nn.Module) -> np.ndarray:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


def loader_of(sampler: SelectionBatchSampler, costs: np.ndarray) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(Tokens(costs), batch_sampler=sampler, collate_fn=pad_collate)


def train(costs: np.ndarray, comm) -> dict:
    """The DDP run; returns this rank's batches (indices) and padded sizes per epoch."""
    sampler = SelectionBatchSampler(BucketSelector(costs, batch_size=BATCH, seed=SEED))
    assert (sampler.rank, sampler.world_size) == (comm.rank, comm.size)
    model = torch.nn.parallel.DistributedDataParallel(Pool())
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    total = sampler.total_batches(EPOCHS)
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.5, total_steps=total)
    batches, padded_sizes, lengths = [], [], []
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        sampler.verify()  # every rank plans from the same costs and settings
        lengths.append(len(sampler))
        epoch_batches, epoch_sizes = [], []
        for tokens, mask, labels, idx in loader_of(sampler, costs):
            assert torch.equal(mask, tokens != 0) and torch.equal(
                mask.sum(1), torch.as_tensor(costs[idx.numpy()]).long()
            )
            loss = torch.nn.functional.cross_entropy(model(tokens, mask), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            schedule.step()
            epoch_batches.append(idx.tolist())
            epoch_sizes.append(tokens.numel())
        batches.append(epoch_batches)
        padded_sizes.append(epoch_sizes)
    try:  # OneCycleLR raises one step past its total: the run ended exactly there
        schedule.step()
        raise AssertionError("OneCycleLR took a step past total_batches")
    except ValueError as exc:
        assert "Tried to step" in str(exc), exc
    assert sum(lengths) == total
    return {"batches": batches, "sizes": padded_sizes, "lengths": lengths, "params": flat_params(model.module)}


def check_resume(costs: np.ndarray, comm, full_epoch: list[list[int]], epoch: int, stop: int) -> None:
    """Stop ``epoch`` after ``stop`` batches, save every rank's state on rank 0, resume."""
    sampler = SelectionBatchSampler(BucketSelector(costs, batch_size=BATCH, seed=SEED))
    sampler.set_epoch(epoch)
    it = iter(loader_of(sampler, costs))
    first = [next(it)[3].tolist() for _ in range(stop)]
    state = sampler.state_dict(all_ranks=True)  # collective: every rank's state in one dict
    state = comm.broadcast(state if comm.rank == 0 else None, root=0)  # as if only rank 0 saved it
    del it
    fresh = SelectionBatchSampler(BucketSelector(costs, batch_size=BATCH, seed=SEED))
    fresh.load_state_dict(state)
    fresh.set_epoch(epoch)
    rest = [b[3].tolist() for b in loader_of(fresh, costs)]
    assert first + rest == full_epoch, f"rank {comm.rank}: the resumed epoch differs"


def job(out: str) -> None:
    torch.set_num_threads(1)
    comm = get_communicator()
    costs = make_costs()
    run = train(costs, comm)
    every = comm.allgather({k: v for k, v in run.items() if k != "params"})
    params = comm.allgather(run["params"])
    assert all(np.array_equal(p, params[0]) for p in params), "ranks ended with different models"
    selector = BucketSelector(costs, batch_size=BATCH, seed=SEED)
    for epoch in range(EPOCHS):
        per_rank = [r["batches"][epoch] for r in every]
        assert all(len(b) == run["lengths"][epoch] for b in per_rank), [len(b) for b in per_rank]
        flat = [i for rank in per_rank for b in rank for i in b]
        assert sorted(flat) == list(range(N)), f"epoch {epoch}: examples missing or repeated"
        for rank_batches, rank_sizes in zip(per_rank, (r["sizes"][epoch] for r in every)):
            for b, size in zip(rank_batches, rank_sizes):
                assert size == len(b) * costs[b].max() <= selector.max_cost_, (b, size)
    sizes = np.array([r["sizes"][0] for r in every], dtype=np.float64).T  # (steps, ranks)
    assert np.array_equal(sizes, selector.step_costs(0, comm.size))
    gap = np.median((sizes.max(1) - sizes.min(1)) / sizes.max(1))
    assert gap <= 0.10, f"the median step's ranks differ by {gap:.1%} in padded tokens"
    check_resume(costs, comm, run["batches"][1], epoch=1, stop=5)
    if comm.rank == 0:
        result = {
            "comm": type(comm).__name__,
            "world_size": comm.size,
            "lengths": run["lengths"],
            "median_gap": float(gap),
        }
        with open(out + ".json", "w") as f:
            json.dump(result, f)


def torch_worker(out: str) -> None:
    init_torch_distributed_from_mpi(timeout=60)  # torchrun's variables: env:// rendezvous
    job(out)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    out, opts = sys.argv[1], sys.argv[2:]
    if "--torch" in opts:
        # no torch ops in the parent before the fork (OpenMP's threads do not survive it)
        spawn_torch(torch_worker, int(opts[opts.index("--torch") + 1]), out)
    else:
        init_torch_distributed_from_mpi(timeout=60)
        job(out)
        torch.distributed.destroy_process_group()
