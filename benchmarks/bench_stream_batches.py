"""Streaming batches (issue #52): what ``StreamBatches`` costs over the bare stream, that its
memory does not grow with the stream, and what its selection and grouping from the buffer
do to time-to-accuracy on a step-dominated task fed as a stream.

(a) Overhead (``--overhead``): a stream of ``--examples`` (default 1M) examples made by a
generator function (``{"id", "tokens", "label"}``, tokens an int64 array of log-normal
length, median 40, clipped to [4, 256]), batches of 32 padded by the same collate. The
anchor is the bare stream: the generator's examples cut into batches of 32 in the order
they come (``itertools.islice``) and collated; the second, the plain shuffle buffer a stream
is trained with otherwise (Hugging Face ``IterableDataset.shuffle``'s algorithm, 4096
examples). Against them, in the same run and process,
``StreamBatches`` with a buffer of 4096: ``random`` (the block shuffle), ``random`` grouped
by length, and ``loss-rank`` (after one epoch's losses were observed, so the pools are
ranked). Two streams: JSON lines decoded as they are read (a text stream's reader), and
numpy arrays made as they are read (nothing decoded: the cheapest stream, where the
overhead shows most). Reported: microseconds per example and the overhead over the anchor
in per cent (target <= 5 %), the best of 3 passes each (2 for the decoded stream),
interleaved; the peak RSS of fresh processes streaming 1/4 of the examples and all of them
in random mode (memory bounded by the buffer: the two the same); the 1-thread figures
beside (torch's threads set to 1).

(b) Time to accuracy (``--quality``): ``bench_buckets.py``'s budget-fair protocol and its
``t1-transformer`` task (variable-length token sequences, a transformer encoder, padded
batches; every run's learning rate warmed up and cosine-decayed over its own budget; 5 seeds;
budgets 0.5 and 1.0 of random's full wall), the training set fed as a stream: 8 shards of
its examples read by ``StreamBatches`` (buffer 512 = 16 batches, one reader, in the
training process). Methods: ``shuffle`` (the map-style random anchor the protocol needs),
``stream-shuffle`` (the plain shuffle buffer), ``stream-grouped`` (its pools grouped by
length), ``stream-loss-rank``, ``stream-loss-rank-grouped``, and ``shuffle-aa`` (the A/A
control). The table prints each method's paired difference to ``shuffle``; the summary below
it to ``stream-shuffle``.

``--quality --first-seed 5 --seeds 10 --methods stream-shuffle,stream-loss-rank`` replicates
cells on fresh seeds (into ``bench_stream_quality_replication.*``).

Run ``python benchmarks/bench_stream_batches.py --overhead`` (about 3 min on 2 idle cores)
and ``--quality`` (about 12 min); ``--quick`` runs both small. Writes
``benchmarks/results/speed/bench_stream_batches.md`` and
``benchmarks/results/buckets/bench_stream_quality.{json,md}``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_buckets as BB  # noqa: E402

import batchsel  # noqa: E402
from batchsel import StreamBatches  # noqa: E402
from batchsel.core.io import atomic_write  # noqa: E402

BATCH = 32
BUFFER = 4096
SPEED = ROOT / "benchmarks" / "results" / "speed" / "bench_stream_batches.md"
QUALITY = ROOT / "benchmarks" / "results" / "buckets" / "bench_stream_quality"


# -- (a) overhead ------------------------------------------------------------------------
class Examples:
    """The stream: ``count`` examples, the same on every pass (seeded per block of 4096).

    ``decoded``: each example is a JSON line decoded as it is read (what a text stream's
    reader does; the lines are written per block as the stream goes); else the examples are
    made as numpy arrays, nothing decoded (the cheapest stream there is)."""

    def __init__(self, count: int, decoded: bool) -> None:
        self.count, self.decoded = count, decoded

    def __call__(self) -> Iterator[dict[str, Any]]:
        for block in range(0, self.count, 4096):
            rng = np.random.default_rng(block)
            size = min(4096, self.count - block)
            lengths = np.clip(np.round(40 * np.exp(0.8 * rng.standard_normal(size))), 4, 256).astype(np.int64)
            pool = rng.integers(1, 1000, size=int(lengths.sum()))
            starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
            labels = rng.integers(0, 4, size=size)
            if not self.decoded:
                for j in range(size):
                    yield {"id": block + j, "tokens": pool[starts[j] : starts[j] + lengths[j]], "label": int(labels[j])}
                continue
            tokens = pool.tolist()
            lines = [
                json.dumps(
                    {"id": block + j, "tokens": tokens[starts[j] : starts[j] + lengths[j]], "label": int(labels[j])}
                )
                for j in range(size)
            ]
            for line in lines:
                example = json.loads(line)
                example["tokens"] = np.asarray(example["tokens"], dtype=np.int64)
                yield example


def collate(examples: list[dict[str, Any]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Tokens padded to the batch's longest, the mask, the labels."""
    longest = max(len(e["tokens"]) for e in examples)
    tokens = np.zeros((len(examples), longest), dtype=np.int64)
    for row, e in enumerate(examples):
        tokens[row, : len(e["tokens"])] = e["tokens"]
    tokens_t = torch.from_numpy(tokens)
    return tokens_t, tokens_t != 0, torch.tensor([e["label"] for e in examples])


def bare_pass(source: Examples) -> int:
    count, examples = 0, iter(source())
    for chunk in iter(lambda: list(itertools.islice(examples, BATCH)), []):
        collate(chunk)
        count += len(chunk)
    return count


def shuffle_buffer_pass(source: Examples) -> int:
    """The plain shuffle buffer (Hugging Face ``IterableDataset.shuffle``'s algorithm: once
    full, each new example replaces a random one of the buffer, which is yielded), cut into
    batches and collated: what a stream is trained with without batchsel."""
    rng = np.random.default_rng(0)
    buffer: list[Any] = []
    batch: list[Any] = []
    count = 0
    slots: list[int] = []
    for example in source():
        if len(buffer) < BUFFER:
            buffer.append(example)
            continue
        if not slots:
            slots = rng.integers(0, BUFFER, size=1000).tolist()
        i = slots.pop()
        batch.append(buffer[i])
        buffer[i] = example
        if len(batch) == BATCH:
            collate(batch)
            count, batch = count + BATCH, []
    rest = batch + [buffer[i] for i in rng.permutation(len(buffer))]
    for start in range(0, len(rest), BATCH):
        collate(rest[start : start + BATCH])
    return count + len(rest)


def stream_pass(stream: StreamBatches, epoch: int) -> int:
    stream.set_epoch(epoch)
    return sum(len(batch.ids) for batch in stream)


def overhead(count: int, repeats: int, decoded: bool) -> dict[str, Any]:
    source = Examples(count, decoded)
    streams = {
        "random": StreamBatches(source, BATCH, buffer_size=BUFFER, collate_fn=collate),
        "random, grouped by length": StreamBatches(
            source, BATCH, buffer_size=BUFFER, collate_fn=collate, cost="tokens"
        ),
        "loss-rank": StreamBatches(source, BATCH, buffer_size=BUFFER, collate_fn=collate, mode="loss-rank"),
    }
    ranked = streams["loss-rank"]
    ranked.set_epoch(0)
    for batch in ranked:  # one epoch's losses, so the timed epoch ranks its pools
        ranked.observe(batch, losses=np.asarray(batch.data[1].sum(1), dtype=np.float64))
    best: dict[str, float] = {}
    for _ in range(repeats):  # interleaved: a load spike hits every method alike
        for name, run in [
            ("bare stream", lambda: bare_pass(source)),
            ("plain shuffle buffer", lambda: shuffle_buffer_pass(source)),
        ] + [(n, (lambda s=s: stream_pass(s, 1))) for n, s in streams.items()]:
            t0 = time.perf_counter()
            seen = run()
            seconds = time.perf_counter() - t0
            assert seen == count, (name, seen)
            best[name] = min(best.get(name, np.inf), seconds)
    bare, buffered = best["bare stream"], best["plain shuffle buffer"]
    return {
        name: {
            "us_per_example": 1e6 * s / count,
            "overhead_pct": 100.0 * (s / bare - 1.0),
            "over_buffer_pct": 100.0 * (s / buffered - 1.0),
        }
        for name, s in best.items()
    }


def memory(count: int) -> dict[str, float]:
    """The peak RSS growth (MB) of a fresh process streaming a quarter of ``count`` examples,
    and all of them (random mode, nothing decoded), from after its imports (the peak is
    reset there: Linux's ``clear_refs``)."""
    code = (
        "import sys; sys.path.insert(0, {bench!r}); import bench_stream_batches as S\n"
        "def rss(field): return float(next(l.split()[1] for l in open('/proc/self/status') if l.startswith(field)))\n"
        "base = rss('VmRSS:'); open('/proc/self/clear_refs', 'w').write('5')\n"
        "S.stream_pass(S.StreamBatches(S.Examples({n}, False), S.BATCH, buffer_size=S.BUFFER, collate_fn=S.collate), 0)\n"
        "print((rss('VmHWM:') - base) / 1024)"
    )
    out = {}
    for key, n in (("0.25", count // 4), ("1", count)):
        done = subprocess.run(
            [sys.executable, "-c", code.format(bench=str(ROOT / "benchmarks"), n=n)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        out[key] = float(done.stdout.split()[-1])
    return out


def run_overhead(count: int, repeats: int, quick: bool) -> str:
    load = [round(v, 2) for v in os.getloadavg()]
    threads = torch.get_num_threads()
    lines = [
        "# StreamBatches over the bare stream: `benchmarks/bench_stream_batches.py --overhead`\n",
        f"Measured {time.strftime('%Y-%m-%d %H:%M')} (batchsel {batchsel.__version__}), {count:,} examples "
        f"(token arrays, median length 40), batches of {BATCH} padded by one collate, buffers of {BUFFER}, best of "
        f"{repeats} passes each, interleaved; load average before {load}.\n",
    ]
    for decoded, what in ((True, "JSON lines decoded as read"), (False, "numpy arrays, nothing decoded")):
        rows = {}
        for t in (threads, 1):
            torch.set_num_threads(t)
            rows[t] = overhead(count, max(1, repeats - 1) if decoded else repeats, decoded)
        torch.set_num_threads(threads)
        lines += [
            f"\n## The stream: {what}\n",
            f"| method | us / example ({threads} threads) | over the bare stream | over a shuffle buffer "
            "| us / example (1 thread) | over the bare stream | over a shuffle buffer |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for name in rows[threads]:
            cells = []
            for t in (threads, 1):
                row = rows[t][name]
                cells.append(f"{row['us_per_example']:.2f}")
                cells.append("anchor" if name == "bare stream" else f"{row['overhead_pct']:+.1f} %")
                cells.append("anchor" if name == "plain shuffle buffer" else f"{row['over_buffer_pct']:+.1f} %")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    mem = memory(count)
    lines.append(
        f"\nPeak RSS growth of a fresh process past its imports (random mode, arrays): {mem['0.25']:.0f} MB "
        f"streaming {count // 4:,} examples, {mem['1']:.0f} MB streaming {count:,}: the buffer's, not the "
        "stream's. The feedback modes add one entry per id trained on. "
        f"Load average after: {[round(v, 2) for v in os.getloadavg()]}.\n"
    )
    text = "\n".join(lines)
    print(text)
    if not quick:
        SPEED.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(str(SPEED), "w") as f:
            f.write(text)
    return text


# -- (b) time to accuracy ----------------------------------------------------------------
class ShardRows:
    """``open_shard``: a shard (an array of row numbers) -> the rows as examples."""

    def __init__(self, data: Any) -> None:
        self.data = data

    def __call__(self, rows: np.ndarray) -> Iterator[dict[str, Any]]:
        for i in rows.tolist():
            yield {"id": i, "length": int(self.data.lengths[i])}


class StreamMethod:
    """A task's training set as a stream of 8 shards, in ``bench_buckets``' batch-source shape."""

    def __init__(self, train: Any, batch_size: int, seed: int, mode: str, grouped: bool) -> None:
        shards = np.array_split(np.arange(len(train.y)), 8)
        self.collate = BB.PadCollate(train)
        self.stream = StreamBatches(
            shards, batch_size, open_shard=ShardRows(train), buffer_size=16 * batch_size, mode=mode, seed=seed,
            cost="length" if grouped else None, collate_fn=lambda ex: [e["id"] for e in ex],
        )  # fmt: skip
        self.num_batches = -(-len(train.y) // batch_size)
        self.online = mode != "random"

    def set_epoch(self, epoch: int) -> None:
        self.stream.set_epoch(epoch)

    def __iter__(self) -> Iterator[tuple]:
        for batch in self.stream:
            yield self.collate(batch.data)

    def observe(self, indices: np.ndarray, losses: Any) -> None:
        self.stream.observe(indices.tolist(), losses)


STREAM_METHODS = {
    "stream-shuffle": ("random", False),
    "stream-grouped": ("random", True),
    "stream-loss-rank": ("loss-rank", False),
    "stream-loss-rank-grouped": ("loss-rank", True),
}


def run_quality(quick: bool, seeds: int | None, first_seed: int = 0, methods: str | None = None) -> dict:
    for name, (mode, grouped) in STREAM_METHODS.items():
        BB.BATCH_SOURCES[name] = lambda train, b, seed, m=mode, g=grouped: StreamMethod(train, b, seed, m, g)
    BB.FULL_METHODS = ("shuffle", *STREAM_METHODS)
    BB.EQ_METHODS = ("shuffle-aa",)
    BB.TITLE = "# Streaming batches (issue #52): `benchmarks/bench_stream_batches.py --quality`\n"
    stem = ROOT / "benchmarks" / "out" / "bench_stream_quality_quick" if quick else QUALITY
    if first_seed:
        stem = stem.with_name(f"{stem.name}_replication")
    argv = ["--tasks", "t1-transformer", "--rank-steps", "0", "--out", str(stem), "--first-seed", str(first_seed)]
    argv += ["--quick"] if quick else ["--seeds", str(seeds or 5)]
    argv += ["--methods", methods] if methods else []
    payload = BB.main(argv)
    summary = against_shuffle_buffer(payload)
    print(summary)
    text = Path(f"{stem}.md").read_text()
    with atomic_write(f"{stem}.md", "w") as f:
        f.write(text + "\n" + summary)
    return payload


def against_shuffle_buffer(payload: dict) -> str:
    """Paired differences of each stream method to the plain shuffle buffer, per budget."""
    lines = ["## Against the plain shuffle buffer (`stream-shuffle`)\n",
             "| task | method | budget | accuracy % | vs stream-shuffle (pt, mean ± s.e.) | wall fraction |",
             "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for task, res in payload["results"].items():
        rows = res["summary"]["rows"]
        base = rows["stream-shuffle"]["points"]
        for method in (m for m in STREAM_METHODS if m in rows):
            for key, point in sorted(rows[method]["points"].items(), key=lambda kv: kv[1]["wall_fraction"]):
                anchor = base.get(key)
                if anchor is None:
                    continue
                diff, se = BB.mean_se([a - b for a, b in zip(point["final_per_seed"], anchor["final_per_seed"])])
                lines.append(
                    f"| {task} | {method} | {key} | {100 * point['final_mean']:.2f} | {100 * diff:+.2f} ± {100 * se:.2f} "
                    f"| {point['wall_fraction']:.2f} |"
                )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--overhead", action="store_true", help="(a): overhead over the bare stream, memory")
    parser.add_argument("--quality", action="store_true", help="(b): the budget-fair protocol on a stream")
    parser.add_argument("--quick", action="store_true", help="small: 50k examples, the quality protocol's --quick")
    parser.add_argument("--examples", type=int, default=None, help="(a)'s stream length (default 1M; --quick 50k)")
    parser.add_argument("--seeds", type=int, default=None, help="(b)'s seeds (default 5)")
    parser.add_argument("--first-seed", type=int, default=0, help="(b): fresh seeds from here (a replication)")
    parser.add_argument("--methods", default=None, help="(b): a subset (shuffle is always run)")
    args = parser.parse_args(argv)
    if not (args.overhead or args.quality):
        parser.error("give --overhead, --quality or both")
    if args.overhead:
        run_overhead(args.examples or (50_000 if args.quick else 1_000_000), 1 if args.quick else 3, args.quick)
    if args.quality:
        run_quality(args.quick, args.seeds, args.first_seed, args.methods)


if __name__ == "__main__":
    main()
