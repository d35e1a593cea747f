"""EpochPlan: equalizing ranks, validation, fingerprints and plan files."""

import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from paths import REPO

import batchsel.plans.plan as plan_module
from batchsel.plans.plan import EpochPlan, load_plans, save_plans


def random_plan(seed=0, world_size=3, num_batches=4, num_examples=100, weighted=True, epoch=0):
    rng = np.random.default_rng(seed)
    batches = [
        [rng.choice(num_examples, size=rng.integers(1, 8), replace=False) for _ in range(num_batches)]
        for _ in range(world_size)
    ]
    weights = [[rng.random(b.size).astype(np.float32) + 0.5 for b in rank] for rank in batches] if weighted else None
    return EpochPlan(batches, weights, num_examples=num_examples, epoch=epoch, seed=seed, method="test")


def assert_same_plan(a, b):
    assert (a.world_size, a.num_batches, a.num_examples, a.epoch, a.seed, a.method) == (
        b.world_size,
        b.num_batches,
        b.num_examples,
        b.epoch,
        b.seed,
        b.method,
    )
    for r in range(a.world_size):
        for x, y in zip(a.batches(r), b.batches(r)):
            assert y.dtype == np.int64
            np.testing.assert_array_equal(x, y)
        wa, wb = a.weights(r), b.weights(r)
        assert (wa is None) == (wb is None)
        if wa is not None:
            for x, y in zip(wa, wb):
                assert y.dtype == np.float32
                np.testing.assert_array_equal(x, y)
    assert a.fingerprint() == b.fingerprint()


# -- construction and access -----------------------------------------------------------
def test_access():
    plan = EpochPlan([[[0, 1], [2]], [[3, 4], [5]]], [[[1, 1], [2]], [[1, 1], [3]]], num_examples=8)
    assert (plan.world_size, plan.num_batches, len(plan), plan.num_examples) == (2, 2, 2, 8)
    np.testing.assert_array_equal(plan.indices(1), [3, 4, 5])
    np.testing.assert_array_equal(plan.indices(), [0, 1, 2, 3, 4, 5])
    assert plan.indices(0).dtype == np.int64
    np.testing.assert_array_equal(plan.weights(1)[1], [3.0])
    assert EpochPlan([[[0, 5]]]).num_examples == 6  # inferred from the largest index
    assert EpochPlan([[[0]]]).weights(0) is None
    plan.batches(0).clear()  # the returned list is the caller's copy
    assert plan.num_batches == 2


def test_construction_errors():
    with pytest.raises(ValueError, match="at least one rank"):
        EpochPlan([])
    with pytest.raises(ValueError, match=r"same number of batches, got \[2, 1\]"):
        EpochPlan([[[0], [1]], [[2]]])
    with pytest.raises(ValueError, match="weights cover 1 ranks, batches 2"):
        EpochPlan([[[0]], [[1]]], [[[1.0]]])
    with pytest.raises(ValueError, match=r"rank 0 has weights for 1 batches but 2 batches"):
        EpochPlan([[[0], [1]]], [[[1.0]]])


@pytest.mark.parametrize("bad", [[0.5, 1.0], [True, False], ["a"]])
def test_non_integer_indices_refused(bad):
    # a float or boolean-mask batch would otherwise be silently cast to wrong indices
    with pytest.raises(TypeError, match="integer indices"):
        EpochPlan([[bad]])


def test_integral_float_indices_accepted():
    np.testing.assert_array_equal(EpochPlan([[[2.0, 3.0], []]]).batches(0)[0], [2, 3])


def test_rank_argument_checked():
    plan = random_plan(world_size=2)
    with pytest.raises(ValueError, match=r"rank must be in \[0, 2\), got 2"):
        plan.batches(2)
    with pytest.raises(TypeError, match="rank must be an integer, got '0'"):
        plan.weights("0")


# -- from_rank_batches ----------------------------------------------------------------
def _uneven():
    batches = [[np.array([0, 1]), np.array([2, 3]), np.array([4])], [np.array([5, 6])], [np.array([7]), np.array([8])]]
    weights = [[b.astype(np.float32) + 1 for b in rank] for rank in batches]
    return batches, weights


def test_pad_repeats_own_batches_from_the_first():
    batches, weights = _uneven()
    plan = EpochPlan.from_rank_batches(batches, weights, num_examples=9, epoch=3)
    assert plan.num_batches == 3 and plan.epoch == 3
    for r, rank in enumerate(batches):
        expected = [rank[i % len(rank)] for i in range(3)]
        for got, want in zip(plan.batches(r), expected):
            np.testing.assert_array_equal(got, want)
        for got, b in zip(plan.weights(r), plan.batches(r)):
            np.testing.assert_array_equal(got, b + 1)  # weights follow their batch
    plan.validate()


def test_drop_last_truncates_to_the_shortest_rank():
    batches, weights = _uneven()
    plan = EpochPlan.from_rank_batches(batches, weights, drop_last=True, num_examples=9)
    assert plan.num_batches == 1
    for r in range(3):
        np.testing.assert_array_equal(plan.batches(r)[0], batches[r][0])
        np.testing.assert_array_equal(plan.weights(r)[0], weights[r][0])


def test_from_rank_batches_empty_rank():
    with pytest.raises(ValueError, match=r"rank 1 has no batches to pad with \(batches per rank: \[2, 0\]\)"):
        EpochPlan.from_rank_batches([[[0], [1]], []])
    assert EpochPlan.from_rank_batches([[[0], [1]], []], drop_last=True).num_batches == 0
    with pytest.raises(ValueError, match="at least one rank"):
        EpochPlan.from_rank_batches([])


# -- validate -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "batches, weights, match",
    [
        ([[[0, 10]]], None, r"rank 0 batch 0 has indices outside \[0, 10\)"),
        ([[[0], [-1]]], None, r"rank 0 batch 1 has indices outside \[0, 10\)"),
        ([[[0]], [[1, 2]]], [[[1.0]], [[1.0]]], "rank 1 batch 0: 1 weights for 2 indices"),
        ([[[0, 1]]], [[[1.0, -0.5]]], "rank 0 batch 0 has negative or non-finite weights"),
        ([[[0, 1]]], [[[1.0, np.nan]]], "rank 0 batch 0 has negative or non-finite weights"),
    ],
)
def test_validate_names_the_problem(batches, weights, match):
    with pytest.raises(ValueError, match=match):
        EpochPlan(batches, weights, num_examples=10).validate()


def test_validate_returns_self():
    plan = random_plan()
    assert plan.validate() is plan


# -- fingerprint ----------------------------------------------------------------------
def test_fingerprint_depends_on_content_not_on_representation():
    a = EpochPlan([[[0, 1], [2]], [[3, 4], [5]]], num_examples=6)
    b = EpochPlan([[np.array([0, 1], np.int32), (2,)], [np.array([3, 4], np.uint8), np.array([5])]], num_examples=6)
    assert a.fingerprint() == b.fingerprint() and a == b
    fp = a.fingerprint()
    assert len(fp) == 16 and int(fp, 16) >= 0
    variants = [
        EpochPlan([[[0, 1], [2]], [[3, 4], [6]]], num_examples=7),  # one index
        EpochPlan([[[0, 1], [2]], [[3, 4], [5]]], num_examples=7),  # dataset size
        EpochPlan([[[0], [1, 2]], [[3, 4], [5]]], num_examples=6),  # same indices, other batch boundary
        EpochPlan([[[0, 1], [2]], [[5], [3, 4]]], num_examples=6),  # batch order
        EpochPlan([[[0, 1], [2], [3, 4], [5]]], num_examples=6),  # world size
        EpochPlan([[[0, 1], [2]], [[3, 4], [5]]], [[[1, 1], [1]], [[1, 1], [1]]], num_examples=6),  # weights
        EpochPlan([[[0, 1], [2]], [[3, 4], [5]]], [[[1, 1], [1]], [[1, 1], [2]]], num_examples=6),
    ]
    fps = [v.fingerprint() for v in variants]
    assert fp not in fps and len(set(fps)) == len(fps)


def test_fingerprint_is_the_same_in_another_process():
    # ranks compare fingerprints: they must not depend on hash seeds or process state
    code = (
        "import numpy as np; from batchsel.plans.plan import EpochPlan; "
        "print(EpochPlan([[np.arange(5), [7, 9]], [[1, 2], [3]]], [[np.ones(5), [2, 3]], [[1, 1], [0.5]]], "
        "num_examples=10, epoch=4, method='x').fingerprint())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    ).stdout.strip()
    plan = EpochPlan([[np.arange(5), [7, 9]], [[1, 2], [3]]], [[np.ones(5), [2, 3]], [[1, 1], [0.5]]], num_examples=10)
    assert out == plan.fingerprint()


# -- files ----------------------------------------------------------------------------
def test_save_load_round_trip(tmp_path):
    for plan in [random_plan(seed=1), random_plan(seed=2, weighted=False), EpochPlan([[], []], num_examples=4)]:
        plan.save(tmp_path / "plan.npz")
        assert_same_plan(plan, EpochPlan.load(tmp_path / "plan.npz"))
    assert sorted(os.listdir(tmp_path)) == ["plan.npz"]  # no temporary left, name kept


def test_multi_epoch_file(tmp_path):
    plans = [random_plan(seed=s, epoch=e, weighted=e % 2 == 0) for e, s in zip([0, 1, 5], [10, 11, 12])]
    save_plans(tmp_path / "epochs.npz", plans)
    loaded = load_plans(str(tmp_path / "epochs.npz"))
    assert len(loaded) == 3
    for a, b in zip(plans, loaded):
        assert_same_plan(a, b)
    assert_same_plan(plans[2], EpochPlan.load(tmp_path / "epochs.npz", epoch=5))
    with pytest.raises(ValueError, match=r"holds 3 epochs \[0, 1, 5\]; pass epoch="):
        EpochPlan.load(tmp_path / "epochs.npz")
    with pytest.raises(ValueError, match=r"has no epoch 2 \(it has \[0, 1, 5\]\)"):
        EpochPlan.load(tmp_path / "epochs.npz", epoch=2)
    with pytest.raises(ValueError, match="no plans to save"):
        save_plans(tmp_path / "none.npz", [])


def test_save_refuses_overwrite_when_asked(tmp_path):
    random_plan(seed=1).save(tmp_path / "p.npz")
    with pytest.raises(FileExistsError):
        random_plan(seed=2).save(tmp_path / "p.npz", overwrite=False)
    assert EpochPlan.load(tmp_path / "p.npz") == random_plan(seed=1)


def test_corrupted_or_truncated_file_raises_value_error(tmp_path):
    path = tmp_path / "p.npz"
    random_plan(seed=3).save(path)
    good = path.read_bytes()
    # a flipped byte anywhere (zip headers, arrays, JSON, checksum) either raises ValueError
    # or, where the zip format ignores it (timestamps, ...), still yields the same plan
    rejected = 0
    for pos in range(0, len(good), 5):
        damaged = bytearray(good)
        damaged[pos] ^= 0xFF
        path.write_bytes(bytes(damaged))
        try:
            loaded = EpochPlan.load(path)
        except ValueError as exc:
            assert "p.npz" in str(exc)
            rejected += 1
        else:
            assert_same_plan(loaded, random_plan(seed=3))
    assert rejected > 0.7 * len(good) / 5
    for size in [0, 10, len(good) // 2, len(good) - 1]:
        path.write_bytes(good[:size])
        with pytest.raises(ValueError, match="p.npz"):
            EpochPlan.load(path)


def test_foreign_files_raise_value_error(tmp_path):
    np.savez(tmp_path / "other.npz", a=np.arange(3))
    with pytest.raises(ValueError, match="is not a batchsel plan file"):
        EpochPlan.load(tmp_path / "other.npz")
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(ValueError, match="not a readable plan file"):
        load_plans(tmp_path / "text.npz")
    with pytest.raises(ValueError, match="no such plan file"):
        EpochPlan.load(tmp_path / "missing.npz")
    with pytest.raises(ValueError, match="is a directory"):
        EpochPlan.load(tmp_path)


def test_a_newer_format_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(plan_module, "FORMAT_VERSION", 99)
    random_plan().save(tmp_path / "future.npz")
    monkeypatch.undo()
    with pytest.raises(ValueError, match="has plan format 99, this batchsel reads 1"):
        EpochPlan.load(tmp_path / "future.npz")


def test_failed_write_leaves_no_half_written_file(tmp_path, monkeypatch):
    path = tmp_path / "p.npz"
    old = random_plan(seed=1)
    old.save(path)
    real_savez = np.savez

    def savez_then_crash(f, **arrays):
        real_savez(f, **arrays)  # the whole new content is written to the temporary file ...
        raise OSError("no space left on device")  # ... and the write fails before the rename

    monkeypatch.setattr(plan_module.np, "savez", savez_then_crash)
    with pytest.raises(OSError, match="no space left"):
        random_plan(seed=2).save(path)
    with pytest.raises(OSError, match="no space left"):
        random_plan(seed=2).save(tmp_path / "new.npz")
    monkeypatch.undo()
    assert EpochPlan.load(path) == old  # the old plan is intact
    assert sorted(os.listdir(tmp_path)) == ["p.npz"]  # no new.npz, no temporary files
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None


# -- issue 14: a plan file is checked against its header and validated on load -------------
def rewrite(path, out, edit):
    """Copy plan file ``path`` to ``out`` with ``edit(arrays)`` applied and a fresh
    checksum (a hand-edited file, not a damaged one)."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    edit(arrays)
    arrays["checksum"] = np.array(plan_module._checksum(arrays))
    np.savez(out, **arrays)
    return out


def edit_header(**changes):
    def edit(arrays):
        import json

        h = json.loads(str(arrays["e0_header"]))
        for key, value in changes.items():
            if value is None:
                del h[key]
            else:
                h[key] = value
        arrays["e0_header"] = np.array(json.dumps(h))

    return edit


def test_two_dimensional_batches_are_refused():
    with pytest.raises(ValueError, match=r"rank 0 batch 1 must be 1-D.*shape \(2, 2\)"):
        EpochPlan([[np.arange(3), np.array([[0, 1], [2, 3]])]], num_examples=10)
    with pytest.raises(ValueError, match=r"weights must be 1-D"):
        EpochPlan([[np.arange(4)]], [[np.ones((2, 2))]], num_examples=10)


@pytest.mark.parametrize(
    "edit, match",
    [
        (
            lambda a: a.__setitem__(
                "e0_indices", np.where(a["e0_indices"] == a["e0_indices"][0], 10**6, a["e0_indices"])
            ),
            r"outside \[0, 100\)",
        ),
        (edit_header(world_size=1), r"1 rank\(s\) x 4 batches = 4 batches, the file holds 12"),
        (edit_header(num_examples=None), r"header lacks \['num_examples'\]"),
        (edit_header(epoch=-2), "epoch=-2"),
        (edit_header(num_batches="4"), "num_batches"),
        (lambda a: a.__setitem__("e0_weights", a["e0_weights"][:-1]), "weights for"),
        (lambda a: a.__setitem__("e0_offsets", a["e0_offsets"][::-1].copy()), "offsets"),
    ],
)
def test_load_validates_what_the_file_says(tmp_path, edit, match):
    random_plan(seed=4).save(tmp_path / "p.npz")
    bad = rewrite(tmp_path / "p.npz", tmp_path / "bad.npz", edit)
    with pytest.raises(ValueError, match=match):
        EpochPlan.load(bad)
    with pytest.raises(ValueError, match="bad.npz"):
        load_plans(bad)
