"""Checks of a data set before training: near-duplicate removal and the data audit."""

from batchsel.data.audit import Audit, audit
from batchsel.data.dedup import Deduplication, deduplicate

__all__ = ["Audit", "audit", "Deduplication", "deduplicate"]
