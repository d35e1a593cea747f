"""SelectionBatchSampler(prefetch=k): batches selected ahead in a background thread.

What matters: the batches depend on the order of calls, never on thread timing (random
sleeps change nothing); the lag is exactly the documented one; a resume mid-epoch yields
what the uninterrupted run would have; collectives stay in the training thread; the
thread ends with the iteration and its errors reach the training thread."""

import gc
import os
import threading
import time

import numpy as np
import pytest
import torch
from common import TinyOnline, fake_loss

from batchsel import RandomSelector, SelectionBatchSampler
from batchsel.distributed.comm import Communicator
from batchsel.index import knn_graph
from batchsel.loop.prefetch import cores_of_this_rank
from batchsel.selectors import CoresetSelector, GraphBlockSelector, LossRankSelector, SubmodularSelector

N, B = 48, 4


@pytest.fixture(autouse=True)
def two_cores(monkeypatch):
    """These tests are about the thread: they run it whatever cores this machine gives the
    test process, and for selections however cheap (one core of its own starts none, and
    cheap selections stay on the training thread: see the last tests)."""
    import batchsel.loop.prefetch as prefetch_module

    monkeypatch.setattr(prefetch_module, "cores_of_this_rank", lambda: 2)
    monkeypatch.setattr(prefetch_module, "_CHEAP", 0.0)


def smdl(seed=0):
    x = np.random.default_rng(seed).normal(size=(N, 8)).astype(np.float32)
    # the paper's weights: their uncertainty term reads the logits, so feedback order matters
    return SubmodularSelector(x, B, seed=seed, pool_size=16, weights=(0.2, 0.1, 0.5, 0.2))


FEEDBACK = {
    "loss_rank": lambda: LossRankSelector(N, B, seed=1),
    "submodular": smdl,
    "tiny": lambda: TinyOnline(N, B, seed=1),
}


class Sleepy:
    """Wraps a selector's batch drawing with random sleeps (another thread timing every run)."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def __call__(self, scale=0.002):
        time.sleep(float(self.rng.random()) * scale)


def feed(sampler, batch, epoch):
    """Deterministic stand-ins for a step's per-example losses and logits."""
    loss = fake_loss(np.array(batch), epoch)
    sampler.observe(batch, losses=loss, logits=np.stack([loss, 1 - loss, 2 * loss], axis=1))


def run_epochs(sampler, epochs=2, sleep=None, delayed=False):
    """The usual loop (``for batch: step; observe``), with random sleeps in the step. With
    ``delayed``, batch t is observed only after batch t + 1 was asked for: the lag of
    prefetch=1, reproduced without a thread."""
    out = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        last = None
        for batch in sampler:
            if sleep:
                sleep()
            if delayed and last is not None:
                feed(sampler, last, epoch)
            out.append(batch)
            if not delayed:
                feed(sampler, batch, epoch)
            last = batch
        if delayed and last is not None:
            feed(sampler, last, epoch)
    return out


def sleepy_selector(selector, sleep):
    """Random sleeps inside every draw of an online selector, on the background thread."""
    if hasattr(selector, "_next_batch"):
        inner = selector._next_batch

        def slow(run, rng):
            sleep()
            return inner(run, rng)

        selector._next_batch = slow
    return selector


@pytest.mark.parametrize("kind", sorted(FEEDBACK))
def test_feedback_lag_is_exact_and_timing_free(kind):
    runs = []
    for seed in (1, 2):
        sleep = Sleepy(seed)
        s = SelectionBatchSampler(sleepy_selector(FEEDBACK[kind](), sleep), rank=0, world_size=1, prefetch=1)
        runs.append(run_epochs(s, sleep=sleep))
    assert runs[0] == runs[1]
    # the documented lag: batch t + 1 selected from the feedback of batches <= t - 1, which a
    # loop without a thread gets by observing each batch after asking for the next one
    reference = run_epochs(SelectionBatchSampler(FEEDBACK[kind](), rank=0, world_size=1, prefetch=0), delayed=True)
    assert runs[0] == reference
    # and it is a real lag: the immediate-feedback run differs (the selector uses feedback)
    if kind == "loss_rank":  # (SMDL and tiny draw without replacement: within an epoch a batch's
        # feedback only concerns examples already used, so a lag of one batch changes nothing)
        assert reference != run_epochs(SelectionBatchSampler(FEEDBACK[kind](), rank=0, world_size=1, prefetch=0))


def test_a_thread_that_never_gets_a_core_changes_nothing(monkeypatch):
    # a loaded machine at the extreme: the thread never starts a request, the training
    # thread runs each one when it needs the result; the batches are the same
    import batchsel.loop.prefetch as prefetch_module

    normal = run_epochs(SelectionBatchSampler(LossRankSelector(N, B, seed=2), rank=0, world_size=1, prefetch=1))
    monkeypatch.setattr(prefetch_module._SelectionThread, "_serve", lambda self: None)
    starved = run_epochs(SelectionBatchSampler(LossRankSelector(N, B, seed=2), rank=0, world_size=1, prefetch=1))
    assert starved == normal


def test_prefetch_two_lags_two_batches():
    s = SelectionBatchSampler(LossRankSelector(N, B, seed=3), rank=0, world_size=1, prefetch=2)
    s.set_epoch(0)
    got, it = [], iter(s)
    first = next(it)
    got.append(first)
    s.observe(first, losses=fake_loss(np.array(first), 0))
    got += list(it)
    ref = SelectionBatchSampler(LossRankSelector(N, B, seed=3), rank=0, world_size=1, prefetch=0)
    ref.set_epoch(0)
    it = iter(ref)
    want = [next(it), next(it), next(it)]  # batches 1 and 2 are selected before batch 0's feedback
    ref.observe(want[0], losses=fake_loss(np.array(want[0]), 0))
    want += list(it)
    assert got == want


@pytest.mark.parametrize(
    "make",
    [
        lambda: RandomSelector(N, B, seed=2),
        lambda: GraphBlockSelector(
            knn_graph(np.random.default_rng(0).normal(size=(N, 4)).astype(np.float32), k=4), B, seed=2, block_size=2
        ),
        lambda: CoresetSelector(
            np.random.default_rng(0).normal(size=(N, 4)).astype(np.float32), np.arange(N) % 3, B, fraction=0.5, seed=2
        ),
    ],
    ids=["random", "graph_blocks", "coreset"],
)
def test_selectors_without_feedback_yield_the_same_batches(make):
    plain = SelectionBatchSampler(make(), rank=1, world_size=2)
    ahead = SelectionBatchSampler(make(), rank=1, world_size=2, prefetch=1)
    assert run_epochs(ahead, sleep=Sleepy(0)) == run_epochs(plain)


def roundtrip(state):
    import io

    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf)


@pytest.mark.parametrize("kind", sorted(FEEDBACK))
@pytest.mark.parametrize("prefetch", [1, 2])
def test_resume_mid_epoch_with_prefetch(kind, prefetch):
    def fresh():
        return SelectionBatchSampler(FEEDBACK[kind](), rank=0, world_size=1, prefetch=prefetch)

    expected = run_epochs(fresh(), epochs=2)
    run = fresh()
    first = run_epochs(run, epochs=1)
    run.set_epoch(1)
    it = iter(run)
    for _ in range(5):
        batch = next(it)
        first.append(batch)
        feed(run, batch, 1)
    time.sleep(0.01)  # the selection ahead may or may not be done: either way the same state
    state = roundtrip(run.state_dict())
    assert len(state["pending"]) == prefetch and len(state["deferred"]) == 1
    assert first + finish(run, it) == expected  # the interrupted run goes on unharmed
    resumed = fresh()
    resumed.load_state_dict(state)
    resumed.set_epoch(1)
    assert first + finish(resumed, iter(resumed)) == expected


def finish(sampler, it, epoch=1):
    out = []
    for batch in it:
        out.append(batch)
        feed(sampler, batch, epoch)
    return out


def test_resume_across_prefetch_settings_replays_pending_batches():
    # a prefetch run's state loads into a sampler without prefetch: nothing lost or repeated
    run = SelectionBatchSampler(LossRankSelector(N, B, seed=4), rank=0, world_size=1, prefetch=1)
    it = iter(run)
    handed = [next(it) for _ in range(3)]
    state = run.state_dict()
    resumed = SelectionBatchSampler(LossRankSelector(N, B, seed=4), rank=0, world_size=1, prefetch=0)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert len(handed) + len(rest) == len(run)
    assert rest[0] == state["pending"][0].tolist()


def test_a_state_from_before_prefetch_loads():
    # states written before prefetch (no "deferred") and before the run's sizes were recorded
    def fresh(prefetch=0):
        return SelectionBatchSampler(LossRankSelector(N, B, seed=8), rank=0, world_size=1, prefetch=prefetch)

    run = fresh()
    run.set_epoch(1)
    it = iter(run)
    finish(run, (next(it) for _ in range(4)))
    state = run.state_dict()
    old = {k: v for k, v in state.items() if k not in ("deferred", "num_examples", "batch_size", "num_batches")}
    for prefetch in (0, 1):
        resumed, reference = fresh(prefetch), fresh(prefetch)
        resumed.load_state_dict(roundtrip(old))
        reference.load_state_dict(roundtrip(state))
        resumed.set_epoch(1)
        reference.set_epoch(1)
        assert finish(resumed, iter(resumed)) == finish(reference, iter(reference))
    assert finish(resumed, []) == [] and len(resumed.state_dict()["deferred"]) == 0


def test_a_pickled_copy_has_no_thread_and_its_own_held_back_feedback():
    import pickle

    s = SelectionBatchSampler(LossRankSelector(N, B, seed=9), rank=0, world_size=1, prefetch=1)
    it = iter(s)
    batch = next(it)
    feed(s, batch, 0)  # held back: the selection ahead may be running
    s.state_dict()  # waits for it: the selector is idle while it is copied
    threads = len(prefetch_threads())
    assert s._feedback.background._thread is not None  # the original's iteration runs on
    copy = pickle.loads(pickle.dumps(s))
    assert copy._feedback.background._thread is None  # a thread neither copies nor pickles
    assert len(prefetch_threads()) <= threads  # none started (an earlier test's may end meanwhile)
    assert [o["indices"].tolist() for o in copy.state_dict()["deferred"]] == [batch]
    before = s.selector.losses_.copy()
    copy.set_epoch(1)
    next(iter(copy))  # starting an iteration hands the held-back feedback to the copy's selector
    assert np.array_equal(copy.selector.losses_[batch], fake_loss(np.array(batch), 0))
    assert np.array_equal(s.selector.losses_, before)
    assert len(finish(s, it, epoch=0)) == len(s) - 1  # the original goes on with its own thread
    assert np.array_equal(s.selector.losses_[batch], fake_loss(np.array(batch), 0))


class ThreadCheckingComm(Communicator):
    """Rank 0 of a pretend 2-rank job; records the thread of every collective."""

    def __init__(self):
        self.rank, self.size, self.threads = 0, 2, set()

    def allgather(self, obj):
        self.threads.add(threading.get_ident())
        peer = [{**o, "indices": (o["indices"] + 1) % N} for o in obj] if isinstance(obj, list) else obj
        return [obj, peer]


def test_collectives_stay_in_the_training_thread_and_feedback_is_shared():
    def run(prefetch, seed=0, delayed=False):
        comm = ThreadCheckingComm()
        s = SelectionBatchSampler(LossRankSelector(N, B, seed=5), comm=comm, sync_every=2, prefetch=prefetch)
        return run_epochs(s, sleep=Sleepy(seed), delayed=delayed), comm.threads, s.selector.losses_

    batches, threads, losses = run(1)
    assert threads == {threading.get_ident()}
    assert run(1, seed=1)[0] == batches
    # the same lag as observing each batch after asking for the next, without a thread; at
    # the end every gathered observation (the peer's included) was applied
    ref_batches, _, ref_losses = run(0, delayed=True)
    assert ref_batches == batches and np.array_equal(ref_losses, losses)


def test_error_in_the_background_reaches_the_training_thread():
    sel = LossRankSelector(N, B, seed=0)
    calls = []

    def failing(run, rng):
        calls.append(threading.get_ident())
        if len(calls) == 3:
            raise RuntimeError("boom")
        return LossRankSelector._next_batch(sel, run, rng)

    sel._next_batch = failing
    s = SelectionBatchSampler(sel, rank=0, world_size=1, prefetch=1)
    # threads of earlier tests' iterators end when those are garbage collected: not this one's
    earlier = {t for t in threading.enumerate() if t.name == "batchsel-prefetch"}
    got = []
    with pytest.raises(RuntimeError, match="boom"):
        for batch in s:
            got.append(batch)
    assert len(got) == 2  # raised at batch 3, whichever thread ran the failing selection
    assert not {t for t in threading.enumerate() if t.name == "batchsel-prefetch"} - earlier


def prefetch_threads():
    return [t for t in threading.enumerate() if t.name == "batchsel-prefetch"]


def test_thread_ends_at_epoch_end_on_break_and_on_garbage_collection():
    gc.collect()
    before = len(prefetch_threads())
    s = SelectionBatchSampler(smdl(), rank=0, world_size=1, prefetch=1)
    assert len(list(s)) == len(s)  # epoch end: no deadlock, no extra selection
    assert len(prefetch_threads()) == before
    for batch in s:  # a loop that breaks early
        assert len(prefetch_threads()) == before + 1 and prefetch_threads()[-1].daemon
        break
    assert len(prefetch_threads()) == before
    it = iter(s)
    next(it)
    assert len(prefetch_threads()) == before + 1
    del it  # dropped without closing
    gc.collect()
    for t in prefetch_threads():
        t.join(timeout=5)
    assert len(prefetch_threads()) == before
    # a new iteration over an unfinished one: the old thread stops first
    a = iter(s)
    next(a)
    b = iter(s)
    next(b)
    assert len(prefetch_threads()) == before + 1
    b.close()
    a.close()


def test_selection_runs_in_the_background_while_the_step_runs():
    sel = LossRankSelector(N, B, seed=0)
    threads = []

    def recording(run, rng):
        threads.append(threading.get_ident())
        return LossRankSelector._next_batch(sel, run, rng)

    sel._next_batch = recording
    for _ in SelectionBatchSampler(sel, rank=0, world_size=1, prefetch=1):
        time.sleep(0.02)  # a step that leaves the core free
    # the first batch is waited for; the others had a whole step to be selected on the
    # thread (on a loaded machine the training thread may run a few itself)
    assert sum(t != threading.get_ident() for t in threads) >= 1


def test_dataloader_with_workers_and_prefetch():
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.arange(N, dtype=torch.float32), torch.arange(N))

    def epoch(prefetch):
        s = SelectionBatchSampler(LossRankSelector(N, B, seed=6), rank=0, world_size=1, prefetch=prefetch)
        out = []
        for x, idx in DataLoader(data, batch_sampler=s, num_workers=2):
            out.append(idx.tolist())
            s.observe(idx, losses=x / N)
        return out

    assert epoch(1) == epoch(1)


def test_prefetch_is_checked():
    with pytest.raises(ValueError, match="prefetch"):
        SelectionBatchSampler(RandomSelector(N, B), rank=0, world_size=1, prefetch=-1)


def test_smdl_selects_one_batch_ahead_by_default():
    assert SelectionBatchSampler(smdl(), rank=0, world_size=1).prefetch == 1
    assert SelectionBatchSampler(LossRankSelector(N, B), rank=0, world_size=1).prefetch == 0
    assert SelectionBatchSampler(RandomSelector(N, B), rank=0, world_size=1).prefetch == 0


@pytest.mark.parametrize("prefetch", [0, 1])
def test_cost_separates_selection_compilation_and_the_training_threads_share(prefetch, monkeypatch):
    """cost(): selection on any thread, compilation apart (time numba compiled inside a
    selection counts there only), and what the training thread spent in the sampler."""
    import batchsel.loop.prefetch as prefetch_module

    compiled = [0.0]
    monkeypatch.setattr(prefetch_module, "compile_seconds", lambda: compiled[0])
    selector = LossRankSelector(N, B, seed=1)
    draw = selector._next_batch

    def compiling_draw(run, rng):  # every draw "compiles" for 20 ms
        time.sleep(0.02)
        compiled[0] += 0.02
        return draw(run, rng)

    selector._next_batch = compiling_draw
    s = SelectionBatchSampler(selector, rank=0, world_size=1, prefetch=prefetch)
    batches = run_epochs(s, epochs=1)
    cost = s.cost()
    assert cost["batches"] == len(batches) == N // B
    assert cost["compile"] == pytest.approx(0.02 * len(batches))
    assert 0 < cost["selection"] < 0.01 * len(batches)  # the sleeps were compilation, not selection
    assert 0 < cost["training_thread"] < 0.01 * len(batches)
    assert cost["ms_per_batch"] == pytest.approx(1e3 * cost["training_thread"] / len(batches))


def test_selection_kernels_release_the_gil():
    # a background selection only overlaps the step if its compiled loops let go of the GIL
    from batchsel.core import heap as _heap
    from batchsel.core import rng as _counter_rng
    from batchsel.selectors import _smdl_kernels, loss_rank, rank_order

    for kernel in (
        _smdl_kernels._smdl_greedy,
        _smdl_kernels.smdl_draws,
        _smdl_kernels._gain,
        _smdl_kernels._add,
        loss_rank._loss_rank_batch,
        _counter_rng.choice,
        loss_rank._rank_values,
        rank_order.resort,
        rank_order.pick,
        _heap.lazy_pop,
        _heap.heapify,
    ):
        assert kernel.targetoptions.get("nogil"), kernel.__name__


def test_bad_feedback_raises_where_its_selection_would_have_run():
    # feedback is applied by the selection that follows it (on the training thread when
    # nothing is in flight): a bad one raises at that selection's batch, and the thread ends
    before = len(prefetch_threads())
    s = SelectionBatchSampler(LossRankSelector(N, B, seed=0), rank=0, world_size=1, prefetch=1)
    it = iter(s)
    first = next(it)
    s.observe(first, losses=[np.nan] * len(first))  # held back: a selection may be running
    next(it)  # selected before that feedback was given
    with pytest.raises(ValueError, match="NaN"):
        next(it)
    for t in prefetch_threads()[before:]:
        t.join(timeout=5)
    assert len(prefetch_threads()) == before
    s.set_epoch(1)
    assert len(list(s)) == len(s)  # the sampler still works


def test_one_core_of_its_own_selects_ahead_on_the_training_thread(monkeypatch):
    """Bound to one core (mpiexec's default binding) a thread would only take turns with
    the step: no thread is started, each selection runs when its batch is needed, with the
    same feedback, so the batches are those of the thread."""
    import batchsel.loop.prefetch as prefetch_module

    for kind in ("loss_rank", "submodular"):
        threaded = run_epochs(SelectionBatchSampler(FEEDBACK[kind](), rank=0, world_size=1, prefetch=1))
        monkeypatch.setattr(prefetch_module, "cores_of_this_rank", lambda: 1)
        before = len(prefetch_threads())
        s = SelectionBatchSampler(FEEDBACK[kind](), rank=0, world_size=1, prefetch=1)
        it = iter(s)
        next(it)
        assert len(prefetch_threads()) == before  # no thread
        it.close()
        assert run_epochs(SelectionBatchSampler(FEEDBACK[kind](), rank=0, world_size=1, prefetch=1)) == threaded
        monkeypatch.setattr(prefetch_module, "cores_of_this_rank", lambda: 2)


def test_cores_of_this_rank_reads_binding_and_ranks_per_node(monkeypatch):
    import batchsel.loop.prefetch as prefetch_module

    for var in prefetch_module._LOCAL_SIZE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    cases = [
        ({0}, {}, 1),  # bound to one core
        ({0, 1}, {"OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, 2),  # bound to two: its own
        ({0, 1, 2, 3}, {}, 4),  # alone, unbound
        ({0, 1, 2, 3}, {"LOCAL_WORLD_SIZE": "2"}, 2),  # torchrun, 2 ranks share 4 cores
        ({0, 1, 2, 3}, {"OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, 1),
    ]
    for affinity, env, cores in cases:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, a=affinity: a, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        assert cores_of_this_rank() == cores, (affinity, env)
        for k in env:
            monkeypatch.delenv(k)


def test_cheap_selections_stay_on_the_training_thread(monkeypatch):
    """A selection that costs less than handing it to the thread and back runs on the
    training thread when its batch is needed; a dear one may run on either (the thread
    scheduler decides, so how many the thread serves is a benchmark's figure,
    bench_overlap.py, not asserted here): the batches are the same wherever they ran."""
    import batchsel.loop.prefetch as prefetch_module

    for cheap, sleep in ((1.0, 0.0), (1e-4, 0.005)):
        monkeypatch.setattr(prefetch_module, "_CHEAP", cheap)
        where = []
        sel = LossRankSelector(N, B, seed=4)
        draw = sel._next_batch

        def tracked(run, rng, draw=draw):
            where.append(threading.current_thread().name)
            time.sleep(sleep)
            return draw(run, rng)

        sel._next_batch = tracked
        step = lambda: time.sleep(0.01)  # noqa: E731 - a training step the thread can select beside
        batches = run_epochs(SelectionBatchSampler(sel, rank=0, world_size=1, prefetch=1), epochs=1, sleep=step)
        if not sleep:  # the first one is timed on the thread
            assert where[1:].count("batchsel-prefetch") == 0, where
        assert batches == run_epochs(
            SelectionBatchSampler(LossRankSelector(N, B, seed=4), rank=0, world_size=1, prefetch=1), epochs=1
        )


def test_selections_dearer_than_the_step_stay_on_the_training_thread(monkeypatch):
    """Beside a step shorter than a selection (a tiny model, mostly Python) the thread can
    hide little and would take turns with the step for the GIL: once both are measured,
    selections run on the training thread. The batches are the same."""
    import batchsel.loop.prefetch as prefetch_module

    monkeypatch.setattr(prefetch_module, "_CHEAP", 1e-4)
    where = []
    sel = LossRankSelector(N, B, seed=4)
    draw = sel._next_batch

    def slow(run, rng):
        where.append(threading.current_thread().name)
        time.sleep(0.004)
        return draw(run, rng)

    sel._next_batch = slow
    step = lambda: time.sleep(0.0005)  # noqa: E731
    batches = run_epochs(SelectionBatchSampler(sel, rank=0, world_size=1, prefetch=1), epochs=1, sleep=step)
    assert where[3:].count("batchsel-prefetch") == 0, where  # the first ones run before the step is known
    assert batches == run_epochs(
        SelectionBatchSampler(LossRankSelector(N, B, seed=4), rank=0, world_size=1, prefetch=1), epochs=1
    )
