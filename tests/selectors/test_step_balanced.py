"""StepBalancedSelector: every optimizer step the selector's global batch, split over ranks
and micro-batches of nearly equal cost; the weights make the step's gradient the global
batch's mean."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from batchsel import (
    CostModel,
    InfoBatchSelector,
    LossRankSelector,
    RandomSelector,
    SelectionBatchSampler,
    StepBalancedSelector,
)

N, B = 1000, 32


def lognormal(n=N, seed=0):
    return np.random.default_rng(seed).lognormal(4.0, 1.0, n).round() + 1


def bimodal(n=N, seed=1):
    rng = np.random.default_rng(seed)
    return np.where(rng.random(n) < 0.7, rng.integers(5, 40, n), rng.integers(300, 600, n)).astype(float)


@pytest.mark.parametrize("world_size, accumulation", [(1, 1), (1, 4), (2, 2), (8, 1), (8, 4)])
def test_each_step_is_the_selectors_global_batch_and_each_example_trains_once(world_size, accumulation):
    inner = RandomSelector(N, B, seed=3).plan(2, world_size)
    sel = StepBalancedSelector(RandomSelector(N, B, seed=3), lognormal(), accumulation=accumulation)
    plan = sel.plan(2, world_size)
    assert sel.num_batches(world_size) == inner.num_batches * accumulation == plan.num_batches
    for t in range(inner.num_batches):
        mine = [b for r in range(world_size) for b in plan.batches(r)[t * accumulation : (t + 1) * accumulation]]
        assert all(len(b) for b in mine)  # no empty micro-batch
        theirs = np.concatenate([inner.batches(r)[t] for r in range(world_size)])
        assert sorted(np.concatenate(mine).tolist()) == sorted(theirs.tolist())
        weights = np.concatenate(
            [w for r in range(world_size) for w in plan.weights(r)[t * accumulation : (t + 1) * accumulation]]
        )
        assert np.allclose(weights, world_size / len(theirs)) and np.isclose(weights.sum(), world_size)


@pytest.mark.parametrize(
    "lengths, accumulation, p95",
    [(lognormal(), 1, 1.15), (lognormal(), 4, 1.15), (bimodal(), 1, 1.2), (bimodal(), 4, 1.15)],
    ids=["lognormal-1", "lognormal-4", "bimodal-1", "bimodal-4"],
)
def test_ranks_cost_nearly_the_same_at_every_step(lengths, accumulation, p95):
    """8 ranks, B = 32: the median step's costliest rank within 5 % of the mean, the 95th
    percentile within 15 % (one micro-batch a rank on two far-apart lengths: 20 %, the
    long examples' granularity)."""
    sel = StepBalancedSelector(RandomSelector(N, B, seed=0, drop_last=True), lengths, accumulation=accumulation)
    costs = np.concatenate([sel.step_costs(epoch, 8) for epoch in range(4)])
    imbalance = costs.max(1) / costs.mean(1)
    assert np.median(imbalance) <= 1.05 and np.percentile(imbalance, 95) <= p95, imbalance
    # efficiency: the examples' own cost over what the ranks are held for (every rank as
    # long as the step's costliest); random batches pad each to its longest and wait
    useful = lengths.sum() * 4
    plan = RandomSelector(N, B, seed=0, drop_last=True).plan(0, 8)
    held = sum(
        max(lengths[plan.batches(r)[t]].max() * len(plan.batches(r)[t]) for r in range(8))
        for t in range(plan.num_batches)
    )
    assert useful / (8 * costs.max(1).sum()) > 1.5 * (useful / 4) / (8 * held)


def test_more_micro_batches_pad_less():
    lengths = lognormal()
    useful = lengths.sum()

    def padded(accumulation):
        sel = StepBalancedSelector(RandomSelector(N, B, seed=0, drop_last=True), lengths, accumulation=accumulation)
        return sel.step_costs(0, 8).sum()

    one, four = padded(1), padded(4)
    assert useful < four < one


def test_the_micro_batches_gradient_is_the_global_batchs_mean():
    """Two ranks, two micro-batches each: the weighted sums' gradients, averaged over the
    ranks as DDP does and added over the micro-batches, equal the mean loss's gradient of
    the step's examples."""
    torch.manual_seed(0)
    x, y = torch.randn(64, 5), torch.randint(0, 3, (64,))
    model = torch.nn.Linear(5, 3)
    sel = StepBalancedSelector(RandomSelector(64, 8, seed=1), np.arange(64) % 9 + 1.0, accumulation=2)
    plan = sel.plan(0, 2)

    def grad(loss):
        model.zero_grad()
        loss.backward()
        return model.weight.grad.clone()

    step = np.concatenate([b for r in range(2) for b in plan.batches(r)[:2]])
    expected = grad(torch.nn.functional.cross_entropy(model(x[step]), y[step]))
    got = torch.zeros_like(expected)
    for r in range(2):
        for b, w in zip(plan.batches(r)[:2], plan.weights(r)[:2]):
            losses = torch.nn.functional.cross_entropy(model(x[b]), y[b], reduction="none")
            got += grad(sel.weighted_loss(losses, torch.as_tensor(w, dtype=losses.dtype))) / 2  # DDP's mean
    assert torch.allclose(got, expected, atol=1e-6)


def test_the_selectors_own_weights_are_kept():
    lengths = lognormal(200)
    inner = InfoBatchSelector(200, 10, epochs=3, seed=0)
    inner.observe(np.arange(200), losses=np.linspace(0, 1, 200))
    sel = StepBalancedSelector(inner, lengths, accumulation=2)
    plan, base = sel.plan(1, 2), inner.plan(1, 2)
    own = {int(i): float(w) for r in range(2) for b, ws in zip(base.batches(r), base.weights(r)) for i, w in zip(b, ws)}
    for r in range(2):
        for t, (b, w) in enumerate(zip(plan.batches(r), plan.weights(r))):
            g = sum(len(base.batches(q)[t // 2]) for q in range(2))
            assert np.allclose(w, [2 / g * own[int(i)] for i in b])


def test_resume_mid_epoch_is_exact_through_the_sampler():
    lengths = lognormal()

    def sampler():
        return SelectionBatchSampler(
            StepBalancedSelector(RandomSelector(N, B, seed=0), lengths, accumulation=4),
            rank=1,
            world_size=2,
            weighted=True,
        )

    full = [b.indices.tolist() for b in sampler()]
    s = sampler()
    it = iter(s)
    head = [next(it).indices.tolist() for _ in range(10)]
    resumed = sampler()
    resumed.load_state_dict(s.state_dict())
    assert head + [b.indices.tolist() for b in resumed] == full


def test_bad_input_is_refused_by_name():
    lengths = lognormal()
    with pytest.raises(ValueError, match="CostGroupedSelector"):
        StepBalancedSelector(LossRankSelector(N, B), lengths)
    with pytest.raises(ValueError, match="accumulation"):
        StepBalancedSelector(RandomSelector(N, B), lengths, accumulation=0)
    with pytest.raises(ValueError, match="per_token_squared"):
        CostModel(per_token_squared=-0.5)
    with pytest.raises(ValueError, match="both 0"):
        CostModel(per_token=0.0)
    with pytest.raises(TypeError, match="CostModel"):
        StepBalancedSelector(RandomSelector(N, B), lengths, cost_model={"per_token": 1.0})
    with pytest.raises(ValueError):
        StepBalancedSelector(RandomSelector(N, B), lengths[:-1])
    with pytest.raises(ValueError):
        StepBalancedSelector(RandomSelector(N, B), np.where(np.arange(N) == 5, np.nan, lengths))
    short = StepBalancedSelector(RandomSelector(10, 2), lengths[:10], accumulation=4)
    with pytest.raises(ValueError, match=r"step 0 of epoch 0 holds 2 examples, fewer than world_size x accumulation"):
        short.plan(0, 1)


def test_a_quadratic_cost_model_gives_long_examples_smaller_micro_batches():
    lengths = bimodal()
    model = CostModel(per_token=1.0, per_token_squared=0.05)
    sel = StepBalancedSelector(RandomSelector(N, B, seed=0, drop_last=True), lengths, accumulation=4, cost_model=model)
    plan = sel.plan(0, 2)
    sizes = {"long": [], "short": []}
    for b in plan.batches(0):
        sizes["long" if lengths[b].max() >= 300 else "short"].append(len(b))
    assert np.mean(sizes["long"]) < np.mean(sizes["short"])
    costs = sel.step_costs(0, 2)
    assert np.median(costs.max(1) / costs.mean(1)) <= 1.1


def test_fit_recovers_a_known_model_and_reports_its_error():
    shapes = [(8, 32.0), (8, 128.0), (32, 64.0), (4, 256.0), (64, 16.0)]
    truth = CostModel(per_token=2e-6, per_token_squared=1e-8, per_batch=1e-4)
    times = [truth.batch_cost(n, L) for n, L in shapes]
    model, error = CostModel.fit(shapes, times)
    assert np.allclose([model.per_token, model.per_token_squared, model.per_batch], [2e-6, 1e-8, 1e-4], rtol=1e-6)
    assert error < 1e-9
    noisy, error = CostModel.fit(shapes, [t * (1.1 if i % 2 else 0.9) for i, t in enumerate(times)])
    assert 0.05 < error < 0.3  # the fit's error is reported, not hidden
    with pytest.raises(ValueError, match="4 or more"):
        CostModel.fit(shapes[:2], times[:2])
    with pytest.raises(ValueError, match="> 0"):
        CostModel.fit(shapes, [0.0] * 5)


def test_fit_finds_a_cost_per_position_and_the_split_prices_it():
    """A recurrent network runs one step per position whatever the batch's size: the fit
    recovers ``per_length``, and the micro-batches of a step split under it cost nearly
    the same (a long example alone costs its positions even in a batch of one)."""
    shapes = [(8, 32.0), (8, 128.0), (32, 64.0), (4, 256.0), (64, 16.0), (2, 512.0)]
    truth = CostModel(per_token=1e-6, per_batch=1e-4, per_length=5e-5)
    model, error = CostModel.fit(shapes, [truth.batch_cost(n, L) for n, L in shapes])
    assert np.allclose(model.per_length, 5e-5, rtol=1e-6) and error < 1e-9
    assert truth.batch_cost(1, 100.0) == pytest.approx(1e-4 + 1e-4 + 5e-3)
    lengths = np.clip(np.random.default_rng(0).lognormal(3.4, 0.9, 512).round(), 4, 400)
    with_term = StepBalancedSelector(RandomSelector(512, 32, seed=0), lengths, accumulation=2, cost_model=truth)
    without = StepBalancedSelector(
        RandomSelector(512, 32, seed=0), lengths, accumulation=2, cost_model=CostModel(1e-6, per_batch=1e-4)
    )
    plan = without.plan(0, 2)
    priced = np.array(
        [[sum(truth.batch_cost(len(b), lengths[b].max()) for b in plan.batches(r)[t : t + 2]) for r in range(2)]
         for t in range(0, len(plan.batches(0)), 2)]
    )  # fmt: skip
    ours = with_term.step_costs(0, 2)
    assert np.median(ours.max(1) / ours.mean(1)) < np.median(priced.max(1) / priced.mean(1))
    assert with_term.fingerprint() != without.fingerprint()


def test_calibrate_times_each_shape_and_fits():
    calls = []

    def run(n, length):  # a stand-in whose time grows with the padded tokens
        calls.append((n, length))
        time.sleep(n * length * 2e-6)

    model, error = CostModel.calibrate(run, shapes=[(8, 16), (8, 64), (16, 32), (4, 128)], repeats=2)
    assert calls.count((8, 16)) == 3 and len(calls) == 12  # one untimed run, then the repeats
    assert isinstance(model, CostModel) and error >= 0


def test_more_micro_batches_never_cost_more_under_a_quadratic_cost():
    """On long-tailed lengths with attention's quadratic term the longest example alone can
    outweigh a micro-batch's share; the rank that trains it must then not also get
    full-sized micro-batches (32 ranks: 0.88, 0.90 and 0.91 of the ranks' time useful with
    1, 2 and 4 micro-batches a rank; before, two did worse than one, and at 64 ranks on
    20,480 examples four gave 0.76 against one's 0.85)."""
    n = 8192
    lengths = np.clip(np.random.default_rng(0).lognormal(5.0, 0.8, n).round(), 1, None)
    model = CostModel(per_token=1.0, per_token_squared=1 / 512)
    useful = model.example_cost(lengths).sum()
    efficiency = []
    for accumulation in (1, 2, 4):
        sel = StepBalancedSelector(RandomSelector(n, B, seed=0), lengths, accumulation=accumulation, cost_model=model)
        efficiency.append(useful / (32 * sel.step_costs(0, 32).max(1).sum()))
        plan = sel.plan(0, 32)
        trained = np.concatenate([np.concatenate(plan.batches(r)) for r in range(32)])
        assert np.array_equal(np.sort(trained), np.arange(n))
    assert efficiency[0] < efficiency[1] < efficiency[2], efficiency


def test_moving_single_examples_lowers_the_costliest_rank_and_keeps_a_valid_split():
    """improve_split: every position once, every micro-batch non-empty and longest first,
    its ranks as given; no step's costliest rank costs more, and on long-tailed lengths
    under attention's square many cost less (where no single example decides it: 45 %, 2.1 % in all)."""
    from batchsel.selectors.buckets.step_kernels import deal_micro_batches, improve_split, split_step

    a, b = 1.0, 1 / 512
    rng = np.random.default_rng(5)

    def rank_costs(lengths, perm, starts, ranks, world_size):
        sizes = np.diff(np.append(starts, len(perm)))
        longest = lengths[perm[starts]]
        return np.bincount(ranks, sizes * (a * longest + b * longest**2), minlength=world_size)

    before, after = [], []
    for world_size, per_rank in [(2, 4), (8, 4), (8, 1), (32, 2)] * 10:
        lengths = np.sort(np.clip(rng.lognormal(5.0, 0.8, 32 * world_size).round(), 1, None))[::-1].copy()
        starts = split_step(lengths, world_size * per_rank, a, b, 0.0, 0.0)
        perm = np.arange(len(lengths))
        sizes = np.diff(np.append(starts, len(lengths)))
        ranks = deal_micro_batches(sizes * (a * lengths[starts] + b * lengths[starts] ** 2), world_size, per_rank)
        new_perm, new_starts = improve_split(lengths, perm, starts, ranks, world_size, a, b, 0.0, 0.0)
        assert np.array_equal(np.sort(new_perm), perm) and len(new_starts) == len(starts)
        bounds = np.append(new_starts, len(perm))
        assert (np.diff(bounds) >= 1).all()
        assert all((np.diff(new_perm[s:e]) > 0).all() for s, e in zip(bounds[:-1], bounds[1:]))
        before.append(rank_costs(lengths, perm, starts, ranks, world_size).max())
        after.append(rank_costs(lengths, new_perm, new_starts, ranks, world_size).max())
    before, after = np.array(before), np.array(after)
    assert (after <= before * (1 + 1e-12)).all()
    assert (after < before * 0.999).mean() > 0.3 and after.sum() < 0.99 * before.sum(), after / before
