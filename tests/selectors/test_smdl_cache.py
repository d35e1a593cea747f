"""SMDL's pool rows kept across batches (issue 13): the cached rows give the batches a fresh
computation gives, and ``coverage_every > 1`` (the coverage set and sigma^2 kept for a
stretch of batches, the similarities of the rows still in the pool reused) is
deterministic and resumes exactly mid-stretch."""

from __future__ import annotations

import numpy as np
import pytest

from batchsel import SubmodularSelector
from batchsel.core.world import World
from batchsel.selectors import _smdl_kernels


def clustered(n, d, seed=0, clusters=30):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(clusters, d)).astype(np.float32) * 3
    return (centers[rng.integers(0, clusters, n)] + rng.normal(size=(n, d)).astype(np.float32)).astype(np.float32)


class Uncached(SubmodularSelector):
    """Every batch computes all of its pool's rows afresh (no row is reused)."""

    def _next_batch(self, run, rng):
        run.pop("cache", None)
        return super()._next_batch(run, rng)


class Rows(np.ndarray):
    """An array type whose rows the selector reads through its indexing."""


def same(a, b):
    return len(a) == len(b) and all(np.array_equal(u, v) for u, v in zip(a, b))


SETTINGS = [
    dict(),
    dict(coverage_every=4),
    dict(coverage_every=8, coverage_size=None),
    dict(coverage_every=3, pool_size=200, coverage_size=64),
    dict(coverage_every=8, optimizer="lazy"),
    dict(coverage_every=5, weights=(0.2, 0.5, 0.1, 0.2), max_delay=8),
]


@pytest.mark.parametrize("kwargs", SETTINGS)
def test_reused_rows_give_the_batches_of_a_fresh_computation(kwargs):
    x = clustered(2000, 16)
    kwargs = dict(dict(batch_size=32, seed=1), **kwargs)
    cached, fresh = SubmodularSelector(x, **kwargs), Uncached(x, **kwargs)
    for epoch in range(2):
        a, b = list(cached.iter_batches(epoch)), list(fresh.iter_batches(epoch))
        assert same(a, b)
        assert sorted(np.concatenate(a).tolist()) == list(range(len(x)))
        logits = np.random.default_rng(epoch).normal(size=(len(x), 10))
        for sel in (cached, fresh):
            sel.observe(np.arange(len(x)), logits=logits)


@pytest.mark.parametrize("kwargs", SETTINGS[1:4])
def test_coverage_every_resumes_exactly_mid_stretch(kwargs):
    x = clustered(2000, 16, seed=2)
    kwargs = dict(dict(batch_size=32, seed=3), **kwargs)
    for stop in (1, 5, 6, 13, 40, 61):
        first = SubmodularSelector(x, **kwargs)
        it = first.iter_batches(0)
        head = [next(it) for _ in range(stop)]
        first.observe(np.concatenate(head), logits=np.random.default_rng(stop).normal(size=(sum(map(len, head)), 10)))
        state = first.state_dict()
        rest = list(it)
        resumed = SubmodularSelector(x, **kwargs)
        resumed.load_state_dict(state)
        assert same(list(resumed.iter_batches(0, start=stop)), rest), stop


def test_refreshed_embeddings_are_not_served_from_the_cache():
    x = clustered(2000, 16, seed=4)
    for kwargs in (dict(), dict(coverage_every=4)):
        cached, fresh = SubmodularSelector(x.copy(), 32, seed=1, **kwargs), Uncached(x.copy(), 32, seed=1, **kwargs)
        a, b = cached.iter_batches(0), fresh.iter_batches(0)
        for t in range(50):
            u, v = next(a), next(b)
            assert np.array_equal(u, v), (kwargs, t)
            if t % 3 == 0:
                e = np.random.default_rng(t).normal(size=(len(u), 16)).astype(np.float32)
                cached.observe(u, embeddings=e)
                fresh.observe(v, embeddings=e)


@pytest.mark.parametrize("kwargs", [dict(), dict(coverage_every=4)])
def test_rows_read_through_indexing_give_the_same_batches(kwargs):
    x = clustered(1500, 16, seed=5)
    viewed = SubmodularSelector(x.view(Rows), 32, seed=1, **kwargs)
    assert type(viewed.embeddings) is Rows
    assert same(list(viewed.iter_batches(0)), list(SubmodularSelector(x, 32, seed=1, **kwargs).iter_batches(0)))


def test_coverage_every_is_deterministic_changes_the_picks_and_the_fingerprint():
    x = clustered(2000, 16, seed=6)
    a = SubmodularSelector(x, 32, seed=1, coverage_every=8)
    b = SubmodularSelector(x, 32, seed=1, coverage_every=8)
    default = SubmodularSelector(x, 32, seed=1)
    assert a.plan(0, 2).fingerprint() == b.plan(0, 2).fingerprint()
    assert a.plan(0, 2).fingerprint() != default.plan(0, 2).fingerprint()
    assert a.fingerprint() != default.fingerprint()
    assert a.get_params()["coverage_every"] == 8
    with pytest.raises(ValueError, match="coverage_every"):
        SubmodularSelector(x, 32, coverage_every=0)


def test_only_the_entering_rows_are_computed():
    x = clustered(3000, 16, seed=7)
    sel = SubmodularSelector(x, 32, seed=1, coverage_every=8, max_delay=8)
    run = sel._new_run(0, World(0, 1))
    sel._runs[(0, 1)] = run
    sel._next_batch(run, np.random.default_rng(0))
    cache = run["cache"]
    before = cache.stamp.copy()
    kept = set(cache.pos[: cache.count[0]].tolist()) - set(run["order"][run["m"] :].tolist())
    sel._next_batch(run, np.random.default_rng(1))
    # the rows that stayed in the pool kept their slots and similarities
    stayed = [cache.slot[i] for i in range(cache.count[0]) if cache.pos[i] in kept]
    assert len(stayed) == len(kept) > 0 and all(before[s] == cache.stamp[s] == 0 for s in stayed)
    assert cache.sim.shape == (sel.pool_size, 256)
    assert _smdl_kernels.smdl_step.targetoptions.get("nogil")
