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
4. Compares ``AutoSelector`` (the selector the README leads with) and loss-rank with random
   batches at equal wall budgets, as a user planning a run of fixed length would: half, 0.7
   and all of random's wall time, every run's learning rate decayed over its own budget (the
   budgeted regime benchmark, ``benchmarks/bench_quality.py``, on digits with a wider MLP,
   clean and redundant, 3 seeds, one torch thread as in docs/which-method.md's fast-tier
   table, which has 5 seeds and more tasks), and plots accuracy against the budget.
5. Examples of different lengths: a small GRU over synthetic token sequences of log-normal
   lengths, one epoch of random batches (``shuffle=True``'s) against ``BucketSelector``'s
   (``pad_collate`` pads each batch): the share of padding and the wall per epoch.
6. Names the pages to read next.

``--quick`` runs the same code on less: random and loss-rank only in step 2, and in step 4
clean digits only with 2 seeds; it writes into demo_quick_out/ (the full demo into
demo_out/). Timings mean little on a machine busier than its cores: the demo then says so,
once, on stderr at its end. docs/demo.md has a sample of the output and how long each mode
takes.

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


# the budget comparison's methods beside random (bench_quality.py's names): the selector the README
# leads with, and loss-rank, whose batches it draws on clean data (docs/which-method.md)
RECOMMENDED = "auto"
COMPARED = (RECOMMENDED, "loss-rank")
# how the tables name them: as the README does
NAMES = {"random": "random", "auto": "AutoSelector", "loss-rank": "loss-rank"}
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


# the highest load average load_note saw past the cores: busy_warning prints it once, at the end
_busiest: list[float] = []


def load_note() -> str:
    """The machine's load for a table's header. Past the cores the load is kept for
    :func:`busy_warning`: the processes then wait for a core, and every timing shows the waits."""
    load, cores = machine_load()
    if load is None:
        return f"{cores} cores, load average unknown"
    if load > cores:
        _busiest.append(load)
    return f"load average {load:.2f} on {cores} cores"


def busy_warning() -> str | None:
    """One warning for the whole run (on stderr) where some load average exceeded the cores."""
    if not _busiest:
        return None
    warning = (
        f"WARNING: the load average reached {max(_busiest):.2f} on {os.cpu_count() or 1} cores during the demo, "
        "more than the cores: its timings (wall s, selecting, the budget walls, the buckets' walls) are unreliable"
    )
    print(warning, file=sys.stderr, flush=True)
    return warning


def bench_command(out: str, quick: bool) -> list[str]:
    return [
        sys.executable,
        BENCH,
        "--tasks",
        "digits-wide",
        "--regimes",
        "clean" if quick else "clean,redundant",
        "--methods",
        ",".join(("random", *COMPARED)),
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
    """Random batches and COMPARED at equal wall budgets (one process); returns the tables and
    redraws the benchmark's PNG per regime with the budget on x (:func:`plot_budgets`)."""
    cmd = bench_command(out, quick)
    print(f"\n$ python benchmarks/bench_quality.py {' '.join(cmd[2:-2])}", flush=True)
    # its own table is captured: the demo prints the same figures with every unit named
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"bench_quality.py exited {proc.returncode}")
    with open(os.path.join(out, "budget.json")) as f:
        payload = json.load(f)
    plot_budgets(payload, os.path.join(out, "budget"))
    return budget_tables(payload, load_note())


def _saving(method: str, row: dict, off: bool) -> str:
    m = NAMES.get(method, method)
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
                f"{'budget':>6s}  {'method':<12s} {'steps':>5s} {'test acc':>9s} {'vs random':>15s} "
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
                        f"{key:>6s}  {NAMES.get(m, m):<12s} {c['steps']:>5d} {100 * c['final_mean']:>7.1f} % {vs:>15s} "
                        f"{100 * c['wall_fraction']:>22.0f} %{' *' if off else ''}"
                    )
            lines.append("random's full-budget accuracy (within 2 s.e.):")
            for m, row in rows.items():
                off = row["reached_at"] is not None and budget_key(row["reached_at"]) in flagged[m]
                lines.append("  " + _saving(m, row, off))
            for m in (m for m in rows if m != "random"):
                beyond = rows[m]["beyond_random"]
                if beyond is not None:
                    lines.append(
                        f"  {NAMES.get(m, m)} saves {abs(100 * beyond):.0f} % of random's full-budget wall "
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


def plot_budgets(payload: dict, stem: str) -> list[str]:
    """``<stem>_<regime>.png``: test accuracy against the budget (a share of random's full wall),
    a line per method, ± a standard error over the seeds. The budget, not the measured wall, is
    on x: measured walls of short runs need not grow with the budget, and a line through them
    can double back."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for task, by_regime in payload["results"].items():
        for regime, res in by_regime.items():
            rows = res["summary"]["rows"]
            fig, ax = plt.subplots(figsize=(5.5, 3.8))
            for m, row in rows.items():
                keys = sorted(row["budgets"], key=float)
                means = [100 * row["budgets"][k]["final_mean"] for k in keys]
                ses = [100 * float(np.std(row["budgets"][k]["final_per_seed"], ddof=1)) for k in keys]
                ses = [se / np.sqrt(len(row["budgets"][k]["final_per_seed"])) for se, k in zip(ses, keys)]
                ax.errorbar(
                    [float(k) for k in keys], means, yerr=ses, marker="o", ms=4, capsize=3, label=NAMES.get(m, m)
                )
            ax.axhline(100 * res["summary"]["target"], color="grey", lw=0.6, ls=":", label="random's full budget")
            ax.set_xlabel("budget: share of random's full-budget wall")
            ax.set_ylabel("test accuracy, %")
            ax.set_title(f"{task} / {regime}, {payload['args']['seeds']} seeds")
            ax.grid(alpha=0.3)
            ax.legend(loc="lower right", fontsize=8)
            fig.tight_layout()
            path = f"{stem}_{regime}.png"
            with atomic_write(path, "wb") as f:
                fig.savefig(f, format="png", dpi=100)
            plt.close(fig)
            paths.append(path)
    return paths


# the variable-length section: a GRU over token sequences of log-normal lengths (as in
# benchmarks/bench_buckets.py's t2-gru task, smaller), batches padded to their longest member
SEQUENCES, SEQ_BATCH, SEQ_VOCAB = 1024, 32, 16


def bucket_comparison(seed: int = 0) -> str:
    """One epoch of random batches (``shuffle=True``'s) and one of ``BucketSelector``'s, twice
    each, interleaved; per method the padding share of the batches trained and the faster of
    its two epochs' walls (one torch thread). Returns the table."""
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, Dataset

    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(30), 0.9, SEQUENCES).round(), 4, 400).astype(np.int64)
    tokens = [torch.from_numpy(rng.integers(1, SEQ_VOCAB, n)) for n in lengths]
    labels = torch.from_numpy(rng.integers(0, 2, SEQUENCES))

    class Sequences(Dataset):
        def __len__(self) -> int:
            return SEQUENCES

        def __getitem__(self, i: int) -> tuple:
            return tokens[i], labels[i], i

    class GRU(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(SEQ_VOCAB, 16, padding_idx=0)
            self.gru = torch.nn.GRU(16, 32, batch_first=True)
            self.head = torch.nn.Linear(32, 2)

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            out, _ = self.gru(self.embed(x))  # over the padding too: what a padded batch costs
            return self.head(out[torch.arange(len(x)), mask.sum(1) - 1])

    selectors = {
        "random (shuffle=True)": batchsel.RandomSelector(SEQUENCES, SEQ_BATCH, seed=seed),
        "BucketSelector": batchsel.BucketSelector(lengths, batch_size=SEQ_BATCH, seed=seed),
    }
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the budget comparison: a step over threads waits for the slowest
    try:
        walls: dict[str, list[float]] = {name: [] for name in selectors}
        padding: dict[str, float] = {}
        steps: dict[str, int] = {}
        for epoch in range(3):  # epoch 0: a few untimed warm-up steps of each
            for name, selector in selectors.items():
                torch.manual_seed(seed)
                model = GRU()
                opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
                sampler = batchsel.SelectionBatchSampler(selector, rank=0, world_size=1)
                sampler.set_epoch(epoch)
                loader = DataLoader(Sequences(), batch_sampler=sampler, collate_fn=batchsel.pad_collate)
                real = padded = n_steps = 0
                start = time.perf_counter()
                for x, mask, y, _ in loader:
                    # summed over the batch and divided by B: every example the same weight
                    loss = F.cross_entropy(model(x, mask), y, reduction="sum") / SEQ_BATCH
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    real, padded, n_steps = real + int(mask.sum()), padded + mask.numel(), n_steps + 1
                    if not epoch and n_steps == 4:
                        break  # the warm-up: torch's first steps of each shape, the selector's compilation
                if epoch:
                    walls[name].append(time.perf_counter() - start)
                    padding[name], steps[name] = 1 - real / padded, n_steps
    finally:
        torch.set_num_threads(threads)
    head = f"{'batches':<22s} {'steps':>5s} {'padding':>8s} {'wall s / epoch':>15s} {'vs random':>10s}"
    base = min(walls["random (shuffle=True)"])
    lines = [
        f"{SEQUENCES} sequences, lengths log-normal (median 30, 4 to 400), a GRU (hidden 32), batches of "
        f"{SEQ_BATCH}, 1 torch thread; {load_note()}",
        head,
        "-" * len(head),
    ]
    for name in selectors:
        wall = min(walls[name])
        lines.append(f"{name:<22s} {steps[name]:>5d} {100 * padding[name]:>6.0f} % {wall:>15.2f} {wall / base:>9.2f}x")
    return "\n".join(lines) + (
        "\npadding: the share of the padded batches' tokens that are padding; wall: the faster of two epochs.\n"
        "On the benchmark's tasks buckets ended 0.4-0.6 points below random at equal epochs, and reached\n"
        "random's accuracy in about half random's wall (docs/which-method.md)."
    )


# what the demo ends with: the three things the README leads with, where to read how
NEXT = """\
Next, in your own training loop:
  AutoSelector instead of shuffle=True     README.md, "Replace shuffle=True" (the DataLoader form: docs/getting-started.md)
  examples of different lengths (buckets)  docs/guide/variable-length.md
  a training set that streams              docs/guide/streaming.md (pip install 'batchsel[stream]')"""


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
    "buckets": ("<!-- demo-buckets-sample -->\n```text\n", "```\n<!-- /demo-buckets-sample -->"),
    "measured": ("<!-- demo-measured -->\n", "<!-- /demo-measured -->"),
}
# markers the page may not hold yet (its prose decides where their sample goes): write_docs skips them
OPTIONAL_MARKERS = {"buckets"}
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
    """Replace the text between each pair of MARKERS named in ``parts`` (an OPTIONAL_MARKERS
    pair the page lacks is skipped, with a note)."""
    for name, new in parts.items():
        try:
            text, a, b = _docs_span(name)
        except ValueError:
            if name not in OPTIONAL_MARKERS:
                raise
            print(f"docs/demo.md has no {MARKERS[name][0].splitlines()[0]} block: its sample is not written")
            continue
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
        "--out",
        default=None,
        help="folder for the PNGs and the budget figures (default demo_out, with --quick demo_quick_out)",
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
    # each mode its own folder: a quick run never overwrites the full run's figures
    out = args.out or ("demo_quick_out" if args.quick else "demo_out")
    start = time.perf_counter()
    runs = QUICK_RUNS if args.quick else RUNS
    compared = " and ".join(NAMES[m] for m in COMPARED)
    print(
        f"{'quick demo' if args.quick else 'demo'}: {len(runs)} training runs on {args.ranks} ranks, then "
        f"{compared} against random at equal wall budgets, then length buckets against random batches; "
        f"{load_note()}",
        flush=True,
    )
    graph_figures()
    results = run_all(runs, args.ranks)
    table = format_table(results, f"{len(results)} runs, {results[0]['world_size']} rank(s); {load_note()}")
    print("\n" + table)
    compare_with_docs(results)
    os.makedirs(out, exist_ok=True)
    png = os.path.join(out, "accuracy.png")
    plot(results, png)
    budget = budget_comparison(out, args.quick)
    print("\n" + budget)
    print("\nExamples of different lengths: random batches against BucketSelector's, padded by pad_collate", flush=True)
    buckets = bucket_comparison()
    print(buckets)
    seconds = time.perf_counter() - start
    print(f"\nwrote {png} and {os.path.join(out, 'budget')}.*; demo took {seconds:.0f} s ({load_note()})")
    busy_warning()
    print("\n" + NEXT)
    if args.write_docs:
        load, cores = machine_load()
        parts = {
            "sample": table,
            "budget": budget,
            "buckets": buckets,
            "measured": f"Generated by `python examples/demo.py --write-docs` on {time.strftime('%Y-%m-%d')} "
            f"({platform.system()} {platform.machine()}, {cores} cores, batchsel {batchsel.__version__}): "
            f"the demo took {seconds:.0f} s, load average {load if load is None else round(load, 2)} at its end.",
        }
        write_docs(parts)


if __name__ == "__main__":
    main()
