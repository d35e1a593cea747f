"""Fault injection: the failures a user can provoke, and what they see instead of a
segfault, a hang, ranks with different results or a destroyed input file.

Each case here failed on the code before its fix (reliability round 3); docs/design/reliability.md's
"Reliability" table lists them with the earlier rounds' guarantees. Multi-rank cases run
under mpiexec on 2 ranks and end in seconds (the launcher is killed on a timeout)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from paths import MP_SCRIPTS

# isort: split
from common import same_state  # in tests/mp_scripts

import batchsel
from batchsel import cli


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the command line never replaces its input ------------------------------------------


@pytest.fixture
def emb(tmp_path) -> Path:
    x = np.random.default_rng(0).standard_normal((60, 4)).astype(np.float32)
    np.save(tmp_path / "emb.npy", x)
    np.save(tmp_path / "labels.npy", np.arange(60) % 3)
    return tmp_path / "emb.npy"


def refused(argv: list[str], capsys) -> str:
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize("alias", ["same", "symlink", "hardlink"])
@pytest.mark.parametrize(
    "command",
    [
        ["select", "{emb}", "--k", "5", "--out", "{out}", "--force"],
        ["select", "{emb}", "--k", "5", "--stream", "--out", "{out}", "--force"],
        ["plan", "{emb}", "--batch-size", "8", "--workers", "2", "--out", "{out}", "--force"],
    ],
)
def test_an_output_that_is_the_input_is_refused(emb, alias, command, capsys):
    out = emb.with_name("out.npy" if command[0] == "select" else "out.npz")
    if alias == "same":
        out = emb
        if command[0] == "plan":  # a plan's name must end with .npz: an .npz input
            np.savez(emb.with_name("emb.npz"), x=np.load(emb))
            emb = out = emb.with_name("emb.npz")
    elif alias == "symlink":
        out.symlink_to(emb)
    else:
        os.link(emb, out)
    before = digest(emb)
    err = refused([a.format(emb=emb, out=out) for a in command] + ["--quiet"], capsys)
    assert "is the input EMB" in err
    assert digest(emb) == before


def test_plan_inputs_other_than_the_embeddings_are_protected_too(emb, capsys):
    labels = emb.with_name("labels.npz")
    np.savez(labels, y=np.arange(60) % 3)
    before = digest(labels)
    err = refused(
        [
            "plan",
            str(emb),
            "--method",
            "coreset",
            "--labels",
            str(labels),
            "--batch-size",
            "8",
            "--workers",
            "2",
            "--out",
            str(labels),
            "--force",
            "--quiet",
        ],
        capsys,
    )
    assert "is the input --labels" in err and digest(labels) == before


def test_a_plan_name_without_npz_is_refused(emb, capsys):
    out = emb.with_name("plan")
    err = refused(["plan", str(emb), "--batch-size", "8", "--workers", "2", "--out", str(out), "--quiet"], capsys)
    assert ".npz" in err and not out.exists() and not out.with_suffix(".npz").exists()


# -- ranks that disagree: the same clear error on every rank, within seconds -------------

JOB = MP_SCRIPTS / "fault_job.py"
from test_integrations_mp import MPIEXEC, clean_env  # noqa: E402

needs_mpi = pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec")


def mpi_case(case: str, ranks: int = 2, timeout: float = 120) -> tuple[int, str, float]:
    import signal
    import time

    cmd = [
        str(MPIEXEC),
        "--allow-run-as-root",
        "--oversubscribe",
        "-n",
        str(ranks),
        sys.executable,
        str(JOB),
        *case.split(),
    ]
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"{case} hung for {timeout} s:\n{proc.communicate()[0][-3000:]}")
    return proc.returncode, output, time.monotonic() - start


# the cases where every rank raises and the job ends normally: one launch runs them all,
# each case on a communicator of its own (fault_job.py), in this order
RAISING = [
    "sharded-rows",
    "sharded-dim",
    "greedi-rows",
    "greedi-embeddings-dim",
    "sharded-rows-tiling",
    "greedi-dim",
    "sharded-nan",
    "sharded-nan-leader",
    "observe-skip",
]


@pytest.fixture(scope="module")
def raising_job() -> tuple[int, str]:
    if not MPIEXEC.exists():
        pytest.skip("no mpiexec")
    rc, output, _ = mpi_case(" ".join(RAISING), timeout=180)
    return rc, output


@pytest.fixture
def raised_on_every_rank(raising_job):
    def raised(case: str, ranks: int = 2) -> str:
        """The job ended normally, every rank having raised the same error in ``case``; returns it."""
        rc, output = raising_job
        mine = [line.split(": ", 1)[1] for line in output.splitlines() if line.startswith(f"{case}: ")]
        lines = sorted(line for line in mine if line.startswith("rank ") and " raised " in line)
        assert rc == 0 and len(lines) == ranks, output[-3000:]
        messages = {line.split(" raised ", 1)[1] for line in lines}
        assert len(messages) == 1, lines  # the same error everywhere: no rank goes on alone
        return messages.pop()

    return raised


@needs_mpi
@pytest.mark.parametrize(
    "case, held",
    [
        ("sharded-rows", ["rank 0: shape=(1000, 8)", "rank 1: shape=(900, 8)"]),
        ("sharded-dim", ["rank 0: shape=(1000, 8)", "rank 1: shape=(1000, 9)"]),
        ("greedi-rows", ["rank 0: function=FacilityLocation, n=300", "rank 1: function=FacilityLocation, n=250"]),
        ("greedi-embeddings-dim", ["rank 0: shape=(300, 4)", "rank 1: shape=(300, 5)"]),
        ("sharded-rows-tiling", ["rank 0: rows 0..4 of 10 columns", "rank 1: rows 3..9 of 10 columns"]),
    ],
)
def test_ranks_with_data_of_other_shapes_fail_alike_before_any_work(case, held, raised_on_every_rank):
    message = raised_on_every_rank(case)
    assert message.startswith("RuntimeError: the ranks") and all(h in message for h in held), message


@needs_mpi
def test_ranks_whose_functions_differ_never_return_different_selections(raised_on_every_rank):
    # same n on every rank, other data: only the results can tell (before: two selections)
    message = raised_on_every_rank("greedi-dim")
    assert "RuntimeError: the ranks disagree on the GreeDi result" in message, message


@needs_mpi
def test_a_nan_in_a_shard_is_reported_by_its_global_row(raised_on_every_rank):
    message = raised_on_every_rank("sharded-nan")
    assert "row 900" in message and "rank 1" in message, message
    # one machine (the default there): rank 0 reads and checks every row, every rank raises
    message = raised_on_every_rank("sharded-nan-leader")
    assert "row 900" in message and "ValueError" in message, message


@needs_mpi
def test_a_rank_that_skips_an_observe_call_fails_naming_the_calls(raised_on_every_rank):
    message = raised_on_every_rank("observe-skip")
    assert "rank 0: epoch 0 call 8" in message and "rank 1: epoch 1 call 1" in message, message


@needs_mpi
def test_a_rank_that_stops_observing_ends_the_job_after_the_timeout():
    rc, output, seconds = mpi_case("observe-stop")  # rank 1 stops, alive
    assert rc != 0 and "feedback all-gather" in output and "waited 3 s" in output, output[-3000:]
    assert seconds < 60, seconds


@needs_mpi
@pytest.mark.parametrize("case", ["exit-3", "exit-0"])
def test_a_rank_that_calls_sys_exit_mid_epoch_ends_the_job_at_once_naming_it(case):
    # SystemExit never reaches the abort hook: rank 0 waited in the feedback all-gather for
    # the sampler's timeout (1800 s), rank 1 in MPI_Finalize. The launcher is killed well before.
    rc, output, seconds = mpi_case(case, timeout=60)
    assert rc != 0 and "feedback all-gather" in output and "rank 1 exited" in output, output[-3000:]
    assert "waited 1800 s" not in output and seconds < 60, seconds


STATE_CALL_JOB = MP_SCRIPTS / "state_call_job.py"


def test_a_state_call_only_rank_0_makes_fails_within_its_timeout_under_torchrun():
    """``if rank == 0: sampler.state_dict(all_ranks=True)``: before, rank 0 waited in the
    all-gather for gloo's 30 minutes without a word; now it raises after the call's
    timeout (3 s here), naming the call and the rank that did not arrive."""
    from common import free_port, run_command

    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1"]
    cmd += ["--master_port", str(free_port()), str(STATE_CALL_JOB), "torch"]
    output = run_command(cmd, clean_env(), timeout=120)
    found = re.search(r"rank 0 raised RuntimeError after ([\d.]+) s: (.*)", output)
    assert found, output[-3000:]
    seconds, message = float(found.group(1)), found.group(2)
    assert "state_dict(all_ranks=True)" in message and "1" in message.split("did not arrive")[-1], message
    assert seconds < 20, seconds


@needs_mpi
def test_a_state_call_only_rank_0_makes_ends_the_job_within_its_timeout_under_mpiexec():
    import time

    start = time.monotonic()
    cmd = [
        str(MPIEXEC),
        "--allow-run-as-root",
        "--oversubscribe",
        "-n",
        "2",
        sys.executable,
        str(STATE_CALL_JOB),
        "mpi",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=clean_env())
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert "state_dict(all_ranks=True)" in output and "waited 3 s" in output, output[-3000:]
    assert time.monotonic() - start < 50  # rank 1 sleeps 60 s: the abort ended it


def test_accelerate_prepare_of_the_sampler_is_refused_before_the_first_step():
    """accelerate's BatchSamplerShard would give each rank every second of its batches:
    104 of 200 examples per epoch, silently. Both ranks must refuse instead."""
    from common import run_command
    from frameworks import torchrun

    env = clean_env()
    cmd = torchrun(str(MP_SCRIPTS / "accelerate_job.py"))
    output = run_command(cmd, env, timeout=180)
    # the ranks' lines may interleave: count the reports, not the lines
    assert sorted(re.findall(r"rank (\d) raised RuntimeError: accelerate's BatchSamplerShard", output)) == ["0", "1"], (
        output[-3000:]
    )
    assert "saw" not in output and "Leave the DataLoader out of accelerator.prepare" in output


# -- label ids, state files and error wording -------------------------------------------


def blobs(n: int = 90) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    y = np.arange(n) % 3
    return (rng.standard_normal((n, 4)) + 4 * y[:, None]).astype(np.float32), y


@pytest.mark.parametrize("big", [200_000, 2**40])
def test_irreducible_loss_with_large_label_ids_costs_nothing_extra(big):
    from batchsel import IrreducibleLoss

    x, y = blobs()
    ids = np.array([0, 7, big])[y]  # three classes with large, sparse ids
    il = IrreducibleLoss("knn").fit(x, ids)
    plain = IrreducibleLoss("knn").fit(x, y)
    assert il.n_classes_ == 3 and il.classes_.tolist() == [0, 7, big]
    assert np.array_equal(il.losses_, plain.losses_)  # the same model: only the ids differ
    assert set(il.predictions_.tolist()) <= {0, 7, big} and il.accuracy_ == plain.accuracy_


def test_a_torch_irreducible_loss_model_with_the_wrong_outputs_is_refused_before_training():
    from batchsel import IrreducibleLoss

    x, y = blobs()
    trained = []

    def factory():
        trained.append(1)
        return torch.nn.Linear(4, 2)  # 2 outputs, 3 classes

    with pytest.raises(ValueError, match=r"one output per class: 3 \(the labels' classes \[0, 1, 2\]"):
        IrreducibleLoss(factory, folds=2, epochs=1).fit(x, y)
    assert len(trained) == 1  # refused at the first model, before any step


def test_a_filter_state_with_missing_keys_names_them():
    f = batchsel.CandidateFilter(2, 2)
    state = f.state_dict()
    del state["counters"]["kept_"]
    state["extra"] = 1
    with pytest.raises(ValueError, match=r"missing keys \['counters.kept_'\], unexpected keys \['extra'\]"):
        batchsel.CandidateFilter(2, 2).load_state_dict(state)


def test_diversity_with_huge_embeddings_names_the_embeddings():
    f = batchsel.CandidateFilter(2, 2, diversity=1.0)
    emb = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32) * 1e30
    with pytest.raises(ValueError, match="^embeddings: row squared norms reach .* rescale the embeddings"):
        f(np.arange(4), np.zeros((4, 3)), np.zeros(4, np.int64), embeddings=emb)


def test_feedback_that_is_not_numbers_is_reported_as_such():
    sel = batchsel.LossRankSelector(10, 2)
    with pytest.raises(TypeError, match="losses .*must be numeric.*dtype object"):
        sel.observe([0, 1], losses=[None, 1.0])


# -- every state_dict loads with torch.load(weights_only=True) ---------------------------


def _stateful() -> dict[str, object]:
    """One instance, with some state in it, per class of the library that has state_dict."""
    from batchsel.integrations import SelectionBatchSampler
    from batchsel.integrations.lightning import BatchselCallback
    from batchsel.selectors import (
        CoresetSelector,
        GraphBlockSelector,
        InfoBatchSelector,
        LossRankSelector,
        RandomSelector,
        ScorePruningSelector,
        SubmodularSelector,
    )

    x, y = blobs(60)
    graph = batchsel.EmbeddingIndex(x, metric="l2", progress=False).knn_graph(k=5)

    def observed(sel):
        sel.observe(np.arange(8), losses=np.linspace(0, 1, 8), logits=np.eye(3)[y[:8]] * 2.0, embeddings=x[:8])
        return sel

    def auto():
        sel = batchsel.AutoSelector(60, 8, labels=y)
        batches = sel.iter_batches(0)
        next(batches)  # AutoSelector takes feedback only once a batch was drawn
        return observed(sel)

    def sampler():
        s = SelectionBatchSampler(LossRankSelector(60, 8), rank=0, world_size=1)
        batch = next(iter(s))
        s.observe(batch, losses=np.ones(len(batch)))
        return s

    def submodular():
        sel = SubmodularSelector(x, 8)
        next(sel.iter_batches(0))
        return observed(sel)

    def candidate_filter():
        f = batchsel.CandidateFilter(2, 2)
        f(np.arange(4), np.eye(3)[y[:4]], y[:4])
        return f

    def cluster_loader():
        from torch_geometric.data import Data

        from batchsel.integrations.pyg import ClusterData, ClusterLoader

        ring = torch.arange(24)
        data = Data(x=torch.randn(24, 2), edge_index=torch.stack([ring, (ring + 1) % 24]))
        loader = ClusterLoader(ClusterData(data, 6, log=False), batch_size=2, shuffle=True, rank=0, world_size=1)
        next(iter(loader))
        return loader

    def saint(kind):
        from torch_geometric.data import Data

        from batchsel.integrations import pyg

        ring = torch.arange(24)
        data = Data(x=torch.randn(24, 2), edge_index=torch.stack([ring, (ring + 1) % 24]))
        cls = {
            "node": pyg.GraphSAINTNodeSampler,
            "edge": pyg.GraphSAINTEdgeSampler,
            "walk": pyg.GraphSAINTRandomWalkSampler,
        }[kind]
        extra = {"walk_length": 2} if kind == "walk" else {}
        loader = cls(data, batch_size=4, num_steps=3, log=False, rank=0, **extra)
        next(iter(loader))
        return loader

    def stream():
        examples = batchsel.StreamBatches(
            lambda: ({"id": f"e{i}", "x": float(i)} for i in range(40)), 8, buffer_size=16
        )
        batch = next(iter(examples))
        examples.observe(batch, losses=np.ones(8))
        return examples

    def cluster_batches():
        from batchsel.integrations.pyg import ClusterBatchSelector

        return ClusterBatchSelector(6, 2)

    return {
        "ClusterLoader": cluster_loader,
        "ClusterBatchSelector": cluster_batches,
        "GraphSAINTNodeSampler": lambda: saint("node"),
        "GraphSAINTEdgeSampler": lambda: saint("edge"),
        "GraphSAINTRandomWalkSampler": lambda: saint("walk"),
        "CandidateFilter": candidate_filter,
        "BatchselCallback": lambda: BatchselCallback(sampler()),
        "SelectionBatchSampler": sampler,
        "RandomSelector": lambda: RandomSelector(60, 8),
        "CoresetSelector": lambda: CoresetSelector(x, y, 4, fraction=0.5),
        "GraphBlockSelector": lambda: GraphBlockSelector(graph, 8),
        "LossRankSelector": lambda: observed(LossRankSelector(60, 8)),
        "AutoSelector": auto,
        "InfoBatchSelector": lambda: observed(InfoBatchSelector(60, 8, epochs=4)),
        "ScorePruningSelector": lambda: observed(ScorePruningSelector(y, 8, epochs=4)),
        "SubmodularSelector": submodular,
        "SieveStreaming": lambda: batchsel.SieveStreaming("facility-location", 5).partial_fit(x[:30]),
        "StreamBatches": stream,
        "BucketSelector": lambda: batchsel.BucketSelector(np.arange(1, 61), batch_size=8),
        "CostGroupedSelector": lambda: batchsel.CostGroupedSelector(
            observed(LossRankSelector(60, 8)), np.arange(1, 61), window=2
        ),
        "StepBalancedSelector": lambda: batchsel.StepBalancedSelector(
            observed(InfoBatchSelector(60, 8, epochs=4)), np.arange(1, 61), accumulation=2
        ),
    }


def _classes_with_state_dict() -> set[str]:
    import importlib
    import inspect
    import pkgutil

    import batchsel.integrations as integrations

    found: dict[str, type] = {}
    for package in (batchsel, integrations):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if module.name.endswith("__main__"):
                continue
            mod = importlib.import_module(module.name)
            for name, cls in inspect.getmembers(mod, inspect.isclass):
                if (
                    cls.__module__ == mod.__name__
                    and hasattr(cls, "state_dict")
                    and not issubclass(cls, torch.nn.Module)
                ):  # torch's own state_dict
                    found[name] = cls
    # bases (Selector, OnlineSelector, ...) are covered by their concrete classes
    return {n for n, c in found.items() if not any(o is not c and issubclass(o, c) for o in found.values())}


def test_every_class_with_a_state_dict_is_tested_here():
    # the leaves must all be here; a concrete class with a subclass (LossRankSelector) may be too
    assert _classes_with_state_dict() <= set(_stateful())


@pytest.mark.parametrize("name", sorted(_stateful()))
def test_state_dict_loads_with_weights_only_and_restores(name):
    import io

    build = _stateful()[name]
    original = build()
    state = original.state_dict()
    buf = io.BytesIO()
    torch.save(state, buf)
    loaded = torch.load(io.BytesIO(buf.getvalue()), weights_only=True)
    fresh = build() if name != "SieveStreaming" else batchsel.SieveStreaming("facility-location", 5)
    fresh.load_state_dict(loaded)
    assert same_state(fresh.state_dict(), state)


# -- earlier rounds: interrupted writes and a dead rank ------------------------------------


@pytest.fixture
def work(tmp_path) -> Path:
    """A folder with the CLI's inputs (the digits subset tests/cli/test_cli.py uses)."""
    from sklearn.datasets import load_digits

    np.save(tmp_path / "emb.npy", load_digits().data[:400].astype(np.float32))
    return tmp_path


def check_one_line_error(code: int, out: str, err: str, folder: Path, before: list[str]) -> None:
    from test_cli import check_one_line_error as check

    check(code, out, err, folder, before)


def test_ctrl_c_during_write_leaves_no_file(work, monkeypatch, capsys):
    def interrupted(file, **arrays):
        file.write(b"half a plan")
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", interrupted)
    code = cli.main(
        [
            "plan",
            str(work / "emb.npy"),
            "--batch-size",
            "50",
            "--workers",
            "2",
            "--out",
            str(work / "plan.npz"),
            "--quiet",
        ]
    )
    assert code == 130 and "interrupted" in capsys.readouterr().err
    assert not any(p.name.startswith(("plan.npz", ".plan.npz")) for p in work.iterdir())


def test_sigterm_during_a_write_leaves_no_temporary_file(work):
    # the default action of SIGTERM kills the process inside the write: the temporary
    # file stayed behind. In a subprocess, so that the old behaviour cannot kill pytest.
    code = (
        "import os, signal, sys, numpy as np\n"
        "from batchsel import cli\n"
        "real = np.savez\n"
        "def savez(f, **arrays):\n"
        "    f.write(b'half a plan')\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    real(f, **arrays)\n"
        "np.savez = savez\n"
        "sys.exit(cli.main(['plan', 'emb.npy', '--batch-size', '50', '--workers', '2', '--out', 'plan.npz', "
        "'--quiet']))\n"
    )
    before = sorted(p.name for p in work.iterdir())
    out = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True, text=True, timeout=300)
    assert out.returncode == 143 and "terminated" in out.stderr, (out.returncode, out.stderr)
    assert sorted(p.name for p in work.iterdir()) == before


def test_failed_save_graph_leaves_no_plan(work, monkeypatch, capsys):
    def disk_full(file, matrix, **kwargs):
        file.write(b"half a graph")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sp, "save_npz", disk_full)
    before = sorted(p.name for p in work.iterdir())
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
            "--save-graph",
            str(work / "knn.npz"),
            "--out",
            str(work / "plan.npz"),
            "--quiet",
        ]
    )
    captured = capsys.readouterr()
    check_one_line_error(code, captured.out, captured.err, work, before)  # no plan.npz, no knn.npz
    assert "No space left" in captured.err


@pytest.mark.slow
@needs_mpi
def test_a_dead_rank_ends_the_job_naming_it(tmp_path):
    from test_sharded import launch

    output, seconds = launch(tmp_path, "--die-rank", "1", succeed=False)
    assert seconds < 60, (seconds, output[-3000:])
    assert "survived" not in output
    assert ",1]" in output and "Exit code:    3" in output, output[-3000:]  # Open MPI names rank 1


# -- under mpiexec, ranks given other files or options: exit 2 on every rank (issue 46) ----


def _rank_inputs(folder: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((60, 4)).astype(np.float32)
    np.save(folder / "emb.npy", x)
    np.save(folder / "emb_short.npy", x[:50])  # another shape
    other = x.copy()
    other[37, 2] += 1.0  # the same shape, one value changed
    np.save(folder / "emb_other.npy", other)
    y = np.arange(60) % 3
    np.save(folder / "labels.npy", y)
    np.save(folder / "labels_other.npy", np.roll(y, 1))


DEDUP = ["dedup", "{emb}", "--out", "keep.npy", "--groups", "groups.npy"]
AUDIT = ["audit", "emb.npy", "--labels", "{labels}", "--issues", "issues.npy"]
SELECT = ["select", "{emb}", "--k", "5", "--neighbors", "5", "--out", "picked.npy"]
PLAN = ["plan", "{emb}", "--method", "graph", "--batch-size", "10", "--workers", "2", "--out", "plan.npz"]

RANK_CASES = [
    # was: "internal error: RuntimeError: the ranks disagree ...", exit 1
    (DEDUP, {"emb": "emb_short.npy"}, "EMB files of different shapes (rank 0: 'emb.npy' of shape (60, 4); rank 1"),
    (SELECT, {"emb": "emb_short.npy"}, "EMB files of different shapes"),
    # was: exit 0, rank 1's file never read (rank 0 alone reads the rows on one machine)
    (DEDUP, {"emb": "emb_other.npy"}, "different EMB data of the same shape (60, 4) (rank 0: 'emb.npy'; rank 1"),
    (PLAN, {"emb": "emb_other.npy"}, "different EMB data of the same shape"),
    # was: exit 0, each rank with its own labels
    (AUDIT, {"labels": "labels_other.npy"}, "different --labels data of the same shape (60,)"),
    # was: exit 2 on rank 1 only (rank 0 killed without a word)
    (DEDUP, {"emb": "nowhere.npy"}, "no such file 'nowhere.npy' (on rank 1)"),
    (DEDUP, {"extra": ["--k", "5"]}, "different options (--k 8 on rank 0, 5 on rank 1)"),
]


@pytest.fixture(scope="module")
def cli_cases(tmp_path_factory) -> tuple[list[tuple[Path, list[str]]], int, dict]:
    """Every case's ``batchsel`` command lines under one mpiexec launch (an MPMD launch: each
    rank its own command line, as each of several machines its own files), each case in a
    folder of its own; the folders with their files before the run, the launcher's exit
    code and each (case, rank)'s exit code, stdout and stderr."""
    if not MPIEXEC.exists():
        pytest.skip("no mpiexec")
    from common import cli_cases_on_two_ranks

    root = tmp_path_factory.mktemp("ranks")
    cases, before = [], []
    fill = {"emb": "emb.npy", "labels": "labels.npy"}
    for i, (argv, rank1, _) in enumerate(RANK_CASES):
        folder = root / str(i)
        folder.mkdir()
        _rank_inputs(folder)
        argv0 = [a.format(**fill) for a in argv] + ["--quiet"]
        argv1 = [a.format(**{**fill, **rank1}) for a in argv] + rank1.get("extra", []) + ["--quiet"]
        cases.append((folder, argv0, argv1))
        before.append((folder, sorted(p.name for p in folder.iterdir())))
    rc, results = cli_cases_on_two_ranks(cases, MPIEXEC, clean_env(), timeout=180)
    return before, rc, results


@needs_mpi
@pytest.mark.parametrize("case", range(len(RANK_CASES)), ids=[m for _, _, m in RANK_CASES])
def test_ranks_given_other_files_or_options_exit_2_on_every_rank(cli_cases, case):
    before, rc, results = cli_cases
    match = RANK_CASES[case][2]
    assert rc == 0  # the launch: every case ran to its end on every rank
    (code0, out0, err0), (code1, out1, err1) = results[case, 0], results[case, 1]
    assert code0 == code1 == 2, results[case, 0] + results[case, 1]  # exit 2 on each rank
    said = [line for text in (out0, err0, out1, err1) for line in text.splitlines() if line.startswith("batchsel")]
    assert len(said) == 2 and said[0] == said[1], said  # the same line on each rank
    assert said[0].startswith("batchsel: error: ") and match in said[0], said
    assert "Traceback" not in out0 + err0 + out1 + err1
    folder, files = before[case]
    assert sorted(p.name for p in folder.iterdir()) == files  # no output
