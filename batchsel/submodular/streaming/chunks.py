"""How rows reach sieve-streaming: the chunks of a ``.npy`` file read with plain reads
(:func:`read_npy_chunks`), of an array or of any iterable (:func:`open_stream`), and one
chunk checked with its rows numbered as in the stream (:func:`load_chunk`).
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, Iterator

import numpy as np

from batchsel.core.checks import check_int, load_embeddings
from batchsel.core.io import NpyRows

DEFAULT_CHUNK_ROWS = 1 << 16


def read_npy_chunks(
    path: str | os.PathLike, chunk_rows: int = DEFAULT_CHUNK_ROWS, start: int = 0
) -> Iterator[np.ndarray]:
    """The rows of a 2-D ``.npy`` file from row ``start`` on, ``chunk_rows`` at a time,
    read with plain reads (never the whole file, never mapped): what
    :meth:`SieveStreaming.fit` streams, and how to resume it after
    :meth:`SieveStreaming.load_state_dict` (``start=sieve.n_seen_``).

    Parameters
    ----------
    path : str or os.PathLike
        The ``.npy`` file.
    chunk_rows : int, default 65536
        Rows per chunk (the last one may hold fewer).
    start : int, default 0
        The first row read.

    Returns
    -------
    iterator of numpy.ndarray
        The chunks, in the file's dtype.

    Example
    -------
    >>> import os, tempfile
    >>> from batchsel import SieveStreaming
    >>> path = os.path.join(tempfile.mkdtemp(), "x.npy")
    >>> np.save(path, np.abs(np.random.default_rng(0).normal(size=(1000, 8))).astype(np.float32))
    >>> whole = SieveStreaming("feature-based", 10).fit(path, chunk_rows=128)
    >>> first = SieveStreaming("feature-based", 10)
    >>> for chunk in read_npy_chunks(path, 128):
    ...     if first.n_seen_ >= 512:
    ...         break
    ...     _ = first.partial_fit(chunk)
    >>> resumed = SieveStreaming("feature-based", 10)
    >>> resumed.load_state_dict(first.state_dict())
    >>> for chunk in read_npy_chunks(path, 128, start=resumed.n_seen_):
    ...     _ = resumed.partial_fit(chunk)
    >>> bool(np.array_equal(resumed.indices_, whole.indices_))
    True
    >>> os.remove(path)
    """
    source = NpyRows(os.fspath(path))
    chunk_rows = check_int(chunk_rows, "chunk_rows", minimum=1)
    start = check_int(start, "start", minimum=0, maximum=source.shape[0])
    return source.chunks(chunk_rows, start)


def open_stream(data: Any, chunk_rows: int) -> tuple[Iterable[Any], int | None, Any]:
    """The chunks of ``data``: the path of a ``.npy`` file (read chunk by chunk, never
    whole, nor mapped: the pages of a memmap count in the resident memory), an array or
    memmap (sliced into ``chunk_rows`` rows), or an iterable of arrays.

    Parameters
    ----------
    data : str, os.PathLike, array-like or iterable
        The rows.
    chunk_rows : int
        Rows per chunk of a file or an array.

    Returns
    -------
    tuple
        ``(chunks, total, sample_from)``: the chunks, the number of rows (None for an
        iterable) and the rows a reference sample may be drawn from (None for an iterable).

    Example
    -------
    >>> chunks, total, _ = open_stream(np.ones((5, 2)), 2)
    >>> [len(c) for c in chunks], total
    ([2, 2, 1], 5)
    """
    if isinstance(data, (str, os.PathLike)):
        source = NpyRows(os.fspath(data))
        return source.chunks(chunk_rows), source.shape[0], source.array
    if isinstance(data, np.ndarray) or hasattr(data, "__array__") or hasattr(data, "detach"):
        x = load_embeddings(data) if not isinstance(data, np.ndarray) or data.ndim != 2 else data
        total = x.shape[0]
        return (x[s : s + chunk_rows] for s in range(0, total, chunk_rows)), total, x
    return iter(data), None, None


def load_chunk(chunk: Any, n_seen: int) -> np.ndarray:
    """``chunk`` as checked rows (:func:`~batchsel.core.checks.load_embeddings`), its errors
    naming the rows as numbered in the stream (from ``n_seen``), not in the chunk.

    Parameters
    ----------
    chunk : array-like
        An ``n x d`` chunk.
    n_seen : int
        Rows of the stream before it.

    Returns
    -------
    numpy.ndarray
        The rows.

    Example
    -------
    >>> load_chunk([[1.0, 2.0]], 10).shape
    (1, 2)
    """
    try:
        return load_embeddings(chunk, name=f"the chunk from row {n_seen}")
    except ValueError as exc:  # name the row as numbered in the stream, not in the chunk
        message = re.sub(
            r"\(row (\d+)\)|at row (\d+)",
            lambda m: m.group(0).replace(m.group(1) or m.group(2), str(n_seen + int(m.group(1) or m.group(2)))),
            str(exc),
        )
        raise ValueError(message) from None
