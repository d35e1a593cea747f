"""ClusterLoader on 2 ranks with no rank given (tests/integrations/test_pyg.py), as users launch it:

    mpiexec -n 2 python pyg_job.py OUT          (MPI)
    torchrun --nproc_per_node 2 pyg_job.py OUT  (torch.distributed, gloo)

Every rank iterates two epochs and rank 0 writes every rank's node ids per batch to OUT."""

import json
import sys

import numpy as np
import torch
from torch_geometric.data import Data

from batchsel.integrations import get_communicator
from batchsel.integrations.pyg import ClusterData, ClusterLoader

rng = np.random.default_rng(0)
n = 200
src = rng.integers(0, n, 1000)
dst = (src + rng.integers(1, 5, 1000)) % n
data = Data(x=torch.randn(n, 3), edge_index=torch.from_numpy(np.stack([src, dst])))
loader = ClusterLoader(ClusterData(data, 10, log=False), batch_size=2, shuffle=True)
epochs = []
for epoch in range(2):
    loader.set_epoch(epoch)
    epochs.append([batch.n_id.tolist() for batch in loader])
comm = get_communicator()
every = comm.allgather(json.dumps({"rank": comm.rank, "world": comm.size, "epochs": epochs}))
if comm.rank == 0:
    with open(sys.argv[1], "w") as fh:
        json.dump([json.loads(e) for e in every], fh)
