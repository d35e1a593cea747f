"""Log-determinant: f(S) = log det(K_SS + reg I) - |S| log(reg)."""

from __future__ import annotations

from typing import Any

import numpy as np

from batchsel.submodular.functions.base import SetFunction, as_similarity

# Ground sets larger than this are refused: the state holds an n x k Cholesky factor and
# the PSD check an eigen-decomposition of the n x n kernel.
MAX_ITEMS = 20_000


class LogDeterminant(SetFunction):
    """Log-determinant ``f(S) = log det(K_SS + reg * I) - |S| log(reg)`` of a positive
    semi-definite kernel K (diversity in the sense of determinantal point processes; the
    shift by ``|S| log(reg)`` makes ``f({}) = 0``). Monotone submodular for PSD K.

    Dense and meant for small ground sets (a pool, a few thousand items): gains come from
    an incremental Cholesky factorization, ``O(n |S|)`` memory and ``O(n)`` work per add.

    Parameters
    ----------
    kernel:
        Symmetric PSD ``n x n`` array (e.g. a linear or RBF kernel of embeddings).
    reg:
        Ridge ``reg > 0`` added to the diagonal.

    Example
    -------
    >>> import numpy as np
    >>> x = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]])
    >>> f = LogDeterminant(x @ x.T)
    >>> f.gains([0, 1, 2]).round(3).tolist()
    [0.693, 0.599, 0.693]
    >>> round(f.add(0), 3)
    0.693
    >>> f.gains([1, 2]).round(3).tolist()
    [0.347, 0.693]
    >>> round(f.evaluate([0, 2]), 3)
    1.386
    """

    def __init__(self, kernel: Any, reg: float = 1.0) -> None:
        if not np.isfinite(reg) or reg <= 0:
            raise ValueError(f"reg must be finite and > 0, got {reg!r}")
        k = as_similarity(kernel, "kernel", nonnegative=False)
        if not isinstance(k, np.ndarray):
            k = k.toarray()
        if k.shape[0] > MAX_ITEMS:
            raise ValueError(f"LogDeterminant is dense, for at most {MAX_ITEMS} items; got {k.shape[0]}")
        k = np.asarray(k, dtype=np.float64)
        if not np.allclose(k, k.T, rtol=1e-6, atol=1e-8 * max(1.0, float(np.abs(k).max()))):
            raise ValueError("kernel must be symmetric")
        lowest = float(np.linalg.eigvalsh(k)[0])
        if lowest < -1e-5 * max(1.0, float(np.abs(np.diag(k)).max())):  # float32-rounded kernels
            raise ValueError(f"kernel must be positive semi-definite, smallest eigenvalue {lowest:.3g}")
        self.kernel = k
        self.reg = float(reg)
        super().__init__(k.shape[0])

    def _reset_state(self) -> None:
        # Cholesky rows of every item against the selected ones, and the residual
        # variances d2 = K_jj + reg - |c_j|^2 (the gain of j is log(d2_j / reg)).
        self._factor = np.zeros((self.n, 16))  # columns [:self._rank] in use; doubles when full
        self._rank = 0
        self._d2 = np.diag(self.kernel) + self.reg

    def _gains(self, idx: np.ndarray) -> np.ndarray:
        return np.log(np.maximum(self._d2[idx], self.reg) / self.reg)

    def _add(self, j: int) -> None:
        d = np.sqrt(max(self._d2[j], self.reg))
        c = self._factor[:, : self._rank]
        e = (self.kernel[j] - c @ c[j]) / d
        if self._rank == self._factor.shape[1]:
            self._factor = np.concatenate([self._factor, np.zeros_like(self._factor)], axis=1)
        self._factor[:, self._rank] = e
        self._rank += 1
        self._d2 = self._d2 - e * e

    def _evaluate(self, idx: np.ndarray) -> float:
        sub = self.kernel[np.ix_(idx, idx)] + self.reg * np.eye(idx.size)
        sign, logdet = np.linalg.slogdet(sub)
        return float(logdet - idx.size * np.log(self.reg))
