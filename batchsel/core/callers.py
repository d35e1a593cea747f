"""Where a warning points: the first frame outside batchsel and the data loaders.

A warning raised while a DataLoader iterates the sampler would otherwise point at
``torch/utils/data/dataloader.py``; the user's line is the loop that drove it.
"""

from __future__ import annotations

import os
import sys

# folders whose frames are not the user's: batchsel itself and the loaders that drive it
_INTERNAL = (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
    os.sep + os.path.join("torch", "utils", "data") + os.sep,
    os.sep + "torchdata" + os.sep,
)


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes ``warnings.warn``, called by this function's caller,
    point at the first frame outside batchsel, ``torch.utils.data`` and torchdata.

    Returns
    -------
    int
        1 where the caller is already the user's code.

    Examples
    --------
    >>> user_stacklevel()  # called from code outside batchsel: the caller's own line
    1
    """
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and any(part in frame.f_code.co_filename for part in _INTERNAL):
        frame = frame.f_back
        level += 1
    return level


__all__ = ["user_stacklevel"]
