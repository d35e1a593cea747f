"""The documentation site: it builds strictly, and its API page lists the public API."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
from paths import REPO as ROOT

import batchsel
import batchsel.integrations

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


# the API section of the site, in the order of mkdocs.yml's nav: as a training script meets the parts
API_PAGES = ["loop", "selectors", "variable-length", "streaming", "submodular", "distributed", "data", "cli"]


def test_api_pages_match_all(site):
    nav = (ROOT / "mkdocs.yml").read_text()
    assert [nav.index(f"api/{page}.md") for page in API_PAGES] == sorted(nav.index(f"api/{p}.md") for p in API_PAGES)
    assert not (ROOT / "docs" / "api.md").exists()  # one page per part, not one page of everything
    anchors = {
        page: set(re.findall(r'<h2 id="(batchsel\.[A-Za-z_.]+)"', (site / "api" / page / "index.html").read_text()))
        for page in API_PAGES
    }
    every = set().union(*anchors.values())
    # batchsel.X, or batchsel.integrations.X for the sampler, pad_collate and the stream (exported by
    # batchsel on first use, as GraphRegularizedLoss, which is documented where it is defined)
    names = {a.split(".")[-1] for a in every}
    public = set(batchsel.__all__) - {"__version__"}
    assert public <= names, f"in batchsel.__all__ but on no API page: {sorted(public - names)}"
    top = {a.split(".")[1] for a in every if a.count(".") == 1}
    assert top <= public, f"documented as batchsel.X but not exported: {sorted(top - public)}"
    integrations = {a.split(".")[2] for a in every if a.startswith("batchsel.integrations.")}
    assert integrations == set(batchsel.integrations.__all__)
    assert all(anchors.values()), f"an API page documents nothing: {[p for p, a in anchors.items() if not a]}"
    assert "batchsel.AutoSelector" in anchors["selectors"] and "batchsel.BucketSelector" in anchors["variable-length"]
    assert "batchsel.integrations.StreamBatches" in anchors["streaming"]
    for page in API_PAGES:  # each part documented once
        for other in API_PAGES[API_PAGES.index(page) + 1 :]:
            assert not anchors[page] & anchors[other], f"{page} and {other}: {anchors[page] & anchors[other]}"


def test_generated_tables_say_when_they_were_measured_in_a_footnote(site):
    html = (site / "which-method" / "index.html").read_text()
    page, _, notes = html.partition('<div class="footnote">')
    assert notes.count("Generated from") >= 8 and "with batchsel" in notes
    assert "Generated from" not in page and "From <code>benchmarks/results/buckets/bench_buckets.md" in notes
    assert page.count('class="footnote-ref"') == notes.count('class="footnote-backref"') >= 8
    assert "<!-- results:" not in html and "--8&lt;--" not in html


# text a rendered page must not show: Sphinx roles and bare docs paths (code, links and tags aside)
NOT_TEXT = re.compile(r"<(pre|code|a|script|style)\b.*?</\1>|<!--.*?-->|<[^>]*>", re.DOTALL)
LITERAL = re.compile(r":(?:py:)?(?:func|class|meth|attr|mod|data|exc|obj):|\bdocs(?::\s+|/)[\w/.-]+\.md\b")


def test_docstring_roles_and_docs_paths_are_links(site):
    for page in site.rglob("*.html"):
        text = NOT_TEXT.sub(" ", page.read_text())
        assert not LITERAL.search(text), f"{page.relative_to(site)}: {LITERAL.findall(text)[:5]}"
    html = (site / "api" / "data" / "index.html").read_text()
    # :func:`audit` in AuditReport's docstring, resolved in its module and linked to where it is documented
    assert re.search(r'What <a class="autorefs[^"]*"[^>]*href="#batchsel\.audit"><code>audit</code></a> found', html)
    # (docs: design/filters.md) in CandidateFilter's docstring
    assert (
        '(see <a href="../../design/filters/">Candidate filters</a>)'
        in (site / "api" / "loop" / "index.html").read_text()
    )
    # a role naming an object documented on another API page links there
    html = (site / "api" / "cli" / "index.html").read_text()
    assert re.search(r'<a class="autorefs[^"]*"[^>]*href="\.\./selectors/#batchsel\.EpochPlan"', html)


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


# what a page for users does not name: an issue, a commit or a source hash (the changelog aside)
INSIDES = re.compile(
    r"\bissues?\s*#?\d+|\(#\d+\)|\bcommit\b|\bsha1\b"
    r"|(?<![\w.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w.-])",
    re.IGNORECASE,
)
SCRIPTS_AND_TAGS = re.compile(r"<(script|style)\b.*?</\1>|<!--.*?-->|<[^>]*>", re.DOTALL)


def test_no_page_names_an_issue_or_a_commit(site):
    sources = [p for p in sorted((ROOT / "docs").rglob("*.md")) if p.name != "changelog.md"]
    assert (ROOT / "docs" / "changelog.md").read_text().strip() == '--8<-- "CHANGELOG.md"'
    found = {str(p.relative_to(ROOT)): INSIDES.findall(p.read_text()) for p in sources}
    # and what the build puts in: included results files, docstrings
    for page in sorted(site.rglob("*.html")):
        if page.relative_to(site).parts[0] not in ("changelog", "404.html"):
            found[str(page.relative_to(site))] = INSIDES.findall(SCRIPTS_AND_TAGS.sub(" ", page.read_text()))
    assert not {k: v for k, v in found.items() if v}


def headings(markdown: str) -> list[str]:
    """A page's Markdown headings, code blocks aside."""
    return re.findall(r"^#{1,6} +(.+?) *$", re.sub(r"^```.*?^```", "", markdown, flags=re.M | re.S), flags=re.M)


def test_included_results_add_no_heading(site):
    including = [
        p
        for p in sorted((ROOT / "docs").rglob("*.md"))
        if re.search(r'<!-- (results|measured): |--8<-- "benchmarks/results/', p.read_text())
    ]
    assert {"which-method.md", "streaming.md"} <= {p.name for p in including}
    for source in including:
        uri = source.relative_to(ROOT / "docs").with_suffix("")
        html = (site / uri / "index.html").read_text()
        article = html[html.index('<article class="md-content__inner') : html.index("</article>")]
        rendered = re.findall(r"<h[1-6] id=", article)
        assert len(rendered) == len(headings(source.read_text())), f"{uri}: a heading the page does not have"


def load_hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_included_results_file_loses_its_headings_and_commit(tmp_path, monkeypatch):
    hooks = load_hooks()
    monkeypatch.setattr(hooks, "RESULTS", tmp_path)
    (tmp_path / "x.md").write_text(
        "# A benchmark (issue #48): `bench_x.py`\n\n"
        "Measured 2026-01-02 10:00 (batchsel 0.1.0), 5 seeds.\n\n"
        "Sources measured: commit ea9f1c7 (sha1 of `x.py`: a7c6cf65663d).\n\n"
        "## Part one\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n\nNotes. Load average after: [1.0, 2.0].\n"
    )
    page = type("Page", (), {"file": type("File", (), {"src_uri": "p.md"})()})()
    text = '# Page\n\nThe table:\n\n--8<-- "benchmarks/results/x.md:3:200"\n\nAfter.\n'
    out = hooks.on_page_markdown(text, page, None, None)
    assert headings(out) == ["Page"]
    assert "**Part one**" in out and "| 1 | 2 |" in out and "Notes." in out
    assert not INSIDES.search(out), INSIDES.findall(out)
    assert "The table:[^measured-1]" in out
    note = out.splitlines()[-1]
    assert note.startswith("[^measured-1]: From `benchmarks/results/x.md`: Measured 2026-01-02")
    assert "Load average after: [1.0, 2.0]" in note
    with pytest.raises(hooks.PluginError, match="no results file"):
        hooks.on_page_markdown('--8<-- "benchmarks/results/missing.md"\n', page, None, None)


def test_docs_home_and_package_docstring_lead_with_the_three():
    home = (ROOT / "docs" / "index.md").read_text()
    lead = home[: home.index("Beyond these three")]
    doc = batchsel.__doc__
    lead_doc = doc[: doc.index("Beyond them")]
    for name in ("AutoSelector", "BucketSelector", "StreamBatches"):
        assert name in lead and name in lead_doc, name
    # each with its figure and a link
    assert lead.count("wall saved") + lead.count("points") >= 3 and lead.count("](") >= 6
    assert "](api/index.md)" in home
