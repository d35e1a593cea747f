"""Deprecated: this module moved to :mod:`batchsel.submodular.functions.facility_location` in 0.2; import from there.

Its names are the new module's own objects; importing it warns (``DeprecationWarning``).
"""

import warnings

from batchsel.submodular.functions.facility_location import *  # noqa: F403

warnings.warn(
    "batchsel.functions.facility_location moved to batchsel.submodular.functions.facility_location: import it from there (the old path will be removed)",
    DeprecationWarning,
    stacklevel=2,  # warnings skips importlib's frames: 2 is the import statement
)
