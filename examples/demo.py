"""batchsel end-to-end demo on the bundled default data (scikit-learn's digits).

1. Builds the k-NN affinity graph of the digit images (batchsel.EmbeddingIndex) and prints
   its figures.
2. Trains small MLPs with 2 MPI ranks (mpiexec, DDP over gloo): random, loss-rank and
   submodular (SMDL) batches (examples/train_ddp.py); random batches and the RHO-LOSS
   candidate filter on digits with 25% wrong labels (examples/train_filter.py); and the
   graph-regularized semi-supervised loss on graph-block batches with 5% of the labels
   (examples/semi_supervised.py).
3. Prints one table (final test accuracy, steps, wall time, share of time selecting) and
   writes a PNG of test accuracy against training steps.
4. Compares the recommended method with random batches at equal wall budgets, as a user
   planning a run of fixed length would: half, 0.7 and all of random's wall time, every
   run's learning rate decayed over its own budget (the budgeted regime benchmark,
   ``benchmarks/bench_quality.py``, on digits with a wider MLP, clean and redundant, 3
   seeds; docs/which-method.md has 5 seeds and more tasks).

    python examples/demo.py [--ranks 2] [--out demo_out] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from sklearn.datasets import load_digits

import batchsel
from batchsel.io import atomic_write

HERE = os.path.dirname(os.path.abspath(__file__))

# (label, script, arguments); every script accepts --metrics-json.
# Random batches next to each method on the data it is recommended for (docs/which-method.md, "Which
# method, when"): loss-rank and SMDL on clean digits, the RHO-LOSS candidate filter on digits
# with 25 % wrong labels, graph-block batches for the graph-regularized loss with 5 % labels.
RUNS = [
    ("random", "train_ddp.py", ["--method", "random"]),
    ("loss-rank", "train_ddp.py", ["--method", "loss"]),
    ("submodular (SMDL)", "train_ddp.py", ["--method", "submodular"]),
    ("random, 25% wrong labels", "train_filter.py", ["--score", "none", "--label-noise", "0.25"]),
    ("RHO-LOSS filter, 25% wrong", "train_filter.py", ["--score", "rho", "--label-noise", "0.25"]),
    ("graph-reg. SSL, 5% labels", "semi_supervised.py", ["--method", "blocks", "--label-fraction", "0.05"]),
]


# the method the budgeted tables (docs/which-method.md) recommends first (clean or redundant data)
RECOMMENDED = "loss-rank"
BENCH = os.path.join(os.path.dirname(HERE), "benchmarks", "bench_quality.py")


def budget_comparison(out: str, quick: bool) -> None:
    """Random batches and RECOMMENDED at equal wall budgets (one process, torch's threads)."""
    cmd = [
        sys.executable,
        BENCH,
        "--tasks",
        "digits-wide",
        "--regimes",
        "clean" if quick else "clean,redundant",
        "--methods",
        f"random,{RECOMMENDED}",
        "--seeds",
        "2" if quick else "3",
        "--budgets",
        "0.5,1" if quick else "0.5,0.7,1",
        "--out",
        os.path.join(out, "budget"),
    ]
    print(f"\n$ python benchmarks/bench_quality.py {' '.join(cmd[2:-2])}", flush=True)
    subprocess.run(cmd, check=True, timeout=900)


def graph_figures(k: int = 10) -> None:
    digits = load_digits()
    x, y = digits.data.astype(np.float32), digits.target
    start = time.perf_counter()
    index = batchsel.EmbeddingIndex(x, metric="euclidean", progress=False)
    graph = index.knn_graph(k=k, kernel="rbf")
    seconds = time.perf_counter() - start
    rows, cols = graph.nonzero()
    same = y[rows] == y[cols]
    degree = np.diff(graph.indptr)
    print(
        f"digits: N={x.shape[0]} d={x.shape[1]}, index {index.kind}/{index.metric}, graph built in {seconds * 1e3:.0f} ms"
    )
    print(
        f"k-NN graph (k={k}, rbf, sigma={index.sigma_:.1f}): {graph.nnz} edges, degree min/mean/max "
        f"{degree.min()}/{degree.mean():.1f}/{degree.max()}, symmetric={(graph != graph.T).nnz == 0}; "
        f"{same.mean():.1%} of edges join images of the same digit"
    )


def launcher(ranks: int) -> list[str]:
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    if ranks <= 1 or mpiexec is None:
        if ranks > 1:
            print("mpiexec not found: running each job in one process")
        return []
    extra = ["--allow-run-as-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    return [mpiexec, *extra, "--oversubscribe", "-n", str(ranks)]


def run_all(ranks: int, out: str, quick: bool) -> list[dict]:
    results = []
    prefix = launcher(ranks)
    with tempfile.TemporaryDirectory() as tmp:
        for label, script, args in RUNS:
            metrics = os.path.join(tmp, f"{len(results)}.json")
            cmd = [*prefix, sys.executable, os.path.join(HERE, script), *args, "--metrics-json", metrics]
            if quick:
                cmd += ["--quick"]
            shown = (["mpiexec", "-n", str(ranks)] if prefix else []) + ["python", f"examples/{script}", *args]
            print(f"\n$ {' '.join(shown)}", flush=True)
            subprocess.run(cmd, check=True, timeout=900)
            with open(metrics) as f:
                result = json.load(f)
            result["label"] = label
            results.append(result)
    return results


LABEL_WIDTH = 28  # the table's first column; docs_sample reads the rows back by it


def format_table(results: list[dict]) -> str:
    head = (
        f"{'run':{LABEL_WIDTH}s} {'labels':>7s} {'test acc':>9s} {'steps':>6s} {'wall s':>7s} {'selecting':>10s} "
        f"{'compile s':>10s}"
    )
    lines = [head, "-" * len(head)]
    for r in results:
        share = r["select_seconds"] / max(r["wall_seconds"], 1e-9)
        lines.append(
            f"{r['label']:{LABEL_WIDTH}s} {r['label_fraction']:>7.0%} {r['final_accuracy']:>9.4f} {r['steps']:>6d} "
            f"{r['wall_seconds']:>7.1f} {share:>10.1%} {r.get('compile_seconds', 0.0):>10.1f}"
        )
    return "\n".join(lines)


# docs/demo.md holds a fresh install's output between these markers (--write-docs rewrites it)
DOCS = os.path.join(os.path.dirname(HERE), "docs", "demo.md")
BEGIN, END = "<!-- demo-sample -->\n```text\n", "```\n<!-- /demo-sample -->"
# run-to-run noise of the sample's figures (2 ranks, gloo, the machine's load): stated in docs/demo.md
ACC_NOISE = 0.03


def _docs_and_sample_span() -> tuple[str, int, int]:
    with open(DOCS) as f:
        text = f.read()
    return text, text.index(BEGIN) + len(BEGIN), text.index(END)


def docs_sample() -> dict[str, tuple[float, int]]:
    """(test accuracy, steps) per run in docs/demo.md's sample."""
    text, a, b = _docs_and_sample_span()
    rows = {}
    for line in text[a:b].splitlines()[2:]:
        rest = line[LABEL_WIDTH:].split()
        rows[line[:LABEL_WIDTH].strip()] = (float(rest[1]), int(rest[2]))
    return rows


def compare_with_docs(results: list[dict]) -> None:
    sample, off = docs_sample(), []
    for r in results:
        if r["label"] not in sample:
            continue
        acc, steps = sample[r["label"]]
        if abs(r["final_accuracy"] - acc) > ACC_NOISE or r["steps"] != steps:
            off.append(f"{r['label']}: {r['final_accuracy']:.4f} vs {acc:.4f}, steps {r['steps']} vs {steps}")
    if off:
        print(f"differs from the sample in docs/demo.md beyond +-{ACC_NOISE} accuracy: " + "; ".join(off))
    else:
        print(f"matches the sample in docs/demo.md (test accuracy within +-{ACC_NOISE}, the same steps)")


def write_docs(table: str) -> None:
    text, a, b = _docs_and_sample_span()
    with atomic_write(DOCS, "w") as f:
        f.write(text[:a] + table + "\n" + text[b:])


def plot(results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        steps, acc = zip(*r["history"])
        ax.plot(steps, acc, label=r["label"])
    ax.set_xlabel("training steps (per rank)")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"digits, {results[0]['world_size']} ranks")
    ax.set_ylim(0.5, 1.0)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2, help="MPI ranks per training run (default 2)")
    parser.add_argument("--out", default="demo_out", help="folder for the PNG (default demo_out)")
    parser.add_argument("--quick", action="store_true", help="short runs (for tests)")
    parser.add_argument(
        "--write-docs", action="store_true", help="write this run's table into docs/demo.md (run it on a fresh install)"
    )
    args = parser.parse_args()
    start = time.perf_counter()
    graph_figures()
    results = run_all(args.ranks, args.out, args.quick)
    table = format_table(results)
    print("\n" + table)
    if args.write_docs:
        write_docs(table)
    elif not args.quick:
        compare_with_docs(results)
    os.makedirs(args.out, exist_ok=True)
    png = os.path.join(args.out, "accuracy.png")
    plot(results, png)
    budget_comparison(args.out, args.quick)
    print(f"\nwrote {png}; demo took {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
