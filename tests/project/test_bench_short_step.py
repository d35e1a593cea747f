"""benchmarks/bench_short_step.py runs (``--quick``) and reports, for every method, the wall
per step, its ratio to random's and the time inside ``next`` and ``observe``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from paths import REPO as ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_short_step  # noqa: E402


def test_quick_run_reports_every_method_against_random(tmp_path):
    stem = tmp_path / "short"
    res = bench_short_step.main(["--quick", "--threads", "1", "--models", "digits-mlp", "--out", str(stem)])
    rows = res["rows"]
    assert [r["method"] for r in rows] == list(bench_short_step.METHODS)
    by_method = {r["method"]: r for r in rows}
    for anchor in ("random", "random-noisy"):
        assert by_method[anchor]["ratio"] == 1.0 and by_method[anchor]["extra_ms"] == 0.0
    for r in rows:
        assert r["steps"] == 2 * 34  # two epochs of ceil(1077 / 32) batches
        assert r["ms_per_step"] > r["next_ms"] + r["observe_ms"] > 0
    # the timed epochs of AutoSelector are past its warm-up: loss-rank batches
    assert by_method["auto"]["mode"] == "select"
    # and under 40 % wrong labels AutoSelector is timed after its fallback to random batches
    assert by_method["auto-noisy"]["mode"] == "noisy"
    assert res["warmup_epochs"]["1/digits-mlp/auto-noisy"] > 1
    assert json.loads(Path(f"{stem}.json").read_text())["rows"] == json.loads(json.dumps(rows))
    table = Path(f"{stem}.md").read_text()
    assert "| 1 | digits-mlp | loss-rank |" in table and "Load average after" in table
