"""Work across ranks: communicators (one process, mpi4py, torch.distributed), the MPI
launch helpers, and the sharded index, k-NN graph and maximization.

Importing this package initializes neither MPI nor torch.distributed.
"""

from batchsel.distributed.comm import Communicator, MPIComm, SingleProcessComm, TorchDistComm, get_communicator
from batchsel.distributed.mpi import greedi, init_torch_distributed_from_mpi, install_mpi_abort_hook

__all__ = [
    "Communicator",
    "SingleProcessComm",
    "MPIComm",
    "TorchDistComm",
    "get_communicator",
    "init_torch_distributed_from_mpi",
    "install_mpi_abort_hook",
    "greedi",
]
