"""benchmarks/bench_calibrate.py runs (``--quick``): CostModel.calibrate on a real model, and its
predictions for shapes it did not time, each beside the measured time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from paths import REPO as ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_calibrate  # noqa: E402


def test_quick_run_predicts_every_held_out_shape(tmp_path):
    stem = tmp_path / "calibrate"
    res = bench_calibrate.main(["--quick", "--out", str(stem)])
    (only,) = res["results"]
    assert only["model"] == "transformer" and only["threads"] == 1
    shapes = [(h["n"], h["length"]) for h in only["held_out"]]
    assert shapes == [tuple(s) for s in bench_calibrate.HELD_OUT]
    for h in only["held_out"]:
        assert h["measured_ms"] > 0 and h["predicted_ms"] > 0
        assert h["error"] == pytest.approx(abs(h["predicted_ms"] - h["measured_ms"]) / h["measured_ms"])
    # a transformer's time grows with the tokens: the fit has a token term
    assert only["cost_model"]["per_token"] + only["cost_model"]["per_token_squared"] > 0
    assert json.loads(Path(f"{stem}.json").read_text())["results"][0]["held_out"] == only["held_out"]
    assert "| transformer | 1 |" in Path(f"{stem}.md").read_text()
