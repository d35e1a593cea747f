"""The ``batchsel`` command line, run as a user runs it: as a subprocess, on small real data
(a subset of scikit-learn's digits). A few checks that need to break the program from the
inside (an unexpected exception, Ctrl-C during a write) call ``main()`` in-process."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from paths import REPO as ROOT

import batchsel
from batchsel import cli
from batchsel.cli import inputs as cli_inputs
from batchsel.cli import inspect as cli_inspect
from batchsel.cli import ranks as cli_ranks

N = 400  # digits used: small enough that every command runs in well under a second


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "batchsel", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from sklearn.datasets import load_digits

    folder = tmp_path_factory.mktemp("cli_data")
    digits = load_digits()
    x = digits.data[:N].astype(np.float32)
    y = digits.target[:N].astype(np.int64)
    np.save(folder / "emb.npy", x)
    np.save(folder / "labels.npy", y)
    np.save(folder / "labels_short.npy", y[:-1])
    np.savez(folder / "bundle.npz", emb=x, labels=y)
    bad = x.copy()
    bad[7, 3] = np.nan
    np.save(folder / "nan.npy", bad)
    np.save(folder / "flat.npy", x[:, 0])
    (folder / "a_folder.npy").mkdir()
    (folder / "not_a_plan.npz").write_bytes(b"PK\x03\x04 truncated")
    graph = batchsel.EmbeddingIndex(x, metric="l2", progress=False).knn_graph(k=10)
    sp.save_npz(folder / "graph.npz", graph)
    return folder


@pytest.fixture
def work(data, tmp_path) -> Path:
    """A fresh folder holding (copies of) the input files."""
    for f in data.iterdir():
        if f.is_file():
            shutil.copy(f, tmp_path / f.name)
        else:
            (tmp_path / f.name).mkdir()
    return tmp_path


def load_x(folder: Path) -> np.ndarray:
    return np.load(folder / "emb.npy")


def inside_fraction(plan: batchsel.EpochPlan, graph: sp.csr_matrix) -> float:
    """Share of the graph's edge weight whose two ends share a batch, by brute force."""
    together = np.zeros(graph.shape, dtype=bool)
    for r in range(plan.world_size):
        for b in plan.batches(r):
            together[np.ix_(b, b)] = True
    dense = graph.toarray()
    return float(dense[together].sum() / dense.sum())


# -- the basics ---------------------------------------------------------------------------


def test_version(data):
    out = run("--version", cwd=data)
    assert out.returncode == 0 and out.stdout.strip() == f"batchsel {batchsel.__version__}"


@pytest.mark.parametrize("command", [[], ["select"], ["plan"], ["inspect"]])
def test_help_has_a_worked_example(command, capsys):
    # --help only parses arguments: in-process keeps it cheap.
    assert cli.main([*command, "--help"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: batchsel") and "example" in text
    assert f"\n  batchsel {command[0] if command else 'plan'} " in text  # a command line to copy


# -- plan and inspect ---------------------------------------------------------------------


def test_random_plan_matches_python_api_and_inspects(work):
    out = run(
        "plan",
        "emb.npy",
        "--batch-size",
        "32",
        "--workers",
        "3",
        "--epochs",
        "2",
        "--seed",
        "5",
        "--out",
        "plan.npz",
        "--json",
        "--quiet",
        cwd=work,
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    selector = batchsel.RandomSelector(N, 32, seed=5)
    expected = [selector.plan(epoch=e, world_size=3) for e in range(2)]
    assert [e["fingerprint"] for e in summary["epochs"]] == [p.fingerprint() for p in expected]
    saved = batchsel.load_plans(work / "plan.npz")
    assert [p.validate().fingerprint() for p in saved] == [p.fingerprint() for p in expected]

    out = run("inspect", "plan.npz", "--json", "--labels", "labels.npy", "--graph", "graph.npz", cwd=work)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    labels = np.load(work / "labels.npy")
    graph = sp.load_npz(work / "graph.npz")
    for rep, plan in zip(report["epochs"], expected):
        assert rep["fingerprint"] == plan.fingerprint()
        assert rep["coverage"] == 1.0  # 400 examples over 3 ranks: padded, nothing lost
        assert rep["duplicates"] == 3 * 134 - N
        assert [r["examples"] for r in rep["ranks"]] == [plan.indices(r).size for r in range(3)]
        # label entropy of one batch, recomputed here
        batch = plan.batches(1)[2]
        p = np.unique(labels[batch], return_counts=True)[1] / batch.size
        assert rep["ranks"][1]["label_entropy"][2] == pytest.approx(-(p * np.log2(p)).sum())
        assert rep["graph"]["edge_weight_inside"] == pytest.approx(inside_fraction(plan, graph), rel=1e-5)
        # random batches keep about what random batches are expected to keep
        assert 0.5 < rep["graph"]["ratio_to_random"] < 2.0


def test_graph_plan_keeps_edges_and_plots(work):
    out = run(
        "plan",
        "emb.npy",
        "--method",
        "graph",
        "--neighbors",
        "10",
        "--batch-size",
        "40",
        "--workers",
        "2",
        "--seed",
        "3",
        "--save-graph",
        "knn.npz",
        "--out",
        "plan.npz",
        "--quiet",
        cwd=work,
    )
    assert out.returncode == 0, out.stderr
    assert "fingerprint" in out.stdout
    graph = sp.load_npz(work / "knn.npz")
    expected = batchsel.GraphBlockSelector(graph, 40, seed=3).plan(epoch=0, world_size=2)
    assert batchsel.EpochPlan.load(work / "plan.npz").validate().fingerprint() == expected.fingerprint()

    out = run("inspect", "plan.npz", "--labels", "labels.npy", "--graph", "knn.npz", "--plot", "plan.png", cwd=work)
    assert out.returncode == 0, out.stderr
    assert expected.fingerprint() in out.stdout and "edge weight inside batches" in out.stdout
    assert (work / "plan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # random batches of 40 keep about 39 / (N - 1) of the edge weight; graph batches many times more
    assert inside_fraction(expected, graph.tocsr()) > 3 * 39 / (N - 1)


@pytest.mark.parametrize(
    "method, extra, build",
    [
        pytest.param("submodular", [], lambda x, y: batchsel.SubmodularSelector(x, 32, seed=2)),
        pytest.param("loss", [], lambda x, y: batchsel.LossRankSelector(len(x), 32, seed=2)),
        pytest.param(
            "coreset",
            ["--labels", "labels.npy", "--fraction", "0.25"],
            lambda x, y: batchsel.CoresetSelector(x, y, 32, seed=2, fraction=0.25),
        ),
    ],
)
def test_other_methods_match_python_api(work, method, extra, build):
    out = run(
        "plan",
        "emb.npy",
        "--method",
        method,
        *extra,
        "--batch-size",
        "32",
        "--workers",
        "2",
        "--seed",
        "2",
        "--out",
        "plan.npz",
        "--json",
        "--quiet",
        cwd=work,
    )
    assert out.returncode == 0, out.stderr
    expected = build(load_x(work), np.load(work / "labels.npy")).plan(epoch=0, world_size=2)
    saved = batchsel.EpochPlan.load(work / "plan.npz").validate()
    assert saved.fingerprint() == expected.fingerprint() == json.loads(out.stdout)["epochs"][0]["fingerprint"]
    assert saved.method == expected.method


def test_report_of_a_weighted_plan_with_repeats_and_unlabeled_examples():
    # in-process: the figures of `inspect` on a hand-made plan whose answers are known
    plan = batchsel.EpochPlan(
        [[np.array([0, 1, 2]), np.array([3, 0])], [np.array([4, 5]), np.array([5, 6])]],
        weights=[[np.ones(3), np.full(2, 2.0)], [np.ones(2), np.ones(2)]],
        num_examples=8,
    )
    labels = np.array([0, 0, 1, 1, -1, -1, 2, 2])
    graph = sp.csr_matrix(
        np.array(
            [
                [0, 1, 0, 0, 0, 0, 0, 0],
                [1, 0, 0, 0, 0, 0, 0, 0],
                [0, 0, 0, 0, 0, 0, 0, 3],
                [0, 0, 0, 0, 0, 0, 0, 0],
                [0, 0, 0, 0, 0, 2, 0, 0],
                [0, 0, 0, 0, 2, 0, 0, 0],
                [0, 0, 0, 0, 0, 0, 0, 0],
                [0, 0, 3, 0, 0, 0, 0, 0],
            ],
            dtype=np.float32,
        )
    )
    rep = cli.plan_report(plan, labels, graph)
    assert rep["weighted"] and [r["weight_sum"] for r in rep["ranks"]] == [7.0, 4.0]
    assert rep["coverage"] == 7 / 8 and rep["duplicates"] == 2  # example 7 never drawn; 0 and 5 twice
    assert rep["ranks"][0]["label_entropy"] == [
        pytest.approx(-(2 / 3) * np.log2(2 / 3) - (1 / 3) * np.log2(1 / 3)),
        1.0,
    ]
    assert rep["ranks"][1]["label_entropy"] == [None, 0.0]  # a batch of unlabeled examples has no entropy
    # edges: 0-1 (inside batch 0), 4-5 (inside rank 1 batch 0), 2-7 (7 is never drawn)
    assert rep["graph"]["edge_weight_inside"] == pytest.approx((2 * 1 + 2 * 2) / (2 * 1 + 2 * 2 + 2 * 3))
    assert rep["ranks"][0]["edge_weight_kept"] == [pytest.approx(2 / 5), 0.0]
    json.dumps(rep, allow_nan=False)  # what --json prints


# -- select -------------------------------------------------------------------------------


def test_select_matches_python_api(work):
    out = run("select", "emb.npy", "--k", "15", "--json", "--out", "picked.npy", "--quiet", cwd=work)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    f = batchsel.FacilityLocation.from_embeddings(load_x(work), metric="euclidean")
    expected = batchsel.maximize(f, 15, optimizer="lazy")
    assert result["indices"] == expected.indices.tolist()
    np.testing.assert_allclose(result["gains"], expected.gains, rtol=1e-6)
    assert result["value"] == pytest.approx(expected.value, rel=1e-6)
    np.testing.assert_array_equal(np.load(work / "picked.npy"), expected.indices)

    # text output from a named array of an .npz: INDEX<TAB>GAIN lines, same order
    out = run("select", "bundle.npz:emb", "--k", "15", "--quiet", cwd=work)
    assert out.returncode == 0, out.stderr
    assert [int(line.split("\t")[0]) for line in out.stdout.splitlines()] == expected.indices.tolist()


def test_select_other_objectives_and_torch_input(work):
    import torch

    torch.save(torch.from_numpy(load_x(work)), work / "emb.pt")
    out = run(
        "select",
        "emb.pt",
        "--k",
        "8",
        "--objective",
        "feature-based",
        "--optimizer",
        "naive",
        "--json",
        "--quiet",
        cwd=work,
    )
    assert out.returncode == 0, out.stderr
    expected = batchsel.maximize(batchsel.FeatureBased(load_x(work)), 8, optimizer="naive")
    assert json.loads(out.stdout)["indices"] == expected.indices.tolist()


def test_select_graph_cut_uses_apricots_similarity(work):
    # the graph functions get apricot's euclidean similarity max d^2 - d^2, built here by hand
    out = run("select", "emb.npy", "--k", "8", "--objective", "graph-cut", "--json", "--quiet", cwd=work)
    assert out.returncode == 0, out.stderr
    x = load_x(work).astype(np.float64)
    d2 = ((x[:, None, :] - x[None, :, :]) ** 2).sum(axis=-1)
    expected = batchsel.maximize(batchsel.GraphCut((d2.max() - d2).astype(np.float32)), 8)
    result = json.loads(out.stdout)
    assert result["indices"] == expected.indices.tolist()
    np.testing.assert_allclose(result["gains"], expected.gains, rtol=1e-4)


# -- bad input: exit 2, one line, nothing written -----------------------------------------

BAD = {
    "missing file": ["select", "nowhere.npy", "--k", "5", "--out", "out.npy"],
    "directory": ["select", "a_folder.npy", "--k", "5", "--out", "out.npy"],
    "NaN embeddings": ["select", "nan.npy", "--k", "5", "--out", "out.npy"],
    "1-D array": ["plan", "flat.npy", "--batch-size", "8", "--workers", "2", "--out", "out.npz"],
    "k larger than N": ["select", "emb.npy", "--k", str(N + 1), "--out", "out.npy"],
    "unknown method": [
        "plan",
        "emb.npy",
        "--method",
        "magic",
        "--batch-size",
        "8",
        "--workers",
        "2",
        "--out",
        "out.npz",
    ],
    "labels of the wrong length": [
        "plan",
        "emb.npy",
        "--method",
        "coreset",
        "--labels",
        "labels_short.npy",
        "--batch-size",
        "8",
        "--workers",
        "2",
        "--out",
        "out.npz",
    ],
    "output folder missing": ["plan", "emb.npy", "--batch-size", "8", "--workers", "2", "--out", "no/such/out.npz"],
}
# More of the same, checked in-process (the same code path without a process start each).
BAD_IN_PROCESS = {
    "output under a file": ["plan", "emb.npy", "--batch-size", "8", "--workers", "2", "--out", "emb.npy/out.npz"],
    "batch size zero": ["plan", "emb.npy", "--batch-size", "0", "--workers", "2", "--out", "out.npz"],
    "not a plan file": ["inspect", "not_a_plan.npz", "--plot", "out.png"],
    "embeddings given as the plan": ["inspect", "emb.npy"],
    "inspect labels of the wrong length": ["inspect", "plan.npz", "--labels", "labels_short.npy"],
    "graph of the wrong size": ["inspect", "plan.npz", "--graph", "small_graph.npz"],
    "coreset without labels": [
        "plan",
        "emb.npy",
        "--method",
        "coreset",
        "--batch-size",
        "8",
        "--workers",
        "2",
        "--out",
        "out.npz",
    ],
    "option of another method": [
        "plan",
        "emb.npy",
        "--pool-size",
        "64",
        "--batch-size",
        "8",
        "--workers",
        "2",
        "--out",
        "out.npz",
    ],
    "negative features": ["select", "centered.npy", "--k", "3", "--objective", "feature-based"],
    "bad --k": ["select", "emb.npy", "--k", "three"],
    "no command": [],
}


def test_inspect_of_embeddings_says_it_wants_a_plan(work, capsys):
    # was: "'numpy.ndarray' object does not support the context manager protocol"
    assert cli.main(["inspect", str(work / "emb.npy")]) == 2
    err = capsys.readouterr().err
    assert "not a plan" in err and "batchsel plan --out" in err and "context manager" not in err


def check_one_line_error(code: int, out: str, err: str, folder: Path, before: list[str]) -> None:
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("batchsel: error: "), err
    assert "Traceback" not in err and out == ""
    assert sorted(p.name for p in folder.iterdir()) == before  # no output, no temporary file


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_exits_2_with_one_line(work, case):
    before = sorted(p.name for p in work.iterdir())
    out = run(*BAD[case], cwd=work)
    check_one_line_error(out.returncode, out.stdout, out.stderr, work, before)


def test_more_bad_input_in_process(work, monkeypatch, capsys):
    monkeypatch.chdir(work)
    batchsel.RandomSelector(N, 50).plan(0, 2).save("plan.npz")
    sp.save_npz("small_graph.npz", sp.identity(10, format="csr"))
    np.save("centered.npy", load_x(work) - load_x(work).mean(axis=0))
    before = sorted(p.name for p in work.iterdir())
    for case, argv in BAD_IN_PROCESS.items():
        code = cli.main([*argv, "--quiet"] if argv else [])
        captured = capsys.readouterr()
        check_one_line_error(code, captured.out, captured.err, work, before)


def test_existing_output_needs_force(work):
    (work / "plan.npz").write_bytes(b"keep me")
    args = ["plan", "emb.npy", "--batch-size", "50", "--workers", "2", "--out", "plan.npz", "--quiet"]
    out = run(*args, cwd=work)
    assert out.returncode == 2 and "--force" in out.stderr and len(out.stderr.splitlines()) == 1
    assert (work / "plan.npz").read_bytes() == b"keep me"
    out = run(*args, "--force", cwd=work)
    assert out.returncode == 0, out.stderr
    assert batchsel.EpochPlan.load(work / "plan.npz").num_examples == N


# -- failures from the inside (in-process) ------------------------------------------------


def test_unexpected_error_exits_1_traceback_only_with_debug(work, monkeypatch, capsys):
    def broken(args):
        raise RuntimeError("something broke")

    monkeypatch.setattr(cli, "cmd_inspect", broken)
    assert cli.main(["inspect", str(work / "nowhere.npz")]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "something broke" in err and "--debug" in err
    assert cli.main(["inspect", str(work / "nowhere.npz"), "--debug"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "something broke" in err


# -- the shell example ----------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_cli_example_script_runs(tmp_path):
    env = dict(os.environ, BATCHSEL=f"{sys.executable} -m batchsel", PYTHON=sys.executable)
    out = subprocess.run(
        ["bash", str(ROOT / "examples" / "cli_example.sh"), "300", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "method graph" in out.stdout and "graph edge weight inside batches" in out.stdout
    assert (tmp_path / "graph_plan.png").stat().st_size > 0


# -- issue 14: exit codes, signals, outputs written together, special files ---------------


def test_internal_errors_exit_1_bad_input_exits_2(work, monkeypatch, capsys):
    # a ValueError from inside numpy (or from a call batchsel got wrong) is a bug, not bad input
    monkeypatch.setattr(batchsel.plans.report, "_label_entropy", lambda *args: np.zeros(3).reshape(2, 2))
    batchsel.RandomSelector(N, 50).plan(0, 2).save(work / "plan.npz")
    code = cli.main(["inspect", str(work / "plan.npz"), "--labels", str(work / "labels.npy"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert len(err.splitlines()) == 1 and err.startswith("batchsel: internal error: ValueError")
    assert "--debug" in err
    # batchsel's own checks stay exit 2
    code = cli.main(["inspect", str(work / "plan.npz"), "--labels", str(work / "labels_short.npy")])
    assert code == 2 and "399" in capsys.readouterr().err


def test_plot_without_matplotlib_exits_2_with_install_hint(work, monkeypatch, capsys):
    batchsel.RandomSelector(N, 50).plan(0, 2).save(work / "plan.npz")
    before = sorted(p.name for p in work.iterdir())
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    code = cli.main(["inspect", str(work / "plan.npz"), "--plot", str(work / "plan.png")])
    captured = capsys.readouterr()
    check_one_line_error(code, captured.out, captured.err, work, before)
    assert "pip install 'batchsel[plot]'" in captured.err


def test_force_writes_through_symlinks_and_refuses_special_files(work, capsys):
    (work / "real.npz").write_bytes(b"old")
    os.symlink("real.npz", work / "link.npz")
    args = ["plan", str(work / "emb.npy"), "--batch-size", "50", "--workers", "2", "--quiet", "--force"]
    code = cli.main([*args, "--out", str(work / "link.npz")])
    assert code == 0, capsys.readouterr().err
    capsys.readouterr()
    assert os.path.islink(work / "link.npz")
    assert batchsel.EpochPlan.load(work / "real.npz").num_examples == N
    os.mkfifo(work / "fifo.npz")
    os.symlink(os.devnull, work / "null.npz")
    before = sorted(p.name for p in work.iterdir())
    for name in ("fifo.npz", "null.npz"):
        code = cli.main([*args, "--out", str(work / name)])
        captured = capsys.readouterr()
        check_one_line_error(code, captured.out, captured.err, work, before)
        assert "not a regular file" in captured.err
    assert os.path.islink(work / "null.npz") and not os.path.isfile(work / "fifo.npz")


def test_json_stays_json_when_metis_prints(work, monkeypatch, capfd):
    import ctypes

    import pymetis

    real = pymetis.part_graph

    def chatty(*args, **kwargs):
        ctypes.CDLL(None).printf(b"METIS: some diagnostics\n")  # C stdio, as METIS prints
        return real(*args, **kwargs)

    monkeypatch.setattr(pymetis, "part_graph", chatty)
    code = cli.main(
        [
            "plan",
            str(work / "emb.npy"),
            "--method",
            "graph",
            "--batch-size",
            "40",
            "--workers",
            "2",
            "--out",
            str(work / "plan.npz"),
            "--json",
            "--quiet",
        ]
    )
    out, err = capfd.readouterr()
    assert code == 0, err
    assert json.loads(out)["method"] == "graph" and "METIS: some diagnostics" in err


def test_random_plan_reads_only_the_row_count(work, monkeypatch, capsys):
    # a float64 file was copied to float32 and read whole for the NaN check; random
    # batches need N only (NaN values do not matter to them)
    x = load_x(work).astype(np.float64)
    x[3, 2] = np.nan
    np.save(work / "emb64.npy", x)

    def no_loading(*args, **kwargs):
        raise AssertionError("the embeddings were loaded")

    monkeypatch.setattr(cli_inputs, "load_embeddings", no_loading)
    monkeypatch.setattr(cli_inputs, "load_array", no_loading)
    for path in ("emb64.npy", "bundle.npz:emb"):
        code = cli.main(
            [
                "plan",
                str(work / path),
                "--batch-size",
                "32",
                "--workers",
                "2",
                "--out",
                str(work / "plan.npz"),
                "--force",
                "--json",
                "--quiet",
            ]
        )
        captured = capsys.readouterr()
        assert code == 0, captured.err
        expected = batchsel.RandomSelector(N, 32).plan(0, 2).fingerprint()
        assert json.loads(captured.out)["epochs"][0]["fingerprint"] == expected


def test_bfloat16_torch_embeddings_are_read(work):
    import torch

    x = torch.from_numpy(load_x(work)).to(torch.bfloat16)
    torch.save(x, work / "emb_bf16.pt")
    out = run("select", "emb_bf16.pt", "--k", "5", "--json", "--quiet", cwd=work)
    assert out.returncode == 0, out.stderr
    expected = batchsel.maximize(batchsel.FacilityLocation.from_embeddings(x.float().numpy()), 5)
    assert json.loads(out.stdout)["indices"] == expected.indices.tolist()


def test_more_clear_errors_in_process(work, monkeypatch, capsys):
    monkeypatch.chdir(work)
    np.save("huge.npy", load_x(work).astype(np.float64) * 1e300)
    np.save("scaled.npy", load_x(work) * np.float32(1e20))
    batchsel.RandomSelector(N, 50).plan(0, 2).save("plan.npz")
    with np.load("plan.npz") as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(str(arrays["e0_header"]))
    del header["num_examples"]
    arrays["e0_header"] = np.array(json.dumps(header))
    arrays["checksum"] = np.array(batchsel.plans.plan._checksum(arrays))
    np.savez("headless.npz", **arrays)
    zero = sp.load_npz("graph.npz")
    zero.data[:] = 0
    sp.save_npz("zero_graph.npz", zero)
    cases = {
        "values beyond float32": (["select", "huge.npy", "--k", "3"], "float32 range"),
        "squared distances overflow": (["select", "scaled.npy", "--k", "3"], "overflow float32"),
        "k-NN graph overflow": (["select", "scaled.npy", "--k", "3", "--neighbors", "5"], "overflow float32"),
        "coreset overflow": (
            [
                "plan",
                "scaled.npy",
                "--method",
                "coreset",
                "--labels",
                "labels.npy",
                "--batch-size",
                "8",
                "--workers",
                "2",
                "--out",
                "out.npz",
            ],
            "overflow float32",
        ),
        "negative epoch": (["inspect", "plan.npz", "--epoch", "-1"], "--epoch must be >= 0"),
        "header without num_examples": (["inspect", "headless.npz"], "lacks ['num_examples']"),
        "graph of zeros": (
            [
                "plan",
                "emb.npy",
                "--method",
                "graph",
                "--graph",
                "zero_graph.npz",
                "--batch-size",
                "8",
                "--workers",
                "2",
                "--out",
                "out.npz",
            ],
            "no edges",
        ),
    }
    before = sorted(p.name for p in work.iterdir())
    for case, (argv, match) in cases.items():
        code = cli.main([*argv, "--quiet"])
        captured = capsys.readouterr()
        check_one_line_error(code, captured.out, captured.err, work, before)
        assert match in captured.err, (case, captured.err)


def test_select_stream_reads_the_npy_in_chunks_same_output_format(work, monkeypatch, capsys):
    monkeypatch.chdir(work)
    x = load_x(work)
    expected = batchsel.SieveStreaming("feature-based", 12).fit(x, chunk_rows=64)
    out = run(
        "select",
        "emb.npy",
        "--k",
        "12",
        "--objective",
        "feature-based",
        "--stream",
        "--chunk-rows",
        "64",
        "--json",
        "--out",
        "picked.npz",
        "--quiet",
        cwd=work,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["optimizer"] == "sieve" and result["indices"] == expected.indices_.tolist()
    assert result["value"] == pytest.approx(expected.value_, rel=1e-12)
    with np.load(work / "picked.npz") as z:
        np.testing.assert_array_equal(z["indices"], expected.indices_)
        np.testing.assert_allclose(z["gains"], expected.gains_)
    # text: INDEX<TAB>GAIN lines; facility location over a seeded reference sample
    out = run("select", "emb.npy", "--k", "5", "--stream", "--reference-size", "100", "--quiet", cwd=work)
    assert out.returncode == 0, out.stderr
    fl = batchsel.SieveStreaming("facility-location", 5, reference_size=100).fit(x)
    assert [int(line.split("\t")[0]) for line in out.stdout.splitlines()] == fl.indices_.tolist()
    # the file is never loaded whole: cli's loader is not called
    monkeypatch.setattr(cli_inputs, "read_embeddings", lambda path: pytest.fail("loaded whole"))
    assert cli.main(["select", "emb.npy", "--k", "3", "--stream", "--objective", "feature-based", "--quiet"]) == 0
    capsys.readouterr()
    np.save("centered.npy", x - x.mean(axis=0))
    before = sorted(p.name for p in work.iterdir())
    for argv in (
        ["bundle.npz:emb", "--stream"],
        ["emb.npy", "--stream", "--chunk-rows", "0"],
        ["emb.npy", "--chunk-rows", "10"],
        ["emb.npy", "--stream", "--objective", "graph-cut"],
        ["centered.npy", "--stream", "--objective", "feature-based"],
        ["nan.npy", "--stream"],
        ["emb.npy", "--stream", "--optimizer", "naive"],
        ["emb.npy", "--stream", "--k", str(N + 1)],
    ):
        code = cli.main(["select", *argv, *([] if "--k" in argv else ["--k", "3"]), "--out", "out.npy", "--quiet"])
        captured = capsys.readouterr()
        check_one_line_error(code, captured.out, captured.err, work, before)


@pytest.mark.parametrize(
    "optimizer,metric", [("approximate-lazy", "corr"), ("modular", "cosine"), ("bidirectional", "euclidean")]
)
def test_select_offers_every_optimizer_and_metric_of_maximize(data, tmp_path, capsys, optimizer, metric):
    out = tmp_path / "chosen.npy"
    assert (
        cli.main(
            [
                "select",
                str(data / "emb.npy"),
                "--k",
                "7",
                "--objective",
                "graph-cut",
                "--optimizer",
                optimizer,
                "--metric",
                metric,
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    x = np.load(data / "emb.npy")
    expected = batchsel.maximize(batchsel.GraphCut.from_embeddings(x, metric), 7, optimizer, seed=0)
    np.testing.assert_array_equal(np.load(out), expected.indices)


# -- all outputs or none, checked before the work; out-of-memory hints (issue 46) ---------


def test_audit_writes_issues_and_plot_together_or_neither(work, monkeypatch, capsys):
    # was: issues.npy written, then the figure failed (exit 2), and a rerun refused issues.npy
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    def disk_full(self, file, **kwargs):
        file.write(b"half a figure")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", disk_full)
    monkeypatch.chdir(work)
    before = sorted(p.name for p in work.iterdir())
    code = cli.main(["audit", "emb.npy", "--labels", "labels.npy", "--issues", "issues.npy", "--plot", "audit.png"])
    captured = capsys.readouterr()
    check_one_line_error(code, captured.out, captured.err, work, before)  # no issues.npy, no temporary file
    assert "'issues.npy' and 'audit.png'" in captured.err and "No space left" in captured.err


def _no_file_can_be_created_in_proc() -> bool:
    try:
        open("/proc/batchsel-probe", "wb").close()
    except OSError:
        return os.path.isdir("/proc")
    os.unlink("/proc/batchsel-probe")
    return False


@pytest.mark.skipif(not _no_file_can_be_created_in_proc(), reason="needs /proc, where no file can be created")
@pytest.mark.parametrize(
    "argv",
    [
        ["audit", "emb.npy", "--labels", "labels.npy", "--issues", "issues.npy", "--plot", "/proc/audit.png"],
        ["dedup", "emb.npy", "--out", "keep.npy", "--groups", "/proc/groups.npy"],
        ["select", "emb.npy", "--k", "5", "--out", "/proc/picked.npy"],
        ["plan", "emb.npy", "--batch-size", "8", "--workers", "2", "--out", "/proc/plan.npz"],
        ["inspect", "plan.npz", "--plot", "/proc/plan.png"],
    ],
)
def test_an_output_folder_where_no_file_can_be_created_is_refused_before_the_work(work, monkeypatch, capsys, argv):
    # os.access says a folder is writable to root, /proc included: the work ran, then the
    # write failed after the outputs before it (audit's issues.npy) were written
    def work_started(*args, **kwargs):
        raise RuntimeError("the work started")

    monkeypatch.chdir(work)
    batchsel.RandomSelector(N, 50).plan(0, 2).save("plan.npz")
    for module, name in (
        (cli_inputs, "read_embeddings"),
        (cli_inputs, "num_rows"),
        (cli_ranks, "sharded_source"),
        (cli_inspect, "load_plans"),
    ):
        monkeypatch.setattr(module, name, work_started)
    before = sorted(p.name for p in work.iterdir())
    code = cli.main([*argv, "--quiet"])
    captured = capsys.readouterr()
    check_one_line_error(code, captured.out, captured.err, work, before)
    assert "cannot create a file in '/proc'" in captured.err, captured.err


def test_two_outputs_that_are_one_file_through_a_symlink_are_refused(work, monkeypatch, capsys):
    # was: both renamed onto keep.npy, the groups replacing the kept rows, exit 0
    monkeypatch.chdir(work)
    os.symlink("keep.npy", "groups.npy")
    before = sorted(p.name for p in work.iterdir())
    code = cli.main(["dedup", "emb.npy", "--out", "keep.npy", "--groups", "groups.npy", "--force", "--quiet"])
    captured = capsys.readouterr()
    check_one_line_error(code, captured.out, captured.err, work, before)
    assert "name the same file" in captured.err


@pytest.mark.parametrize(
    "argv",
    [
        ["select", "emb.npy", "--k", "5"],
        ["plan", "emb.npy", "--batch-size", "8", "--workers", "2", "--out", "plan.npz"],
        ["inspect", "plan.npz"],
        ["dedup", "emb.npy"],
        ["audit", "emb.npy"],
    ],
)
def test_out_of_memory_hints_name_only_the_commands_own_options(work, monkeypatch, capsys, argv):
    # was: dedup and audit suggested --neighbors, an option they do not have
    def out_of_memory(args):
        raise MemoryError

    monkeypatch.setattr(cli, f"cmd_{argv[0]}", out_of_memory)
    monkeypatch.chdir(work)
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("batchsel: error: out of memory") and len(err.splitlines()) == 1, err
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    own = {s for action in sub.choices[argv[0]]._actions for s in action.option_strings}
    named = set(re.findall(r"--[a-z][a-z-]*", err))
    assert named <= own, (named - own, err)
    assert named or argv[0] == "inspect", err  # a hint where an option lowers the memory


def test_ranks_reading_one_file_compare_it_without_reading_it(work, monkeypatch):
    # leader mode reads rank 0's file only: the check that every rank's file holds the
    # same data must not read it again when every rank's file is that very file (inode)
    class Twin:  # rank 0 of 2, rank 1 holding exactly what rank 0 holds
        rank, size = 0, 2

        def allgather(self, obj):
            return [obj, obj]

    def read(*args, **kwargs):
        raise AssertionError("the file was read for a digest")

    monkeypatch.setattr(cli_ranks, "array_digest", read)
    monkeypatch.chdir(work)
    args = cli.build_parser().parse_args(["audit", "emb.npy", "--labels", "labels.npy"])
    cli_ranks._check_ranks_agree(Twin(), args, ["embeddings", "labels", "probabilities"])


# -- issue 51: output that is not a terminal; quiet --out; padding; B > N; other formats --------

ESCAPE, FRAME = "\x1b", "\r"


def test_no_progress_frames_or_escape_codes_when_output_is_not_a_terminal(work):
    # was: tqdm's \r frames in a pipe or a log file (stderr not a terminal)
    for argv in (
        ["plan", "emb.npy", "--method", "loss", "--batch-size", "8", "--workers", "2", "--epochs", "3"],
        ["select", "emb.npy", "--k", "5"],
    ):
        argv += ["--out", "plan.npz"] if argv[0] == "plan" else []
        # bytes: text mode would read each \r as a newline
        out = subprocess.run([sys.executable, "-m", "batchsel", *argv], cwd=work, capture_output=True, timeout=300)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip()
        for stream in (out.stdout, out.stderr):
            assert b"\r" not in stream and b"\x1b" not in stream, stream[-500:]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bars_still_shown_on_a_terminal(work, monkeypatch, capsys):
    monkeypatch.chdir(work)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    argv = ["plan", "emb.npy", "--batch-size", "8", "--workers", "2", "--epochs", "3", "--out", "plan.npz"]
    assert cli.main(argv) == 0
    assert "plan:" in terminal.getvalue() and FRAME in terminal.getvalue()
    shown = len(terminal.getvalue())
    assert cli.main([*argv, "--force", "--quiet"]) == 0  # --quiet still turns them off
    assert terminal.getvalue()[shown:] == ""


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_stdout_on_a_terminal_gets_no_colour_reset_at_exit(work):
    # was: ESC[0m at exit, from colorama's exit handler (registered by numba as its first
    # kernel loads) whenever stdout is a terminal -- under mpiexec, where each rank's stdout
    # is a pseudo-terminal, it landed after the results in mpiexec's pipe or file
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "batchsel", "select", "emb.npy", "--k", "5"],
        cwd=work,
        stdout=slave,
        stderr=subprocess.PIPE,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    err = proc.communicate(timeout=300)[1]
    assert proc.returncode == 0, err
    out = b"".join(chunks).decode()
    assert len(out.splitlines()) == 5 and ESCAPE not in out, repr(out)


UNDER_MPIEXEC = [
    ["plan", "emb.npy", "--method", "loss", "--batch-size", "8", "--workers", "2", "--out", "plan.npz"],
    ["plan", "emb.npy", "--method", "submodular", "--batch-size", "32", "--workers", "2", "--out", "plan.npz"],
    ["select", "emb.npy", "--k", "5", "--neighbors", "5"],  # sharded over the ranks, with progress bars
    # --workers left out: the plan is for 1 worker, not the 2 ranks (rank 0 says so)
    ["plan", "emb.npy", "--method", "graph", "--batch-size", "32", "--out", "plan.npz"],
]


@pytest.fixture(scope="module")
def under_mpiexec(data, tmp_path_factory) -> dict:
    """Each of UNDER_MPIEXEC on 2 ranks in a folder of its own, all in one mpiexec launch
    (tests/mp_scripts/cli_ranks_job.py: stdout and stderr are files, not a terminal, as a
    launcher's pipes): {argv index: (folder, exit codes, stdout, stderr of both ranks)}."""
    from common import cli_cases_on_two_ranks
    from test_integrations_mp import MPIEXEC, clean_env

    if not MPIEXEC.exists():
        pytest.skip("no mpiexec")
    cases = []
    for i, argv in enumerate(UNDER_MPIEXEC):
        folder = tmp_path_factory.mktemp(f"mpi{i}")
        for f in data.iterdir():
            if f.is_file():
                shutil.copy(f, folder / f.name)
        cases.append((folder, argv, argv))
    rc, results = cli_cases_on_two_ranks(cases, MPIEXEC, clean_env(), timeout=300)
    assert rc == 0
    return {
        i: (
            folder,
            [results[i, r][0] for r in (0, 1)],
            "\n".join(results[i, r][1] for r in (0, 1)),
            "\n".join(results[i, r][2] for r in (0, 1)),
        )
        for i, (folder, _, _) in enumerate(cases)
    }


@pytest.mark.slow
@pytest.mark.parametrize("i", range(len(UNDER_MPIEXEC)), ids=[" ".join(a[:3]) for a in UNDER_MPIEXEC])
def test_under_mpiexec_no_escape_codes_or_progress_frames(under_mpiexec, i):
    from test_integrations_mp import MPIEXEC, clean_env

    folder, codes, out, err = under_mpiexec[i]
    argv = UNDER_MPIEXEC[i]
    assert codes == [0, 0], err
    assert out.strip(), err
    for stream in (out, err):  # ESC and \r come back written out as text (cli_ranks_job.py)
        assert "\\x1b" not in stream and "\\r" not in stream, stream[-500:]
    if "--out" in argv:  # work that does not shard runs on rank 0 alone: one report, one writer
        assert out.count("epoch 0") <= 1, out
        # a second run refuses to replace the plan without --force: no rank raced another for it
        # (its own launch: rank 0 refuses and exits, which ends the job)
        cmd = [str(MPIEXEC), "--allow-run-as-root", "--oversubscribe", "-n", "2", sys.executable, "-m", "batchsel"]
        again = subprocess.run([*cmd, *argv], cwd=folder, capture_output=True, timeout=300, env=clean_env())
        assert again.returncode == 2 and b"--force" in again.stderr, again.stderr.decode()


@pytest.mark.slow
def test_under_mpiexec_workers_default_to_one_not_the_ranks(under_mpiexec):
    folder, codes, out, err = under_mpiexec[len(UNDER_MPIEXEC) - 1]
    assert codes == [0, 0], err
    assert batchsel.load_plans(folder / "plan.npz")[0].world_size == 1
    assert err.count("--workers not given: the plan is for 1 worker; the 2 mpiexec ranks") == 1, err  # rank 0 only


def test_one_line_errors_carry_no_escape_codes(work, monkeypatch, capsys):
    def coloured(args):
        raise RuntimeError("\x1b[1mFailed in nopython mode\x1b[0m")  # numba's messages are coloured

    monkeypatch.setattr(cli, "cmd_select", coloured)
    assert cli.main(["select", "emb.npy", "--k", "5"]) == 1
    err = capsys.readouterr().err
    assert ESCAPE not in err and "Failed in nopython mode" in err


@pytest.mark.parametrize("out_name, saved", [("picked.npy", "indices"), ("picked.npz", "indices, gains and value")])
def test_select_with_out_prints_one_line_saying_what_was_written(work, monkeypatch, capsys, out_name, saved):
    # was: every one of the K index / gain lines, also with --out
    monkeypatch.chdir(work)
    assert cli.main(["select", "emb.npy", "--k", "15", "--out", out_name, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [out.splitlines()[0]], out
    assert out.startswith(f"wrote {out_name}: {saved} of 15 of {N} examples (facility-location, value ")
    picked = np.load(out_name) if out_name.endswith(".npy") else np.load(out_name)["indices"]
    assert picked.size == 15
    # without --out the selection is the output: one line per example
    assert cli.main(["select", "emb.npy", "--k", "15", "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [int(line.split("\t")[0]) for line in lines] == picked.tolist()


def test_inspect_names_padding_as_padding(work, monkeypatch, capsys):
    # was: "duplicates 2" (or 64) with no word of what they are
    monkeypatch.chdir(work)
    graph = sp.load_npz("graph.npz")
    plans = {
        # N = 400 over 3 ranks: DistributedSampler pads 2 examples
        "random.npz": (batchsel.RandomSelector(N, 32).plan(0, 3), 2, "examples"),
        # 7 batches of 64 over 2 ranks: one batch repeated
        "graph.npz": (batchsel.GraphBlockSelector(graph, 64).plan(0, 2), 64, "batches"),
        "drop_last.npz": (batchsel.RandomSelector(N, 32, drop_last=True).plan(0, 3), 0, None),
    }
    for name, (plan, padding, same) in plans.items():
        path = f"plan_{name}"
        plan.save(path)
        assert cli.main(["inspect", path, "--json", "--quiet"]) == 0
        rep = json.loads(capsys.readouterr().out)["epochs"][0]
        assert rep["duplicates"] == rep["padding"] == padding, name
        assert cli.main(["inspect", path, "--quiet"]) == 0
        epoch_line = capsys.readouterr().out.splitlines()[1]
        if same is None:
            assert epoch_line.endswith("duplicates 0"), epoch_line
        else:
            assert epoch_line.endswith(
                f"duplicates {padding} (DistributedSampler-style padding, so that every rank has the same number "
                f"of {same})"
            ), epoch_line
    # loss-rank draws examples again: those repeats are not called padding
    batchsel.LossRankSelector(N, 32).plan(0, 2).save("loss.npz")
    assert cli.main(["inspect", "loss.npz", "--json", "--quiet"]) == 0
    rep = json.loads(capsys.readouterr().out)["epochs"][0]
    assert rep["duplicates"] > 2 and rep["padding"] is None
    assert cli.main(["inspect", "loss.npz", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "padding" not in out and "drawn more than once" in out


def test_padding_told_apart_from_repeats():
    def plan(*ranks):
        return batchsel.EpochPlan([[np.array(b) for b in rank] for rank in ranks], num_examples=6)

    # a rank evened out with its own first batch; DistributedSampler's wrap-around of 1
    assert cli_inspect._padding(plan([[0, 1], [2, 3]], [[4, 5], [0, 1]]), 2) == 2
    assert cli_inspect._padding(plan([[0, 1], [2]], [[3, 4], [0]]), 1) == 1
    # batches of one example drawn again and again (the last one a copy): not padding alone
    assert cli_inspect._padding(plan([[0], [0], [1], [0]], [[2], [2], [3], [3]]), 4) is None
    assert cli_inspect._padding(plan([[0, 1]], [[2, 3]]), 0) == 0


def test_batch_larger_than_a_workers_share_is_said_larger_than_n_refused_where_the_api_refuses(
    work, monkeypatch, capsys
):
    # was: plan --batch-size 1000 on 400 rows silently made batches of 200 (random), or
    # "batch_size must be <= ..." in the API's words (the other methods)
    monkeypatch.chdir(work)
    argv = ["plan", "emb.npy", "--batch-size", "1000", "--workers", "2", "--out", "plan.npz", "--quiet"]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err == (
        "batchsel: note: --batch-size 1000 is more than the 200 examples each of the 2 worker(s) gets an epoch: "
        "the batches hold 200 at most\n"
    )
    assert "batches of 200..200 examples" in captured.out
    # the Python API takes it too (torch's DistributedSampler + BatchSampler): the same plan
    expected = batchsel.RandomSelector(N, 1000).plan(0, 2)
    assert batchsel.EpochPlan.load("plan.npz").fingerprint() == expected.fingerprint()
    # a batch within a worker's share: nothing to say
    assert cli.main(["plan", "emb.npy", "--batch-size", "200", "--workers", "2", "--out", "p200.npz", "--quiet"]) == 0
    assert capsys.readouterr().err == ""

    before = sorted(p.name for p in work.iterdir())
    # more workers than examples with --drop-last: no batch at all (was: exit 1 on max() of
    # no batch sizes, the empty plan written)
    for extra in ([], ["--json"]):
        code = cli.main(
            ["plan", "emb.npy", "--batch-size", "4", "--workers", "500", "--drop-last", "--out", "e.npz", *extra]
        )
        captured = capsys.readouterr()
        check_one_line_error(code, captured.out, captured.err, work, before)
        assert f"no batch: 500 workers for {N} examples with --drop-last" in captured.err
    for method, build in (
        ("loss", lambda: batchsel.LossRankSelector(N, 1000)),
        ("submodular", lambda: batchsel.SubmodularSelector(load_x(work), 1000)),
        ("graph", lambda: batchsel.GraphBlockSelector(sp.load_npz("graph.npz"), 1000)),
    ):
        with pytest.raises(ValueError, match="batch_size"):  # the API refuses it
            build()
        code = cli.main([*argv[:-3], "--out", "other.npz", "--method", method, "--quiet"])
        captured = capsys.readouterr()
        check_one_line_error(code, captured.out, captured.err, work, before)
        assert f"--batch-size 1000 is larger than the {N} examples of 'emb.npy'" in captured.err, captured.err


def test_other_file_types_get_a_conversion_hint(work, monkeypatch, capsys):
    # was: "'emb.csv': unknown file type (expected .npy, .npz or .pt)", no hint how to convert it
    monkeypatch.chdir(work)
    x = load_x(work)
    np.savetxt("table.csv", x, delimiter=",")
    np.savetxt("table.tsv", x, delimiter="\t")
    np.savetxt("table.txt", x)
    np.savetxt("labels.csv", np.load("labels.npy"), delimiter=",", fmt="%d")
    (work / "table.h5").write_bytes(b"\x89HDF\r\n\x1a\n")
    (work / "graph.csv").write_text("0,1\n1,2\n")
    cases = {
        "csv": (["select", "table.csv", "--k", "3"], "np.loadtxt('table.csv', delimiter=',', dtype='float32')"),
        "tsv": (["select", "table.tsv", "--k", "3"], "np.loadtxt('table.tsv', delimiter='\\t', dtype='float32')"),
        "txt": (["dedup", "table.txt"], "np.loadtxt('table.txt', dtype='float32')"),
        "csv, rows only": (
            ["plan", "table.csv", "--batch-size", "8", "--workers", "2", "--out", "plan.npz"],
            "np.loadtxt('table.csv'",
        ),
        "csv labels": (
            ["plan", "emb.npy", "--method", "coreset", "--labels", "labels.csv", "--batch-size", "8", "--workers", "2"]
            + ["--out", "plan.npz"],
            "np.save('labels.npy', np.loadtxt('labels.csv', delimiter=','",
        ),
        "csv streamed": (["select", "table.csv", "--k", "3", "--stream"], "np.loadtxt('table.csv'"),
        "hdf5": (["select", "table.h5", "--k", "3"], "save the array with numpy.save('table.npy', array)"),
        "csv graph": (
            ["plan", "emb.npy", "--method", "graph", "--graph", "graph.csv", "--batch-size", "8", "--workers", "2"]
            + ["--out", "plan.npz"],
            "scipy.sparse.save_npz('graph.npz', matrix)",
        ),
    }
    before = sorted(p.name for p in work.iterdir())
    for case, (argv, hint) in cases.items():
        code = cli.main([*argv, "--quiet"])
        captured = capsys.readouterr()
        check_one_line_error(code, captured.out, captured.err, work, before)
        assert hint in captured.err, (case, captured.err)
    # the hint runs as given and the command then reads the file
    code = cli.main(["select", "table.tsv", "--k", "3", "--quiet"])
    command = re.search(r'python -c "(.*)"', capsys.readouterr().err).group(1)
    subprocess.run([sys.executable, "-c", command], cwd=work, check=True, timeout=120)
    np.testing.assert_array_equal(np.load("table.npy"), x)
    assert cli.main(["select", "table.npy", "--k", "3", "--quiet"]) == 0
