"""What a micro-batch costs to train: :class:`CostModel`, ``per_token * n * Lmax +
per_token_squared * n * Lmax**2 + per_batch + per_length * Lmax`` for ``n`` examples padded
to the longest, ``Lmax`` (attention's quadratic term, a fixed cost per forward-backward, and
a cost per position whatever the batch's size: a recurrent network's sequential steps)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np


@dataclass(frozen=True)
class CostModel:
    """The cost of a micro-batch of ``n`` examples padded to the longest, ``Lmax``:
    ``per_token * n * Lmax + per_token_squared * n * Lmax**2 + per_batch + per_length * Lmax``.

    The default counts padded tokens only (an MLP over the sequence); a transformer's
    attention adds the square of the length, whose weight against the tokens' depends on
    the model's width (about ``1 / (6 * d_model)`` for one layer's matrix products against
    its attention scores); a recurrent network runs one step per position whatever the
    batch's size, which ``per_length`` prices (a GRU's small batches of long sequences cost
    far more than their tokens say).

    Parameters
    ----------
    per_token : float, default 1.0
        The cost of one padded token (``>= 0``).
    per_token_squared : float, default 0.0
        The cost of ``Lmax**2`` per example (``>= 0``).
    per_batch : float, default 0.0
        A fixed cost per micro-batch (``>= 0``): launches, the optimizer's share.
    per_length : float, default 0.0
        The cost of each position of the longest example, whatever ``n`` (``>= 0``).

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
    per_length: float = 0.0

    def __post_init__(self) -> None:
        for name in ("per_token", "per_token_squared", "per_batch", "per_length"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.per_token == 0 and self.per_token_squared == 0:
            raise ValueError("per_token and per_token_squared are both 0: every micro-batch would cost the same")

    def batch_cost(self, n: Any, longest: Any) -> Any:
        """The cost of ``n`` examples padded to ``longest`` (numbers, or arrays of them:
        one cost per micro-batch).

        Parameters
        ----------
        n : int or numpy.ndarray
            Examples in the micro-batch.
        longest : float or numpy.ndarray
            Its longest example's length (cost).

        Returns
        -------
        float or numpy.ndarray
        """
        tokens = n * (self.per_token * longest + self.per_token_squared * longest * longest)
        return tokens + self.per_batch + self.per_length * longest

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

    @classmethod
    def fit(cls, shapes: Sequence[tuple[int, float]], seconds: Sequence[float]) -> tuple[CostModel, float]:
        """The model whose costs best match measured step times, in seconds: non-negative
        least squares over ``n * Lmax``, ``n * Lmax**2``, 1 and ``Lmax``, relative to each time.

        Parameters
        ----------
        shapes : sequence of (int, float)
            ``(n, Lmax)`` of each measured micro-batch.
        seconds : sequence of float
            Its measured time (forward and backward), ``> 0``.

        Returns
        -------
        tuple
            ``(model, error)``: the fitted model (its costs in seconds) and the largest
            relative error of its predictions on ``shapes``.

        Raises
        ------
        ValueError
            Fewer than four shapes, times that are not positive, or shapes whose times
            no token term explains.

        Example
        -------
        >>> shapes = [(8, 32), (8, 128), (32, 64), (4, 256)]
        >>> times = [2e-6 * n * L + 1e-8 * n * L * L + 1e-4 for n, L in shapes]
        >>> model, error = CostModel.fit(shapes, times)
        >>> round(model.per_token * 1e6, 3), round(model.per_token_squared * 1e8, 3), error < 1e-6
        (2.0, 1.0, True)
        """
        from scipy.optimize import nnls

        n = np.array([s[0] for s in shapes], dtype=np.float64)
        longest = np.array([s[1] for s in shapes], dtype=np.float64)
        y = np.asarray(seconds, dtype=np.float64)
        if len(n) < 4 or len(y) != len(n):
            raise ValueError(f"fit needs 4 or more shapes, each with its time: got {len(n)} shapes and {len(y)} times")
        if not np.all(np.isfinite(y)) or np.any(y <= 0):
            raise ValueError(f"seconds must be finite and > 0, got {y.tolist()}")
        features = np.stack([n * longest, n * longest**2, np.ones_like(n), longest], axis=1)
        weights = 1.0 / y  # relative errors: a short micro-batch's time counts as much as a long one's
        coef, _ = nnls(features * weights[:, None], y * weights)
        if coef[0] == 0 and coef[1] == 0:
            raise ValueError("the times do not grow with the tokens: no cost model explains them (time larger shapes)")
        model = cls(*(float(c) for c in coef))
        predicted = features @ coef
        return model, float(np.max(np.abs(predicted - y) / y))

    @classmethod
    def calibrate(
        cls,
        run: Callable[[int, int], object],
        shapes: Sequence[tuple[int, int]] | None = None,
        repeats: int = 3,
    ) -> tuple[CostModel, float]:
        """Time ``run(n, length)`` (one forward and backward of ``n`` examples padded to
        ``length`` on your model) at a few shapes and :meth:`fit` a model to the times.

        Parameters
        ----------
        run : callable
            ``run(n, length)``: one micro-batch's work; synchronize the device inside if it
            is asynchronous.
        shapes : sequence of (int, int), optional
            The ``(n, length)`` to time; default a grid of about the same tokens per
            micro-batch over lengths 16 to 512 and a few sizes.
        repeats : int, default 3
            Timings per shape after one untimed run; the fastest counts.

        Returns
        -------
        tuple
            ``(model, error)`` as :meth:`fit` returns them.
        """
        if shapes is None:
            shapes = [(max(1, 4096 // length), length) for length in (16, 32, 64, 128, 256, 512)]
            # sizes apart at equal lengths, so the per-token and per-position terms separate
            shapes += [(4, 64), (16, 256), (64, 32), (2, 256), (128, 16), (32, 128)]
        if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
            raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
        seconds = []
        for n, length in shapes:
            run(n, length)  # the first call may allocate or compile
            best = math.inf
            for _ in range(repeats):
                start = time.perf_counter()
                run(n, length)
                best = min(best, time.perf_counter() - start)
            seconds.append(best)
        return cls.fit([(n, float(length)) for n, length in shapes], seconds)


__all__ = ["CostModel"]
