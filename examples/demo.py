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
   seeds, one torch thread as in docs/which-method.md's fast-tier table, which has 5 seeds
   and more tasks).

``--quick`` runs the same code on less: random and loss-rank only in step 2, and in step 4
clean digits only with 2 seeds. Timings mean little on a machine busier than its cores: the
demo then says so on stderr and in its tables' headers. docs/demo.md has a sample of the
output and how long each mode takes.

    python examples/demo.py [--ranks 2] [--out demo_out] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from sklearn.datasets import load_digits

import batchsel
from batchsel.core.io import atomic_write

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
# --quick: the recommended method and its anchor; each MPI job costs far more to start than to train
QUICK_RUNS = [run for run in RUNS if run[0] in ("random", "loss-rank")]


# the method the budgeted tables (docs/which-method.md) recommends first (clean or redundant data)
RECOMMENDED = "loss-rank"
BENCH = os.path.join(os.path.dirname(HERE), "benchmarks", "bench_quality.py")
# a run whose wall lands further than this (a share of random's full wall) from its budget is flagged
OFF_BUDGET = 0.1


def machine_load() -> tuple[float | None, int]:
    """The 1-minute load average (None where the platform has none) and the cores."""
    try:
        load: float | None = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = None
    return load, os.cpu_count() or 1


def load_note() -> str:
    """The machine's load for a table's header; past the cores, a warning (also on stderr):
    the processes then wait for a core, and every timing shows the waits."""
    load, cores = machine_load()
    if load is None:
        return f"{cores} cores, load average unknown"
    note = f"load average {load:.2f} on {cores} cores"
    if load > cores:
        warning = f"WARNING: {note}, more than the cores: timings unreliable"
        print(warning, file=sys.stderr, flush=True)
        return warning
    return note


def bench_command(out: str, quick: bool) -> list[str]:
    return [
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
        "0.5,0.7,1",
        # one thread, as in the fast-tier table the docs cite, so the figures compare; a step
        # split over threads also waits for the slowest whenever the cores are busy
        "--threads",
        "1",
        "--out",
        os.path.join(out, "budget"),
    ]


def budget_comparison(out: str, quick: bool) -> str:
    """Random batches and RECOMMENDED at equal wall budgets (one process); returns the tables."""
    cmd = bench_command(out, quick)
    print(f"\n$ python benchmarks/bench_quality.py {' '.join(cmd[2:-2])}", flush=True)
    # its own table is captured: the demo prints the same figures with every unit named
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"bench_quality.py exited {proc.returncode}")
    with open(os.path.join(out, "budget.json")) as f:
        payload = json.load(f)
    return budget_tables(payload, load_note())


def _saving(m: str, row: dict, off: bool) -> str:
    if row["reached_at"] is None:
        return f"{m} does not reach it, even at the full budget"
    if row["wall_saved"] == 0:
        return f"{m} reaches it only at the full budget: 0 % saved"
    text = (
        f"{m} reaches it from budget {row['reached_at']:g} on, in {100 * (1 - row['wall_saved']):.0f} % of "
        f"random's full-budget wall: {100 * row['wall_saved']:.0f} % saved"
    )
    return text + (" (unreliable: that budget's wall is off it, *)" if off else "")


BUDGET_LEGEND = """\
test acc: mean over the seeds. vs random: accuracy points (pt) above random at the same budget,
± standard error. wall: the time the runs took, in % of random's full-budget wall. Random's
runs at budget f take f x its full steps, the other method's as many steps as its cost per
step, measured before the runs, fits into f of random's wall; either's wall is measured, not
set: each run's fixed costs (set-up, first steps) and the timing noise of runs this short
move it off f, more under load, so random's share need not grow in step with f.
Wall saved: 1 - the wall share of the smallest budget from which on the method reaches
random's full-budget accuracy within 2 standard errors (0 % if only at the full budget)."""


def budget_tables(payload: dict, note: str) -> str:
    """The budget comparison's figures (bench_quality's summary), a table per regime."""
    seeds = payload["args"]["seeds"]
    tables = []
    flagged_any = False
    for task, by_regime in payload["results"].items():
        for regime, res in by_regime.items():
            summary, rows = res["summary"], res["summary"]["rows"]
            budgets = sorted(rows["random"]["budgets"], key=float)
            head = (
                f"{'budget':>6s}  {'method':<10s} {'steps':>5s} {'test acc':>9s} {'vs random':>15s} "
                f"{'wall, % of random full':>24s}"
            )
            lines = [
                f"{task} / {regime}: {seeds} seeds, {res['threads']} torch thread(s); {note}",
                f"random's full budget: {res['full_steps']} steps in {summary['random_wall_seconds']:.2f} s, "
                f"test accuracy {100 * summary['target']:.2f} %",
                head,
                "-" * len(head),
            ]
            flagged: dict[str, set[str]] = {m: set() for m in rows}
            for key in budgets:
                for m, row in rows.items():
                    c = row["budgets"][key]
                    off = abs(c["wall_fraction"] - float(key)) > OFF_BUDGET
                    if off:
                        flagged[m].add(key)
                    vs = "" if m == "random" else f"{100 * c['diff_mean']:+.1f} ± {100 * c['diff_se']:.1f} pt"
                    lines.append(
                        f"{key:>6s}  {m:<10s} {c['steps']:>5d} {100 * c['final_mean']:>7.1f} % {vs:>15s} "
                        f"{100 * c['wall_fraction']:>22.0f} %{' *' if off else ''}"
                    )
            lines.append("random's full-budget accuracy (within 2 s.e.):")
            for m, row in rows.items():
                off = row["reached_at"] is not None and budget_key(row["reached_at"]) in flagged[m]
                lines.append("  " + _saving(m, row, off))
            beyond = rows[RECOMMENDED]["beyond_random"]
            if beyond is not None:
                lines.append(
                    f"  {RECOMMENDED} saves {abs(100 * beyond):.0f} % of random's full-budget wall "
                    f"{'less' if beyond < 0 else 'more'} than random's own shorter runs"
                )
            flagged_any = flagged_any or any(flagged.values())
            tables.append("\n".join(lines))
    legend = BUDGET_LEGEND
    if flagged_any:
        legend += (
            f"\n* the wall lands more than {100 * OFF_BUDGET:.0f} % of random's full wall off its budget: the "
            "machine's speed\nchanged between the cost measurement and the runs, as it does under load."
        )
    return "\n\n".join(tables) + "\n\n" + legend


def budget_key(fraction: float) -> str:
    return f"{fraction:g}"  # as bench_quality keys its budgets


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


def run_all(runs: list[tuple[str, str, list[str]]], ranks: int, short: bool = False) -> list[dict]:
    """Each run under ``ranks`` MPI ranks; ``short``: the scripts' own --quick sizes (tests)."""
    results: list[dict] = []
    prefix = launcher(ranks)
    with tempfile.TemporaryDirectory() as tmp:
        for label, script, args in runs:
            metrics = os.path.join(tmp, f"{len(results)}.json")
            cmd = [*prefix, sys.executable, os.path.join(HERE, script), *args, "--metrics-json", metrics]
            if short:
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
COLUMNS = (
    f"{'run':{LABEL_WIDTH}s} {'labels':>7s} {'test acc':>9s} {'steps':>6s} {'wall s':>7s} {'selecting':>10s} "
    f"{'compile s':>10s}"
)


def format_table(results: list[dict], note: str = "") -> str:
    """``note`` (the machine's load) heads the table; the columns follow."""
    lines = [note] if note else []
    lines += [COLUMNS, "-" * len(COLUMNS)]
    for r in results:
        share = r["select_seconds"] / max(r["wall_seconds"], 1e-9)
        lines.append(
            f"{r['label']:{LABEL_WIDTH}s} {r['label_fraction']:>7.0%} {r['final_accuracy']:>9.4f} {r['steps']:>6d} "
            f"{r['wall_seconds']:>7.1f} {share:>10.1%} {r.get('compile_seconds', 0.0):>10.1f}"
        )
    return "\n".join(lines)


# docs/demo.md holds a full run's output between these markers (--write-docs rewrites them)
DOCS = os.path.join(os.path.dirname(HERE), "docs", "demo.md")
MARKERS = {
    "sample": ("<!-- demo-sample -->\n```text\n", "```\n<!-- /demo-sample -->"),
    "budget": ("<!-- demo-budget-sample -->\n```text\n", "```\n<!-- /demo-budget-sample -->"),
    "measured": ("<!-- demo-measured -->\n", "<!-- /demo-measured -->"),
}
# run-to-run noise of the sample's figures (2 ranks, gloo, the machine's load): stated in docs/demo.md
ACC_NOISE = 0.03


def _docs_span(name: str) -> tuple[str, int, int]:
    with open(DOCS) as f:
        text = f.read()
    begin, end = MARKERS[name]
    a = text.index(begin) + len(begin)
    return text, a, text.index(end, a)


def docs_sample() -> dict[str, tuple[float, int]]:
    """(test accuracy, steps) per run in docs/demo.md's sample."""
    text, a, b = _docs_span("sample")
    lines = text[a:b].splitlines()
    rows = {}
    for line in lines[lines.index(COLUMNS) + 2 :]:
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


def write_docs(parts: dict[str, str]) -> None:
    """Replace the text between each pair of MARKERS named in ``parts``."""
    for name, new in parts.items():
        text, a, b = _docs_span(name)
        with atomic_write(DOCS, "w") as f:
            f.write(text[:a] + new + "\n" + text[b:])


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
    parser.add_argument(
        "--out", default="demo_out", help="folder for the PNGs and the budget figures (default demo_out)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="random and loss-rank only; the budget comparison on clean digits, 2 seeds"
    )
    parser.add_argument(
        "--write-docs",
        action="store_true",
        help="write this run's output into docs/demo.md (a full run, fresh install)",
    )
    args = parser.parse_args()
    if args.write_docs and args.quick:
        parser.error("--write-docs records the full demo: leave out --quick")
    start = time.perf_counter()
    runs = QUICK_RUNS if args.quick else RUNS
    print(
        f"{'quick demo' if args.quick else 'demo'}: {len(runs)} training runs on {args.ranks} ranks, then "
        f"{RECOMMENDED} against random at equal wall budgets; {load_note()}",
        flush=True,
    )
    graph_figures()
    results = run_all(runs, args.ranks)
    table = format_table(results, f"{len(results)} runs, {results[0]['world_size']} rank(s); {load_note()}")
    print("\n" + table)
    compare_with_docs(results)
    os.makedirs(args.out, exist_ok=True)
    png = os.path.join(args.out, "accuracy.png")
    plot(results, png)
    budget = budget_comparison(args.out, args.quick)
    print("\n" + budget)
    seconds = time.perf_counter() - start
    print(f"\nwrote {png} and {os.path.join(args.out, 'budget')}.*; demo took {seconds:.0f} s ({load_note()})")
    if args.write_docs:
        load, cores = machine_load()
        write_docs(
            {
                "sample": table,
                "budget": budget,
                "measured": f"Generated by `python examples/demo.py --write-docs` on {time.strftime('%Y-%m-%d')} "
                f"({platform.system()} {platform.machine()}, {cores} cores, batchsel {batchsel.__version__}): "
                f"the demo took {seconds:.0f} s, load average {load if load is None else round(load, 2)} at its end.",
            }
        )


if __name__ == "__main__":
    main()
