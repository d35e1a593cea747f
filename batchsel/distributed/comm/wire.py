"""How objects travel between ranks: a plain numeric array as its raw bytes, described by
a fixed-size header (dtype and shape), anything else pickled. :class:`~batchsel.distributed.comm.MPIComm`
and :class:`~batchsel.distributed.comm.TorchDistComm` both use it.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

HEADER_LEN = 16  # int64 words: [is_array, ndim, dtype string (8 bytes), shape...]


def array_header(obj: Any) -> np.ndarray:
    """A fixed-size header describing ``obj`` for all-gathering: dtype and shape of a plain
    numeric ndarray (whose bytes then travel raw), or a "not an array" flag (the object
    then travels pickled). Fixed size, so one cheap buffer all-gather exchanges them.

    Examples
    --------
    >>> array_header(np.zeros((2, 3), np.float32))[[0, 1, 3, 4]].tolist()
    [1, 2, 2, 3]
    >>> int(array_header("text")[0])
    0
    """
    header = np.zeros(HEADER_LEN, dtype=np.int64)
    if isinstance(obj, np.ndarray) and obj.dtype != object and not obj.dtype.fields:
        code = obj.dtype.str.encode()
        if len(code) <= 8 and obj.ndim <= HEADER_LEN - 3:
            header[:2] = 1, obj.ndim
            header[2] = np.frombuffer(code.ljust(8, b"\0"), dtype=np.int64)[0]
            header[3 : 3 + obj.ndim] = obj.shape
    return header


def decode_headers(headers: np.ndarray) -> list[tuple[np.dtype, tuple]] | None:
    """(dtype, shape) of every rank's array, or None unless every rank sent an array.

    Examples
    --------
    >>> decode_headers(array_header(np.zeros(4, np.int8)))
    [(dtype('int8'), (4,))]
    """
    headers = headers.reshape(-1, HEADER_LEN)
    if not headers[:, 0].all():
        return None
    out = []
    for h in headers:
        dtype = np.dtype(h[2:3].tobytes().rstrip(b"\0").decode())
        out.append((dtype, tuple(int(v) for v in h[3 : 3 + h[1]])))
    return out


def gather_payload(obj: Any) -> tuple[np.ndarray, np.ndarray]:
    """``obj`` as (header, bytes): a plain numeric array as its raw bytes (header as
    :func:`array_header`), anything else pickled; the header's last word is the byte
    count.

    Examples
    --------
    >>> header, payload = gather_payload(np.arange(3, dtype=np.int16))
    >>> int(header[-1]), payload.dtype
    (6, dtype('uint8'))
    """
    header = np.append(array_header(obj), np.int64(0))
    if header[0]:
        payload = np.ascontiguousarray(obj).reshape(-1).view(np.uint8)
    else:
        payload = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)
    header[-1] = payload.size
    return header, payload


def from_payload(header: np.ndarray, payload: np.ndarray) -> Any:
    """The object :func:`gather_payload` made ``(header, payload)`` of (``payload``: its
    bytes, exactly ``header[-1]`` of them); an array comes back as a view of them.

    Examples
    --------
    >>> from_payload(*gather_payload({"a": 1}))
    {'a': 1}
    """
    if header[0]:
        ((dtype, shape),) = decode_headers(header[:-1])
        return payload.view(dtype).reshape(shape)
    return pickle.loads(payload)  # type: ignore[arg-type]


__all__ = ["HEADER_LEN", "array_header", "decode_headers", "gather_payload", "from_payload"]
