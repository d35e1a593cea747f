"""States taken often: WriteJournal's shared bases and the entries written since, and the
online selectors' states taken at every step (as torchdata's StatefulDataLoader takes them)."""

from __future__ import annotations

import io
import pickle
import weakref

import numpy as np
import pytest
import torch

from batchsel import AutoSelector, InfoBatchSelector, LossRankSelector
from batchsel.core.journal import ChangeLog, WriteJournal, saved_parts, saved_values


def test_every_state_gives_the_arrays_as_they_were_when_taken():
    rng = np.random.default_rng(0)
    a, b = np.zeros(50), np.zeros(50, np.bool_)
    journal = WriteJournal(limit=15)
    taken = []
    for step in range(200):
        at = rng.integers(0, 50, int(rng.integers(1, 6)))
        a[at] = rng.random(len(at))
        b[at] = rng.random(len(at)) < 0.5
        journal.wrote(at)
        if step % 7 == 3:  # a write nothing records: the next state must take a new base
            a, b = a.copy(), b.copy()
        taken.append(({"a": a.copy(), "b": b.copy()}, journal.state({"a": a, "b": b})))
    bases = {id(state["a"]["base"]) for _, state in taken}
    assert 1 < len(bases) < len(taken)  # shared, and renewed
    for want, state in taken:  # later writes did not reach earlier states
        np.testing.assert_array_equal(saved_values(state["a"]), want["a"])
        np.testing.assert_array_equal(saved_values(state["b"], dtype=np.bool_), want["b"])
        assert len(state["a"]["at"]) <= journal.limit


def test_a_former_base_no_state_holds_is_brought_up_to_date_in_place():
    # as StatefulDataLoader does: each state is read, then dropped; a new base is then the
    # former one written at the positions it lacks, and every state is still exact
    rng = np.random.default_rng(2)
    a, b = rng.random(300), np.zeros(300, np.bool_)
    journal = WriteJournal(limit=20)
    earlier: list[weakref.ref] = []  # every base seen, while alive
    renewals = reused = 0
    for step in range(300):
        at = rng.integers(0, 300, int(rng.integers(1, 8)))
        a[at] = rng.random(len(at))
        b[at] = ~b[at]
        journal.wrote(at)
        if step == 150:  # a write of everything: the next base is copied whole
            a[:] = rng.random(300)
            journal.rewrote_all()
        state = journal.state({"a": a, "b": b})
        base = state["a"]["base"]
        if earlier and base is not earlier[-1]():  # a new base: a former one, or a fresh copy
            renewals += 1
            reused += any(ref() is base for ref in earlier)
        earlier.append(weakref.ref(base))
        np.testing.assert_array_equal(saved_values(state["a"]), a)
        np.testing.assert_array_equal(saved_values(state["b"], dtype=np.bool_), b)
        del state, base
    assert renewals > 20 and reused >= renewals - 1  # a fresh copy only for the second base: no former one yet


def test_plain_arrays_and_bad_parts():
    base, at, values = saved_parts([1.0, 2.0], np.float64)
    assert base.tolist() == [1.0, 2.0] and at.size == values.size == 0
    with pytest.raises(ValueError, match="outside its 2 entries"):
        saved_parts({"base": np.zeros(2), "at": np.array([2]), "values": np.ones(1)}, np.float64)
    with pytest.raises(ValueError, match="1 positions written and 2 values"):
        saved_parts({"base": np.zeros(2), "at": np.array([1]), "values": np.ones(2)}, np.float64)
    journal = WriteJournal()
    journal.state({"a": np.zeros(4)})
    assert pickle.loads(pickle.dumps(journal)).state({"a": np.ones(4)})["a"]["base"].tolist() == [1.0] * 4


def test_a_position_written_again_saves_its_last_value():
    # a state reads only the values written since the one before: a position written
    # again is listed again, and the later value is the one that loads
    a = np.zeros(6)
    journal = WriteJournal(limit=100)
    journal.state({"a": a})
    a[2] = 1.0
    journal.wrote(np.array([2]))
    journal.state({"a": a})
    a[2] = 7.0
    journal.wrote(np.array([2, 4]))
    state = journal.state({"a": a})["a"]
    assert state["at"].tolist() == [2, 2, 4] and state["values"].tolist() == [1.0, 7.0, 0.0]
    assert saved_values(state).tolist() == [0.0, 0.0, 7.0, 0.0, 0.0, 0.0]


def test_change_log_tells_each_reader_what_changed_since_it_read():
    log = ChangeLog(limit=10)
    first = log.now()
    log.wrote(np.array([4, 2]))
    second = log.now()
    log.wrote(np.array([2]))
    assert log.since(first).tolist() == [4, 2, 2] and log.since(second).tolist() == [2]
    assert log.since(log.now()).tolist() == []
    view = log.since(second)
    log.wrote(np.arange(2000))
    log.wrote(np.arange(5000))  # the buffer fills: the last `limit` are kept, older readers are not told
    assert log.since(first) is None and log.since(second) is None
    assert log.since(log.now() - 5010).tolist() == [*range(1990, 2000), *range(5000)]
    assert view.tolist() == [2]  # what a reader got stays as it was
    copied = pickle.loads(pickle.dumps(log))  # a copy's readers read everything again
    assert copied.since(log.now()) is None and copied.since(copied.now()).tolist() == []
    mark = log.now()
    log.rewrote_all()
    assert log.since(mark) is None and log.since(log.now()).tolist() == []


def make(kind: str, n: int):
    if kind == "loss-rank":
        return LossRankSelector(n, 8, seed=3)
    if kind == "infobatch":
        return InfoBatchSelector(n, 8, epochs=3, seed=3)
    return AutoSelector(n, 8, labels=np.arange(n) % 4, seed=3)


def run_lagged(sel, epochs, first_epoch=0, start=0, losses=None, fed=0, states=None, held=None):
    """The batches of ``epochs``, each batch's losses fed back after the next one is drawn
    (a loader one batch ahead: pending marks matter); a state before every draw; ``held``:
    a batch in flight, drawn before the first."""
    batches = []
    for epoch in range(first_epoch, epochs):
        it = sel.iter_batches(epoch, start=start if epoch == first_epoch else 0)
        while True:
            if states is not None:
                states.append((epoch, sum(e == epoch for e, _ in batches), len(batches), sel.state_dict()))
            batch = next(it, None)
            if held is not None:
                sel.observe(held, losses=losses[fed : fed + len(held)])
                fed += len(held)
                held = None
            if batch is None:
                break
            batches.append((epoch, batch.tolist()))
            held = batch
    return batches


@pytest.mark.parametrize("kind", ["loss-rank", "auto", "infobatch"])
def test_a_state_taken_at_every_step_resumes_exactly_from_any_of_them(kind):
    # a state before every draw shares its base with the others; any one of them, saved
    # with torch.save and read with weights_only=True, continues as the uninterrupted run
    n = 400  # the journal's default limit, 16 * sqrt(n) = 320 positions: a new base every 20 steps
    rng = np.random.default_rng(1)  # mostly fitted, a few misfit: AutoSelector selects after its warm-up
    losses = np.where(rng.random(10**4) < 0.05, 3.0, 0.2 * rng.random(10**4))
    states = []
    sel = make(kind, n)
    batches = run_lagged(sel, 3, losses=losses, states=states)
    assert kind != "auto" or sel.mode == "select"
    scores = [s["losses"] if kind == "infobatch" else s["scores"]["losses"] for *_, s in states]
    assert sum(len(losses["at"]) > 0 for losses in scores) > len(states) // 3
    for epoch, start, done, state in states[1::5]:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        buffer.seek(0)
        fresh = make(kind, n)
        fresh.load_state_dict(torch.load(buffer, weights_only=True))
        held = np.array(batches[done - 1][1]) if start else None  # in flight when the state was taken
        fed = sum(len(b) for _, b in batches[: done - 1 if start else done])
        replay = run_lagged(fresh, 3, epoch, start, losses, fed, held=held)
        assert replay == batches[done:], (epoch, start)
