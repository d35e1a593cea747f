"""The ``batchsel`` command under ``mpiexec -n W`` (W > 1).

The ranks first check that they run the same command on the same data
(:func:`_check_ranks_agree`, one line and exit 2 on every rank otherwise). Then work that
shards (the k-NN graph, facility location) runs on every rank, each reading its rows,
and work that does not runs on rank 0 alone (:func:`rank_zero_alone`); rank 0 writes
and reports.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
from typing import Any, NamedTuple, Sequence

from batchsel.cli import inputs
from batchsel.cli.errors import UsageError, one_line
from batchsel.core.io import array_digest, array_shape

logger = logging.getLogger("batchsel.cli")


def mpi_ranks(args: argparse.Namespace, input_names: Sequence[str]) -> Any:
    """The MPI communicator when launched by mpiexec with more than one rank, else None:
    then the k-NN graph is built sharded over the ranks (batchsel.distributed.sharded), once
    every rank has checked that all run the same command on the same data.

    Parameters
    ----------
    args : argparse.Namespace
        The command's parsed arguments.
    input_names : sequence of str
        The names in ``args`` of the command's input files.

    Returns
    -------
    batchsel.distributed.comm.MPIComm or None

    Raises
    ------
    UsageError
        On every rank, when a rank cannot read an input, or its options or data differ
        from rank 0's.
    """
    from batchsel.distributed.comm import get_communicator, launched_by_mpi

    if not launched_by_mpi():
        return None
    comm = get_communicator("mpi")
    if comm.size == 1:
        return None
    _check_ranks_agree(comm, args, input_names)
    return comm


def rank_zero_alone(args: argparse.Namespace, input_names: Sequence[str]) -> bool:
    """Under mpiexec -n W (W > 1), work that does not shard runs on rank 0 alone: once the
    ranks agree on the command (:func:`mpi_ranks`), True on the other ranks, which then
    exit 0 without output (every rank writing the same files raced for them).

    Parameters
    ----------
    args, input_names
        As for :func:`mpi_ranks`.

    Returns
    -------
    bool
        Whether this rank leaves the work to rank 0; False outside mpiexec.
    """
    comm = mpi_ranks(args, input_names)
    return comm is not None and others_wait(comm)


def others_wait(comm: Any) -> bool:
    """The part of :func:`rank_zero_alone` after :func:`mpi_ranks`, for a command that
    holds the communicator itself.

    Parameters
    ----------
    comm : batchsel.distributed.comm.MPIComm
        The ranks (more than one), agreed on the command.

    Returns
    -------
    bool
        True on every rank but 0, which does the work alone.
    """
    if comm.rank == 0:
        logger.info(
            "--method / options that do not shard: rank 0 does the work, the other %d ranks wait", comm.size - 1
        )
    return bool(comm.rank != 0)


def sharded_source(args: argparse.Namespace, input_names: Sequence[str]) -> tuple[Any, int, Any]:
    """The embeddings a sharded command (``dedup``, ``audit``) works on.

    Parameters
    ----------
    args : argparse.Namespace
        The command's parsed arguments (``args.embeddings``: EMB).
    input_names : sequence of str
        The names in ``args`` of the command's input files, which the ranks agree on.

    Returns
    -------
    tuple
        ``(embeddings, N, communicator)``: under mpiexec -n W (W > 1) the path of the
        .npy each rank reads its rows of, and the MPI communicator (:func:`mpi_ranks`);
        else the loaded array and None.
    """
    path = args.embeddings
    comm = mpi_ranks(args, input_names)
    if comm is None:
        x = inputs.read_embeddings(path)
        return x, x.shape[0], None
    if not path.lower().endswith(".npy"):
        raise UsageError(f"under mpiexec EMB must be a .npy file (each rank reads its rows), got {path!r}")
    return path, inputs.num_rows(path), comm


def _option(name: str) -> str:
    return "EMB" if name == "embeddings" else "--" + name.replace("_", "-")


def _ranks(ranks: Sequence[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


class _RankInput(NamedTuple):
    """An input file as one rank sees it (sent to the other ranks)."""

    name: str  # of the argument
    spec: str  # as given: PATH or FILE.npz:NAME
    shape: tuple[int, ...]
    identity: tuple[str, int, int, str | None]  # host, device, inode, key: the same file


def _check_ranks_agree(comm: Any, args: argparse.Namespace, input_names: Sequence[str]) -> None:
    """Collective: every rank parses its own command line and reads its own files (another
    path, another machine's copy), and on one machine rank 0 alone reads the embeddings
    (batchsel.distributed.sharded's ``node_work="leader"``), so a rank with other options or
    other data would go unnoticed, or fail in a collective as an internal error. Raises the
    same ``UsageError`` on every rank (one line, exit 2 everywhere) when a rank cannot read
    an input, or when its options, or the shape or content of an input, differ from
    rank 0's. Contents are compared by :func:`~batchsel.core.io.array_digest`, read once per
    distinct file (the first rank holding it), and not at all when every rank's file is
    rank 0's (the same machine, device and inode): the usual case costs no read."""
    options, files, error = _what_this_rank_runs(args, input_names)
    every = comm.allgather((options, files, error))
    errors = [(r, e) for r, (_, _, e) in enumerate(every) if e is not None]
    if errors:
        everywhere = len(errors) == len(every) and len({e for _, e in errors}) == 1
        raise UsageError(errors[0][1] if everywhere else f"{errors[0][1]} (on rank {errors[0][0]})")
    differ = sorted(k for k in options if len({o.get(k) for o, _, _ in every}) > 1)
    if differ:
        held = "; ".join(
            f"{_option(k)} " + ", ".join(f"{o.get(k)} on rank {r}" for r, (o, _, _) in enumerate(every)) for k in differ
        )
        raise UsageError(f"the ranks were given different options ({held}); every rank must run the same command")
    held_by = [[f[i] for _, f, _ in every] for i in range(len(files))]  # per input, each rank's
    for mine, theirs in zip(files, held_by):
        if any(t.shape != mine.shape for t in theirs):
            held = "; ".join(f"rank {r}: {t.spec!r} of shape {t.shape}" for r, t in enumerate(theirs))
            raise UsageError(
                f"the ranks read {_option(mine.name)} files of different shapes ({held}); "
                "every rank must read the same data"
            )
    _check_contents_agree(comm, files, held_by)


def _what_this_rank_runs(
    args: argparse.Namespace, input_names: Sequence[str]
) -> tuple[dict[str, str], list[_RankInput], str | None]:
    """This rank's side of :func:`_check_ranks_agree`: its options (input paths may differ,
    a rank's own copy: only whether each is given), its input files, and the error that
    stopped it reading one (None if none)."""
    options = {
        k: repr(v)
        for k, v in vars(args).items()
        if k not in input_names and k not in ("quiet", "debug") and isinstance(v, (str, int, float, type(None)))
    }
    options.update({name: "FILE" if getattr(args, name) is not None else "None" for name in input_names})
    host = socket.gethostname()
    files: list[_RankInput] = []
    for name in input_names:
        spec = getattr(args, name)
        if spec is None:
            continue
        try:
            shape = array_shape(spec)  # the header only, where the format has one
            info = os.stat(inputs.input_file(spec))
        except (ValueError, OSError) as exc:
            return options, files, one_line(exc)
        key = spec[len(inputs.input_file(spec)) + 1 :] or None  # FILE.npz:NAME
        files.append(_RankInput(name, spec, shape, (host, info.st_dev, info.st_ino, key)))
    return options, files, None


def _check_contents_agree(comm: Any, files: list[_RankInput], held_by: list[list[_RankInput]]) -> None:
    """The content part of :func:`_check_ranks_agree`, for inputs of one shape on every
    rank (``held_by``: per input, each rank's file): a digest of each distinct file, read
    by the first rank holding it."""
    # per input, the rank whose digest stands for each rank's file: the first holding it
    holder = [[next(q for q, o in enumerate(theirs) if o.identity == t.identity) for t in theirs] for theirs in held_by]
    compare = [i for i in range(len(files)) if len(set(holder[i])) > 1]
    if not compare:
        return
    digests: dict[int, str] = {}
    error: str | None = None
    for i in compare:
        if holder[i][comm.rank] == comm.rank:
            try:
                digests[i] = array_digest(files[i].spec)
            except (ValueError, OSError) as exc:
                error = f"{one_line(exc)} (on rank {comm.rank})"
                break
    gathered = comm.allgather((digests, error))
    errors = [e for _, e in gathered if e is not None]
    if errors:
        raise UsageError(errors[0])
    for i in compare:
        ranks_of: dict[str, list[int]] = {}
        for r, q in enumerate(holder[i]):
            ranks_of.setdefault(gathered[q][0][i], []).append(r)
        if len(ranks_of) > 1:
            theirs = held_by[i]
            hosts = len({t.identity[0] for t in theirs}) > 1  # the same path on other machines
            held = "; ".join(
                f"{_ranks(ranks)}: {theirs[ranks[0]].spec!r}" + (f" on {theirs[ranks[0]].identity[0]}" if hosts else "")
                for ranks in ranks_of.values()
            )
            raise UsageError(
                f"the ranks read different {_option(files[i].name)} data of the same shape {files[i].shape} "
                f"({held}); every rank must read the same data"
            )
