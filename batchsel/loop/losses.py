"""Graph-regularized semi-supervised loss that decomposes over mini-batches (docs: design/graph-batches.md;
after Thulasidasan & Bilmes 2016 and measure propagation).

For a batch ``b`` with labeled subset ``L`` (label -1 marks an unlabeled example),
``p_i = softmax(logits_i)`` and a graph with weights ``w_ij``::

    J_b = sum_{i in b cap L} CE(y_i, p_i)
          + mu * sum_{i, j in b, (i, j) in E} w_ij * KL(p_i || p_j)
          - nu * sum_{i in b} H(p_i)

The graph term only uses edges with both ends in the batch, so for batches that
partition the data the batch losses add up to the full objective restricted to those
edges: the loss decomposes over batches and therefore over data-parallel workers. Batches
drawn by ``GraphBlockSelector`` keep most edges inside a batch; random batches keep about
``(B - 1) / (N - 1)`` of them.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from batchsel.core.checks import check_graph, check_int, check_labels

logger = logging.getLogger(__name__)

REDUCTIONS = ("sum", "mean")

# Chosen on digits' validation split (benchmarks/bench_ssl.py): docs/design/graph-batches.md.
DEFAULT_MU = 1.0
DEFAULT_NU = 0.01


def _check_weight(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be finite and >= 0, got {value}")
    return value


def batch_edges(graph: sp.csr_matrix, batch_indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stored edges of ``graph`` with both ends in the batch, as positions in the
    batch: ``(src, dst, weight)``, one entry per stored (directed) entry ``graph[i, j]``.

    The same edges as ``graph[batch][:, batch]`` (an example listed twice in the batch is
    two nodes of the batch), found in ``O(B * degree * log B)``: rows are sliced from the
    CSR and their columns located in the sorted batch, never an ``N``-sized array.

    Parameters
    ----------
    graph : scipy.sparse.csr_matrix
        ``N x N`` graph over the training examples.
    batch_indices : numpy.ndarray of int
        The batch's examples (indices into the graph; repeats allowed).

    Returns
    -------
    src, dst : numpy.ndarray of int64
        The ends of every in-batch edge, as positions in the batch.
    weight : numpy.ndarray
        Their weights (the graph's dtype).

    See Also
    --------
    GraphRegularizedLoss : the loss whose graph term sums over these edges.

    Example
    -------
    >>> import scipy.sparse as sp
    >>> g = sp.csr_matrix(np.array([[0, 1, 0], [1, 0, 2], [0, 2, 0]], dtype=np.float32))
    >>> src, dst, w = batch_edges(g, np.array([2, 1]))
    >>> src.tolist(), dst.tolist(), w.tolist()
    ([0, 1], [1, 0], [2.0, 2.0])
    """
    batch_indices = np.asarray(batch_indices, dtype=np.int64)
    order = np.argsort(batch_indices, kind="stable")
    members = batch_indices[order]
    starts, stops = graph.indptr[batch_indices], graph.indptr[batch_indices + 1]
    degree = stops - starts
    # Flat positions of the batch rows' stored entries in graph.indices / graph.data.
    src_all = np.repeat(np.arange(len(batch_indices), dtype=np.int64), degree)
    entry = (
        np.arange(int(degree.sum()), dtype=np.int64)
        - np.repeat(np.cumsum(degree) - degree, degree)
        + np.repeat(starts, degree)
    )
    cols = graph.indices[entry]
    lo = np.searchsorted(members, cols, side="left")
    hi = np.searchsorted(members, cols, side="right")
    count = hi - lo  # occurrences of the neighbour in the batch (0 = edge leaves the batch)
    # Expand every entry to each occurrence of its neighbour (count is 1 without duplicates).
    src = np.repeat(src_all, count)
    first = np.repeat(lo, count)
    offset = np.arange(int(count.sum()), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    dst = order[first + offset]
    weight = np.repeat(graph.data[entry], count)
    return src, dst, weight


class GraphRegularizedLoss(torch.nn.Module):
    """Cross-entropy on labeled examples + graph smoothness (KL along in-batch edges) -
    entropy, for semi-supervised training on graph-consistent batches (docs: design/graph-batches.md).

    Parameters
    ----------
    graph : scipy.sparse matrix
        ``N x N`` scipy sparse affinity graph over the training examples (e.g.
        ``EmbeddingIndex(x).knn_graph(k)``); weights ``w_ij >= 0``. Each stored entry
        ``(i, j)`` is one term ``w_ij KL(p_i || p_j)``: on a symmetric graph an undirected
        edge therefore contributes both directions, ``w_ij (KL(p_i||p_j) + KL(p_j||p_i))``
        (the symmetric, Jeffreys divergence). Pass ``sp.triu(graph)`` for one direction.
    mu : float, default 1.0
        Weight of the graph term (>= 0). With ``reduction="mean"`` its effect grows with the
        edges kept inside a batch: the default (1) was measured with graph-block batches;
        random batches, which keep about ``(B - 1) / (N - 1)`` of the edges, want a larger
        mu (10 on the digits benchmark).
    nu : float, default 0.01
        Weight of the entropy term (>= 0); it is *subtracted*, so it keeps predictions
        from collapsing, as in measure propagation.
    num_examples : int or None, default None
        If given, the number of training examples: a graph of another size is refused.
    reduction : {"mean", "sum"}, default "mean"
        ``"sum"``: ``J_b`` exactly as above; batch losses add up to the full objective.
        ``"mean"``: every term is made a mean so the scale does not grow with the batch
        size or the label fraction: the CE is divided by the number of labeled examples
        in the batch (0 when there are none), the graph and entropy terms by the batch
        size ``B`` (so the graph term is the mean over examples of their in-batch
        neighbours' weighted KL: batches that keep more edges inside carry more of it).
        Summed over batches of equal size it is the full objective with the CE reweighted
        per batch and the other terms divided by B.

    Notes
    -----
    After each call, ``last_parts`` holds floats for logging: ``ce``, ``graph``,
    ``entropy`` (reduced as the loss, so ``total = ce + mu * graph - nu * entropy``),
    ``total``, ``num_labeled`` and ``num_edges`` (stored entries inside the batch).

    Example
    -------
    >>> import numpy as np, torch
    >>> from batchsel import EmbeddingIndex
    >>> x = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32)
    >>> graph = EmbeddingIndex(x, metric="euclidean", progress=False).knn_graph(k=5)
    >>> loss_fn = GraphRegularizedLoss(graph, mu=1.0, nu=0.01)
    >>> batch = np.arange(10)
    >>> logits = torch.zeros(10, 3, requires_grad=True)
    >>> labels = torch.tensor([0, 1, -1, -1, 2, -1, -1, -1, -1, -1])
    >>> loss = loss_fn(logits, batch, labels)
    >>> loss.backward()
    >>> round(loss_fn.last_parts["ce"], 4) == round(math.log(3), 4), loss_fn.last_parts["graph"]
    (True, 0.0)
    """

    def __init__(
        self,
        graph: Any,
        mu: float = DEFAULT_MU,
        nu: float = DEFAULT_NU,
        reduction: str = "mean",
        num_examples: int | None = None,
    ) -> None:
        super().__init__()
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        if num_examples is not None:
            num_examples = check_int(num_examples, "num_examples", minimum=1)
        self.graph = check_graph(graph, num_nodes=num_examples)
        if self.graph.nnz and self.graph.data.min() < 0:
            raise ValueError(f"graph weights must be >= 0, found {float(self.graph.data.min())}")
        self.num_examples = self.graph.shape[0]
        self.mu = _check_weight(mu, "mu")
        self.nu = _check_weight(nu, "nu")
        self.reduction = reduction
        self._last: dict[str, torch.Tensor] = {}
        self._counts: dict[str, int] = {}

    def extra_repr(self) -> str:
        return (
            f"num_examples={self.num_examples}, edges={self.graph.nnz}, mu={self.mu}, nu={self.nu}, "
            f"reduction={self.reduction!r}"
        )

    # -- input checks -----------------------------------------------------------------
    def _check_inputs(self, logits: torch.Tensor, batch_indices: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
        if not isinstance(logits, torch.Tensor):
            raise TypeError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
        if logits.ndim != 2 or logits.shape[1] == 0:
            raise ValueError(f"logits must be 2-D (batch x classes), got shape {tuple(logits.shape)}")
        if not logits.is_floating_point():
            raise TypeError(f"logits must be floating point, got dtype {logits.dtype}")
        if isinstance(batch_indices, torch.Tensor):
            batch_indices = batch_indices.detach().cpu().numpy()
        idx = np.asarray(batch_indices)
        if idx.ndim != 1:
            raise ValueError(f"batch_indices must be 1-D, got shape {idx.shape}")
        if idx.size and not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"batch_indices must be integer, got dtype {idx.dtype}")
        n_labels = len(labels) if hasattr(labels, "__len__") else None
        if not (logits.shape[0] == idx.shape[0] == n_labels):
            raise ValueError(
                f"logits, batch_indices and labels must have the same length, got "
                f"logits {logits.shape[0]}, batch_indices {idx.shape[0]}, labels {n_labels}"
            )
        idx = idx.astype(np.int64, copy=False)
        if idx.size and (idx.min() < 0 or idx.max() >= self.num_examples):
            bad = idx[(idx < 0) | (idx >= self.num_examples)][0]
            raise ValueError(
                f"batch_indices must be in [0, {self.num_examples}) (the graph has {self.num_examples} "
                f"nodes), found {int(bad)}"
            )
        y = check_labels(labels, len(idx), name="labels", allow_unlabeled=True)
        num_classes = logits.shape[1]
        if y.size and y.max() >= num_classes:
            raise ValueError(
                f"labels must be < the number of classes ({num_classes}, logits.shape[1]), found {int(y.max())}"
            )
        return idx, y

    # -- the loss ---------------------------------------------------------------------
    def forward(self, logits: torch.Tensor, batch_indices: Any, labels: Any) -> torch.Tensor:
        """The loss of one batch: ``logits`` (B x C) of the examples ``batch_indices``
        (B indices into the graph), ``labels`` (B class ids, -1 = unlabeled). An index
        listed twice (a padded batch) counts as two examples, each with its own edges.

        Parameters
        ----------
        logits : torch.Tensor
            B x C floating-point logits.
        batch_indices : array-like or tensor of int
            The B examples' indices into the graph.
        labels : array-like or tensor of int
            B class ids, -1 for an unlabeled example.

        Returns
        -------
        torch.Tensor
            The scalar loss (``last_parts`` holds its parts).
        """
        idx, y_host = self._check_inputs(logits, batch_indices, labels)
        batch_size = logits.shape[0]
        log_p = F.log_softmax(logits, dim=1)
        p = log_p.exp()

        # counted on the host and masked by multiplication: nothing here waits for the device
        num_labeled = int((y_host >= 0).sum())
        y = torch.as_tensor(y_host, device=logits.device)
        labeled = (y >= 0).to(log_p.dtype)
        ce = -(log_p.gather(1, y.clamp(min=0)[:, None])[:, 0] * labeled).sum()

        src, dst, w = batch_edges(self.graph, idx)
        if len(src):
            s = torch.as_tensor(src, device=logits.device)
            d = torch.as_tensor(dst, device=logits.device)
            weight = torch.as_tensor(w, dtype=logits.dtype, device=logits.device)
            kl = (p[s] * (log_p[s] - log_p[d])).sum(dim=1)
            graph_term = (weight * kl).sum()
        else:
            graph_term = log_p.sum() * 0.0  # keeps the graph of autograd connected

        entropy = -(p * log_p).sum()

        if self.reduction == "mean":
            ce = ce / max(num_labeled, 1)
            graph_term = graph_term / max(batch_size, 1)
            entropy = entropy / max(batch_size, 1)
        total = ce + self.mu * graph_term - self.nu * entropy
        self._last = {"total": total, "ce": ce, "graph": graph_term, "entropy": entropy}
        self._counts = {"num_labeled": num_labeled, "num_edges": len(src)}
        return total

    @property
    def last_parts(self) -> dict[str, float]:
        """The latest batch's loss and its parts (``total``, ``ce``, ``graph``,
        ``entropy``) and counts (``num_labeled``, ``num_edges``). Read on demand: on an
        accelerator, reading waits for the device, which the loss itself never does."""
        return {**{k: float(v.detach()) for k, v in self._last.items()}, **self._counts}


__all__ = ["GraphRegularizedLoss", "batch_edges", "DEFAULT_MU", "DEFAULT_NU"]
