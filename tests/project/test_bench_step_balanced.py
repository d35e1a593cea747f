"""The plan-level step-balanced benchmark runs (``--quick``) and measures what it says: every
method's efficiency, steps and step randomness under each cost model, step-balanced's steps
those of random batches, and the every-rank passes over the peers' samplers checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from paths import REPO as ROOT


def test_quick_run_reports_efficiency_steps_and_randomness(tmp_path):
    stem = tmp_path / "step_balanced"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_step_balanced.py"), "--quick", "--out", str(stem)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    payload = json.loads(Path(f"{stem}.json").read_text())
    assert payload["captures_checked"] and all(payload["captures_checked"].values())
    for by_mix in payload["results"].values():
        for by_ws in by_mix.values():
            assert set(by_ws) == {"2", "8"}
            for runs in by_ws.values():
                base = runs["random"]
                assert {"buckets", "hf-length-grouped", "hf-rebalance x1", "step-balanced x4"} <= set(runs)
                for a, gain in ((1, 1.5), (2, 2.5), (4, 3.0)):
                    sb = runs[f"step-balanced x{a}"]
                    # the same global batch as random's at every step: as random, as many steps
                    assert sb["step_ks"] == base["step_ks"] and sb["steps_per_epoch"] == base["steps_per_epoch"]
                    assert sb["once"] and sb["efficiency"] > gain * base["efficiency"]
                    assert sb["efficiency"] <= sb["efficiency_bound"] + 1e-9
                assert base["once"] and 0 < base["efficiency"] < 1
    assert "| step-balanced x4 |" in Path(f"{stem}.md").read_text()
