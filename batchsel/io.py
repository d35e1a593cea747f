"""Deprecated: this module moved to :mod:`batchsel.core.io` in 0.2; import from there.

Its names are the new module's own objects; importing it warns (``DeprecationWarning``).
"""

import warnings

from batchsel.core.io import *  # noqa: F403

warnings.warn(
    "batchsel.io moved to batchsel.core.io: import it from there (the old path will be removed)",
    DeprecationWarning,
    stacklevel=2,  # warnings skips importlib's frames: 2 is the import statement
)
