"""Record tests/golden/golden.json: run every case of golden_cases.py and store its summary.

Run from the repository root, before a change that must not change behaviour::

    python tests/golden/make_golden.py

Cases that raise ValueError (settings refused by design) are left out; so is a case whose
summary comes out empty. ``tests/project/test_golden.py`` recomputes every recorded case.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import golden_cases as cases  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden.json")


def main() -> None:
    golden, skipped, timings = {}, [], {}
    for name, case in cases.CASES.items():
        start = time.perf_counter()
        try:
            summary = case()
        except ValueError as exc:
            skipped.append(f"{name}: {exc}")
            continue
        timings[name] = time.perf_counter() - start
        if summary in ({}, None):
            skipped.append(f"{name}: empty")
            continue
        golden[name] = summary
    with open(OUT, "w") as fh:
        json.dump(golden, fh, separators=(",", ":"), sort_keys=True)
        fh.write("\n")
    print(f"{len(golden)} cases, {os.path.getsize(OUT)} bytes -> {OUT}")
    for line in skipped:
        print("skipped", line)
    for name, t in sorted(timings.items(), key=lambda kv: -kv[1])[:10]:
        print(f"{t:7.2f}s {name}")


if __name__ == "__main__":
    main()
