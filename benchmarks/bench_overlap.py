"""Selection overlapped with training (issue 13, item 2): ``SelectionBatchSampler(prefetch=1)``.

An epoch of a small training loop (per step: index the batch, forward, per-example cross
entropy, backward, SGD, ``sampler.observe`` with the losses and logits) over two workloads:

- ``digits``: scikit-learn's digits (N = 1797, d = 64), MLP 64-256-256-10, B = 64: a step
  cheaper than one SMDL selection;
- ``mlp3072``: N examples of 3072 features (synthetic, CIFAR-sized), MLP 3072-512-512-10,
  B = 128, selection on 64-d embeddings: a step costlier than one selection;
- ``digits+wait``: the digits step followed by a 5 ms sleep, a step whose time is spent
  off this process's cores (an accelerator, an all-reduce waiting for a slower peer): it
  shows what overlap gives when a core is free, on a machine where none is.

For RandomSelector (the anchor), SubmodularSelector (SMDL, pool 8B) and LossRankSelector, with
``prefetch`` 0 and 1, torch threads default and 1: epoch wall time, the share of it the
training thread spends in the sampler (waiting for the next batch plus ``observe``), the
ratio to random's epoch (prefetch 0, same threads, same round), and per batch the cost of
selecting (``prefetch=0``: time in ``next``) and of the step. All configurations run in
every round, interleaved; medians over rounds. The load average is printed beside them.

The issue's target: selecting adds <= 10 % to an epoch's wall time whenever one selection
costs less than one training step. A background thread only hides selection when a core
is free for it: with torch's default threads both cores already run the step.

Run: ``python benchmarks/bench_overlap.py`` (``--quick``: fewer rounds and examples;
``--mpi``: also under ``mpiexec -n 2``, gradients all-reduced over MPI, feedback shared with
``sync_every=1``; ``--workloads`` / ``--selectors``: a subset, e.g. ``--workloads
mlp3072,digits+wait --selectors smdl,smdl_numpy`` for SMDL before (``smdl_numpy``: the numpy
implementation the compiled kernel replaced) and after, interleaved in one run). Writes
``benchmarks/results/speed/bench_overlap.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from batchsel import LossRankSelector, RandomSelector, SelectionBatchSampler, SubmodularSelector

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _mpilaunch import mpiexec_command, run_mpiexec  # noqa: E402  (shared with bench_quality.py --mpi)

KINDS = ("random", "smdl", "loss_rank")
# "smdl_numpy": the numpy + OpenBLAS SMDL implementation the compiled kernel replaced (the
# reference kept in tests/selectors/test_smdl_kernel.py, same picks), run on request (--selectors) so
# that before and after are measured interleaved in one run
EXTRA_KINDS = ("smdl_numpy",)
SELECTED = {"kinds": KINDS}
RESULTS = Path(__file__).parent / "results" / "speed" / "bench_overlap.md"


def workloads(n_big: int) -> dict[str, dict]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = digits.data.astype(np.float32)
    x = (x - x.mean(0)) / (x.std(0) + 1e-6)
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(10, 64)).astype(np.float32) * 3
    y_big = rng.integers(0, 10, n_big)
    emb = centers[y_big] + rng.normal(size=(n_big, 64)).astype(np.float32)
    proj = rng.normal(size=(64, 3072)).astype(np.float32) / 8
    small = dict(
        x=torch.from_numpy(x),
        y=torch.from_numpy(digits.target.astype(np.int64)),
        emb=x,
        dims=(64, 256),
        batch=64,
        wait=0.0,
    )
    return {
        "digits": small,
        "digits+wait": dict(small, wait=0.005),
        # the CPU case: N examples of 64-d embeddings, a step of a few ms at 1 thread
        "emb64": dict(
            x=torch.from_numpy(emb),
            y=torch.from_numpy(y_big.astype(np.int64)),
            emb=emb,
            dims=(64, 1024),
            batch=256,
            wait=0.0,
        ),
        "mlp3072": dict(
            x=torch.from_numpy(emb @ proj),
            y=torch.from_numpy(y_big.astype(np.int64)),
            emb=emb,
            dims=(3072, 512),
            batch=128,
            wait=0.0,
        ),
    }


def smdl_class(kind: str = "smdl"):
    """SubmodularSelector, or for ``smdl_numpy`` the numpy implementation it replaced."""
    if kind == "smdl":
        return SubmodularSelector
    sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
    from test_smdl_kernel import NumpySMDL

    return NumpySMDL


def make_selector(kind: str, w: dict):
    n, b = len(w["y"]), w["batch"]
    if kind == "random":
        return RandomSelector(n, b, seed=0)
    if kind.startswith("smdl"):
        return smdl_class(kind)(w["emb"], b, seed=0)
    return LossRankSelector(n, b, seed=0)


def make_model(dims: tuple[int, int]) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    d, h = dims
    model = torch.nn.Sequential(
        torch.nn.Linear(d, h), torch.nn.ReLU(), torch.nn.Linear(h, h), torch.nn.ReLU(), torch.nn.Linear(h, 10)
    )
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def run_epoch(cfg: dict, epoch: int, comm=None) -> dict:
    """One epoch of the training loop; times in seconds."""
    w, sampler, model, opt = cfg["w"], cfg["sampler"], cfg["model"], cfg["opt"]
    sampler.set_epoch(epoch)
    wait = obs = 0.0
    steps = 0
    start, cpu = time.perf_counter(), time.process_time()
    it = iter(sampler)
    while True:
        t = time.perf_counter()
        batch = next(it, None)
        wait += time.perf_counter() - t
        if batch is None:
            break
        idx = torch.as_tensor(batch)
        opt.zero_grad()
        out = model(w["x"][idx])
        losses = torch.nn.functional.cross_entropy(out, w["y"][idx], reduction="none")
        losses.mean().backward()
        if comm is not None:  # DDP's gradient all-reduce, on the training thread
            flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).numpy()
            flat = comm.allreduce(flat) / comm.size
            offset = 0
            for p in model.parameters():
                p.grad.copy_(torch.from_numpy(flat[offset : offset + p.numel()]).view_as(p.grad))
                offset += p.numel()
        opt.step()
        if w["wait"]:
            time.sleep(w["wait"])
        t = time.perf_counter()
        sampler.observe(batch, losses=losses.detach(), logits=out.detach())
        obs += time.perf_counter() - t
        steps += 1
    return {
        "wall": time.perf_counter() - start,
        "cpu": time.process_time() - cpu,
        "wait": wait,
        "observe": obs,
        "steps": steps,
    }


def configs(ws: dict, threads: list[int], rank: int, world: int, comm) -> dict:
    out = {}
    for th in threads:
        for wname, w in ws.items():
            for kind in SELECTED["kinds"]:
                for prefetch in (0, 1):
                    model, opt = make_model(w["dims"])
                    kwargs = dict(comm=comm) if comm is not None else dict(rank=rank, world_size=world)
                    sampler = SelectionBatchSampler(make_selector(kind, w), prefetch=prefetch, **kwargs)
                    out[(th, wname, kind, prefetch)] = dict(w=w, sampler=sampler, model=model, opt=opt)
    return out


def measure(rounds: int, n_big: int, comm=None, threads: str = "default,1", only: str = "") -> dict:
    default = torch.get_num_threads()
    counts = sorted({default if t == "default" else int(t) for t in threads.split(",")}, reverse=True)
    ws = {k: v for k, v in workloads(n_big).items() if not only or k in only.split(",")}
    rank, world = (0, 1) if comm is None else (comm.rank, comm.size)
    cfgs = configs(ws, counts, rank, world, comm)
    samples: dict = {key: [] for key in cfgs}
    loads = []
    order = list(cfgs)
    for r in range(rounds + 1):  # round 0 compiles the kernels and warms the caches: dropped
        # a fresh order every round, the same on every rank: load drifts evenly over the configurations
        np.random.default_rng(r).shuffle(order)
        for key in order:
            cfg = cfgs[key]
            torch.set_num_threads(key[0])
            res = run_epoch(cfg, r, comm)
            if r:
                samples[key].append(res)
        loads.append(os.getloadavg()[0])
        if comm is None or comm.rank == 0:
            print(f"round {r}/{rounds} done, load {loads[-1]:.1f}", file=sys.stderr, flush=True)
    torch.set_num_threads(default)
    rows = []
    for key, runs in samples.items():
        th, wname, kind, prefetch = key
        anchor = samples[(th, wname, "random", 0)]
        steps = runs[0]["steps"]
        plain = samples[(th, wname, kind, 0)]
        rows.append(
            dict(
                threads=th,
                workload=wname,
                selector=kind,
                prefetch=prefetch,
                steps=steps,
                epoch_ms=1e3 * statistics.median(x["wall"] for x in runs),
                share=100 * statistics.median((x["wait"] + x["observe"]) / x["wall"] for x in runs),
                ratio=statistics.median(x["wall"] / a["wall"] for x, a in zip(runs, anchor)),
                own=statistics.median(x["wall"] / a["wall"] for x, a in zip(runs, plain)),
                cores=statistics.median(x["cpu"] / x["wall"] for x in runs),
                select_ms=1e3 * statistics.median(x["wait"] / x["steps"] for x in plain),
                step_ms=1e3 * statistics.median((a["wall"] - a["wait"] - a["observe"]) / a["steps"] for a in anchor),
            )
        )
    return {"rows": rows, "load": loads, "world": world, "default_threads": default, "rounds": rounds, "n_big": n_big}


def table(res: dict) -> str:
    lines = [
        f"world size {res['world']}, {res['rounds']} rounds (medians), torch default threads "
        f"{res['default_threads']}, mlp3072 N={res['n_big']}; load average per round "
        f"{', '.join(f'{x:.1f}' for x in res['load'])} on {os.cpu_count()} CPUs",
        "",
        "| threads | workload | selector | prefetch | epoch ms | sampler share | CPU / wall | x random epoch "
        "| x prefetch 0 | select ms/batch (prefetch 0) | step ms/batch (random) | select < step "
        "| target <= 1.10 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        applies = r["select_ms"] < r["step_ms"]
        verdict = ""
        if r["selector"] != "random" and r["prefetch"] == 1:
            verdict = ("met" if r["ratio"] <= 1.10 else "MISSED") if applies else "n/a (select >= step)"
        lines.append(
            f"| {r['threads']} | {r['workload']} | {r['selector']} | {r['prefetch']} | {r['epoch_ms']:.0f} "
            f"| {r['share']:.1f} % | {r['cores']:.2f} | {r['ratio']:.3f} | {r['own']:.3f} | {r['select_ms']:.2f} "
            f"| {r['step_ms']:.2f} "
            f"| {'yes' if applies else 'no'} | {verdict} |"
        )
    return "\n".join(lines)


def gil_check(seconds: float = 1.0) -> str:
    """How much of a selection needs the GIL: back-to-back selections on a thread next to a
    pure-Python loop on the main thread (the worst training step: one that never releases
    the GIL), at Python's default switch interval and at 0.2 ms."""
    import threading

    x = np.random.default_rng(0).normal(size=(3072, 64)).astype(np.float32)

    def spin(duration: float) -> int:
        count, end = 0, time.perf_counter() + duration
        while time.perf_counter() < end:
            count += 1
        return count

    lines = [
        f"GIL check (load average {os.getloadavg()[0]:.1f}): selections per second on a thread next to a "
        f"pure-Python loop, and that loop's speed relative to running alone",
        "",
        "| selector | ms/batch alone | switch interval | selections/s next to the loop | loop speed |",
        "|---|---|---|---|---|",
    ]
    default_interval = sys.getswitchinterval()
    for kind in [k for k in SELECTED["kinds"] if k != "random"]:
        sel = smdl_class(kind)(x, 128, seed=0) if kind.startswith("smdl") else LossRankSelector(len(x), 128, seed=0)
        list(sel.iter_batches(0))  # compiles the kernels
        start = time.perf_counter()
        alone = len(list(sel.iter_batches(1))) / (time.perf_counter() - start)
        for interval in (default_interval, 2e-4):
            sys.setswitchinterval(interval)
            base = spin(seconds)
            stop, done = threading.Event(), []

            def select(sel=sel, stop=stop, done=done) -> None:
                count, epoch = 0, 2
                while not stop.is_set():
                    for _ in sel.iter_batches(epoch):
                        count += 1
                        if stop.is_set():
                            break
                    epoch += 1
                done.append(count)

            thread = threading.Thread(target=select)
            thread.start()
            loop = spin(seconds) / base
            stop.set()
            thread.join()
            lines.append(
                f"| {kind} | {1e3 / alone:.2f} | {interval * 1e3:g} ms | {done[0] / seconds:.0f} "
                f"(alone: {alone:.0f}) | {loop:.2f} |"
            )
        sys.setswitchinterval(default_interval)
    return "\n".join(lines)


def mpi_worker(rounds: int, n_big: int, threads: str, only: str) -> None:
    from batchsel.distributed.comm import get_communicator

    comm = get_communicator("auto")
    res = measure(rounds, n_big, comm, threads, only)
    if comm.rank == 0:
        print("RESULT " + json.dumps(res))


def launch_mpi(rounds: int, n_big: int, threads: str, only: str, bind: str) -> dict:
    # mpiexec binds each rank to one core by default: a rank's prefetch thread then shares
    # that core with its training step; ``--bind-to none`` lets it run elsewhere
    cmd = mpiexec_command(
        2,
        bind,
        __file__,
        [
            "--worker",
            "--rounds",
            rounds,
            "--n-big",
            n_big,
            "--threads",
            threads,
            "--workloads",
            only,
            "--selectors",
            ",".join(SELECTED["kinds"]),
        ],
    )
    out = run_mpiexec(cmd, timeout=3600, capture=True)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 rounds, N=1024 for mlp3072")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n-big", type=int, default=3072)
    ap.add_argument("--threads", default="default,1", help="torch thread counts, e.g. 'default,1' or '1'")
    ap.add_argument("--workloads", default="", help="comma-separated subset of digits,digits+wait,emb64,mlp3072")
    ap.add_argument("--out", default=str(RESULTS), help=f"results file (default {RESULTS})")
    ap.add_argument("--mpi", action="store_true", help="also run under mpiexec -n 2")
    ap.add_argument("--mpi-only", action="store_true", help="only the mpiexec -n 2 run")
    ap.add_argument("--bind-to", default="core", help="mpiexec --bind-to (core: its default for 2 ranks; none)")
    ap.add_argument("--append", action="store_true", help="append to the results file instead of replacing it")
    ap.add_argument("--gil", action="store_true", help="only the GIL check")
    ap.add_argument(
        "--selectors",
        default=",".join(KINDS),
        help="comma-separated subset of random,smdl,loss_rank,smdl_numpy (random, the anchor, always "
        "runs; smdl_numpy: the numpy SMDL implementation the compiled kernel replaced)",
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    SELECTED["kinds"] = tuple(k for k in KINDS + EXTRA_KINDS if k == "random" or k in args.selectors.split(","))
    rounds, n_big = (2, 1024) if args.quick else (args.rounds, args.n_big)
    if args.worker:
        mpi_worker(rounds, n_big, args.threads, args.workloads)
        return
    command = "python benchmarks/bench_overlap.py " + " ".join(sys.argv[1:])
    sections = (
        []
        if args.append
        else [
            "# Selection overlapped with training (bench_overlap.py)",
            "",
            "`sampler share`: time the training thread spends in `next(sampler)` and `observe` (under mpiexec "
            "`observe` includes the all-gather, i.e. waiting for the other rank). `CPU / wall`: the process's CPU "
            "time over the epoch's wall time (cores it kept busy; above 1 only where two threads ran at once). "
            "`x random epoch`: epoch wall time "
            "over RandomSelector's with prefetch 0 (same threads, same round); `x prefetch 0`: over the same "
            "selector's with prefetch 0. Target: selector epochs with prefetch 1 <= 1.10x random whenever one "
            "selection costs less than one step.",
        ]
    )
    if args.gil:
        text = gil_check()
        sections += ["", f"## GIL: `{command}`", "", text]
        print(text)
    elif not args.mpi_only:
        res = measure(rounds, n_big, threads=args.threads, only=args.workloads)
        sections += ["", f"## One process: `{command}`", "", table(res)]
        print(table(res))
    if args.mpi or args.mpi_only:
        mres = launch_mpi(rounds, n_big, args.threads, args.workloads, args.bind_to)
        sections += [
            "",
            f"## mpiexec -n 2 --bind-to {args.bind_to} (rank 0; gradients all-reduced, feedback "
            f"all-gathered every step): `{command}`",
            "",
            table(mres),
        ]
        print(table(mres))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = (out.read_text() if args.append and out.exists() else "") + "\n".join(sections) + "\n"
    tmp = out.with_suffix(".md.tmp")
    tmp.write_text(text)
    os.replace(tmp, out)  # never a half-written results file


if __name__ == "__main__":
    main()
