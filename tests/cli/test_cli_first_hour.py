"""The ``batchsel`` command line in a user's first hour ("The first hour, round 3", item 8):
a 1-D lengths file without ``--method buckets``, ``--workers`` left out, ``inspect`` of a
buckets plan (padding and the ranks' step-cost balance), and a ``batchsel`` folder in the
working directory. In-process (``cli.main``) but for the folder, which needs a fresh
interpreter started there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import batchsel
from batchsel import cli
from batchsel.cli import errors as cli_errors
from batchsel.cli import inspect as cli_inspect
from batchsel.cli import ranks as cli_ranks

N = 300


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    """A folder holding lengths.npy (token lengths of N examples) and emb.npy (N x 8)."""
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(3)
    np.save("lengths.npy", rng.integers(5, 400, N))
    np.save("emb.npy", rng.standard_normal((N, 8)).astype(np.float32))
    return tmp_path


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = cli.main([*argv, "--quiet"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_line_error(code: int, out: str, err: str) -> str:
    assert code == 2 and out == "", err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("batchsel: error: "), err
    return lines[0]


# -- a. 1-D lengths without --method buckets ------------------------------------------------


@pytest.mark.parametrize("method", ["random", "loss"])  # the header only / the rows read
def test_one_d_lengths_without_method_buckets_suggests_it(work, capsys, method):
    # was: "embeddings 'lengths.npy' must be 2-D (N x d), got shape (300,)", no way forward
    argv = ["plan", "lengths.npy", "--method", method, "--batch-size", "32", "--out", "plan.npz"]
    line = one_line_error(*run(argv, capsys))
    assert "must be 2-D" in line and "add --method buckets" in line
    assert not (work / "plan.npz").exists()
    # the suggestion is right: the same command with it plans
    code, _, err = run(["plan", "lengths.npy", "--method", "buckets", "--batch-size", "32", "--out", "b.npz"], capsys)
    assert code == 0, err


def test_other_bad_embeddings_get_no_buckets_suggestion(work, capsys):
    np.save("cube.npy", np.zeros((4, 3, 2), dtype=np.float32))
    line = one_line_error(*run(["plan", "cube.npy", "--batch-size", "2", "--out", "plan.npz"], capsys))
    assert "must be 2-D" in line and "--method buckets" not in line


# -- b. --workers defaults to 1 -------------------------------------------------------------


def test_workers_defaults_to_one(work, capsys):
    # was: "the following arguments are required: --workers", for one process too
    code, out, err = run(["plan", "emb.npy", "--batch-size", "32", "--out", "plan.npz", "--json"], capsys)
    assert code == 0 and err == "", err
    assert json.loads(out)["world_size"] == 1
    (plan,) = batchsel.load_plans("plan.npz")
    assert plan.fingerprint() == batchsel.RandomSelector(N, 32).plan(0, world_size=1).fingerprint()
    assert cli.main(["plan", "--help"]) == 0
    assert "(default 1;" in " ".join(capsys.readouterr().out.split())


class FakeRanks(SimpleNamespace):
    """The communicator :func:`batchsel.cli.ranks.mpi_ranks` returns under mpiexec -n 2."""


@pytest.mark.parametrize("given", [False, True])
def test_under_mpiexec_workers_stay_the_plans_not_the_ranks(work, capsys, monkeypatch, given):
    monkeypatch.setattr(cli_ranks, "mpi_ranks", lambda args, names: FakeRanks(rank=0, size=2))
    workers = ["--workers", "3"] if given else []
    code, out, err = run(["plan", "emb.npy", "--batch-size", "32", *workers, "--out", "plan.npz"], capsys)
    assert code == 0, err
    assert batchsel.load_plans("plan.npz")[0].world_size == (3 if given else 1)  # never the 2 ranks
    if given:
        assert err == ""
    else:  # the ranks may be mistaken for the workers: rank 0 says so, in one line
        assert err.count("\n") == 1 and "--workers not given: the plan is for 1 worker" in err
        assert "2 mpiexec ranks" in err and "give --workers W" in err
    # the other ranks leave the work to rank 0, without a word
    monkeypatch.setattr(cli_ranks, "mpi_ranks", lambda args, names: FakeRanks(rank=1, size=2))
    code, out, err = run(["plan", "emb.npy", "--batch-size", "32", *workers, "--out", "other.npz"], capsys)
    assert (code, out, err) == (0, "", "") and not (work / "other.npz").exists()


# -- c. inspect --costs: padding and step-cost balance ----------------------------------------


def brute_force_balance(plan: batchsel.EpochPlan, lengths: np.ndarray, packed: bool) -> tuple[float, float, float]:
    """(padding share, mean over steps of max / mean rank cost, its largest), batch by batch."""

    def cost(b: np.ndarray) -> float:
        return float(lengths[b].sum() if packed else len(b) * lengths[b].max())

    batches = [b for r in range(plan.world_size) for b in plan.batches(r)]
    padded = sum(len(b) * lengths[b].max() for b in batches)
    ratios = []
    for i in range(plan.num_batches):
        step = [cost(plan.batches(r)[i]) for r in range(plan.world_size)]
        ratios.append(max(step) / np.mean(step))
    return 1 - lengths.sum() / padded, float(np.mean(ratios)), max(ratios)


@pytest.mark.parametrize("packed", [False, True])
def test_inspect_costs_reports_padding_and_step_balance(work, capsys, packed):
    lengths = np.load("lengths.npy").astype(np.float64)
    budget = ["--batch-size", "16", *(["--packed"] if packed else [])]
    assert (
        run(["plan", "lengths.npy", "--method", "buckets", *budget, "--workers", "3", "--out", "b.npz"], capsys)[0] == 0
    )
    assert run(["plan", "emb.npy", "--batch-size", "16", "--workers", "3", "--out", "r.npz"], capsys)[0] == 0
    flags = ["--costs", "lengths.npy", *(["--packed"] if packed else [])]
    balance = {}
    for name in ("b.npz", "r.npz"):
        code, out, err = run(["inspect", name, *flags, "--json"], capsys)
        assert code == 0, err
        report = json.loads(out)
        assert report["costs"] == "lengths.npy"
        (epoch,) = report["epochs"]
        (plan,) = batchsel.load_plans(name)
        share, mean, worst = brute_force_balance(plan, lengths, packed)
        c = epoch["costs"]
        assert c["packed"] is packed
        assert c["padding_share"] == pytest.approx(share)
        assert c["step_balance"] == pytest.approx(mean) and c["step_balance_worst"] == pytest.approx(worst)
        balance[name] = c
        code, out, err = run(["inspect", name, *flags], capsys)  # the text says the same
        assert code == 0, err
        assert f"padding {share:.1%} of the padded cost" in out and f"step-cost balance {mean:.3f}" in out
        assert ("packed: the sum" if packed else "padded: len(batch) x its longest") in out
    # what the buckets are for: far less padding than random batches (whose fixed sizes
    # of random lengths keep each step's padded costs alike, at the cost of padding)
    assert balance["b.npz"]["padding_share"] < 0.2 < 0.4 < balance["r.npz"]["padding_share"]


def test_inspect_of_a_buckets_plan_without_costs_says_how_to_get_them(work, capsys):
    assert run(["plan", "lengths.npy", "--method", "buckets", "--batch-size", "16", "--out", "b.npz"], capsys)[0] == 0
    code, out, err = run(["inspect", "b.npz"], capsys)
    assert code == 0 and "give --costs COSTS" in out
    code, out, err = run(["inspect", "b.npz", "--json"], capsys)
    assert code == 0 and "costs" not in json.loads(out)["epochs"][0]  # JSON stays the report
    assert run(["plan", "emb.npy", "--batch-size", "16", "--out", "r.npz"], capsys)[0] == 0
    assert "--costs" not in run(["inspect", "r.npz"], capsys)[1]  # only where the plan follows costs


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--packed"], "--packed is used only with --costs COSTS"),
        (["--costs", "short.npy"], "has 10 values but there are 300 examples"),
        (["--costs", "emb.npy"], "--costs takes a 1-D array of one cost per example"),
        (["--costs", "negative.npy"], ">= 0"),
        (["--costs", "nowhere.npy"], "no such file"),
    ],
)
def test_inspect_bad_costs_exit_2_with_one_line(work, capsys, flags, message):
    np.save("short.npy", np.arange(10))
    np.save("negative.npy", -np.ones(N))
    assert run(["plan", "emb.npy", "--batch-size", "16", "--out", "r.npz"], capsys)[0] == 0
    assert message in one_line_error(*run(["inspect", "r.npz", *flags], capsys))


def test_cost_balance_of_empty_and_huge_batches():
    plan = batchsel.EpochPlan([[np.array([0, 1]), np.array([], dtype=np.int64)], [np.array([2]), np.array([3])]])
    c = cli_inspect.cost_balance(plan, np.array([1.0, 3, 2, 0]), packed=False)
    # step 0: 6 and 2 (max / mean 1.5); step 1: 0 and 0, nothing to wait for (1)
    assert c == {"packed": False, "padding_share": 0.25, "step_balance": 1.25, "step_balance_worst": 1.5}
    huge = cli_inspect.cost_balance(plan, np.full(4, 1e308), packed=False)
    assert huge["padding_share"] is None and huge["step_balance"] is None  # beyond float64: unknown, not inf
    json.dumps(huge, allow_nan=False)


# -- d. a folder named batchsel in the working directory --------------------------------------


def fresh(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_a_batchsel_folder_in_the_working_directory_is_named(tmp_path):
    (tmp_path / "batchsel").mkdir()  # an empty folder: a namespace package to Python started here
    probe = fresh([sys.executable, "-c", "import batchsel; print(getattr(batchsel, '__file__', None))"], tmp_path)
    shadows = probe.stdout.strip() == "None"  # an editable install (this venv's); a regular one wins
    script = Path(sys.executable).parent / "batchsel"
    commands = [[sys.executable, "-m", "batchsel"], *([[str(script)]] if script.exists() else [])]
    for command in commands:
        out = fresh([*command, "--version"], tmp_path)
        assert out.returncode == 0 and out.stdout.strip() == f"batchsel {batchsel.__version__}", out.stderr
        if shadows:
            lines = out.stderr.splitlines()
            assert len(lines) == 1 and "WARNING" in lines[0], out.stderr
            assert repr(str(tmp_path / "batchsel")) in lines[0] and "rename it, or run from another folder" in lines[0]
        else:
            assert out.stderr == ""
    # renamed, nothing is said
    (tmp_path / "batchsel").rename(tmp_path / "runs")
    out = fresh([sys.executable, "-m", "batchsel", "--version"], tmp_path)
    assert out.returncode == 0 and out.stderr == ""


def test_only_a_folder_without_init_is_taken_for_a_shadow(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli_errors.shadowing_folder() is None  # none there
    (tmp_path / "batchsel").mkdir()
    (tmp_path / "batchsel" / "__init__.py").write_text("")  # a source checkout: a working package
    assert cli_errors.shadowing_folder() is None
    (tmp_path / "batchsel" / "__init__.py").unlink()
    shadows = cli_errors.shadowing_folder()
    assert shadows in (None, str(tmp_path / "batchsel"))  # None only under a regular install
    monkeypatch.chdir(Path(batchsel.__file__).parents[1])  # the repository root: the package itself
    assert cli_errors.shadowing_folder() is None
