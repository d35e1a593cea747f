"""Loss-rank selection's compiled batch: the distribution (ranks by sequential sampling
without replacement, equal losses sharing their ranks uniformly), the rank order kept up to
date a key at a time in sorted blocks (always what a fresh sort gives, whatever the
history), determinism and the input checks of the feedback path."""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from batchsel.core.sorting import stable_argsort
from batchsel.selectors import LossRankSelector, rank_order
from batchsel.selectors.loss_rank import (
    _draw_ranks,
    _examples_of_ranks,
    _log_q,
    _loss_rank_batch,
    _move_examples,
    _rank_values,
)


def _pooled_chisquare(counts, expected):
    """p-value of counts against expected probabilities, cells with fewer than 5 expected
    pooled into one."""
    expected = np.asarray(expected, float) * counts.sum() / np.sum(expected)
    big = expected >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return chisquare(obs, exp * obs.sum() / exp.sum()).pvalue


def _first_two_probabilities(p):
    """P(first = i) and P(second = j) of sequential sampling without replacement."""
    second = np.zeros_like(p)
    for i, pi in enumerate(p):
        q = p.copy()
        q[i] = 0
        second += pi * q / q.sum()
    return p, second


@pytest.mark.parametrize("n, k, pressure", [(40, 6, 1e3), (30, 25, 1e6), (25, 25, 1e2), (60, 10, 1.0)])
def test_first_and_second_ranks_follow_sequential_sampling(n, k, pressure):
    # (30, 25, 1e6): the last ranks are a millionth as likely as the first, rejection gives
    # up and the race over the ranks left draws the rest; (25, 25): the race alone
    p = LossRankSelector(n, 1, pressure=pressure).probabilities(n)
    first, second = _first_two_probabilities(p)
    rng = np.random.default_rng(5)
    draws = 6000
    got = np.array([_draw_ranks(n, k, pressure, rng)[:2] for _ in range(draws)])
    assert all(len(set(_draw_ranks(n, k, pressure, rng).tolist())) == k for _ in range(50))
    assert _pooled_chisquare(np.bincount(got[:, 0], minlength=n), first) > 1e-3
    assert _pooled_chisquare(np.bincount(got[:, 1], minlength=n), second) > 1e-3


def test_last_rank_of_a_full_shard_is_the_least_likely():
    # k == n: every rank is drawn; the order is the race's. With pressure 1e6 the bottom
    # rank comes last almost always, the top one first most often
    rng = np.random.default_rng(0)
    orders = np.array([_draw_ranks(8, 8, 1e6, rng) for _ in range(2000)])
    assert (np.sort(orders, axis=1) == np.arange(8)).all()
    assert (orders[:, -1] == 7).mean() > 0.8 and (orders[:, 0] == 0).mean() > 0.8


@pytest.mark.parametrize(
    "block, ranks",
    [
        (10, [3, 5]),  # block at least twice the ranks: rejection
        (3, [1, 2, 3]),  # the whole block: a shuffle
        (4, [2, 1, 4]),
    ],
)  # more than half of it: a shuffle
def test_equal_losses_share_their_ranks_uniformly(block, ranks):
    # values [9, 5 x block, 1]: ranks 1..block are the 5s; the requested ones get distinct
    # members, every ordered choice equally often
    import itertools

    losses = np.array([9.0] + [5.0] * block + [1.0])
    rng = np.random.default_rng(1)
    cells = {c: i for i, c in enumerate(itertools.permutations(range(1, block + 1), len(ranks)))}
    counts = np.zeros(len(cells))
    for _ in range(200 * len(cells)):
        got = _examples_of_ranks(losses, np.array(ranks), rng)
        counts[cells[tuple(got.tolist())]] += 1
    assert chisquare(counts).pvalue > 1e-3
    assert _examples_of_ranks(losses, np.array([0, block + 1]), rng).tolist() == [0, block + 1]


def test_ranks_map_to_examples_largest_loss_first():
    losses = np.random.default_rng(2).permutation(50).astype(float)
    ranks = np.random.default_rng(3).permutation(50)[:20]
    got = _examples_of_ranks(losses, ranks, np.random.default_rng(4))
    assert np.array_equal(got, np.argsort(-losses)[ranks])


def test_selector_batches_follow_the_rank_probabilities_with_ties():
    # batches of one through the selector: the example of rank r with probability p_r, the
    # four equal losses sharing ranks 3..6 evenly; each drawn example's loss is observed
    # again (unchanged) before the next draw, as a training loop would
    n = 10
    losses = np.array([5.0, 3.0, 3.0, 3.0, 9.0, 1.0, 3.0, 0.5, 2.0, 50.0])
    sel = LossRankSelector(n, 1, seed=4, pressure=30)
    sel.observe(np.arange(n), losses=losses)
    p = sel.probabilities(n)
    rank_of = {v: r for r, v in reversed(list(enumerate(sorted(losses, reverse=True))))}
    expected = np.array([p[rank_of[v]] for v in losses])
    expected[losses == 3.0] = p[3:7].sum() / 4
    counts = np.zeros(n)
    for epoch in range(400):
        for batch in sel.iter_batches(epoch):
            counts[batch] += 1
            sel.observe(batch, losses=losses[batch])
    assert chisquare(counts, expected * counts.sum()).pvalue > 1e-3


def fresh_sort(losses, pending, shard):
    """The shard's keys sorted anew: values and positions in rank order."""
    cur = _rank_values(losses, pending, shard)
    positions = stable_argsort(cur)
    return cur[positions], positions


@pytest.mark.parametrize("capacity", [2, 3, 8, 256, "flat"])
@pytest.mark.parametrize("repeats", [False, True])
def test_rank_order_updates_are_a_fresh_sort(repeats, capacity):
    # whatever changes (a few, many, ties, +-inf, -0.0, an example twice in the shard), the
    # order after the moves is the sort by (value, position): blocks (small ones split,
    # empty and run out of room many times on the way) or one block merged a batch at a time
    rng = np.random.default_rng(6)
    losses = np.full(300, np.inf)
    shard = np.sort(rng.permutation(300)[:200])
    if repeats:  # DistributedSampler's padding repeats examples within a shard
        shard = np.sort(np.concatenate([shard, shard[:37]]))
    shard = shard.astype(np.int64)
    pending = np.zeros(300, dtype=bool)
    cur = _rank_values(losses, pending, shard)
    order = rank_order.build(cur) if capacity == "flat" else rank_order.build(cur, capacity, flat_most=0)
    assert (order.values.shape[0] == 2) == (capacity == "flat")
    for step in range(120):
        changed = rng.choice(300, size=int(rng.choice([1, 5, 32, 150])), replace=False)
        values = rng.choice([0.0, -0.0, 1.0, 2.5, np.inf], size=changed.size) if step % 3 else rng.random(changed.size)
        losses[changed] = values
        flipped = rng.choice(300, size=10, replace=False)
        pending[flipped] ^= True  # drawn, or observed since
        _move_examples(order, losses, pending, shard, False, np.concatenate([changed, flipped]))
        want_values, want_positions = fresh_sort(losses, pending, shard)
        values_now, positions_now = rank_order.sorted_keys(order)
        assert np.array_equal(positions_now, want_positions) and np.array_equal(values_now, want_values)
        assert np.array_equal(order.cur, _rank_values(losses, pending, shard))
        ranks = rng.choice(shard.size, size=5, replace=False)
        assert [rank_order.key_at(order, r)[1] for r in ranks] == want_positions[ranks].tolist()
        assert rank_order.rank_of(order, 1.0, -1) == np.searchsorted(want_values, 1.0, side="left")


def test_rank_order_lays_its_blocks_out_again_when_none_is_left_to_split_into():
    # keys taken from every block in turn (none empties) and moved to the end fill the
    # last block again and again: its splits take every free block, and the order is
    # laid out anew (the free count jumps: a removal frees one block at most)
    rng = np.random.default_rng(4)
    cur = rng.random(60)
    order = rank_order.build(cur.copy(), capacity=8, flat_most=0)  # blocks of 4 keys
    by_rank = np.argsort(cur)
    jumps = 0
    for p in [by_rank[4 * b + r] for r in range(3) for b in range(15)]:
        free = int(order.meta[1])
        rank_order.move(order, p, np.inf)
        rank_order.recount(order)
        cur[p] = np.inf
        jumps += int(order.meta[1]) > free + 1
        assert np.array_equal(rank_order.sorted_keys(order)[1], stable_argsort(cur))
    assert jumps > 0


def test_one_rank_shard_moves_examples_by_index():
    # one rank's shard is every example in index order: an example is its position
    rng = np.random.default_rng(9)
    losses, pending, shard = rng.random(500), np.zeros(500, bool), np.arange(500, dtype=np.int64)
    order = rank_order.build(_rank_values(losses, pending, shard), capacity=4, flat_most=0)
    for _ in range(30):
        changed = rng.integers(0, 500, 40)
        losses[changed] = rng.integers(0, 3, 40)
        _move_examples(order, losses, pending, shard, True, changed)
    assert np.array_equal(rank_order.sorted_keys(order)[1], fresh_sort(losses, pending, shard)[1])


def test_rank_order_refuses_a_capacity_below_two():
    with pytest.raises(ValueError, match="capacity must be >= 2, got 1"):
        rank_order.build(np.zeros(3), capacity=1)


def test_losses_are_read_only_so_the_rank_order_hears_of_every_change():
    sel = LossRankSelector(10, 2)
    sel.observe(np.array([3]), losses=np.array([2.0]))
    assert sel.losses_[3] == 2.0
    with pytest.raises(ValueError, match="read-only"):
        sel.losses_[3] = 5.0


def test_batch_depends_on_the_losses_not_on_the_history():
    # one selector saw many small updates, the other only the final losses: same batch
    a = LossRankSelector(500, 16, seed=3, pressure=50)
    it = a.iter_batches(0)
    rng = np.random.default_rng(7)
    for _ in range(10):
        b = next(it)
        a.observe(b, losses=rng.integers(0, 4, size=len(b)).astype(float))  # many ties
    b = LossRankSelector(500, 16, seed=3, pressure=50)
    b.load_state_dict(a.state_dict())
    assert "rank_order" in a._runs[(0, 1)] and "rank_order" not in b._runs[(0, 1)]
    assert [x.tolist() for x in it] == [x.tolist() for x in b.iter_batches(0, start=10)]


def test_batches_are_deterministic_and_differ_by_seed_epoch_and_rank():
    def first(seed=0, epoch=0, rank=0):
        sel = LossRankSelector(400, 8, seed=seed)
        sel.observe(np.arange(400), losses=np.linspace(0, 1, 400))
        return next(sel.iter_batches(epoch, rank, 2)).tolist()

    assert first() == first()
    assert len({tuple(first(*args)) for args in [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)]}) == 4
    sel = LossRankSelector(400, 8, seed=0)
    assert sel.plan(3).batches(0) and [b.tolist() for b in sel.plan(3).batches(0)] == [
        b.tolist() for b in LossRankSelector(400, 8, seed=0).plan(3).batches(0)
    ]


def test_kernel_takes_a_batch_without_sorting_the_shard():
    # 200k examples: a batch after 32 updates moves their keys, far less than a sort
    import time

    n = 200_000
    rng = np.random.default_rng(8)
    losses, shard = rng.random(2 * n), np.sort(rng.permutation(2 * n)[:n]).astype(np.int64)
    pending = np.zeros(2 * n, dtype=bool)
    order = rank_order.build(_rank_values(losses, pending, shard))
    none = np.zeros(0, np.int64)
    log = np.empty(32, np.int64)  # (the change log's room: the kernel writes the batch there)
    batch = _loss_rank_batch(losses, pending, shard, *order, none, False, False, 32, _log_q(100.0, n), 1, log, 0)
    assert np.array_equal(log, batch)
    t0 = time.process_time()
    for key in range(5):
        changed = rng.integers(0, 2 * n, 32)  # (half of them in the shard)
        losses[changed] = rng.random(32)
        changed = np.concatenate([changed, batch])  # and the last batch's pending marks, as the change log has them
        batch = _loss_rank_batch(
            losses, pending, shard, *order, changed, False, False, 32, _log_q(100.0, n), key, log, 0
        )
    per_batch = (time.process_time() - t0) / 5
    t0 = time.process_time()
    for _ in range(5):
        rank_order.build(_rank_values(losses, pending, shard))
    assert per_batch < (time.process_time() - t0) / 5 and len(set(batch.tolist())) == 32
    _move_examples(
        order, losses, pending, shard, False, batch
    )  # the batch's pending marks: the next batch's first move
    assert np.array_equal(rank_order.sorted_keys(order)[1], fresh_sort(losses, pending, shard)[1])


# -- the feedback path's checks (fast paths must refuse what the slow ones did) -------------
def test_observe_takes_tensors_and_refuses_bad_input_by_name():
    sel = LossRankSelector(50, 4)
    sel.observe(torch.tensor([1, 2]), losses=torch.tensor([0.5, 1.5], requires_grad=True) * 1)
    sel.observe(torch.tensor(3), losses=torch.tensor([2.0], dtype=torch.bfloat16))
    sel.observe(np.array([4, 5], dtype=np.uint8), losses=np.array([1e308, 1e308]))  # finite; the sum is not
    assert sel.losses_[[1, 2, 3, 4, 5]].tolist() == [0.5, 1.5, 2.0, 1e308, 1e308]
    with pytest.raises(ValueError, match="indices must be in \\[0, 50\\), found -1"):
        sel.observe(torch.tensor([0, -1]), losses=torch.zeros(2))
    with pytest.raises(ValueError, match="found 50"):
        sel.observe(np.array([50]), losses=[1.0])
    with pytest.raises(ValueError, match="found -"):  # huge unsigned: out of range, not wrapped into it
        sel.observe(np.array([2**64 - 1], dtype=np.uint64), losses=[1.0])
    with pytest.raises(TypeError, match="indices must be integers"):
        sel.observe(np.array([1.0]), losses=[1.0])
    with pytest.raises(TypeError, match="indices must be integers"):
        sel.observe(torch.tensor([True]), losses=[1.0])
    with pytest.raises(ValueError, match="losses contains NaN or inf"):
        sel.observe(torch.tensor([1, 2]), losses=torch.tensor([0.0, float("nan")]))
    with pytest.raises(ValueError, match="losses contains NaN or inf"):
        sel.observe([1, 2], losses=[np.inf, -np.inf])
    with pytest.raises(ValueError, match="losses has 1 rows but 2 indices"):
        sel.observe([1, 2], losses=[1.0])
    with pytest.raises(TypeError, match="losses must be real"):
        sel.observe([1], losses=np.array([1 + 1j]))
    assert sel.losses_[[1, 2]].tolist() == [0.5, 1.5]  # nothing half-written by the refused calls


def test_state_with_nan_losses_is_refused():
    sel = LossRankSelector(10, 2)
    state = sel.state_dict()
    state["scores"]["losses"] = np.full(10, np.nan)
    with pytest.raises(ValueError, match="NaN"):
        LossRankSelector(10, 2).load_state_dict(state)


def test_examples_whose_loss_is_pending_are_not_drawn_again_before_it_arrives():
    """With the sampler's one-batch lag, batch t + 1 is drawn before batch t's losses are
    observed: its examples still held their old, high losses and came straight back. Until
    their loss arrives they rank last; with immediate feedback nothing changes."""
    from batchsel import SelectionBatchSampler

    n, b = 400, 20
    high = np.linspace(10.0, 20.0, n)  # every loss stays high: a stale loss is among the top

    def overlaps(prefetch):
        s = SelectionBatchSampler(LossRankSelector(n, b, seed=1, pressure=1e8), rank=0, world_size=1, prefetch=prefetch)
        s.selector.observe(np.arange(n), losses=high)
        previous, count = set(), 0
        for batch in s:
            count += len(previous & set(batch))
            previous = set(batch)
            s.observe(batch, losses=np.zeros(len(batch)))  # trained on: its loss drops below the rest
        return count

    assert overlaps(prefetch=0) == 0 and overlaps(prefetch=1) == 0
    # the marks are part of the state: a resumed selector draws what the uninterrupted one does
    a = LossRankSelector(n, b, seed=2)
    it = a.iter_batches(0)
    next(it)  # drawn, its losses pending
    fresh = LossRankSelector(n, b, seed=2)
    fresh.load_state_dict(a.state_dict())
    assert np.array_equal(next(fresh.iter_batches(0, start=1)), next(it))


# -- annealed pressure ------------------------------------------------------------------
@pytest.mark.parametrize("world_size", [1, 2])
def test_annealed_pressure_draws_each_batch_at_its_own_pressure(world_size):
    # the first batch of an epoch's plan (no pending marks yet) is the batch a constant
    # selector at that batch's pressure draws: the pressure follows the run's batch count
    n, b, anneal = 48, 8, 13
    losses = np.random.default_rng(0).random(n)
    annealed = LossRankSelector(n, b, seed=5, pressure=1e4, anneal_batches=anneal)
    annealed.observe(np.arange(n), losses=losses)
    per_epoch = annealed.num_batches(world_size)
    assert per_epoch == (6 if world_size == 1 else 3)
    pressures = []
    for epoch in range(4):
        pressure = annealed.pressure_at(epoch * per_epoch)
        pressures.append(pressure)
        constant = LossRankSelector(n, b, seed=5, pressure=pressure)
        constant.observe(np.arange(n), losses=losses)
        for rank in range(world_size):
            got = annealed.plan(epoch, world_size).batches(rank)[0]
            assert np.array_equal(got, constant.plan(epoch, world_size).batches(rank)[0])
    assert pressures[0] == 1e4 > pressures[1] > pressures[2] and pressures[3] < 1e2
    # the last batches are uniform draws: pressure 1 gives what a uniform selector gives
    uniform = LossRankSelector(n, b, seed=5, pressure=1.0)
    uniform.observe(np.arange(n), losses=losses)
    late = (anneal - 1) // per_epoch + 1
    assert np.array_equal(annealed.plan(late, world_size).indices(), uniform.plan(late, world_size).indices())
    assert not np.array_equal(annealed.plan(0, world_size).indices(), uniform.plan(0, world_size).indices())


def test_annealed_pressure_decays_geometrically_and_refuses_bad_lengths():
    sel = LossRankSelector(10, 2, pressure=1e3, anneal_batches=4)
    assert [round(sel.pressure_at(t), 9) for t in range(5)] == [1000.0, 100.0, 10.0, 1.0, 1.0]
    assert LossRankSelector(10, 2, pressure=50).pressure_at(10**6) == 50.0  # no annealing: constant
    one = LossRankSelector(10, 2, anneal_batches=1)  # a one-batch run: its batch at the pressure, then 1
    assert (one.pressure_at(0), one.pressure_at(1)) == (100.0, 1.0)
    assert LossRankSelector(10, 2, anneal_batches=7).get_params()["anneal_batches"] == 7
    for bad in (0, -3, 2.5, True):
        with pytest.raises((ValueError, TypeError), match="anneal_batches"):
            LossRankSelector(10, 2, anneal_batches=bad)
    with pytest.raises(ValueError, match="batch"):
        sel.pressure_at(-1)
