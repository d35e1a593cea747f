"""Run small BLAS products on the calling thread only.

OpenBLAS splits even a 1024 x 66 x 256 product over all cores, and its worker threads then
spin waiting for the next call. In a data-parallel job every rank process does that next
to its own training step, so the threads fight over the cores. Products of that size gain little from threads even
on an idle machine, so they run on one (figures: docs/design/implementation-notes.md).
(SMDL itself no longer calls BLAS: its product is computed in its compiled batch kernel,
see :func:`batchsel.submodular.kernels.gemm_fma`; dense facility location still limits
its small products here.)
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator

# The controller scans the loaded libraries, which is not free: built once, on first use.
_controller: Any = None
# The BLAS thread count is process-wide: one limited section at a time, entered and left on
# the same thread, so concurrent sections can neither leave it at 1 nor restore it early.
_lock = threading.RLock()  # reentrant: a nested section on the same thread is fine


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Limit BLAS (OpenBLAS, MKL, BLIS, ...) to one thread inside the block and restore
    the previous count after it.

    Other threads' BLAS calls made meanwhile also run on one thread. Sections nest, and
    concurrent sections on other threads wait for this one to end (the count is
    process-wide).

    Yields
    ------
    None
        The block runs with BLAS limited to one thread.

    Examples
    --------
    >>> import numpy as np
    >>> with one_blas_thread():
    ...     product = np.ones((4, 3)) @ np.ones((3, 2))
    >>> product.tolist()[0]
    [3.0, 3.0]
    """
    global _controller
    with _lock:
        if _controller is None:
            from threadpoolctl import ThreadpoolController

            _controller = ThreadpoolController()
        with _controller.limit(limits=1, user_api="blas"):
            yield
