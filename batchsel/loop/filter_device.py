"""CandidateFilter's scores and picks in torch, on the logits' device (CPU, CUDA, MPS).

The candidates' logits never leave the device: only the kept positions and three
positions that flag bad input come back to the host, in one transfer. The numbers are
those of the numpy functions in :mod:`batchsel.loop.filters` (float64 where the device has it;
MPS computes in float32, where two scores within rounding of each other may swap).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _float(device: Any) -> Any:
    import torch

    return torch.float32 if device.type == "mps" else torch.float64


def _first(mask: Any) -> Any:
    """The first True position of a 1-D mask, ``len(mask)`` when none (a 1-element tensor)."""
    import torch

    n = mask.shape[0]
    return torch.where(mask, torch.arange(n, device=mask.device), n).min().reshape(1)


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
