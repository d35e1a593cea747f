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
    anchors = set(re.findall(r'id="(batchsel\.[A-Za-z_.]+)"', html))
    # the anchor of the section `::: batchsel.integrations` itself is not a name of batchsel
    top = {a.split(".")[-1] for a in anchors if a.count(".") == 1 and a != "batchsel.integrations"}
    documented = {
        a.split(".")[-1] for a in anchors if a.count(".") <= 2 or a == "batchsel.loop.losses.GraphRegularizedLoss"
    }
    public = set(batchsel.__all__) - {"__version__"}
    assert public <= documented, f"in batchsel.__all__ but not in docs/api.md: {sorted(public - documented)}"
    assert top <= public, f"documented as batchsel.X but not exported: {sorted(top - public)}"
    integrations = {a.split(".")[2] for a in anchors if a.startswith("batchsel.integrations.") and a.count(".") == 2}
    assert integrations == set(batchsel.integrations.__all__)


def test_generated_tables_say_when_they_were_measured(site):
    html = (site / "which-method" / "index.html").read_text()
    assert html.count("Generated from") >= 8 and "with batchsel" in html
    assert "<!-- results:" not in html


# text a rendered page must not show: Sphinx roles and bare docs paths (code, links and tags aside)
NOT_TEXT = re.compile(r"<(pre|code|a|script|style)\b.*?</\1>|<!--.*?-->|<[^>]*>", re.DOTALL)
LITERAL = re.compile(r":(?:py:)?(?:func|class|meth|attr|mod|data|exc|obj):|\bdocs(?::\s+|/)[\w/.-]+\.md\b")


def test_docstring_roles_and_docs_paths_are_links(site):
    for page in site.rglob("*.html"):
        text = NOT_TEXT.sub(" ", page.read_text())
        assert not LITERAL.search(text), f"{page.relative_to(site)}: {LITERAL.findall(text)[:5]}"
    html = (site / "api" / "index.html").read_text()
    # :func:`audit` in AuditReport's docstring, resolved in its module and linked to where it is documented
    assert re.search(r'What <a class="autorefs[^"]*"[^>]*href="#batchsel\.audit"><code>audit</code></a> found', html)
    # (docs: design/filters.md) in CandidateFilter's docstring
    assert '(see <a href="../design/filters/">Candidate filters</a>)' in html


def test_strict_build_fails_on_a_literal_role_or_bare_docs_path(tmp_path):
    # --quiet as in `make docs`: mkdocs 1.6 then drops warnings before --strict counts them unless
    # docs/hooks.py restores the count (mkdocs/mkdocs#4126)
    if MKDOCS is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[dev]')")
    (tmp_path / "docs").mkdir()
    (tmp_path / "mkdocs.yml").write_text(
        f"site_name: t\nhooks: [{ROOT / 'docs' / 'hooks.py'}]\nnav: [index.md, {{Other: other.md}}]\n"
    )
    (tmp_path / "docs" / "other.md").write_text("# Other\n")

    def build(text: str) -> subprocess.CompletedProcess:
        (tmp_path / "docs" / "index.md").write_text(f"# Home\n\n{text}\n")
        return subprocess.run(
            [MKDOCS, "build", "--strict", "--quiet"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        )

    done = build("What :func:`audit` found (docs: missing.md).\n\n>>> audit(x)")
    assert done.returncode != 0
    assert "':func:'" in done.stderr and "'docs: missing.md' names no page" in done.stderr
    assert "a doctest as block quotes" in done.stderr
    done = build("[a link to no page](missing.md)")  # any warning, not only the hook's
    assert done.returncode != 0 and "missing.md" in done.stderr
    # a path naming a page becomes a link to it; roles and paths in code are left alone
    done = build("Why: docs/other.md. Written `:func:` and `docs/other.md`.")
    assert done.returncode == 0, done.stderr[-3000:]
    html = (tmp_path / "site" / "index.html").read_text()
    assert 'Why: <a href="other/">Other</a>.' in html
    assert "<code>:func:</code>" in html and "<code>docs/other.md</code>" in html


def test_site_ships_no_build_code(site):
    assert not list(site.rglob("*.py")), "docs/*.py (the build's hook and griffe extension) copied into the site"
