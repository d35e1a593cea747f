"""The documentation site: it builds strictly, and its API page lists the public API."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import batchsel
import batchsel.integrations

ROOT = pathlib.Path(__file__).resolve().parents[1]
MKDOCS = shutil.which("mkdocs", path=os.path.dirname(sys.executable))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> pathlib.Path:
    if MKDOCS is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[dev]')")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [MKDOCS, "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_api_page_matches_all(site):
    html = (site / "api" / "index.html").read_text()
    anchors = set(re.findall(r'id="((?:batchsel|integrations)\.[A-Za-z_.]+)"', html))
    top = {a.split(".")[-1] for a in anchors if a.count(".") == 1 and a.startswith("batchsel.")}
    documented = {a.split(".")[-1] for a in anchors if a.count(".") <= 2}
    public = set(batchsel.__all__) - {"__version__"}
    assert public <= documented, f"in batchsel.__all__ but not in docs/api.md: {sorted(public - documented)}"
    assert top <= public, f"documented as batchsel.X but not exported: {sorted(top - public)}"
    integrations = {a.split(".")[1] for a in anchors if a.startswith("integrations.") and a.count(".") == 1}
    assert integrations == set(batchsel.integrations.__all__)


def test_generated_tables_say_when_they_were_measured(site):
    html = (site / "which-method" / "index.html").read_text()
    assert html.count("Generated from") >= 8 and "with batchsel" in html
    assert "<!-- results:" not in html
