"""Deprecated: this module moved to :mod:`batchsel.distributed.sharded` in 0.2; import from there.

Its names are the new module's own objects; importing it warns (``DeprecationWarning``).
"""

import warnings

from batchsel.distributed.sharded import *  # noqa: F403
from batchsel.distributed.sharded import __all__  # noqa: F401

warnings.warn(
    "batchsel.sharded moved to batchsel.distributed.sharded: import it from there (the old path will be removed)",
    DeprecationWarning,
    stacklevel=2,  # warnings skips importlib's frames: 2 is the import statement
)
