"""RHO-LOSS's irreducible term in CandidateFilter's ``"rho"`` score: the ``"auto"`` weight
and the guard against a weak irreducible-loss model (docs: design/filters.md)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from batchsel.core.checks import check_number
from batchsel.loop.filters.checks import check_irreducible

# the filter's logger: the guard's warnings are the filter's
logger = logging.getLogger("batchsel.loop.filters")


class RhoSettings(NamedTuple):
    """CandidateFilter's settings of the irreducible term, checked (:func:`check_rho_settings`)."""

    losses: np.ndarray | None
    weight: float | str
    min_il_skill: float
    min_il_decisive: float
    reference_accuracy: float | None


def check_rho_settings(
    irreducible_losses: Any,
    irreducible_weight: float | str,
    score: str,
    min_il_skill: float,
    min_il_decisive: float,
    reference_accuracy: float | None,
) -> RhoSettings:
    """Check CandidateFilter's settings of the irreducible term.

    Parameters
    ----------
    irreducible_losses : array-like, IrreducibleLoss or None
        As the filter takes them (:func:`~batchsel.loop.filters.checks.check_irreducible`);
        ``score="rho"`` needs them.
    irreducible_weight : float or "auto"
        A weight >= 0, or ``"auto"``.
    score : str
        The filter's score.
    min_il_skill, min_il_decisive : float
        The guard's thresholds, in [0, 1].
    reference_accuracy : float or None
        In [0, 1] when given.

    Returns
    -------
    RhoSettings
        (``ValueError`` / ``TypeError`` naming the first setting that is wrong.)

    Example
    -------
    >>> check_rho_settings([0.1, 0.2], "auto", "rho", 0.3, 0.5, None).weight
    'auto'
    """
    losses = None if irreducible_losses is None else check_irreducible(irreducible_losses)
    weight = (
        irreducible_weight
        if isinstance(irreducible_weight, str) and irreducible_weight == "auto"
        else check_number(irreducible_weight, "irreducible_weight", low=0.0)
    )
    if score == "rho" and losses is None:
        raise ValueError("score='rho' needs irreducible_losses (an array, or a fitted IrreducibleLoss)")
    return RhoSettings(
        losses,
        weight,
        check_number(min_il_skill, "min_il_skill", low=0.0, high=1.0),
        check_number(min_il_decisive, "min_il_decisive", low=0.0, high=1.0),
        None
        if reference_accuracy is None
        else check_number(reference_accuracy, "reference_accuracy", low=0.0, high=1.0),
    )


def auto_weight(il: Any, losses: np.ndarray | None) -> tuple[float, float, np.ndarray | None]:
    """``irreducible_weight="auto"`` resolved from the evidence of label noise ``il`` sees.

    Parameters
    ----------
    il : IrreducibleLoss, array or None
        What the filter was given as ``irreducible_losses``; a fitted
        :class:`~batchsel.loop.irreducible.IrreducibleLoss` carries the evidence
        (``confident_disagreement_``, ``decisive_mask_``), an array none.
    losses : numpy.ndarray or None
        The irreducible losses, checked (one per example).

    Returns
    -------
    weight : float
        0.5 up to 7.5 % of confident disagreement, 1 from 15 %, linear in between.
    indecisive_trust : float
        The share of the irreducible term kept where the IL model is not decisive: the
        same ramp (1 when ``il`` has no ``decisive_mask_``).
    scored : numpy.ndarray or None
        ``losses`` with that share applied where the IL model is not decisive.

    Example
    -------
    >>> import numpy as np
    >>> auto_weight(np.zeros(3), np.zeros(3))[:2]  # an array: no evidence
    (0.5, 1.0)
    """
    evidence = getattr(il, "confident_disagreement_", None)
    ramp = 0.0 if evidence is None else min(1.0, max(0.0, (evidence - 0.075) / 0.075))
    decisive = getattr(il, "decisive_mask_", None)
    if decisive is None:
        return 0.5 + 0.5 * ramp, 1.0, losses
    # without evidence of label noise, an IL model's doubt says nothing about the label
    return 0.5 + 0.5 * ramp, ramp, losses * np.where(decisive, 1.0, ramp)


def guard_decision(
    il: Any,
    skill: float,
    weight: float,
    *,
    min_il_skill: float,
    min_il_decisive: float,
    reference_accuracy: float | None,
) -> tuple[str | None, float]:
    """The guard against a weak irreducible-loss model: what it does and the weight left.

    Its irreducible losses mostly score its own mistakes, not wrong labels, when its skill
    is below ``min_il_skill`` (near chance) or it is decisive on fewer than
    ``min_il_decisive`` of the examples: then uniform draws only (``"uniform"``). When it
    is less accurate than the trained model (``reference_accuracy``), its term is shrunk
    in proportion of the skills (``"downweight"``). Each decision is logged as a warning.

    Parameters
    ----------
    il : IrreducibleLoss
        The fitted IL model (its ``accuracy_``, ``chance_`` and ``decisive_`` are read).
    skill : float
        Its skill ``(accuracy_ - chance_) / (1 - chance_)``.
    weight : float
        The weight of the irreducible losses before the guard.
    min_il_skill, min_il_decisive : float
        The thresholds (0 switches one off).
    reference_accuracy : float or None
        The trained model's held-out accuracy, if known.

    Returns
    -------
    guard : {None, "uniform", "downweight"}
    weight : float
        The weight in use.

    Example
    -------
    >>> from types import SimpleNamespace
    >>> il = SimpleNamespace(accuracy_=0.9, chance_=0.5, decisive_=0.8)
    >>> guard_decision(il, 0.8, 1.0, min_il_skill=0.3, min_il_decisive=0.5, reference_accuracy=None)
    (None, 1.0)
    """
    accuracy, chance = il.accuracy_, il.chance_
    decisive_share = getattr(il, "decisive_", None)
    if min_il_skill > 0 and skill < min_il_skill:
        # a near-chance IL model scores its own errors, not label noise: random batches
        logger.warning(
            "irreducible-loss model accuracy %.3f is near chance (%.3f; skill %.2f < min_il_skill "
            "%.2f): the filter falls back to uniform batches",
            accuracy,
            chance,
            skill,
            min_il_skill,
        )
        return "uniform", weight
    if decisive_share is not None and decisive_share < min_il_decisive:
        # an IL model unsure of most examples cannot tell a wrong label from a hard example
        logger.warning(
            "irreducible-loss model is decisive (IrreducibleLoss.decisive_) on only %.3f of the "
            "examples (< min_il_decisive %.2f): the filter falls back to uniform batches",
            decisive_share,
            min_il_decisive,
        )
        return "uniform", weight
    if reference_accuracy is not None and accuracy < reference_accuracy:
        # the trained model knows more than the IL model: shrink the IL term in proportion
        ref = (reference_accuracy - chance) / (1.0 - chance)
        share = skill / ref if ref > 0 else 0.0
        shrunk = weight * max(0.0, min(1.0, share))
        logger.warning(
            "irreducible-loss model accuracy %.3f is below the reference accuracy %.3f: "
            "irreducible_weight %.3g -> %.3g",
            accuracy,
            reference_accuracy,
            weight,
            shrunk,
        )
        return "downweight", shrunk
    return None, weight


@dataclass(frozen=True)
class IrreducibleTerm:
    """The irreducible losses as ``"rho"`` subtracts them, and what the guard decided.

    Build it with :meth:`resolve`; :class:`~batchsel.loop.filters.CandidateFilter` holds
    one and shows its fields as ``guard_``, ``irreducible_weight_``,
    ``indecisive_trust_``, ``il_accuracy_`` and ``il_skill_``.

    Parameters
    ----------
    guard : {None, "uniform", "downweight"}
        What the guard did.
    weight : float
        The weight of the irreducible losses in use.
    indecisive_trust : float
        The share of it applied where the IL model is not decisive.
    scored : numpy.ndarray or None
        Every example's irreducible loss, that share applied (None without irreducible
        losses).
    accuracy, skill : float or None
        The IL model's accuracy and skill (None when unknown).
    """

    guard: str | None
    weight: float
    indecisive_trust: float
    scored: np.ndarray | None
    accuracy: float | None
    skill: float | None

    @classmethod
    def resolve(cls, il: Any, settings: RhoSettings, score: str) -> "IrreducibleTerm":
        """The term for the filter's settings: the IL model's skill ``(accuracy -
        chance) / (1 - chance)`` (chance: the share of the most frequent label) decides
        whether its irreducible losses can be trusted (:func:`guard_decision`); its
        confident disagreement with the labels sets the ``"auto"`` weight
        (:func:`auto_weight`).

        Parameters
        ----------
        il : IrreducibleLoss, array or None
            The filter's ``irreducible_losses`` as given.
        settings : RhoSettings
            The filter's settings of the term, checked (:func:`check_rho_settings`).
        score : str
            The filter's score: the guard watches ``"rho"`` only.

        Returns
        -------
        IrreducibleTerm

        Example
        -------
        >>> import numpy as np
        >>> term = IrreducibleTerm.resolve(None, check_rho_settings(np.ones(4), 1.0, "rho", 0.3, 0.5, None), "rho")
        >>> term.guard, term.weight, term.of(np.array([0, 2])).tolist()
        (None, 1.0, [1.0, 1.0])
        """
        losses, weight = settings.losses, settings.weight
        if isinstance(weight, str):  # "auto"
            resolved, trust, scored = auto_weight(il, losses)
        else:
            resolved, trust, scored = weight, 1.0, losses
        accuracy = getattr(il, "accuracy_", None)
        chance = getattr(il, "chance_", None)
        if score != "rho" or accuracy is None or chance is None or chance >= 1:
            return cls(None, resolved, trust, scored, accuracy, None)  # plain arrays: the user vouches for them
        skill = (accuracy - chance) / (1.0 - chance)
        guard, resolved = guard_decision(
            il,
            skill,
            resolved,
            min_il_skill=settings.min_il_skill,
            min_il_decisive=settings.min_il_decisive,
            reference_accuracy=settings.reference_accuracy,
        )
        return cls(guard, resolved, trust, scored, accuracy, skill)

    def of(self, idx: np.ndarray) -> np.ndarray:
        """The irreducible losses (as scored) of the dataset indices ``idx``.

        Parameters
        ----------
        idx : numpy.ndarray of int64
            Dataset indices, checked (:func:`~batchsel.loop.filters.checks.check_candidates`).

        Returns
        -------
        numpy.ndarray
            Their irreducible losses (``ValueError`` for an index past them, or one
            whose loss is NaN: a holdout example, which must not be trained on).
        """
        il = self.scored
        assert il is not None, "score='rho' without irreducible losses"
        if idx.size and idx.max() >= len(il):
            raise ValueError(f"index {int(idx.max())} is past the {len(il)} irreducible losses")
        il = il[idx]
        if np.isnan(il).any():
            bad = int(idx[np.isnan(il)][0])
            raise ValueError(
                f"example {bad} has no irreducible loss (NaN: it is in the IL model's holdout, "
                f"which must not be trained on; sample from IrreducibleLoss.train_indices_)"
            )
        return il


__all__ = ["RhoSettings", "check_rho_settings", "IrreducibleTerm", "auto_weight", "guard_decision"]
