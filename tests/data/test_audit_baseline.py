"""Near-duplicates next to the random pairs' baseline: on raw non-negative features (the
README's digits pixels) random pairs are already alike, so most rows pass a cosine
threshold; ``audit`` and ``deduplicate`` warn and name the fix (centre the features, or use
an embedding) instead of advising removal, and say nothing new on an ordinary embedding."""

from __future__ import annotations

import json

import numpy as np
import pytest

from batchsel import audit, deduplicate
from batchsel.data.dedup import crowded_warning

FIX = "centre the features"
REMOVE = "removing them (batchsel dedup)"


@pytest.fixture(scope="module")
def digits() -> np.ndarray:
    from sklearn.datasets import load_digits

    return load_digits().data.astype(np.float32)


def planted(n: int = 1000, share: float = 0.2, seed: int = 0) -> np.ndarray:
    """A centred 64-d embedding whose rows ``n - share * n ..`` are noisy copies of the first ones."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 64))
    m = int(share * n)
    x[n - m :] = x[:m] * 1.5 + 0.01 * rng.standard_normal((m, 64))
    return x.astype(np.float32)


def test_digits_raw_pixels_get_the_warning_and_no_removal_advice(digits, caplog):
    with caplog.at_level("WARNING", logger="batchsel.data.dedup"):
        report = audit(digits, progress=False)
    assert report.duplicates[0.95] > 0.5  # the figures themselves do not change
    assert report.crowded is not None and FIX in report.crowded and "embedding" in report.crowded
    assert any(FIX in tip for tip in report.advice) and not any(REMOVE in tip for tip in report.advice)
    assert report.to_dict()["duplicates_warning"] == report.crowded and FIX in report.format()
    assert "audit: random pairs of rows are already alike" in caplog.text and FIX in caplog.text
    # centred, the same pixels are an ordinary embedding: no warning
    assert audit(digits - digits.mean(axis=0), progress=False).crowded is None


def test_an_embedding_with_planted_duplicates_keeps_its_advice_and_no_warning(caplog):
    x = planted()
    with caplog.at_level("WARNING", logger="batchsel.data.dedup"):
        report = audit(x, progress=False)
        result = deduplicate(x, progress=False)
    assert report.duplicates[0.95] == pytest.approx(0.2)
    assert report.crowded is None and "duplicates_warning" not in report.to_dict()
    assert any(REMOVE in tip for tip in report.advice) and not any(FIX in tip for tip in report.advice)
    assert result.removed_fraction == pytest.approx(0.2) and result.keep.tolist() == list(range(800))
    assert result.extra["warning"] is None and abs(result.extra["random_similarity"]) < 0.1
    assert FIX not in caplog.text


def test_deduplicate_warns_on_raw_pixels_and_keeps_its_result(digits, caplog):
    with caplog.at_level("WARNING", logger="batchsel.data.dedup"):
        result = deduplicate(digits, progress=False)
    assert result.removed_fraction > 0.5  # the result is the same: the warning names the fix
    assert FIX in result.extra["warning"] and result.extra["random_similarity"] > 0.6
    assert "deduplicate: random pairs of rows are already alike" in caplog.text
    # exact duplicates stay exact whatever the baseline: no warning at threshold 1
    assert deduplicate(np.concatenate([digits, digits]), 1.0, progress=False).extra["warning"] is None


def test_the_rule():
    def pairs(median: float, low: float = 0.2) -> np.ndarray:  # random pairs' similarities
        return np.r_[np.full(20, low), np.full(70, median), np.full(10, 0.99)]

    # digits: median 0.69 at 0.95 warns; at 0.98 (1 - 0.69 > 8 x 0.02) it does not
    assert crowded_warning(pairs(0.69), 0.95, 0.81, "audit") is not None
    assert crowded_warning(pairs(0.69), 0.98, 0.10, "audit") is None
    assert crowded_warning(pairs(0.69), 0.95, 0.04, "audit") is None  # too few rows removed to matter
    assert crowded_warning(pairs(0.3), 0.95, 0.5, "audit") is None  # a ReLU layer's outputs
    # tight clusters apart from one another: many random pairs dissimilar, no common direction
    assert crowded_warning(pairs(0.69, low=-0.5), 0.95, 0.81, "audit") is None


def test_the_command_line_says_so(digits, tmp_path, capsys, caplog):
    from batchsel import cli

    np.save(tmp_path / "digits.npy", digits)
    with caplog.at_level("WARNING", logger="batchsel.data.dedup"):  # the CLI logs it on stderr
        assert cli.main(["dedup", str(tmp_path / "digits.npy"), "--json", "--quiet"]) == 0
        assert FIX in json.loads(capsys.readouterr().out)["warning"]
        assert cli.main(["audit", str(tmp_path / "digits.npy"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "advice: random pairs of rows are already alike" in out and REMOVE not in out
    assert "deduplicate: random pairs" in caplog.text and "audit: random pairs" in caplog.text
