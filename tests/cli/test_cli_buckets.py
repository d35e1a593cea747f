"""``batchsel plan --method buckets``: token-budget batches from a file of per-example costs
(issue #48). In-process (``cli.main``) like the other cheap CLI checks; one subprocess run
checks that a fresh process gives the same plan."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import batchsel
from batchsel import cli
from batchsel.cli import plan as cli_plan
from batchsel.selectors.buckets.bucket import DEFAULT_WIDTH

N = 300
WORKERS = 3


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    """A folder holding lengths.npy (token lengths of N examples), embeddings and bad costs."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(7)
    lengths = rng.integers(5, 400, N)
    np.save("lengths.npy", lengths)
    np.save("emb.npy", rng.standard_normal((N, 8)).astype(np.float32))
    np.save("negative.npy", np.where(np.arange(N) == 11, -3, lengths))
    np.save("nan.npy", np.where(np.arange(N) == 5, np.nan, lengths.astype(np.float64)))
    np.save("empty.npy", np.zeros(0))
    np.save("column.npy", lengths[:, None])
    np.save("flags.npy", lengths > 100)
    np.save("huge.npy", np.full(N, 1e307))  # N x the largest is beyond float64
    np.save("large.npy", np.full(N, 1e305))
    return tmp_path


def run_in_process(argv: list[str], capsys) -> tuple[int, str, str]:
    code = cli.main([*argv, "--quiet"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def costs_of(plan: batchsel.EpochPlan, lengths: np.ndarray, packed: bool) -> list[float]:
    """Every batch's cost, recomputed here: padded ``len * max`` or packed ``sum``."""
    batches = [b for r in range(plan.world_size) for b in plan.batches(r)]
    return [float(lengths[b].sum() if packed else len(b) * lengths[b].max()) for b in batches]


# -- the plan ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "budget, packed",
    [(["--max-cost", "2048"], False), (["--batch-size", "16"], False), (["--batch-size", "16", "--packed"], True)],
    ids=["max-cost", "batch-size", "packed"],
)
def test_bucket_plan_covers_every_example_within_budget_and_matches_the_api(work, capsys, budget, packed):
    lengths = np.load("lengths.npy")
    argv = ["plan", "lengths.npy", "--method", "buckets", *budget, "--workers", str(WORKERS)]
    argv += ["--epochs", "2", "--start-epoch", "1", "--seed", "4", "--out", "plan.npz", "--json"]
    code, out, err = run_in_process(argv, capsys)
    assert code == 0, err
    summary = json.loads(out)
    plans = batchsel.load_plans("plan.npz")
    assert [p.epoch for p in plans] == [1, 2]
    api_budget = batchsel.BucketSelector(lengths, seed=4, packed=packed, batch_size=16).max_cost_
    max_cost = 2048.0 if budget[0] == "--max-cost" else api_budget
    assert summary["max_cost"] == pytest.approx(max_cost) and summary["packed"] is packed
    assert summary["bucket_width"] == DEFAULT_WIDTH
    api = batchsel.BucketSelector(lengths, seed=4, packed=packed, **{budget[0][2:].replace("-", "_"): int(budget[1])})
    for p, listed in zip(plans, summary["epochs"]):
        assert p.method == "buckets" and p.num_examples == N and p.world_size == WORKERS
        # every example exactly once per epoch, nothing padded or dropped
        assert np.array_equal(np.sort(p.indices()), np.arange(N))
        assert len({len(p.batches(r)) for r in range(WORKERS)}) == 1  # as many batches on every worker
        assert p.num_batches == summary["num_batches"]
        costs = costs_of(p, lengths, packed)
        assert max(costs) <= max_cost and max(costs) <= summary["max_batch_cost"] * (1 + 1e-12)
        assert len({len(b) for r in range(WORKERS) for b in p.batches(r)}) > 1  # short batches hold more
        assert listed["fingerprint"] == p.fingerprint() == api.plan(p.epoch, WORKERS).fingerprint()
    padded = sum(sum(costs_of(p, lengths, False)) for p in plans)
    assert summary["padding_share"] == pytest.approx(1 - 2 * lengths.sum() / padded)


def test_text_report_and_inspect_of_a_bucket_plan(work, capsys):
    argv = ["plan", "lengths.npy", "--method", "buckets", "--max-cost", "4096", "--workers", "2"]
    code, out, err = run_in_process([*argv, "--bucket-width", "1.2", "--out", "plan.npz"], capsys)
    assert code == 0, err
    assert "method buckets" in out and "budget 4096 per batch (padded cost" in out and "bucket width 1.2" in out
    code, out, err = run_in_process(["inspect", "plan.npz", "--json"], capsys)
    assert code == 0, err
    (report,) = json.loads(out)["epochs"]
    assert report["method"] == "buckets" and report["coverage"] == 1.0 and report["duplicates"] == 0
    assert {rank["batches"] for rank in report["ranks"]} == {batchsel.load_plans("plan.npz")[0].num_batches}


def test_narrower_buckets_pad_less(work, capsys):
    shares = []
    for width in ("1.1", "4"):
        argv = ["plan", "lengths.npy", "--method", "buckets", "--max-cost", "4096", "--workers", "2"]
        code, out, err = run_in_process([*argv, "--bucket-width", width, "--out", f"w{width}.npz", "--json"], capsys)
        assert code == 0, err
        shares.append(json.loads(out)["padding_share"])
    assert shares[0] < shares[1]


def test_same_command_gives_the_same_plan_in_a_fresh_process(work, capsys):
    argv = ["plan", "lengths.npy", "--method", "buckets", "--batch-size", "20", "--workers", "2", "--epochs", "2"]
    code, out, err = run_in_process([*argv, "--seed", "9", "--out", "a.npz", "--json"], capsys)
    assert code == 0, err
    first = [e["fingerprint"] for e in json.loads(out)["epochs"]]
    again = subprocess.run(
        [sys.executable, "-m", "batchsel", *argv, "--seed", "9", "--out", "b.npz", "--json", "--quiet"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    assert [e["fingerprint"] for e in json.loads(again.stdout)["epochs"]] == first
    assert [p.fingerprint() for p in batchsel.load_plans("b.npz")] == first
    assert first[0] != first[1]  # the epochs differ
    code, out, err = run_in_process([*argv, "--seed", "10", "--out", "c.npz", "--json"], capsys)
    assert code == 0 and [e["fingerprint"] for e in json.loads(out)["epochs"]] != first


# -- refusals ------------------------------------------------------------------------------

BUCKETS = ["plan", "lengths.npy", "--method", "buckets", "--workers", "2", "--out", "out.npz"]
REFUSED = {
    "embeddings for costs": (["plan", "emb.npy", "--method", "buckets", "--max-cost", "900"], "numpy.save("),
    "N x 1 costs": (["plan", "column.npy", "--method", "buckets", "--max-cost", "900"], "1-D array of one cost"),
    "negative cost": (
        ["plan", "negative.npy", "--method", "buckets", "--max-cost", "900"],
        ">= 0, got -3.0 at position 11",
    ),
    "NaN cost": (["plan", "nan.npy", "--method", "buckets", "--max-cost", "900"], "finite, got nan at position 5"),
    "no costs": (["plan", "empty.npy", "--method", "buckets", "--max-cost", "900"], "non-empty"),
    "boolean costs": (["plan", "flags.npy", "--method", "buckets", "--max-cost", "900"], "must be numbers"),
    "costs beyond float64": (
        ["plan", "huge.npy", "--method", "buckets", "--max-cost", "900"],
        "their sum overflows float64",
    ),
    "batch size beyond the examples": (["--batch-size", "1" + "0" * 400], "is more than the"),
    "missing costs file": (["plan", "nowhere.npy", "--method", "buckets", "--max-cost", "900"], "no such file"),
    "max-cost zero": (["--max-cost", "0"], "--max-cost must be a number > 0, got 0.0"),
    "max-cost negative": (["--max-cost", "-5"], "--max-cost must be a number > 0, got -5.0"),
    "max-cost nan": (["--max-cost", "nan"], "--max-cost must be a number > 0, got nan"),
    "max-cost inf": (["--max-cost", "inf"], "--max-cost must be a number > 0, got inf"),
    "no budget": ([], "--method buckets needs --max-cost X"),
    "both budgets": (["--max-cost", "900", "--batch-size", "8"], "not both"),
    "batch size zero": (["--batch-size", "0"], "--batch-size must be >= 1"),
    "bucket width 1": (["--max-cost", "900", "--bucket-width", "1"], "--bucket-width must be a number > 1"),
    "bucket width nan": (["--max-cost", "900", "--bucket-width", "nan"], "--bucket-width must be a number > 1"),
    "drop-last": (["--max-cost", "900", "--drop-last"], "--drop-last is used only by --method random"),
    "labels": (["--max-cost", "900", "--labels", "lengths.npy"], "--labels is used only by --method coreset"),
    "neighbors": (["--max-cost", "900", "--neighbors", "5"], "--neighbors is used only by --method graph or coreset"),
    "pool size": (["--max-cost", "900", "--pool-size", "8"], "--pool-size is used only by --method submodular"),
    # 237 batches of <= 400 tokens: 2 each on 151 workers would need 302 examples
    "too many workers": (["--max-cost", "400", "--workers", "151"], f"--workers 151 is too many for {N} examples"),
    "random with max-cost": (
        ["plan", "emb.npy", "--batch-size", "8", "--max-cost", "900"],
        "--max-cost is used only by --method buckets",
    ),
    "graph with bucket width": (
        ["plan", "emb.npy", "--method", "graph", "--batch-size", "8", "--bucket-width", "1.2"],
        "--bucket-width is used only by --method buckets",
    ),
    "coreset with packed": (
        ["plan", "emb.npy", "--method", "coreset", "--batch-size", "8", "--packed"],
        "--packed is used only by --method buckets",
    ),
    "random without batch size": (["plan", "emb.npy"], "--method random needs --batch-size B"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_bad_costs_and_options_exit_2_with_one_line_and_write_nothing(work, capsys, case):
    extra, message = REFUSED[case]
    # a case that names its own command line gets the common tail; the others add to BUCKETS
    argv = [*extra, "--workers", "2", "--out", "out.npz"] if extra[:1] == ["plan"] else [*BUCKETS, *extra]
    before = sorted(p.name for p in work.iterdir())
    code, out, err = run_in_process(argv, capsys)
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("batchsel: error: "), err
    assert message in lines[0] and "Traceback" not in err and out == ""
    assert sorted(p.name for p in work.iterdir()) == before  # no plan, no temporary file


# -- help ------------------------------------------------------------------------------------


def test_help_shows_the_bucket_options_and_its_examples_run(work, capsys):
    assert cli.main(["plan", "--help"]) == 0
    text = capsys.readouterr().out
    for option in ("--max-cost X", "--bucket-width W", "--packed", "per-example costs"):
        assert option in text
    examples = [line.split()[1:] for line in cli_plan.PLAN_EXAMPLE.splitlines() if "--method buckets" in line]
    assert len(examples) == 2
    for argv in examples:
        code, out, err = run_in_process(argv, capsys)
        assert code == 0, (argv, err)
        assert batchsel.load_plans(argv[argv.index("--out") + 1])[0].method == "buckets"
