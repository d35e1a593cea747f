"""The suite's own rules: under ``make test`` (BATCHSEL_NO_SKIPS=1) a skipped test fails the
run, but for one marked ``gpu``; the skip reasons are listed."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from paths import TESTS

CONFTEST = TESTS / "conftest.py"

TESTS = """
import pytest

def test_runs():
    pass

@pytest.mark.gpu
def test_needs_a_gpu():
    pytest.skip("needs a CUDA device")
"""


def run_suite(folder: Path, strict: bool) -> subprocess.CompletedProcess:
    env = dict(os.environ, BATCHSEL_NO_SKIPS="1" if strict else "0")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist", str(folder)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=folder,
    )


@pytest.mark.parametrize("missing", [False, True])
def test_a_skip_fails_the_run_unless_it_is_the_gpu_test(tmp_path, missing):
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a CUDA device\n")
    body = TESTS + ('\ndef test_needs_a_tool():\n    pytest.skip("no mpiexec")\n' if missing else "")
    (tmp_path / "test_sample.py").write_text(body)
    strict = run_suite(tmp_path, strict=True)
    assert strict.returncode == (1 if missing else 0), strict.stdout[-2000:]
    assert ("test_needs_a_tool: Skipped: no mpiexec" in strict.stdout) == missing
    assert "SKIPPED" in strict.stdout  # -rs lists every skip with its reason, the GPU one too
    assert run_suite(tmp_path, strict=False).returncode == 0  # a plain `pytest` run is not strict
