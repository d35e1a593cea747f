"""How this process was launched, from the environment: by mpiexec / mpirun / srun, or by
torchrun. Reading the variables initializes nothing.
"""

from __future__ import annotations

import os

# Variables set by mpiexec / mpirun / srun for every MPI process: Open MPI, MPICH and Intel
# MPI (Hydra's PMI), PMIx (Open MPI 5, srun --mpi=pmix), MVAPICH.
MPI_ENV_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE")
# Variables torchrun (and torch.multiprocessing scripts following its convention) set.
TORCHRUN_ENV_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR")


def launched_by_mpi() -> bool:
    """True when this process was started by mpiexec / mpirun / srun (MPI variables set).

    Examples
    --------
    >>> isinstance(launched_by_mpi(), bool)
    True
    """
    return any(v in os.environ for v in MPI_ENV_VARS)


def launched_by_torchrun() -> bool:
    """True when torchrun-style variables (RANK, WORLD_SIZE, MASTER_ADDR) are set.

    Examples
    --------
    >>> isinstance(launched_by_torchrun(), bool)
    True
    """
    return all(v in os.environ for v in TORCHRUN_ENV_VARS)


__all__ = ["MPI_ENV_VARS", "TORCHRUN_ENV_VARS", "launched_by_mpi", "launched_by_torchrun"]
