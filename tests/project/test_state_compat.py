"""States written by batchsel 0.1.0 (state version 1) still load and resume exactly.

``tests/golden/states_v1.pt`` holds, for every kind of selector, the plain
``sampler.state_dict()`` taken after 3 steps of epoch 1 by the 0.1.0 release, and the
batches that run trained after it; ``make_states_v1.py`` recorded it before the resume
state was rebuilt. A fresh sampler that loads the old state must train the same batches.
"""

from __future__ import annotations

import sys

import pytest
import torch
from paths import GOLDEN

sys.path.insert(0, str(GOLDEN))

import make_states_v1 as V1  # noqa: E402

RECORDED = torch.load(GOLDEN / "states_v1.pt", weights_only=True)["cases"]


@pytest.mark.parametrize("name", sorted(set(RECORDED) - {"loss_rank_two_ranks"}))
def test_a_version_1_state_resumes_the_recorded_batches(name):
    make, kwargs = V1.selectors()[name]
    case = RECORDED[name]
    rest, _ = V1.run(make, kwargs, state=case["state"])
    assert rest == case["rest"]


def test_a_version_1_state_of_every_rank_resumes_each_rank():
    make, kwargs = V1.selectors()["loss_rank"]
    case = RECORDED["loss_rank_two_ranks"]
    for rank in range(2):
        rest, _ = V1.run(make, kwargs, rank=rank, world_size=2, state=case["state"])
        assert rest == case["rest"][rank]


def test_every_kind_of_selector_is_recorded():
    import batchsel

    recorded = {type(V1.selectors()[name][0]()).__name__ for name in RECORDED if name in V1.selectors()}
    selectors = {n for n in batchsel.__all__ if n.endswith("Selector") and n != "Selector"}
    assert recorded == selectors - SINCE_0_1_0  # every selector 0.1.0 had


# selectors added after 0.1.0: no state of theirs was written by it (their own tests resume them)
SINCE_0_1_0 = {"StepBalancedSelector"}


@pytest.mark.parametrize("name", sorted(set(RECORDED) - {"loss_rank_two_ranks"}))
def test_this_releases_state_loads_with_weights_only_and_resumes_alike(name):
    import io

    make, kwargs = V1.selectors()[name]
    _, state = V1.run(make, kwargs, stop=V1.STOP)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    rest, _ = V1.run(make, kwargs, state=loaded)
    assert rest == RECORDED[name]["rest"]


def test_a_sampler_pickled_by_0_1_0_is_refused_naming_the_state_dict():
    from batchsel import SelectionBatchSampler

    flat = {"selector": None, "_yielded": 3, "_iter_epoch": 0}  # the flat form 0.1.0 pickled
    sampler = SelectionBatchSampler.__new__(SelectionBatchSampler)
    with pytest.raises(ValueError, match=r"pickled by batchsel 0\.1\.0.*sampler\.state_dict\(\)"):
        sampler.__setstate__(flat)
