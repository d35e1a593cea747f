"""EpochPlan: the batches of one epoch for every rank.

A plan is what a selector computes and what a sampler, the CLI and users consume. Every
rank has the same number of batches (the DistributedSampler contract); how uneven ranks
are equalized is a stated policy, see :meth:`EpochPlan.from_rank_batches`.

On disk a plan is an ``.npz`` holding flat int64 indices, batch offsets, optional float32
weights, a JSON header and a SHA-256 checksum of all of them; it is written to a temporary
name and renamed. A file may hold several epochs (``save_plans`` / ``load_plans``).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import IO, Any, Sequence

import numpy as np

from batchsel.core.io import atomic_write
from batchsel.plans.report import plan_report

FORMAT_VERSION = 1


class EpochPlan:
    """The batches of one epoch for ``world_size`` ranks.

    Parameters
    ----------
    batches : sequence of sequences of array-like
        ``batches[rank]`` is the list of that rank's batches (1-D integer index arrays);
        every rank must have the same number of batches (use :meth:`from_rank_batches`
        to equalize).
    weights : sequence of sequences of array-like, or None, default None
        ``None`` or per-example weights with the same structure as ``batches``.
    num_examples : int or None, default None
        Size of the dataset the indices point into (checked by :meth:`validate`);
        ``None``: the largest index + 1.
    epoch, seed, method : int, int, str, default 0, 0, ""
        Provenance, stored in the file header. They are not part of :meth:`fingerprint`,
        which identifies the batches themselves.
    copy : bool, default True
        Copy the int64 index arrays given. False: the plan keeps them (a selector's fresh
        arrays that nothing writes into afterwards: an epoch of millions of examples skips
        a copy of every batch).

    Raises
    ------
    ValueError
        No rank, unequal batch counts, 2-D batches, weights unlike the batches (``TypeError``: non-integer indices).

    Examples
    --------
    >>> import numpy as np
    >>> plan = EpochPlan([[np.array([0, 1]), np.array([2])], [np.array([3, 4]), np.array([5])]], num_examples=6)
    >>> plan.world_size, plan.num_batches, plan.batches(1)[0].tolist()
    (2, 2, [3, 4])
    >>> len(plan.fingerprint())
    16
    """

    def __init__(
        self,
        batches: Sequence[Sequence[Any]],
        weights: Sequence[Sequence[Any]] | None = None,
        *,
        num_examples: int | None = None,
        epoch: int = 0,
        seed: int = 0,
        method: str = "",
        copy: bool = True,
    ) -> None:
        if len(batches) == 0:
            raise ValueError("a plan needs at least one rank")
        self._batches = [[_as_indices(b, r, i, copy) for i, b in enumerate(rank)] for r, rank in enumerate(batches)]
        counts = {len(rank) for rank in self._batches}
        if len(counts) != 1:
            raise ValueError(f"every rank must have the same number of batches, got {[len(r) for r in self._batches]}")
        if weights is None:
            self._weights = None
        else:
            if len(weights) != len(batches):
                raise ValueError(f"weights cover {len(weights)} ranks, batches {len(batches)}")
            self._weights = [[_as_weights(w, r, i) for i, w in enumerate(rank)] for r, rank in enumerate(weights)]
            for r, (wr, br) in enumerate(zip(self._weights, self._batches)):
                if len(wr) != len(br):
                    raise ValueError(f"rank {r} has weights for {len(wr)} batches but {len(br)} batches")
        if num_examples is None:  # the largest index tells
            num_examples = max((int(b.max()) for rank in self._batches for b in rank if b.size), default=-1) + 1
        self.num_examples = int(num_examples)
        self.epoch = int(epoch)
        self.seed = int(seed)
        self.method = str(method)

    # -- construction -----------------------------------------------------------------
    @classmethod
    def from_rank_batches(
        cls,
        batches: Sequence[Sequence[Any]],
        weights: Sequence[Sequence[Any]] | None = None,
        *,
        drop_last: bool = False,
        **kwargs: Any,
    ) -> "EpochPlan":
        """Equalize the number of batches per rank, then build the plan.

        ``drop_last=False`` pads: a rank with fewer batches repeats its own batches from
        the first one on (so padding repeats examples, as DistributedSampler does);
        ``drop_last=True`` drops every rank's trailing batches down to the smallest count.
        A rank with no batches at all cannot be padded: ``ValueError``.

        Parameters
        ----------
        batches, weights : sequence of sequences, and the same or None
            As for :class:`EpochPlan`, but the ranks' numbers of batches may differ.
        drop_last : bool, default False
            Drop the trailing batches (True) or pad (False), as above.
        **kwargs : Any
            ``num_examples``, ``epoch``, ``seed``, ``method``: as for :class:`EpochPlan`.

        Returns
        -------
        EpochPlan
            The plan, every rank with the same number of batches.
        """
        counts = [len(rank) for rank in batches]
        if not counts:
            raise ValueError("a plan needs at least one rank")
        target = min(counts) if drop_last else max(counts)
        if not drop_last and min(counts) == 0 and target > 0:
            raise ValueError(f"rank {counts.index(0)} has no batches to pad with (batches per rank: {counts})")
        out_b, out_w = [], [] if weights is not None else None
        for r, rank in enumerate(batches):
            rank = list(rank)
            picks = [i % len(rank) for i in range(target)] if rank else []
            out_b.append([rank[i] for i in picks])
            if weights is not None:
                out_w.append([list(weights[r])[i] for i in picks])
        return cls(out_b, out_w, **kwargs)

    # -- access -----------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        """The number of ranks the plan is for."""
        return len(self._batches)

    @property
    def num_batches(self) -> int:
        """Batches per rank (the same on every rank)."""
        return len(self._batches[0])

    def _check_rank(self, rank: int) -> int:
        if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)):
            raise TypeError(f"rank must be an integer, got {rank!r}")
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank must be in [0, {self.world_size}), got {rank}")
        return int(rank)

    def batches(self, rank: int = 0) -> list[np.ndarray]:
        """This rank's batches: a list of int64 index arrays.

        Parameters
        ----------
        rank : int, default 0
            In ``[0, world_size)``, else ``ValueError`` (``TypeError`` for a non-integer).

        Returns
        -------
        list of numpy.ndarray
            A new list holding the plan's own arrays (not copies).
        """
        return list(self._batches[self._check_rank(rank)])

    def weights(self, rank: int = 0) -> list[np.ndarray] | None:
        """This rank's per-example weights (same shapes as :meth:`batches`), or None
        (``rank`` as for :meth:`batches`).

        Returns
        -------
        list of numpy.ndarray or None
            float32 arrays, one per batch; ``None`` for an unweighted plan.
        """
        rank = self._check_rank(rank)
        return None if self._weights is None else list(self._weights[rank])

    def indices(self, rank: int | None = None) -> np.ndarray:
        """All indices of one rank (or of all ranks), concatenated in batch order.

        Parameters
        ----------
        rank : int or None, default None
            As for :meth:`batches`; ``None``: every rank, rank 0 first.

        Returns
        -------
        numpy.ndarray
            The indices, int64 (a new array).
        """
        ranks = range(self.world_size) if rank is None else [self._check_rank(rank)]
        parts = [b for r in ranks for b in self._batches[r]]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)

    def __len__(self) -> int:
        return self.num_batches

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EpochPlan) and self.fingerprint() == other.fingerprint()

    def __repr__(self) -> str:
        return (
            f"EpochPlan(world_size={self.world_size}, num_batches={self.num_batches}, "
            f"num_examples={self.num_examples}, epoch={self.epoch}, method={self.method!r}, "
            f"weighted={self._weights is not None})"
        )

    # -- checks and identity ----------------------------------------------------------
    def validate(self) -> "EpochPlan":
        """Check indices are in range, weights match batches and are finite and >= 0.
        Returns self; raises ``ValueError`` naming the first problem."""
        for r, rank in enumerate(self._batches):
            for i, b in enumerate(rank):
                if b.size and (b.min() < 0 or b.max() >= self.num_examples):
                    raise ValueError(f"rank {r} batch {i} has indices outside [0, {self.num_examples})")
                if self._weights is not None:
                    w = self._weights[r][i]
                    if w.shape != b.shape:
                        raise ValueError(f"rank {r} batch {i}: {w.size} weights for {b.size} indices")
                    if not np.isfinite(w).all() or (w < 0).any():
                        raise ValueError(f"rank {r} batch {i} has negative or non-finite weights")
        return self

    def _arrays(self) -> dict[str, np.ndarray]:
        flat = [b for rank in self._batches for b in rank]
        sizes = np.array([b.size for b in flat], dtype=np.int64)
        arrays = {
            "indices": np.concatenate(flat) if flat else np.empty(0, dtype=np.int64),
            "offsets": np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        }
        if self._weights is not None:
            wflat = [w for rank in self._weights for w in rank]
            arrays["weights"] = np.concatenate(wflat).astype(np.float32) if wflat else np.empty(0, np.float32)
        return arrays

    def _header(self) -> dict[str, Any]:
        return {
            "format": FORMAT_VERSION,
            "world_size": self.world_size,
            "num_batches": self.num_batches,
            "num_examples": self.num_examples,
            "epoch": self.epoch,
            "seed": self.seed,
            "method": self.method,
        }

    def fingerprint(self) -> str:
        """A stable 16-hex-digit hash of the batches, weights, world size and dataset
        size: equal on every rank that computed the same plan, on every platform."""
        h = hashlib.sha256()
        h.update(json.dumps([self.world_size, self.num_batches, self.num_examples]).encode())
        for name, arr in sorted(self._arrays().items()):
            h.update(name.encode())
            h.update(np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes())
        return h.hexdigest()[:16]

    def report(self, labels: Any = None, graph: Any = None) -> dict[str, Any]:
        """What ``batchsel inspect`` reports for this plan, as a JSON-ready dict
        (:func:`batchsel.plans.report.plan_report`): coverage, duplicates and batch sizes per
        rank; with ``labels`` the label entropy of every batch, with ``graph`` the share of
        edge weight kept inside batches.

        Parameters
        ----------
        labels : array-like or None, default None
            N class ids, -1 for unlabeled examples.
        graph : scipy.sparse matrix or None, default None
            An ``N x N`` similarity graph.

        Examples
        --------
        >>> plan = EpochPlan([[np.array([0, 1])], [np.array([2, 3])]], num_examples=5)
        >>> rep = plan.report()
        >>> rep["coverage"], [r["batch_size"].get("max") for r in rep["ranks"]]
        (0.8, [2, 2])
        """
        return plan_report(self, labels, graph)

    # -- files ------------------------------------------------------------------------
    def save(self, path: str | os.PathLike, overwrite: bool = True) -> None:
        """Write the plan to ``path`` (``.npz``) atomically.

        Parameters
        ----------
        path : str or os.PathLike
            The file (the name is kept as given), as for :func:`save_plans`.
        overwrite : bool, default True
            Whether an existing file may be replaced (else ``FileExistsError``).
        """
        save_plans(path, [self], overwrite=overwrite)

    @classmethod
    def load(cls, path: str | os.PathLike, epoch: int | None = None) -> "EpochPlan":
        """Read a plan written by :meth:`save` (or one epoch of a multi-epoch file:
        ``epoch`` picks it, by its stored epoch number). A corrupted, truncated or
        foreign file raises ``ValueError``, as does one whose header disagrees with its
        arrays or lacks a field, or whose plan fails :meth:`validate`.

        Parameters
        ----------
        path : str or os.PathLike
            A plan file.
        epoch : int or None, default None
            The stored epoch number to read; ``None``: the file must hold one epoch.

        Returns
        -------
        EpochPlan
            The plan, validated.
        """
        plans = load_plans(path)
        if epoch is None:
            if len(plans) != 1:
                raise ValueError(
                    f"{os.fspath(path)!r} holds {len(plans)} epochs {[p.epoch for p in plans]}; pass epoch="
                )
            return plans[0]
        for p in plans:
            if p.epoch == epoch:
                return p
        raise ValueError(f"{os.fspath(path)!r} has no epoch {epoch} (it has {[p.epoch for p in plans]})")


def _as_indices(batch: Any, rank: int, i: int, copy: bool = True) -> np.ndarray:
    """A batch as a 1-D int64 array (a copy, or ``batch`` itself given one and ``copy``
    False). Floats are accepted only when integral, booleans never: ``np.asarray(...,
    dtype=int64)`` would silently truncate 0.5 to 0 and turn a boolean mask into indices 0
    and 1."""
    if type(batch) is np.ndarray and batch.dtype == np.int64 and batch.ndim == 1:
        return batch.copy() if copy else batch  # a selector's own batch: nothing to check
    b = np.asarray(batch)
    if b.ndim > 1:  # flattening would silently merge rows (or batches) into one
        raise ValueError(f"rank {rank} batch {i} must be 1-D (a list of indices), got shape {b.shape}")
    if b.size and not np.issubdtype(b.dtype, np.integer):
        if not (np.issubdtype(b.dtype, np.floating) and np.isfinite(b).all() and (b == np.round(b)).all()):
            raise TypeError(
                f"rank {rank} batch {i} must hold integer indices, got dtype {b.dtype}: {b.reshape(-1)[:5]!r}"
            )
    return b.astype(np.int64).reshape(-1)


def _as_weights(weights: Any, rank: int, i: int) -> np.ndarray:
    """A batch's weights as a 1-D float32 array (2-D refused, as for indices)."""
    if type(weights) is np.ndarray and weights.dtype == np.float32 and weights.ndim == 1:
        return weights.copy()
    w = np.asarray(weights, dtype=np.float32)
    if w.ndim > 1:
        raise ValueError(f"rank {rank} batch {i}: weights must be 1-D, got shape {w.shape}")
    return w.reshape(-1)


_HEADER_FIELDS = {"world_size": int, "num_batches": int, "num_examples": int, "epoch": int, "seed": int, "method": str}


def _epoch_from(arrays: dict[str, np.ndarray], e: int, path: str) -> EpochPlan:
    """Epoch ``e`` of a plan file's arrays, its header checked against them and the plan
    validated: a damaged or hand-edited file raises ``ValueError`` naming the problem
    instead of loading a plan that drops a rank or indexes past the data."""
    where = f"{path!r} epoch entry {e}"
    try:
        h = json.loads(str(arrays[f"e{e}_header"]))
        idx, off = arrays[f"e{e}_indices"], arrays[f"e{e}_offsets"]
    except KeyError as exc:
        raise ValueError(f"{where}: missing array {exc.args[0]!r}; the file is not a complete plan") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: header is not JSON ({exc})") from None
    if not isinstance(h, dict):
        raise ValueError(f"{where}: header must be a JSON object, got {h!r}")
    missing = sorted(set(_HEADER_FIELDS) - set(h))
    if missing:
        raise ValueError(f"{where}: header lacks {missing}; rewrite the plan with batchsel.save_plans")
    for key, kind in _HEADER_FIELDS.items():
        if isinstance(h[key], bool) or not isinstance(h[key], kind):
            raise ValueError(f"{where}: header field {key!r} must be {kind.__name__}, got {h[key]!r}")
    ws, nb = h["world_size"], h["num_batches"]
    if ws < 1 or nb < 0 or h["num_examples"] < 0 or h["epoch"] < 0 or h["seed"] < 0:
        raise ValueError(
            f"{where}: header has world_size={ws}, num_batches={nb}, num_examples={h['num_examples']}, "
            f"epoch={h['epoch']}, seed={h['seed']} (world_size must be >= 1, the others >= 0)"
        )
    if (
        idx.ndim != 1
        or off.ndim != 1
        or not np.issubdtype(idx.dtype, np.integer)
        or not np.issubdtype(off.dtype, np.integer)
    ):
        raise ValueError(f"{where}: indices and offsets must be 1-D integer arrays")
    if len(off) != ws * nb + 1:
        # e.g. world_size=1 in the header of a 2-rank plan would drop rank 1 silently
        raise ValueError(
            f"{where}: header says {ws} rank(s) x {nb} batches = {ws * nb} batches, the file holds {len(off) - 1}"
        )
    if off[0] != 0 or off[-1] != len(idx) or (np.diff(off) < 0).any():
        raise ValueError(f"{where}: batch offsets do not cut the {len(idx)} indices into batches")
    w = arrays.get(f"e{e}_weights")
    if w is not None and w.shape != idx.shape:
        raise ValueError(f"{where}: {w.size} weights for {idx.size} indices")
    flat = [idx[off[i] : off[i + 1]] for i in range(len(off) - 1)]
    batches = [flat[r * nb : (r + 1) * nb] for r in range(ws)]
    weights = None if w is None else [[w[off[r * nb + i] : off[r * nb + i + 1]] for i in range(nb)] for r in range(ws)]
    plan = EpochPlan(
        batches, weights, num_examples=h["num_examples"], epoch=h["epoch"], seed=h["seed"], method=h["method"]
    )
    try:
        return plan.validate()
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _checksum(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(arrays):
        if name == "checksum":
            continue
        h.update(name.encode())
        h.update(np.ascontiguousarray(arrays[name]).tobytes())
    return h.hexdigest()


def save_plans(path: str | os.PathLike | IO[bytes], plans: Sequence[EpochPlan], overwrite: bool = True) -> None:
    """Write one or more epoch plans to one ``.npz`` file, atomically.

    ``path`` may also be a binary file opened for writing (e.g. by
    :func:`batchsel.core.io.atomic_group`, to write a plan together with other files); the
    caller then owns its atomicity and ``overwrite`` does not apply.

    Parameters
    ----------
    path : str, os.PathLike or binary file
        The ``.npz`` file to write (the name is kept as given), or an open binary file.
    plans : sequence of EpochPlan
        At least one plan; each is stored under its position, with its own header.
    overwrite : bool, default True
        Whether an existing file may be replaced (else ``FileExistsError``).

    Raises
    ------
    ValueError
        No plans, or a ``path`` that cannot be written (a folder, a missing folder).

    See Also
    --------
    load_plans : read them back.

    Examples
    --------
    >>> import io
    >>> plan = EpochPlan([[np.array([0, 1])], [np.array([2, 3])]], epoch=3)
    >>> buffer = io.BytesIO()
    >>> save_plans(buffer, [plan])
    >>> _ = buffer.seek(0)
    >>> sorted(np.load(buffer).files)
    ['checksum', 'e0_header', 'e0_indices', 'e0_offsets', 'header']
    """
    if not plans:
        raise ValueError("no plans to save")
    arrays: dict[str, np.ndarray] = {"header": np.array(json.dumps({"format": FORMAT_VERSION, "epochs": len(plans)}))}
    for e, plan in enumerate(plans):
        arrays[f"e{e}_header"] = np.array(json.dumps(plan._header()))
        for name, arr in plan._arrays().items():
            arrays[f"e{e}_{name}"] = arr
    arrays["checksum"] = np.array(_checksum(arrays))
    if hasattr(path, "write"):
        np.savez(path, **arrays)  # type: ignore[arg-type]
        return
    with atomic_write(path, "wb", overwrite=overwrite) as f:
        np.savez(f, **arrays)  # type: ignore[arg-type]


def load_plans(path: str | os.PathLike) -> list[EpochPlan]:
    """Read every epoch plan stored in ``path``.

    Parameters
    ----------
    path : str or os.PathLike
        A plan file written by :func:`save_plans` or :meth:`EpochPlan.save`.

    Returns
    -------
    list of EpochPlan
        The plans in the order they were saved, each validated.

    Raises
    ------
    ValueError
        A missing file or a folder; a file that is corrupted, truncated, fails its
        checksum, is not a plan or has another format version; a damaged epoch entry.

    See Also
    --------
    EpochPlan.load : one epoch of a file.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ValueError(f"{path!r} is a directory, not a plan file")
    if not os.path.exists(path):
        raise ValueError(f"no such plan file {path!r}")
    unreadable = f"{path!r} is not a readable plan file (corrupted or truncated?)"
    try:
        loaded = np.load(path, allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - damaged zips raise BadZipFile, NotImplementedError, zlib.error, ...
        raise ValueError(f"{unreadable}: {exc}") from None
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise ValueError(
            f"{path!r} holds one array (an .npy file?), not a plan: plans are the .npz files "
            "`batchsel plan --out` writes"
        )
    try:
        with loaded as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"{unreadable}: {exc}") from None
    if "checksum" not in arrays or "header" not in arrays:
        raise ValueError(f"{path!r} is not a batchsel plan file")
    if str(arrays["checksum"]) != _checksum(arrays):
        raise ValueError(f"{path!r} fails its checksum: the file is corrupted")
    try:
        header = json.loads(str(arrays["header"]))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path!r}: plan header is not JSON ({exc})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT_VERSION:
        found = header.get("format") if isinstance(header, dict) else None
        raise ValueError(f"{path!r} has plan format {found}, this batchsel reads {FORMAT_VERSION}")
    epochs = header.get("epochs")
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"{path!r}: plan header has epochs={epochs!r}, expected a number >= 1")
    return [_epoch_from(arrays, e, path) for e in range(epochs)]


__all__ = ["EpochPlan", "save_plans", "load_plans"]
