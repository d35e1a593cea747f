"""Work across ranks: communicators (one process, mpi4py, torch.distributed), the MPI
launch helpers, and the sharded index, k-NN graph and maximization.

Importing this package initializes neither MPI nor torch.distributed. Its public names are
exported by :mod:`batchsel.integrations` (the communicators, ``greedi``,
``init_torch_distributed_from_mpi``).
"""
