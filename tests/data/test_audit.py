"""``batchsel audit`` / batchsel.audit: planted label noise, duplicates, outliers and
imbalance are found and estimated; the command line writes atomically and refuses bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from batchsel.data.audit import audit, confident_learning


def mixture(n: int = 2000, classes: int = 8, noise: float = 0.2, duplicates: float = 0.0, seed: int = 0):
    """Separable classes in 64-d (within a class, cosine about 0.8: no near-duplicates);
    ``noise`` of the labels moved to another class, a share ``duplicates`` of rows replaced
    by rescaled copies of others. Returns x, noisy labels, the mask of wrong labels."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, n)
    x = rng.standard_normal((classes, 64))[y] * 2 + rng.standard_normal((n, 64))
    if duplicates:
        copies = rng.choice(n, int(duplicates * n), replace=False)
        x[copies] = x[rng.integers(0, n, copies.size)] * 1.5
    wrong = rng.random(n) < noise
    noisy = np.where(wrong, (y + rng.integers(1, classes, n)) % classes, y)
    return x.astype(np.float32), noisy, wrong


@pytest.mark.parametrize("rate", [0.1, 0.25, 0.4])
def test_the_noise_rate_is_estimated_and_the_wrong_labels_flagged(rate):
    x, y, wrong = mixture(noise=rate)
    report = audit(x, y, progress=False)
    assert abs(report.noise_rate - wrong.mean()) < 0.05, (report.noise_rate, wrong.mean())
    flagged = report.label_issues
    precision, recall = wrong[flagged].mean(), wrong[flagged].sum() / wrong.sum()
    assert precision > 0.9 and recall > 0.8, (precision, recall)
    p = report.probabilities[flagged, report.label_positions[flagged]]
    assert (np.diff(p) >= 0).all()  # most likely first: the lowest probability of the given label
    assert "labels look wrong" in report.advice[0]


def test_clean_balanced_data_gets_the_clean_advice():
    x, y, _ = mixture(noise=0.0)
    report = audit(x, y, progress=False)
    assert report.noise_rate < 0.02 and report.label_issues.size < 0.02 * len(y)
    assert report.imbalance < 1.5 and report.advice[0].startswith("no label noise, duplication or imbalance")
    assert report.neighbor_similarity > report.random_similarity  # clustered data


def test_duplicates_outliers_and_imbalance_are_reported():
    x, y, _ = mixture(noise=0.0, duplicates=0.2)
    n = len(y)
    x = np.vstack([x, 40 * np.eye(64, dtype=np.float32)[:3]])  # 3 rows unlike any other
    y = np.concatenate([y, [0, 0, 0]])
    keep = np.concatenate([np.flatnonzero(y != 1), np.flatnonzero(y == 1)[:20]])  # class 1 rare
    report = audit(x[keep], y[keep], progress=False)
    lonely = set(np.flatnonzero(keep >= n).tolist())
    curve = [report.duplicates[t] for t in sorted(report.duplicates)]
    assert all(a >= b for a, b in zip(curve, curve[1:]))  # fewer near-duplicates at higher thresholds
    assert report.duplicates[0.95] > 0.1
    assert set(report.outliers[:3].tolist()) == lonely
    assert report.imbalance > 5
    advice = " ".join(report.advice)
    assert "near-duplicates" in advice and "imbalanced" in advice
    d = report.to_dict()
    json.dumps(d)  # plain values
    assert d["num_examples"] == len(keep) and d["class_counts"]["1"] == 20


def test_confident_learning_on_given_probabilities():
    # two classes; rows 0-3 are labelled 0 but their probabilities say class 1
    p = np.array([[0.2, 0.8]] * 4 + [[0.9, 0.1]] * 16 + [[0.3, 0.7]] * 20)
    labels = np.array([0] * 20 + [1] * 20)
    rate, flagged = confident_learning(p, labels)
    assert rate == pytest.approx(0.1) and sorted(flagged.tolist()) == [0, 1, 2, 3]


def run(*args: str, cwd: Path, mpi: int = 0) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "batchsel", *args]
    if mpi:
        from test_integrations_mp import MPIEXEC, clean_env

        if not MPIEXEC.exists():
            pytest.skip("no mpiexec")
        return subprocess.run(
            [str(MPIEXEC), "--allow-run-as-root", "--oversubscribe", "-n", str(mpi), *cmd],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=300,
            env=clean_env(),
        )
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture
def files(tmp_path) -> Path:
    x, y, _ = mixture(n=1500)
    np.save(tmp_path / "emb.npy", x)
    np.save(tmp_path / "y.npy", y)
    np.save(tmp_path / "y_short.npy", y[:-1])
    p = np.full((len(y), 8), 0.5 / 7)
    p[np.arange(len(y)), y] = 0.5
    np.save(tmp_path / "p.npy", p)
    np.save(tmp_path / "p_rows.npy", p * 1.1)
    np.save(tmp_path / "p_short.npy", p[:-1])
    return tmp_path


def test_cli_text_json_issues_and_plot(files):
    out = run(
        "audit",
        "emb.npy",
        "--labels",
        "y.npy",
        "--issues",
        "sus.npy",
        "--plot",
        "audit.png",
        "--json",
        "--quiet",
        cwd=files,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    x, y = np.load(files / "emb.npy"), np.load(files / "y.npy")
    expected = audit(x, y, progress=False)
    assert np.array_equal(np.load(files / "sus.npy"), expected.label_issues)
    assert report["noise_rate"] == round(expected.noise_rate, 4) and report["issues"] == "sus.npy"
    assert (files / "audit.png").stat().st_size > 0
    text = run("audit", "emb.npy", "--quiet", cwd=files)
    assert text.returncode == 0 and "near-duplicates" in text.stdout and "labels look wrong" not in text.stdout


@pytest.mark.slow
def test_cli_under_two_mpi_ranks_reports_what_one_process_does(files):
    one = run("audit", "emb.npy", "--labels", "y.npy", "--json", "--quiet", cwd=files)
    two = run("audit", "emb.npy", "--labels", "y.npy", "--json", "--quiet", cwd=files, mpi=2)
    assert two.returncode == 0, two.stderr
    a, b = json.loads(one.stdout), json.loads(two.stdout.strip().splitlines()[-1])
    for key in ("near_duplicates", "noise_rate", "label_issues", "outliers", "class_counts"):
        assert a[key] == b[key], key


@pytest.mark.parametrize(
    "args, message",
    [
        (["--threshold", "0"], "--threshold must be in (0, 1]"),
        (["--issues", "sus.npy"], "--issues needs --labels"),
        (["--labels", "y_short.npy"], "labels"),
        (["--labels", "y.npy", "--plot", "audit.txt"], "must end with"),
        (["--labels", "y.npy", "--issues", "y.npy", "--force"], "is the input --labels"),
        (["--k", "0"], "--k"),
        (["--probabilities", "p.npy"], "--probabilities needs --labels"),
        (["--labels", "y.npy", "--probabilities", "p_rows.npy"], "must sum to 1 in every row"),
        (["--labels", "y.npy", "--probabilities", "p_short.npy", "--issues", "sus.npy"], "N x C with N = 1500"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line_and_writes_nothing(files, args, message):
    before = sorted(p.name for p in files.iterdir())
    out = run("audit", "emb.npy", *args, cwd=files)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr
    assert sorted(p.name for p in files.iterdir()) == before and out.stdout == ""


def test_an_estimate_from_embeddings_that_separate_the_classes_poorly_is_marked():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, 2000)
    x = (0.2 * rng.standard_normal((10, 32))[y] + rng.standard_normal((2000, 32))).astype(np.float32)  # overlap
    report = audit(x, y, progress=False)  # clean labels, yet a large "noise" estimate
    assert report.neighbor_agreement < 0.5 and not report.to_dict()["noise_rate_reliable"]
    assert report.advice[0].startswith("the neighbours' votes are split")
    good = audit(*mixture(noise=0.25)[:2], progress=False)
    assert good.to_dict()["noise_rate_reliable"] and not good.advice[0].startswith("the neighbours")


def model_probabilities(truth: np.ndarray, classes: int, accuracy: float, seed: int = 0) -> np.ndarray:
    """Out-of-sample probabilities of a model that learnt the noisy labels' distribution:
    right about the true class ``accuracy`` of the time, its mass shared with the label
    noise it was trained on."""
    rng = np.random.default_rng(seed)
    n = truth.size
    guess = np.where(rng.random(n) < accuracy, truth, rng.integers(0, classes, n))
    p = rng.dirichlet(np.ones(classes), n) * 0.3
    p[np.arange(n), guess] += 0.7
    return p / p.sum(axis=1, keepdims=True)


def test_a_models_probabilities_replace_the_neighbours_votes():
    # embeddings that separate the classes poorly: the neighbours count their own errors as
    # wrong labels; a model that classifies well gets the rate and the rows right
    rng = np.random.default_rng(1)
    n, classes = 3000, 10
    truth = rng.integers(0, classes, n)
    x = (0.2 * rng.standard_normal((classes, 32))[truth] + rng.standard_normal((n, 32))).astype(np.float32)
    wrong = rng.random(n) < 0.25
    y = np.where(wrong, (truth + rng.integers(1, classes, n)) % classes, truth)
    neighbours = audit(x, y, progress=False)
    assert neighbours.noise_rate > 0.5 and neighbours.probability_source == "neighbours"
    given = audit(x, y, progress=False, probabilities=model_probabilities(truth, classes, 0.95))
    assert given.probability_source == "given" and given.to_dict()["probability_source"] == "given"
    assert abs(given.noise_rate - wrong.mean()) < 0.05, (given.noise_rate, wrong.mean())
    flagged = given.label_issues
    assert wrong[flagged].mean() > 0.85 and wrong[flagged].sum() / wrong.sum() > 0.7
    assert given.to_dict()["noise_rate_reliable"] and "labels look wrong" in given.advice[0]
    # a weak model's estimate is marked, in the model's words
    weak = audit(x, y, progress=False, probabilities=np.full((n, classes), 1 / classes))
    assert not weak.to_dict()["noise_rate_reliable"] and weak.advice[0].startswith("the given probabilities")


def test_given_probabilities_are_checked():
    x, y, _ = mixture(n=300)
    p = np.full((300, 8), 1 / 8)
    with pytest.raises(ValueError, match="probabilities need labels"):
        audit(x, None, probabilities=p, progress=False)
    with pytest.raises(ValueError, match=r"N x C with N = 300 rows, got shape \(299, 8\)"):
        audit(x, y, probabilities=p[:-1], progress=False)
    bad = p.copy()
    bad[7, 2] = np.nan
    with pytest.raises(ValueError, match="row 7"):
        audit(x, y, probabilities=bad, progress=False)
    with pytest.raises(ValueError, match="row 0 sums to 2"):
        audit(x, y, probabilities=p * 2, progress=False)
    with pytest.raises(ValueError, match=r"in \[0, 4\): got labels 0..7"):
        audit(x, y, probabilities=np.full((300, 4), 0.25), progress=False)
    with pytest.raises(TypeError, match="real numbers"):
        audit(x, y, probabilities=p.astype(complex), progress=False)


def test_cli_takes_a_models_probabilities(files):
    out = run("audit", "emb.npy", "--labels", "y.npy", "--probabilities", "p.npy", "--json", "--quiet", cwd=files)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    x, y, p = (np.load(files / f) for f in ("emb.npy", "y.npy", "p.npy"))
    expected = audit(x, y, progress=False, probabilities=p)
    assert report["probability_source"] == "given" and report["noise_rate"] == round(expected.noise_rate, 4)


# -- issue 46 --------------------------------------------------------------------------------
def test_all_zero_rows_count_as_duplicates_of_one_another_with_a_warning(caplog):
    # as deduplicate removes them; before: 10 identical zero rows, 0 % near-duplicates, no word
    with caplog.at_level("WARNING", logger="batchsel.data.dedup"):
        report = audit(np.zeros((10, 4), np.float32), progress=False)
    assert set(report.duplicates.values()) == {0.9} and report.duplicate_group.tolist() == [0] * 10
    assert report.zero_rows.tolist() == list(range(10)) and report.to_dict()["zero_rows"] == 10
    assert "audit: 10 of 10 rows are all zero" in caplog.text
    assert any("10 rows are all zero" in tip and "drop them" in tip for tip in report.advice)
    x, y, _ = mixture(n=300, noise=0.0)
    x[[5, 50, 250]] = 0.0
    mixed = audit(x, y, progress=False)
    assert mixed.zero_rows.tolist() == [5, 50, 250] and mixed.duplicates[1.0] == pytest.approx(2 / 300)
    assert mixed.duplicate_group[[5, 50, 250]].tolist() == [5, 5, 5]
    assert audit(x[:5] + 1.0, progress=False).to_dict()["zero_rows"] == 0


def test_thresholds_may_be_one_number_and_anything_else_is_refused_by_name():
    x, _, _ = mixture(n=200)
    assert sorted(audit(x, thresholds=0.9, progress=False).duplicates) == [0.9, 0.95]  # was: not iterable
    assert sorted(audit(x, thresholds=np.float32(0.75), threshold=0.75, progress=False).duplicates) == [0.75]
    assert sorted(audit(x, thresholds=np.array([0.9, 1.0]), progress=False).duplicates) == [0.9, 0.95, 1.0]
    for bad in ("0.9", None, True):
        with pytest.raises(TypeError, match="thresholds must be a sequence of numbers"):
            audit(x, thresholds=bad, progress=False)
    with pytest.raises(ValueError, match="thresholds must be"):
        audit(x, thresholds=[0.9, 1.5], progress=False)


def test_unsigned_labels_past_the_int64_range_are_refused_with_their_value():
    x, y, _ = mixture(n=200)
    big = y.astype(np.uint64)
    big[3] = 2**63  # was reported as "labels must be >= 0, found -9223372036854775808"
    with pytest.raises(ValueError, match="below 2\\*\\*63 .*found 9223372036854775808"):
        audit(x, big, progress=False)
    assert audit(x, y.astype(np.uint64), progress=False).class_counts == audit(x, y, progress=False).class_counts


def test_the_advice_carries_the_benchmarks_claims_not_their_figures():
    # the figures live in docs (which-method.md, written from results files), where they are kept
    # current; before, the advice quoted them (29-33 %, +0.2 to +5.4 points, ...)
    x, y, _ = mixture(noise=0.25)
    reports = [audit(x, y, progress=False), audit(*mixture(noise=0.0)[:2], progress=False)]
    x, y, _ = mixture(noise=0.0, duplicates=0.2)
    keep = np.concatenate([np.flatnonzero(y != 1), np.flatnonzero(y == 1)[:20]])  # class 1 rare
    reports.append(audit(x[keep], y[keep], progress=False))
    for r in reports:
        own = [f"{r.noise_rate:.0%}", f"{r.duplicates[r.threshold]:.0%}", f"{r.imbalance:.0f}x", f"{r.threshold:g}"]
        for tip in r.advice:
            assert "docs: which-method.md" in tip, tip
            for figure in own:  # the data's own figures stay
                tip = tip.replace(figure, "")
            assert not re.search(r"\d", tip), tip
