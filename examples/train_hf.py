"""Train an MLP on scikit-learn's digits with the Hugging Face Trainer, on batches chosen
by a batchsel selector (loss-rank here; any selector works the same way).

    python examples/train_hf.py                                   # one process
    torchrun --nproc_per_node 2 examples/train_hf.py              # 2 CPU processes (gloo)

What batchsel adds to a Trainer script: ``BatchselTrainer`` (or
``class MyTrainer(BatchselTrainerMixin, Trainer)``) and ``selector=...``. Per-example
losses are computed from the model's logits and labels and reach the selector from
training steps only.
"""

import argparse
import tempfile

import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from transformers import TrainingArguments

from batchsel.integrations.hf import BatchselTrainer
from batchsel.selectors import LossRankSelector


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))

    def forward(self, x, labels=None):
        logits = self.net(x)
        return {"logits": logits, "loss": None if labels is None else F.cross_entropy(logits, labels)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    digits = load_digits()
    x, y = torch.tensor(digits.data / 16, dtype=torch.float32), torch.tensor(digits.target)
    data = [{"x": x[i], "labels": int(y[i])} for i in range(len(y))]
    model = MLP()
    with tempfile.TemporaryDirectory() as out:
        training = TrainingArguments(
            output_dir=out,
            num_train_epochs=args.epochs,
            per_device_train_batch_size=args.batch_size,
            lr_scheduler_type="constant",
            save_strategy="no",
            report_to=[],
            logging_strategy="no",
            use_cpu=True,
            disable_tqdm=True,
        )
        trainer = BatchselTrainer(
            model=model,
            args=training,
            train_dataset=data,
            optimizers=(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), None),
            selector=LossRankSelector(len(data), args.batch_size, seed=0),
        )
        trainer.train()
    if trainer.is_world_process_zero():
        with torch.no_grad():
            accuracy = (model(x)["logits"].argmax(1) == y).float().mean().item()
        print(
            f"train accuracy {accuracy:.3f} after {trainer.state.global_step} steps "
            f"on {trainer.args.world_size} process(es)"
        )


if __name__ == "__main__":
    main()
