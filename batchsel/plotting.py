"""Deprecated: this module moved to :mod:`batchsel.plans.plotting` in 0.2; import from there.

Its names are the new module's own objects; importing it warns (``DeprecationWarning``).
"""

import warnings

from batchsel.plans.plotting import *  # noqa: F403
from batchsel.plans.plotting import __all__  # noqa: F401

warnings.warn(
    "batchsel.plotting moved to batchsel.plans.plotting: import it from there (the old path will be removed)",
    DeprecationWarning,
    stacklevel=2,  # warnings skips importlib's frames: 2 is the import statement
)
