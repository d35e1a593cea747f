"""The cost-balanced batches benchmark runs (``--quick``) and measures what it says: every
method's padding, steps and walls, and the buckets' padding far below random's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from paths import REPO as ROOT


def test_quick_run_reports_padding_steps_and_walls(tmp_path):
    stem = tmp_path / "buckets"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_buckets.py"), "--quick", "--tasks", "t1-transformer"]
        + ["--methods", "buckets,buckets-sum,hf-length-grouped,step-balanced", "--rank-steps", "0"]
        + ["--no-wait", "--out", str(stem)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(Path(f"{stem}.json").read_text())["results"]["t1-transformer"]
    runs = result["runs"]
    assert set(runs) >= {"shuffle", "buckets", "buckets-sum", "hf-length-grouped", "step-balanced"}
    padding = {m: runs[m]["eq"][0]["padding_share"] for m in runs}
    assert padding["buckets"] < padding["shuffle"] / 2  # what the selector is for
    # as many steps an epoch as random batches of the same size (batch_size=B)
    assert result["steps_per_epoch"]["buckets"] == result["steps_per_epoch"]["shuffle"]
    # step-balanced: random's optimizer steps (4 micro-batches each), its steps sorted by length
    assert result["steps_per_epoch"]["step-balanced"] == result["steps_per_epoch"]["shuffle"]
    assert padding["step-balanced"] < padding["shuffle"] / 2
    assert [r["steps"] for r in runs["step-balanced"]["eq"]] == [r["steps"] for r in runs["shuffle"]["eq"]]
    for method in ("shuffle", "buckets"):
        for run in runs[method]["eq"]:
            assert run["wall_seconds"] > 0 and 0 <= run["final"] <= 1
    assert "| buckets |" in Path(f"{stem}.md").read_text()
