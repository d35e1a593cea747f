"""A tiny Hugging Face Trainer run with BatchselTrainer, used in one process by
tests/integrations/test_hf.py and, as ``torchrun --nproc_per_node 2 hf_job.py OUT``, on 2 CPU
processes (gloo): 2 epochs with a checkpoint after step 6, then a fresh trainer resumed
from that checkpoint in the middle of epoch 1; with a random and a loss-rank selector.
``hf_job.py OUT --resume CHECKPOINT``: each rank resumes CHECKPOINT (saved by another
number of processes) and finishes the run. Each rank writes ``OUT.rank{r}.json``."""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings

import torch
from common import exit_after_result

from batchsel import RandomSelector
from batchsel.integrations.hf import BatchselTrainer

N, BATCH, DIM, CLASSES = 40, 4, 4, 3


class TinyModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(DIM, CLASSES)

    def forward(self, x, labels=None):
        logits = self.layer(x)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.cross_entropy(logits, labels)
        return out


def data(n: int = N) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, DIM, generator=g), torch.randint(0, CLASSES, (n,), generator=g)
    return [{"x": x[i], "labels": int(y[i])} for i in range(n)]


class Recording(BatchselTrainer):
    """Records the indices of every training step's batch, with the loader's length."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: list[list[int]] = []
        self.lengths: list[tuple[int, int]] = []
        self.weights: list[list[float]] = []
        self.lrs: list[float] = []

    def get_train_dataloader(self):
        loader = super().get_train_dataloader()
        self.lengths.append((len(loader), len(self.batchsel_sampler)))
        return loader

    def training_step(self, model, inputs, *args, **kwargs):
        self.seen.append(inputs[self.batchsel_index_column].tolist())
        if self.batchsel_weight_column in inputs:
            self.weights.append(inputs[self.batchsel_weight_column].tolist())
        out = super().training_step(model, inputs, *args, **kwargs)
        self.lrs.append(self.lr_scheduler.get_last_lr()[0])  # the rate the next step will use
        return out


def args(out: str, epochs: int = 2, save_steps: int | None = None, **kw):
    from transformers import TrainingArguments

    settings = {"learning_rate": 0.5, "lr_scheduler_type": "constant", **kw}
    return TrainingArguments(
        output_dir=out,
        num_train_epochs=epochs,
        per_device_train_batch_size=BATCH,
        optim="sgd",
        report_to=[],
        logging_strategy="no",
        save_strategy="steps" if save_steps else "no",
        save_steps=save_steps or 500,
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
        **settings,
    )


def quiet() -> None:
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    logging.getLogger("accelerate").setLevel(logging.ERROR)


def run_and_resume(root: str, make_selector, step: int) -> tuple[Recording, Recording]:
    """Train 2 epochs with a checkpoint every ``step`` steps, then resume a fresh trainer
    (fresh model, selector and sampler) from checkpoint-``step``."""
    first = Recording(
        model=TinyModel(), args=args(root, save_steps=step), train_dataset=data(), selector=make_selector()
    )
    first.train()
    resumed = Recording(model=TinyModel(), args=args(root), train_dataset=data(), selector=make_selector())
    resumed.train(resume_from_checkpoint=os.path.join(root, f"checkpoint-{step}"))
    return first, resumed


def infobatch(epochs: int = 4):
    from batchsel import InfoBatchSelector

    return InfoBatchSelector(N, BATCH, epochs=epochs, seed=3)


def run_pruned(root: str, step: int) -> tuple[Recording, Recording]:
    """InfoBatch (epochs of 10, 8, 8, 10 batches on one process) under a linear schedule
    sized by the Trainer, then resumed from checkpoint-``step`` (an epoch that prunes)."""
    kw = {"lr_scheduler_type": "linear", "learning_rate": 0.1}
    first = Recording(
        model=TinyModel(), args=args(root, epochs=4, save_steps=step, **kw), train_dataset=data(), selector=infobatch()
    )
    first.train()
    resumed = Recording(model=TinyModel(), args=args(root, epochs=4, **kw), train_dataset=data(), selector=infobatch())
    resumed.train(resume_from_checkpoint=os.path.join(root, f"checkpoint-{step}"))
    return first, resumed


def main(out: str) -> None:
    from batchsel.selectors import LossRankSelector

    quiet()
    root = os.path.dirname(out)
    step = 6  # epoch 1 (5 steps per epoch on 2 ranks), one batch done
    first, resumed = run_and_resume(os.path.join(root, "random"), lambda: RandomSelector(N, BATCH, seed=3), step)
    online, online_resumed = run_and_resume(
        os.path.join(root, "loss_rank"), lambda: LossRankSelector(N, BATCH, seed=3, pressure=20.0), step
    )
    pruned, pruned_resumed = run_pruned(os.path.join(root, "infobatch"), step=7)  # epoch 1: 5 + 2 steps
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    result = {
        "rank": rank,
        "world": world,
        "root": root,
        "seen": first.seen,
        "lengths": first.lengths,
        "resume_step": step,
        "resumed": resumed.seen,
        "online": online.seen,
        "online_resumed": online_resumed.seen,
        "observed": int(__import__("numpy").isfinite(online.batchsel_selector.losses_).sum()),
        "params": [p.detach().flatten().tolist() for p in first.model.parameters()],
        "pruned": pruned.seen,
        "pruned_resumed": pruned_resumed.seen,
        "pruned_weights": pruned.weights,
        "pruned_lrs": pruned.lrs,
        "pruned_resumed_lrs": pruned_resumed.lrs,
        "pruned_final_lr": pruned.lr_scheduler.get_last_lr()[0],
        "pruned_steps": pruned.state.global_step,
        "pruned_params": [p.detach().flatten().tolist() for p in pruned.model.parameters()],
    }
    with open(f"{out}.rank{rank}.json", "w") as f:
        json.dump(result, f)


def resume(out: str, checkpoint: str) -> None:
    """Finish the 2-epoch random run of ``checkpoint`` on this world (a linear schedule)."""
    quiet()
    kw = {"lr_scheduler_type": "linear", "learning_rate": 0.1}
    trainer = Recording(
        model=TinyModel(),
        args=args(os.path.join(os.path.dirname(out), "resumed"), **kw),
        train_dataset=data(),
        selector=RandomSelector(N, BATCH, seed=3),
    )
    trainer.train(resume_from_checkpoint=checkpoint)
    rank = torch.distributed.get_rank()
    final_lr = trainer.lr_scheduler.get_last_lr()[0]
    result = {"rank": rank, "resumed": trainer.seen, "final_lr": final_lr, "global_step": trainer.state.global_step}
    with open(f"{out}.rank{rank}.json", "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[2] == "--resume":
        resume(sys.argv[1], sys.argv[3])
    else:
        main(sys.argv[1])
    exit_after_result()
