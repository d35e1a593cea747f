"""Elastic resume: a state saved on W ranks, loaded on W' ranks (``SelectionBatchSampler``).

Ranks run as threads of one process over an in-process communicator, so the feedback is
shared as in a real job and ``state_dict(all_ranks=True)`` is the collective it is.
"""

from __future__ import annotations

import collections
import threading

import numpy as np
import pytest
import torch

# isort: split
from common import same_state  # in tests/mp_scripts

import batchsel
from batchsel import SelectionBatchSampler
from batchsel.loop.sampler.weighted import WeightedBatch

N, B, EPOCH = 61, 4, 1
LENGTHS = (np.arange(N) * 7919 % 97 + 3).astype(np.int64)


class ThreadComm:
    """One rank of a job whose ranks are threads of this process."""

    def __init__(self, rank: int, shared: dict) -> None:
        self.rank, self.size, self.shared = rank, shared["size"], shared

    def _exchange(self, obj):
        shared = self.shared
        shared["slots"][self.rank] = obj
        shared["barrier"].wait(timeout=30)
        out = list(shared["slots"])
        shared["barrier"].wait(timeout=30)
        return out

    def allgather(self, obj):
        return self._exchange(obj)

    def broadcast(self, obj, root=0):
        return self._exchange(obj)[root]

    def gather(self, obj, root=0):
        out = self._exchange(obj)
        return out if self.rank == root else None

    def barrier(self):
        self._exchange(None)

    def abort(self, errorcode=1):
        raise RuntimeError("abort")


def on_ranks(world_size: int, fn):
    """``fn(rank, comm)`` on ``world_size`` threads; the results by rank."""
    shared = {"size": world_size, "slots": [None] * world_size, "barrier": threading.Barrier(world_size)}
    results: list = [None] * world_size
    errors: list = []

    def main(rank):
        try:
            results[rank] = fn(rank, ThreadComm(rank, shared) if world_size > 1 else None)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the test's thread
            errors.append(exc)
            shared["barrier"].abort()

    threads = [threading.Thread(target=main, args=(r,)) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def loss_of(batch, epoch):
    """A deterministic per-example loss: the same whoever trains the example."""
    b = np.asarray(batch, dtype=np.int64)
    return ((b * 2654435761 + epoch * 97) % 1000 + 1) / 1000.0


def logits_of(batch, epoch):
    """Deterministic logits of 3 classes."""
    b = np.asarray(batch, dtype=np.int64)[:, None]
    return np.sin(b * np.arange(1, 4) + epoch).astype(np.float32)


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, 5)).astype(np.float32)
    y = (np.arange(N) % 3).astype(np.int64)
    return x, y


SELECTORS = {
    "random": (lambda: batchsel.RandomSelector(N, B, seed=3), {}),
    "smdl": (lambda: batchsel.SubmodularSelector(data()[0], B, seed=3), {}),
    "graph_blocks": (
        lambda: batchsel.GraphBlockSelector(batchsel.knn_graph(data()[0], k=4), 8, seed=3, blocks_per_batch=2),
        {},
    ),
    "coreset": (lambda: batchsel.CoresetSelector(data()[0], data()[1], B, fraction=0.5, seed=3), {"weighted": True}),
    "infobatch": (lambda: batchsel.InfoBatchSelector(N, B, epochs=3, seed=3), {"weighted": True}),
    "score_pruning": (lambda: batchsel.ScorePruningSelector(data()[1], B, epochs=3, keep=0.5, seed=3), {}),
    "bucket": (lambda: batchsel.BucketSelector(LENGTHS, batch_size=B, seed=3), {}),
    "cost_grouped": (lambda: batchsel.CostGroupedSelector(batchsel.RandomSelector(N, B, seed=3), LENGTHS), {}),
    "loss_rank": (lambda: batchsel.LossRankSelector(N, B, seed=3), {}),
    "auto": (lambda: batchsel.AutoSelector(N, B, labels=data()[1], seed=3), {}),
    # pressure 1: its batches stay random ones, drawn without replacement as in its warm-up
    "auto_random": (lambda: batchsel.AutoSelector(N, B, labels=data()[1], seed=3, pressure=1.0), {}),
    "cost_grouped_online": (
        lambda: batchsel.CostGroupedSelector(batchsel.LossRankSelector(N, B, seed=3), LENGTHS),
        {},
    ),
}
ONLINE = {"smdl", "loss_rank", "auto", "auto_random", "cost_grouped_online"}


def make(kind, rank, world_size, comm):
    factory, kwargs = SELECTORS[kind]
    return SelectionBatchSampler(factory(), rank=rank, world_size=world_size, comm=comm, sync_every=1000, **kwargs)


def items(batch):
    """A batch as (examples, weights): weights 1 where it has none."""
    if isinstance(batch, WeightedBatch):
        return np.asarray(batch.indices).tolist(), np.asarray(batch.weights).tolist()
    return list(batch), [1.0] * len(batch)


def train_epoch(sampler, epoch, stop=None):
    """The loop: ``stop`` steps of ``epoch`` (all of them with None), feedback after each;
    the (example, weight) pairs trained, by step."""
    sampler.set_epoch(epoch)
    steps = []
    for t, batch in enumerate(sampler):
        if stop is not None and t >= stop:
            break
        idx, w = items(batch)
        steps.append(list(zip(idx, w)))
        sampler.observe(idx, losses=loss_of(idx, epoch), logits=logits_of(idx, epoch))
    return steps


def interrupted(kind, world_size, stop):
    """``world_size`` ranks: epoch 0 whole, ``stop`` steps of epoch 1, then every rank's
    state; what each rank trained in epoch 1 and the epoch's full batches uninterrupted."""

    def rank_main(rank, comm):
        sampler = make(kind, rank, world_size, comm)
        train_epoch(sampler, 0)
        done = train_epoch(sampler, EPOCH, stop)
        return done, sampler.state_dict(batches_done=stop, all_ranks=world_size > 1)

    out = on_ranks(world_size, rank_main)
    return [o[0] for o in out], out[0][1]  # one rank's state is every rank's


def uninterrupted(kind, world_size):
    def rank_main(rank, comm):
        sampler = make(kind, rank, world_size, comm)
        train_epoch(sampler, 0)
        return train_epoch(sampler, EPOCH)

    return on_ranks(world_size, rank_main)


def resumed(kind, world_size, state):
    """``world_size`` fresh ranks that load ``state`` and finish epoch 1 (and train epoch 2)."""

    def rank_main(rank, comm):
        sampler = make(kind, rank, world_size, comm)
        sampler.load_state_dict(state)
        info = {"len": len(sampler), "total": sampler.total_batches(3)}
        inner = getattr(sampler.selector, "selector", sampler.selector)  # CostGroupedSelector's
        losses = getattr(inner, "raw_losses_", getattr(inner, "losses_", None))  # as loaded
        info["losses"] = None if losses is None else losses.copy()
        info["rest"] = train_epoch(sampler, EPOCH)
        info["next_epoch"] = train_epoch(sampler, EPOCH + 1)
        return info

    return on_ranks(world_size, rank_main)


def pairs(steps_by_rank):
    return collections.Counter(p for steps in steps_by_rank for step in steps for p in step)


def examples(steps_by_rank):
    return collections.Counter(i for steps in steps_by_rank for step in steps for i, _ in step)


PLANNED = [k for k in SELECTORS if k not in ONLINE]


@pytest.mark.parametrize("kind", PLANNED)
@pytest.mark.parametrize("old,new", [(2, 3), (4, 1), (1, 2), (4, 3), (2, 2)])
def test_planned_epoch_finishes_every_example_once_on_another_world(kind, old, new):
    full = uninterrupted(kind, old)
    steps_per_rank = len(full[0])
    stop = max(steps_per_rank // 3, 1)
    before, state = interrupted(kind, old, stop)
    assert [b for b in before] == [f[:stop] for f in full]  # the interrupted run is the plan's
    after = resumed(kind, new, state)
    rest = [a["rest"] for a in after]
    # every example (and weight) of the plan once over the old and the new ranks together
    assert pairs(before) + pairs(rest) == pairs(full)
    assert len({len(r) for r in rest}) == 1  # the same number of steps on every new rank
    assert all(a["len"] == stop + len(a["rest"]) for a in after)
    if new == old:  # the uninterrupted run's batches, exactly
        assert rest == [f[stop:] for f in full]


@pytest.mark.parametrize("kind", sorted(ONLINE))
@pytest.mark.parametrize("old,new", [(2, 3), (4, 1), (1, 2), (3, 2)])
def test_online_epoch_keeps_feedback_and_step_count_on_another_world(kind, old, new):
    before, state = interrupted(kind, old, stop=3)
    after = resumed(kind, new, state)
    rest = [a["rest"] for a in after]
    assert len({len(r) for r in rest}) == 1
    steps_left = len(rest[0])
    old_len = len(uninterrupted(kind, old)[0])
    examples_left = old * (old_len - 3) * B
    new_len = batchsel.LossRankSelector(N, B).num_batches(new)
    # enough steps for the examples left, at most the new world's epoch
    assert min(-(-examples_left // (new * B)), new_len) <= steps_left <= new_len
    assert all(a["len"] == 3 + steps_left for a in after)
    # the feedback of every old rank is carried (also what sat in the buffers, sync_every=1000)
    if after[0]["losses"] is not None:
        trained = [i for steps in before for step in steps for i, _ in step]
        reference = np.full(N, np.inf)
        for i in trained:
            reference[i] = loss_of([i], EPOCH)[0]
        for a in after:
            assert np.allclose(a["losses"][trained], reference[trained])
    # every new rank computed the same deal: a second load draws the same batches
    assert [a["rest"] for a in resumed(kind, new, state)] == rest


@pytest.mark.parametrize("kind", ["smdl", "auto_random"])
@pytest.mark.parametrize("old,new", [(2, 3), (4, 1), (1, 2), (3, 2)])
def test_online_epoch_without_replacement_trains_every_example(kind, old, new):
    # SMDL's batches, and AutoSelector's random ones (its warm-up, or pressure 1), hold
    # each example of the epoch once: so does the epoch finished on another world
    before, state = interrupted(kind, old, stop=3)
    after = resumed(kind, new, state)
    seen = examples(before) + examples([a["rest"] for a in after])
    assert set(seen) == set(range(N))
    padding = (-N) % old + (-N) % new  # DistributedSampler's repeats, of each world
    assert sum(seen.values()) - N <= padding


@pytest.mark.parametrize("kind", ["random", "infobatch", "loss_rank"])
def test_repeated_interruptions_across_world_sizes(kind):
    full = uninterrupted(kind, 4)
    before, state = interrupted(kind, 4, stop=2)

    def second(rank, comm):  # 4 -> 3 ranks, two steps, every rank's state again
        sampler = make(kind, rank, 3, comm)
        sampler.load_state_dict(state)
        done = train_epoch(sampler, EPOCH, stop=2)
        return done, sampler.state_dict(batches_done=4, all_ranks=True)

    out = on_ranks(3, second)
    middle, state2 = [o[0] for o in out], out[0][1]
    saved = torch.load(_save(state2), weights_only=True)
    after = resumed(kind, 2, saved)  # 3 -> 2 ranks
    rest = [a["rest"] for a in after]
    assert len({len(r) for r in rest}) == 1
    if kind not in ONLINE:
        assert pairs(before) + pairs(middle) + pairs(rest) == pairs(full)
    # the same world again mid-remainder: exactly the batches of the uninterrupted remainder
    again = resumed(kind, 3, state2)
    straight = resumed(kind, 3, state)
    assert [a["rest"] for a in again] == [s["rest"][2:] for s in straight]


def _save(state):
    import io

    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return buffer


def test_a_single_ranks_state_names_the_all_ranks_form():
    sampler = make("random", 0, 2, None)
    sampler.set_epoch(1)
    next(iter(sampler))
    state = sampler.state_dict(batches_done=1)
    with pytest.raises(ValueError, match=r"state_dict\(all_ranks=True\)"):
        make("random", 0, 3, None).load_state_dict(state)


def test_step_balanced_refuses_another_world_naming_the_alternative():
    def factory():
        return batchsel.StepBalancedSelector(batchsel.RandomSelector(N, B, seed=3), LENGTHS, accumulation=2)

    def rank_main(rank, comm):
        sampler = SelectionBatchSampler(factory(), rank=rank, world_size=2, comm=comm, weighted=True)
        sampler.set_epoch(0)
        next(iter(sampler))
        return sampler.state_dict(batches_done=1, all_ranks=True)

    state = on_ranks(2, rank_main)[0]
    with pytest.raises(ValueError, match="cannot resume on another number of ranks.*Resume on 2 ranks"):
        SelectionBatchSampler(factory(), rank=0, world_size=3, weighted=True).load_state_dict(state)


@pytest.mark.parametrize(
    "other,match",
    [
        (lambda: batchsel.RandomSelector(N, B, seed=4), "seed=3"),
        (lambda: batchsel.LossRankSelector(N, B, seed=3), "method"),
        (lambda: batchsel.RandomSelector(N + 1, B, seed=3), "num_examples=61"),
        (lambda: batchsel.RandomSelector(N, B + 1, seed=3), "batch_size=4"),
    ],
)
def test_a_state_of_another_run_is_refused_and_nothing_loads(other, match):
    _, state = interrupted("random", 2, stop=2)
    for world_size in (2, 3):
        sampler = SelectionBatchSampler(other(), rank=0, world_size=world_size)
        sampler.set_epoch(2)
        before = sampler.state_dict()
        with pytest.raises(ValueError, match=match):
            sampler.load_state_dict(state)
        assert same_state(sampler.state_dict(), before) and sampler.epoch == 2


def test_truncated_and_foreign_states_are_refused_and_nothing_loads():
    _, state = interrupted("loss_rank", 2, stop=2)
    sampler = make("loss_rank", 0, 3, None)
    sampler.selector.observe([1, 2], losses=[5.0, 6.0])
    before = sampler.state_dict()
    broken = {**state, "ranks": [dict(state["ranks"][0]), {k: v for k, v in state["ranks"][1].items() if k != "epoch"}]}
    for bad, match in ((broken, "lacks"), ({"weights": 1}, "version"), ([1, 2], "dict")):
        with pytest.raises(ValueError, match=match):
            sampler.load_state_dict(bad)
        assert same_state(sampler.state_dict(), before)
    # a rank entry that is not its rank's
    swapped = {**state, "ranks": [state["ranks"][1], state["ranks"][0]]}
    with pytest.raises(ValueError, match="rank 0 entry is rank 1"):
        sampler.load_state_dict(swapped)
    assert same_state(sampler.state_dict(), before)


def _mpi():
    from test_integrations_mp import MPIEXEC, clean_env

    if not MPIEXEC.exists():
        pytest.skip("no mpiexec")
    return MPIEXEC, clean_env()


@pytest.mark.parametrize("kind", ["random", "auto_random"])
def test_a_killed_4_rank_mpiexec_job_finishes_its_epoch_on_3_and_on_2_ranks(kind, tmp_path):
    import json
    import subprocess
    import sys

    from paths import MP_SCRIPTS

    mpiexec, env = _mpi()
    job = [sys.executable, str(MP_SCRIPTS / "elastic_job.py")]
    selector = "random" if kind == "random" else "auto"

    def launch(n, *args):
        cmd = [str(mpiexec), "--allow-run-as-root", "--oversubscribe", "-n", str(n), *job, *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env)

    killed = launch(4, "train", str(tmp_path), selector)
    assert killed.returncode != 0 and "signal 9" in killed.stdout + killed.stderr  # rank 1 was lost
    first = torch.load(tmp_path / "checkpoint.pt", weights_only=True)["step"]
    before = collections.Counter()
    for r in range(4):  # the steps the checkpoint holds; later ones died with the job
        for line in (tmp_path / f"trained_{r}.jsonl").read_text().splitlines():
            step = json.loads(line)
            if step["step"] < first:
                before.update(step["batch"])
    padding = (-203) % 4
    for ranks in (3, 2):
        done = launch(ranks, "resume", str(tmp_path), selector, f"w{ranks}")
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        outs = [json.loads((tmp_path / f"w{ranks}_{r}.json").read_text()) for r in range(ranks)]
        assert len({len(o["batches"]) for o in outs}) == 1  # the same steps on every rank
        assert all(o["len"] == o["total"] == first + len(o["batches"]) for o in outs)
        seen = before + collections.Counter(i for o in outs for b in o["batches"] for i in b)
        assert set(seen) == set(range(203))  # no example lost
        assert sum(seen.values()) - 203 <= padding + (-203) % ranks  # none repeated but the padding
        if kind == "random":  # the plan's examples exactly once: its own padding, no other
            assert sum(seen.values()) - 203 == padding


@pytest.mark.parametrize("kind", ["random", "bucket"])
def test_three_interruptions_in_one_epoch_under_statefuldataloader_with_workers_are_exact(kind):
    from torchdata.stateful_dataloader import StatefulDataLoader

    dataset = torch.utils.data.TensorDataset(torch.arange(N))

    def loader(sampler):
        return StatefulDataLoader(dataset, batch_sampler=sampler, num_workers=2)

    def epoch_of(sampler):
        sampler.set_epoch(EPOCH)
        return sampler

    straight = [b[0].tolist() for b in loader(epoch_of(make(kind, 0, 1, None)))]
    got, state, stops = [], None, (2, 5, 7)
    for k in range(len(stops) + 1):
        sampler = epoch_of(make(kind, 0, 1, None))
        dl = loader(sampler)
        if state is not None:
            dl.load_state_dict(state)
        it = iter(dl)
        for _ in range(stops[k] - (stops[k - 1] if k else 0) if k < len(stops) else len(straight)):
            batch = next(it, None)
            if batch is None:
                break
            got.append(batch[0].tolist())
        state = dl.state_dict()
        del it, dl
    assert got == straight


def _readme_run(kind, workers, stops, state=None):
    """The README's loop over epochs 0 and 1 with a torch DataLoader, the look-ahead stated;
    after each (epoch, step) in ``stops`` the plain ``sampler.state_dict()`` is taken and the
    loop ends; returns the batches and the state."""
    data = torch.utils.data.TensorDataset(torch.arange(N))
    sampler = make(kind, 0, 1, None)
    sampler = SelectionBatchSampler(sampler.selector, rank=0, world_size=1, workers_ahead=2 * workers)
    first = 0 if state is None else int(state["epoch"])
    if state is not None:
        sampler.load_state_dict(state)
    got = []
    for epoch in range(first, 2):
        sampler.set_epoch(epoch)
        loader = torch.utils.data.DataLoader(data, batch_sampler=sampler, num_workers=workers)
        done = int(state["batches_done"]) if state is not None and epoch == first else 0
        for step, (idx,) in enumerate(loader, start=done + 1):
            got.append(idx.tolist())
            sampler.observe(idx, losses=torch.as_tensor(loss_of(idx.numpy(), epoch)))
            if (epoch, step) in stops:
                return got, sampler.state_dict()
    return got, None


@pytest.mark.parametrize("workers", [0, 2, 4])
@pytest.mark.parametrize("kind", ["random", "loss_rank", "auto"])
def test_repeated_interruptions_with_dataloader_workers_give_the_uninterrupted_batches(kind, workers):
    full, _ = _readme_run(kind, workers, ())
    got, state, stops = [], None, [(0, 4), (1, 3), (1, 6), (1, 14)]  # across epochs, three within one
    for stop in stops + [None]:
        part, state = _readme_run(kind, workers, {stop} if stop else (), state)
        got += part
    assert got == full
