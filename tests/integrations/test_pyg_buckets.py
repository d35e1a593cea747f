"""Cluster-GCN batches balanced across ranks by cost (issue #48): ``ClusterData.costs``
(nodes and edges of every cluster's induced subgraph, checked against the subgraphs
themselves) and ``ClusterLoader(max_cost=...)`` (clusters packed under a budget, as many
batches on every rank, the ranks' batches of one step of near-equal cost)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

pytest.importorskip("torch_geometric")
from torch_geometric.data import Data  # noqa: E402
from torch_geometric.utils import subgraph  # noqa: E402

from batchsel.integrations.pyg import ClusterData, ClusterLoader  # noqa: E402

PARTS = 48


def uneven_graph(n: int = 3000, seed: int = 0) -> Data:
    """A ring of ``n`` nodes in six arcs of out-degree 2 to 32 (edges to nodes at most 25
    away, both directions, some repeated and some self loops), ids shuffled: METIS cuts
    clusters of about equal node counts but edge counts 16 times apart."""
    rng = np.random.default_rng(seed)
    degree = np.array([2, 4, 8, 16, 32, 6])[(np.arange(n) * 6) // n]
    src = np.repeat(np.arange(n), degree)
    dst = (src + rng.integers(-25, 26, src.size)) % n
    edge_index = np.concatenate([np.stack([src, dst]), np.stack([dst, src])], axis=1)
    perm = rng.permutation(n)
    e = edge_index.shape[1]
    return Data(x=torch.randn(n, 4), edge_index=torch.from_numpy(perm[edge_index]), edge_weight=torch.rand(e))


@pytest.fixture(scope="module")
def parts() -> ClusterData:
    return ClusterData(uneven_graph(), num_parts=PARTS, log=False)


def epoch_of(loader: ClusterLoader, parts: ClusterData, epoch: int) -> list[tuple[list[int], Data]]:
    """(cluster ids, batch) of every batch ``loader`` yields in ``epoch``."""
    loader.set_epoch(epoch)
    out = []
    for batch in loader:
        clusters = np.unique(parts.cluster[batch.n_id].numpy())
        out.append((clusters.tolist(), batch))
    return out


def relative_step_gaps(make, parts: ClusterData, epochs: int = 3) -> tuple[np.ndarray, list[int]]:
    """Every step's ``(max - min) / max`` of the two ranks' batch costs (nodes plus edges of
    the subgraph each rank trains on), over ``epochs``, and the steps per epoch."""
    loaders = [make(rank) for rank in (0, 1)]
    gaps, steps = [], []
    for epoch in range(epochs):
        cost = np.array(
            [[b.num_nodes + b.edge_index.size(1) for _, b in epoch_of(lo, parts, epoch)] for lo in loaders], float
        )
        gaps.append((cost.max(0) - cost.min(0)) / cost.max(0))
        steps.append(cost.shape[1])
    return np.concatenate(gaps), steps


def test_costs_are_the_induced_subgraphs_nodes_and_edges(parts):
    data = parts.data
    src, dst = data.edge_index
    assert (src == dst).any() and data.edge_index.T.unique(dim=0).size(0) < data.edge_index.size(1)  # loops, repeats
    nodes, edges, both = parts.costs("nodes"), parts.costs("edges"), parts.costs()
    for kind in (nodes, edges, both):
        assert kind.dtype == np.float64 and kind.shape == (PARTS,)
    for i in range(PARTS):
        members = parts.nodes_of([i])
        brute = subgraph(torch.from_numpy(members), data.edge_index, num_nodes=data.num_nodes)[0]
        assert (nodes[i], edges[i]) == (len(members), brute.size(1))
        alone = parts.collate([i])
        assert both[i] == alone.num_nodes + alone.edge_index.size(1)
    assert edges.max() > 8 * edges.min()  # uneven clusters: what the budget is for
    # the batches' subgraphs whatever keep_inter_cluster_edges is: a cluster alone in a batch
    outer = ClusterData(data, num_parts=PARTS, log=False, keep_inter_cluster_edges=True, sparse_format="csc")
    assert np.array_equal(outer.costs(), both)
    with pytest.raises(ValueError, match="'vertices'"):
        parts.costs("vertices")


@pytest.mark.parametrize("k", [2, 3])
def test_cost_batches_deal_every_cluster_once_in_equal_counts_within_budget(parts, k):
    costs = parts.costs()
    max_cost = k * costs.mean()
    loaders = [ClusterLoader(parts, max_cost=max_cost, rank=r, world_size=2, seed=4) for r in (0, 1)]
    over = costs > max_cost
    assert over.any() == (k == 2)  # k = 2: some clusters over the budget
    epochs = []
    for epoch in range(3):
        ranks = [epoch_of(loader, parts, epoch) for loader in loaders]
        assert len(ranks[0]) == len(ranks[1]) == len(loaders[0]) == len(loaders[1])
        assert len(ranks[0]) < PARTS / 2  # batches of several clusters
        ids = [c for rank in ranks for clusters, _ in rank for c in clusters]
        assert sorted(ids) == list(range(PARTS))  # disjoint, and covering
        for clusters, batch in (item for rank in ranks for item in rank):
            assert costs[clusters].sum() <= max_cost or len(clusters) == 1
            assert sorted(batch.n_id.tolist()) == sorted(parts.nodes_of(clusters).tolist())
            assert batch.edge_index.size(1) >= parts.costs("edges")[clusters].sum()  # the induced subgraph
        assert [len(c) == 1 for c, _ in ranks[0] + ranks[1] if over[c].any()] == [True] * int(over.sum())
        epochs.append([[c for c, _ in rank] for rank in ranks])
    assert epochs[0] != epochs[1]  # drawn anew every epoch
    again = ClusterLoader(parts, max_cost=max_cost, rank=1, world_size=2, seed=4)
    assert [c for c, _ in epoch_of(again, parts, 2)] == epochs[2][1]  # by (seed, epoch)


def test_cost_batches_balance_the_ranks_steps_unlike_batch_size(parts):
    """Two ranks: the median step's relative cost gap is within 10 % with ``max_cost``,
    several times smaller than with ``batch_size`` at about as many steps."""
    max_cost = 3 * parts.costs().mean()
    gaps, steps = relative_step_gaps(
        lambda r: ClusterLoader(parts, max_cost=max_cost, rank=r, world_size=2, seed=1), parts
    )
    plain, plain_steps = relative_step_gaps(
        lambda r: ClusterLoader(parts, batch_size=2, shuffle=True, rank=r, world_size=2, seed=1), parts
    )
    assert abs(steps[0] - plain_steps[0]) <= 0.25 * plain_steps[0]  # a like number of steps
    assert np.median(gaps) <= 0.10
    assert np.median(plain) >= 0.2 and np.median(plain) >= 5 * np.median(gaps)
    assert np.mean(gaps) < np.mean(plain) / 3


def test_cost_batches_with_costs_of_ones_own_and_resumed_mid_epoch(parts):
    nodes = parts.costs("nodes")
    by_nodes = ClusterLoader(parts, max_cost=4 * nodes.mean(), cost="nodes", rank=0, world_size=1)
    mine = ClusterLoader(parts, max_cost=4 * nodes.mean(), cost=nodes, rank=0, world_size=1)
    got = [c for c, _ in epoch_of(by_nodes, parts, 0)]
    assert got == [c for c, _ in epoch_of(mine, parts, 0)]
    assert all(nodes[c].sum() <= 4 * nodes.mean() for c in got)
    whole, first, resumed = (
        ClusterLoader(parts, max_cost=4 * nodes.mean(), cost="nodes", rank=0, world_size=1) for _ in range(3)
    )
    whole.set_epoch(1)
    first.set_epoch(1)
    it = iter(first)
    head = [next(it).n_id.tolist() for _ in range(3)]
    resumed.load_state_dict(first.state_dict())
    assert head + [b.n_id.tolist() for b in resumed] == [b.n_id.tolist() for b in whole]


def test_batch_size_alone_is_as_before(parts):
    loader = ClusterLoader(parts, rank=0, world_size=1)  # PyG's defaults: one cluster, in order
    assert [np.unique(parts.cluster[b.n_id]).tolist() for b in loader] == [[i] for i in range(PARTS)]
    pairs = ClusterLoader(parts, 2, True, rank=0, world_size=1)
    assert len(pairs) == PARTS // 2 and all(len(np.unique(parts.cluster[b.n_id])) == 2 for b in pairs)


@pytest.mark.parametrize("bad", [0, -5.0, math.nan, math.inf, "10"])
def test_a_bad_max_cost_is_a_value_error_naming_it(parts, bad):
    with pytest.raises(ValueError, match="max_cost"):
        ClusterLoader(parts, max_cost=bad, rank=0, world_size=1)


def test_conflicting_arguments_are_value_errors(parts):
    with pytest.raises(ValueError, match=r"batch_size=2, max_cost=5000"):
        ClusterLoader(parts, batch_size=2, max_cost=5000, rank=0, world_size=1)
    with pytest.raises(ValueError, match="shuffle=False"):
        ClusterLoader(parts, shuffle=False, max_cost=5000, rank=0, world_size=1)
    with pytest.raises(ValueError, match="give max_cost too"):
        ClusterLoader(parts, batch_size=2, cost="nodes", rank=0, world_size=1)
    with pytest.raises(ValueError, match="cost must be one of .*'tokens'"):
        ClusterLoader(parts, max_cost=5000, cost="tokens", rank=0, world_size=1)
    with pytest.raises(ValueError, match="cost"):
        ClusterLoader(parts, max_cost=5000, cost=np.ones(PARTS - 1), rank=0, world_size=1)
