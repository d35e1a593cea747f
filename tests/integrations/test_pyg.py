"""batchsel.integrations.pyg: Cluster-GCN and GraphSAINT loaders for PyTorch Geometric
without pyg-lib or torch-sparse (checked against brute-force induced subgraphs, edges in
PyG's order: sorted by (row, col), or (col, row) for sparse_format="csc")."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch
from paths import MP_SCRIPTS, REPO

pytest.importorskip("torch_geometric")
from torch_geometric.data import Data  # noqa: E402
from torch_geometric.utils import sort_edge_index, subgraph  # noqa: E402

from batchsel.integrations.pyg import (  # noqa: E402
    ClusterData,
    ClusterLoader,
    GraphSAINTEdgeSampler,
    GraphSAINTNodeSampler,
    GraphSAINTRandomWalkSampler,
)


def sbm(n: int = 240, blocks: int = 4, seed: int = 0) -> Data:
    """A stochastic block model with shuffled ids, node and edge attributes, a self loop and
    a repeated edge."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, blocks, n)
    pairs = rng.integers(0, n, (6 * n, 2))
    same = y[pairs[:, 0]] == y[pairs[:, 1]]
    keep = same | (rng.random(len(pairs)) < 0.1)
    src, dst = pairs[keep].T
    src, dst = np.concatenate([src, [0, src[0]]]), np.concatenate([dst, [0, dst[0]]])
    e = len(src)
    return Data(
        x=torch.randn(n, 3),
        y=torch.from_numpy(y),
        train_mask=torch.from_numpy(rng.random(n) < 0.5),
        edge_index=torch.from_numpy(np.stack([src, dst])),
        edge_attr=torch.randn(e, 2),
        edge_weight=torch.rand(e),
        note="graph-level",
    )


def check_batch(batch: Data, data: Data, sparse_format: str = "csr") -> None:
    """The batch is exactly the subgraph its nodes induce, with their attributes, its edges
    in PyG's order: sorted by (row, col) of the local ids (``csc``: by (col, row)), repeated
    edges in data's order, edge attributes alike."""
    n_id, n = batch.n_id, batch.num_nodes
    assert torch.equal(batch.x, data.x[n_id]) and torch.equal(batch.y, data.y[n_id])
    assert torch.equal(batch.train_mask, data.train_mask[n_id]) and batch.note == "graph-level"
    ref_index, _, mask = subgraph(
        n_id, data.edge_index, relabel_nodes=True, num_nodes=data.num_nodes, return_edge_mask=True
    )
    row, col = ref_index if sparse_format == "csr" else ref_index.flip(0)
    order = torch.sort(row * n + col, stable=True).indices
    assert torch.equal(batch.edge_index, ref_index[:, order])
    assert torch.equal(batch.edge_index, sort_edge_index(ref_index, num_nodes=n, sort_by_row=sparse_format == "csr"))
    assert torch.equal(batch.edge_weight, data.edge_weight[mask][order])
    assert torch.equal(batch.edge_attr, data.edge_attr[mask][order])
    assert batch.num_nodes == len(n_id)


def test_one_epoch_covers_every_node_once_with_induced_subgraphs():
    data = sbm()
    parts = ClusterData(data, num_parts=12, log=False)
    assert sorted(parts.node_perm.tolist()) == list(range(data.num_nodes))
    loader = ClusterLoader(parts, batch_size=5, shuffle=True, rank=0, world_size=1)
    seen = []
    for epoch in range(2):
        loader.set_epoch(epoch)
        batches = list(loader)
        assert [len(set(parts.cluster[b.n_id].tolist())) for b in batches] == [5, 5, 2]
        for batch in batches:
            check_batch(batch, data)
        seen.append(torch.cat([b.n_id for b in batches]))
        assert sorted(seen[-1].tolist()) == list(range(data.num_nodes))
    assert not torch.equal(seen[0], seen[1])  # a new order of clusters every epoch


def test_clusters_keep_more_edges_than_random_parts():
    data = sbm(n=400)
    loader = ClusterLoader(ClusterData(data, num_parts=8, log=False), batch_size=2, shuffle=True, rank=0, world_size=1)
    kept = sum(b.edge_index.size(1) for b in loader) / data.edge_index.size(1)
    part = np.random.default_rng(99).integers(0, 4, data.num_nodes)  # 4 random batches of nodes
    src, dst = data.edge_index.numpy()
    random_kept = float(np.mean(part[src] == part[dst]))
    assert kept > 2.5 * random_kept, (kept, random_kept)


@pytest.mark.parametrize("world, parts, batch", [(2, 12, 5), (3, 10, 2), (4, 12, 1), (3, 11, 3)])
def test_ranks_get_disjoint_clusters_that_cover_the_graph_in_equal_batches(world, parts, batch):
    data = sbm()
    cluster_data = ClusterData(data, num_parts=parts, log=False)
    for epoch in range(2):
        counts, nodes = set(), []
        for rank in range(world):
            loader = ClusterLoader(cluster_data, batch_size=batch, shuffle=True, rank=rank, world_size=world)
            loader.set_epoch(epoch)
            batches = list(loader)
            counts.add(len(batches))
            assert len(batches) == len(loader) and all(b.num_nodes > 0 for b in batches)
            nodes += [b.n_id for b in batches]
        assert len(counts) == 1
        assert sorted(torch.cat(nodes).tolist()) == list(range(data.num_nodes))


def test_too_few_clusters_for_equal_batches_are_refused():
    with pytest.raises(ValueError, match="5 clusters cannot be dealt to 2 ranks"):
        ClusterLoader(ClusterData(sbm(), num_parts=5, log=False), batch_size=1, rank=0, world_size=2)


def test_resume_mid_epoch_is_exact():
    cluster_data = ClusterData(sbm(), num_parts=12, log=False)

    def loader():
        return ClusterLoader(cluster_data, batch_size=2, shuffle=True, rank=1, world_size=2)

    full = loader()
    full.set_epoch(3)
    whole = [b.n_id.tolist() for b in full]
    first = loader()
    first.set_epoch(3)
    it = iter(first)
    head = [next(it).n_id.tolist() for _ in range(2)]
    state = first.state_dict(batches_done=2)
    resumed = loader()
    resumed.load_state_dict(state)
    resumed.set_epoch(3)
    assert head + [b.n_id.tolist() for b in resumed] == whole


@pytest.mark.parametrize("sparse_format", ["csr", "csc"])
def test_batches_of_several_clusters_are_sorted_as_pyg_sorts_them(sparse_format):
    """PyG sorts a batch's edges by (row, col) (csc: (col, row)); the clusters of a shuffled
    batch are in any order, and the data's edges in none (sbm's are random pairs)."""
    data = sbm()
    parts = ClusterData(data, num_parts=12, log=False, sparse_format=sparse_format)
    for clusters in ([0], [5], [7, 2, 9], [11, 0], list(range(12))[::-1]):
        batch = parts.collate(clusters)
        assert torch.equal(batch.n_id, torch.from_numpy(parts.nodes_of(clusters)))
        check_batch(batch, data, sparse_format)
    loader = ClusterLoader(parts, batch_size=4, shuffle=True, rank=0, world_size=1)
    for batch in loader:
        check_batch(batch, data, sparse_format)
    assert parts.sparse_format == sparse_format
    with pytest.raises(ValueError, match="sparse_format"):
        ClusterData(data, num_parts=4, log=False, sparse_format="coo")


@pytest.mark.parametrize("sparse_format", ["csr", "csc"])
def test_a_cluster_alone_and_with_its_outside_edges(sparse_format):
    """keep_inter_cluster_edges: the cluster's edges leaving it (csc: entering it), every end
    inside by its local id, every end outside by num_nodes + its id in data, so that no
    number means two nodes; edge_outside marks the edges to (csc: from) the outside."""
    data = sbm()
    parts = ClusterData(data, num_parts=6, log=False, sparse_format=sparse_format)
    inside = parts[2]
    check_batch(inside, data, sparse_format)
    assert set(parts.cluster[inside.n_id].tolist()) == {2}
    outer = ClusterData(data, num_parts=6, log=False, keep_inter_cluster_edges=True, sparse_format=sparse_format)[2]
    n, n_id = outer.num_nodes, outer.n_id
    assert torch.equal(n_id, inside.n_id) and torch.equal(outer.x, inside.x)
    near, far = (0, 1) if sparse_format == "csr" else (1, 0)  # the end in the cluster, the other
    assert (outer.edge_index[near] < n).all()  # local ids
    assert torch.equal(outer.edge_outside, outer.edge_index[far] >= n)
    assert outer.edge_outside.any() and not outer.edge_outside.all()
    # as ids in data: exactly the edges of data with that end in the cluster, attributes alike
    as_data = torch.where(outer.edge_index < n, n_id[outer.edge_index.clamp(max=n - 1)], outer.edge_index - n)
    assert not torch.isin(as_data[far][outer.edge_outside], n_id).any()
    assert torch.isin(as_data[far][~outer.edge_outside], n_id).all()
    hit = torch.isin(data.edge_index[near], n_id)
    got = sorted(zip(*as_data.tolist(), outer.edge_weight.tolist()))
    assert got == sorted(zip(*data.edge_index[:, hit].tolist(), data.edge_weight[hit].tolist()))
    assert outer.edge_attr.size(0) == outer.edge_index.size(1) == int(hit.sum())
    # sorted by (row, col), csc (col, row), as PyG's; the inside edges are the induced subgraph's
    key = outer.edge_index[near] * (n + data.num_nodes) + outer.edge_index[far]
    assert (key[1:] >= key[:-1]).all()
    assert torch.equal(outer.edge_index[:, ~outer.edge_outside], inside.edge_index)


@pytest.mark.parametrize("kind", ["node", "edge", "walk"])
def test_graphsaint_batches_are_induced_subgraphs_drawn_per_rank(kind):
    data = sbm()

    def sampler(rank=0, seed=0, **kw):
        if kind == "node":
            return GraphSAINTNodeSampler(data, batch_size=60, num_steps=3, log=False, rank=rank, seed=seed, **kw)
        if kind == "edge":
            return GraphSAINTEdgeSampler(data, batch_size=30, num_steps=3, log=False, rank=rank, seed=seed, **kw)
        return GraphSAINTRandomWalkSampler(
            data, batch_size=20, walk_length=3, num_steps=3, log=False, rank=rank, seed=seed, **kw
        )

    batches = list(sampler())
    assert len(batches) == 3
    for b in batches:
        check_batch(b, data)
        assert b.num_nodes <= (60 if kind == "node" else 80) and b.edge_index.size(1) > 0
        if kind == "edge":  # every node is an end of a drawn edge, which the subgraph holds
            assert torch.equal(b.edge_index.flatten().unique(), torch.arange(b.num_nodes))
    again = [b.n_id.tolist() for b in sampler()]
    assert again == [b.n_id.tolist() for b in batches]  # (seed, epoch, rank, step) decide
    assert again != [b.n_id.tolist() for b in sampler(rank=1)]
    normed = sampler(sample_coverage=20)
    b = next(iter(normed))
    assert b.node_norm.shape == (b.num_nodes,) and b.edge_norm.shape == (b.edge_index.size(1),)
    assert torch.isfinite(b.node_norm).all() and (b.node_norm > 0).all() and (b.edge_norm >= 0).all()
    # PyG's definition: node_norm = samples / (count * N); the mean over all nodes of count * node_norm
    # is samples / N for every node drawn at least once
    assert normed.node_norm.shape == (data.num_nodes,) and normed.edge_norm.shape == (data.edge_index.size(1),)


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(num_parts=0), "num_parts"),
        (dict(num_parts=10_000), "num_parts"),
        (dict(drop="edge_index"), "no edge_index"),
        (dict(train_mask=torch.ones(5, dtype=torch.bool)), "train_mask has 5 entries"),
        (dict(edge_weight=torch.ones(3)), "edge_weight has 3 entries"),
        (dict(edge_index=torch.tensor([[0, 1], [1, 999]])), "outside"),
        (dict(edge_index=torch.arange(10).repeat(2, 1)), "no edges between distinct nodes"),
    ],
)
def test_bad_input_is_a_clear_value_error(change, match):
    data = sbm(n=40)
    num_parts = change.pop("num_parts", 4)
    drop = change.pop("drop", None)
    if drop:
        del data[drop]
    for key, value in change.items():
        if key == "edge_index":
            data = Data(x=data.x, edge_index=value)
        else:
            data[key] = value
    with pytest.raises(ValueError, match=match):
        ClusterData(data, num_parts=num_parts, log=False)


def test_graphsaint_bad_input():
    data = sbm(n=40)
    with pytest.raises(ValueError, match="batch_size"):
        GraphSAINTNodeSampler(data, batch_size=0, log=False)
    with pytest.raises(ValueError, match="no edges"):
        GraphSAINTNodeSampler(Data(x=torch.randn(4, 2), edge_index=torch.empty(2, 0, dtype=torch.long)), 2, log=False)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["mpi", "torchrun"])
def test_two_ranks_without_a_rank_given_get_a_disjoint_cover(launcher, tmp_path):
    from common import run_command
    from frameworks import torchrun
    from test_integrations_mp import MPIEXEC, clean_env

    out = tmp_path / "out.json"
    script = MP_SCRIPTS / "pyg_job.py"
    if launcher == "mpi":
        if not MPIEXEC.exists():
            pytest.skip("no mpiexec")
        cmd = [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-n", "2", sys.executable, script, out]
    else:
        cmd = torchrun(script, out)
    run_command(cmd, clean_env(), timeout=180)
    ranks = json.loads(out.read_text())
    assert [r["world"] for r in ranks] == [2, 2] and [r["rank"] for r in ranks] == [0, 1]
    for epoch in range(2):
        batches = [r["epochs"][epoch] for r in ranks]
        assert len(batches[0]) == len(batches[1])
        nodes = sorted(i for rank in batches for b in rank for i in b)
        assert nodes == list(range(200))


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [1, 2])
def test_example_trains_a_gcn_on_one_process_and_under_mpiexec(ranks):
    from common import run_command
    from test_integrations_mp import MPIEXEC, clean_env

    example = REPO / "examples" / "pyg_cluster_gcn.py"
    cmd = [sys.executable, example, "--nodes", "2000", "--epochs", "5"]
    if ranks > 1:
        if not MPIEXEC.exists():
            pytest.skip("no mpiexec")
        cmd = [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-n", str(ranks), *cmd]
    output = run_command(cmd, clean_env(), timeout=300)
    line = next(ln for ln in output.splitlines() if ln.startswith("rank 0 of"))
    assert line.startswith(f"rank 0 of {ranks}: {-(-10 // ranks)} batches per epoch")
    assert float(line.rsplit(" ", 1)[1]) > 0.3  # well above chance (0.1): the graph is used (0.53-0.57 at 5 epochs)


def test_graphsaint_normalization_estimates_the_inclusion_probabilities():
    """On a ring with uniform node draws, every node is in a sample with probability
    p = 1 - (1 - 1/N)^B and an edge u -> u+1 with p given u: PyG's node_norm is
    1 / (N p) and edge_norm 1 / p, for every node and edge alike."""
    n, draws = 100, 50
    ring = torch.arange(n)
    data = Data(x=torch.randn(n, 2), edge_index=torch.stack([ring, (ring + 1) % n]))
    sampler = GraphSAINTNodeSampler(data, batch_size=draws, sample_coverage=400, log=False)
    p = 1 - (1 - 1 / n) ** draws
    node, edge = sampler.node_norm.numpy() * n, sampler.edge_norm.numpy()
    assert abs(node.mean() * p - 1) < 0.05 and node.std() / node.mean() < 0.1
    assert abs(edge.mean() * p - 1) < 0.05 and edge.std() / edge.mean() < 0.15


def test_graphsaint_resume_mid_epoch_is_exact():
    data = sbm()

    def sampler():
        return GraphSAINTRandomWalkSampler(data, batch_size=10, walk_length=2, num_steps=5, log=False, seed=3, rank=1)

    full = sampler()
    full.set_epoch(2)
    whole = [b.n_id.tolist() for b in full]
    first = sampler()
    first.set_epoch(2)
    it = iter(first)
    head = [next(it).n_id.tolist() for _ in range(2)]
    state = first.state_dict()
    assert state["batches_done"] == 2
    resumed = sampler()
    resumed.load_state_dict(state)
    assert len(resumed) == 3
    assert head + [b.n_id.tolist() for b in resumed] == whole
    assert len(list(resumed)) == 5  # the next epoch is whole again
    with pytest.raises(ValueError, match="seed=3"):
        GraphSAINTRandomWalkSampler(data, batch_size=10, walk_length=2, log=False).load_state_dict(state)


def few_connected(n: int, connected: int, edges: int, seed: int = 0) -> Data:
    """``n`` nodes of which only the first ``connected`` have edges (``edges`` random ones)."""
    rng = np.random.default_rng(seed)
    return Data(x=torch.zeros(n, 1), edge_index=torch.from_numpy(rng.integers(0, connected, (2, edges))), num_nodes=n)


def test_graphsaint_costs_in_proportion_to_the_samples_not_to_the_isolated_nodes(monkeypatch):
    import tracemalloc

    # the normalization draws until the nodes a sample can hold were drawn sample_coverage times
    # on average: for the node sampler, the nodes with out-edges (PyG: all N, so 10,000 nodes of
    # which 7 have edges took N * 50 / 7 samples, and 1,000,000 nodes 100 times as many)
    drawn: dict[int, int] = {}
    draw = GraphSAINTNodeSampler._draw

    def counted(self, rng):
        drawn[self.N] = drawn.get(self.N, 0) + 1
        assert drawn[self.N] <= 5000, f"over 5000 samples to normalize a graph of {self.N} nodes, 7 with edges"
        return draw(self, rng)

    monkeypatch.setattr(GraphSAINTNodeSampler, "_draw", counted)
    small, large = (
        GraphSAINTNodeSampler(few_connected(n, 7, 14), batch_size=20, sample_coverage=50, log=False)
        for n in (10_000, 1_000_000)
    )
    sources = np.unique(few_connected(10, 7, 14).edge_index[0].numpy())
    assert drawn[10_000] == drawn[1_000_000] <= sources.size * 50  # the same draws, whatever N
    assert torch.equal(small.edge_norm, large.edge_norm)
    assert np.allclose(small.node_norm[sources].numpy() * 1e4, large.node_norm[sources].numpy() * 1e6)
    monkeypatch.undo()
    # a batch's memory is the sample's (before: a table of all N node ids per sample, 8 MB here),
    # and it is still the subgraph its nodes induce
    data = few_connected(1_000_000, 2000, 10_000, seed=1)
    sampler = GraphSAINTNodeSampler(data, batch_size=100, num_steps=10, log=False)
    tracemalloc.start()
    try:
        batches = list(sampler)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000
    for b in batches[:3]:
        want = subgraph(b.n_id, data.edge_index, relabel_nodes=True, num_nodes=data.num_nodes)[0]
        assert b.edge_index.size(1) > 0
        assert sorted(zip(*b.edge_index.tolist())) == sorted(zip(*want.tolist()))


def test_graphsaint_edge_sampler_draws_edges_by_inverse_degrees():
    """GraphSAINT's edge probability, 1 / out-degree(source) + 1 / in-degree(target): on a
    star of 10 leaves (both directions) and a separate pair, the pair's edges weigh 2 each
    and the star's 1.1, so a sample of one edge is the pair with p = 4 / 26 = 0.154
    (uniform edges: 2 / 22 = 0.091; PyG 2.8's weights, in-degree(source) +
    out-degree(target): 4 / 224 = 0.018)."""
    leaves = torch.arange(1, 11)
    star = torch.stack([torch.zeros(10, dtype=torch.long), leaves])
    pair = torch.tensor([[11, 12], [12, 11]])
    edge_index = torch.cat([star, star.flip(0), pair], 1)
    data = Data(x=torch.arange(13.0).view(13, 1), edge_index=edge_index)
    steps = 3000
    sampler = GraphSAINTEdgeSampler(data, batch_size=1, num_steps=steps, log=False, rank=0)
    pairs = 0
    for b in sampler:
        assert b.num_nodes == 2 and b.edge_index.size(1) == 2  # an edge and its reverse
        pairs += b.n_id.tolist() == [11, 12]
    assert abs(pairs / steps - 4 / 26) < 0.03, pairs / steps


def test_graphsaint_edge_sampler_normalization_counts_the_nodes_with_edges(monkeypatch):
    """Its coverage counts the nodes a drawn edge can end at (PyG: all N), so 7 nodes with
    edges among 1,000,000 normalize with as many samples as among 10,000, not 100 times as many."""
    drawn: dict[int, int] = {}
    draw = GraphSAINTEdgeSampler._draw

    def counted(self, rng):
        drawn[self.N] = drawn.get(self.N, 0) + 1
        assert drawn[self.N] <= 5000, f"over 5000 samples to normalize a graph of {self.N} nodes, 7 with edges"
        return draw(self, rng)

    monkeypatch.setattr(GraphSAINTEdgeSampler, "_draw", counted)
    small, large = (
        GraphSAINTEdgeSampler(few_connected(n, 7, 14), batch_size=5, sample_coverage=50, log=False)
        for n in (10_000, 1_000_000)
    )
    assert drawn[10_000] == drawn[1_000_000]
    assert torch.equal(small.edge_norm, large.edge_norm)
    ends = few_connected(10, 7, 14).edge_index.flatten().unique()
    assert np.allclose(small.node_norm[ends].numpy() * 1e4, large.node_norm[ends].numpy() * 1e6)
    assert torch.isfinite(small.edge_norm).all() and (small.edge_norm > 0).all()
