"""Stated contracts between the layers (issue 14): the selector API the sampler relies on
(check_world, uses_feedback, supports_start, get_params, fingerprint), the Communicator
protocol, the shared heap tie rule and the one metric vocabulary."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from batchsel import EmbeddingIndex
from batchsel.core.checks import check_metric
from batchsel.core.communicator import Communicator
from batchsel.core.heap import before, heap_pop, heap_push
from batchsel.selectors import (
    CoresetSelector,
    GraphBlockSelector,
    InfoBatchSelector,
    LossRankSelector,
    RandomSelector,
    ScorePruningSelector,
    Selector,
    SubmodularSelector,
)

N, B = 60, 6


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, 4)).astype(np.float32)
    y = np.arange(N) % 3
    g = EmbeddingIndex(x, metric="euclidean", kind="flat", progress=False).knn_graph(k=5)
    return x, y, g


def make(kind, data, **kwargs):
    x, y, g = data
    if kind == "random":
        return RandomSelector(N, B, **kwargs)
    if kind == "submodular":
        return SubmodularSelector(x, B, pool_size=24, coverage_size=16, **kwargs)
    if kind == "loss":
        return LossRankSelector(N, B, **kwargs)
    if kind == "graph":
        return GraphBlockSelector(g, 12, blocks_per_batch=2, **kwargs)
    return CoresetSelector(x, y, B, fraction=0.5, **kwargs)


KINDS = ["random", "submodular", "loss", "graph", "coreset"]


def changed(name, value, data):
    """Another value of the parameter ``name`` (one that gives other batches)."""
    x, y, g = data
    if name == "embeddings":
        return value + np.float32(1e-2)  # the case: ranks with slightly different data
    if name == "labels":
        return (value + 1) % 3
    if name == "graph":
        other = value.copy()
        other.data[0] *= 2
        return other
    if name == "weights":
        return (0.1, 0.2, 0.5, 0.2)
    if name == "num_examples":
        return value + 1
    if name in ("batch_size", "seed", "pool_size", "coverage_size", "warmup_epochs", "max_delay", "coverage_every"):
        return value + 1
    if name == "blocks_per_batch":
        return value + 1
    if name in ("drop_last", "shuffle", "whole_blocks"):
        return not value
    if name == "partition":
        return "submodular" if value == "random" else "random"
    if name == "optimizer":
        return {"stochastic": "lazy", "lazy": "naive"}[value]
    if name in ("epsilon", "fraction"):
        return value / 2
    if name == "pressure":
        return value * 2
    if name == "initial_loss":
        return 1.0 if value is None else None
    if name == "anneal_batches":
        return 10 if value is None else None
    if name == "metric":
        return "cosine"
    if name == "neighbors":
        return 5 if value is None else value + 1
    if name == "block_size":
        return 4
    raise AssertionError(f"no other value for parameter {name!r}: add one here")


# -- batch shapes ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS + ["infobatch", "score-pruning"])
@pytest.mark.parametrize("world_size", [1, 2])
def test_every_selector_yields_full_batches_but_a_ranks_last(kind, world_size):
    """One batch shape for compiled models: B examples in every batch but a rank's last of
    an epoch, which holds the rest of the rank's shard (56 examples, B = 6: 2 or 4)."""
    n = 56
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(n, 4)).astype(np.float32), np.arange(n) % 3
    g = EmbeddingIndex(x, metric="euclidean", kind="flat", progress=False).knn_graph(k=5)
    sel = {
        "random": lambda: RandomSelector(n, B),
        "submodular": lambda: SubmodularSelector(x, B, pool_size=24, coverage_size=16),
        "loss": lambda: LossRankSelector(n, B),
        "graph": lambda: GraphBlockSelector(g, B, blocks_per_batch=2),
        "coreset": lambda: CoresetSelector(x, y, B, fraction=0.5),
        "infobatch": lambda: InfoBatchSelector(n, B, epochs=3),  # epoch 1 prunes (2 <= 0.875 * 3)
        "score-pruning": lambda: ScorePruningSelector(y, B, epochs=2),
    }[kind]()
    for epoch in range(2):
        for r in range(world_size):
            sizes = [len(b) for b in sel.iter_batches(epoch, r, world_size)]
            assert all(s == B for s in sizes[:-1]), (kind, sizes)
            if kind in ("random", "submodular", "coreset") or (kind == "graph" and world_size == 1):
                shard = -(-sel.epoch_examples // world_size)
                assert sizes[-1] == (shard % B or B), (kind, sizes)  # a short last batch occurs
            assert 0 < sizes[-1] <= B
        if sel.uses_feedback:
            sel.observe(np.arange(n), losses=np.linspace(0, 1, n), logits=np.eye(3)[y] * np.linspace(0, 3, n)[:, None])


# -- get_params / fingerprint ---------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_get_params_round_trips(kind, data):
    sel = make(kind, data, seed=3)
    params = sel.get_params()
    again = type(sel)(**params)
    assert again.get_params().keys() == params.keys()
    assert again.fingerprint() == sel.fingerprint()
    assert again.fingerprint(world_size=2) == sel.fingerprint(world_size=2)
    if not sel.online:
        assert again.plan(1, 2) == sel.plan(1, 2)
    # every constructor parameter is reported
    assert set(params) == set(type(sel)._param_names())


@pytest.mark.parametrize("kind", KINDS)
def test_fingerprint_changes_with_every_parameter_and_the_data(kind, data):
    sel = make(kind, data)
    base = sel.fingerprint()
    params = sel.get_params()
    refused = []
    for name, value in params.items():
        if name in type(sel)._unplanned_params:
            continue
        new = changed(name, value, data)
        if kind == "graph" and name == "block_size":
            params_new = {**params, "blocks_per_batch": None, name: new}  # the other way to give q
        else:
            params_new = {**params, name: new}
        try:
            other = type(sel)(**params_new)
        except ValueError:
            refused.append(name)
            continue
        assert other.fingerprint() != base, f"{kind}: {name}={new!r} left the fingerprint unchanged"
    # only RandomSelector refuses a value: it has no data for partition="submodular"
    assert refused == (["partition"] if kind == "random" else [])


def test_unplanned_params_do_not_change_the_fingerprint(data, tmp_path):
    g = data[2]
    assert GraphBlockSelector(g, 12).fingerprint() == GraphBlockSelector(g, 12, cache_dir=tmp_path).fingerprint()


def test_fingerprint_catches_ranks_with_different_data_and_shards(data):
    # issue 14: 1e-2 noise with partition="submodular" gave equal fingerprints while 109 of
    # 600 examples trained twice per epoch
    x = data[0]
    a = SubmodularSelector(x, B, partition="submodular")
    b = SubmodularSelector(x + np.float32(1e-2), B, partition="submodular")
    assert a.fingerprint(world_size=2) != b.fingerprint(world_size=2)
    assert a.fingerprint(2) == SubmodularSelector(x.copy(), B, partition="submodular").fingerprint(2)


def test_learned_scores_are_not_parameters(data):
    sel = make("loss", data)
    before_fp = sel.fingerprint()
    sel.observe(np.arange(N), losses=np.arange(N, dtype=float))
    assert sel.fingerprint() == before_fp and "losses_" not in sel.get_params()
    sel.pressure = 10.0  # a setting changed after construction (annealing) is one
    assert sel.get_params()["pressure"] == 10.0 and sel.fingerprint() != before_fp


def test_verify_catches_ranks_with_different_weights(data):
    pytest.importorskip("torch")
    from batchsel.integrations import SelectionBatchSampler

    x = data[0]

    class PeerComm:  # rank 0 of 2; the peer's answer to every all-gather is given
        rank, size = 0, 2

        def __init__(self, peer):
            self.peer = peer

        def broadcast(self, obj, root=0):
            return obj

        def allgather(self, obj):
            return [obj, self.peer]

        def allreduce(self, array, op="sum"):
            return np.asarray(array) * 2

        def barrier(self):
            pass

        def abort(self, errorcode=1):
            raise SystemExit(errorcode)

    def sampler(weights, peer):
        return SelectionBatchSampler(SubmodularSelector(x, B, weights=weights), comm=PeerComm(peer))

    peer = sampler((0.2, 0.1, 0.5, 0.2), None).fingerprint()  # what the other rank computes
    assert sampler((0.2, 0.1, 0.5, 0.2), peer).verify() == peer
    with pytest.raises(RuntimeError, match="disagree"):
        sampler((0.2, 0.1, 0.4, 0.3), peer).verify()


# -- capabilities ---------------------------------------------------------------------------
EXPECTED = {
    "random": (False, True),
    "submodular": (True, True),
    "loss": (True, True),
    "graph": (False, True),
    "coreset": (True, True),
}


@pytest.mark.parametrize("kind", KINDS)
def test_uses_feedback_is_what_observe_does(kind, data):
    sel, ref = make(kind, data), make(kind, data)
    assert (sel.uses_feedback, sel.supports_start) == EXPECTED[kind]
    rng = np.random.default_rng(1)
    idx = np.arange(N)
    x = data[0].copy()
    sel.observe(
        idx,
        losses=rng.random(N) * 10,
        logits=rng.normal(size=(N, 5)) * 5,
        embeddings=rng.normal(size=(N, 4)).astype(np.float32),
    )
    assert (sel.plan(1, 2) != ref.plan(1, 2)) == sel.uses_feedback
    assert (data[0] == x).all()  # refreshing embeddings never writes the caller's array (coresets did)


@pytest.mark.parametrize("kind", KINDS)
def test_feedback_outside_feedback_fields_changes_nothing(kind, data):
    """A sampler drops the feedback a selector does not list in ``feedback_fields``: it
    must be feedback that ``observe`` ignores."""
    sel, ref = make(kind, data), make(kind, data)
    rng = np.random.default_rng(1)
    given = {
        "losses": rng.random(N) * 10,
        "logits": rng.normal(size=(N, 5)) * 5,
        "embeddings": rng.normal(size=(N, 4)).astype(np.float32),
    }
    unread = {k: v for k, v in given.items() if k not in sel.feedback_fields}
    sel.observe(np.arange(N), **unread)
    assert sel.plan(1, 2) == ref.plan(1, 2)
    if sel.uses_feedback:  # what it lists does change the batches
        sel.observe(np.arange(N), **{k: v for k, v in given.items() if k in sel.feedback_fields})
        assert sel.plan(1, 2) != ref.plan(1, 2)


@pytest.mark.parametrize("kind", KINDS)
def test_supports_start_resumes_without_replaying(kind, data):
    full = [b.tolist() for b in make(kind, data).iter_batches(2, 1, 2)]
    for start in (1, len(full) - 1):
        resumed = [b.tolist() for b in make(kind, data).iter_batches(2, 1, 2, start=start)]
        assert resumed == full[start:]


def test_capabilities_of_subclasses_are_declared_not_inferred():
    """Overriding observe / iter_batches infers nothing (issue 60): the base's value is
    kept, with a warning naming the declaration (tests/selectors/test_capabilities.py has the rest)."""
    with pytest.warns(UserWarning, match="declare"):

        class Observes(RandomSelector):
            def observe(self, indices, losses=None, logits=None, embeddings=None):
                pass

    with pytest.warns(UserWarning, match="supports_start=False"):

        class NoStart(RandomSelector):
            def iter_batches(self, epoch, rank=0, world_size=1):
                yield from super().iter_batches(epoch, rank, world_size)

    class Declared(RandomSelector, uses_feedback=True, supports_start=False):
        def observe(self, indices, losses=None, logits=None, embeddings=None):
            pass

    assert not Observes.uses_feedback and Observes.supports_start
    assert not NoStart.uses_feedback and NoStart.supports_start
    assert Declared.uses_feedback and not Declared.supports_start
    assert not Selector.uses_feedback and not RandomSelector.uses_feedback


def test_get_params_names_a_parameter_the_subclass_does_not_store():
    class Forgets(RandomSelector):
        def __init__(self, num_examples, batch_size, *, temperature=1.0):
            super().__init__(num_examples, batch_size)

    with pytest.raises(AttributeError, match="'temperature'.*self.temperature"):
        Forgets(10, 2).get_params()


def test_check_world_is_public_and_reaches_the_subclass_checks(data):
    graph = make("graph", data)  # 5 batches per epoch: at most 5 ranks
    graph.check_world(5, rank=4)
    with pytest.raises(ValueError, match="number of batches per epoch"):
        graph.check_world(6)
    with pytest.raises(ValueError, match=r"rank must be in \[0, 2\), got 2"):
        RandomSelector(N, B).check_world(2, rank=2)


# -- communicators ------------------------------------------------------------------------
def test_single_process_comm_implements_the_protocol():
    from batchsel.integrations import Communicator as Reexported
    from batchsel.integrations import SingleProcessComm

    assert Reexported is Communicator
    comm = SingleProcessComm()
    assert isinstance(comm, Communicator) and not isinstance(object(), Communicator)
    data = np.arange(4.0)
    assert (comm.rank, comm.size) == (0, 1)
    assert comm.broadcast({"a": 1}) == {"a": 1}
    assert [a.tolist() for a in comm.allgather(data)] == [data.tolist()]
    out = comm.allreduce(data, op="max")
    assert out.tolist() == data.tolist() and out is not data
    assert comm.barrier() is None
    with pytest.raises(ValueError, match="root must be in"):
        comm.broadcast(1, root=1)


def test_torch_comm_error_names_functions_that_exist(monkeypatch):
    pytest.importorskip("torch.distributed")
    import batchsel.integrations as integrations
    from batchsel.integrations import TorchDistComm

    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(RuntimeError) as info:
        TorchDistComm()
    named = [w.split("(")[0].rstrip(")") for w in str(info.value).split() if w.startswith("batchsel.integrations.")]
    assert named and all(hasattr(integrations, n.rsplit(".", 1)[1]) for n in named), str(info.value)


_COMM_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    from batchsel.core.communicator import Communicator
    from batchsel.integrations import get_communicator

    comm = get_communicator(sys.argv[1])
    assert isinstance(comm, Communicator), comm
    assert (comm.rank, comm.size) == (0, 1)
    assert comm.broadcast({"a": 1}) == {"a": 1}
    gathered = comm.allgather(np.arange(3, dtype=np.int32))
    assert len(gathered) == 1 and gathered[0].tolist() == [0, 1, 2] and gathered[0].dtype == np.int32
    assert comm.allgather("x") == ["x"]
    for op in ("sum", "max", "min", "prod"):
        assert comm.allreduce(np.array([1.5, 2.0]), op=op).tolist() == [1.5, 2.0]
    comm.barrier()
    print("ok", flush=True)
    comm.abort(7)
    print("after abort", flush=True)
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("kind", ["single", "mpi", "torch"])
def test_every_communicator_works_in_one_process(kind):
    if kind == "mpi":
        pytest.importorskip("mpi4py")
    if kind == "torch":
        pytest.importorskip("torch.distributed")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    if kind == "torch":
        env.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    out = subprocess.run(
        [sys.executable, "-c", _COMM_SCRIPT, kind], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.stdout.splitlines() == ["ok"], out.stdout + out.stderr
    assert out.returncode == 7, out.stderr  # abort ends the job with the error code


# -- heaps and metrics ----------------------------------------------------------------------
def test_heap_pops_by_the_one_tie_rule():
    rng = np.random.default_rng(0)
    keys_in = rng.integers(0, 4, size=40).astype(np.float64)  # many ties
    items_in = rng.permutation(40)
    keys, items = np.empty(40), np.empty(40, dtype=np.int64)
    size = 0
    for k, i in zip(keys_in, items_in):
        size = heap_push(keys, items, size, k, i)
    popped = []
    while size:
        popped.append((keys[0], items[0]))
        size = heap_pop(keys, items, size)
    assert popped == sorted(zip(keys_in, items_in), key=lambda t: (-t[0], t[1]))
    assert before(1.0, 5, 1.0, 6) and not before(1.0, 6, 1.0, 5) and before(2.0, 9, 1.0, 0)


def test_one_metric_vocabulary(data):
    x, y, _ = data
    assert check_metric("l2", ("euclidean", "cosine")) == "euclidean"
    with pytest.raises(ValueError, match=r"one of \('euclidean', 'cosine'\) \(or 'l2' for 'euclidean'\), got 'L2'"):
        check_metric("L2", ("euclidean", "cosine"))
    l2 = EmbeddingIndex(x, metric="l2", kind="flat", progress=False)
    euclidean = EmbeddingIndex(x, metric="euclidean", kind="flat", progress=False)
    assert l2.metric == euclidean.metric == "euclidean"
    assert (l2.search(x[:5], 3)[1] == euclidean.search(x[:5], 3)[1]).all()
    a = CoresetSelector(x, y, B, fraction=0.5, metric="l2")
    b = CoresetSelector(x, y, B, fraction=0.5, metric="euclidean")
    assert a.metric == "euclidean" and a.fingerprint() == b.fingerprint() and a.plan(0) == b.plan(0)
