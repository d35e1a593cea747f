"""Reading arrays from files and writing files atomically.

Every file batchsel writes goes through :func:`atomic_write` (or :func:`atomic_group`, for
files written as one): the content is written to a temporary name in the same folder,
flushed to disk, then renamed over the final name, so a crash or Ctrl-C never leaves a
half-written file under the name a user asked for.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import stat
import sys
import tempfile
import zipfile
from typing import IO, Iterator

import numpy as np

from batchsel.core.checks import tensor_to_numpy


def _umask() -> int:
    """The process umask, read without changing it where Linux allows (``os.umask``
    can only be read by setting it, which races with other threads creating files)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _target(path: str | os.PathLike, overwrite: bool) -> str:
    """The file an atomic write replaces: a symlink's target (the link is written through,
    not replaced); refuses folders, existing non-regular files (devices, FIFOs, sockets:
    a rename would replace the node with a regular file) and, unless ``overwrite``,
    existing files."""
    path = os.fspath(path)
    if os.path.islink(path):
        path = os.path.realpath(path)
    if os.path.isdir(path):
        raise ValueError(f"output {path!r} is a directory")
    if os.path.exists(path):
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise ValueError(
                f"output {path!r} exists and is not a regular file (a device, FIFO or socket); write to a regular file"
            )
        if not overwrite:
            raise FileExistsError(f"output {path!r} exists (pass overwrite / --force to replace it)")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"output folder {folder!r} does not exist")
    return path


class AtomicGroup:
    """Files written as one (see :func:`atomic_group`): :meth:`open` and :meth:`path` give
    each a temporary file beside it; the group renames them all only when its block
    succeeds.

    Made by :func:`atomic_group`, not directly: the group's block commits (renames) or
    discards (deletes) the temporary files.
    """

    def __init__(self) -> None:
        self._pending: list[tuple[str, str]] = []  # (temporary, final) names
        self._by_name: list[str] = []  # temporaries written by name: synced at the commit

    def _reserve(self, path: str | os.PathLike, overwrite: bool, suffix: str) -> tuple[int, str]:
        """A new temporary file beside ``path`` (its descriptor and name), registered."""
        target = _target(path, overwrite)
        folder = os.path.dirname(os.path.abspath(target))
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(target) + ".", suffix=suffix, dir=folder)
        self._pending.append((tmp, target))  # registered first: removed whatever fails next
        try:
            # mkstemp makes the file 0600; give it the mode a plain open() would (or keep
            # the replaced file's), so plans stay readable by the other ranks / users.
            try:
                os.fchmod(fd, stat.S_IMODE(os.stat(target).st_mode))
            except FileNotFoundError:
                os.fchmod(fd, 0o666 & ~_umask())
        except BaseException:
            os.close(fd)
            raise
        return fd, tmp

    @contextlib.contextmanager
    def open(self, path: str | os.PathLike, mode: str = "wb", overwrite: bool = True) -> Iterator[IO]:
        """A temporary file for ``path``, flushed to disk when the ``with`` block ends.

        Parameters
        ----------
        path, mode, overwrite
            As for :func:`atomic_write`: the final name (a symlink is written through), the
            temporary file's writing mode, whether an existing file may be replaced.

        Yields
        ------
        IO
            The open temporary file; it is renamed to ``path`` when the group commits.
        """
        fd, _ = self._reserve(path, overwrite, ".tmp")
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())

    def path(self, path: str | os.PathLike, overwrite: bool = True) -> str:
        """The name of a temporary file for ``path``, for writers that take a file name
        (a figure's ``savefig``): it ends with ``path``'s suffix, since such writers pick
        the format from it (or append their own); it is flushed to disk and renamed with
        the group.

        Parameters
        ----------
        path : str or os.PathLike
            The final name, checked as by :func:`atomic_write` (a symlink is written through).
        overwrite : bool, default True
            Whether an existing file at ``path`` may be replaced.

        Returns
        -------
        str
            The temporary file's name (the file exists, empty, with the final mode).

        Examples
        --------
        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> with atomic_group() as group:
        ...     np.save(group.path(os.path.join(folder, "x.npy")), np.arange(3))
        >>> os.listdir(folder), np.load(os.path.join(folder, "x.npy")).tolist()
        (['x.npy'], [0, 1, 2])
        """
        fd, tmp = self._reserve(path, overwrite, ".tmp" + os.path.splitext(os.fspath(path))[1])
        os.close(fd)
        self._by_name.append(tmp)
        return tmp

    def _commit(self) -> None:
        for tmp in self._by_name:  # the writer closed them; on disk before any rename
            fd = os.open(tmp, os.O_RDWR)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        for tmp, path in self._pending:
            os.replace(tmp, path)

    def _discard(self) -> None:
        for tmp, _ in self._pending:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


@contextlib.contextmanager
def atomic_group() -> Iterator[AtomicGroup]:
    """Write several files as one: every file opened with the group's ``open`` is written
    to a temporary name, and all are renamed to their names only when the whole block
    succeeds, so a failure writing one leaves none of them (e.g. a plan and its graph).

    Yields
    ------
    AtomicGroup
        The group: its :meth:`~AtomicGroup.open` and :meth:`~AtomicGroup.path` give the
        temporary files. On an exception in the block every temporary file is deleted
        and the exception goes on.

    See Also
    --------
    atomic_write : one file.

    Examples
    --------
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with atomic_group() as group:
    ...     with group.open(os.path.join(folder, "a.txt"), "w") as a:
    ...         _ = a.write("a")
    ...     with group.open(os.path.join(folder, "b.txt"), "w") as b:
    ...         _ = b.write("b")
    >>> sorted(os.listdir(folder))
    ['a.txt', 'b.txt']
    """
    group = AtomicGroup()
    try:
        yield group
        group._commit()
    except BaseException:
        group._discard()
        raise


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb", overwrite: bool = True) -> Iterator[IO]:
    """Open a temporary file beside ``path``; rename it to ``path`` only on success.

    A symlink is written through (its target is replaced, the link kept); an existing
    device, FIFO or socket is refused with ``ValueError`` (renaming over it would replace
    the node with a regular file).

    Parameters
    ----------
    path : str or os.PathLike
        The file to write; its folder must exist.
    mode : str, default "wb"
        The mode the temporary file is opened in (a writing mode: ``"wb"``, ``"w"``).
    overwrite : bool, default True
        Whether an existing file at ``path`` may be replaced.

    Yields
    ------
    IO
        The open temporary file. On an exception in the block it is deleted and ``path``
        is left as it was.

    Raises
    ------
    ValueError
        ``path`` is a folder or an existing non-regular file, or its folder is missing.
    FileExistsError
        ``path`` exists and ``overwrite`` is False.

    See Also
    --------
    atomic_group : several files written as one.

    Examples
    --------
    >>> import os, tempfile
    >>> target = os.path.join(tempfile.mkdtemp(), "out.txt")
    >>> with atomic_write(target, "w") as f:
    ...     _ = f.write("done")
    >>> open(target).read()
    'done'
    """
    with atomic_group() as group:
        with group.open(path, mode, overwrite) as f:
            yield f


@contextlib.contextmanager
def c_stdout_to_stderr() -> Iterator[None]:
    """Send what C code prints to the process's stdout (file descriptor 1) to stderr while
    the block runs: libraries such as METIS ``printf`` diagnostics, which would otherwise
    mix into a command's output (``batchsel plan --json``). C's stdio buffer is flushed
    before fd 1 is restored, so nothing printed inside leaks out later.

    Where there is no usable file descriptor 1 (some embedded interpreters) the block
    runs unchanged.

    Yields
    ------
    None
        The block runs with file descriptor 1 pointing at stderr.
    """
    try:
        out = sys.__stdout__.fileno() if sys.__stdout__ is not None else 1
        saved = os.dup(out)
    except (OSError, ValueError, AttributeError):  # no usable fd 1 (e.g. some embedded interpreters)
        yield
        return
    try:
        _flush_c_stdio()
        for stream in {id(s): s for s in (sys.stdout, sys.__stdout__) if s is not None}.values():
            with contextlib.suppress(Exception):  # Python's own buffered text goes out first
                stream.flush()
        os.dup2(sys.__stderr__.fileno() if sys.__stderr__ is not None else 2, out)
        yield
    finally:
        _flush_c_stdio()
        os.dup2(saved, out)
        os.close(saved)


def _flush_c_stdio() -> None:
    with contextlib.suppress(Exception):  # no libc to flush (non-POSIX): nothing buffered there
        import ctypes

        ctypes.CDLL(None).fflush(None)


def save_npy(path: str | os.PathLike, array: np.ndarray, overwrite: bool = True) -> None:
    """``np.save`` through :func:`atomic_write` (the name is kept as given).

    Parameters
    ----------
    path : str or os.PathLike
        The file to write (no ``.npy`` is appended), checked as by :func:`atomic_write`.
    array : numpy.ndarray
        The array to save.
    overwrite : bool, default True
        Whether an existing file at ``path`` may be replaced.

    See Also
    --------
    load_array : read it back.
    """
    with atomic_write(path, "wb", overwrite=overwrite) as f:
        np.save(f, array)


def load_array(path: str | os.PathLike, key: str | None = None) -> np.ndarray:
    """Load one array from ``.npy`` (memory-mapped), ``.npz`` (``key`` or the only array)
    or ``.pt`` (a tensor, or a dict of tensors with ``key``); ``FILE.npz:NAME`` names the
    key inside the path.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.npy``, ``.npz`` or ``.pt`` file; ``FILE.npz:NAME`` (or ``FILE.pt:NAME``)
        names the key when ``key`` is None and no file has that whole name.
    key : str or None, default None
        The array's name in an ``.npz`` file, or the tensor's in a ``.pt`` dict; ``None``:
        the only one there is.

    Returns
    -------
    numpy.ndarray
        The array: memory-mapped for ``.npy``; loaded for ``.npz``; converted from the
        tensor for ``.pt`` (bfloat16 as float32).

    Raises
    ------
    ValueError
        Naming the path, for a missing file, a folder, an unknown extension (saying how to
        convert) or a missing key; also for an ambiguous key or a file that cannot be read.

    See Also
    --------
    array_shape : the shape without loading the data.
    array_digest : a digest of the data.
    """
    path = os.fspath(path)
    if key is None and not os.path.exists(path) and ":" in os.path.basename(path):
        path, key = path.rsplit(":", 1)  # FILE.npz:NAME
    if os.path.isdir(path):
        raise ValueError(f"{path!r} is a directory, not a file")
    if not os.path.exists(path):
        raise ValueError(f"no such file {path!r}")
    try:
        if path.endswith(".npy"):
            return np.load(path, mmap_mode="r")
        if path.endswith(".npz"):
            with np.load(path) as z:
                names = list(z.keys())
                if key is None:
                    if len(names) != 1:
                        raise ValueError(f"{path!r} holds arrays {names}; name one (FILE.npz:NAME)")
                    key = names[0]
                if key not in names:
                    raise ValueError(f"{path!r} has no array {key!r} (it has {names})")
                return z[key]
        if path.endswith(".pt"):
            import torch

            obj = torch.load(path, map_location="cpu", weights_only=True)
            if isinstance(obj, dict):
                if key is None:
                    if len(obj) != 1:
                        raise ValueError(f"{path!r} holds {sorted(obj)}; name one (FILE.pt:NAME)")
                    key = next(iter(obj))
                if key not in obj:
                    raise ValueError(f"{path!r} has no tensor {key!r} (it has {sorted(obj)})")
                obj = obj[key]
            if not hasattr(obj, "numpy"):
                raise ValueError(f"{path!r} does not hold a tensor (got {type(obj).__name__})")
            return tensor_to_numpy(obj)  # bfloat16 -> float32 (numpy has no bfloat16)
    except (OSError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError, RuntimeError) as exc:
        # truncated / corrupted files: BadZipFile (.npz), RuntimeError or UnpicklingError (.pt)
        raise ValueError(f"cannot read {path!r}: {exc}") from None
    except ValueError as exc:
        # raised here, not inside numpy: a file that cannot be read is bad input
        if str(exc).startswith(repr(path)) or path in str(exc):
            raise ValueError(str(exc)) from None
        raise ValueError(f"cannot read {path!r}: {exc}") from None
    raise ValueError(f"{path!r}: unknown file type (expected .npy, .npz or .pt); {conversion_hint(path)}")


def conversion_hint(path: str) -> str:
    """How to turn ``path``, a file of another format, into the ``.npy`` file batchsel
    reads: a command to run for text tables (``.csv``, ``.tsv``, ``.txt``) and Parquet,
    else the numpy call that saves an array.

    Parameters
    ----------
    path : str
        The file of another format (its extension picks the advice).

    Returns
    -------
    str
        The advice, one line, for an error message.

    Examples
    --------
    >>> print(conversion_hint("emb.csv"))
    convert it to .npy first: python -c "import numpy as np; np.save('emb.npy', np.loadtxt('emb.csv', delimiter=',', dtype='float32'))" (skiprows=1 skips a header line)
    """
    stem, ext = os.path.splitext(path)
    npy = stem + ".npy"
    delimiter = {".csv": ", delimiter=','", ".tsv": ", delimiter='\\t'", ".txt": ""}.get(ext.lower())
    if delimiter is not None:
        imports, read = "numpy as np", f"np.loadtxt({path!r}{delimiter}, dtype='float32')"
        after = " (skiprows=1 skips a header line)"
    elif ext.lower() == ".parquet":
        imports, read, after = "numpy as np, pandas as pd", f"pd.read_parquet({path!r}).to_numpy('float32')", ""
    else:
        return f"save the array with numpy.save({npy!r}, array)"
    return f'convert it to .npy first: python -c "import {imports}; np.save({npy!r}, {read})"{after}'


def array_shape(path: str | os.PathLike, key: str | None = None) -> tuple[int, ...]:
    """The shape of the array :func:`load_array` would return, reading only the header
    where the format allows (``.npy``, and ``.npz`` members stored as ``.npy``); a ``.pt``
    file is loaded (it has no header to read). Raises ``ValueError`` as ``load_array``.

    Parameters
    ----------
    path, key
        As for :func:`load_array` (``FILE.npz:NAME`` included).

    Returns
    -------
    tuple of int
        The array's shape.
    """
    path = os.fspath(path)
    if key is None and not os.path.exists(path) and ":" in os.path.basename(path):
        path, key = path.rsplit(":", 1)  # FILE.npz:NAME
    if path.endswith((".npy", ".npz")) and os.path.isfile(path):
        try:
            if path.endswith(".npy"):
                return tuple(np.load(path, mmap_mode="r").shape)  # maps the file: reads the header only
            with zipfile.ZipFile(path) as z:
                names = [n[:-4] for n in z.namelist() if n.endswith(".npy")]
                if key is None and len(names) == 1:
                    key = names[0]
                if key in names:
                    with z.open(key + ".npy") as f:
                        version = np.lib.format.read_magic(f)
                        read = (
                            np.lib.format.read_array_header_1_0
                            if version == (1, 0)
                            else np.lib.format.read_array_header_2_0
                        )
                        shape, _, _ = read(f)
                        return tuple(shape)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile):
            pass  # load_array names the problem
    return tuple(np.shape(load_array(path, key)))


def array_digest(path: str | os.PathLike, key: str | None = None, chunk_bytes: int = 1 << 24) -> str:
    """A SHA-256 digest of the array :func:`load_array` would return (dtype, shape and
    values in C order), to tell whether two files hold the same data. A C-order ``.npy``
    file is read once, ``chunk_bytes`` at a time with plain reads (neither loaded nor
    memory-mapped); other files are loaded. Raises ``ValueError`` as ``load_array`` does,
    and for a truncated ``.npy`` file.

    Parameters
    ----------
    path, key
        As for :func:`load_array` (``FILE.npz:NAME`` included).
    chunk_bytes : int, default 1 << 24
        The bytes read (or hashed) at a time, >= 1: bounds the memory used.

    Returns
    -------
    str
        The SHA-256 hex digest (64 characters): equal for equal dtype, shape and values,
        whatever the file format.

    Examples
    --------
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> x = np.arange(6, dtype=np.float32).reshape(3, 2)
    >>> np.save(os.path.join(folder, "x.npy"), x)
    >>> np.savez(os.path.join(folder, "x.npz"), x=x)
    >>> array_digest(os.path.join(folder, "x.npy")) == array_digest(os.path.join(folder, "x.npz"))
    True
    """
    path = os.fspath(path)
    if key is None and not os.path.exists(path) and ":" in os.path.basename(path):
        path, key = path.rsplit(":", 1)  # FILE.npz:NAME
    a = load_array(path, key)
    digest = hashlib.sha256(repr((np.dtype(a.dtype).str, tuple(a.shape))).encode())
    if isinstance(a, np.memmap) and a.flags.c_contiguous:
        offset, remaining = a.offset, a.nbytes
        del a  # the map: the data is read with plain reads below
        buffer = memoryview(bytearray(min(chunk_bytes, max(remaining, 1))))
        with open(path, "rb") as fh:
            fh.seek(offset)
            while remaining:
                got = fh.readinto(buffer[: min(len(buffer), remaining)])
                if not got:
                    raise ValueError(f"{path!r} is truncated ({remaining} bytes of data missing)")
                digest.update(buffer[:got])
                remaining -= got
        return digest.hexdigest()
    a = np.asarray(a)
    rows = max(1, chunk_bytes // max(a.itemsize * int(np.prod(a.shape[1:], dtype=np.int64)), 1))
    for start in range(0, a.shape[0] if a.ndim else 1, rows):  # C order, a block of rows at a time
        digest.update(np.ascontiguousarray(a[start : start + rows] if a.ndim else a).tobytes())
    return digest.hexdigest()


class NpyRows:
    """The rows of a 2-D ``.npy`` file, read chunk by chunk with plain reads (a memmap's
    touched pages would count in the resident memory until unmapped).

    Parameters
    ----------
    path : str
        A ``.npy`` file holding a non-empty 2-D (``N x d``) array.

    Attributes
    ----------
    array : numpy.ndarray
        The file memory-mapped (its header, and random rows for a sample).
    path : str
        The file.
    shape : tuple of int
        ``(N, d)``.

    Raises
    ------
    ValueError
        ``path`` is not a ``.npy`` file, cannot be read, or does not hold a non-empty
        2-D array.

    See Also
    --------
    load_array : the whole array, memory-mapped.
    """

    def __init__(self, path: str) -> None:
        if not path.endswith(".npy"):
            raise ValueError(f"streaming reads .npy files (chunk by chunk), got {path!r}")
        self.array = load_array(path)  # memory-mapped: the header, and random rows for a sample
        if self.array.ndim != 2:
            raise ValueError(f"{path!r} must hold a 2-D (N x d) array, got shape {self.array.shape}")
        if self.array.shape[0] == 0 or self.array.shape[1] == 0:
            raise ValueError(f"{path!r} is empty: shape {self.array.shape}")
        self.path, self.shape = path, self.array.shape

    def chunks(self, rows: int, start: int = 0) -> Iterator[np.ndarray]:
        """The rows from ``start`` on, ``rows`` at a time, read from the file in order.

        Parameters
        ----------
        rows : int
            Rows per chunk, >= 1 (the last chunk may hold fewer).
        start : int, default 0
            The first row, in ``[0, N]``.

        Yields
        ------
        numpy.ndarray
            The next ``rows x d`` chunk, in the file's dtype (a new array; slices of the
            memmap for a Fortran-order file).

        Raises
        ------
        ValueError
            The file is truncated (the message names the row).
        """
        a = self.array
        if not isinstance(a, np.memmap) or not a.flags.c_contiguous:
            for s in range(start, a.shape[0], rows):  # Fortran order: slices of the memmap
                yield a[s : s + rows]
            return
        n, d = a.shape
        with open(self.path, "rb") as fh:
            fh.seek(a.offset + start * d * a.dtype.itemsize)
            for s in range(start, n, rows):
                count = min(rows, n - s)
                chunk = np.fromfile(fh, dtype=a.dtype, count=count * d)
                if chunk.size != count * d:
                    raise ValueError(f"{self.path!r} is truncated at row {s}")
                yield chunk.reshape(count, d)
