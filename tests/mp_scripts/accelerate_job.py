"""The pattern users write by hand, under torchrun with 2 processes (tests/project/test_faults.py):

    accelerator.prepare(DataLoader(dataset, batch_sampler=SelectionBatchSampler(...)))

accelerate wraps the batch sampler in BatchSamplerShard, which would keep every second of
the rank's own batches. Each rank prints what it got: the error, or the examples seen."""

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

from batchsel import RandomSelector
from batchsel.integrations import SelectionBatchSampler

accelerator = Accelerator(cpu=True)
sampler = SelectionBatchSampler(RandomSelector(200, 10, seed=0))
loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(200)), batch_sampler=sampler))
seen = []
try:
    for (batch,) in loader:
        seen += batch.tolist()
except RuntimeError as exc:
    print(f"rank {accelerator.process_index} raised RuntimeError: {exc}", flush=True)
else:
    print(f"rank {accelerator.process_index} saw {len(seen)} examples", flush=True)
