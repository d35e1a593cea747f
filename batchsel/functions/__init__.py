"""Deprecated: this package moved to :mod:`batchsel.submodular.functions` in 0.2; import from there.

Its names are the new module's own objects; importing it (or one of its modules) warns (``DeprecationWarning``).
"""

import warnings

from batchsel.submodular.functions import *  # noqa: F403
from batchsel.submodular.functions import __all__  # noqa: F401

warnings.warn(
    "batchsel.functions moved to batchsel.submodular.functions: import it from there (the old path will be removed)",
    DeprecationWarning,
    stacklevel=2,  # warnings skips importlib's frames: 2 is the import statement
)
