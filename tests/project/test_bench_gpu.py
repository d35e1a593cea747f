"""benchmarks/bench_gpu.py runs on the CPU (no GPU here): every method through the sampler
at its defaults, one row per (model, method), the ratio to random's step."""

from __future__ import annotations

import sys

from paths import REPO as ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_gpu  # noqa: E402


def test_every_method_gets_a_row_with_one_batch_shape(tmp_path, capsys):
    rows = bench_gpu.main(
        [
            "--device",
            "cpu",
            "--models",
            "mlp",
            "--n",
            "3000",
            "--steps",
            "4",
            "--warmup",
            "2",
            "--out",
            str(tmp_path / "g"),
        ]
    )
    assert [r["method"] for r in rows] == list(bench_gpu.METHODS)
    for r in rows:
        assert r["ms_per_step"] > 0 and r["sampler_ms_per_step"] >= 0
        # one shape per step (the filter keeps B of 4B candidates; InfoBatch and random may end
        # an epoch short, which 6 steps of 64 out of 3000 never reach)
        assert r["shapes"] == [64], r
    table = (tmp_path / "g.md").read_text()
    assert "| mlp | loss-filter-4 |" in table and "x random" in table
