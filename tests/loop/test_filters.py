"""CandidateFilter, the score helpers and IrreducibleLoss (one process; the DDP loop under
torchrun / mpiexec is in test_filter_mp.py)."""

import io
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import batchsel
from batchsel import CandidateFilter, IrreducibleLoss, RandomSelector, SelectionBatchSampler
from batchsel.loop.filters import gradnorm_scores, loss_scores


def candidates(n=40, seed=0):
    rng = np.random.default_rng(seed)
    return rng.permutation(1000)[:n].astype(np.int64), rng.normal(size=n)


# -- selection ----------------------------------------------------------------------------
def test_keeps_the_top_scores_sorted_with_ties_to_the_smaller_position():
    f = CandidateFilter(batch_size=3, ratio=2, uniform_fraction=0.0)
    assert f.candidate_size == 6
    keep = f.select(np.arange(100, 106), [0.1, 5.0, 2.0, 5.0, -1.0, 2.0])
    assert keep.dtype == np.int64 and keep.tolist() == [1, 2, 3]  # 5, 5, then the first 2.0
    assert (f.steps_, f.candidates_, f.kept_, f.kept_uniform_) == (1, 6, 3, 0)


def test_sizes():
    f = CandidateFilter(batch_size=32, ratio=2.5)
    assert f.candidate_size == 80
    assert [f.keep_count(n) for n in (80, 81, 200, 79, 10, 1)] == [32, 32, 32, 32, 4, 1]
    assert CandidateFilter(batch_size=10, ratio=1).candidate_size == 10
    assert CandidateFilter(batch_size=3, ratio=1 / 3 + 1).candidate_size == 4  # no float round-up to 5
    f = CandidateFilter(batch_size=2, ratio=1)  # ratio 1: keeps everything
    assert f.select([5, 6], [0.0, 1.0]).tolist() == [0, 1]


def test_selection_is_deterministic_and_leaves_the_global_rngs_alone():
    idx, s = candidates()
    np_state, torch_state = np.random.get_state()[1].copy(), torch.random.get_rng_state().clone()
    runs = []
    for _ in range(2):
        f = CandidateFilter(8, 5, uniform_fraction=0.5, seed=3)
        runs.append([f.select(idx, s).tolist() for _ in range(4)])
    assert runs[0] == runs[1]
    assert len({tuple(r) for r in runs[0]}) > 1  # the uniform draw changes with the step
    other = CandidateFilter(8, 5, uniform_fraction=0.5, seed=4)
    assert [other.select(idx, s).tolist() for _ in range(4)] != runs[0]
    assert (np.random.get_state()[1] == np_state).all() and torch.equal(torch.random.get_rng_state(), torch_state)


def test_uniform_share_is_drawn_uniformly_from_the_rest():
    n, k = 20, 4
    s = np.arange(n, dtype=float)  # the top scores are positions 16..19
    f = CandidateFilter(k, n / k, uniform_fraction=0.5, seed=0)
    counts = np.zeros(n)
    for t in range(2000):
        keep = f.select(np.arange(n) + t, s)
        assert len(keep) == k and len(set(keep.tolist())) == k
        counts[keep] += 1
    assert f.kept_uniform_ == 2 * 2000
    # 2 uniform picks per step over 20 positions (0.1 per position and step); the other
    # 2 are the best remaining scores, so positions 0..15 are kept only by the uniform draw
    assert np.allclose(counts[:16] / 2000, 0.1, atol=0.025)
    assert (counts[18:] > 1900).all()
    assert CandidateFilter(k, 5, uniform_fraction=1.0).select(np.arange(20), s).tolist() != [16, 17, 18, 19]


def test_warmup_anneals_the_uniform_share():
    f = CandidateFilter(10, 2, uniform_fraction=0.2, warmup_steps=4)
    assert [f.uniform_share(t) for t in range(6)] == pytest.approx([1.0, 0.8, 0.6, 0.4, 0.2, 0.2])
    s = np.arange(20.0)
    uniform = []
    for t in range(6):
        before = f.kept_uniform_
        f.select(np.arange(20), s)
        uniform.append(f.kept_uniform_ - before)
    assert uniform == [10, 8, 6, 4, 2, 2]


def test_diversity_covers_the_clusters():
    rng = np.random.default_rng(0)
    centers = np.eye(4, 8) * 10
    labels = np.repeat(np.arange(4), 10)
    emb = (centers[labels] + rng.normal(scale=0.1, size=(40, 8))).astype(np.float32)
    s = np.where(labels == 0, 1.0, 0.9) + rng.normal(scale=0.01, size=40)  # cluster 0 scores a little higher
    top = CandidateFilter(4, 10).select(np.arange(40), s)
    assert set(labels[top]) == {0}  # score only: all from cluster 0
    diverse = CandidateFilter(4, 10, diversity=1.0).select(np.arange(40), s, embeddings=emb)
    assert set(labels[diverse]) == {0, 1, 2, 3}
    weak = CandidateFilter(4, 10, diversity=0.01).select(np.arange(40), s, embeddings=emb)
    assert set(labels[weak]) == {0}  # a small lambda leaves the scores in charge
    # the uniform picks count as already chosen: the greedy covers the other clusters
    f = CandidateFilter(4, 10, diversity=1.0, uniform_fraction=0.25, seed=1)
    keep = f.select(np.arange(40), s, embeddings=torch.from_numpy(emb))
    assert len(keep) == 4 and set(labels[keep]) == {0, 1, 2, 3}


# -- scores -------------------------------------------------------------------------------
def test_scores_match_torch():
    torch.manual_seed(0)
    h = torch.randn(12, 5)
    layer = torch.nn.Linear(5, 3)
    y = torch.randint(0, 3, (12,))
    logits = layer(h)
    assert np.allclose(loss_scores(logits, y), F.cross_entropy(logits, y, reduction="none").detach().numpy(), atol=1e-6)
    # per-example gradient norms: w.r.t. the logits, and of the last layer's weights
    g_logits, g_weight = [], []
    for i in range(12):
        layer.zero_grad()
        z = layer(h[i : i + 1])
        z.retain_grad()
        F.cross_entropy(z, y[i : i + 1]).backward()
        g_logits.append(float(z.grad.norm()))
        g_weight.append(float(layer.weight.grad.norm()))
    assert np.allclose(gradnorm_scores(logits, y), g_logits, atol=1e-6)
    assert np.allclose(gradnorm_scores(logits, y, hidden=h), g_weight, atol=1e-5)


def test_filter_scores_by_kind():
    rng = np.random.default_rng(0)
    logits, y, idx = rng.normal(size=(6, 4)), rng.integers(0, 4, 6), np.array([9, 3, 0, 7, 2, 5])
    il = rng.random(10)
    assert np.allclose(CandidateFilter(2, 3, "loss").scores(idx, logits, y), loss_scores(logits, y))
    assert np.allclose(CandidateFilter(2, 3, "gradnorm").scores(idx, logits, y), gradnorm_scores(logits, y))
    rho = CandidateFilter(
        2, 3, "rho", irreducible_losses=torch.from_numpy(il), irreducible_weight=1.0, uniform_fraction=0.0
    )
    assert np.allclose(rho.scores(idx, logits, y), loss_scores(logits, y) - il[idx])
    half = CandidateFilter(2, 3, "rho", irreducible_losses=il, irreducible_weight=0.5)
    assert np.allclose(half.scores(idx, logits, y), loss_scores(logits, y) - 0.5 * il[idx])
    keep = rho(idx, torch.from_numpy(logits), torch.from_numpy(y))
    assert keep.tolist() == sorted(np.argsort(-(loss_scores(logits, y) - il[idx]), kind="stable")[:2].tolist())


# -- bad input ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(ratio=0.5), "ratio.*0.5"),
        (dict(ratio=float("nan")), "ratio"),
        (dict(ratio=True), "ratio"),
        (dict(batch_size=0), "batch_size"),
        (dict(score="entropy"), "score.*entropy"),
        (dict(score="rho"), "irreducible_losses"),
        (dict(uniform_fraction=1.5), "uniform_fraction.*1.5"),
        (dict(diversity=-1), "diversity.*-1"),
        (dict(warmup_steps=-2), "warmup_steps"),
        (dict(irreducible_weight=-0.5), "irreducible_weight.*-0.5"),
        (dict(score="rho", irreducible_losses=[0.1, float("inf")]), "inf"),
    ],
)
def test_bad_settings(kwargs, match):
    kwargs = {"batch_size": 4, **kwargs}
    with pytest.raises(ValueError, match=match):
        CandidateFilter(**kwargs)


def test_bad_select_input():
    f = CandidateFilter(2, 2)
    with pytest.raises(ValueError, match=r"shape \(3,\), expected \(4,\)"):
        f.select(np.arange(4), [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="NaN.*position 2"):
        f.select(np.arange(4), [1.0, 2.0, np.nan, 3.0])
    with pytest.raises(ValueError, match="inf"):
        f.select(np.arange(4), [1.0, 2.0, np.inf, 3.0])
    with pytest.raises(ValueError, match="non-empty"):
        f.select([], [])
    with pytest.raises(TypeError, match="integers"):
        f.select(np.array([0.5, 1.5]), [1.0, 2.0])
    with pytest.raises(ValueError, match="diversity=1.0 needs"):
        CandidateFilter(2, 2, diversity=1.0).select(np.arange(4), np.ones(4))
    with pytest.raises(ValueError, match="3 rows, expected 4"):
        CandidateFilter(2, 2, diversity=1.0).select(np.arange(4), np.ones(4), embeddings=np.ones((3, 2)))
    with pytest.raises(ValueError, match="NaN"):
        f(np.arange(2), np.array([[0.0, np.nan], [0.0, 0.0]]), np.array([0, 1]))
    with pytest.raises(ValueError, match=r"labels must be in \[0, 2\).*found 2"):
        f(np.arange(2), np.zeros((2, 2)), np.array([0, 2]))
    assert f.steps_ == 0  # nothing was counted


def test_rho_refuses_examples_without_an_irreducible_loss():
    f = CandidateFilter(1, 2, "rho", irreducible_losses=np.array([0.1, np.nan, 0.3]))
    with pytest.raises(ValueError, match="example 1 has no irreducible loss"):
        f([0, 1], np.zeros((2, 2)), np.array([0, 1]))
    with pytest.raises(ValueError, match="index 5 is past the 3"):
        f([0, 5], np.zeros((2, 2)), np.array([0, 1]))


# -- resume and cost ----------------------------------------------------------------------
def test_state_dict_resumes_exactly():
    idx, s = candidates(60)
    a = CandidateFilter(6, 10, uniform_fraction=0.5, warmup_steps=3, seed=2)
    full = [a.select(idx, s).tolist() for _ in range(6)]
    b = CandidateFilter(6, 10, uniform_fraction=0.5, warmup_steps=3, seed=2)
    first = [b.select(idx, s).tolist() for _ in range(2)]
    buf = io.BytesIO()
    torch.save(b.state_dict(), buf)
    c = CandidateFilter(6, 10, uniform_fraction=0.5, warmup_steps=3, seed=2)
    c.load_state_dict(torch.load(io.BytesIO(buf.getvalue()), weights_only=True))
    assert first + [c.select(idx, s).tolist() for _ in range(4)] == full
    assert (c.steps_, c.kept_, c.candidates_) == (a.steps_, a.kept_, a.candidates_)
    with pytest.raises(ValueError, match="seed=2.*this filter has 3"):
        CandidateFilter(6, 10, uniform_fraction=0.5, warmup_steps=3, seed=3).load_state_dict(b.state_dict())
    with pytest.raises(ValueError, match="not a CandidateFilter state"):
        c.load_state_dict({"version": 99})


def test_cost_counts_the_timed_forward(monkeypatch):
    """A fake clock (a timing test on a loaded machine is flaky): each scoring forward
    takes 1 s, each training step 1 s, the filter itself no time."""
    import types

    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(
        "batchsel.loop.filters.candidate_filter.time", types.SimpleNamespace(perf_counter=lambda: clock.now)
    )
    f = CandidateFilter(2, 2)
    for _ in range(3):
        with f.timed():
            clock.now += 1.0  # the scoring forward
        clock.now += 1.0  # the training step
        f.select(np.arange(4), np.arange(4.0))
    cost = f.cost()
    assert cost["steps"] == 3 and cost["forward_seconds"] == 3.0
    assert cost["forward_fraction"] == 0.5 and cost["select_fraction"] == 0.0


def test_import_stays_torch_free():
    import subprocess
    import sys

    code = "import sys, batchsel; batchsel.CandidateFilter(2, 2); assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# -- the loop in one process, with exact mid-epoch resume ---------------------------------
def _loop(x, y, filt, sampler, model, opt, epochs, start_epoch=0, stop=None):
    loader = DataLoader(TensorDataset(x, y, torch.arange(len(x))), batch_sampler=sampler)
    kept, step = [], 0
    for epoch in range(start_epoch, epochs):
        sampler.set_epoch(epoch)
        for xb, yb, ib in loader:
            with torch.no_grad(), filt.timed():
                h = model[:-1](xb)
                logits = model[-1](h)
            keep = filt(ib, logits, yb, hidden=h)
            xb, yb, ib = xb[keep], yb[keep], ib[keep]
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
            kept.append(ib.tolist())
            step += 1
            if step == stop:
                return kept
    return kept


def _fresh(n, score):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    filt = CandidateFilter(5, 3, score, uniform_fraction=0.2, warmup_steps=2, seed=1)
    sampler = SelectionBatchSampler(RandomSelector(n, filt.candidate_size, seed=0), rank=0, world_size=1)
    return model, opt, filt, sampler


@pytest.mark.parametrize("score", ["loss", "gradnorm"])
def test_loop_resumes_mid_epoch_exactly(score):
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.normal(size=(100, 8)).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, 3, 100))
    model, opt, filt, sampler = _fresh(100, score)
    full = _loop(x, y, filt, sampler, model, opt, epochs=2)
    assert len(full) == 2 * math.ceil(100 / 15) and [len(b) for b in full[:7]] == [5] * 6 + [4]  # 10 left: keeps 4
    model, opt, filt, sampler = _fresh(100, score)
    first = _loop(x, y, filt, sampler, model, opt, epochs=2, stop=10)  # epoch 1, batch 3
    buf = io.BytesIO()
    torch.save(
        {
            "model": model.state_dict(),
            "opt": opt.state_dict(),
            "sampler": sampler.state_dict(),
            "filter": filt.state_dict(),
        },
        buf,
    )
    state = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
    model, opt, filt, sampler = _fresh(100, score)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    sampler.load_state_dict(state["sampler"])
    filt.load_state_dict(state["filter"])
    rest = _loop(x, y, filt, sampler, model, opt, epochs=2, start_epoch=sampler.epoch)
    assert first + rest == full


# -- irreducible losses -------------------------------------------------------------------
class Memorizer:
    """A 'classifier' that knows the labels of the rows it was fit on and nothing else:
    cross-fitted losses are then log(C) everywhere iff no example is scored by a model
    fit on it."""

    def fit(self, x, y):
        self.known = {row.tobytes(): label for row, label in zip(np.asarray(x, np.float32), y)}
        self.classes_ = np.unique(y)
        return self

    def predict_proba(self, x):
        out = np.full((len(x), len(self.classes_)), 1.0 / len(self.classes_))
        for i, row in enumerate(np.asarray(x, np.float32)):
            if row.tobytes() in self.known:
                out[i] = np.eye(len(self.classes_))[np.searchsorted(self.classes_, self.known[row.tobytes()])]
        return out

    def get_params(self, deep=True):
        return {}

    def set_params(self, **params):
        return self


def blobs(n=300, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    x = (np.eye(3)[y] * 4 + rng.normal(size=(n, 3))).astype(np.float32)
    flip = rng.random(n) < noise
    noisy = np.where(flip, (y + 1) % 3, y)
    return x, y, noisy, flip


def test_cross_fitting_never_scores_an_example_with_a_model_fit_on_it():
    x, y, _, _ = blobs()
    il = IrreducibleLoss(Memorizer(), folds=4, standardize=False, balanced=False).fit(x, y)
    assert np.allclose(il.losses_, np.log(3))
    assert np.bincount(il.fold_).tolist() == [75] * 4 and il.train_indices_.size == 300
    # the same model fit on everything would have been perfect: the memorizer works
    assert Memorizer().fit(x, y).predict_proba(x)[np.arange(300), y].min() == 1.0


@pytest.mark.parametrize("model", ["knn", "logistic", "mlp"])
def test_irreducible_losses_flag_the_noisy_labels(model):
    x, y, noisy, flip = blobs(600, noise=0.2)
    il = IrreducibleLoss(model, seed=0).fit(x, noisy)
    assert il.losses_.shape == (600,) and np.isfinite(il.losses_).all()
    assert il.accuracy_ == pytest.approx(np.mean(il.predictions_ == noisy))
    assert np.mean(il.predictions_ == y) > 0.9  # it predicts the true labels
    # ROC AUC of the irreducible loss as a detector of the wrong labels
    auc = (il.losses_[flip][:, None] > il.losses_[~flip][None, :]).mean()
    assert auc > 0.9, auc
    assert il.losses_.max() <= -math.log(il.min_prob) + 1e-9


def test_irreducible_loss_is_deterministic_and_takes_tensors():
    x, _, noisy, _ = blobs()
    a = IrreducibleLoss(seed=1).fit(x, noisy)
    b = IrreducibleLoss(seed=1).fit(torch.from_numpy(x), torch.from_numpy(noisy))
    assert np.array_equal(a.losses_, b.losses_) and np.array_equal(a.fold_, b.fold_)
    assert not np.array_equal(a.fold_, IrreducibleLoss(seed=2).fit(x, noisy).fold_)


def test_holdout_mode():
    x, y, _, _ = blobs(200)
    il = IrreducibleLoss(holdout=0.25).fit(x, y)
    assert len(il.holdout_indices_) == 50 and len(il.train_indices_) == 150
    assert np.isnan(il.losses_[il.holdout_indices_]).all() and np.isfinite(il.losses_[il.train_indices_]).all()
    assert (il.predictions_[il.holdout_indices_] == -1).all() and il.accuracy_ > 0.9
    assert len(IrreducibleLoss(holdout=30).fit(x, y).holdout_indices_) == 30
    # a filter on these losses refuses the holdout
    f = CandidateFilter(1, 2, "rho", irreducible_losses=il)
    with pytest.raises(ValueError, match="holdout"):
        f(il.holdout_indices_[:2], np.zeros((2, 3)), y[il.holdout_indices_[:2]])


def test_classes_missing_from_a_fold_keep_their_columns():
    x, y, _, _ = blobs(40)
    y = y.copy()
    y[:2] = 5  # class 5 has two examples: some folds never see it
    il = IrreducibleLoss("logistic", folds=10).fit(x, y)
    assert il.n_classes_ == 4 and il.classes_.tolist() == [0, 1, 2, 5] and np.isfinite(il.losses_).all()
    assert set(il.predictions_.tolist()) <= {0, 1, 2, 5}  # the labels' own ids


@pytest.mark.parametrize(
    "kwargs, fit_n, match",
    [
        (dict(holdout=5000), 4000, "holdout=5000"),
        (dict(holdout=400), 400, "holdout=400"),
        (dict(holdout=1.5), None, "holdout.*1.5"),
        (dict(holdout=0), None, "holdout"),
        (dict(holdout=0.0001), 100, "holdout=0.0001"),
        (dict(folds=1), None, "folds"),
        (dict(folds=50), 20, "folds=50"),
        (dict(model="svm"), None, "model.*svm"),
        (dict(min_prob=0), None, "min_prob"),
    ],
)
def test_irreducible_loss_bad_input(kwargs, fit_n, match):
    with pytest.raises(ValueError, match=match):
        il = IrreducibleLoss(**kwargs)
        rng = np.random.default_rng(0)
        il.fit(rng.normal(size=(fit_n, 4)), rng.integers(0, 3, fit_n))


def test_irreducible_loss_refuses_bad_data():
    with pytest.raises(TypeError, match="predict_proba"):
        IrreducibleLoss(model=object())
    with pytest.raises(ValueError, match="NaN"):
        IrreducibleLoss().fit(np.full((10, 2), np.nan), np.zeros(10, dtype=int))
    with pytest.raises(ValueError, match="length 9"):
        IrreducibleLoss().fit(np.ones((10, 2)), np.zeros(9, dtype=int))


def test_public_names():
    for name in ("CandidateFilter", "IrreducibleLoss", "loss_scores", "gradnorm_scores"):
        assert name in batchsel.__all__ and hasattr(batchsel, name)


def test_balanced_posteriors_keep_rare_classes_from_looking_irreducible():
    x, y, _, _ = blobs(n=900)
    keep = np.flatnonzero((y != 2) | (np.arange(900) % 10 == 0))  # class 2 is ten times rarer
    x, y = x[keep], y[keep]
    plain = IrreducibleLoss(seed=0, balanced=False).fit(x, y)
    balanced = IrreducibleLoss(seed=0).fit(x, y)
    rare = y == 2
    # the rare class's irreducible losses fall, the others' barely move
    assert balanced.losses_[rare].mean() < 0.7 * plain.losses_[rare].mean()
    assert abs(balanced.losses_[~rare].mean() - plain.losses_[~rare].mean()) < 0.1
    # on balanced classes the correction changes (almost) nothing
    xb, yb, _, _ = blobs(n=900, seed=1)
    a = IrreducibleLoss(seed=0, balanced=False).fit(xb, yb).losses_
    b = IrreducibleLoss(seed=0).fit(xb, yb).losses_
    assert np.abs(a - b).mean() < 0.05


# -- the torch irreducible-loss model and the guard ---------------------------------------
def _small_net():
    return torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


@pytest.mark.parametrize("model", ["net", _small_net])
def test_torch_irreducible_model_flags_the_noisy_labels(model):
    x, y, noisy, flip = blobs(300, noise=0.2)
    il = IrreducibleLoss(model, epochs=8, lr=1e-2, seed=0).fit(x, noisy)
    assert np.isfinite(il.losses_).all() and np.mean(il.predictions_ == y) > 0.9
    auc = (il.losses_[flip][:, None] > il.losses_[~flip][None, :]).mean()
    assert auc > 0.9, auc
    # per-fold held-out accuracy, and the epochs early stopping kept (within the budget)
    assert il.fold_accuracy_.shape == (5,) and il.accuracy_ == pytest.approx(il.fold_accuracy_.mean(), abs=0.01)
    assert ((il.epochs_ >= 1) & (il.epochs_ <= 8)).all()
    assert il.chance_ == pytest.approx(np.bincount(noisy).max() / 300)


def test_torch_irreducible_model_is_deterministic_and_leaves_the_global_rng_alone():
    x, _, noisy, _ = blobs(100, noise=0.2)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = IrreducibleLoss("net", epochs=2, hidden=(16,), seed=1).fit(x, noisy)
    assert torch.equal(torch.get_rng_state(), before)
    b = IrreducibleLoss("net", epochs=2, hidden=(16,), seed=1).fit(torch.from_numpy(x), torch.from_numpy(noisy))
    assert np.array_equal(a.losses_, b.losses_) and np.array_equal(a.epochs_, b.epochs_)
    c = IrreducibleLoss("net", epochs=2, hidden=(16,), seed=2).fit(x, noisy)
    assert not np.array_equal(a.losses_, c.losses_)


def test_torch_cross_fitting_an_examples_loss_is_independent_of_its_own_label():
    x, _, noisy, _ = blobs(200, noise=0.1)
    a = IrreducibleLoss("net", folds=4, epochs=2, hidden=(16,), seed=0).fit(x, noisy)
    i = 17
    flipped = noisy.copy()
    flipped[i] = (noisy[i] + 1) % 3
    b = IrreducibleLoss("net", folds=4, epochs=2, hidden=(16,), seed=0).fit(x, flipped)
    same = a.fold_ == a.fold_[i]
    # the model scoring example i's fold never saw label i: its fold is scored identically
    # (i's own loss is the same distribution read at the new label), the other folds were
    # fit with the new label and change
    assert np.array_equal(a.losses_[same & (np.arange(200) != i)], b.losses_[same & (np.arange(200) != i)])
    assert np.array_equal(a.predictions_[same], b.predictions_[same])
    assert not np.array_equal(a.losses_[~same], b.losses_[~same])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(epochs=0), "epochs"),
        (dict(patience=0), "patience"),
        (dict(lr=float("nan")), "lr"),
        (dict(stop_fraction=0.0), "stop_fraction"),
        (dict(stop_fraction=0.9), "stop_fraction"),
        (dict(hidden=(0,)), "hidden"),
    ],
)
def test_torch_irreducible_model_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        IrreducibleLoss("net", **kwargs)


def test_torch_irreducible_model_bad_factory_and_data():
    x, y, _, _ = blobs(60)
    with pytest.raises(ValueError, match=r"shape \(1, 5\).*one output per class: 3"):  # wrong number of classes
        IrreducibleLoss(lambda: torch.nn.Linear(3, 5), epochs=1).fit(x, y)
    with pytest.raises(TypeError, match="nn.Module"):
        IrreducibleLoss(lambda: "not a model", epochs=1).fit(x, y)
    with pytest.raises(ValueError, match="folds=100"):
        IrreducibleLoss("net", folds=100).fit(x, y)
    with pytest.raises(ValueError, match="NaN"):
        bad = x.copy()
        bad[3, 1] = np.nan
        IrreducibleLoss("net").fit(bad, y)
    with pytest.raises(ValueError, match="length 59"):
        IrreducibleLoss("net").fit(x, y[:59])


def test_guard_falls_back_to_uniform_batches_on_a_near_chance_model(caplog):
    x, y, _, _ = blobs(300)
    rng = np.random.default_rng(0)
    shuffled = rng.permutation(y)  # labels unrelated to x: the IL model is at chance
    bad = IrreducibleLoss(seed=0).fit(x, shuffled)
    with caplog.at_level("WARNING", logger="batchsel.loop.filters"):
        f = CandidateFilter(4, 4, "rho", irreducible_losses=bad, uniform_fraction=0.0, seed=0)
    assert f.guard_ == "uniform" and f.il_skill_ < 0.3 and "near chance" in caplog.text
    assert f.uniform_share() == 1.0
    # it keeps a uniform draw, whatever the scores: exactly what a plain uniform filter keeps
    plain = CandidateFilter(4, 4, "loss", uniform_fraction=1.0, seed=0)
    idx = np.arange(100, 116)
    logits = rng.normal(size=(16, 3))
    assert f(idx, logits, shuffled[:16]).tolist() == plain(idx, logits, shuffled[:16]).tolist()
    # a good model passes, and min_il_skill=0 with min_il_decisive=0 switch the guard off
    good = IrreducibleLoss(seed=0).fit(x, y)
    assert CandidateFilter(4, 4, "rho", irreducible_losses=good).guard_ is None
    assert bad.decisive_ < 0.5 < good.decisive_
    assert CandidateFilter(4, 4, "rho", irreducible_losses=bad, min_il_skill=0.0).guard_ == "uniform"
    assert CandidateFilter(4, 4, "rho", irreducible_losses=bad, min_il_skill=0.0, min_il_decisive=0.0).guard_ is None
    # plain arrays carry no accuracy: no guard
    assert CandidateFilter(4, 4, "rho", irreducible_losses=bad.losses_).guard_ is None


def test_guard_refuses_an_il_model_that_is_rarely_decisive(caplog):
    # labels follow x, but only weakly: above chance (skill passes) yet unsure of most examples
    rng = np.random.default_rng(1)
    y = rng.integers(0, 10, 900)
    x = (np.eye(10)[y] * 1.5 + rng.normal(size=(900, 10))).astype(np.float32)
    weak = IrreducibleLoss(seed=0).fit(x, y)
    assert weak.decisive_ < 0.5 and (weak.accuracy_ - weak.chance_) / (1 - weak.chance_) >= 0.3
    with caplog.at_level("WARNING", logger="batchsel.loop.filters"):
        f = CandidateFilter(4, 4, "rho", irreducible_losses=weak)
    assert f.guard_ == "uniform" and "decisive" in caplog.text and f.uniform_share() == 1.0
    assert CandidateFilter(4, 4, "rho", irreducible_losses=weak, min_il_decisive=0.0).guard_ is None
    with pytest.raises(ValueError, match="min_il_decisive.*1.5"):
        CandidateFilter(4, 4, "rho", irreducible_losses=weak, min_il_decisive=1.5)


def test_auto_weight_follows_the_il_models_confident_disagreement():
    x, y, _, _ = blobs(600)
    clean = IrreducibleLoss(seed=0).fit(x, y)
    noisy_labels = y.copy()
    noisy_labels[:150] = (y[:150] + 1) % 3  # 25 % wrong labels, which the IL model confidently contradicts
    noisy = IrreducibleLoss(seed=0).fit(x, noisy_labels)
    assert clean.confident_disagreement_ < 0.05 and noisy.confident_disagreement_ > 0.15
    assert noisy.confident_disagreement_ == pytest.approx(
        np.mean((noisy.predictions_ != noisy_labels) & (noisy.predictions_ != -1)), abs=0.05
    )
    assert CandidateFilter(4, 4, "rho", irreducible_losses=clean).irreducible_weight_ == 0.5
    assert CandidateFilter(4, 4, "rho", irreducible_losses=noisy).irreducible_weight_ == 1.0
    assert CandidateFilter(4, 4, "rho", irreducible_losses=noisy.losses_).irreducible_weight_ == 0.5  # no evidence

    class Partial:  # evidence between the two ends: linear
        losses_, accuracy_, chance_, decisive_, confident_disagreement_ = noisy.losses_, 0.9, 0.34, 0.9, 0.1125

    assert CandidateFilter(4, 4, "rho", irreducible_losses=Partial()).irreducible_weight_ == pytest.approx(0.75)
    # an explicit weight is kept
    assert CandidateFilter(4, 4, "rho", irreducible_losses=noisy, irreducible_weight=0.3).irreducible_weight_ == 0.3
    with pytest.raises(ValueError, match="irreducible_weight.*'heavy'"):
        CandidateFilter(4, 4, "rho", irreducible_losses=noisy, irreducible_weight="heavy")


def test_auto_weight_trusts_indecisive_irreducible_losses_only_with_evidence_of_noise():
    x, y, _, _ = blobs(600)
    il = IrreducibleLoss(seed=0).fit(x, y)
    # decisive: the model's class at least twice as likely as the runner-up
    assert not il.decisive_mask_[il.confidence_ < 0.5].any()  # 3 classes: below 1/2 the runner-up is > top / 2
    assert il.decisive_mask_[il.confidence_ >= 2 / 3].all()  # at 2/3 the runner-up is at most 1/3
    unsure = np.flatnonzero(~il.decisive_mask_)
    firm = np.flatnonzero(il.decisive_mask_)
    assert len(unsure) > 0 and len(firm) > 0
    idx = np.concatenate([unsure[:3], firm[:3]])
    z = np.zeros((6, 3))
    loss = np.log(3)
    auto = CandidateFilter(4, 4, "rho", irreducible_losses=il)  # no evidence of noise: w 0.5, unsure ones dropped
    assert auto.indecisive_trust_ == 0.0 and auto.irreducible_weight_ == 0.5
    expected = loss - 0.5 * il.losses_[idx] * np.array([0, 0, 0, 1, 1, 1])
    assert np.allclose(auto.scores(idx, z, y[idx]), expected)
    # the published score with a number; IrreducibleLoss.losses_ itself is left as it was
    fixed = CandidateFilter(4, 4, "rho", irreducible_losses=il, irreducible_weight=0.5)
    assert fixed.indecisive_trust_ == 1.0
    assert np.allclose(fixed.scores(idx, z, y[idx]), loss - 0.5 * il.losses_[idx])
    assert np.array_equal(auto.irreducible_losses, il.losses_)

    class Noisy:  # full evidence of noise: every irreducible loss counts, at weight 1
        losses_, decisive_mask_ = il.losses_, il.decisive_mask_
        accuracy_, chance_, decisive_, confident_disagreement_ = 0.9, 0.34, 0.9, 0.2

    noisy = CandidateFilter(4, 4, "rho", irreducible_losses=Noisy())
    assert noisy.indecisive_trust_ == 1.0
    assert np.allclose(noisy.scores(idx, z, y[idx]), loss - il.losses_[idx])


def test_guard_shrinks_the_irreducible_term_below_the_reference_accuracy(caplog):
    x, _, noisy, _ = blobs(300, noise=0.3)
    il = IrreducibleLoss(seed=0).fit(x, noisy)
    with caplog.at_level("WARNING", logger="batchsel.loop.filters"):
        f = CandidateFilter(
            4, 4, "rho", irreducible_losses=il, irreducible_weight=1.0, reference_accuracy=min(1.0, il.accuracy_ + 0.2)
        )
    assert f.guard_ == "downweight" and 0 < f.irreducible_weight_ < 1.0 and "reference accuracy" in caplog.text
    skill = lambda a: (a - il.chance_) / (1 - il.chance_)  # noqa: E731
    assert f.irreducible_weight_ == pytest.approx(skill(il.accuracy_) / skill(il.accuracy_ + 0.2))
    z = np.zeros((3, 3))
    assert np.allclose(f.scores([0, 1, 2], z, noisy[:3]), np.log(3) - f.irreducible_weight_ * il.losses_[:3])
    # a reference the IL model reaches changes nothing
    same = CandidateFilter(4, 4, "rho", irreducible_losses=il, reference_accuracy=il.accuracy_)
    assert same.guard_ is None
    assert same.irreducible_weight_ == CandidateFilter(4, 4, "rho", irreducible_losses=il).irreducible_weight_
    with pytest.raises(ValueError, match="reference_accuracy.*1.5"):
        CandidateFilter(4, 4, "rho", irreducible_losses=il, reference_accuracy=1.5)
    with pytest.raises(ValueError, match="min_il_skill.*-0.1"):
        CandidateFilter(4, 4, "rho", irreducible_losses=il, min_il_skill=-0.1)


def test_guarded_filter_needs_neither_logits_nor_embeddings():
    x, y, _, _ = blobs(120)
    bad = IrreducibleLoss(seed=0).fit(x, np.random.default_rng(1).permutation(y))
    f = CandidateFilter(2, 4, "rho", irreducible_losses=bad, diversity=1.0, seed=3)
    assert f.guard_ == "uniform"
    keep = f.select(np.arange(8), np.zeros(8))  # what a loop passes when it skips the forward
    assert len(keep) == 2 and f.kept_uniform_ == 2


def test_percentile_pick_is_selective_backprop():
    """pick="percentile": always keep_count(n) kept (equal on every rank), high-loss
    candidates far more often than low-loss ones (P = CDF ** beta), the history bounded by
    ``window``, and a resumed filter draws what the uninterrupted one did."""
    filt = CandidateFilter(4, ratio=2, pick="percentile", beta=2.0, window=64, uniform_fraction=0.0, seed=1)
    counts = np.zeros(8)
    for t in range(300):
        keep = filt.select(np.arange(8) + 8 * t, np.arange(8.0))  # score = position
        assert len(keep) == 4
        counts[keep] += 1
    assert counts[7] > 2.5 * counts[1] and (np.diff(counts) >= -20).all()
    assert len(filt._history) == 64
    state = filt.state_dict()
    again = CandidateFilter(4, ratio=2, pick="percentile", beta=2.0, window=64, uniform_fraction=0.0, seed=1)
    again.load_state_dict(state)
    scores = np.random.default_rng(0).random(8)
    assert filt.select(np.arange(8), scores).tolist() == again.select(np.arange(8), scores).tolist()
    for bad in (
        dict(pick="best"),
        dict(pick="percentile", beta=0),
        dict(pick="percentile", diversity=1.0),
        dict(pick="percentile", window=0),
    ):
        with pytest.raises(ValueError):
            CandidateFilter(4, **bad)


# -- scoring on the logits' device (issue 34) ----------------------------------------------
@pytest.mark.parametrize("score", ["loss", "gradnorm", "rho"])
@pytest.mark.parametrize("pick", ["top", "percentile"])
@pytest.mark.parametrize("uniform_fraction", [0.0, 0.25])
def test_device_path_keeps_the_positions_of_the_host_path(score, pick, uniform_fraction):
    """The torch path (run here on CPU tensors; a CUDA / MPS tensor takes it in __call__)
    keeps what the numpy path keeps, step after step (the percentile window carried on)."""
    import torch

    rng = np.random.default_rng(3)
    extra = {"irreducible_losses": rng.random(500)} if score == "rho" else {}
    host = CandidateFilter(16, 4, score, pick=pick, uniform_fraction=uniform_fraction, window=100, **extra)
    dev = CandidateFilter(16, 4, score, pick=pick, uniform_fraction=uniform_fraction, window=100, **extra)
    for _ in range(6):
        idx = rng.choice(500, 64, replace=False)
        z, y, h = torch.randn(64, 5) * 3, torch.randint(0, 5, (64,)), torch.randn(64, 3)
        hidden = h if score == "gradnorm" else None
        expected = host(idx, z.numpy(), y.numpy(), hidden=None if hidden is None else h.numpy())
        assert np.array_equal(dev._call_on_device(idx, z, y, hidden), expected)
    a, b = dev.state_dict(), host.state_dict()
    assert a["settings"] == b["settings"] and np.allclose(a["history"], b["history"], rtol=1e-12)
    assert dev.kept_ == host.kept_ and dev.steps_ == host.steps_


def test_device_path_names_bad_input_as_the_host_path_does():
    import torch

    filt = CandidateFilter(2, 4)
    z, y = torch.randn(8, 3), torch.arange(8) % 3
    bad = z.clone()
    bad[5, 1] = float("nan")
    with pytest.raises(ValueError, match=r"NaN or inf \(first at row 5\)"):
        filt._call_on_device(np.arange(8), bad, y, None)
    with pytest.raises(ValueError, match=r"labels must be in \[0, 3\).*found 7"):
        filt._call_on_device(np.arange(8), z, torch.where(torch.arange(8) == 4, 7, y), None)
    with pytest.raises(ValueError, match="labels must be 1-D"):
        filt._call_on_device(np.arange(8), z, y[:5], None)
    with pytest.raises(TypeError, match="integer class ids"):
        filt._call_on_device(np.arange(8), z, y.float(), None)


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_cuda_logits_are_filtered_on_the_device():
    import torch

    filt, ref = CandidateFilter(8, 4), CandidateFilter(8, 4)
    z, y = torch.randn(32, 4), torch.randint(0, 4, (32,))
    keep = filt(np.arange(32), z.cuda(), y.cuda())
    assert np.array_equal(keep, ref(np.arange(32), z.numpy(), y.numpy()))


# -- issue 46 --------------------------------------------------------------------------------
@pytest.mark.parametrize("score", ["loss", "gradnorm", "rho"])
def test_logits_and_indices_of_different_lengths_are_named_as_such(score):
    # no scores were passed: the message was "scores has shape (8,), expected (7,)"
    extra = {"irreducible_losses": np.zeros(20)} if score == "rho" else {}
    filt = CandidateFilter(2, 4, score, **extra)
    z, y = np.zeros((8, 3)), np.arange(8) % 3
    for call in (
        lambda: filt(np.arange(7), z, y),
        lambda: filt.scores(np.arange(7), z, y),
        lambda: filt._call_on_device(np.arange(7), torch.from_numpy(z), torch.from_numpy(y), None),
    ):
        with pytest.raises(ValueError, match="logits has 8 rows but 7 indices were given"):
            call()
    assert filt.steps_ == 0


def test_unsigned_labels_out_of_range_are_reported_with_their_value():
    z = np.zeros((2, 3))
    with pytest.raises(ValueError, match=r"labels must be in \[0, 3\) .*shape \(2, 3\)\), found 9223372036854775808"):
        loss_scores(z, np.array([0, 2**63], dtype=np.uint64))
    assert loss_scores(z, np.array([0, 2], dtype=np.uint64)).shape == (2,)
