"""Checks of a data set before training: near-duplicate removal (:mod:`batchsel.data.dedup`)
and the data audit (:mod:`batchsel.data.audit`; its function ``audit`` is exported by
``batchsel``, not here, so that ``batchsel.data.audit`` stays the module)."""

from batchsel.data.audit import Audit
from batchsel.data.dedup import Deduplication, deduplicate

__all__ = ["Audit", "Deduplication", "deduplicate"]
