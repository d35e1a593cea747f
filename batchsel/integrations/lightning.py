"""PyTorch Lightning: one callback wires a :class:`SelectionBatchSampler` into a ``Trainer``.

The training ``DataLoader`` takes the sampler as ``batch_sampler``, and::

    trainer = Trainer(callbacks=[BatchselCallback(sampler)], use_distributed_sampler=False)

The callback sets the epoch, hands ``training_step``'s per-example losses to the sampler,
checkpoints every rank's sampler state and resumes mid-epoch exactly. What it checks and
how: docs/guide/lightning-callback.md.
"""

from __future__ import annotations

import logging
from typing import Any

try:
    from lightning.pytorch import Callback
except ImportError:
    try:  # the older package name
        from pytorch_lightning import Callback  # type: ignore[assignment]
    except ImportError as exc:  # neither: name the extra, not the older package
        raise ModuleNotFoundError(
            "batchsel.integrations.lightning needs Lightning, which is not installed: "
            "pip install 'batchsel[lightning]'",
            name="lightning",
        ) from exc

from torch.utils.data import DataLoader

from batchsel.loop.sampler import SelectionBatchSampler

logger = logging.getLogger(__name__)

FEEDBACK_KEYS = ("losses", "logits", "embeddings")


def _find_samplers(obj: Any, depth: int = 2) -> list[SelectionBatchSampler]:
    """SelectionBatchSamplers held by ``obj``: itself, a DataLoader's batch sampler, or
    (down to ``depth`` levels) attributes, dict values and list items."""
    if isinstance(obj, SelectionBatchSampler):
        return [obj]
    if isinstance(obj, DataLoader):
        return [obj.batch_sampler] if isinstance(obj.batch_sampler, SelectionBatchSampler) else []
    if depth == 0:
        return []
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        items = list(obj)
    else:
        # only plain instance attributes: properties of a LightningModule may compute
        # things (or raise) before the Trainer is attached
        items = list(getattr(obj, "__dict__", {}).values())
    found: list[SelectionBatchSampler] = []
    for item in items:
        for s in _find_samplers(item, depth - 1):
            if all(s is not f for f in found):
                found.append(s)
    return found


class BatchselCallback(Callback):
    """Wires a :class:`SelectionBatchSampler` into a Lightning ``Trainer`` (1 or more
    processes): epochs, feedback, exact mid-epoch resume of every rank.

    Parameters
    ----------
    sampler : SelectionBatchSampler, optional
        The training DataLoader's batch sampler. ``None``: found among the
        LightningModule's / DataModule's attributes at ``setup``, else in
        ``trainer.train_dataloader`` when training starts.
    verify : bool, default True
        Compare every rank's plan fingerprint when training starts (a collective;
        ``RuntimeError`` if ranks were built from different data or settings).

    Example
    -------
    >>> from batchsel import RandomSelector
    >>> sampler = SelectionBatchSampler(RandomSelector(100, batch_size=10, seed=0))
    >>> callback = BatchselCallback(sampler)
    >>> # DataLoader(data, batch_sampler=sampler); Trainer(callbacks=[callback], use_distributed_sampler=False)
    """

    def __init__(self, sampler: SelectionBatchSampler | None = None, verify: bool = True) -> None:
        if sampler is not None and not isinstance(sampler, SelectionBatchSampler):
            raise TypeError(f"sampler must be a SelectionBatchSampler, got {type(sampler).__name__}")
        self.sampler = sampler
        self._given = sampler is not None
        self.verify = bool(verify)
        self._done = 0  # batches of the current epoch finished by the training loop
        self._restored: dict[str, Any] | None = None  # the checkpoint's state this run resumed from
        self._warned_no_feedback = False

    # -- set-up -------------------------------------------------------------------------
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        connector = getattr(trainer, "_accelerator_connector", None)
        if trainer.world_size > 1 and getattr(connector, "use_distributed_sampler", False):
            raise ValueError(
                f"BatchselCallback: Trainer(use_distributed_sampler=True) on {trainer.world_size} processes would put "
                f"a DistributedSampler in place of the SelectionBatchSampler, which already gives each rank its own "
                f"batches; build the Trainer with use_distributed_sampler=False"
            )
        if self.sampler is None:
            found = _find_samplers(pl_module) + _find_samplers(getattr(trainer, "datamodule", None))
            if len(found) == 1:
                self.sampler = found[0]
            elif len(found) > 1:
                raise ValueError(
                    f"BatchselCallback found {len(found)} SelectionBatchSamplers on the module and "
                    f"data module; pass the training one: BatchselCallback(sampler)"
                )
        if self.sampler is not None:  # before configure_optimizers sizes a schedule from it
            self._accumulate(trainer, pl_module, adopt=True)

    def _accumulate(self, trainer: Any, pl_module: Any, adopt: bool) -> None:
        """Make the Trainer accumulate over the selector's micro-batches per step (a
        ``StepBalancedSelector(accumulation=A)``): ``accumulate_grad_batches`` left at 1
        becomes A (``adopt``); another value is refused, naming A. Manual optimization
        steps its optimizers itself (Lightning refuses an accumulation there)."""
        steps = self.sampler.selector.capabilities().micro_batches_per_step
        have = trainer.accumulate_grad_batches
        name = f"{type(self.sampler.selector).__name__}(accumulation={steps})"
        if steps > 1 and not pl_module.automatic_optimization and adopt:
            logger.warning(
                "%s under manual optimization: step the optimizer after every %d batches and backpropagate "
                "selector.weighted_loss(losses, w) as it is (it sums the step; do not divide it by %d)",
                name,
                steps,
                steps,
            )
        if steps == 1 or have == steps or not pl_module.automatic_optimization:
            return
        if have != 1 or not adopt:
            raise ValueError(
                f"accumulate_grad_batches={have}, but {name} trains {steps} micro-batches per optimizer step: "
                f"build the Trainer with accumulate_grad_batches={steps}"
                + ("" if adopt else ", or pass the sampler: BatchselCallback(sampler), and it is set for you")
            )
        trainer.accumulate_grad_batches = steps
        logger.info("accumulate_grad_batches=%d, from %s", steps, name)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        in_loader = _find_samplers(trainer.train_dataloader)
        if not self._given and len(in_loader) == 1 and in_loader[0] is not self.sampler:
            # built in train_dataloader (none, or another one, found at setup)
            self.sampler = in_loader[0]
            if self._restored is not None:
                self.sampler.load_state_dict(self._restored["sampler"])
                # Lightning created the epoch's iterator before this hook; DataLoader
                # workers have already fetched from the sampler's old position
                fetcher = getattr(trainer.fit_loop, "_data_fetcher", None)
                if fetcher is None:
                    raise RuntimeError(
                        "BatchselCallback could not restart the data iterator after restoring the "
                        "sampler; pass the sampler: BatchselCallback(sampler)"
                    )
                iter(fetcher)
        elif self.sampler is None:
            raise ValueError(
                f"BatchselCallback: the training DataLoader has {len(in_loader)} SelectionBatchSamplers "
                f"(as batch_sampler); pass the one to use: BatchselCallback(sampler)"
            )
        elif in_loader and all(s is not self.sampler for s in in_loader):
            logger.warning(
                "BatchselCallback's sampler is not the training DataLoader's batch_sampler: epochs, "
                "feedback and checkpoints go to a sampler that does not feed the training"
            )
        self._accumulate(trainer, pl_module, adopt=False)  # a sampler found only now: the optimizers are built
        if self.verify:
            self.sampler.verify()

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        # automatic optimization divides each micro-batch's loss by accumulate_grad_batches;
        # a plan whose weights sum the step (StepBalancedSelector) is undone here, once per step
        steps = 1 if self.sampler is None else self.sampler.selector.capabilities().micro_batches_per_step
        if steps > 1 and pl_module.automatic_optimization:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad.mul_(steps)

    # -- the training loop --------------------------------------------------------------
    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._done = 0
        if not self._given:  # reload_dataloaders_every_n_epochs may have built a new sampler
            in_loader = _find_samplers(trainer.train_dataloader)
            if len(in_loader) == 1:
                self.sampler = in_loader[0]

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        # Lightning's batch_idx continues from the restored progress after a resume
        self._done = batch_idx + 1
        sampler = self.sampler
        if sampler is None or not sampler.selector.capabilities().uses_feedback:
            return
        feedback = {k: outputs[k] for k in FEEDBACK_KEYS if isinstance(outputs, dict) and outputs.get(k) is not None}
        if not feedback:
            if not self._warned_no_feedback:
                logger.warning(
                    "%s uses feedback, but training_step returned none of %s: return e.g. "
                    "{'loss': loss.mean(), 'losses': loss.detach()} (per-example losses)",
                    type(sampler.selector).__name__,
                    FEEDBACK_KEYS,
                )
                self._warned_no_feedback = True
            return
        # every rank calls this hook once per batch, so the collective in observe stays in step
        sampler.observe(sampler.batch_indices(batch_idx), **feedback)

    # -- checkpoints --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Every rank's sampler state (collective on several ranks: Lightning builds the
        checkpoint on every rank and rank 0 writes it)."""
        if self.sampler is None:
            return {} if self._restored is None else dict(self._restored)
        all_ranks = self.sampler.world_size > 1 and self.sampler.comm is not None
        # batches the loop finished, not those DataLoader workers fetched ahead (Lightning
        # checkpoints after a batch ends; 0 only before the epoch's first batch)
        done = self._done or None
        return {"sampler": self.sampler.state_dict(batches_done=done, all_ranks=all_ranks)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "sampler" not in state_dict:
            return
        self._restored = state_dict
        if self.sampler is not None:  # before the resumed epoch's iterator exists
            self.sampler.load_state_dict(state_dict["sampler"])


__all__ = ["BatchselCallback"]
