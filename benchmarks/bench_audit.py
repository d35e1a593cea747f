"""Benchmark of ``batchsel audit`` at scale: N rows of a 20-class mixture in d dimensions
with a planted share of near-duplicates and of wrong labels; the audit's time and peak
memory (a child process each) next to :func:`batchsel.deduplicate` alone on the same file
(the anchor: the one k-NN search both make), and how close its estimates come.

Run: ``python benchmarks/bench_audit.py`` (1M x 128; ``--quick``: 100k);
``--ranks 2`` runs the audit under ``mpiexec -n 2`` as well.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = Path(sys.executable).parent / "mpiexec"
if not MPIEXEC.exists():
    MPIEXEC = Path(shutil.which("mpiexec") or "mpiexec")


def make(n: int, d: int, folder: str, duplicates: float = 0.1, noise: float = 0.1) -> tuple[str, str, dict]:
    rng = np.random.default_rng(0)
    classes = 20
    y = rng.integers(0, classes, n)
    x = rng.standard_normal((classes, d)).astype(np.float32)[y] * 1.5 + rng.standard_normal((n, d), dtype=np.float32)
    copies = rng.choice(n, int(duplicates * n), replace=False)
    sources = rng.integers(0, n, copies.size)
    x[copies], y[copies] = x[sources] * 1.3, y[sources]
    wrong = rng.random(n) < noise
    noisy = np.where(wrong, (y + rng.integers(1, classes, n)) % classes, y)
    paths = os.path.join(folder, "emb.npy"), os.path.join(folder, "y.npy")
    np.save(paths[0], x)
    np.save(paths[1], noisy)
    return paths[0], paths[1], {"noise": float(wrong.mean()), "copies": float(duplicates)}


def worker(kind: str, emb: str, labels: str) -> None:
    x, y = np.load(emb, mmap_mode="r"), np.load(labels)
    start = time.perf_counter()
    if kind == "audit":
        from batchsel import audit

        r = audit(emb, y, progress=False)
        out = {"noise_rate": r.noise_rate, "duplicates": r.duplicates[r.threshold]}
    else:
        from batchsel import deduplicate

        r = deduplicate(emb, 0.95, k=10, progress=False)
        out = {"duplicates": r.removed_fraction}
    del x
    out.update(seconds=time.perf_counter() - start, peak_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6)
    print("RESULT " + json.dumps(out), flush=True)


def child(cmd: list[str]) -> dict:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ") or ln.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(cmd)}:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    line = lines[-1]
    return json.loads(line[7:] if line.startswith("RESULT ") else line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--ranks", type=int, default=0, help="also run the command line under mpiexec -n RANKS")
    parser.add_argument(
        "--mpi-only", action="store_true", help="only the mpiexec run (for sizes one process cannot hold)"
    )
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    n = args.rows or (100_000 if args.quick else 1_000_000)
    with tempfile.TemporaryDirectory() as tmp:
        emb, labels, truth = make(n, args.dim, tmp)
        print(
            f"== audit of {n:,} x {args.dim} with labels: {truth['noise']:.1%} wrong labels, "
            f"{truth['copies']:.0%} of rows copies of others =="
        )
        a = None
        if not args.mpi_only:
            a = child([sys.executable, __file__, "--worker", "audit", emb, labels])
            b = child([sys.executable, __file__, "--worker", "dedup", emb, labels])
            print(
                f"audit (torch's default threads): {a['seconds']:.1f} s, peak {a['peak_gb']:.2f} GB; estimated "
                f"noise {a['noise_rate']:.1%} (true {truth['noise']:.1%}), near-duplicates at 0.95 "
                f"{a['duplicates']:.1%}"
            )
            print(
                f"anchor, deduplicate alone (k=10): {b['seconds']:.1f} s, peak {b['peak_gb']:.2f} GB; "
                f"ratio audit / anchor {a['seconds'] / b['seconds']:.2f}"
            )
        if args.ranks:
            cmd = [
                str(MPIEXEC),
                "--allow-run-as-root",
                "--oversubscribe",
                "-n",
                str(args.ranks),
                sys.executable,
                "-m",
                "batchsel",
                "audit",
                emb,
                "--labels",
                labels,
                "--json",
                "--quiet",
            ]
            start = time.perf_counter()
            proc = subprocess.Popen(
                ["/usr/bin/time", "-v", *cmd],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=dict(os.environ, PYTHONPATH=str(ROOT)),
            )
            out, err = proc.communicate(timeout=7200)
            if proc.returncode != 0:
                raise RuntimeError(err[-3000:])
            r = json.loads(out.strip().splitlines()[-1])
            peak = next((ln.split(":")[-1].strip() for ln in err.splitlines() if "Maximum resident" in ln), "?")
            same = "" if a is None else f", same as one process: {abs(r['noise_rate'] - a['noise_rate']) < 1e-4}"
            print(
                f"mpiexec -n {args.ranks} batchsel audit: {time.perf_counter() - start:.1f} s with start-up "
                f"(audit {r['seconds']:.1f} s), largest rank's peak {int(peak) / 1e6 if peak.isdigit() else peak} GB; "
                f"noise {r['noise_rate']:.1%} (true {truth['noise']:.1%}), near-duplicates at 0.95 "
                f"{r['near_duplicates']['0.95']:.1%}{same}"
            )


if __name__ == "__main__":
    main()
