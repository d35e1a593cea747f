"""Running batchsel and torch training under ``mpiexec``.

:func:`init_torch_distributed_from_mpi` is the one call a training script needs so that an
unchanged DDP loop (gloo backend) runs under ``mpiexec -n 4 python train.py``, under
``torchrun`` and as a plain ``python train.py``. :func:`greedi` runs GreeDi with one part
per MPI rank.
"""

from __future__ import annotations

import atexit
import datetime
import logging
import os
import socket
from typing import Any

from batchsel.distributed.comm import (
    Communicator,
    MPIComm,
    destroy_process_group,
    get_communicator,
    install_mpi_abort_hook,
    launched_by_mpi,
    launched_by_torchrun,
)

logger = logging.getLogger(__name__)


def _outbound_address(peer_host: str) -> str | None:
    """The local address a connection to ``peer_host`` leaves from (no packet is sent:
    connecting a UDP socket only picks the route)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((socket.gethostbyname(peer_host), 9))
            return s.getsockname()[0]
    except OSError:
        return None


def _master_address(comm: Communicator, hosts: list[str]) -> str:
    """The address of rank 0 that every rank can reach (collective); ``hosts`` are the
    ranks' host names."""
    if comm.rank == 0:
        if "MASTER_ADDR" in os.environ:
            addr = os.environ["MASTER_ADDR"]
        elif len(set(hosts)) == 1:
            addr = "127.0.0.1"  # one node: loopback always works
        else:
            addr = socket.gethostbyname(hosts[0])
            if addr.startswith("127."):  # /etc/hosts maps the hostname to loopback
                other = next(h for h in hosts if h != hosts[0])
                addr = _outbound_address(other) or addr
    return comm.broadcast(addr if comm.rank == 0 else None)


def init_torch_distributed_from_mpi(
    backend: str = "gloo", timeout: float = 300.0, abort_on_exception: bool = True
) -> tuple[int, int]:
    """Initialize torch.distributed's default process group and return ``(rank, world_size)``.

    - Under ``mpiexec`` / ``srun``: rank and world size come from MPI; rank 0 opens the
      rendezvous store on a free port chosen by the OS and broadcasts its address and port
      over MPI, so no ``MASTER_PORT`` has to be agreed beforehand. ``MASTER_ADDR``,
      ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE``
      are set as torchrun would set them. With ``abort_on_exception`` an uncaught
      exception on any rank aborts the whole job (no hang).
    - Under ``torchrun``: uses what torchrun set (``init_method="env://"``).
    - Otherwise: a world of one process, so DDP code runs unchanged.

    ``timeout`` (seconds) bounds the rendezvous and every gloo collective. Calling it when
    a process group exists already just returns its rank and size. On several nodes set
    ``GLOO_SOCKET_IFNAME`` if gloo picks the wrong network interface.

    Every rank calls it (under MPI it is collective over ``MPI_COMM_WORLD``).

    Parameters
    ----------
    backend : str, default "gloo"
        The torch.distributed backend (``"gloo"`` for CPUs; ``"nccl"`` for GPUs).
    timeout : float, default 300.0
        Seconds, > 0: bounds the rendezvous and every collective of the group.
    abort_on_exception : bool, default True
        Under MPI, whether an uncaught exception on any rank aborts the whole job.

    Returns
    -------
    tuple of int
        ``(rank, world_size)`` of this process in the default group.

    See Also
    --------
    get_communicator : a communicator for batchsel's collectives.

    Examples
    --------
    >>> rank, world = init_torch_distributed_from_mpi()    # doctest: +SKIP
    >>> model = torch.nn.parallel.DistributedDataParallel(model)  # doctest: +SKIP
    """
    import torch.distributed as dist

    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    atexit.register(destroy_process_group)
    td = datetime.timedelta(seconds=float(timeout))
    if launched_by_mpi():
        comm = MPIComm(abort_on_exception=abort_on_exception)
        rank, size = comm.rank, comm.size
        hosts = comm.allgather(socket.gethostname())
        addr = _master_address(comm, hosts)
        port = None
        if rank == 0:
            # port 0: the OS picks a free port as the store binds, so there is no race
            store = dist.TCPStore(addr, 0, size, True, timeout=td, wait_for_workers=False)
            port = store.port
        port = comm.broadcast(port)
        if rank != 0:
            store = dist.TCPStore(addr, port, size, False, timeout=td)
        local_rank = hosts[:rank].count(hosts[rank])
        os.environ.update(
            MASTER_ADDR=addr,
            MASTER_PORT=str(port),
            RANK=str(rank),
            WORLD_SIZE=str(size),
            LOCAL_RANK=str(local_rank),
            LOCAL_WORLD_SIZE=str(hosts.count(hosts[rank])),
        )
        dist.init_process_group(backend, store=store, rank=rank, world_size=size, timeout=td)
        logger.info(
            "torch.distributed (%s) initialized from MPI: rank %d of %d, store %s:%d", backend, rank, size, addr, port
        )
    elif launched_by_torchrun():
        dist.init_process_group(backend, init_method="env://", timeout=td)
    else:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=td)
    return dist.get_rank(), dist.get_world_size()


def greedi(f: Any, k: int, *, comm: Communicator | None = None, **kwargs: Any) -> Any:
    """Deprecated: ``maximize(f, k, optimizer="greedi", comm=comm)`` is the one GreeDi entry
    point for a function every rank builds (``comm`` here defaults to
    :func:`get_communicator`). For facility location over embeddings too large for any
    rank's ``N x N`` similarity, :func:`batchsel.greedi_facility_location` builds each
    part's function on its rank only.

    .. deprecated:: 0.1.0
       Call :func:`batchsel.maximize` with ``optimizer="greedi"``.

    Parameters
    ----------
    f : SetFunction
        The set function, built the same on every rank.
    k : int or float
        As for :func:`batchsel.maximize`: the number of picks (``1 <= k <= n``), or the
        budget with ``costs``.
    comm : Communicator or None, default None
        The ranks (collective: every rank calls it); ``None``:
        :func:`get_communicator`'s.
    **kwargs : Any
        Passed on to :func:`batchsel.maximize`.

    Returns
    -------
    Any
        What :func:`batchsel.maximize` returns, the same on every rank.

    Warns
    -----
    DeprecationWarning
        On every call.
    """
    import warnings

    from batchsel.submodular.optimizers import maximize

    warnings.warn(
        'batchsel.integrations.greedi(f, k) is maximize(f, k, optimizer="greedi", comm=comm): call that',
        DeprecationWarning,
        stacklevel=2,
    )
    return maximize(f, k, optimizer="greedi", comm=get_communicator() if comm is None else comm, **kwargs)


__all__ = ["init_torch_distributed_from_mpi", "greedi", "install_mpi_abort_hook"]
