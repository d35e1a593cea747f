"""Faults around cost-balanced batches: costs in the forms a data set gives them (0-d
tensors, bfloat16), costs near float64's limits, a resume state saved with other costs,
and ``pad_collate`` on tuples with per-token tags."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
import torch

from batchsel import BucketSelector, CostGroupedSelector, LossRankSelector, SelectionBatchSampler, cli, example_costs
from batchsel.loop.collate import pad_collate

LENGTHS = np.random.default_rng(7).integers(5, 400, 300).astype(np.float64)


def roundtrip(state):
    """A state through torch.save / torch.load(weights_only=True), as a checkpoint holds it."""
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


# -- costs in a data set's forms -----------------------------------------------------------
def test_example_costs_reads_0d_tensors_and_numpy_scalars_as_numbers():
    # a datasets column in torch format gives one 0-d tensor per example
    column = {"n": [torch.tensor(3), torch.tensor(5.5), np.int64(2), np.array(4.0)]}
    assert example_costs(column, column="n").tolist() == [3.0, 5.5, 2.0, 4.0]
    assert example_costs({"n": torch.tensor([3, 5])}, column="n").tolist() == [3.0, 5.0]
    with pytest.raises(TypeError, match="column 'n' holds a 0-d value of dtype bool"):
        example_costs({"n": [torch.tensor(True)]}, column="n")


def test_example_costs_reads_a_torch_formatted_datasets_column():
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"n": [3, 5, 2], "ids": [[1, 2], [3], [4, 5, 6]]}).with_format("torch")
    assert example_costs(ds, column="n").tolist() == [3.0, 5.0, 2.0]
    assert example_costs(ds, column="ids").tolist() == [2.0, 1.0, 3.0]


def test_bfloat16_costs_are_accepted():
    costs = torch.tensor([3.0, 4.0, 5.0, 40.0], dtype=torch.bfloat16)
    sel = BucketSelector(costs, max_cost=50)
    assert sel.costs.dtype == np.float64 and sel.costs.tolist() == [3.0, 4.0, 5.0, 40.0]
    assert example_costs(costs).tolist() == [3.0, 4.0, 5.0, 40.0]


# -- costs near float64's limits ----------------------------------------------------------
@pytest.mark.parametrize("scale", [1e200, 1e-200])
def test_batch_size_budget_is_the_same_in_any_unit(scale):
    plain = BucketSelector(LENGTHS, batch_size=16)
    scaled = BucketSelector(LENGTHS * scale, batch_size=16)
    assert np.isfinite(scaled.max_cost_)
    assert scaled.max_cost_ == pytest.approx(plain.max_cost_ * scale, rel=1e-9)
    assert scaled.plan(0, 2).fingerprint() == plain.plan(0, 2).fingerprint()
    assert scaled.padding_share() == pytest.approx(plain.padding_share())


@pytest.mark.parametrize("value", [0.1, 1 / 3, 1e200])
def test_padding_of_equal_costs_is_exactly_zero(value):
    # 1 - sum / padded rounded below zero: "padding -0.0%"
    assert BucketSelector(np.full(1000, value), batch_size=16).padding_share() == 0.0


def test_cli_reports_the_budget_and_padding_of_huge_costs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    np.save("big.npy", LENGTHS * 1e200)
    np.save("equal.npy", np.full(1000, 1e200))
    argv = ["plan", "big.npy", "--method", "buckets", "--batch-size", "16", "--workers", "1", "--quiet"]
    assert cli.main([*argv, "--out", "big.npz", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["max_cost"] == pytest.approx(BucketSelector(LENGTHS, batch_size=16).max_cost_ * 1e200)
    assert 0 < summary["padding_share"] < 0.5
    argv[1] = "equal.npy"
    assert cli.main([*argv, "--out", "equal.npz"]) == 0
    out = capsys.readouterr().out
    assert "padding 0.0% of the padded cost" in out and "-0.0%" not in out and "budget inf" not in out


# -- resume with other costs --------------------------------------------------------------
def test_bucket_state_saved_with_other_costs_is_refused():
    other = np.random.default_rng(1).permutation(LENGTHS)  # same count, same batch count
    saved = SelectionBatchSampler(BucketSelector(LENGTHS, batch_size=16), rank=0, world_size=1)
    saved.set_epoch(0)
    it = iter(saved)
    for _ in range(3):
        next(it)
    state = roundtrip(saved.state_dict())
    same = SelectionBatchSampler(BucketSelector(LENGTHS, batch_size=16), rank=0, world_size=1)
    same.load_state_dict(state)
    resumed = SelectionBatchSampler(BucketSelector(other, batch_size=16), rank=0, world_size=1)
    assert len(resumed) == len(saved)  # nothing else in the state tells the runs apart
    with pytest.raises(ValueError, match="saved with other costs .* build the selector from the costs of the saved"):
        resumed.load_state_dict(state)
    # a state of an earlier version (no digest) still loads
    BucketSelector(other, batch_size=16).load_state_dict({})


def test_grouped_state_saved_with_other_costs_is_refused():
    n = 200
    sel = CostGroupedSelector(LossRankSelector(n, 16, seed=1), LENGTHS[:n], window=4)
    state = roundtrip(sel.state_dict())
    CostGroupedSelector(LossRankSelector(n, 16, seed=1), LENGTHS[:n], window=4).load_state_dict(state)
    other = CostGroupedSelector(LossRankSelector(n, 16, seed=1), LENGTHS[:n][::-1].copy(), window=4)
    with pytest.raises(ValueError, match="CostGroupedSelector state was saved with other costs"):
        other.load_state_dict(state)


# -- pad_collate on tuples with per-token tags --------------------------------------------
def test_pad_collate_pads_every_sequence_element_of_a_tuple():
    items = [(torch.tensor([1, 2, 3]), [7, 8, 9], 0, [0.5, 0.5]), (torch.tensor([4]), [6], 1, [1.0, 1.0])]
    tokens, mask, tags, labels, features = pad_collate(items)
    assert tokens.tolist() == [[1, 2, 3], [4, 0, 0]] and mask.sum(1).tolist() == [3, 1]
    assert tags.tolist() == [[7, 8, 9], [6, 0, 0]] and labels.tolist() == [0, 1]
    assert features.shape == (2, 2)  # a feature vector of one length is stacked
    # the tags' own pad value, by position; the mask follows the first element
    tokens, mask, tags, _, _ = pad_collate(items, pad_value={1: -100})
    assert tokens.tolist() == [[1, 2, 3], [4, 0, 0]] and tags.tolist() == [[7, 8, 9], [6, -100, -100]]
    # each element padded to its own longest
    _, _, other = pad_collate([([1, 2, 3], [5]), ([4], [6, 7])])
    assert other.tolist() == [[5, 0], [6, 7]]
    # the single-sequence case is as before
    padded, mask, label = pad_collate([([1, 2], 0), ([3], 1)], pad_value=-1)
    assert padded.tolist() == [[1, 2], [3, -1]] and label.tolist() == [0, 1]


def test_pad_collate_tuple_faults_name_the_element():
    with pytest.raises(TypeError, match="element 1 is a 1-D sequence in item 0 but a int in item 1"):
        pad_collate([([1, 2], [3, 4]), ([1], 5)])
    with pytest.raises(ValueError, match=r"pad_value names positions \[5\]"):
        pad_collate([([1, 2], [3, 4]), ([1], [5])], pad_value={5: -100})
    with pytest.raises(TypeError, match="pad_value must be a number, got 'x'"):
        pad_collate([([1, 2], [3, 4]), ([1], [5])], pad_value={1: "x"})


def test_pad_collate_keeps_fixed_length_elements_that_need_no_padding():
    """Multi-hot labels of one length need no pad value (before: refused for a pad id their
    dtype cannot hold); Python floats stay float64, as default_collate makes them."""
    bool_items = [(np.array([1, 2, 3]), np.array([True, False, True])), (np.array([4]), np.array([False, True, False]))]
    out = pad_collate(bool_items, pad_value=-100)
    assert out[2].dtype == torch.bool and out[2].tolist() == [[True, False, True], [False, True, False]]
    byte_items = [(np.array([1, 2, 3]), np.array([1, 0, 1], np.uint8)), (np.array([4]), np.array([0, 1, 0], np.uint8))]
    assert pad_collate(byte_items, pad_value=50256)[2].tolist() == [[1, 0, 1], [0, 1, 0]]
    targets = pad_collate([([1, 2, 3], [0.5, 0.25]), ([4], [0.1, 0.2])], pad_value=-1)[2]
    assert targets.dtype == torch.float64 and targets.tolist() == [[0.5, 0.25], [0.1, 0.2]]
