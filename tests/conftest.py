"""The test helpers' folders on sys.path once, for every test file (run alone or together):
tests/ (shared modules: paths.py), tests/mp_scripts/ (the multi-process jobs and their helpers)
and every floor folder tests/<floor>/, so that a test module imports another's helpers by its
basename (``from test_integrations_mp import clean_env``) wherever either lives. Basenames are
unique across the folders (tests/project/test_architecture.py checks it)."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# not from paths.py: tests/project/test_suite_policy.py runs a copy of this file on its own
FLOORS = sorted(
    p for p in HERE.iterdir() if p.is_dir() and p.name not in {"golden", "mp_scripts"} and p.name[0] not in "._"
)
sys.path[:0] = [str(HERE), str(HERE / "mp_scripts"), *map(str, FLOORS)]

import os  # noqa: E402

import pytest  # noqa: E402

# `make test` (CI) sets BATCHSEL_NO_SKIPS=1: a missing dependency or tool must not drop tests
# without a word. The one skip accepted is a test marked `gpu` on a machine without CUDA.
STRICT_SKIPS = os.environ.get("BATCHSEL_NO_SKIPS") == "1"
_unexpected_skips: list[tuple[str, str]] = []


def skip_reason(report: pytest.TestReport) -> str:
    """The reason pytest gives for a skipped test's report."""
    longrepr = report.longrepr
    return str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail") and "gpu" not in report.keywords:
        _unexpected_skips.append((report.nodeid, skip_reason(report)))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if STRICT_SKIPS and _unexpected_skips and not hasattr(config, "workerinput"):
        terminalreporter.section("skips CI does not accept (BATCHSEL_NO_SKIPS=1)", red=True)
        for nodeid, reason in _unexpected_skips:
            terminalreporter.write_line(f"{nodeid}: {reason}")
        terminalreporter.write_line(
            f"{len(_unexpected_skips)} tests skipped: install what they need (make venv installs '.[dev]', "
            "mpiexec among it) or mark a test that needs a GPU with @pytest.mark.gpu"
        )


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if STRICT_SKIPS and _unexpected_skips and not hasattr(session.config, "workerinput") and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
