"""What a sampler, a trainer integration or the CLI may read about a selector without
knowing its class: :class:`SelectorCapabilities`, declared once per class.

A class states what it changes of its base's capabilities where it is defined, as keywords
of its class statement (``class OnlineSelector(Selector, online=True,
uses_feedback=True)``); ``selector.capabilities()`` returns them. A class whose
capabilities depend on the instance (a wrapper's follow the selector it wraps) overrides
:meth:`Capabilities.capabilities` with ``dataclasses.replace(super().capabilities(), ...)``.

Nothing is inferred from what a class overrides: one that overrides ``observe`` or
``iter_batches`` and keeps, undeclared, a value 0.1 would have inferred otherwise is warned
at its definition. The flags' former attributes (``selector.online``,
``Selector.uses_feedback``) read the declaration; a class that still sets one (0.1's way) is
folded into it, with a ``DeprecationWarning``.
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from batchsel.core.callers import user_stacklevel
from batchsel.core.checks import check_int

#: the feedback a selector may read (``observe``'s keywords)
FEEDBACK_KINDS = ("losses", "logits", "embeddings")
#: how examples may be assigned to ranks (``Selector(partition=...)``)
PARTITIONS = ("random", "submodular")

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class SelectorCapabilities:
    """What a selector can do and what it needs from the training loop: the defaults are
    those of a plain selector that plans each epoch from its data alone.

    Built by a class's declaration (keywords of its class statement); bad values are refused
    there (``TypeError``, ``ValueError``). Lists are stored as tuples.

    Attributes
    ----------
    online : bool, default False
        Draws batch after batch from the feedback (the online kind): no plan is made in
        advance, and ``SelectionBatchSampler(weighted=True)`` is refused.
    partitions : tuple of str, default ("random",)
        The ``partition`` kinds the selector supports, of ``("random", "submodular")``
        (``"submodular"`` needs embeddings or a graph).
    uses_feedback : bool, default False
        ``observe`` changes later batches: a distributed sampler then all-gathers the
        feedback so every rank's selector sees the same (gathering what is not needed costs
        a collective; not gathering what is needed makes the ranks' plans diverge).
    feedback_fields : tuple of str, default ("losses", "logits", "embeddings")
        The feedback ``observe`` reads: a sampler drops the rest before sharing it, and
        shares nothing (no collective) for a call that gives none of these.
    supports_start : bool, default True
        ``iter_batches(epoch, rank, world_size, start=t)`` yields exactly the batches from
        number ``t`` on without drawing the earlier ones again (resume); else a sampler
        skips the first ``t``.
    epoch_lengths_vary : bool, default False
        The number of batches differs between epochs (dynamic pruning):
        ``num_batches(world_size, epoch)`` gives each epoch's, known before the epoch
        starts, and the selector's ``epochs`` is the run it was built for.
    weighted_plans : bool, default False
        The plans carry per-example weights that belong in the loss (weighted coresets,
        dynamic pruning's up-weighting): ``SelectionBatchSampler(weighted=True)``.
    full_batches : bool, default False
        Every batch holds ``batch_size`` examples but an epoch's last, as
        ``BatchSampler``'s: then ``SelectionBatchSampler(drop_last=True)`` may drop that one.
    variable_batch_size : bool, default False
        The batches' sizes follow a cost budget rather than ``batch_size`` (cost-balanced
        batches): ``batch_size`` is then the most a batch may hold.
    default_prefetch : int, default 0
        ``SelectionBatchSampler``'s ``prefetch`` when none is given: how many batches ahead
        of the loop this selector's batches are selected (the feedback lag); 1 where a
        batch's selection is not trivial and one step of lag costs nothing measurable.
    feedback_per_epoch : bool, default False
        ``observe`` only matters to the next epoch's plan and applies feedback example by
        example, order kept (dynamic and score-based pruning): a sampler holds the feedback
        back until the next epoch is planned and hands each run of it over in one call.
    unplanned_params : tuple of str, default ()
        ``get_params`` entries that do not change the batches (where a cache lives), left
        out of ``fingerprint`` so that ranks may differ in them.
    elastic_resume : bool, default True
        A state saved on another number of ranks loads: the rest of its epoch is dealt
        over the new ranks (a planned epoch's batches, whole) or drawn by them (an online
        selector, which then defines ``examples_drawn`` and ``rejoin``). False where a
        step's batches belong together across the ranks that drew them.
    micro_batches_per_step : int, default 1
        Each rank's batches come in groups of this many per optimizer step (gradient
        accumulation), and the plan's weights already carry the step's normalization: the
        loss of a micro-batch is ``weighted_loss``'s *sum*, added over the group as it is,
        not divided by the group's size. A trainer integration accumulates over exactly
        this many batches and leaves the loss unscaled.

    Example
    -------
    >>> caps = SelectorCapabilities(uses_feedback=True, feedback_fields=["losses"])
    >>> caps.feedback_fields, dataclasses.replace(caps, online=True).online
    (('losses',), True)
    >>> SelectorCapabilities(feedback_fields=("loss",))
    Traceback (most recent call last):
    ...
    ValueError: feedback_fields must be names of ('losses', 'logits', 'embeddings'), got ('loss',)
    """

    online: bool = False
    partitions: tuple[str, ...] = ("random",)
    uses_feedback: bool = False
    feedback_fields: tuple[str, ...] = FEEDBACK_KINDS
    supports_start: bool = True
    epoch_lengths_vary: bool = False
    weighted_plans: bool = False
    full_batches: bool = False
    variable_batch_size: bool = False
    default_prefetch: int = 0
    feedback_per_epoch: bool = False
    unplanned_params: tuple[str, ...] = ()
    elastic_resume: bool = True
    micro_batches_per_step: int = 1

    def __post_init__(self) -> None:
        allowed = {"partitions": PARTITIONS, "feedback_fields": FEEDBACK_KINDS}
        for field in dataclasses.fields(self):
            name, value = field.name, getattr(self, field.name)
            if isinstance(field.default, bool):
                if not isinstance(value, (bool, np.bool_)):
                    raise TypeError(f"{name} must be True or False, got {value!r}")
                value = bool(value)
            elif isinstance(field.default, int):
                value = check_int(value, name, minimum=0)
            else:  # a tuple of names; a lone string is the classic ("losses") slip
                if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                    raise TypeError(f"{name} must be a tuple of names, got {value!r}")
                value = tuple(value)
                if name in allowed and not set(value) <= set(allowed[name]):
                    raise ValueError(f"{name} must be names of {allowed[name]}, got {value!r}")
            object.__setattr__(self, name, value)


#: the capabilities' names
FIELDS = tuple(f.name for f in dataclasses.fields(SelectorCapabilities))
#: the former attribute names: each field's own, and ``_unplanned_params`` (the sampler read it)
ATTRIBUTES = {**{name: name for name in FIELDS}, "_unplanned_params": "unplanned_params"}
_NAMES = frozenset(ATTRIBUTES)


class _Flag(Generic[T]):
    """One capability read as the attribute of its name (the API before
    ``capabilities()``): on a class, its declaration; on a selector, ``capabilities()``.
    Setting it on a selector still works, with a ``DeprecationWarning``."""

    def __init__(self, field: str | None = None) -> None:
        self.field = field or ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.field = self.field or name

    def __get__(self, obj: Any, owner: Any = None) -> T:
        if obj is None:
            return getattr(owner._declared_capabilities, self.field)
        return getattr(obj.capabilities(), self.field)

    def __set__(self, obj: Any, value: T) -> None:
        warnings.warn(
            f"setting {type(obj).__name__}.{self.name} on a selector is deprecated: declare it where the "
            f"class is defined (class {type(obj).__name__}(..., {self.field}=...)) or, where it depends on "
            f"the instance, override capabilities()",
            DeprecationWarning,
            stacklevel=user_stacklevel(),
        )
        change: dict[str, Any] = {self.field: value}
        checked = getattr(SelectorCapabilities(**change), self.field)
        obj.__dict__.setdefault("_capability_overrides", {})[self.field] = checked


class Capabilities:
    """The capabilities of a selector: :meth:`capabilities`, declared once per class as
    keywords of its class statement (what it changes of its base's), and, for the code
    written before it, each flag as an attribute of its name.

    Example
    -------
    >>> import warnings
    >>> from batchsel.selectors import RandomSelector
    >>> class Reads(RandomSelector, uses_feedback=True, feedback_fields=("losses",)):
    ...     def observe(self, indices, losses=None, logits=None, embeddings=None):
    ...         pass
    >>> Reads(10, 2).capabilities().uses_feedback, Reads.full_batches, RandomSelector.uses_feedback
    (True, True, False)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     class Undeclared(RandomSelector):
    ...         def observe(self, indices, losses=None, logits=None, embeddings=None):
    ...             pass
    >>> Undeclared.uses_feedback, str(caught[0].message).split(":")[0]
    (False, 'Undeclared overrides observe but does not declare uses_feedback')
    """

    #: what this class declares (its base's, with its own keywords), set on each subclass
    _declared_capabilities: ClassVar[SelectorCapabilities] = SelectorCapabilities()

    online: _Flag[bool] = _Flag()
    partitions: _Flag[tuple[str, ...]] = _Flag()
    uses_feedback: _Flag[bool] = _Flag()
    feedback_fields: _Flag[tuple[str, ...]] = _Flag()
    supports_start: _Flag[bool] = _Flag()
    epoch_lengths_vary: _Flag[bool] = _Flag()
    weighted_plans: _Flag[bool] = _Flag()
    full_batches: _Flag[bool] = _Flag()
    variable_batch_size: _Flag[bool] = _Flag()
    default_prefetch: _Flag[int] = _Flag()
    feedback_per_epoch: _Flag[bool] = _Flag()
    unplanned_params: _Flag[tuple[str, ...]] = _Flag()
    elastic_resume: _Flag[bool] = _Flag()
    micro_batches_per_step: _Flag[int] = _Flag()
    _unplanned_params: _Flag[tuple[str, ...]] = _Flag("unplanned_params")

    def capabilities(self) -> SelectorCapabilities:
        """What this selector can do and needs from the training loop: its class's
        declaration (and, for code written before it, the flags a class or the selector
        sets as attributes).

        Returns
        -------
        SelectorCapabilities
            Frozen; ``dataclasses.replace`` gives a changed copy.
        """
        declared = type(self)._declared_capabilities
        changes = _set_outside(self)
        return dataclasses.replace(declared, **changes) if changes else declared

    def __init_subclass__(cls, **kwargs: Any) -> None:
        declared = {name: kwargs.pop(name) for name in list(kwargs) if name in FIELDS}
        try:
            super().__init_subclass__(**kwargs)
        except TypeError as error:
            if not kwargs:
                raise
            raise TypeError(
                f"{cls.__name__}: unknown capabilities {sorted(kwargs)}; the capabilities are {FIELDS}"
            ) from error
        base = next(vars(b)["_declared_capabilities"] for b in cls.__mro__[1:] if "_declared_capabilities" in vars(b))
        legacy = _fold_class_attributes(cls, declared)
        cls._declared_capabilities = dataclasses.replace(base, **legacy, **declared)
        if "capabilities" not in cls.__dict__:  # a class with its own capabilities() states them there
            _warn_undeclared(cls, base, {*declared, *legacy})

    @classmethod
    def _overrides(cls, name: str) -> bool:
        """Whether ``cls`` defines ``name`` over one it inherits."""
        return name in cls.__dict__ and any(name in vars(base) for base in cls.__mro__[1:])


def _set_outside(selector: Any) -> dict[str, Any]:
    """The flags set outside the declaration, as 0.1 set them: a class attribute assigned
    after the class was made, a property of a flag's name, or an attribute of the selector."""
    found: dict[str, Any] = {}
    seen: set[str] = set()
    for klass in type(selector).__mro__:
        if klass is Capabilities:  # below it, only the flags themselves
            break
        for name in (_NAMES & klass.__dict__.keys()) - seen:  # nearly always none
            seen.add(name)
            if not isinstance(klass.__dict__[name], _Flag):
                found[ATTRIBUTES[name]] = getattr(selector, name)
    overrides = selector.__dict__.get("_capability_overrides")
    if overrides:
        found.update(overrides)
    return found


def _fold_class_attributes(cls: type, declared: dict[str, Any]) -> dict[str, Any]:
    """The flags ``cls`` sets as class attributes (0.1's declaration), taken out of the
    class into its declaration, each with a ``DeprecationWarning``; properties are left
    (read when ``capabilities()`` is asked)."""
    legacy: dict[str, Any] = {}
    for name, field in ATTRIBUTES.items():
        value = cls.__dict__.get(name)
        if name not in cls.__dict__ or isinstance(value, _Flag):
            continue
        if field in declared or field in legacy:
            raise TypeError(f"{cls.__name__} declares {field} twice: keep the class keyword {field}=...")
        fix = (
            f"override capabilities() (dataclasses.replace(super().capabilities(), {field}=...))"
            if hasattr(value, "__get__")
            else f"declare it where the class is defined: class {cls.__name__}(..., {field}={value!r})"
        )
        warnings.warn(
            f"{cls.__name__} sets the class attribute {name}, which batchsel reads from "
            f"capabilities() since 0.2: {fix}",
            DeprecationWarning,
            stacklevel=user_stacklevel(),
        )
        if not hasattr(value, "__get__"):
            legacy[field] = value
            delattr(cls, name)
    return legacy


def _warn_undeclared(cls: Any, base: SelectorCapabilities, stated: set[str]) -> None:
    """Warn where ``cls`` overrides ``observe`` or ``iter_batches`` and keeps, undeclared,
    its base's ``uses_feedback`` / ``supports_start`` where 0.1 inferred the other value."""
    if cls._overrides("observe") and "uses_feedback" not in stated and not base.uses_feedback:
        warnings.warn(
            f"{cls.__name__} overrides observe but does not declare uses_feedback: it keeps its base's "
            f"False, so a sampler does not share its feedback across ranks. Declare it where the class is defined: class {cls.__name__}(..., "
            f"uses_feedback=True) (uses_feedback=False where observe does not change the batches)",
            UserWarning,
            stacklevel=user_stacklevel(),
        )
    if cls._overrides("iter_batches") and "supports_start" not in stated:
        try:
            takes_start = "start" in inspect.signature(cls.iter_batches).parameters
        except (TypeError, ValueError):  # a builtin or a callable object without a signature
            takes_start = False
        if takes_start != base.supports_start:
            warnings.warn(
                f"{cls.__name__} overrides iter_batches, which {'takes' if takes_start else 'has no'} "
                f"start, but does not declare supports_start: it keeps its base's {base.supports_start}. "
                f"Declare it where the class is defined: class {cls.__name__}(..., supports_start={takes_start})",
                UserWarning,
                stacklevel=user_stacklevel(),
            )


__all__ = ["Capabilities", "SelectorCapabilities", "FEEDBACK_KINDS", "FIELDS", "PARTITIONS"]
