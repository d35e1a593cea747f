"""The budgeted regime benchmark: its regimes are what they claim, every run's learning rate
decays over its own budget, wall saved is computed as stated, and its --quick mode (what CI
runs) produces every figure, the JSON and the PNGs."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from paths import REPO as ROOT


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_quality", ROOT / "benchmarks" / "bench_quality.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_quality"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_splits_are_disjoint_and_standardized(bench):
    data = bench.load_dataset("digits")
    assert len(data.train.y) + len(data.val.y) + len(data.test.y) == 1797
    assert abs(float(data.train.x.mean())) < 1e-3 and data.train.x.dtype == np.float32
    # no test row is also a training row
    train_rows = {row.tobytes() for row in data.train.x}
    assert not any(row.tobytes() in train_rows for row in data.test.x if np.abs(row).sum() > 0)


def test_noise_flips_a_quarter_of_the_labels_to_another_class(bench):
    data = bench.load_dataset("digits")
    noisy, info = bench.make_regime("noise", data.train, 10, seed=3)
    wrong = np.flatnonzero(noisy.y != data.train.y)
    assert len(wrong) == round(0.25 * len(data.train.y))
    np.testing.assert_array_equal(wrong, info["flipped"])
    assert noisy.x is data.train.x
    again, _ = bench.make_regime("noise", data.train, 10, seed=3)
    np.testing.assert_array_equal(again.y, noisy.y)  # a seed's regime is reproducible
    other, _ = bench.make_regime("noise", data.train, 10, seed=4)
    assert (other.y != noisy.y).any()


def test_longtail_has_imbalance_ratio_ten(bench):
    data = bench.load_dataset("digits")
    tail, _ = bench.make_regime("longtail", data.train, 10, seed=0)
    counts = np.bincount(tail.y, minlength=10)
    assert counts[0] / counts[-1] == pytest.approx(10, rel=0.15)
    assert (np.diff(counts) <= 2).all()  # decreasing profile (up to the classes' own sizes)


def test_redundant_half_is_near_duplicates_of_ten_examples(bench):
    data = bench.load_dataset("digits")
    red, info = bench.make_regime("redundant", data.train, 10, seed=0)
    n = len(data.train.y)
    assert len(red.y) == 2 * n
    extra = red.x[n:]
    sources = data.train.x[info["sources"]]
    nearest = ((extra[:, None, :] - sources[None]) ** 2).sum(-1).argmin(1)
    dist = np.sqrt(((extra - sources[nearest]) ** 2).mean(1))
    assert dist.max() < 0.1 and len(np.unique(nearest)) == 10
    np.testing.assert_array_equal(red.y[n:], data.train.y[info["sources"]][nearest])


def test_redundant_large_tasks_copy_a_tenth_of_the_originals(bench):
    """The step-dominated tasks' redundancy: 40 % of the padded set are near-duplicates of
    10 % of the originals (many sources, as scraped data has), not copies of 10."""
    data = bench.load_dataset("digits")
    n = len(data.train.y)
    red, info = bench.make_regime("redundant", data.train, 10, seed=1, duplicate_sources=0.1, duplicate_share=0.4)
    assert len(red.y) - n == round(0.4 / 0.6 * n)
    assert len(info["sources"]) == round(0.1 * n)
    extra = red.x[n:]
    sources = data.train.x[info["sources"]]
    nearest = ((extra[:, None, :] - sources[None]) ** 2).sum(-1).argmin(1)
    assert np.sqrt(((extra - sources[nearest]) ** 2).mean(1)).max() < 0.1
    assert len(np.unique(nearest)) > 0.9 * len(sources)  # nearly every source is copied


def test_dedup_method_draws_one_row_per_near_duplicate_group(bench):
    """``dedup``: random batches over the rows batchsel.deduplicate keeps; on the redundant
    regime that is the originals (each copy joins its source's group, which keeps the source)."""
    data = bench.load_dataset("digits")
    red, info = bench.make_regime("redundant", data.train, 10, seed=0)
    n = len(data.train.y)
    sel = bench.make_selector("dedup", red, 32, seed=0)
    drawn = np.concatenate(sel.plan(0, 1).batches(0))
    assert np.array_equal(np.sort(drawn), sel.keep)  # each kept row once per epoch
    assert (sel.keep < n).all() and len(sel.keep) > 0.95 * n  # no copy kept, (almost) every original


def test_dedup_loss_rank_ranks_the_kept_rows_by_their_fed_back_losses(bench):
    """``dedup-loss-rank``: loss-rank over the kept rows; feedback in the full set's indices
    reaches the inner selector as its own, and only kept rows are drawn."""
    from batchsel.integrations import SelectionBatchSampler

    data = bench.load_dataset("digits")
    red, _ = bench.make_regime("redundant", data.train, 10, seed=0)
    sel = bench.make_selector("dedup-loss-rank", red, 32, seed=0)
    assert sel.online and sel.uses_feedback and isinstance(sel.inner, bench.batchsel.LossRankSelector)
    sampler = SelectionBatchSampler(sel)
    hard = sel.keep[:5]  # five kept rows with a large loss
    drawn = []
    for batch in sampler:
        idx = np.array(batch)
        drawn.append(idx)
        sampler.observe(idx, losses=np.where(np.isin(idx, hard), 10.0, 0.1))
    drawn = np.concatenate(drawn)
    assert np.isin(drawn, sel.keep).all()
    # loss-rank draws with replacement: a kept row may wait past epoch 0 (this seed: 1 of 5);
    # every one drawn has its loss at its own (inner) index, the others none yet
    seen = np.isin(hard, drawn)
    assert seen.sum() >= 3 and np.allclose(sel.inner.losses_[:5][seen], 10.0)
    assert np.isinf(sel.inner.losses_[:5][~seen]).all()
    sampler.set_epoch(1)
    counts = np.zeros(len(red.y), dtype=np.int64)
    for batch in sampler:
        idx = np.array(batch)
        counts[idx] += 1
        sampler.observe(idx, losses=np.where(np.isin(idx, hard), 10.0, 0.1))
    assert counts[hard].mean() > 3 * counts[sel.keep].mean()  # the hard rows come back often


def test_variants_offset_the_seed_and_anneal_loss_rank_over_the_run(bench, monkeypatch):
    """``seed_offset``: the same method drawn with another seed (random beside random: the
    A/A control); ``anneal_batches='run'``: loss-rank's pressure decays over the run's steps."""
    data = bench.load_dataset("digits")
    monkeypatch.setitem(bench.VARIANTS, "random-b", ("random", {"seed_offset": 1000}))
    monkeypatch.setitem(bench.VARIANTS, "lr-anneal", ("loss-rank", {"anneal_batches": "run"}))
    other = bench.make_selector("random-b", data.train, 32, seed=3)
    assert other.seed == 1003
    assert (
        other.plan(0).indices().tolist()
        == bench.make_selector("random", data.train, 32, seed=1003).plan(0).indices().tolist()
    )
    annealed = bench.make_selector("lr-anneal", data.train, 32, seed=3, steps=77)
    assert annealed.anneal_batches == 77 and annealed.pressure_at(76) == 1.0
    assert bench.make_selector("loss-rank", data.train, 32, seed=3, steps=77).anneal_batches is None
    assert bench.VARIANTS["lr-anneal"][1]["anneal_batches"] == "run"  # the variant itself is not rewritten
    monkeypatch.setitem(bench.VARIANTS, "ib-last", ("infobatch", {"anneal_last_epoch": True}))
    last = bench.make_selector("ib-last", data.train, 32, seed=3, steps=90)
    default = bench.make_selector("infobatch", data.train, 32, seed=3, steps=90)
    monkeypatch.setitem(bench.VARIANTS, "ib-paper", ("infobatch", {"anneal_rule": "paper"}))
    paper = bench.make_selector("ib-paper", data.train, 32, seed=3, steps=90)
    assert paper.prunes(paper.epochs - 1) and not default.prunes(default.epochs - 1)  # InfoBatch's rule
    assert not last.prunes(last.epochs - 1) and last.prunes(1) and last.anneal_rule == "paper"
    with pytest.raises(SystemExit):
        bench.main(["--first-seed", "-1"])


def test_tables_state_how_many_cells_chance_marks(bench):
    """Under every overview: each method's W and B cells beside what an identical method
    gets by chance (Student's t, seeds - 1 degrees of freedom, beyond 2 s.e.)."""

    def cell(worse, better, seeds=5, diff=0.0):
        return {"worse": worse, "better": better, "final_per_seed": [0.5] * seeds, "diff_mean": diff}

    rows = {"m": {"budgets": {"0.5": cell(True, False, diff=-0.01), "1": cell(False, False, diff=0.002)}}}
    results = {"task": {"clean": {"summary": {"rows": rows}}, "noise": {"summary": {"rows": rows}}}}
    line = bench.chance_line(results, ["m"])
    assert "of 4 per method: m W 2, B 0, -0.40 pt on average, below random in 2" in line
    assert "about 0.2 of them" in line and "5.8 % a cell" in line  # t(4).cdf(-2) = 0.0581
    rows["m"]["budgets"] = {"1": cell(False, True, seeds=10)}
    assert "of 2 per method: m W 0, B 2" in bench.chance_line(results, ["m"])
    assert "3.8 % a cell" in bench.chance_line(results, ["m"])  # t(9).cdf(-2) = 0.0383
    assert bench.chance_line(results, []) == ""


def test_learning_rate_warms_up_and_ends_at_zero_on_every_budget(bench):
    for steps in (1, 7, 150):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.4)
        schedule = bench.lr_schedule(opt, steps)
        seen = []
        for _ in range(steps):
            seen.append(opt.param_groups[0]["lr"])
            opt.step()
            schedule.step()
        assert max(seen) == pytest.approx(0.4) and min(seen) > 0  # every step trains
        assert opt.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)  # decayed over its own budget
        peak = int(np.argmax(seen))
        assert all(a <= b for a, b in zip(seen[:peak], seen[1 : peak + 1]))  # warm-up rises
        assert all(a >= b for a, b in zip(seen[peak:], seen[peak + 1 :]))  # then decays


def test_budget_steps_fill_random_wall_at_each_method_cost(bench):
    costs = {
        "random": {"setup_seconds": 0.0, "step_seconds": 0.010},
        "slow": {"setup_seconds": 1.0, "step_seconds": 0.020},
    }
    assert bench.budget_steps(costs, "random", 600, 0.5) == 300
    # random's full wall 6 s; half of it is 3 s, of which the set-up takes 1 s: 100 steps of 20 ms
    assert bench.budget_steps(costs, "slow", 600, 0.5) == 100
    assert bench.budget_steps(costs, "slow", 600, 0.1) == 1  # a set-up past the budget still trains a step


def _run(final, wall):
    return {"final": final, "wall_seconds": wall, "select_seconds": 0.0, "steps": 10, "epochs": 1}


def test_wall_saved_is_the_smallest_budget_from_which_the_target_is_reached(bench):
    budgets = [0.3, 0.5, 0.7, 1.0]
    noise = [0.0, 0.002, -0.002]  # per seed, so that standard errors are not zero
    random = {
        "0.3": [0.80 + e for e in noise],
        "0.5": [0.85 + e for e in noise],
        "0.7": [0.895 + e for e in noise],
        "1": [0.90 + e for e in noise],
    }
    fast = {
        "0.3": [0.86 + e for e in noise],
        "0.5": [0.905 + e for e in noise],
        "0.7": [0.91 + e for e in noise],
        "1": [0.91 + e for e in noise],
    }
    flaky = {
        "0.3": [0.92 + e for e in noise],
        "0.5": [0.85 + e for e in noise],  # reaches at 0.3 by chance only
        "0.7": [0.90 + e for e in noise],
        "1": [0.90 + e for e in noise],
    }
    runs = {
        m: {k: [_run(v, float(k) * 10) for v in vals] for k, vals in table.items()}
        for m, table in (("random", random), ("fast", fast), ("flaky", flaky))
    }
    summary = bench.summarize(runs, ["random", "fast", "flaky"], budgets)
    assert summary["target"] == pytest.approx(0.90)
    rows = summary["rows"]
    assert rows["random"]["reached_at"] == 1.0 and rows["random"]["wall_saved"] == pytest.approx(0.0)
    assert rows["fast"]["reached_at"] == 0.5 and rows["fast"]["wall_saved"] == pytest.approx(0.5)
    assert rows["fast"]["beyond_random"] == pytest.approx(0.5)
    assert rows["flaky"]["reached_at"] == 0.7  # 0.5 misses, so 0.3's hit does not count
    assert rows["fast"]["better_at"] == [0.3, 0.5, 0.7, 1.0] and not rows["fast"]["worse_at"]
    assert rows["flaky"]["budgets"]["0.3"]["diff_mean"] == pytest.approx(0.12)
    # a method that never reaches the target saves nothing
    runs["never"] = {k: [_run(0.5 + e, float(k) * 10) for e in noise] for k in random}
    assert bench.summarize(runs, ["random", "never"], budgets)["rows"]["never"]["wall_saved"] is None


def test_quick_mode_reports_every_method_regime_and_budget(tmp_path):
    stem = tmp_path / "q"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_quality.py"),
            "--quick",
            "--methods",
            "random,loss-rank",
            "--regimes",
            "clean,noise",
            "--out",
            str(stem),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(Path(str(stem) + ".json").read_text())["results"]["digits-mlp"]
    for regime in ("clean", "noise"):
        summary, runs, steps = result[regime]["summary"], result[regime]["runs"], result[regime]["steps"]
        rows = summary["rows"]
        assert set(rows) == {"random", "loss-rank"} and set(rows["random"]["budgets"]) == {"0.5", "1"}
        # random's budgets are its full run's fractions in steps; every run decayed its rate to zero
        assert steps["random"] == {"0.5": 75, "1": 150}
        assert [r["steps"] for r in runs["random"]["1"]] == [150, 150]
        assert all(r["last_lr"] == 0 for m in runs.values() for b in m.values() for r in b)
        # the target is random's full-budget mean; differences are paired per seed at equal budget
        assert summary["target"] == pytest.approx(np.mean([r["final"] for r in runs["random"]["1"]]))
        cell = rows["loss-rank"]["budgets"]["0.5"]
        paired = np.subtract(
            [r["final"] for r in runs["loss-rank"]["0.5"]], [r["final"] for r in runs["random"]["0.5"]]
        )
        assert cell["diff_mean"] == pytest.approx(paired.mean())
        # wall fractions are measured, re-based on random's full-budget wall
        anchor = np.mean([r["wall_seconds"] for r in runs["random"]["1"]])
        assert cell["wall_fraction"] == pytest.approx(
            np.mean([r["wall_seconds"] for r in runs["loss-rank"]["0.5"]]) / anchor
        )
        for row in rows.values():
            assert all(len(c["final_per_seed"]) == 2 and 0.1 < c["final_mean"] <= 1.0 for c in row["budgets"].values())
    # label noise costs a model accuracy on the clean test labels, whatever the batches
    assert result["noise"]["summary"]["target"] < result["clean"]["summary"]["target"]
    for regime in ("clean", "noise"):
        assert Path(f"{stem}_{regime}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "digits-mlp / noise" in proc.stdout and "wall saved" in proc.stdout
    assert "wall saved" in Path(str(stem) + ".md").read_text()


MPIEXEC = Path(sys.executable).parent / "mpiexec"


@pytest.mark.slow
@pytest.mark.skipif(not MPIEXEC.exists() and shutil.which("mpiexec") is None, reason="no mpiexec")
def test_mpi_mode_runs_two_ranks_end_to_end(tmp_path):
    """``--mpi 2``: one command launches mpiexec; rank 0 reports the slowest rank's walls, and
    every run ran (and was checked) on both ranks."""
    from common import run_command

    drop = ("OMPI_", "PMIX_", "PMI_", "MV2_", "PRTE_")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(drop) and k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")
    }
    stem = tmp_path / "m"
    output = run_command(
        [
            sys.executable,
            ROOT / "benchmarks" / "bench_quality.py",
            "--quick",
            "--mpi",
            "2",
            "--regimes",
            "clean",
            "--methods",
            "random,loss-rank,lr-p0",
            "--variant",
            "lr-p0=loss-rank:prefetch=0",
            "--steps-scale",
            "0.2",
            "--out",
            stem,
        ],
        env,
        timeout=120,
    )
    assert "2 ranks x B=32" in output and "digits-mlp / clean" in output
    payload = json.loads(Path(str(stem) + ".json").read_text())
    assert payload["world_size"] == 2 and payload["args"]["bind_to"] == "core"
    runs = payload["results"]["digits-mlp"]["clean"]["runs"]
    assert set(runs) == {"random", "loss-rank", "lr-p0"}
    assert [r["steps"] for r in runs["random"]["1"]] == [30, 30]  # 150 quick steps x 0.2
    for by_budget in runs.values():
        assert set(by_budget) == {"0.5", "1"}
        for run in (r for rs in by_budget.values() for r in rs):
            assert len(run["rank_wall_seconds"]) == 2 and run["wall_seconds"] == max(run["rank_wall_seconds"])
            assert 0.1 < run["final"] <= 1.0 and run["last_lr"] == 0
    # observe's time is reported per run (compared in the benchmark's own table, not here)
    assert all(r["observe_seconds"] >= 0 for rs in runs.values() for r in rs["1"])
    assert Path(str(stem) + ".md").exists()
