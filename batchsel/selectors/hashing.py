"""Content hashes of what a selector's batches depend on (:func:`digest`): nested
settings and data arrays fed into one ``hashlib`` hash, independent of dict order and byte
order, large arrays by a strided sample of their rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from batchsel.core.checks import tensor_to_numpy

# Arrays up to this size are hashed whole by digest(); larger ones (a 1M x 128 float32
# embedding matrix is 512 MB) by an evenly strided sample of about this many bytes of rows.
DIGEST_FULL_BYTES = 1 << 26


def digest(obj: Any, h: Any) -> None:
    """Feed a nested structure of dicts / sequences / arrays / sparse matrices / scalars
    into the hash ``h`` (``hashlib``), independently of dict order and byte order.

    Arrays go in with their dtype and shape; one larger than ``DIGEST_FULL_BYTES`` goes in
    by a strided sample of its rows (first and last included): data that differ
    everywhere (noise, another data set) differ in the sample; a change in a few rows may
    not. Sparse matrices go in by their CSR arrays.

    Parameters
    ----------
    obj : object
        What to hash: dicts, lists, tuples, arrays, tensors, sparse matrices, scalars.
    h : hashlib hash object
        Updated in place.

    Example
    -------
    >>> import hashlib
    >>> a, b = hashlib.sha256(), hashlib.sha256()
    >>> digest({"x": np.arange(3), "k": 1}, a); digest({"k": 1, "x": np.arange(3)}, b)
    >>> a.hexdigest() == b.hexdigest()
    True
    """
    if isinstance(obj, dict):
        h.update(b"{%d" % len(obj))
        for key in sorted(obj, key=str):
            h.update(str(key).encode() + b":")
            digest(obj[key], h)
    elif isinstance(obj, (list, tuple)):
        h.update(b"[%d" % len(obj))
        for item in obj:
            digest(item, h)
    elif sp.issparse(obj):
        m = obj.tocsr()
        h.update(f"sparse{m.shape}".encode())
        for arr in (m.indptr, m.indices, m.data):
            digest(np.asarray(arr), h)
    elif isinstance(obj, np.ndarray) or hasattr(obj, "detach"):
        a = np.asarray(tensor_to_numpy(obj))
        if a.dtype == object:
            digest(a.tolist(), h)
            return
        h.update(f"{a.dtype.newbyteorder('<').str}{a.shape}".encode())
        parts = [a]
        if a.ndim and a.nbytes > DIGEST_FULL_BYTES:
            step = -(-a.nbytes // DIGEST_FULL_BYTES)
            parts = [a[::step]]  # rows 0, step, 2 step, ...
            if (a.shape[0] - 1) % step:  # and the last row (hashed as one sample of both)
                parts.append(a[-1:])
            h.update(b"sample%d" % step)
        for part in parts:  # the bytes fed as they lie where they are contiguous: no copy
            h.update(np.ascontiguousarray(part, dtype=part.dtype.newbyteorder("<")).data)
    else:
        h.update(repr(obj).encode())


__all__ = ["digest", "DIGEST_FULL_BYTES"]
