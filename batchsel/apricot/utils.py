"""apricot's helpers: ``check_random_state`` (its seeding rule), the data it accepts
(:func:`as_data`) and the similarity of the rows it builds its graph functions on
(:func:`similarity`), computed as apricot computes it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp


def check_random_state(seed: Any) -> np.random.RandomState:
    """apricot's (and scikit-learn's) seeding rule.

    Parameters
    ----------
    seed : None, int or numpy.random.RandomState
        None (or ``numpy.random``): NumPy's global RandomState; an int: a new seeded one; a
        RandomState: itself.

    Returns
    -------
    numpy.random.RandomState

    Example
    -------
    >>> check_random_state(3).randint(100) == np.random.RandomState(3).randint(100)
    True
    """
    if seed is None or seed is np.random:
        # NumPy has no public accessor for its global RandomState (scikit-learn reads it so too)
        return np.random.mtrand._rand
    if isinstance(seed, (int, np.integer)):
        return np.random.RandomState(seed)
    if isinstance(seed, np.random.RandomState):
        return seed
    raise ValueError(f"{seed!r} cannot be used to seed a numpy.random.RandomState instance")


def as_data(X: Any) -> np.ndarray | sp.csr_matrix:
    """The data a selection's ``fit`` accepts, as apricot: a list of lists or a 2-D array
    (as float64), or a sparse matrix (as CSR).

    Parameters
    ----------
    X : list, numpy.ndarray or scipy.sparse matrix
        The rows.

    Returns
    -------
    numpy.ndarray or scipy.sparse.csr_matrix

    Raises
    ------
    ValueError
        With apricot's message, for another type or a number of dimensions other than 2.

    Example
    -------
    >>> as_data([[1, 2], [3, 4]]).dtype.name
    'float64'
    """
    if sp.issparse(X):
        return sp.csr_matrix(X)
    if not isinstance(X, (list, np.ndarray)):
        raise ValueError("X must be either a list of lists, a 2D numpy array, or a scipy.sparse.csr_matrix.")
    x = np.asarray(X)
    if x.ndim != 2:
        raise ValueError("X must have exactly two dimensions.")
    return x if x.dtype == np.float64 else x.astype(np.float64)


def similarity(X: Any, metric: str, n_neighbors: Any = None, Y: Any = None) -> np.ndarray | sp.csr_matrix:
    """apricot's similarity of the rows of X, computed as apricot computes it (its
    ``_calculate_pairwise_distances``, scikit-learn's distances, then ``max d - d``, or
    ``max d^2 - d^2`` for euclidean, and the squared cosine / correlation), so that its
    float64 values, exact ties included, are apricot's.

    Parameters
    ----------
    X : numpy.ndarray
        The rows (float64); returned as they are for ``"precomputed"`` and ``"ignore"``.
    metric : str
        ``"euclidean"``, ``"cosine"``, ``"corr"`` / ``"correlation"``, any scikit-learn
        metric, ``"precomputed"`` or ``"ignore"``.
    n_neighbors : int or sklearn.neighbors.KNeighborsTransformer, optional
        A sparse k-NN similarity (scikit-learn's k-NN graph, as apricot); None: dense.
    Y : numpy.ndarray, optional
        Rows to compare X's with (apricot's reservoir in ``partial_fit``; dense only, and
        ``max d`` is then over X against Y); None: X's own.

    Returns
    -------
    numpy.ndarray or scipy.sparse.csr_matrix
        The ``n x n`` similarity (``n x len(Y)`` with Y).

    Example
    -------
    >>> similarity(np.array([[0.0], [1.0], [3.0]]), "euclidean").tolist()
    [[9.0, 8.0, 0.0], [8.0, 9.0, 5.0], [0.0, 5.0, 9.0]]
    """
    if metric in ("precomputed", "ignore"):
        return X
    if sp.issparse(X):
        raise ValueError("Must passed in a precomputed sparse similarity matrix or a dense feature matrix.")
    from sklearn.metrics import pairwise_distances
    from sklearn.neighbors import KNeighborsTransformer

    name = "correlation" if metric == "corr" else metric
    cos = name in ("cosine", "correlation")
    if n_neighbors is None:
        if name == "euclidean":
            d = pairwise_distances(X, Y, metric=name, squared=True)
        else:
            d = pairwise_distances(X, Y, metric=name)
            if cos:  # 1 - (1 - d)^2, in place
                np.subtract(1, d, out=d)
                np.square(d, out=d)
                np.subtract(1, d, out=d)
        if cos:
            return np.subtract(1, d, out=d)
        return np.subtract(d.max(), d, out=d)
    if cos:
        d = pairwise_distances(X, metric=name)
        np.subtract(1, d, out=d)
        np.square(d, out=d)
        np.subtract(1, d, out=d)
        name = "precomputed"
    else:
        d = X
    if isinstance(n_neighbors, KNeighborsTransformer):
        transformer = n_neighbors
    else:
        transformer = KNeighborsTransformer(n_neighbors=int(n_neighbors), metric=name)
    g = sp.csr_matrix(transformer.fit_transform(d))
    g.data = 1 - g.data if cos else g.max() - g.data
    return g
