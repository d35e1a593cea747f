"""Hugging Face ``Trainer``: batches from any batchsel selector, on one process or under
``torchrun``.

One line: ``class MyTrainer(BatchselTrainerMixin, Trainer)`` (or :class:`BatchselTrainer`),
then ``MyTrainer(model=..., args=..., train_dataset=..., selector=selector)``. What the
mixin does, and why a plain ``DataLoader(batch_sampler=...)`` goes wrong in the Trainer:

- the training DataLoader is not passed through ``accelerator.prepare``: accelerate would
  wrap the sampler in ``BatchSamplerShard`` and give each rank every second batch of its
  already-sharded list (``len(loader) == len(sampler)`` here), and its one-batch look-ahead
  would draw batch t+1 before batch t's losses are observed (here, with
  ``gradient_accumulation_steps=1`` and no DataLoader workers, a batch is drawn after the
  previous one's feedback);
- the sampler is built when training starts (the process group exists) and gets
  ``set_epoch`` every epoch;
- each example's position in the dataset reaches the training step under
  ``index_column`` (added to the Trainer's signature columns, so
  ``remove_unused_columns=True`` keeps it) and is taken out before the model's forward;
- per-example losses (and 2-D logits) go to ``sampler.observe`` from training steps
  only, never from evaluation or prediction;
- checkpoints hold every rank's sampler state, and a resumed run skips the finished
  batches once (the Trainer's own ``skip_first_batches`` drops placeholders).

Requires ``transformers`` (``pip install batchsel[hf]``).
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any, Callable

import torch
from torch.utils.data import DataLoader, Dataset
from transformers import Trainer, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from batchsel.selectors.base import Selector

from .sampler import SelectionBatchSampler

logger = logging.getLogger(__name__)

STATE_FILE = "batchsel_sampler.pt"


class IndexedDataset(Dataset):
    """Items of a dict-style dataset with their own position added under ``key``.

    >>> IndexedDataset([{"x": 1.0}, {"x": 2.0}], "idx")[1]
    {'x': 2.0, 'idx': 1}
    """

    def __init__(self, dataset: Any, key: str) -> None:
        self.dataset = dataset
        self.key = key

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict[str, Any]:
        item = self.dataset[index]
        if not isinstance(item, Mapping):
            raise TypeError(f"the Trainer's dataset must give dicts (model inputs by name), got a "
                            f"{type(item).__name__} for item {index}")
        return {**item, self.key: index}


class _EpochLoader(DataLoader):
    """A DataLoader with accelerate's ``set_epoch``, which the Trainer calls every epoch."""

    def set_epoch(self, epoch: int) -> None:
        self.batch_sampler.set_epoch(epoch)


def per_example_feedback(outputs: Any, labels: Any) -> dict[str, torch.Tensor]:
    """Per-example cross-entropy losses (and 2-D logits) from a model's outputs: logits of
    shape (B, C) with labels (B,), or token logits (B, T, C) with labels (B, T) (mean
    over the tokens not labelled -100)."""
    logits = outputs.get("logits") if isinstance(outputs, Mapping) else None
    if logits is None and isinstance(outputs, (tuple, list)) and len(outputs) > 1:
        logits = outputs[1]
    if logits is None or labels is None:
        raise ValueError("per-example feedback needs the model's logits and the batch's labels; pass "
                         "feedback=fn(outputs, labels) -> {'losses': ...} to the Trainer")
    logits = logits.detach().float()
    if logits.dim() == 2 and labels.dim() == 1:
        return {"losses": torch.nn.functional.cross_entropy(logits, labels, reduction="none"), "logits": logits}
    if logits.dim() == 3 and labels.dim() == 2:
        tokens = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, reduction="none",
                                                   ignore_index=-100)
        counted = (labels != -100).sum(dim=1).clamp(min=1)
        return {"losses": tokens.sum(dim=1) / counted}
    raise ValueError(f"logits of shape {tuple(logits.shape)} with labels of shape {tuple(labels.shape)}: pass "
                     f"feedback=fn(outputs, labels) -> {{'losses': per_example_losses}} to the Trainer")


class _SaveSamplerState(TrainerCallback):
    """Writes every rank's sampler state into each checkpoint (``on_save`` runs on every
    rank right after the Trainer wrote the checkpoint; the gathering is collective)."""

    def __init__(self, trainer: "BatchselTrainerMixin") -> None:
        self.trainer = trainer

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        sampler = self.trainer.batchsel_sampler
        if sampler is None:
            return
        # Batches finished in this epoch, counted as the Trainer counts them when it
        # resumes; the sampler has handed out more (gradient-accumulation prefetch).
        per_epoch = max(-(-len(sampler) // args.gradient_accumulation_steps), 1)
        done = (state.global_step % per_epoch) * args.gradient_accumulation_steps
        if done == 0 and state.global_step > 0:
            done = len(sampler)  # the end of an epoch
        all_ranks = sampler.world_size > 1 and sampler.comm is not None
        saved = sampler.state_dict(batches_done=min(done, len(sampler)), all_ranks=all_ranks)
        if args.should_save:  # rank 0
            folder = os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
            os.makedirs(folder, exist_ok=True)
            tmp = os.path.join(folder, f".{STATE_FILE}.tmp")
            torch.save(saved, tmp)
            os.replace(tmp, os.path.join(folder, STATE_FILE))  # never a half-written state


class BatchselTrainerMixin:
    """Makes a ``transformers.Trainer`` train on a batchsel selector's batches.

    Extra keyword arguments (the rest go to the Trainer):

    selector:
        Any :class:`~batchsel.selectors.Selector` built on the training dataset (its
        ``batch_size`` is the per-device batch size; ``per_device_train_batch_size`` is
        not used for training batches).
    index_column:
        The key under which each example's position reaches the training step (and is
        removed before the model's forward).
    feedback:
        ``fn(outputs, labels) -> dict`` of per-example ``losses`` / ``logits`` /
        ``embeddings`` for selectors that use feedback; default
        :func:`per_example_feedback` (cross-entropy from the logits).
    sampler_kwargs:
        Passed to :class:`SelectionBatchSampler` (``sync_every``, ...); ``drop_last``
        defaults to ``args.dataloader_drop_last``.

    Example
    -------
    >>> from transformers import Trainer
    >>> class MyTrainer(BatchselTrainerMixin, Trainer):
    ...     pass
    >>> # MyTrainer(model=model, args=args, train_dataset=data, selector=RandomSelector(len(data), 16))
    """

    def __init__(self, *args: Any, selector: Selector, index_column: str = "batchsel_index",
                 feedback: Callable[[Any, Any], dict] | None = None, sampler_kwargs: dict | None = None,
                 **kwargs: Any) -> None:
        if not isinstance(selector, Selector):
            raise TypeError(f"selector must be a batchsel Selector, got {type(selector).__name__}")
        # set before the Trainer's __init__, which may already look at the signature columns
        self.batchsel_selector = selector
        self.batchsel_index_column = str(index_column)
        self.batchsel_feedback = feedback or per_example_feedback
        self.batchsel_sampler_kwargs = dict(sampler_kwargs or {})
        self.batchsel_sampler: SelectionBatchSampler | None = None
        self._batchsel_checkpoint: str | None = None
        self._batchsel_batch: torch.Tensor | None = None  # indices of the training step running now
        super().__init__(*args, **kwargs)
        self.add_callback(_SaveSamplerState(self))

    # -- data -----------------------------------------------------------------------------
    def _set_signature_columns_if_needed(self) -> None:
        super()._set_signature_columns_if_needed()
        if self.batchsel_index_column not in self._signature_columns:
            self._signature_columns.append(self.batchsel_index_column)

    def get_train_dataloader(self) -> DataLoader:
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        dataset, collator = self.train_dataset, self.data_collator
        selector = self.batchsel_selector
        if len(dataset) != selector.num_examples:
            raise ValueError(f"the selector was built for {selector.num_examples} examples, the train_dataset has "
                             f"{len(dataset)}")
        if self.args.per_device_train_batch_size != selector.batch_size:
            logger.warning("training batches have the selector's batch_size=%d, not per_device_train_batch_size=%d",
                           selector.batch_size, self.args.per_device_train_batch_size)
        try:
            import datasets
            is_hf_dataset = isinstance(dataset, datasets.Dataset)
        except ImportError:
            is_hf_dataset = False
        if is_hf_dataset:
            dataset = self._remove_unused_columns(dataset, description="training")
        else:
            collator = self._get_collator_with_removed_columns(collator, description="training")
        # Built now, not in __init__: under torchrun the process group exists by now.
        kwargs = {"drop_last": self.args.dataloader_drop_last, **self.batchsel_sampler_kwargs}
        sampler = SelectionBatchSampler(selector, **kwargs)
        self.batchsel_sampler = sampler
        if self._batchsel_checkpoint is not None:
            self._batchsel_restore(self._batchsel_checkpoint)
        workers = self.args.dataloader_num_workers
        extra = {"prefetch_factor": self.args.dataloader_prefetch_factor} if workers > 0 else {}
        # Not through accelerator.prepare: BatchSamplerShard would shard the rank's own
        # batches again, and DataLoaderShard fetches one batch ahead.
        return _EpochLoader(IndexedDataset(dataset, self.batchsel_index_column), batch_sampler=sampler,
                            collate_fn=collator, num_workers=workers, pin_memory=self.args.dataloader_pin_memory,
                            persistent_workers=self.args.dataloader_persistent_workers and workers > 0, **extra)

    # -- resume ---------------------------------------------------------------------------
    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        checkpoint = resume_from_checkpoint
        if checkpoint is True:  # the Trainer resolves it the same way
            checkpoint = get_last_checkpoint(self.args.output_dir)
        self._batchsel_checkpoint = checkpoint or None
        try:
            return super().train(resume_from_checkpoint, *args, **kwargs)
        finally:
            self._batchsel_checkpoint = None

    def _batchsel_restore(self, checkpoint: str) -> None:
        path = os.path.join(checkpoint, STATE_FILE)
        if not os.path.exists(path):
            logger.warning("%s has no %s: the sampler starts its epoch from the beginning", checkpoint, STATE_FILE)
            return
        if self.args.ignore_data_skip:
            logger.warning("ignore_data_skip=True: the Trainer restarts the epoch's data, so the sampler state in %s "
                           "is not restored", checkpoint)
            return
        # The Trainer skips the finished batches itself (skip_first_batches): the sampler
        # yields placeholders for them instead of skipping them a second time.
        self.batchsel_sampler.load_state_dict(torch.load(path, weights_only=True), placeholders=True)

    # -- feedback ---------------------------------------------------------------------------
    def training_step(self, model: torch.nn.Module, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        inputs = dict(inputs)
        self._batchsel_batch = inputs.pop(self.batchsel_index_column, None)
        try:
            return super().training_step(model, inputs, *args, **kwargs)
        finally:
            self._batchsel_batch = None

    def prediction_step(self, model: torch.nn.Module, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        # an evaluation set may carry the index column too; it is no model input
        inputs = {k: v for k, v in inputs.items() if k != self.batchsel_index_column}
        return super().prediction_step(model, inputs, *args, **kwargs)

    def compute_loss(self, model: torch.nn.Module, inputs: dict[str, Any], return_outputs: bool = False,
                     **kwargs: Any) -> Any:
        indices, sampler = self._batchsel_batch, self.batchsel_sampler
        # only the training step sets indices: evaluation losses never reach the selector
        if indices is None or sampler is None or not sampler.selector.uses_feedback:
            return super().compute_loss(model, inputs, return_outputs=return_outputs, **kwargs)
        self._batchsel_batch = None  # once per training step
        labels = inputs.get("labels")  # compute_loss may pop it
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, **kwargs)
        # every rank runs one training step per batch, so observe's collective stays in step
        sampler.observe(indices, **self.batchsel_feedback(outputs, labels))
        return (loss, outputs) if return_outputs else loss


class BatchselTrainer(BatchselTrainerMixin, Trainer):
    """``transformers.Trainer`` with :class:`BatchselTrainerMixin`:
    ``BatchselTrainer(model=..., args=..., train_dataset=..., selector=selector)``."""


__all__ = ["BatchselTrainerMixin", "BatchselTrainer", "IndexedDataset", "per_example_feedback"]
