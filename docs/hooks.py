"""mkdocs hook: tables generated from the benchmarks' JSON results, with when they were measured.

In a page, ``<!-- results: quality/budget/step_dominated.json -->`` becomes the budgeted benchmark's
overview table of that file (``benchmarks/bench_quality.py``'s own renderer) and
``<!-- measured: data/labels/bench_labels.json -->`` the line saying when and with which
batchsel version a results file was measured (the file's ``measured`` entry, else
``benchmarks/results/measured.json``). A marker naming a missing file fails the build.
"""
from __future__ import annotations

import functools
import json
import re
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MARKER = re.compile(r"<!-- (results|measured): (\S+) -->")


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
