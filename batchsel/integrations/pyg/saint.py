"""GraphSAINT for PyG, pip-only (Zeng et al., ICLR 2020): random node, edge or random-walk
subgraphs with PyG's ``sample_coverage`` normalization, each rank drawing its own from
(seed, epoch, rank, step)."""

from __future__ import annotations

import logging
from typing import Any, Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader

from batchsel.core.checks import check_int, check_seed
from batchsel.distributed.world import detect_world
from batchsel.integrations.pyg.subgraphs import Subgraphs, require_pyg

logger = logging.getLogger(__name__)


class GraphSAINTSampler(DataLoader):
    """Base of the GraphSAINT samplers: ``num_steps`` random subgraphs per epoch, each the
    subgraph induced by the nodes a subclass draws (``_nodes``), from a generator seeded
    by (seed, epoch, rank, step), so ranks draw different subgraphs and a run repeats.

    ``sample_coverage > 0`` estimates PyG's normalization first, from samples drawn until
    every node a sample can hold was drawn ``sample_coverage`` times on average:
    ``node_norm`` (per node: samples / (its count * N)) and ``edge_norm`` (per edge: its
    source node's count / the edge's count, clamped to [0, 1e4], 0.1 where the edge was
    never drawn), sliced into every batch as in PyG. The nodes a sample can hold are all N
    for random walks (their roots are drawn over every node), for the node sampler the N'
    nodes with out-edges and for the edge sampler the nodes with an edge: PyG counts all N
    there, so on a graph with nodes that have no edges it draws N / N' times as many
    samples (7 nodes with edges among 10,000: over 1,400 times as many) for estimates of
    the same expectation. Each sample costs in proportion to its nodes and their edges, not
    to N. A batch's edges are sorted by (row, col), as in PyG."""

    def __init__(
        self,
        data: Any,
        batch_size: int,
        num_steps: int = 1,
        sample_coverage: int = 0,
        save_dir: Any = None,
        log: bool = True,
        *,
        seed: int = 0,
        rank: int | None = None,
        **kwargs: Any,
    ) -> None:
        require_pyg()
        for key in ("shuffle", "sampler", "batch_sampler", "collate_fn"):
            if key in kwargs:
                raise ValueError(f"{key}= is set by {type(self).__name__}")
        self._subgraphs = Subgraphs(data)
        self.data = data
        self.N, self.E = self._subgraphs.num_nodes, int(data.edge_index.size(1))
        if self.E == 0:
            raise ValueError("the graph has no edges: GraphSAINT samples edges and walks")
        self.sample_size = check_int(batch_size, "batch_size", minimum=1)
        self.num_steps = check_int(num_steps, "num_steps", minimum=1)
        self.sample_coverage = check_int(sample_coverage, "sample_coverage", minimum=0)
        self.seed = check_seed(seed)
        # None: this process's rank, looked up when an epoch's iteration starts (as the sampler does)
        self.rank = None if rank is None else check_int(rank, "rank", minimum=0)
        self.epoch = 0
        self.log = bool(log)
        self.node_norm: torch.Tensor | None = None
        self.edge_norm: torch.Tensor | None = None
        if self.sample_coverage > 0:
            self._compute_norm()
        self._start = 0  # the step the next iteration starts from (a resumed epoch's)
        self._handed_out = 0  # steps of the current epoch handed to the loader
        super().__init__(
            range(self.num_steps),  # type: ignore[arg-type]
            batch_size=1,
            sampler=_Steps(self),
            collate_fn=self._collate,
            **kwargs,
        )

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch the next iteration's subgraphs are drawn for."""
        self.epoch = check_int(epoch, "epoch", minimum=0)

    def state_dict(self, batches_done: int | None = None) -> dict[str, Any]:
        """Where the run is: ``batches_done`` steps of the current epoch trained (default:
        the steps handed out so far, exact with ``num_workers=0``; workers fetch ahead, so
        pass your step count there). The subgraphs depend only on (seed, epoch, rank,
        step), so that is all a resume needs."""
        done = self._handed_out if batches_done is None else batches_done
        done = check_int(done, "batches_done", minimum=0, maximum=self.num_steps)
        return {"class": type(self).__name__, "epoch": self.epoch, "batches_done": done, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume :meth:`state_dict`'s point: the next iteration yields the epoch's remaining steps."""
        if not isinstance(state, dict) or state.get("class") != type(self).__name__:
            raise ValueError(f"not a {type(self).__name__} state: {state!r:.80}")
        if state.get("seed") != self.seed:
            raise ValueError(f"the state was saved with seed={state.get('seed')!r}, this sampler has {self.seed}")
        self.epoch = check_int(state["epoch"], "epoch", minimum=0)
        self._start = self._handed_out = check_int(
            state["batches_done"], "batches_done", minimum=0, maximum=self.num_steps
        )

    def _rank(self) -> int:
        return detect_world()[0].rank if self.rank is None else self.rank

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        if self.rank is None:  # settled before workers copy this loader
            self.rank = self._rank()
        return super().__iter__()

    def _nodes(self, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def _drawable(self) -> int:
        """How many nodes a sample can hold (the normalization's coverage counts them)."""
        return self.N

    def _draw(self, rng: np.random.Generator) -> np.ndarray:
        return np.unique(self._nodes(rng))

    def _collate(self, steps: list[int]) -> Any:
        (step,) = steps
        rng = np.random.default_rng([self.seed, self.epoch, self._rank(), step])
        nodes = self._draw(rng)
        if self.node_norm is None:
            return self._subgraphs.batch(nodes)
        return self._subgraphs.batch(nodes, {"node_norm": self.node_norm}, {"edge_norm": self.edge_norm})

    def _compute_norm(self) -> None:
        sub = self._subgraphs
        node_count = np.zeros(self.N)
        edge_count = np.zeros(self.E)
        rng = np.random.default_rng([self.seed, 0x5A1])  # the same estimate on every rank
        samples, drawn, target = 0, 0, self._drawable() * self.sample_coverage
        while drawn < target:
            nodes = self._draw(rng)
            edge_ids, _ = sub.edges_of(nodes)
            node_count[nodes] += 1
            edge_count[edge_ids] += 1
            drawn += len(nodes)
            samples += 1
        source = sub.sources
        with np.errstate(divide="ignore", invalid="ignore"):
            edge_norm = np.clip(node_count[source] / edge_count, 0, 1e4)
        edge_norm[~np.isfinite(edge_norm) | (edge_count == 0)] = 0.1
        node_count[node_count == 0] = 0.1
        self.node_norm = torch.from_numpy(samples / node_count / self.N).float()
        self.edge_norm = torch.from_numpy(edge_norm).float()
        if self.log:
            logger.info("GraphSAINT normalization from %d samples (coverage %d)", samples, self.sample_coverage)

    def __len__(self) -> int:
        return self.num_steps - self._start


class _Steps(torch.utils.data.Sampler):
    """The steps of a GraphSAINT epoch, from a resumed epoch's first remaining one."""

    def __init__(self, owner: GraphSAINTSampler) -> None:
        self.owner = owner

    def __iter__(self) -> Iterator[int]:
        owner = self.owner
        start, owner._start = owner._start, 0  # only the resumed epoch starts late
        owner._handed_out = start
        for step in range(start, owner.num_steps):
            owner._handed_out = step + 1
            yield step

    def __len__(self) -> int:
        return self.owner.num_steps - self.owner._start


class GraphSAINTNodeSampler(GraphSAINTSampler):
    """PyG's GraphSAINT node sampler, pip-only: each subgraph is induced by the sources of
    ``batch_size`` edges drawn uniformly (nodes drawn in proportion to their out-degree,
    with repeats merged).

    >>> import torch
    >>> from torch_geometric.data import Data
    >>> ring = torch.arange(12)
    >>> data = Data(x=torch.randn(12, 2), edge_index=torch.stack([ring, (ring + 1) % 12]))
    >>> batches = list(GraphSAINTNodeSampler(data, batch_size=6, num_steps=2, log=False))
    >>> len(batches), all(b.num_nodes <= 6 for b in batches)
    (2, True)
    """

    def _nodes(self, rng: np.random.Generator) -> np.ndarray:
        return self._subgraphs.sources[rng.integers(0, self.E, self.sample_size)]

    def _drawable(self) -> int:
        """The nodes with out-edges: the others are never a drawn edge's source."""
        return int(np.count_nonzero(np.diff(self._subgraphs.indptr)))


class GraphSAINTEdgeSampler(GraphSAINTSampler):
    """PyG's GraphSAINT edge sampler, pip-only: each subgraph is induced by both ends of
    ``batch_size`` edges, each drawn independently (repeats merged) with probability
    proportional to ``1 / out-degree(source) + 1 / in-degree(target)``, the paper's
    ``1 / deg(u) + 1 / deg(v)`` (on an undirected graph, the degrees), which favours edges
    between nodes of few edges.

    PyG 2.8 draws the same way with the reciprocal weights, in-degree(source) +
    out-degree(target), favouring edges between hubs; the ``sample_coverage``
    normalization is computed from the sampler's own draws either way. Each sample costs
    ``batch_size`` binary searches in the edges' cumulative weights (computed once), where
    PyG draws ``batch_size * E`` random numbers.

    >>> import torch
    >>> from torch_geometric.data import Data
    >>> ring = torch.arange(12)
    >>> data = Data(x=torch.randn(12, 2), edge_index=torch.stack([ring, (ring + 1) % 12]))
    >>> batch = next(iter(GraphSAINTEdgeSampler(data, batch_size=1, log=False)))
    >>> batch.num_nodes, batch.edge_index.tolist()
    (2, [[0], [1]])
    """

    _cumulative: np.ndarray | None = None

    def _weights(self) -> np.ndarray:
        """The cumulative sum of every edge's weight, in data's order (computed on first use)."""
        if self._cumulative is None:
            sub = self._subgraphs
            out_degree = np.bincount(sub.sources, minlength=self.N)
            in_degree = np.bincount(sub.targets, minlength=self.N)
            self._cumulative = np.cumsum(1.0 / out_degree[sub.sources] + 1.0 / in_degree[sub.targets])
        return self._cumulative

    def _nodes(self, rng: np.random.Generator) -> np.ndarray:
        cumulative = self._weights()
        picks = np.searchsorted(cumulative, rng.random(self.sample_size) * cumulative[-1], side="right")
        picks = np.minimum(picks, self.E - 1)  # (a draw of exactly the total, rounded)
        return np.concatenate([self._subgraphs.sources[picks], self._subgraphs.targets[picks]])

    def _drawable(self) -> int:
        """The nodes with an edge: the others are never a drawn edge's end."""
        sub = self._subgraphs
        ends = np.zeros(self.N, dtype=bool)
        ends[sub.sources] = ends[sub.targets] = True
        return int(np.count_nonzero(ends))


class GraphSAINTRandomWalkSampler(GraphSAINTSampler):
    """PyG's GraphSAINT random-walk sampler, pip-only: each subgraph is induced by the
    nodes of ``batch_size`` random walks of ``walk_length`` steps along out-edges, from
    roots drawn uniformly (a walk at a node without out-edges stays there).

    >>> import torch
    >>> from torch_geometric.data import Data
    >>> ring = torch.arange(12)
    >>> data = Data(x=torch.randn(12, 2), edge_index=torch.stack([ring, (ring + 1) % 12]))
    >>> batch = next(iter(GraphSAINTRandomWalkSampler(data, batch_size=1, walk_length=3, log=False)))
    >>> batch.num_nodes, batch.edge_index.size(1)
    (4, 3)
    """

    def __init__(
        self,
        data: Any,
        batch_size: int,
        walk_length: int,
        num_steps: int = 1,
        sample_coverage: int = 0,
        save_dir: Any = None,
        log: bool = True,
        **kwargs: Any,
    ) -> None:
        self.walk_length = check_int(walk_length, "walk_length", minimum=0)
        super().__init__(data, batch_size, num_steps, sample_coverage, save_dir, log, **kwargs)

    def _nodes(self, rng: np.random.Generator) -> np.ndarray:
        sub = self._subgraphs
        current = rng.integers(0, self.N, self.sample_size)
        visited = [current]
        for _ in range(self.walk_length):
            degree = sub.indptr[current + 1] - sub.indptr[current]
            step = np.floor(rng.random(len(current)) * degree).astype(np.int64)
            moves = degree > 0
            nxt = current.copy()
            nxt[moves] = sub.index[sub.indptr[current[moves]] + step[moves]]
            current = nxt
            visited.append(current)
        return np.concatenate(visited)


__all__ = [
    "GraphSAINTSampler",
    "GraphSAINTNodeSampler",
    "GraphSAINTEdgeSampler",
    "GraphSAINTRandomWalkSampler",
]
