"""Adapters between batchsel and training loops: torch ``DataLoader`` / DDP over gloo,
and MPI (``mpiexec``) clusters.

- :class:`SelectionBatchSampler`: a selector's batches for ``DataLoader(batch_sampler=...)``,
  with the DistributedSampler contract, exact mid-epoch resume and cross-rank feedback;
  a weighted plan's batches are :class:`WeightedBatch` objects (pairs, and the same as arrays);
  :class:`WeightedDataset` turns items into ``(x, y, w)`` for weighted coresets;
  :func:`pad_collate` pads variable-length items to the batch's longest, with the mask.
- :class:`StreamBatches`: batches chosen from a bounded buffer of a stream (shards, a
  Hugging Face ``IterableDataset``, a generator) for ``DataLoader(stream, batch_size=None)``,
  each a :class:`StreamBatch`.
- Communicators (:mod:`batchsel.distributed.comm`): single process, mpi4py,
  torch.distributed, chosen from the environment by :func:`get_communicator`.
- :func:`init_torch_distributed_from_mpi`: one call so a DDP script runs unchanged under
  ``mpiexec``, ``torchrun`` or as one process; :func:`greedi`: GreeDi over the ranks.
- Frameworks, imported only when asked for (optional extras):
  ``batchsel.integrations.lightning.BatchselCallback`` (``pip install batchsel[lightning]``)
  and ``batchsel.integrations.hf.BatchselTrainer`` / ``BatchselTrainerMixin`` for the
  Hugging Face Trainer (``pip install batchsel[hf]``); ``batchsel.integrations.pyg``:
  Cluster-GCN and GraphSAINT loaders for PyTorch Geometric without pyg-lib or
  torch-sparse (``pip install batchsel[pyg]``).

Importing this package initializes neither MPI nor torch.distributed, and imports
neither Lightning, transformers nor torch_geometric.
"""

from batchsel.distributed.comm import Communicator, MPIComm, SingleProcessComm, TorchDistComm, get_communicator
from batchsel.distributed.mpi import greedi, init_torch_distributed_from_mpi, install_mpi_abort_hook
from batchsel.loop.collate import pad_collate
from batchsel.loop.sampler import SelectionBatchSampler, WeightedBatch, WeightedDataset
from batchsel.loop.stream import StreamBatch, StreamBatches

__all__ = [
    "SelectionBatchSampler",
    "WeightedBatch",
    "WeightedDataset",
    "pad_collate",
    "StreamBatches",
    "StreamBatch",
    "Communicator",
    "SingleProcessComm",
    "MPIComm",
    "TorchDistComm",
    "get_communicator",
    "init_torch_distributed_from_mpi",
    "install_mpi_abort_hook",
    "greedi",
]
