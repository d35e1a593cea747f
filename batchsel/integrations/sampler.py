"""Deprecated: this module moved to :mod:`batchsel.loop.sampler` in 0.2; import from there.

Its names are the new module's own objects; importing it warns (``DeprecationWarning``).
"""

import warnings

from batchsel.loop.sampler import *  # noqa: F403
from batchsel.loop.sampler import __all__  # noqa: F401

warnings.warn(
    "batchsel.integrations.sampler moved to batchsel.loop.sampler: import it from there (the old path will be removed)",
    DeprecationWarning,
    stacklevel=2,  # warnings skips importlib's frames: 2 is the import statement
)
