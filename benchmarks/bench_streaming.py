"""Sieve streaming (``batchsel.SieveStreaming``) against offline lazy greedy
(``batchsel.maximize``) on the same function, same run; and a 10M x 64 file streamed in
bounded memory.

(a) value and throughput: feature-based (sqrt) over n = 20k, 100k, 1M rows of 64
non-negative features (ReLU of a 50-cluster gaussian mixture), k = 100 (and k = 1000 at
100k); facility location over a seeded reference sample of 1000 rows (euclidean) at 20k
and 100k, the offline anchor being lazy greedy on ``ReferenceFacilityLocation`` with the
same reference. ``value`` = sieve / lazy greedy (target >= 0.9); ``sieve only`` is the
best sieve before the union refinement. Throughput in rows/s, default BLAS threads and one
thread (threadpoolctl), the anchor's at default threads.

(b) ``--big``: a 10M x 64 float32 ``.npy`` (2.56 GB), written chunk by chunk from a seeded
generator into a temporary folder (deleted afterwards), streamed by a child process with
``fit(path)`` (plain reads of 65 536 rows at a time); its peak RSS (``VmHWM``) against the
file size, and the wall time. The first 1M rows of that file are (a)'s 1M rows.

Figures come from one run on a shared machine: the load average (1 min) is printed beside
each row. Run: ``python benchmarks/bench_streaming.py [--quick] [--big]``; writes
``benchmarks/results/speed/bench_streaming.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

D = 64
ROWS_PER_PART = 1_000_000  # the generator's unit: part p is seeded (seed, p)
RESULTS = Path(__file__).resolve().parent / "results" / "speed" / "bench_streaming.md"


def part(p: int, rows: int = ROWS_PER_PART, seed: int = 0) -> np.ndarray:
    """Rows ``p * 1M ..`` of the benchmark data (float32, non-negative, clustered)."""
    centers = np.random.default_rng(seed).normal(size=(50, D)).astype(np.float32)
    rng = np.random.default_rng([seed, p])
    x = centers[rng.integers(0, 50, rows)]
    x += 0.5 * rng.normal(size=(rows, D)).astype(np.float32)
    return np.maximum(x, 0, out=x)


def data(n: int) -> np.ndarray:
    parts = [part(p) for p in range(-(-n // ROWS_PER_PART))]
    return np.concatenate(parts)[:n] if len(parts) > 1 else parts[0][:n]


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def timed(fn):
    """(result, wall seconds, CPU seconds of this process): on a shared machine the CPU
    time says what the work costs, the wall time what the load made of it."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - c


def case_a(objective: str, n: int, k: int, eps: float) -> dict:
    from threadpoolctl import threadpool_limits

    import batchsel

    x = data(n)
    start_load = load()
    kwargs = {"epsilon": eps}
    batchsel.SieveStreaming(objective, k, **kwargs).fit(x[:2000])  # compiles the kernels (cached on disk)
    sieve, t_sieve, c_sieve = timed(lambda: batchsel.SieveStreaming(objective, k, **kwargs).fit(x))
    with threadpool_limits(1):
        sieve1, t_sieve1, c_sieve1 = timed(lambda: batchsel.SieveStreaming(objective, k, **kwargs).fit(x))
    assert np.array_equal(sieve.indices_, sieve1.indices_) or objective == "facility-location"
    if objective == "feature-based":
        f = batchsel.FeatureBased(x)
    else:
        f = batchsel.ReferenceFacilityLocation(x, sieve.state_dict()["reference"], "euclidean")
    offline, t_off, c_off = timed(lambda: batchsel.maximize(f, k, "lazy"))
    extra = sieve.selection_.extra
    return {
        "objective": objective,
        "n": n,
        "k": k,
        "eps": eps,
        "value": sieve.value_ / offline.value,
        "sieve_only": extra["sieve_value"] / offline.value,
        "selected": len(sieve.indices_),
        "t_sieve": t_sieve,
        "t_sieve1": t_sieve1,
        "t_off": t_off,
        "c_sieve": c_sieve,
        "c_sieve1": c_sieve1,
        "c_off": c_off,
        "sieves": extra["sieves"],
        "evals_per_row": sieve.evaluations_ / n,
        "kept": extra["kept_rows"],
        "load": f"{start_load}-{load()}",
    }


def case_apricot(n: int, k: int, eps: float, chunk: int = 10_000) -> dict:
    """apricot 0.6.1's ``FeatureBasedSelection.partial_fit`` (its sieve) over the same rows
    in chunks, valued with batchsel's FeatureBased against lazy greedy."""
    from apricot import FeatureBasedSelection

    import batchsel

    x = data(n)
    start_load = load()
    sel = FeatureBasedSelection(k, "sqrt", optimizer_kwds={"epsilon": eps})

    def run():
        for s in range(0, n, chunk):
            sel.partial_fit(x[s : s + chunk])
        return np.asarray(sel.ranking, dtype=np.int64)

    ranking, wall, cpu = timed(run)
    f = batchsel.FeatureBased(x)
    offline = batchsel.maximize(f, k, "lazy")
    return {
        "n": n,
        "k": k,
        "value": f.evaluate(ranking) / offline.value,
        "selected": len(ranking),
        "wall": wall,
        "cpu": cpu,
        "load": f"{start_load}-{load()}",
    }


CHILD = r"""
import json, resource, sys, time
def hwm():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM'):
            return int(line.split()[1]) * 1024
import batchsel
base = hwm()
t = time.perf_counter()
s = batchsel.SieveStreaming('feature-based', int(sys.argv[2]), epsilon=float(sys.argv[3])).fit(sys.argv[1], chunk_rows=65536)
wall = time.perf_counter() - t
u = resource.getrusage(resource.RUSAGE_SELF)
cpu = u.ru_utime + u.ru_stime
print(json.dumps({'wall': wall, 'cpu': cpu, 'hwm': hwm(), 'base': base, 'value': s.value_, 'selected': len(s.indices_),
                  'sieve_value': s.selection_.extra['sieve_value'], 'rows': s.n_seen_, 'kept': s.selection_.extra['kept_rows']}))
"""


def case_b(n: int, k: int, eps: float) -> dict:
    folder = tempfile.mkdtemp(prefix="bench_streaming_")
    path = os.path.join(folder, "big.npy")
    try:
        t = time.perf_counter()
        mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, D))
        for p in range(-(-n // ROWS_PER_PART)):
            rows = min(ROWS_PER_PART, n - p * ROWS_PER_PART)
            mm[p * ROWS_PER_PART : p * ROWS_PER_PART + rows] = (
                part(p, rows) if rows == ROWS_PER_PART else part(p)[:rows]
            )
            mm.flush()
        del mm
        t_write = time.perf_counter() - t
        size = os.path.getsize(path)
        start_load = load()
        out = subprocess.run(
            [sys.executable, "-c", CHILD, path, str(k), str(eps)], capture_output=True, text=True, check=True
        )
        r = json.loads(out.stdout)
        r.update(n=n, k=k, eps=eps, size=size, t_write=t_write, load=f"{start_load}-{load()}")
        return r
    finally:
        for f in os.listdir(folder):
            os.remove(os.path.join(folder, f))
        os.rmdir(folder)


NOTES_A = [
    "value: the sieve's result / lazy greedy's on the same function (target >= 0.9); sieve only: the best "
    "sieve before the refinement (lazy greedy over the union of the rows the sieves kept, `kept rows`). "
    "Rows per CPU s: this process's CPU time, which the load barely changes; the wall figures are what the "
    "load left of 2 cores. Facility location: over a seeded sample of 1000 reference rows (euclidean), the "
    "anchor is lazy greedy on `ReferenceFacilityLocation` with the same reference.",
]

NOTES_B = [
    "Feature-based, k = 100, chunks of 65 536 rows read with plain reads. Peak RSS: the child's VmHWM; before "
    "fit: after `import batchsel` (numpy, scipy, numba, tqdm). The first 1M rows of the file are (a)'s 1M "
    "rows, where both run (value ratio there).",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20k and 100k rows only")
    parser.add_argument("--big", action="store_true", help="also (b): stream a 10M x 64 file (2.56 GB, a few minutes)")
    parser.add_argument("--big-rows", type=int, default=10_000_000)
    parser.add_argument("--no-write", action="store_true", help="print only, keep the results file")
    args = parser.parse_args()

    cases = [
        ("feature-based", 20_000, 100),
        ("feature-based", 100_000, 100),
        ("feature-based", 100_000, 1000),
        ("facility-location", 20_000, 100),
        ("facility-location", 100_000, 100),
    ]
    if not args.quick:
        cases.insert(3, ("feature-based", 1_000_000, 100))
    lines = [
        "| objective | n | k | value (sieve / lazy) | sieve only | picked | sieve rows/s, wall: default / 1 thread "
        "| sieve rows per CPU s: default / 1 thread | lazy greedy: rows/s wall, per CPU s | sieves | gains per row "
        "| kept rows | load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    print(f"cpus {os.cpu_count()}, load {load()}", flush=True)
    print(lines[0], flush=True)
    for objective, n, k in cases:
        r = case_a(objective, n, k, 0.1)
        lines.append(
            f"| {objective} | {n:,} | {k} | {r['value']:.4f} | {r['sieve_only']:.4f} | {r['selected']} "
            f"| {n / r['t_sieve']:,.0f} / {n / r['t_sieve1']:,.0f} ({r['t_sieve']:.1f} / {r['t_sieve1']:.1f} s) "
            f"| {n / r['c_sieve']:,.0f} / {n / r['c_sieve1']:,.0f} "
            f"| {n / r['t_off']:,.0f}, {n / r['c_off']:,.0f} ({r['t_off']:.1f} s) | {r['sieves']} "
            f"| {r['evals_per_row']:.1f} "
            f"| {r['kept']} | {r['load']} |"
        )
        print(lines[-1], flush=True)
    anchor = [
        "| n | k | value (apricot / lazy) | picked | rows/s wall, per CPU s | load |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for n in (20_000, 100_000):
        r = case_apricot(n, 100, 0.1)
        anchor.append(
            f"| {n:,} | {r['k']} | {r['value']:.4f} | {r['selected']} | {n / r['wall']:,.0f}, "
            f"{n / r['cpu']:,.0f} ({r['wall']:.1f} s) | {r['load']} |"
        )
        print(anchor[-1], flush=True)
    big = []
    if args.big:
        r = case_b(args.big_rows, 100, 0.1)
        big = [
            "| rows x d | file | peak RSS (VmHWM) | of which before fit | RSS / file | wall | CPU | rows/s wall, per CPU s "
            "| picked | kept rows | load |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
            f"| {r['n']:,} x {D} | {r['size'] / 1e9:.2f} GB | {r['hwm'] / 1e6:.0f} MB | {r['base'] / 1e6:.0f} MB "
            f"| {r['hwm'] / r['size']:.3f} | {r['wall']:.0f} s | {r['cpu']:.0f} s "
            f"| {r['n'] / r['wall']:,.0f}, {r['n'] / r['cpu']:,.0f} | {r['selected']} "
            f"| {r['kept']} | {r['load']} |",
        ]
        print("\n".join(big), flush=True)
        print(
            f"(file written in {r['t_write']:.0f} s; value {r['value']:.6g}, best sieve alone {r['sieve_value']:.6g})"
        )
    if not args.no_write:
        from batchsel.core.io import atomic_write

        text = [
            "# bench_streaming",
            "",
            f"`python benchmarks/bench_streaming.py{' --quick' if args.quick else ''}"
            f"{' --big' if args.big else ''}` on {os.cpu_count()} shared cores, epsilon 0.1, "
            f"{time.strftime('%Y-%m-%d')}; load = 1-min load average before-after each row.",
            "",
            "## (a) sieve streaming vs offline lazy greedy, same function",
            "",
            *lines,
            "",
            *NOTES_A,
            "",
            "## anchor: apricot 0.6.1 `FeatureBasedSelection(100, 'sqrt').partial_fit` (its sieve, epsilon "
            "0.1), chunks of 10 000 rows, same rows as (a)",
            "",
            *anchor,
            "",
            "apricot compiles its numba sieve kernels in its fits (part of its time, as a user pays it); its "
            "value is batchsel's FeatureBased of apricot's ranking.",
            "",
        ]
        if big:
            text += [
                "## (b) 10M x 64 float32 file streamed by `fit(path)` in a child process",
                "",
                *big,
                "",
                *NOTES_B,
                "",
            ]
        elif RESULTS.exists() and "## (b)" in RESULTS.read_text():
            text += RESULTS.read_text()[RESULTS.read_text().index("## (b)") :].rstrip("\n").split("\n") + [""]
        with atomic_write(RESULTS, "w") as fh:
            fh.write("\n".join(text))


if __name__ == "__main__":
    main()
