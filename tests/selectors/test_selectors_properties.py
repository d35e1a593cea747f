"""Property tests of every selector's epoch plans over N, batch size, world size and the
pad / drop policy: disjoint batches within an epoch (up to padding), full coverage, equal
counts per rank, determinism for a seed, different plans across epochs."""

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from batchsel import (
    CoresetSelector,
    EmbeddingIndex,
    GraphBlockSelector,
    LossRankSelector,
    RandomSelector,
    SubmodularSelector,
)
from batchsel.selectors.sharding import batch_sizes, even_split

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def shapes(draw, max_n=60):
    n = draw(st.integers(1, max_n))
    batch_size = draw(st.integers(1, n))
    world_size = draw(st.integers(1, min(n, 6)))
    return n, batch_size, world_size, draw(st.booleans()), draw(st.integers(0, 3))


def embeddings(n, seed):
    return np.random.default_rng(seed).normal(size=(n, 3)).astype(np.float32)


def check_epoch(sel, n, world_size, drop_last, per_rank):
    """Coverage and disjointness of one epoch whose ranks hold ``per_rank`` example slots
    drawn from all ``n`` examples (DistributedSampler's pad / drop)."""
    plan = sel.plan(0, world_size)
    assert plan.world_size == world_size
    assert plan.num_batches == sel.num_batches(world_size)
    plan.validate()
    slots = [np.concatenate(plan.batches(r)) for r in range(world_size)]
    assert all(len(s) == per_rank for s in slots)
    every = np.concatenate(slots)
    if drop_last:
        assert len(np.unique(every)) == len(every)  # disjoint
    else:
        assert len(np.unique(every)) == n  # full coverage
        assert len(every) - n == world_size * per_rank - n  # repeats only for the padding
    return plan


def check_seeded(make, world_size, batches_per_rank, n):
    a, b = make().plan(0, world_size), make().plan(0, world_size)
    assert a.fingerprint() == b.fingerprint()  # deterministic for a seed
    if n >= 20 and batches_per_rank >= 2:
        assert a.fingerprint() != make().plan(1, world_size).fingerprint()


@SETTINGS
@given(shapes())
def test_random_selector_properties(shape):
    n, b, w, drop, seed = shape
    make = lambda: RandomSelector(n, b, seed=seed, drop_last=drop)  # noqa: E731
    per_rank = n // w if drop else -(-n // w)
    check_epoch(make(), n, w, drop, per_rank)
    check_seeded(make, w, make().num_batches(w), n)


@SETTINGS
@given(shapes(), st.sampled_from(["stochastic", "lazy"]), st.sampled_from(["random", "submodular"]))
def test_submodular_selector_properties(shape, optimizer, partition):
    n, b, w, drop, seed = shape
    x = embeddings(n, seed)
    make = lambda: SubmodularSelector(
        x,
        b,
        seed=seed,
        drop_last=drop,
        optimizer=optimizer,  # noqa: E731
        partition=partition,
        pool_size=max(b, 16),
    )
    per_rank = n // w if drop else -(-n // w)
    sel = make()
    plan = check_epoch(sel, n, w, drop, per_rank)
    for r in range(w):  # each rank never repeats an example within its shard (up to padding)
        sizes = [len(batch) for batch in plan.batches(r)]
        assert sizes == batch_sizes(per_rank, b).tolist()  # BatchSampler's: full but the last
        # no example later than max_delay (2) batches after its turn in the shard's order
        shard = sel.rank_shards(0, w)[r]
        turn = np.repeat(np.arange(len(sizes)), sizes)
        for t, batch in enumerate(plan.batches(r)):  # (a padded example has two positions)
            assert all((turn[shard == i] >= t - 2).any() for i in batch)
        online = list(make().iter_batches(0, r, w))  # drawn online = the plan (same scores)
        assert all(np.array_equal(p, q) for p, q in zip(online, plan.batches(r)))
        assert len(online) == plan.num_batches
    check_seeded(make, w, sel.num_batches(w), n)


@SETTINGS
@given(shapes())
def test_loss_rank_selector_properties(shape):
    n, b, w, drop, seed = shape
    make = lambda: LossRankSelector(n, b, seed=seed, drop_last=drop)  # noqa: E731
    sel = make()
    plan = sel.plan(0, w)
    assert plan.num_batches == sel.num_batches(w) == -(-(n // w if drop else -(-n // w)) // b)
    plan.validate()
    for r in range(w):
        for batch in plan.batches(r):
            assert 1 <= len(batch) <= b and len(np.unique(batch)) == len(batch)
    check_seeded(make, w, sel.num_batches(w), n)


@st.composite
def graph_shapes(draw):
    n = draw(st.integers(8, 60))
    batch_size = draw(st.integers(1, n))
    drop_last = draw(st.booleans())
    batches = max(1, n // batch_size if drop_last else -(-n // batch_size))  # B each but the last
    world_size = draw(st.integers(1, min(batches, 4)))
    q = draw(st.integers(1, 4))
    return n, batch_size, world_size, drop_last, draw(st.integers(0, 3)), q


@SETTINGS
@given(graph_shapes())
def test_graph_block_selector_properties(shape):
    n, b, w, drop, seed, q = shape
    graph = EmbeddingIndex(embeddings(n, seed), metric="l2", progress=False).knn_graph(k=min(4, n - 1))
    make = lambda: GraphBlockSelector(graph, b, seed=seed, drop_last=drop, blocks_per_batch=min(q, b))  # noqa: E731
    sel = make()
    total = sel.num_batches_total
    plan = sel.plan(0, w)
    assert plan.num_batches == sel.num_batches(w) == (total // w if drop else -(-total // w))
    plan.validate()
    # every example is in exactly one of the epoch's batches; ranks repeat or drop whole batches
    distinct = {tuple(sorted(bb.tolist())) for r in range(w) for bb in plan.batches(r)}
    flat = np.concatenate([np.array(t, dtype=np.int64) for t in distinct])
    assert len(np.unique(flat)) == len(flat)
    if not drop:
        assert len(flat) == n
    sizes = [len(bb) for r in range(w) for bb in plan.batches(r)]
    assert sorted(sizes)[1:] == [b] * (len(sizes) - 1) or set(sizes) == {b}  # one short batch at most
    check_seeded(make, w, sel.num_batches(w), n)


@SETTINGS
@given(
    st.integers(6, 60),
    st.sampled_from([0.3, 0.5, 1.0]),
    st.integers(1, 3),
    st.integers(1, 3),
    st.booleans(),
    st.integers(0, 3),
)
def test_coreset_selector_properties(n, fraction, classes, w, drop, seed):
    rng = np.random.default_rng(seed)
    x = embeddings(n, seed)
    y = rng.integers(0, classes, n)
    size = CoresetSelector(x, y, 1, fraction=fraction).coreset_size
    assume(w <= size)
    b = int(rng.integers(1, size + 1))
    make = lambda: CoresetSelector(x, y, b, fraction=fraction, seed=seed, drop_last=drop)  # noqa: E731
    sel = make()
    assert np.isclose(sel.weights_.sum(), n)
    plan = sel.plan(0, w)
    assert plan.num_batches == sel.num_batches(w)
    every = plan.indices()
    assert set(every.tolist()) <= set(sel.indices_.tolist())
    if drop:
        assert len(np.unique(every)) == len(every) == w * (size // w)
    else:
        assert set(every.tolist()) == set(sel.indices_.tolist())
    check_seeded(make, w, sel.num_batches(w), size)


@pytest.mark.parametrize("start", [0, 1, 3])
def test_iter_batches_start_yields_the_tail(start):
    x = embeddings(50, 0)
    for make in (
        lambda: RandomSelector(50, 7, seed=1),
        lambda: SubmodularSelector(x, 7, seed=1),
        lambda: LossRankSelector(50, 7, seed=1),
    ):
        full = list(make().iter_batches(2, 1, 2))
        tail = list(make().iter_batches(2, 1, 2, start=start))
        assert len(tail) == len(full) - start
        assert all(np.array_equal(p, q) for p, q in zip(full[start:], tail))


@given(st.integers(0, 40), st.integers(1, 9), st.booleans())
@settings(max_examples=200, deadline=None)
def test_even_split_is_distributed_samplers_split(n, world_size, drop_last):
    # DistributedSampler: pad by repeating from the start (cyclically when the padding is
    # longer than the epoch) or drop the tail, then rank r takes every world_size-th from r
    indices = np.arange(100, 100 + n)
    total = -(-n // world_size) * world_size
    if drop_last:
        padded = indices[: (n // world_size) * world_size]
    else:
        padded = np.concatenate([indices, np.resize(indices, total - n)]) if n else indices
    shards = even_split(indices, world_size, drop_last)
    assert [s.tolist() for s in shards] == [padded[r::world_size].tolist() for r in range(world_size)]
