"""mkdocs hook: tables generated from the benchmarks' JSON results, with when they were measured.

In a page, ``<!-- results: quality/budget/step_dominated.json -->`` becomes the budgeted benchmark's
overview table of that file (``benchmarks/bench_quality.py``'s own renderer), and
``<!-- measured: data/labels/bench_labels.json -->`` (beside a table written from a results file by
hand) says when and with which batchsel version that file was measured (the file's ``measured``
entry, else ``benchmarks/results/measured.json``). A results file's Markdown included with
pymdownx.snippets' line (``--8<-- "benchmarks/results/buckets/bench_buckets.md:3:200"``) is included
here instead: its headings become bold text, so that they add no entry to the page's table of
contents, its provenance lines (when, with what, the load) go to the footnote and the lines naming
the commit and source hashes it was measured at are left out. Each table's provenance is a footnote
referenced from the text that introduces it, not a line of the page. A marker or include naming a
missing file fails the build.

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
# pymdownx.snippets' line including a results file (lines from 1, both ends included): included
# here, before snippets sees it, so that the file's headings and provenance can be rewritten
SNIPPET = re.compile(
    r"[ \t]*-+8<-+[ \t]+(?P<q>[\"'])benchmarks/results/(?P<rel>[^\"':]+)"
    r"(?::(?P<start>-?\d*))?(?::(?P<end>-?\d*))?(?P=q)[ \t]*"
)
HEADING = re.compile(r"#{1,6}[ \t]+(?P<title>[^\n]*?)[ \t#]*")
# what a results file says for its readers' colleagues, not for a page's
ISSUE = re.compile(r"[ \t]*\(issue #?\d+\)|\bissues? #?\d+\b", re.IGNORECASE)
COMMIT = re.compile(r"\bcommit\b|\bsha1\b", re.IGNORECASE)
PROVENANCE = re.compile(r"Measured \d{4}-\d\d-\d\d|.*\bmeasured again on \d{4}-\d\d-\d\d", re.DOTALL)
LOAD_AFTER = re.compile(r"[ \t]*Load average after: (\[[^\]]*\])\.?")
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


def measured_note(rel: str, payload: dict, verb: str) -> str:
    manifest = json.loads((RESULTS / "measured.json").read_text())
    when = payload.get("measured") or manifest.get(rel)
    if when is None:
        raise PluginError(f"{rel}: no 'measured' entry in the file nor in benchmarks/results/measured.json")
    return f"{verb} `benchmarks/results/{rel}`, measured {when['date']} with batchsel {when['version']}."


def render(kind: str, rel: str) -> tuple[str, str]:
    """A marker's table (empty for ``measured``, whose table the page has) and its footnote."""
    path = RESULTS / rel
    if not path.is_file():
        raise PluginError(f"no results file benchmarks/results/{rel}")
    payload = json.loads(path.read_text())
    if kind == "measured":  # a table written from the file by hand: its source and date
        return "", measured_note(rel, payload, "Figures from")
    methods = [m.strip() for m in payload["args"]["methods"].split(",") if m.strip()]
    return bench_quality().overview(payload["results"], methods), measured_note(rel, payload, "Generated from")


def include(rel: str, start: str | None, end: str | None) -> tuple[str, str]:
    """Lines ``start``..``end`` (from 1, both included, as pymdownx.snippets counts) of a results
    file, as a page shows them: its headings bold text (not entries of the page's table of
    contents), its provenance (when, with what, the load) the footnote, the commit and source
    hashes it was measured at dropped."""
    path = RESULTS / rel
    if not path.is_file():
        raise PluginError(f"no results file benchmarks/results/{rel}")
    lines = path.read_text().splitlines()[max(int(start or 1), 1) - 1 : int(end) if end else None]
    for i, line in enumerate(lines):
        if heading := HEADING.fullmatch(ISSUE.sub("", line)):
            lines[i] = f"\n**{heading['title']}**\n"
    kept: list[str] = []
    notes: list[str] = []
    for block in re.split(r"\n[ \t]*\n", "\n".join(lines)):
        block = ISSUE.sub("", block).strip()
        if COMMIT.search(block):
            continue  # which sources were measured: the results file keeps it, the page does not
        if PROVENANCE.match(block):
            notes.append(block)
        elif block:
            notes += [f"Load average after: {m}." for m in LOAD_AFTER.findall(block)]
            kept.append(LOAD_AFTER.sub("", block))
    return "\n\n".join(kept), f"From `benchmarks/results/{rel}`" + (": " + " ".join(notes) if notes else ".")


def is_prose(line: str) -> bool:
    """A line a footnote's reference can end: text, not a table row, heading, tag or fence."""
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith(("|", "#", "<", "```", "~~~", "[^", "--8<--"))


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Results markers and included results files -> their tables, each table's provenance a
    footnote, referenced from the text that introduces it."""
    out: list[str] = []
    notes: list[str] = []
    generated = 0
    fence = None
    for line in markdown.split("\n"):
        stripped = line.strip()
        if fence is None and stripped[:3] in ("```", "~~~"):
            fence = stripped[:3]
        elif fence is not None and stripped.startswith(fence):
            fence = None
        marker = MARKER.fullmatch(stripped) if fence is None else None
        snippet = SNIPPET.fullmatch(line) if fence is None else None
        if not (marker or snippet):
            out.append(line)
            continue
        if marker:
            text, note = render(marker[1], marker[2])
        else:
            text, note = include(snippet["rel"], snippet["start"], snippet["end"])
        found = ISSUE.findall(text) + COMMIT.findall(text)
        if found:
            log.warning(f"{page.file.src_uri}: an included results file names {found[:3]}")
        notes.append(note)
        ref = f"[^measured-{len(notes)}]"
        before = next((i for i in range(len(out) - 1, -1, -1) if out[i].strip()), None)
        body = text.split("\n")
        if before is not None and before >= generated and is_prose(out[before]):
            out[before] = out[before].rstrip() + ref
        else:  # no text of the page's before it: the table's own first text, else a line
            at = next((i for i, row in enumerate(body) if is_prose(row)), None)
            if at is None:
                body.insert(0, ref)
            else:
                body[at] = body[at].rstrip() + ref
        out += body
        generated = len(out)  # a reference goes on the page's text, not on another table's
    if notes:
        out += [""] + [f"[^measured-{i}]: {note}" for i, note in enumerate(notes, 1)]
    return "\n".join(out)


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
