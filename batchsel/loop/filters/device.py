"""CandidateFilter's input checks, scores and picks in torch, on the logits' device (CPU, CUDA, MPS).

The candidates' logits never leave the device: only the kept positions and three
positions that flag bad input come back to the host, in one transfer. The numbers are
those of the numpy functions in :mod:`batchsel.loop.filters` (float64 where the device has it;
MPS computes in float32, where two scores within rounding of each other may swap).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from batchsel.loop.filters.checks import check_candidates


def _float(device: Any) -> Any:
    import torch

    return torch.float32 if device.type == "mps" else torch.float64


def _first(mask: Any) -> Any:
    """The first True position of a 1-D mask, ``len(mask)`` when none (a 1-element tensor)."""
    import torch

    n = mask.shape[0]
    return torch.where(mask, torch.arange(n, device=mask.device), n).min().reshape(1)


def check_inputs(idx: np.ndarray, logits: Any, labels: Any, hidden: Any = None) -> Any:
    """The candidates' labels as a tensor, after the checks of what can be checked without
    reading the device's values (shapes and dtypes; the values are flagged by
    :func:`scores`).

    Parameters
    ----------
    idx : numpy.ndarray of int64
        The candidates' dataset indices, checked
        (:func:`~batchsel.loop.filters.checks.check_candidates`).
    logits : torch.Tensor
        The candidates' logits (n x classes), one row per index.
    labels : torch.Tensor or array-like of int
        One class id per candidate.
    hidden : torch.Tensor or None, default None
        ``"gradnorm"``'s last hidden layer, one row per candidate.

    Returns
    -------
    torch.Tensor
        ``labels`` as a tensor (``ValueError`` / ``TypeError`` naming the input that has
        the wrong shape or dtype).

    Example
    -------
    >>> import numpy as np, torch
    >>> check_inputs(np.arange(2), torch.zeros(2, 3), [0, 2]).tolist()
    [0, 2]
    """
    import torch

    n = len(idx)
    if logits.ndim != 2 or logits.shape[0] == 0 or logits.shape[1] == 0:
        raise ValueError(f"logits must be a non-empty 2-D array (n x classes), got shape {tuple(logits.shape)}")
    if logits.dtype.is_complex or logits.dtype == torch.bool:
        raise TypeError(f"logits must be numeric, got dtype {logits.dtype}")
    if logits.shape[0] != n:
        check_candidates(idx, logits.shape[0])  # names logits and the count of indices
    y = labels if hasattr(labels, "detach") else torch.as_tensor(np.asarray(labels))
    if y.ndim != 1 or y.shape[0] != n:
        raise ValueError(f"labels must be 1-D with one entry per row of logits ({n}), got shape {tuple(y.shape)}")
    if n and (y.dtype.is_floating_point or y.dtype == torch.bool):
        raise TypeError(f"labels must be integer class ids, got dtype {y.dtype}")
    if hidden is not None and (not hasattr(hidden, "detach") or hidden.shape[0] != n):
        raise ValueError(f"hidden must be a tensor with one row per example ({n}), got {type(hidden).__name__}")
    return y


def scores(z: Any, y: Any, score: str, hidden: Any = None, irreducible: Any = None, weight: float = 0.0) -> Any:
    """``(scores, flags)``: the per-candidate ``"loss"`` / ``"gradnorm"`` / ``"rho"`` score
    and a 3-element tensor of the first row with non-finite logits, the first label out of
    range and the first row with non-finite ``hidden`` (``n`` where there is none)."""
    import torch

    dtype = _float(z.device)
    z = z.detach().to(dtype)
    n, classes = z.shape
    y = y.detach().to(z.device)
    in_range = (y >= 0) & (y < classes)
    y = y.clamp(0, classes - 1).long()
    logp = torch.log_softmax(z, dim=1)
    bad_hidden = torch.zeros(n, dtype=torch.bool, device=z.device)
    if score == "gradnorm":
        g = logp.exp() - torch.nn.functional.one_hot(y, classes).to(dtype)
        s = g.norm(dim=1)
        if hidden is not None:
            h = hidden.detach().to(z.device, dtype).reshape(n, -1)
            bad_hidden = ~torch.isfinite(h).all(dim=1)
            s = s * h.norm(dim=1)
    else:
        s = -logp.gather(1, y[:, None])[:, 0]
        if score == "rho":
            s = s - weight * torch.as_tensor(irreducible, device=z.device, dtype=dtype)
    flags = torch.cat([_first(~torch.isfinite(z).all(dim=1)), _first(~in_range), _first(bad_hidden)])
    return s, flags


def top(s: Any, uniform: np.ndarray, count: int) -> Any:
    """The ``count`` positions of largest score outside ``uniform`` (ties to the smaller)."""
    import torch

    key = -s
    if len(uniform):
        key = key.clone()
        key[torch.as_tensor(uniform, device=s.device)] = float("inf")
    return torch.sort(key, stable=True).indices[:count]


def percentile(history: Any, s: Any, rest: np.ndarray, u: np.ndarray, beta: float, window: int) -> tuple[Any, Any]:
    """``(order, history)``: the positions ``rest`` ordered by the Efraimidis-Spirakis
    keys ``log(u) / w`` (``u``: the host's uniforms, one per position) of the weights
    ``w = CDF(score) ** beta`` over the latest ``window`` scores (``history``, then
    ``s``); the first ``c`` are a weighted draw of ``c`` without replacement."""
    import torch

    history = torch.cat([history.to(s.device, s.dtype), s])[-window:]
    rest_t = torch.as_tensor(rest, device=s.device)
    cdf = torch.searchsorted(torch.sort(history).values, s[rest_t], right=True).to(s.dtype) / len(history)
    u_t = torch.as_tensor(u, device=s.device, dtype=s.dtype)
    keys = torch.log(u_t) / torch.clamp_min(cdf**beta, 1e-300 if s.dtype == torch.float64 else 1e-38)
    return rest_t[torch.sort(-keys, stable=True).indices], history


def pick_rest(
    rule: str, s: Any, uniform: np.ndarray, count: int, rng: np.random.Generator, history: Any, beta: float, window: int
) -> tuple[Any, Any]:
    """:func:`batchsel.loop.filters.rules.pick_rest` on the device: the ``count``
    positions outside ``uniform`` that ``rule`` picks (a tensor on ``s``'s device), and the
    percentile history after this batch (kept on the device).

    The uniforms of the percentile draw come from the host's ``rng``, as on the numpy
    path, so both pick the same positions.

    Example
    -------
    >>> import numpy as np, torch
    >>> rng = np.random.default_rng(0)
    >>> s = torch.tensor([0.1, 5.0, 2.0], dtype=torch.float64)
    >>> pick_rest("top", s, np.empty(0, np.int64), 2, rng, np.empty(0), 1.0, 8)[0].tolist()
    [1, 2]
    """
    import torch

    if count == 0:
        return torch.empty(0, dtype=torch.int64, device=s.device), history
    if rule == "percentile":
        rest = np.setdiff1d(np.arange(len(s)), uniform)
        history = history if hasattr(history, "detach") else torch.as_tensor(history)
        order, history = percentile(history, s, rest, rng.random(len(rest)), beta, window)
        return order[:count], history
    return top(s, uniform, count), history


def to_host(picked: Any, flags: Any, logits: Any, labels: Any) -> np.ndarray:
    """The picked positions on the host, brought with the flags of :func:`scores` in one
    transfer; a flag that names a row raises its error.

    Parameters
    ----------
    picked : torch.Tensor of int64
        The positions picked on the device.
    flags : torch.Tensor
        :func:`scores`' flags.
    logits, labels : torch.Tensor
        The candidates' logits and labels (:func:`check_inputs`'s), for the messages.

    Returns
    -------
    numpy.ndarray
        ``picked`` as a numpy array (``ValueError`` for NaN / inf logits or ``hidden``,
        or a label out of range).

    Example
    -------
    >>> import torch
    >>> z, y = torch.zeros(3, 2), torch.tensor([0, 1, 0])
    >>> s, flags = scores(z, y, "loss")
    >>> to_host(top(s, np.empty(0, np.int64), 2), flags, z, y).tolist()
    [0, 1]
    """
    import torch

    n = logits.shape[0]
    host = torch.cat([picked, flags]).cpu().numpy()  # the one transfer
    row, label, hid = (int(v) for v in host[len(picked) :])
    if row < n:
        raise ValueError(f"logits contain NaN or inf (first at row {row}): has training diverged?")
    if label < n:
        bad = int(labels[label])
        raise ValueError(
            f"labels must be in [0, {logits.shape[1]}) (the classes of logits of shape "
            f"{tuple(logits.shape)}), found {bad}"
        )
    if hid < n:
        raise ValueError("hidden contains NaN or inf")
    return host[: len(picked)]


__all__ = ["check_inputs", "scores", "top", "percentile", "pick_rest", "to_host"]
