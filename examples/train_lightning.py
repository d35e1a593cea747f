"""Train an MLP on scikit-learn's digits with PyTorch Lightning, on batches chosen by a
batchsel selector (loss-rank here; any selector works the same way).

    python examples/train_lightning.py               # one process
    python examples/train_lightning.py --devices 2   # DDP on 2 CPU processes (gloo)

What batchsel adds to a Lightning script: the DataLoader takes a SelectionBatchSampler as
``batch_sampler``, ``training_step`` also returns the per-example losses, and the Trainer
gets ``BatchselCallback()`` and ``use_distributed_sampler=False``.
"""

import argparse

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

from batchsel import SelectionBatchSampler
from batchsel.integrations.lightning import BatchselCallback
from batchsel.selectors import LossRankSelector


class Digits(pl.LightningModule):
    def __init__(self, batch_size: int) -> None:
        super().__init__()
        digits = load_digits()
        self.data = TensorDataset(torch.tensor(digits.data / 16, dtype=torch.float32), torch.tensor(digits.target))
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
        # built before the process group exists: the sampler reads rank and world size
        # when an epoch starts
        self.sampler = SelectionBatchSampler(LossRankSelector(len(self.data), batch_size, seed=0))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.data, batch_sampler=self.sampler)

    def training_step(self, batch, batch_idx):
        x, y = batch
        losses = F.cross_entropy(self.net(x), y, reduction="none")
        return {"loss": losses.mean(), "losses": losses.detach()}  # the selector ranks by these

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    model = Digits(args.batch_size)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=args.devices,
        max_epochs=args.epochs,
        callbacks=[BatchselCallback()],
        use_distributed_sampler=False,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
    )
    trainer.fit(model)
    if trainer.is_global_zero:
        x, y = model.data.tensors
        with torch.no_grad():
            accuracy = (model.net(x).argmax(1) == y).float().mean().item()
        print(f"train accuracy {accuracy:.3f} after {trainer.global_step} steps on {trainer.world_size} process(es)")


if __name__ == "__main__":
    main()
