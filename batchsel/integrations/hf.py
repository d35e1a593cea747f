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

Requires ``transformers`` and ``accelerate`` (``pip install 'batchsel[hf]'``; without them importing this
module raises ``ModuleNotFoundError`` naming the extra).
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

try:
    from transformers import Trainer, TrainerCallback, TrainerState
    from transformers.trainer import TRAINER_STATE_NAME
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint
except ImportError as exc:  # transformers, or the accelerate its Trainer needs, is missing
    raise ModuleNotFoundError(
        f"batchsel.integrations.hf needs transformers and accelerate: pip install 'batchsel[hf]' ({exc})",
        name=exc.name,
    ) from exc

from batchsel.loop.sampler import SelectionBatchSampler
from batchsel.loop.sampler.profile import SelectorProfile
from batchsel.selectors.selector import Selector

logger = logging.getLogger(__name__)

STATE_FILE = "batchsel_sampler.pt"
# the Trainer's methods that size its run and epochs (overridden where epoch lengths vary)
_EPOCH_HOOKS = ("set_initial_training_values", "_init_training_state", "_run_epoch")


def _with_accumulation(args: tuple, kwargs: dict, steps: int, name: str) -> tuple[tuple, dict]:
    """The Trainer's ``(args, kwargs)`` with ``gradient_accumulation_steps=steps``: a
    selector that plans ``steps`` micro-batches per optimizer step sets it where it was
    left at 1 (in a copy of the ``TrainingArguments``); another value is refused."""
    if not hasattr(Trainer, "loss_is_scaled_for_ga"):
        import transformers

        raise ValueError(
            f"{name} sums its micro-batches' losses over the step, which the Trainer must not divide by "
            f"gradient_accumulation_steps: that needs Trainer.loss_is_scaled_for_ga (transformers >= 5), "
            f"this is {transformers.__version__}"
        )
    positional = len(args) > 1 and "args" not in kwargs
    training_args = args[1] if positional else kwargs.get("args")
    if training_args is None:
        raise ValueError(
            f"{name} trains {steps} micro-batches per optimizer step: pass "
            f"args=TrainingArguments(..., gradient_accumulation_steps={steps})"
        )
    have = training_args.gradient_accumulation_steps
    if have == steps:
        return args, kwargs
    if have != 1:
        raise ValueError(
            f"gradient_accumulation_steps={have}, but {name} trains {steps} micro-batches per optimizer "
            f"step: set gradient_accumulation_steps={steps}, or leave it at 1 and the selector's is taken"
        )
    training_args = copy.copy(training_args)  # the caller's arguments stay as they were
    training_args.gradient_accumulation_steps = steps
    logger.info("gradient_accumulation_steps=%d, from %s", steps, name)
    if positional:
        return (args[0], training_args, *args[2:]), kwargs
    return args, {**kwargs, "args": training_args}


class IndexedDataset(Dataset):
    """Items of a dict-style dataset with their own position added under ``key``; a key
    ``(index, weight)`` (a weighted batch sampler's) adds the weight under ``weight_key``.

    Parameters
    ----------
    dataset : map-style dataset of dicts
        The Trainer's training dataset (model inputs by name).
    key : str
        The name each item's position is added under.
    weight_key : str, default "batchsel_weight"
        The name a weighted key's weight is added under.

    Example
    -------
    >>> IndexedDataset([{"x": 1.0}, {"x": 2.0}], "idx")[1]
    {'x': 2.0, 'idx': 1}
    >>> IndexedDataset([{"x": 1.0}, {"x": 2.0}], "idx", "w")[(1, 2.0)]
    {'x': 2.0, 'idx': 1, 'w': 2.0}
    """

    #: takes the ``(index, weight)`` keys of a weighted sampler (the sampler checks it)
    accepts_weighted_keys = True

    def __init__(self, dataset: Any, key: str, weight_key: str = "batchsel_weight") -> None:
        self.dataset = dataset
        self.key = key
        self.weight_key = weight_key

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: Any) -> dict[str, Any]:
        index, weight = key if isinstance(key, tuple) else (key, None)
        item = self.dataset[index]
        if not isinstance(item, Mapping):
            raise TypeError(
                f"the Trainer's dataset must give dicts (model inputs by name), got a "
                f"{type(item).__name__} for item {index}"
            )
        extra = {} if weight is None else {self.weight_key: float(weight)}
        return {**item, self.key: index, **extra}


class _EpochLoader(DataLoader):
    """A DataLoader with accelerate's ``set_epoch``, which the Trainer calls every epoch."""

    def set_epoch(self, epoch: int) -> None:
        self.batch_sampler.set_epoch(epoch)


def per_example_feedback(outputs: Any, labels: Any) -> dict[str, torch.Tensor]:
    """Per-example cross-entropy losses (and 2-D logits, detached) from a model's outputs:
    logits of shape (B, C) with labels (B,), or token logits (B, T, C) with labels (B, T)
    (mean over the tokens not labelled -100). The losses keep their gradient: a weighted
    selector's training loss is their weighted mean.

    Parameters
    ----------
    outputs : Mapping or tuple
        The model's outputs: ``logits`` by name, or second in a tuple.
    labels : torch.Tensor
        The batch's labels.

    Returns
    -------
    dict of torch.Tensor
        ``losses`` (one per example), and ``logits`` for 2-D logits; ``ValueError``
        without logits or labels, or for other shapes.

    Example
    -------
    >>> out = per_example_feedback({"logits": torch.zeros(2, 3)}, torch.tensor([0, 2]))
    >>> sorted(out), tuple(out["losses"].shape)
    (['logits', 'losses'], (2,))
    """
    logits = outputs.get("logits") if isinstance(outputs, Mapping) else None
    if logits is None and isinstance(outputs, (tuple, list)) and len(outputs) > 1:
        logits = outputs[1]
    if logits is None or labels is None:
        raise ValueError(
            "per-example feedback needs the model's logits and the batch's labels; pass "
            "feedback=fn(outputs, labels) -> {'losses': ...} to the Trainer"
        )
    logits = logits.float()
    if logits.dim() == 2 and labels.dim() == 1:
        return {
            "losses": torch.nn.functional.cross_entropy(logits, labels, reduction="none"),
            "logits": logits.detach(),
        }
    if logits.dim() == 3 and labels.dim() == 2:
        tokens = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, reduction="none", ignore_index=-100)
        counted = (labels != -100).sum(dim=1).clamp(min=1)
        return {"losses": tokens.sum(dim=1) / counted}
    raise ValueError(
        f"logits of shape {tuple(logits.shape)} with labels of shape {tuple(labels.shape)}: pass "
        f"feedback=fn(outputs, labels) -> {{'losses': per_example_losses}} to the Trainer"
    )


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
        epoch, steps = self.trainer._batchsel_position(state.global_step)
        done = steps * args.gradient_accumulation_steps
        if done == 0 and state.global_step > 0 and epoch > sampler.epoch:
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

    Parameters
    ----------
    *args : Any
        The Trainer's positional arguments.
    selector : Selector
        Any :class:`~batchsel.selectors.Selector` built on the training dataset (its
        ``batch_size`` is the per-device batch size, a :class:`~batchsel.BucketSelector`'s
        batches fill its cost budget; ``per_device_train_batch_size`` is not used for
        training batches).
    index_column : str, default "batchsel_index"
        The key under which each example's position reaches the training step (and is
        removed before the model's forward).
    feedback : callable, optional
        ``fn(outputs, labels) -> dict`` of per-example ``losses`` / ``logits`` /
        ``embeddings`` for selectors that use feedback; default
        :func:`per_example_feedback` (cross-entropy from the logits).
    sampler_kwargs : dict, optional
        Passed to :class:`SelectionBatchSampler` (``sync_every``, ...); ``drop_last``
        defaults to ``args.dataloader_drop_last``.
    **kwargs : Any
        The Trainer's keyword arguments.

    See Also
    --------
    BatchselTrainer : ``transformers.Trainer`` with this mixin.

    Example
    -------
    >>> from transformers import Trainer
    >>> class MyTrainer(BatchselTrainerMixin, Trainer):
    ...     pass
    >>> # MyTrainer(model=model, args=args, train_dataset=data, selector=RandomSelector(len(data), 16))
    """

    def __init__(
        self,
        *args: Any,
        selector: Selector,
        index_column: str = "batchsel_index",
        feedback: Callable[[Any, Any], dict] | None = None,
        sampler_kwargs: dict | None = None,
        **kwargs: Any,
    ) -> None:
        profile = SelectorProfile(selector)  # TypeError for anything but a selector
        if profile.epoch_lengths_vary and not all(hasattr(Trainer, name) for name in _EPOCH_HOOKS):
            import transformers

            raise ValueError(
                f"{profile.name}'s epochs differ in length; sizing the Trainer's run "
                f"from them needs transformers >= 5 (Trainer.{' / '.join(_EPOCH_HOOKS)}), this is "
                f"{transformers.__version__}"
            )
        steps = profile.capabilities.micro_batches_per_step
        if steps > 1:  # the Trainer accumulates over exactly the selector's micro-batches
            args, kwargs = _with_accumulation(args, kwargs, steps, f"{profile.name}(accumulation={steps})")
        # set before the Trainer's __init__, which may already look at the signature columns
        self.batchsel_selector = selector
        self._batchsel_profile = profile  # what kind of selector it is: the one place that reads its flags
        self.batchsel_index_column = str(index_column)
        self.batchsel_weight_column = f"{self.batchsel_index_column}_weight"
        self.batchsel_feedback = feedback or per_example_feedback
        self.batchsel_sampler_kwargs = dict(sampler_kwargs or {})
        self.batchsel_sampler: SelectionBatchSampler | None = None
        self._batchsel_checkpoint: str | None = None
        self._batchsel_saved_step = 0  # a restored checkpoint's global step, where it left an epoch to finish
        self._batchsel_batch: torch.Tensor | None = None  # indices of the training step running now
        self._batchsel_weights: torch.Tensor | None = None  # and their weights (weighted plans)
        super().__init__(*args, **kwargs)
        if steps > 1:  # weighted_loss sums over the step already: the Trainer must not divide it
            self.loss_is_scaled_for_ga = True
        self.add_callback(_SaveSamplerState(self))

    # -- data -----------------------------------------------------------------------------
    def _set_signature_columns_if_needed(self) -> None:
        super()._set_signature_columns_if_needed()  # type: ignore[misc]
        for column in (self.batchsel_index_column, self.batchsel_weight_column):
            if column not in self._signature_columns:
                self._signature_columns.append(column)

    def get_train_dataloader(self) -> DataLoader:
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        dataset, collator = self.train_dataset, self.data_collator
        selector = self.batchsel_selector
        if len(dataset) != selector.num_examples:
            raise ValueError(
                f"the selector was built for {selector.num_examples} examples, the train_dataset has {len(dataset)}"
            )
        if self._batchsel_profile.variable_batch_size:
            # its batches hold as many examples as its cost budget allows: no size to compare
            logger.info(
                "training batches are %s's, sized by its cost budget; per_device_train_batch_size=%d is not used",
                self._batchsel_profile.name,
                self.args.per_device_train_batch_size,
            )
        elif self.args.per_device_train_batch_size != selector.batch_size:
            logger.warning(
                "training batches have the selector's batch_size=%d, not per_device_train_batch_size=%d",
                selector.batch_size,
                self.args.per_device_train_batch_size,
            )
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
        workers = self.args.dataloader_num_workers
        extra = {"prefetch_factor": self.args.dataloader_prefetch_factor} if workers > 0 else {}
        kwargs = {
            "drop_last": self.args.dataloader_drop_last,
            "weighted": self._batchsel_profile.weighted_plans,
            # the loader built below fetches this many batches ahead (torch's prefetch_factor defaults to 2)
            "workers_ahead": workers * (extra.get("prefetch_factor") or 2) if workers > 0 else 0,
            **self.batchsel_sampler_kwargs,
        }
        sampler = SelectionBatchSampler(selector, **kwargs)
        self.batchsel_sampler = sampler
        if self._batchsel_checkpoint is not None:
            self._batchsel_restore(self._batchsel_checkpoint)
        # Not through accelerator.prepare: BatchSamplerShard would shard the rank's own
        # batches again, and DataLoaderShard fetches one batch ahead.
        indexed = IndexedDataset(dataset, self.batchsel_index_column, self.batchsel_weight_column)
        return _EpochLoader(
            indexed,
            batch_sampler=sampler,
            collate_fn=collator,
            num_workers=workers,
            pin_memory=self.args.dataloader_pin_memory,
            persistent_workers=self.args.dataloader_persistent_workers and workers > 0,
            **extra,
        )

    # -- the run's length -------------------------------------------------------------------
    def _batchsel_update_steps(self, epoch: int) -> int:
        """Optimizer steps of ``epoch`` (its batches over gradient accumulation)."""
        return max(-(-self.batchsel_sampler.batches_in_epoch(epoch) // self.args.gradient_accumulation_steps), 1)

    def _batchsel_position(self, global_step: int) -> tuple[int, int]:
        """(epoch, optimizer steps done in it) after ``global_step`` steps of the run."""
        profile = self._batchsel_profile
        if not profile.epoch_lengths_vary:
            return divmod(global_step, self._batchsel_update_steps(0))
        epoch = 0
        while epoch < profile.epochs and global_step >= self._batchsel_update_steps(epoch):
            global_step -= self._batchsel_update_steps(epoch)
            epoch += 1
        return epoch, global_step

    def set_initial_training_values(self, args: Any, dataloader: DataLoader) -> tuple:
        # The Trainer sizes the run (and its learning-rate schedule) as epochs x the first
        # epoch's length; where epoch lengths differ (dynamic pruning) use the exact sum.
        values = list(super().set_initial_training_values(args, dataloader))  # type: ignore[misc]
        profile = self._batchsel_profile
        interrupted = self._batchsel_interrupted()
        if interrupted is not None and args.max_steps <= 0:
            # an epoch saved on another number of processes: the run ends after the steps
            # the checkpoint counted, those left of that epoch here, and the later epochs
            epoch, done = interrupted
            epochs = profile.epochs if profile.epoch_lengths_vary else int(np.ceil(args.num_train_epochs))
            left = self._batchsel_update_steps(epoch) - done // args.gradient_accumulation_steps
            later = sum(self._batchsel_update_steps(e) for e in range(epoch + 1, epochs))
            values[-1] = self._batchsel_saved_step + left + later
            return tuple(values)
        if not profile.epoch_lengths_vary:
            return tuple(values)
        per_epoch = [self._batchsel_update_steps(e) for e in range(profile.epochs)]
        total = sum(per_epoch)
        if args.max_steps > 0:
            if args.max_steps > total:
                raise ValueError(
                    f"max_steps={args.max_steps} is past the {total} steps of the {profile.epochs} "
                    f"epochs {profile.name} was built for"
                )
            max_steps, epochs = args.max_steps, int(np.searchsorted(np.cumsum(per_epoch), args.max_steps) + 1)
        else:
            if args.num_train_epochs != profile.epochs:
                raise ValueError(
                    f"num_train_epochs={args.num_train_epochs} disagrees with the epochs="
                    f"{profile.epochs} {profile.name} was built for (its schedule "
                    f"depends on it)"
                )
            max_steps, epochs = total, profile.epochs
        # (num_train_epochs, num_update_steps_per_epoch, ..., steps_in_epoch, max_steps)
        values[0], values[-1] = epochs, max_steps
        return tuple(values)

    def _init_training_state(
        self,
        max_steps: int,
        num_update_steps_per_epoch: int,
        num_train_epochs: int,
        resume_from_checkpoint: Any,
        trial: Any,
    ) -> tuple[int, int]:
        epochs_trained, steps_trained = super()._init_training_state(  # type: ignore[misc]
            max_steps, num_update_steps_per_epoch, num_train_epochs, resume_from_checkpoint, trial
        )
        interrupted = self._batchsel_interrupted()
        if interrupted is not None:  # the global step counts the old world's epochs: the state says where
            epochs_trained, steps_trained = interrupted
        elif self._batchsel_profile.epoch_lengths_vary and self.state.global_step > 0:
            epochs_trained, done = self._batchsel_position(self.state.global_step)
            steps_trained = 0 if self.args.ignore_data_skip else done * self.args.gradient_accumulation_steps
        return epochs_trained, steps_trained

    def _batchsel_interrupted(self) -> tuple[int, int] | None:
        """``(epoch, batches done)`` where the restored state left an epoch saved on another
        number of processes to finish here; None otherwise."""
        sampler = self.batchsel_sampler
        if sampler is None or sampler.interrupted_epoch is None or sampler.resume_point is None:
            return None
        return sampler.resume_point

    def _run_epoch(self, *args: Any, **kwargs: Any) -> Any:
        # each epoch its own length (the Trainer passes the first epoch's to every epoch)
        sampler = self.batchsel_sampler
        varies = self._batchsel_profile.epoch_lengths_vary or (
            sampler is not None and sampler.interrupted_epoch is not None
        )
        if varies and "epoch" in kwargs:
            kwargs["steps_in_epoch"] = sampler.batches_in_epoch(kwargs["epoch"])
            kwargs["num_update_steps_per_epoch"] = self._batchsel_update_steps(kwargs["epoch"])
        return super()._run_epoch(*args, **kwargs)  # type: ignore[misc]

    # -- resume ---------------------------------------------------------------------------
    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        checkpoint = resume_from_checkpoint
        if checkpoint is True:  # the Trainer resolves it the same way
            checkpoint = get_last_checkpoint(self.args.output_dir)
        self._batchsel_checkpoint = checkpoint or None
        try:
            return super().train(resume_from_checkpoint, *args, **kwargs)  # type: ignore[misc]
        finally:
            self._batchsel_checkpoint = None

    def _batchsel_restore(self, checkpoint: str) -> None:
        path = os.path.join(checkpoint, STATE_FILE)
        if not os.path.exists(path):
            logger.warning("%s has no %s: the sampler starts its epoch from the beginning", checkpoint, STATE_FILE)
            return
        if self.args.ignore_data_skip:
            logger.warning(
                "ignore_data_skip=True: the Trainer restarts the epoch's data, so the sampler state in %s "
                "is not restored",
                checkpoint,
            )
            return
        state = torch.load(path, weights_only=True)
        saved_on = int(state.get("world_size", 1)) if isinstance(state, dict) else 1
        sampler = self.batchsel_sampler
        # The Trainer skips the finished batches itself (skip_first_batches): the sampler
        # yields placeholders for them instead of skipping them a second time.
        sampler.load_state_dict(state, placeholders=True)
        if sampler.interrupted_epoch is not None:
            # an epoch saved on another number of processes (now or at an earlier resume): the
            # Trainer would place the resumed step from the global step and this world's epoch
            # length, so the state's place and the checkpoint's step count size the run instead
            trainer_state = os.path.join(checkpoint, TRAINER_STATE_NAME)
            self._batchsel_saved_step = TrainerState.load_from_json(trainer_state).global_step
        if saved_on != sampler.world_size:
            logger.info(
                "%s was saved by %d process(es), this run has %d: epoch %s continues here (%d batches of it done)",
                checkpoint,
                saved_on,
                sampler.world_size,
                *sampler.resume_point,
            )

    # -- feedback ---------------------------------------------------------------------------
    def training_step(self, model: torch.nn.Module, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        inputs = dict(inputs)
        self._batchsel_batch = inputs.pop(self.batchsel_index_column, None)
        self._batchsel_weights = inputs.pop(self.batchsel_weight_column, None)
        try:
            return super().training_step(model, inputs, *args, **kwargs)  # type: ignore[misc]
        finally:
            self._batchsel_batch = self._batchsel_weights = None

    def prediction_step(self, model: torch.nn.Module, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        # an evaluation set may carry the index column too; it is no model input
        inputs = {k: v for k, v in inputs.items() if k not in (self.batchsel_index_column, self.batchsel_weight_column)}
        return super().prediction_step(model, inputs, *args, **kwargs)  # type: ignore[misc]

    def compute_loss(
        self, model: torch.nn.Module, inputs: dict[str, Any], return_outputs: bool = False, **kwargs: Any
    ) -> Any:
        indices, weights, sampler = self._batchsel_batch, self._batchsel_weights, self.batchsel_sampler
        uses_feedback = self._batchsel_profile.uses_feedback
        # only the training step sets indices: evaluation losses never reach the selector
        if indices is None or sampler is None or (weights is None and not uses_feedback):
            return super().compute_loss(model, inputs, return_outputs=return_outputs, **kwargs)  # type: ignore[misc]
        self._batchsel_batch = self._batchsel_weights = None  # once per training step
        labels = inputs.get("labels")  # compute_loss may pop it
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True, **kwargs)  # type: ignore[misc]
        feedback = self.batchsel_feedback(outputs, labels)
        if weights is not None:  # the plan's weights (InfoBatch, coresets) scale each example's loss
            losses = feedback.get("losses")
            if not isinstance(losses, torch.Tensor) or not losses.requires_grad:
                raise ValueError(
                    "weighted batches train on the weighted mean of the feedback's per-example "
                    "'losses', which must keep their gradient (do not detach them)"
                )
            loss = sampler.selector.weighted_loss(losses, weights.to(losses))
        if uses_feedback:
            # every rank runs one training step per batch, so observe's collective stays in step
            sampler.observe(
                indices, **{k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in feedback.items()}
            )
        return (loss, outputs) if return_outputs else loss


class BatchselTrainer(BatchselTrainerMixin, Trainer):  # type: ignore[misc]
    """``transformers.Trainer`` with :class:`BatchselTrainerMixin`:
    ``BatchselTrainer(model=..., args=..., train_dataset=..., selector=selector)``.

    Parameters
    ----------
    *args : Any
        The Trainer's positional arguments.
    **kwargs : Any
        The Trainer's keyword arguments and :class:`BatchselTrainerMixin`'s (``selector``,
        ``index_column``, ``feedback``, ``sampler_kwargs``).

    Example
    -------
    >>> issubclass(BatchselTrainer, Trainer)
    True
    """


__all__ = ["BatchselTrainerMixin", "BatchselTrainer", "IndexedDataset", "per_example_feedback"]
