"""CandidateFilter's scores and picks in torch, on the logits' device: they live in
:mod:`batchsel.loop.filters.device`, with the filter they serve; this path still imports
them."""

from __future__ import annotations

from batchsel.loop.filters.device import percentile, scores, top

__all__ = ["scores", "top", "percentile"]
