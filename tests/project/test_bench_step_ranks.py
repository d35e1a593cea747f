"""The two-rank step-balanced training benchmark runs (``--quick``: two gloo processes on
the tiny tasks) and measures what it says: per seed random's full run, step-balanced at the
same steps with less padding, random at step-balanced's wall, and the A/A control."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from paths import REPO as ROOT


def test_quick_run_trains_two_ranks_and_reports_the_wall_saved(tmp_path):
    stem = tmp_path / "step_ranks"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_step_ranks.py"), "--quick", "--out", str(stem)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    payload = json.loads(Path(f"{stem}.json").read_text())
    assert set(payload["summary"]) == {"t1-transformer", "t2-gru"}
    for name, summary in payload["summary"].items():
        rows = summary["rows"]
        assert set(rows) == {"shuffle", "shuffle-aa", "step-balanced", "shuffle@matched"}
        assert rows["step-balanced"]["steps"] == rows["shuffle"]["steps"]
        assert rows["step-balanced"]["padding_share"] < rows["shuffle"]["padding_share"]
        assert rows["shuffle"]["wall_fraction"] == 1.0 and rows["shuffle"]["diff"] == 0.0
        for run in payload["runs"][name]["runs"]["step-balanced"]:
            assert 0.0 <= run["final"] <= 1.0 and run["wall_seconds"] > 0
    assert "| step-balanced |" in Path(f"{stem}.md").read_text()
