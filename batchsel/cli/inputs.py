"""What the ``batchsel`` commands read: their input files, checked and named in errors by
the option that gave them, and the option values more than one command checks alike.

The commands call these through the module (``inputs.read_embeddings(path)``), so a test
can stand in for one of them.
"""

from __future__ import annotations

import math
import os
import zipfile
from typing import Any

import numpy as np

from batchsel.cli.errors import UsageError
from batchsel.core.checks import check_graph, check_labels, check_metric, check_rows, load_embeddings
from batchsel.core.io import array_shape, load_array

# "l2" (faiss's name) is accepted as a synonym of "euclidean": metric() translates it.
METRICS = ("cosine", "euclidean", "l2")


def input_file(spec: str) -> str:
    """The file of an input argument (``FILE.npz:NAME`` names an array inside FILE).

    Parameters
    ----------
    spec : str
        The argument as given: ``PATH`` or ``FILE.npz:NAME``.

    Returns
    -------
    str
        ``spec`` itself when it names an existing file or has no ``:NAME``, else FILE.

    Examples
    --------
    >>> input_file("bundle.npz:emb")
    'bundle.npz'
    """
    if not os.path.exists(spec) and ":" in os.path.basename(spec):
        return spec.rsplit(":", 1)[0]
    return spec


def read_embeddings(path: str) -> np.ndarray:
    """N x d float32 embeddings from a file (.npy stays memory-mapped).

    Parameters
    ----------
    path : str
        ``FILE.npy``, ``FILE.npz[:NAME]`` or ``FILE.pt[:NAME]``.

    Returns
    -------
    numpy.ndarray
        The checked N x d float32 array (finite, at least one row and column).
    """
    return load_embeddings(load_array(path), name=f"embeddings {path!r}")


def num_rows(path: str) -> int:
    """N of an N x d embeddings file, from its header where the format has one: random
    batches need nothing else (loading would copy a float64 file to float32 and read all
    of it for the NaN check).

    Parameters
    ----------
    path : str
        An embeddings file, as for :func:`read_embeddings`.

    Returns
    -------
    int
        The number of rows, N > 0.

    Raises
    ------
    UsageError
        When the array is not 2-D or is empty.
    """
    shape = array_shape(path)
    if len(shape) != 2:
        raise UsageError(f"embeddings {path!r} must be 2-D (N x d), got shape {shape}")
    if shape[0] == 0 or shape[1] == 0:
        raise UsageError(f"embeddings {path!r} is empty: shape {shape}")
    return int(shape[0])


def read_labels(path: str, num_examples: int, allow_unlabeled: bool) -> np.ndarray:
    """The class labels of ``num_examples`` examples from a file.

    Parameters
    ----------
    path : str
        An array file, as for :func:`read_embeddings`.
    num_examples : int
        N: one label per example.
    allow_unlabeled : bool
        Whether -1 (unlabeled) is accepted.

    Returns
    -------
    numpy.ndarray
        The checked labels.
    """
    return check_labels(load_array(path), num_examples, name=f"labels {path!r}", allow_unlabeled=allow_unlabeled)


def read_losses(path: str, num_examples: int) -> np.ndarray:
    """Per-example losses (``plan --losses``) from a file.

    Parameters
    ----------
    path, num_examples
        As for :func:`read_labels`: an array file, and N (one loss per example).

    Returns
    -------
    numpy.ndarray
        The checked 1-D losses.
    """
    return check_rows(load_array(path), num_examples, f"losses {path!r} (one per example)", ndim=1)


def read_costs(path: str, num_examples: int | None = None, option: str = "--method buckets") -> np.ndarray:
    """Per-example costs (``plan --method buckets``, ``inspect --costs``: token lengths,
    durations) from a file.

    Parameters
    ----------
    path : str
        An array file, as for :func:`read_embeddings`, holding one number ``>= 0`` per example.
    num_examples : int or None, default None
        N, the number of costs it must hold (``inspect``: the plan's examples); None: any.
    option : str, default "--method buckets"
        The option that reads them, for the message on an N x d array.

    Returns
    -------
    numpy.ndarray
        The checked float64 costs (:func:`batchsel.selectors.buckets.costs.check_costs`).

    Raises
    ------
    UsageError
        For an array of two or more dimensions (N x d embeddings given in place of costs),
        saying how to save costs.
    ValueError, TypeError
        For costs that are empty, negative, NaN or infinite, or not numbers.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "lengths.npy")
    >>> np.save(path, np.array([12, 7, 30]))
    >>> read_costs(path).tolist()
    [12.0, 7.0, 30.0]
    """
    from batchsel.selectors.buckets.costs import check_costs

    array = load_array(path)
    if array.ndim >= 2:
        raise UsageError(
            f"costs {path!r} has shape {array.shape}: {option} takes a 1-D array of one cost per example "
            "(e.g. its length in tokens), not embeddings; save one with numpy.save('lengths.npy', lengths)"
        )
    return check_costs(array, num_examples, name=f"costs {path!r}")


def read_probabilities(path: str, labels: np.ndarray | None, num_examples: int) -> np.ndarray:
    """A model's class probabilities (``audit --probabilities``) from a file.

    Parameters
    ----------
    path : str
        An array file, as for :func:`read_embeddings`: N x C, column c = label c.
    labels : numpy.ndarray or None
        The labels they are checked against.
    num_examples : int
        N.

    Returns
    -------
    numpy.ndarray
        The checked probabilities (:func:`batchsel.data.audit.check_probabilities`).
    """
    from batchsel.data.audit import check_probabilities

    return check_probabilities(load_array(path), labels, num_examples)


def read_graph(path: str, num_examples: int) -> Any:
    """An N x N graph saved by ``scipy.sparse.save_npz`` (``--graph``).

    Parameters
    ----------
    path : str
        The ``.npz`` file.
    num_examples : int
        N: the graph's number of nodes.

    Returns
    -------
    scipy.sparse.csr_matrix
        The checked graph.

    Raises
    ------
    UsageError
        When the file is missing, a folder, or not a ``save_npz`` file (the message
        says how to save one).
    """
    import scipy.sparse as sp

    if os.path.isdir(path):
        raise UsageError(f"graph {path!r} is a directory, not a file")
    if not os.path.exists(path):
        raise UsageError(f"no such graph file {path!r}")
    if not zipfile.is_zipfile(path):  # not an .npz (a CSV edge list, a .npy)
        npz = os.path.splitext(path)[0] + ".npz"
        raise UsageError(
            f"cannot read graph {path!r}: not a scipy.sparse.save_npz file; save the N x N matrix with "
            f"scipy.sparse.save_npz({npz!r}, matrix)"
        )
    try:
        graph = sp.load_npz(path)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise UsageError(f"cannot read graph {path!r} (expected a scipy.sparse.save_npz file): {exc}") from None
    return check_graph(graph, num_nodes=num_examples, name=f"graph {path!r}")


def metric(name: str) -> str:
    """The metric a ``--metric`` of ``plan`` names (one of :data:`METRICS`), for the index and
    the set functions: ``"l2"`` as ``"euclidean"``.

    Examples
    --------
    >>> metric("l2")
    'euclidean'
    """
    return check_metric(name, METRICS)


def check_threshold(value: float) -> None:
    """Check the ``value`` of a ``--threshold`` (cosine similarity) of ``dedup`` and
    ``audit``: :class:`~batchsel.cli.errors.UsageError` unless it is in (0, 1]."""
    if not (math.isfinite(value) and 0 < value <= 1):
        raise UsageError(f"--threshold must be in (0, 1], got {value}")
