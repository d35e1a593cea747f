"""Cluster-GCN with PyTorch Geometric, pip-only: a 2-layer GCN trained on batches of METIS
clusters from batchsel.integrations.pyg (PyG's own ClusterData needs pyg-lib or
torch-sparse). The same script runs data-parallel:

    python examples/pyg_cluster_gcn.py
    mpiexec -n 2 python examples/pyg_cluster_gcn.py        (or torchrun --nproc_per_node 2)

Each rank trains on its own clusters (disjoint, covering the graph each epoch, the same
number of batches on every rank) and DDP averages the gradients.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv

from batchsel.integrations import get_communicator, init_torch_distributed_from_mpi
from batchsel.integrations.pyg import ClusterData, ClusterLoader


def block_model(n: int, classes: int = 10, seed: int = 0) -> Data:
    """A stochastic block model (70 % of edges inside a class), weak node features."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    src = rng.integers(0, n, 5 * n)
    members = np.argsort(y, kind="stable")  # node ids class by class
    first, size = np.searchsorted(y[members], np.arange(classes)), np.bincount(y, minlength=classes)
    inside = members[first[y[src]] + (rng.random(len(src)) * size[y[src]]).astype(np.int64)]  # same class
    dst = np.where(rng.random(len(src)) < 0.7, inside, rng.integers(0, n, len(src)))
    edge_index = torch.from_numpy(np.concatenate([np.stack([src, dst]), np.stack([dst, src])], axis=1))
    x = torch.from_numpy(0.4 * np.eye(classes, 16)[y] + rng.standard_normal((n, 16))).float()
    split = torch.from_numpy(rng.random(n))
    return Data(x=x, y=torch.from_numpy(y), edge_index=edge_index, train_mask=split < 0.6, test_mask=split >= 0.6)


class GCN(torch.nn.Module):
    def __init__(self, d_in: int, classes: int) -> None:
        super().__init__()
        self.conv1, self.conv2 = GCNConv(d_in, 64), GCNConv(64, classes)

    def forward(self, x, edge_index):
        return self.conv2(torch.relu(self.conv1(x, edge_index)), edge_index)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    init_torch_distributed_from_mpi()  # one process, mpiexec or torchrun alike
    comm = get_communicator()
    data = block_model(args.nodes)
    loader = ClusterLoader(ClusterData(data, num_parts=100, log=False), batch_size=10, shuffle=True)
    torch.manual_seed(0)  # the same initial weights on every rank and in every run
    model = GCN(data.num_features, int(data.y.max()) + 1)
    if comm.size > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        for batch in loader:  # the subgraph of 10 clusters; batch.n_id: its nodes' ids in data
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)
            torch.nn.functional.cross_entropy(out[batch.train_mask], batch.y[batch.train_mask]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(1)
    acc = float((pred[data.test_mask] == data.y[data.test_mask]).float().mean())
    if comm.rank == 0:
        print(f"rank 0 of {comm.size}: {len(loader)} batches per epoch, test accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
