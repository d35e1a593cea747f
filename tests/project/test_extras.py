"""A missing optional dependency names the extra that installs it (an ImportError in Python,
exit 2 with one line on the command line), and the old import paths leave
``importlib.reload`` working."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from batchsel import cli
from batchsel.cli import errors


def missing(monkeypatch, *names: str, reimport: str | None = None) -> None:
    """Make ``import NAME`` fail for every name (as when it is not installed), and forget
    ``reimport`` so that importing it runs its imports again."""
    for name in names:
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            monkeypatch.delitem(sys.modules, loaded)
        monkeypatch.setitem(sys.modules, name, None)
    if reimport is not None:
        monkeypatch.delitem(sys.modules, reimport, raising=False)


@pytest.mark.parametrize(
    "module, blocked, extra",
    [
        ("batchsel.integrations.lightning", ("lightning", "pytorch_lightning"), "lightning"),
        ("batchsel.integrations.hf", ("transformers",), "hf"),
    ],
)
def test_integrations_name_their_extra(monkeypatch, module, blocked, extra):
    # before: No module named 'pytorch_lightning' / 'transformers', no word of the extra
    missing(monkeypatch, *blocked, reimport=module)
    with pytest.raises(ModuleNotFoundError, match=rf"pip install 'batchsel\[{extra}\]'"):
        importlib.import_module(module)


@pytest.fixture
def emb(tmp_path):
    path = tmp_path / "emb.npy"
    np.save(path, np.random.default_rng(0).normal(size=(60, 4)).astype(np.float32))
    return path


def one_line(code: int, capsys) -> str:
    captured = capsys.readouterr()
    assert code == 2, captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("batchsel: error: ") and "Traceback" not in captured.err
    assert captured.out == ""
    return lines[0]


def test_plan_method_graph_without_pymetis_exits_2_naming_the_extra(monkeypatch, capsys, emb, tmp_path):
    # before: "batchsel: internal error: ImportError: ..." and exit 1, after building the graph
    missing(monkeypatch, "pymetis")
    out = tmp_path / "plan.npz"
    code = cli.main(
        ["plan", str(emb), "--method", "graph", "--batch-size", "10", "--workers", "2", "--out", str(out), "--quiet"]
    )
    assert "pip install 'batchsel[graph]'" in one_line(code, capsys) and not out.exists()


@pytest.mark.parametrize("command", ["audit", "inspect"])
def test_plot_without_matplotlib_names_the_extra_in_one_sentence(monkeypatch, capsys, emb, tmp_path, command):
    # before: "--plot needs matplotlib is not installed: ..."
    missing(monkeypatch, "matplotlib")
    if command == "inspect":
        from batchsel import RandomSelector

        RandomSelector(60, 10).plan(0, 1).save(tmp_path / "plan.npz")
        args = ["inspect", str(tmp_path / "plan.npz")]
    else:
        args = ["audit", str(emb)]
    line = one_line(cli.main([*args, "--plot", str(tmp_path / "fig.png"), "--quiet"]), capsys)
    assert line == "batchsel: error: --plot needs matplotlib, which is not installed: pip install 'batchsel[plot]'"


def test_an_import_error_of_an_extra_mid_command_exits_2(capsys):
    # a library ImportError that names the extra, or a bare one of an extra's module: the user installs it
    named = ImportError("graph blocks partition with METIS: pip install 'batchsel[graph]' (pymetis)")
    assert errors.exit_code(named, False, None) == 2
    assert "pip install 'batchsel[graph]'" in capsys.readouterr().err
    bare = ModuleNotFoundError("No module named 'matplotlib.pyplot'", name="matplotlib.pyplot")
    assert errors.exit_code(bare, False, None) == 2
    assert (
        capsys.readouterr().err == "batchsel: error: matplotlib.pyplot is not installed: pip install 'batchsel[plot]'\n"
    )
    # any other module missing is a bug (batchsel's own, or its install's): exit 1
    assert errors.exit_code(ModuleNotFoundError("No module named 'foo'", name="foo"), False, None) == 1
    assert "internal error" in capsys.readouterr().err


RELOAD = textwrap.dedent("""
    import importlib, warnings
    warnings.simplefilter("ignore", DeprecationWarning)
    import batchsel.optimizers as old
    import batchsel.functions.facility_location
    import batchsel.submodular.optimizers as new
    for m in (new, batchsel.submodular.functions.facility_location):
        assert m.__name__ == m.__spec__.name, (m.__name__, m.__spec__.name)
    before = new.maximize
    assert importlib.reload(new) is new
    assert new.maximize is not before, "reload did not run the module again"
    assert new.__name__ == new.__spec__.name == "batchsel.submodular.optimizers", (new.__name__, new.__spec__.name)
    assert importlib.reload(old) is old  # the old path's stub: re-run, it takes the new module's names again
    assert old.__name__ == old.__spec__.name == "batchsel.optimizers"
    assert new.__spec__.name == "batchsel.submodular.optimizers"
    from batchsel.optimizers import maximize
    assert maximize is new.maximize
    print("reload ok")
""")


def test_reload_reruns_a_moved_module_after_its_old_path_was_imported():
    # before: reload re-ran nothing and renamed the module batchsel.optimizers (the old
    # path's spec had replaced its own); IPython's autoreload relies on reload. The old path
    # is now a stub module of its own
    out = subprocess.run([sys.executable, "-c", RELOAD], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "reload ok" in out.stdout, out.stderr[-3000:]
