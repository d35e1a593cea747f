"""No escape code in a library script's output under mpiexec (numba's colorama reset at
exit, written where each rank's stdout is mpiexec's pseudo-terminal)."""

import subprocess
import sys

import pytest
from test_examples import MPIEXEC
from test_integrations_mp import clean_env

SCRIPT = """
import batchsel
import numba.cpython.listobj  # what numba's first compiled kernel loads (its colorama init)
print("done")
"""


@pytest.mark.slow
@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec")
def test_a_library_script_under_mpiexec_prints_no_escape_code(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    env = clean_env()
    env.pop("NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING", None)  # this process's import of batchsel set it
    proc = subprocess.run(
        [MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-n", "2", sys.executable, str(script)],
        capture_output=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count(b"done") == 2
    assert b"\x1b" not in proc.stdout + proc.stderr, proc.stdout  # before: ESC[0m once per rank
