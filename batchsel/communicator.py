"""Deprecated: this module moved to :mod:`batchsel.core.communicator` in 0.2; import from there.

Its names are the new module's own objects; importing it warns (``DeprecationWarning``).
"""

import warnings

from batchsel.core.communicator import *  # noqa: F403
from batchsel.core.communicator import __all__  # noqa: F401

warnings.warn(
    "batchsel.communicator moved to batchsel.core.communicator: import it from there (the old path will be removed)",
    DeprecationWarning,
    stacklevel=2,  # warnings skips importlib's frames: 2 is the import statement
)
