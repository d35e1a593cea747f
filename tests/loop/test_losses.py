"""GraphRegularizedLoss: the formula against a dense reference, decomposition over
batches, gradients, reductions, the in-batch edge lookup, input errors, and the
semi-supervised example script on a reduced size."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import REPO as ROOT

from batchsel import GraphRegularizedLoss
from batchsel.loop.losses import batch_edges


def random_graph(n: int, density: float, seed: int, symmetric: bool = True) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    w = sp.random(n, n, density=density, random_state=rng, format="csr", dtype=np.float64)
    w.data = rng.uniform(0.1, 1.0, size=w.nnz)
    if symmetric:
        w = w.maximum(w.T)
    w.setdiag(0)
    w.eliminate_zeros()
    return sp.csr_matrix(w.astype(np.float32))


def reference_objective(logits: np.ndarray, labels: np.ndarray, dense_w: np.ndarray, mu: float, nu: float) -> float:
    """J written out densely, term by term, in float64 (independent of the module)."""
    z = logits - logits.max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    p = np.exp(log_p)
    labeled = labels >= 0
    ce = -log_p[labeled, labels[labeled]].sum()
    kl = (p[:, None, :] * (log_p[:, None, :] - log_p[None, :, :])).sum(axis=2)  # kl[i, j] = KL(p_i || p_j)
    graph = (dense_w * kl).sum()
    entropy = -(p * log_p).sum()
    return ce + mu * graph - nu * entropy


@pytest.fixture
def problem():
    n, c = 40, 4
    rng = np.random.default_rng(1)
    graph = random_graph(n, 0.15, seed=2)
    logits = rng.normal(scale=2.0, size=(n, c))
    labels = np.where(rng.random(n) < 0.3, rng.integers(0, c, size=n), -1)
    return graph, logits, labels


def test_decomposes_over_a_partition(problem):
    graph, logits, labels = problem
    n = graph.shape[0]
    mu, nu = 0.7, 0.2
    loss_fn = GraphRegularizedLoss(graph, mu=mu, nu=nu, reduction="sum")
    batches = np.array_split(np.random.default_rng(3).permutation(n), 4)
    total = sum(float(loss_fn(torch.as_tensor(logits[b]), b, labels[b])) for b in batches)
    same_batch = np.zeros((n, n), dtype=bool)
    for b in batches:
        same_batch[np.ix_(b, b)] = True
    dense = graph.toarray().astype(np.float64)
    expected = reference_objective(logits, labels, dense * same_batch, mu, nu)
    assert total == pytest.approx(expected, rel=1e-5)
    # the restriction matters: the full graph gives a different value (edges cross batches)
    full = reference_objective(logits, labels, dense, mu, nu)
    assert abs(full - expected) > 1e-3
    # one batch holding everything is the full objective
    everything = np.arange(n)
    assert float(loss_fn(torch.as_tensor(logits), everything, labels)) == pytest.approx(full, rel=1e-5)


def test_parts_and_mean_reduction(problem):
    graph, logits, labels = problem
    b = np.arange(0, 40, 2)
    x = torch.as_tensor(logits[b])
    summed = GraphRegularizedLoss(graph, mu=0.5, nu=0.3, reduction="sum")
    meaned = GraphRegularizedLoss(graph, mu=0.5, nu=0.3, reduction="mean")
    total_sum = float(summed(x, b, labels[b]))
    total_mean = float(meaned(x, b, labels[b]))
    s, m = summed.last_parts, meaned.last_parts
    assert s["total"] == pytest.approx(total_sum)
    assert total_sum == pytest.approx(s["ce"] + 0.5 * s["graph"] - 0.3 * s["entropy"])
    assert total_mean == pytest.approx(m["ce"] + 0.5 * m["graph"] - 0.3 * m["entropy"])
    num_labeled = int((labels[b] >= 0).sum())
    assert m["num_labeled"] == s["num_labeled"] == num_labeled > 0
    assert m["ce"] == pytest.approx(s["ce"] / num_labeled)
    assert m["graph"] == pytest.approx(s["graph"] / len(b))
    assert m["entropy"] == pytest.approx(s["entropy"] / len(b))
    assert s["num_edges"] == graph[b][:, b].nnz > 0


def test_batch_without_labels_or_edges_is_finite_and_differentiable():
    graph = sp.csr_matrix(np.array([[0, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=np.float32))
    loss_fn = GraphRegularizedLoss(graph, mu=1.0, nu=0.5, reduction="mean")
    x = torch.randn(2, 3, requires_grad=True)
    loss = loss_fn(x, np.array([0, 2]), torch.tensor([-1, -1]))
    loss.backward()
    assert loss_fn.last_parts["ce"] == 0.0 and loss_fn.last_parts["num_edges"] == 0
    assert torch.isfinite(loss) and torch.isfinite(x.grad).all()
    # only the entropy term is left: its gradient pushes towards uniform predictions
    assert loss.item() == pytest.approx(-0.5 * loss_fn.last_parts["entropy"])


def test_symmetric_graph_counts_both_directions():
    w = 0.8
    graph = sp.csr_matrix(np.array([[0, w], [w, 0]], dtype=np.float32))
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    p = torch.softmax(logits, 1)
    kl01 = float((p[0] * (p[0] / p[1]).log()).sum())
    kl10 = float((p[1] * (p[1] / p[0]).log()).sum())
    both = GraphRegularizedLoss(graph, mu=1.0, nu=0.0, reduction="sum")
    one = GraphRegularizedLoss(sp.triu(graph).tocsr(), mu=1.0, nu=0.0, reduction="sum")
    unlabeled = [-1, -1]
    assert float(both(logits, [0, 1], unlabeled)) == pytest.approx(np.float32(w) * (kl01 + kl10))
    assert float(one(logits, [0, 1], unlabeled)) == pytest.approx(np.float32(w) * kl01)
    assert kl01 != pytest.approx(kl10)  # KL is not symmetric, so the direction matters


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_gradcheck_double(problem, reduction):
    graph, logits, labels = problem
    b = np.array([3, 1, 4, 15, 9, 26, 5, 35, 8, 7, 19, 0])
    loss_fn = GraphRegularizedLoss(graph, mu=0.9, nu=0.3, reduction=reduction)
    assert graph[b][:, b].nnz > 0 and (labels[b] >= 0).any()
    x = torch.tensor(logits[b], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda z: loss_fn(z, b, labels[b]), (x,), eps=1e-6, atol=1e-6)


def test_batch_order_does_not_matter(problem):
    graph, logits, labels = problem
    loss_fn = GraphRegularizedLoss(graph, mu=1.3, nu=0.1, reduction="mean")
    b = np.arange(5, 30)
    perm = np.random.default_rng(0).permutation(len(b))
    a = float(loss_fn(torch.as_tensor(logits[b]), b, labels[b]))
    c = float(loss_fn(torch.as_tensor(logits[b[perm]]), torch.as_tensor(b[perm]), torch.as_tensor(labels[b[perm]])))
    assert a == pytest.approx(c, rel=1e-10)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 30), seed=st.integers(0, 10_000), size=st.integers(0, 40), symmetric=st.booleans())
def test_batch_edges_match_scipy_slicing(n, seed, size, symmetric):
    graph = sp.csr_matrix(random_graph(n, 0.3, seed=seed, symmetric=symmetric))
    graph.indices, graph.indptr = graph.indices.astype(np.int64), graph.indptr.astype(np.int64)
    batch = np.random.default_rng(seed).integers(0, n, size=size)  # unsorted, with repeats
    src, dst, w = batch_edges(graph, batch)
    got = np.zeros((size, size))
    np.add.at(got, (src, dst), w)
    expected = graph[batch][:, batch]
    assert len(src) == expected.nnz
    np.testing.assert_array_equal(got, expected.toarray())


@pytest.mark.parametrize(
    "args, match",
    [
        ((torch.zeros(3, 2), [0, 1], [0, 1, -1]), r"logits 3, batch_indices 2, labels 3"),
        ((torch.zeros(2, 2), [0, 1], [0, 1, 1]), r"logits 2, batch_indices 2, labels 3"),
        ((torch.zeros(2, 2), [0, 1], [0, 2]), r"labels must be < the number of classes \(2"),
        ((torch.zeros(2, 2), [0, 1], [0, -2]), r"labels must be >= -1, found -2"),
        ((torch.zeros(2, 2), [0, 5], [0, 1]), r"batch_indices must be in \[0, 4\).*found 5"),
        ((torch.zeros(2, 2), [-1, 0], [0, 1]), r"batch_indices must be in \[0, 4\).*found -1"),
        ((torch.zeros(2), [0, 1], [0, 1]), r"logits must be 2-D"),
        ((torch.zeros(2, 2), [[0, 1]], [0, 1]), r"batch_indices must be 1-D"),
    ],
)
def test_bad_input_names_the_problem(args, match):
    loss_fn = GraphRegularizedLoss(random_graph(4, 0.5, seed=0))
    with pytest.raises(ValueError, match=match):
        loss_fn(*args)


def test_bad_construction():
    graph = random_graph(5, 0.5, seed=0)
    with pytest.raises(ValueError, match=r"graph has 5 nodes but the data has 6 examples"):
        GraphRegularizedLoss(graph, num_examples=6)
    with pytest.raises(ValueError, match=r"graph must be square, got shape \(5, 4\)"):
        GraphRegularizedLoss(sp.csr_matrix((5, 4), dtype=np.float32))
    with pytest.raises(TypeError, match=r"scipy.sparse"):
        GraphRegularizedLoss(graph.toarray())
    with pytest.raises(ValueError, match=r"mu must be finite and >= 0, got -1.0"):
        GraphRegularizedLoss(graph, mu=-1)
    with pytest.raises(ValueError, match=r"nu must be finite and >= 0, got nan"):
        GraphRegularizedLoss(graph, nu=float("nan"))
    with pytest.raises(ValueError, match=r"reduction must be one of .* got 'none'"):
        GraphRegularizedLoss(graph, reduction="none")
    negative = graph.copy()
    negative.data[0] = -0.5
    with pytest.raises(ValueError, match=r"graph weights must be >= 0, found -0.5"):
        GraphRegularizedLoss(negative)
    with pytest.raises(TypeError, match=r"labels must hold integer class ids"):
        GraphRegularizedLoss(graph)(torch.zeros(2, 2), [0, 1], [0.5, 1.0])


def test_graph_term_pulls_neighbours_together():
    """Minimizing the loss with one labeled end of an edge propagates its label."""
    graph = sp.csr_matrix(np.array([[0, 1], [1, 0]], dtype=np.float32))
    loss_fn = GraphRegularizedLoss(graph, mu=1.0, nu=0.0)
    x = torch.zeros(2, 3, requires_grad=True)
    for _ in range(30):  # plain gradient descent on the logits
        (grad,) = torch.autograd.grad(loss_fn(x, [0, 1], [2, -1]), x)
        x = (x - 1.0 * grad).detach().requires_grad_()
    assert x.argmax(1).tolist() == [2, 2]


def _example(*args: str) -> dict:
    cmd = [
        sys.executable,
        str(ROOT / "examples" / "semi_supervised.py"),
        "--num-examples",
        "500",
        "--steps",
        "150",
        "--eval-every",
        "50",
        "--json",
        *args,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_example_script_runs_and_learns():
    result = _example("--method", "blocks")
    assert result["world_size"] == 1 and result["num_labeled"] >= 10
    assert result["test_acc"] > 0.5  # 10 classes: chance is 0.1
    assert result["edges_per_example"] > 0.3 * result["graph_degree"]  # block batches keep most edges


# under mpiexec -n 2 the script runs (and learns: test accuracy > 0.5) in
# tests/project/test_examples.py::test_demo_filter_and_ssl_runs_on_two_ranks, the demo's graph-reg. SSL run
