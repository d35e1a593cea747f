"""Two ranks under torchrun (gloo), each reading its own shards through StreamBatches with
2 DataLoader workers; an all-reduce per step; each rank saves the ids it trained on."""

import sys

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from batchsel import StreamBatches


def shard_examples(shard):
    for i in range(shard * 50, (shard + 1) * 50):
        yield {"id": i, "x": float(i)}


def collate(examples):
    return torch.tensor([e["x"] for e in examples])


def main(out: str) -> None:
    dist.init_process_group("gloo")
    stream = StreamBatches(
        list(range(8)),
        8,
        open_shard=shard_examples,
        collate_fn=collate,
        buffer_size=40,
        mode="loss-rank",
        batches_per_epoch=20,
    )  # rank and world size from the process group
    seen = []
    for epoch in range(2):
        stream.set_epoch(epoch)
        for batch in DataLoader(stream, batch_size=None, num_workers=2):
            total = torch.tensor([batch.data.sum().item()])
            dist.all_reduce(total)  # a rank with fewer batches would leave the other waiting here
            stream.observe(batch, losses=batch.data % 5)
            if epoch == 0:
                seen.extend(batch.ids)
    np.save(f"{out}.rank{dist.get_rank()}.npy", np.array(seen))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
