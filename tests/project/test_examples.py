"""The examples a user copies from run, on a reduced size (semi_supervised.py and
cli_example.sh are run in one process by test_losses.py and test_cli.py; the demo test
here runs semi_supervised.py and train_filter.py under mpiexec)."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from paths import REPO as ROOT

MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")


def clean_env() -> dict:
    """No launcher variables inherited from a surrounding job."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OMPI_", "PMIX_", "PMI_", "PRTE_"))
        and k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")
    }


DDP_METHODS = ["random", "submodular", "loss", "coreset"]


@pytest.fixture(scope="module")
def train_ddp_metrics(tmp_path_factory) -> dict:
    """examples/train_ddp.py --quick for each method, one process for all (its ``main``
    called once per method, as the script's command line would: each run sets up and
    tears down its own process group)."""
    folder = tmp_path_factory.mktemp("train_ddp")
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'examples')!r})\n"
        "import train_ddp\n"
        "for method in sys.argv[1:]:\n"
        "    train_ddp.main(['--method', method, '--quick', '--metrics-json', method + '.json'])\n"
    )
    subprocess.run([sys.executable, "-c", code, *DDP_METHODS], check=True, timeout=600, env=clean_env(), cwd=folder)
    return {method: json.loads((folder / f"{method}.json").read_text()) for method in DDP_METHODS}


@pytest.mark.parametrize("method", DDP_METHODS)
def test_train_ddp_runs_in_one_process(train_ddp_metrics, method):
    result = train_ddp_metrics[method]
    assert result["method"] == method
    assert result["world_size"] == 1 and result["steps"] > 0
    assert result["history"][-1][0] == result["steps"]
    # 2 epochs on 450 training digits: far above chance (0.1) whatever the batches
    assert result["final_accuracy"] > 0.6, result


def _demo_module():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import demo
    finally:
        sys.path.pop(0)
    return demo


@pytest.mark.slow
@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec")
def test_demo_quick_runs_random_and_loss_rank_on_two_ranks_and_compares_budgets(tmp_path):
    (tmp_path / "demo_out").mkdir()  # a full run's figures: the quick run leaves them alone
    (tmp_path / "demo_out" / "accuracy.png").write_bytes(b"full run")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        env={k: v for k, v in clean_env().items() if k != "NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING"},
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "\x1b" not in proc.stdout + proc.stderr  # no colour reset from the ranks' numba (mpiexec's terminals)
    out = tmp_path / "demo_quick_out"
    assert (tmp_path / "demo_out" / "accuracy.png").read_bytes() == b"full run"
    demo = _demo_module()
    # the runs' table: the quick runs at the full mode's sizes, 2 ranks, the load in its header
    head, table = proc.stdout.split("\n" + demo.COLUMNS + "\n", 1)
    assert re.fullmatch(r"2 runs, 2 rank\(s\); load average \d+\.\d\d on \d+ cores", head.splitlines()[-1])
    rows = {line[: demo.LABEL_WIDTH].strip(): line.split() for line in table.splitlines()[1:3]}
    assert list(rows) == ["random", "loss-rank"]
    for cells in rows.values():
        assert cells[-4] == "220" and cells[-2].endswith("%")  # steps; selecting, a share of the wall
    assert "2 rank(s)" in proc.stdout
    assert "the sample in docs/demo.md" in proc.stdout  # quick rows are compared with the full sample
    png = out / "accuracy.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # AutoSelector and loss-rank against random at equal wall budgets, every figure with its unit
    budget = proc.stdout.split("digits-wide / clean: 2 seeds, 1 torch thread(s); ", 1)[1]
    assert "digits-wide / redundant" not in budget
    lines = budget.splitlines()
    assert lines[2].split()[-5:] == ["wall,", "%", "of", "random", "full"]
    cells = [line.split() for line in lines[4:13]]
    methods = ("random", "AutoSelector", "loss-rank")
    assert [(c[0], c[1]) for c in cells] == [(b, m) for b in ("0.5", "0.7", "1") for m in methods]
    for c in cells:
        c = c[:-1] if c[-1] == "*" else c  # * flags a wall off its budget
        assert c[4] == "%" and c[-1] == "%" and c[-2].isdigit(), c  # accuracy; wall, % of random's
        if c[1] != "random":
            assert c[6] == "±" and c[8] == "pt", c  # the difference to random in accuracy points
    assert " pt" not in budget.split("(within 2 s.e.):", 1)[1].split("\n\n", 1)[0]  # savings: % of a wall
    assert "% of random's full-budget wall" in budget
    assert (out / "budget.json").exists() and (out / "budget_clean.png").read_bytes()[:4] == b"\x89PNG"
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
    # variable lengths: as many steps as random batches, a fraction of the padding
    buckets = proc.stdout.split("\nExamples of different lengths", 1)[1]
    got = {
        line.split("  ")[0].strip(): line.split()
        for line in buckets.splitlines()
        if line.startswith(("random (", "BucketSelector"))
    }
    (random_row,) = [v for k, v in got.items() if k.startswith("random")]
    assert got["BucketSelector"][1] == random_row[-5] == str(demo.SEQUENCES // demo.SEQ_BATCH), got  # steps
    assert int(got["BucketSelector"][2]) < int(random_row[-4]) / 2, got  # padding, %
    # the end: what to try next, and the machine's load at most once
    assert proc.stdout.rstrip().endswith(demo.NEXT)
    assert (proc.stdout + proc.stderr).count("timings (wall s") <= 1
    assert "WARNING" not in proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec")
def test_demo_filter_and_ssl_runs_on_two_ranks(capfd, monkeypatch, tmp_path):
    """The full demo's other runs (not in --quick), at the scripts' short sizes."""
    demo = _demo_module()
    others = [run for run in demo.RUNS if run[1] != "train_ddp.py"]
    for name in set(os.environ) - set(clean_env()):
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    results = demo.run_all(others, ranks=2, short=True)
    printed = capfd.readouterr()
    assert [r["label"] for r in results] == [label for label, _, _ in others]
    assert all(r["world_size"] == 2 for r in results)
    ssl = results[-1]
    assert ssl["label"].startswith("graph-reg. SSL") and ssl["test_acc"] > 0.5, ssl  # learns: chance is 0.1
    # the irreducible-loss summary once, not once per rank
    assert (printed.out + printed.err).count("irreducible-loss model knn:") == 1
    # the semi-supervised run prints the test accuracy its table row shows
    shown = re.search(r"blocks: test accuracy (\d\.\d{4}) after", printed.out).group(1)
    row = demo.format_table(results).splitlines()[-1]
    assert row.startswith("graph-reg. SSL") and row.split()[5] == shown, (row, shown)


def test_demo_flags_a_busy_machine_once_at_the_end(monkeypatch, capsys):
    # before: every table header and the start and end lines warned (6-7 times a run)
    demo = _demo_module()
    monkeypatch.setattr(demo, "_busiest", [])
    monkeypatch.setattr(demo.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(demo.os, "getloadavg", lambda: (2.0, 0.0, 0.0))
    assert demo.load_note() == "load average 2.00 on 2 cores" and demo.busy_warning() is None
    for load in (6.86, 3.1):
        monkeypatch.setattr(demo.os, "getloadavg", lambda load=load: (load, 0.0, 0.0))
        assert demo.load_note() == f"load average {load:.2f} on 2 cores"
    assert capsys.readouterr().err == ""
    warning = demo.busy_warning()
    assert warning.startswith("WARNING: the load average reached 6.86 on 2 cores") and "unreliable" in warning
    assert capsys.readouterr().err == warning + "\n"
    assert demo.format_table([], "load average 6.86 on 2 cores").splitlines()[0] == "load average 6.86 on 2 cores"


def test_demo_budget_plot_has_the_budget_on_x(monkeypatch, tmp_path):
    # before: bench_quality's PNG drew each method through its measured walls, which for runs
    # this short need not grow with the budget: random's line doubled back
    demo = _demo_module()
    import matplotlib.axes

    drawn = {}
    monkeypatch.setattr(
        matplotlib.axes.Axes, "errorbar", lambda self, x, y, **kw: drawn.__setitem__(kw["label"], (list(x), list(y)))
    )

    def cell(final):
        return {"final_mean": final, "final_per_seed": [final - 0.01, final + 0.01]}

    rows = {
        "random": {"budgets": {"1": cell(0.97), "0.5": cell(0.95), "0.7": cell(0.96)}},
        "auto": {"budgets": {"0.7": cell(0.97), "1": cell(0.975), "0.5": cell(0.96)}},
    }
    payload = {
        "args": {"seeds": 2},
        "results": {"digits-wide": {"clean": {"summary": {"target": 0.97, "rows": rows}}}},
    }
    (path,) = demo.plot_budgets(payload, str(tmp_path / "budget"))
    assert path.endswith("budget_clean.png") and (tmp_path / "budget_clean.png").exists()
    assert drawn["random"] == ([0.5, 0.7, 1.0], [95.0, 96.0, 97.0])
    assert drawn["AutoSelector"][0] == [0.5, 0.7, 1.0]


def test_demo_buckets_section_pads_less_in_as_many_steps(monkeypatch):
    demo = _demo_module()
    monkeypatch.setattr(demo, "SEQUENCES", 512)  # the demo's 1024, smaller: a few steps
    text = demo.bucket_comparison()
    rows = {
        line[:22].strip(): line[22:].split()
        for line in text.splitlines()
        if line.startswith(("random (", "BucketSelector"))
    }
    assert set(rows) == {"random (shuffle=True)", "BucketSelector"}
    assert rows["BucketSelector"][0] == rows["random (shuffle=True)"][0] == "16"  # steps: 512 / 32
    assert float(rows["BucketSelector"][1]) < float(rows["random (shuffle=True)"][1]) / 2  # padding, %
    assert rows["random (shuffle=True)"][-1] == "1.00x"


def test_demo_ends_with_the_pages_to_read_next():
    demo = _demo_module()
    readme = (ROOT / "README.md").read_text()
    assert "AutoSelector" in demo.NEXT and "## Replace `shuffle=True`" in readme
    for page in re.findall(r"docs/[\w/.-]+\.md", demo.NEXT):
        assert (ROOT / page).exists(), page
    assert "docs/guide/variable-length.md" in demo.NEXT and "docs/guide/streaming.md" in demo.NEXT


def test_demo_budget_table_names_units_and_flags_walls_off_their_budget():
    demo = _demo_module()

    def cell(final, diff, wall):
        return {"final_mean": final, "diff_mean": diff, "diff_se": 0.002, "wall_fraction": wall, "steps": 75}

    payload = {
        "args": {"seeds": 2},
        "results": {
            "digits-wide": {
                "clean": {
                    "threads": 1,
                    "full_steps": 150,
                    "summary": {
                        "target": 0.97,
                        "random_wall_seconds": 0.3,
                        "rows": {
                            "random": {
                                "budgets": {"0.5": cell(0.95, 0, 0.49), "1": cell(0.97, 0, 1.0)},
                                "reached_at": 1.0,
                                "wall_saved": 0.0,
                                "beyond_random": 0.0,
                            },
                            # reached at 0.5 in more wall than random's full run: a calibration under load
                            "loss-rank": {
                                "budgets": {"0.5": cell(0.97, 0.02, 1.35), "1": cell(0.975, 0.005, 1.02)},
                                "reached_at": 0.5,
                                "wall_saved": -0.35,
                                "beyond_random": -0.35,
                            },
                        },
                    },
                }
            }
        },
    }
    text = demo.budget_tables(payload, "load average 6.86 on 2 cores")
    assert "   0.5  loss-rank       75" in text  # the method column fits "AutoSelector"
    assert "+2.0 ± 0.2 pt" in text and "135 % *" in text and "49 %" in text and "49 % *" not in text
    assert "-35 % saved (unreliable" in text
    assert "saves 35 % of random's full-budget wall less than random's own shorter runs" in text
    assert "\n* the wall lands more than 10 %" in text


def test_docs_demo_sample_is_the_demos_output():
    # docs/demo.md's samples were written by `demo.py --write-docs`: same runs, same columns
    demo = _demo_module()
    sample = demo.docs_sample()
    assert list(sample) == [label for label, _, _ in demo.RUNS]
    text = (ROOT / "docs" / "demo.md").read_text()
    assert demo.COLUMNS in text and all(0 < acc <= 1 and steps > 0 for acc, steps in sample.values())
    for name in set(demo.MARKERS) - demo.OPTIONAL_MARKERS:
        assert demo._docs_span(name)[1] < demo._docs_span(name)[2], name
    budget = text[demo._docs_span("budget")[1] : demo._docs_span("budget")[2]]
    assert "digits-wide / clean: 3 seeds" in budget and "digits-wide / redundant: 3 seeds" in budget
    rows = [line.split()[1] for line in budget.splitlines() if re.match(r" +(0\.5|0\.7|1) ", line)]
    assert rows == 6 * ["random", "AutoSelector", "loss-rank"]  # 3 budgets x 2 regimes
    assert "WARNING" not in text.split("<!-- demo-sample -->", 1)[1]  # the load's warning: once, on stderr
    savings = [line for line in budget.splitlines() if re.match("  [a-z]", line)]
    assert savings and not [line for line in savings if " pt" in line]  # walls in %, never in points
