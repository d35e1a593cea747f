"""What a micro-batch costs to train: :class:`CostModel`, ``per_token * n * Lmax +
per_token_squared * n * Lmax**2 + per_batch`` for ``n`` examples padded to the longest,
``Lmax`` (attention's quadratic term in the middle, a fixed cost per forward-backward last)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CostModel:
    """The cost of a micro-batch of ``n`` examples padded to the longest, ``Lmax``:
    ``per_token * n * Lmax + per_token_squared * n * Lmax**2 + per_batch``.

    The default counts padded tokens only (an MLP or an RNN over the sequence); a
    transformer's attention adds the square of the length, whose weight against the
    tokens' depends on the model's width (about ``1 / (6 * d_model)`` for one layer's
    matrix products against its attention scores).

    Parameters
    ----------
    per_token : float, default 1.0
        The cost of one padded token (``>= 0``).
    per_token_squared : float, default 0.0
        The cost of ``Lmax**2`` per example (``>= 0``).
    per_batch : float, default 0.0
        A fixed cost per micro-batch (``>= 0``): launches, the optimizer's share.

    Raises
    ------
    ValueError
        A term is negative or not finite, or all are 0.

    Examples
    --------
    >>> model = CostModel(per_token=1.0, per_token_squared=0.01)
    >>> model.batch_cost(4, 100)
    800.0
    >>> CostModel(per_token=-1.0)
    Traceback (most recent call last):
    ...
    ValueError: per_token must be a finite number >= 0, got -1.0
    """

    per_token: float = 1.0
    per_token_squared: float = 0.0
    per_batch: float = 0.0

    def __post_init__(self) -> None:
        for name in ("per_token", "per_token_squared", "per_batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.per_token == 0 and self.per_token_squared == 0:
            raise ValueError("per_token and per_token_squared are both 0: every micro-batch would cost the same")

    def batch_cost(self, n: int, longest: float) -> float:
        """The cost of ``n`` examples padded to ``longest``.

        Parameters
        ----------
        n : int
            Examples in the micro-batch.
        longest : float
            Its longest example's length (cost).

        Returns
        -------
        float
        """
        return n * (self.per_token * longest + self.per_token_squared * longest * longest) + self.per_batch

    def example_cost(self, length: np.ndarray) -> np.ndarray:
        """Each example's cost alone, without padding: the useful work a plan's efficiency
        is measured against.

        Parameters
        ----------
        length : numpy.ndarray
            Lengths (costs) of examples.

        Returns
        -------
        numpy.ndarray
            ``per_token * L + per_token_squared * L**2``.
        """
        length = np.asarray(length, dtype=np.float64)
        return self.per_token * length + self.per_token_squared * length * length


__all__ = ["CostModel"]
