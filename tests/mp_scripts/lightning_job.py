"""A tiny Lightning run with BatchselCallback, used in one process by tests/integrations/test_lightning.py
and, as ``python lightning_job.py OUT``, on 2 CPU processes (strategy="ddp": Lightning
starts rank 1 by running this script again).

The DDP run builds the sampler in the module's ``__init__`` (before any process group
exists), trains 2 epochs with a checkpoint every step, then resumes a fresh module from
the checkpoint in the middle of epoch 1 with DataLoader workers, and finally checks that
``use_distributed_sampler=True`` is refused. Each rank writes ``OUT.rank{r}.json``.

``python lightning_job.py OUT CKPT`` resumes a fresh module on 2 processes from ``CKPT``,
a checkpoint of a one-process run (elastic resume), and writes what each rank trained."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import warnings

import lightning.pytorch as pl
import torch
from common import exit_after_result
from torch.utils.data import DataLoader, TensorDataset

from batchsel import RandomSelector, SelectionBatchSampler
from batchsel.integrations.lightning import BatchselCallback
from batchsel.selectors import LossRankSelector

N, BATCH, DIM, CLASSES = 40, 4, 4, 3


def data(n: int = N) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(
        torch.randn(n, DIM, generator=g), torch.randint(0, CLASSES, (n,), generator=g), torch.arange(n)
    )


def make_selector(kind: str, n: int = N):
    if kind == "random":
        return RandomSelector(n, BATCH, seed=3)
    return LossRankSelector(n, BATCH, seed=3, pressure=20.0)


class Tiny(pl.LightningModule):
    """A Linear layer; the sampler is built in ``__init__`` (the case where ranks used to
    train identical batches) and records the batches it trains on."""

    def __init__(self, kind: str = "random", workers: int = 0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(DIM, CLASSES)
        self.sampler = SelectionBatchSampler(make_selector(kind))
        self.workers = workers
        self.seen: list[tuple[int, list[int]]] = []

    def train_dataloader(self) -> DataLoader:
        return DataLoader(data(), batch_sampler=self.sampler, num_workers=self.workers)

    def training_step(self, batch, batch_idx):
        x, y, idx = batch
        losses = torch.nn.functional.cross_entropy(self.layer(x), y, reduction="none")
        self.seen.append((self.current_epoch, idx.tolist()))
        return {"loss": losses.mean(), "losses": losses.detach()}

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


def trainer(root: str, epochs: int = 2, every: int | None = None, devices: int = 1, **kw) -> pl.Trainer:
    callbacks = [BatchselCallback()]
    if every:
        callbacks.append(
            pl.callbacks.ModelCheckpoint(
                dirpath=os.path.join(root, "ckpt"), every_n_train_steps=every, save_top_k=-1, filename="{step}"
            )
        )
    return pl.Trainer(
        accelerator="cpu",
        devices=devices,
        max_epochs=epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=bool(every),
        default_root_dir=root,
        callbacks=callbacks,
        **kw,
    )


def quiet() -> None:
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)


def resume_elsewhere(out: str, checkpoint: str) -> None:
    """Two processes resume a one-process run's checkpoint and finish its epochs."""
    quiet()
    resumed = Tiny("random")
    ddp = dict(devices=2, strategy="ddp", use_distributed_sampler=False)
    trainer(os.path.dirname(out), **ddp).fit(resumed, ckpt_path=checkpoint)
    rank = int(torch.distributed.get_rank())
    with open(f"{out}.rank{rank}.json", "w") as f:
        json.dump({"rank": rank, "resumed": resumed.seen, "len": len(resumed.sampler)}, f)


def main(out: str) -> None:
    start = time.monotonic()
    quiet()
    root = os.path.dirname(out)
    ddp = dict(devices=2, strategy="ddp", use_distributed_sampler=False)
    model = Tiny("random")
    trainer(root, every=1, **ddp).fit(model)
    rank = int(torch.distributed.get_rank())
    result = {
        "rank": rank,
        "world": torch.distributed.get_world_size(),
        "seen": model.seen,
        "sampler_world": model.sampler.world_size,
        "len": len(model.sampler),
        "checkpoints": os.path.join(root, "ckpt"),
    }
    per_rank = len(model.sampler)
    # resume a fresh module (and sampler) in the middle of epoch 1, with DataLoader workers
    step = per_rank + 2
    resumed = Tiny("random", workers=2)
    t0 = time.monotonic()
    trainer(root, **ddp).fit(resumed, ckpt_path=os.path.join(root, "ckpt", f"step={step}.ckpt"))
    result.update(resume_step=step, resumed=resumed.seen, seconds={"fit": t0 - start, "resume": time.monotonic() - t0})
    try:
        trainer(root, epochs=1, devices=2, strategy="ddp").fit(Tiny())
        result["refused"] = None
    except ValueError as e:
        result["refused"] = str(e)
    with open(f"{out}.rank{rank}.json", "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    if len(sys.argv) > 2:
        resume_elsewhere(sys.argv[1], sys.argv[2])
    else:
        main(sys.argv[1])
    exit_after_result()
