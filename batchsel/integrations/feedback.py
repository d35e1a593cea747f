"""Deprecated: this module moved to :mod:`batchsel.loop.feedback` in 0.2; import from there.

Its names are the new module's own objects; importing it warns (``DeprecationWarning``).
"""

import warnings

from batchsel.loop.feedback import *  # noqa: F403

warnings.warn(
    "batchsel.integrations.feedback moved to batchsel.loop.feedback: import it from there (the old path will be removed)",
    DeprecationWarning,
    stacklevel=2,  # warnings skips importlib's frames: 2 is the import statement
)
