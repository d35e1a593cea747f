"""What a sampler, a trainer integration or the CLI may read about a selector without
knowing its class: the capability flags, with their defaults. Each kind of selector
(offline, online, per-epoch feedback) sets what it changes once; a subclass sets only what
genuinely differs, and what it overrides implies some of them."""

from __future__ import annotations

import inspect
from typing import Any


class Capabilities:
    """The capability flags of a selector, as class attributes: the defaults of a plain
    selector that plans each epoch from its data alone (every kind and selector class
    overrides what it changes).

    A subclass that overrides ``observe`` without declaring ``uses_feedback`` gets True; one
    that overrides ``iter_batches`` without declaring ``supports_start`` gets whether that
    ``iter_batches`` takes ``start``. ``unplanned_params`` and its former name
    ``_unplanned_params`` read the same, whichever a subclass sets.

    Example
    -------
    >>> from batchsel.selectors import RandomSelector
    >>> class Reads(RandomSelector):
    ...     def observe(self, indices, losses=None, logits=None, embeddings=None):
    ...         pass
    >>> RandomSelector.uses_feedback, Reads.uses_feedback
    (False, True)
    >>> class Cached(Capabilities):
    ...     _unplanned_params = ("cache_dir",)
    >>> Cached.unplanned_params
    ('cache_dir',)
    """

    #: True for selectors that draw batch after batch from the feedback (the online kind)
    online: bool = False
    #: partition kinds a subclass supports ("submodular" needs embeddings or a graph)
    partitions: tuple[str, ...] = ("random",)
    #: True when ``observe`` changes later batches: a distributed sampler then
    #: all-gathers the feedback so every rank's selector sees the same. A subclass that
    #: overrides ``observe`` without declaring it gets True (gathering what is not needed
    #: costs a collective; not gathering what is needed makes the ranks' plans diverge).
    uses_feedback: bool = False
    #: the feedback ``observe`` reads, of ``("losses", "logits", "embeddings")``: a
    #: sampler drops the rest before sharing it, and shares nothing (no collective) for a
    #: call that gives none of these
    feedback_fields: tuple[str, ...] = ("losses", "logits", "embeddings")
    #: True when ``iter_batches(epoch, rank, world_size, start=t)`` yields exactly the
    #: batches from number ``t`` on without drawing the earlier ones again (resume). A
    #: subclass that overrides ``iter_batches`` without declaring it gets True when its
    #: ``iter_batches`` takes ``start``.
    supports_start: bool = True
    #: True when the number of batches differs between epochs (dynamic pruning): then
    #: ``num_batches(world_size, epoch)`` gives each epoch's, known before the epoch starts,
    #: and the selector's ``epochs`` is the run it was built for
    epoch_lengths_vary: bool = False
    #: True when the plans carry per-example weights that belong in the loss (weighted
    #: coresets, dynamic pruning's up-weighting): ``SelectionBatchSampler(weighted=True)``
    weighted_plans: bool = False
    #: True when every batch holds ``batch_size`` examples but an epoch's last, as
    #: ``BatchSampler``'s: then ``SelectionBatchSampler(drop_last=True)`` may drop that one
    full_batches: bool = False
    #: True when the batches' sizes follow a cost budget rather than ``batch_size``
    #: (cost-balanced batches): ``batch_size`` is then the most a batch may hold
    variable_batch_size: bool = False
    #: ``SelectionBatchSampler``'s ``prefetch`` when none is given: how many batches ahead
    #: of the loop this selector's batches are selected (the feedback lag); 1 where a
    #: batch's selection is not trivial and one step of lag costs nothing measurable
    default_prefetch: int = 0
    #: True when ``observe`` only matters to the next epoch's plan and applies feedback
    #: example by example, order kept (dynamic and score-based pruning): a sampler holds the
    #: feedback back until the next epoch is planned and hands each run of it over in one
    #: call (one check and one update instead of one per step)
    feedback_per_epoch: bool = False
    #: ``get_params`` entries that do not change the batches (where a cache lives), left
    #: out of ``fingerprint`` so that ranks may differ in them
    unplanned_params: tuple[str, ...] = ()
    #: the former name of :attr:`unplanned_params` (the sampler read it): the same tuple
    _unplanned_params: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls._overrides("observe") and "uses_feedback" not in cls.__dict__:
            cls.uses_feedback = True
        if cls._overrides("iter_batches") and "supports_start" not in cls.__dict__:
            try:
                cls.supports_start = "start" in inspect.signature(cls.iter_batches).parameters  # type: ignore[attr-defined]
            except (TypeError, ValueError):  # a builtin or a callable object without a signature
                cls.supports_start = False
        if "unplanned_params" in cls.__dict__:
            cls._unplanned_params = cls.unplanned_params
        elif "_unplanned_params" in cls.__dict__:
            cls.unplanned_params = cls._unplanned_params

    @classmethod
    def _overrides(cls, name: str) -> bool:
        """Whether ``cls`` defines ``name`` over one it inherits (the interface's own
        default, which reads no feedback, is not an override)."""
        return name in cls.__dict__ and any(name in vars(base) for base in cls.__mro__[1:])


__all__ = ["Capabilities"]
