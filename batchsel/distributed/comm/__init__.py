"""Communicators: one small interface over a single process, mpi4py and torch.distributed.

Everything in batchsel that talks across ranks (the sampler's feedback all-gather and plan
check, GreeDi over real ranks) goes through the :class:`~batchsel.core.communicator.Communicator`
protocol (re-exported here): ``rank``, ``size``, ``broadcast``, ``allgather``, ``gather``,
``allreduce``, ``barrier`` and ``abort``; every class here implements all of them, and
any object that has them works too. :func:`get_communicator` picks
the implementation from the environment, so the same script runs as one process, under
``torchrun`` or under ``mpiexec``.

Nothing here has side effects at import: ``mpi4py.MPI`` (whose import initializes MPI) is
imported only when an :class:`MPIComm` is built, and torch only by :class:`TorchDistComm`.

One module per communicator: :mod:`~batchsel.distributed.comm.single`
(:class:`SingleProcessComm`), :mod:`~batchsel.distributed.comm.mpi_comm` (:class:`MPIComm`,
:func:`install_mpi_abort_hook`), :mod:`~batchsel.distributed.comm.torch_comm`
(:class:`TorchDistComm`); what they share in :mod:`~batchsel.distributed.comm.base` and
:mod:`~batchsel.distributed.comm.wire` (how objects travel); the chooser in
:mod:`~batchsel.distributed.comm.choice`, with :mod:`~batchsel.distributed.comm.launch`
(how this process was launched).
"""

from batchsel.core.communicator import Communicator
from batchsel.distributed.comm.choice import get_communicator
from batchsel.distributed.comm.launch import MPI_ENV_VARS, TORCHRUN_ENV_VARS, launched_by_mpi, launched_by_torchrun
from batchsel.distributed.comm.mpi_comm import MPIComm, install_mpi_abort_hook
from batchsel.distributed.comm.single import SingleProcessComm
from batchsel.distributed.comm.torch_comm import TorchDistComm, destroy_process_group

__all__ = [
    "Communicator",
    "SingleProcessComm",
    "MPIComm",
    "TorchDistComm",
    "get_communicator",
    "install_mpi_abort_hook",
    "launched_by_mpi",
    "launched_by_torchrun",
    "MPI_ENV_VARS",
    "TORCHRUN_ENV_VARS",
    "destroy_process_group",
]
