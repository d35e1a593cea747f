"""The choice of a communicator for this process, from the environment: :func:`get_communicator`.

Nothing here initializes MPI or torch.distributed: it reads the launch variables and the
modules the program already imported.
"""

from __future__ import annotations

import sys

from batchsel.core.communicator import Communicator
from batchsel.distributed.comm.launch import launched_by_mpi, launched_by_torchrun
from batchsel.distributed.comm.mpi_comm import MPIComm
from batchsel.distributed.comm.single import SingleProcessComm
from batchsel.distributed.comm.torch_comm import TorchDistComm, torch_dist_initialized

_KINDS = ("auto", "single", "mpi", "torch")


def get_communicator(kind: str = "auto") -> Communicator:
    """The communicator for this process.

    ``kind="auto"`` chooses, in order: when a torch.distributed process group is already
    initialized (the one the DDP loop uses), :class:`MPIComm` if mpiexec launched the
    process and MPI is initialized too over the same ranks (as :func:`~batchsel.integrations.init_torch_distributed_from_mpi`
    leaves it under mpiexec: MPI's shared-memory collectives exchange a step's feedback
    faster than gloo on one node), else :class:`TorchDistComm`;
    :class:`MPIComm` when mpiexec's variables (``OMPI_COMM_WORLD_SIZE``, ``PMI_SIZE``,
    ``PMIX_RANK``) are set or MPI is already initialized; :class:`TorchDistComm` when
    torchrun's (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``) are; otherwise
    :class:`SingleProcessComm`. ``"single"``, ``"mpi"`` and ``"torch"`` force one.

    >>> get_communicator("single").size
    1
    """
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
    if kind == "single":
        return SingleProcessComm()
    if kind == "mpi":
        return MPIComm()
    if kind == "torch":
        return TorchDistComm()
    mpi_module = sys.modules.get("mpi4py.MPI")
    mpi_up = mpi_module is not None and mpi_module.Is_initialized() and not mpi_module.Is_finalized()
    if torch_dist_initialized():
        dist = sys.modules["torch.distributed"]
        if (
            mpi_up
            and launched_by_mpi()
            and mpi_module.COMM_WORLD.Get_size() == dist.get_world_size()
            and mpi_module.COMM_WORLD.Get_rank() == dist.get_rank()
        ):
            # the abort hook stays the caller's choice (init_torch_distributed_from_mpi's)
            return MPIComm(abort_on_exception=False)
        return TorchDistComm()
    if launched_by_mpi() or (mpi_up and mpi_module.COMM_WORLD.Get_size() > 1):
        return MPIComm()
    if launched_by_torchrun():
        return TorchDistComm()
    return SingleProcessComm()


__all__ = ["get_communicator"]
