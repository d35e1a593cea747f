"""mkdocs hook: tables generated from the benchmarks' JSON results, with when they were measured.

In a page, ``<!-- results: quality/budget/step_dominated.json -->`` becomes the budgeted benchmark's
overview table of that file (``benchmarks/bench_quality.py``'s own renderer) and
``<!-- measured: data/labels/bench_labels.json -->`` the line saying when and with which
batchsel version a results file was measured (the file's ``measured`` entry, else
``benchmarks/results/measured.json``). A marker naming a missing file fails the build.

A docstring's pointer to a page, ``docs: design/filters.md`` or ``docs/design/filters.md`` (what
``help()`` readers can open), becomes a link to that page, titled as in the navigation; one naming no
page is a warning. The rendered pages are then checked: a Sphinx role left literal (``:func:``, which
``docs/griffe_roles.py`` turns into cross-references) or a bare docs path in their text (outside code
and links), or a doctest rendered as Markdown's nested block quotes (``>>>``), is a warning, so the
strict build fails.
"""
from __future__ import annotations

import functools
import json
import logging
import re
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MARKER = re.compile(r"<!-- (results|measured): (\S+) -->")
log = logging.getLogger("mkdocs.hooks.batchsel")

# what a page's text (outside tags, code and links) must not contain once rendered
SKIP = r"(?P<skip><(?P<tag>pre|code|a|script|style|textarea)\b.*?</(?P=tag)>|<!--.*?-->|<[^>]*>)"
DOCS_PATH = r"\bdocs(?P<sep>:\s+|/)(?P<path>(?:[\w-]+/)*[\w.-]+\.md)\b"
ROLE = r":(?:py:)?(?:func|class|meth|attr|mod|data|exc|obj|const|type):"
DOCS_PATH_IN_TEXT = re.compile(f"{SKIP}|{DOCS_PATH}", re.DOTALL)
LEFTOVER = re.compile(f"{SKIP}|(?P<found>{ROLE}|{DOCS_PATH})", re.DOTALL)
DOCTEST_QUOTE = re.compile(r"(?:<blockquote>\s*){3}")


@functools.cache
def bench_quality():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_quality as module

    return module


def measured_line(rel: str, payload: dict, verb: str) -> str:
    manifest = json.loads((RESULTS / "measured.json").read_text())
    when = payload.get("measured") or manifest.get(rel)
    if when is None:
        raise PluginError(f"{rel}: no 'measured' entry in the file nor in benchmarks/results/measured.json")
    return f"*{verb} `benchmarks/results/{rel}`, measured {when['date']} with batchsel {when['version']}.*\n"


def render(kind: str, rel: str) -> str:
    path = RESULTS / rel
    if not path.is_file():
        raise PluginError(f"no results file benchmarks/results/{rel}")
    payload = json.loads(path.read_text())
    if kind == "measured":  # a table written from the file by hand: its source and date
        return measured_line(rel, payload, "Figures from")
    line = measured_line(rel, payload, "Generated from")
    methods = [m.strip() for m in payload["args"]["methods"].split(",") if m.strip()]
    return line + "\n" + bench_quality().overview(payload["results"], methods)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return MARKER.sub(lambda m: render(m.group(1), m.group(2)), markdown)


def on_startup(command, dirty) -> None:
    # mkdocs 1.6's --quiet raises the "mkdocs" logger to ERROR, so warnings never reach the counter
    # that --strict checks and `mkdocs build --strict --quiet` passes whatever it warns about
    # (mkdocs/mkdocs#4126). Quiet the console instead (INFO), keep the warnings: strict, each fails
    # the build, and the console says which.
    logger = logging.getLogger("mkdocs")
    streams = [h for h in logger.handlers if h.name == "MkDocsStreamHandler"]
    if logger.level == logging.ERROR and streams:
        for stream in streams:
            stream.setLevel(logging.WARNING)
        logger.setLevel(logging.WARNING)


def link_docs_paths(html: str, page, files) -> str:
    """``docs: design/filters.md`` / ``docs/design/filters.md`` in the text -> a link to that page."""

    def link(m: re.Match[str]) -> str:
        if m["skip"]:
            return m[0]
        target = files.get_file_from_path(m["path"])
        if target is None or target.page is None:
            log.warning(f"{page.file.src_uri}: '{m[0]}' names no page of the site")
            return m[0]
        title = target.page.title or m["path"]
        see = "see " if m["sep"] != "/" else ""
        return f'{see}<a href="{target.url_relative_to(page.file)}">{title}</a>'

    return DOCS_PATH_IN_TEXT.sub(link, html)


def leftovers(html: str) -> list[str]:
    """Literal Sphinx roles, bare docs paths and doctests as block quotes in a rendered page."""
    found = [" ".join(m["found"].split()) for m in LEFTOVER.finditer(html) if m["found"]]
    return found + [">>> (a doctest as block quotes)"] * len(DOCTEST_QUOTE.findall(html))


def on_page_content(html: str, page, config, files) -> str:
    return link_docs_paths(html, page, files)


def on_post_page(output: str, page, config) -> str:
    if found := leftovers(output):
        shown = ", ".join(repr(f) for f in sorted(set(found)))
        log.warning(f"{page.file.src_uri}: {len(found)} docstring markup left unrendered: {shown}")
    return output
