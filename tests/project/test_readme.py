"""The README's and the docs' code blocks run as written.

``python`` blocks are executed; ``console`` blocks are run line by line in a shell, in a
fresh folder holding a link to ``examples/``, with the venv's ``batchsel`` and ``mpiexec``
first on the PATH. Lines that install or call ``make`` (the set-up) are what CI itself
runs, so they are skipped here; ``py`` blocks are marked excerpts of a runnable script
under ``examples/`` (run by tests/project/test_examples.py). A console line that another test
runs as written (RUN_ELSEWHERE) is not run twice.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest
from paths import REPO as ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# the set-up: installs, make, entering the venv (the test runs with the venv's bin/ first on PATH)
SETUP = re.compile(r"^(make |pip install |source \.venv/bin/activate)")


def blocks(page: pathlib.Path, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", page.read_text(), flags=re.S)


def test_readme_has_the_recommended_loop_in_its_first_screenful():
    text = (ROOT / "README.md").read_text()
    before, first = blocks(ROOT / "README.md", "python")[:2]
    assert "shuffle=True" in before
    assert "SelectionBatchSampler(AutoSelector(" in first and "sampler.observe(" in first
    assert text.index(first) < len("\n".join(text.splitlines()[:60])), "the loop is not near the top"
    assert len(text.splitlines()) <= 200


def test_readme_cli_block_enters_the_venv_before_its_first_command():
    # before: `batchsel ...` / `mpiexec ...` right after `make demo`: command not found (the venv
    # that make made is never activated)
    cli = [b for b in blocks(ROOT / "README.md", "console") if "batchsel select" in b]
    assert len(cli) == 1
    lines = cli[0].strip().splitlines()
    assert lines[0] == "source .venv/bin/activate" and SETUP.match(lines[0])


def test_readme_install_gets_torchs_cpu_build_before_the_package():
    # before: `pip install .` alone pulled PyPI's CUDA torch and 15 nvidia-* packages (a 5.9 GB venv)
    lines = [line.split("#")[0].strip() for b in blocks(ROOT / "README.md", "console") for line in b.splitlines()]
    torch_cpu = lines.index("pip install torch --index-url https://download.pytorch.org/whl/cpu")
    assert lines.index("pip install .") == torch_cpu + 1
    makefile = (ROOT / "Makefile").read_text()
    assert "TORCH_INDEX ?= https://download.pytorch.org/whl/cpu" in makefile


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p, "python")], ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for block in blocks(page, "python"):
        exec(compile(block, str(page), "exec"), {"__name__": "docs"})


# console lines another test runs as written (and checks more of): not run twice
RUN_ELSEWHERE = {
    # tests/project/test_examples.py::test_train_ddp_runs_in_one_process[loss] (its metrics too)
    "python examples/train_ddp.py --method loss --quick",
}


def to_run(line: str) -> bool:
    return not SETUP.match(line) and line.split("#")[0].strip() not in RUN_ELSEWHERE


CONSOLE_PAGES = [p for p in PAGES if any(to_run(line) for b in blocks(p, "console") for line in b.strip().splitlines())]


def test_lines_run_elsewhere_are_in_the_docs_and_run_there():
    import test_examples

    lines = {line.split("#")[0].strip() for p in PAGES for b in blocks(p, "console") for line in b.splitlines()}
    assert RUN_ELSEWHERE <= lines  # no stale entry
    assert "loss" in test_examples.DDP_METHODS


@pytest.mark.slow
@pytest.mark.parametrize("page", CONSOLE_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_console_blocks_run(page, tmp_path):
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    bindir = os.path.dirname(sys.executable)
    env = {
        **os.environ,
        "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_rmaps_base_oversubscribe": "1",
    }
    ran = 0
    for block in blocks(page, "console"):
        for line in block.strip().splitlines():
            if not to_run(line):
                continue
            out = subprocess.run(line, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
            assert out.returncode == 0, f"{page.name}: {line}\n{out.stderr[-2000:]}"
            ran += 1
    assert ran
