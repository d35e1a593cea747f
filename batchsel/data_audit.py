"""Deprecated: this module moved to :mod:`batchsel.data.audit` in 0.2; import from there.

Its names are the new module's own objects; importing it warns (``DeprecationWarning``).
"""

import warnings

from batchsel.data.audit import *  # noqa: F403
from batchsel.data.audit import __all__  # noqa: F401

warnings.warn(
    "batchsel.data_audit moved to batchsel.data.audit: import it from there (the old path will be removed)",
    DeprecationWarning,
    stacklevel=2,  # warnings skips importlib's frames: 2 is the import statement
)
