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

ROOT = Path(__file__).resolve().parents[1]
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
    out = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=clean_env(),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    demo = _demo_module()
    # the runs' table: the quick runs at the full mode's sizes, 2 ranks, the load in its header
    head, table = proc.stdout.split("\n" + demo.COLUMNS + "\n", 1)
    assert re.search(r"2 runs, 2 rank\(s\); (WARNING: )?load average \d+\.\d\d on \d+ cores", head.splitlines()[-1])
    rows = {line[: demo.LABEL_WIDTH].strip(): line.split() for line in table.splitlines()[1:3]}
    assert list(rows) == ["random", "loss-rank"]
    for cells in rows.values():
        assert cells[-4] == "220" and cells[-2].endswith("%")  # steps; selecting, a share of the wall
    assert "2 rank(s)" in proc.stdout
    assert "the sample in docs/demo.md" in proc.stdout  # quick rows are compared with the full sample
    png = out / "accuracy.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the recommended method against random at equal wall budgets, every figure with its unit
    budget = proc.stdout.split("digits-wide / clean: 2 seeds, 1 torch thread(s); ", 1)[1]
    assert "digits-wide / redundant" not in budget
    lines = budget.splitlines()
    assert lines[2].split()[-5:] == ["wall,", "%", "of", "random", "full"]
    cells = [line.split() for line in lines[4:10]]
    assert [(c[0], c[1]) for c in cells] == [(b, m) for b in ("0.5", "0.7", "1") for m in ("random", "loss-rank")]
    for c in cells:
        c = c[:-1] if c[-1] == "*" else c  # * flags a wall off its budget
        assert c[4] == "%" and c[-1] == "%" and c[-2].isdigit(), c  # accuracy; wall, % of random's
        if c[1] == "loss-rank":
            assert c[6] == "±" and c[8] == "pt", c  # the difference to random in accuracy points
    assert " pt" not in budget.split("(within 2 s.e.):", 1)[1].split("\n\n", 1)[0]  # savings: % of a wall
    assert "% of random's full-budget wall" in budget
    assert (out / "budget.json").exists() and (out / "budget_clean.png").exists()
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


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


def test_demo_flags_a_busy_machine(monkeypatch, capsys):
    demo = _demo_module()
    monkeypatch.setattr(demo.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(demo.os, "getloadavg", lambda: (2.0, 0.0, 0.0))
    assert demo.load_note() == "load average 2.00 on 2 cores" and capsys.readouterr().err == ""
    monkeypatch.setattr(demo.os, "getloadavg", lambda: (6.86, 0.0, 0.0))
    note = demo.load_note()
    assert note.startswith("WARNING: load average 6.86 on 2 cores") and "timings unreliable" in note
    assert note in capsys.readouterr().err
    assert demo.format_table([], note).splitlines()[0] == note


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
    for name in demo.MARKERS:
        assert demo._docs_span(name)[1] < demo._docs_span(name)[2], name
    budget = text[demo._docs_span("budget")[1] : demo._docs_span("budget")[2]]
    assert "digits-wide / clean: 3 seeds" in budget and "digits-wide / redundant: 3 seeds" in budget
    savings = [line for line in budget.splitlines() if re.match("  [a-z]", line)]
    assert savings and not [line for line in savings if " pt" in line]  # walls in %, never in points
