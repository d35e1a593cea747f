"""Reading arrays from files and writing files atomically.

Every file batchsel writes goes through :func:`atomic_write`: the content is written to a
temporary name in the same folder, flushed to disk, then renamed over the final name, so
a crash or Ctrl-C never leaves a half-written file under the name a user asked for.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import stat
import tempfile
import zipfile
from typing import IO, Iterator

import numpy as np


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


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb", overwrite: bool = True) -> Iterator[IO]:
    """Open a temporary file beside ``path``; rename it to ``path`` only on success.

    >>> import os, tempfile
    >>> target = os.path.join(tempfile.mkdtemp(), "out.txt")
    >>> with atomic_write(target, "w") as f:
    ...     _ = f.write("done")
    >>> open(target).read()
    'done'
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ValueError(f"output {path!r} is a directory")
    if not overwrite and os.path.exists(path):
        raise FileExistsError(f"output {path!r} exists (pass overwrite / --force to replace it)")
    if not os.path.isdir(folder):
        raise ValueError(f"output folder {folder!r} does not exist")
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, mode) as f:
            # mkstemp makes the file 0600; give it the mode a plain open() would (or keep
            # the replaced file's), so plans stay readable by the other ranks / users.
            try:
                os.fchmod(f.fileno(), stat.S_IMODE(os.stat(path).st_mode))
            except FileNotFoundError:
                os.fchmod(f.fileno(), 0o666 & ~_umask())
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def save_npy(path: str | os.PathLike, array: np.ndarray, overwrite: bool = True) -> None:
    """``np.save`` through :func:`atomic_write` (the name is kept as given)."""
    with atomic_write(path, "wb", overwrite=overwrite) as f:
        np.save(f, array)


def load_array(path: str | os.PathLike, key: str | None = None) -> np.ndarray:
    """Load one array from ``.npy`` (memory-mapped), ``.npz`` (``key`` or the only array)
    or ``.pt`` (a tensor, or a dict of tensors with ``key``); ``FILE.npz:NAME`` names the
    key inside the path.

    Raises ``ValueError`` naming the path for a missing file, a folder, an unknown
    extension or a missing key.
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
            return obj.detach().cpu().numpy()
    except (OSError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError, RuntimeError) as exc:
        # truncated / corrupted files: BadZipFile (.npz), RuntimeError or UnpicklingError (.pt)
        raise ValueError(f"cannot read {path!r}: {exc}") from None
    except ValueError as exc:
        if str(exc).startswith(repr(path)) or path in str(exc):
            raise
        raise ValueError(f"cannot read {path!r}: {exc}") from None
    raise ValueError(f"{path!r}: unknown file type (expected .npy, .npz or .pt)")
