"""The examples a user copies from run, on a reduced size (semi_supervised.py and
cli_example.sh are run by test_losses.py and test_cli.py)."""

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


@pytest.mark.parametrize("method", ["random", "submodular", "loss", "coreset"])
def test_train_ddp_runs_in_one_process(tmp_path, method):
    metrics = tmp_path / "m.json"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "train_ddp.py"),
            "--method",
            method,
            "--quick",
            "--metrics-json",
            str(metrics),
        ],
        check=True,
        timeout=240,
        env=clean_env(),
        cwd=tmp_path,
    )
    result = json.loads(metrics.read_text())
    assert result["world_size"] == 1 and result["steps"] > 0
    assert result["history"][-1][0] == result["steps"]
    # 2 epochs on 450 training digits: far above chance (0.1) whatever the batches
    assert result["final_accuracy"] > 0.6, result


@pytest.mark.slow
@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec")
def test_demo_quick_trains_every_run_on_two_ranks_and_plots(tmp_path):
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
    table = proc.stdout.split("selecting  compile s\n", 1)[1]  # compilation reported apart from selection
    for label in ("random", "submodular (SMDL)", "loss-rank", "RHO-LOSS filter", "graph-reg. SSL"):
        assert label in table
    assert "2 rank(s)" in proc.stdout
    # the irreducible-loss summary once, not once per rank
    assert (proc.stdout + proc.stderr).count("irreducible-loss model knn:") == 1
    # the semi-supervised run prints the test accuracy its table row shows
    printed = re.search(r"blocks: test accuracy (\d\.\d{4}) after", proc.stdout).group(1)
    row = next(line for line in table.splitlines() if line.startswith("graph-reg. SSL"))
    assert row.split()[5] == printed, (row, printed)
    png = out / "accuracy.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the recommended method against random at equal wall budgets
    assert "digits-wide / clean" in proc.stdout and "wall saved" in proc.stdout
    assert (out / "budget.json").exists() and (out / "budget_clean.png").exists()
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_docs_demo_sample_is_the_demos_table():
    # docs/demo.md's sample was written by `demo.py --write-docs`: same runs, same columns
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import demo
    finally:
        sys.path.pop(0)
    sample = demo.docs_sample()
    assert list(sample) == [label for label, _, _ in demo.RUNS]
    text = (ROOT / "docs" / "demo.md").read_text()
    header = demo.format_table([]).splitlines()[0]
    assert header in text and all(0 < acc <= 1 and steps > 0 for acc, steps in sample.values())
