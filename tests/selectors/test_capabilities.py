"""A selector's capabilities, declared once per class (issue 60): ``capabilities()`` returns
them, nothing is inferred from what a class overrides, the former flag attributes read the
one declaration, 0.1's class attributes still work (deprecated), and CostGroupedSelector
keeps every capability of the selector it wraps but the one it changes."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

import batchsel
from batchsel import CostGroupedSelector, EmbeddingIndex, RandomSelector, Selector
from batchsel.loop.sampler.profile import SelectorProfile
from batchsel.selectors import OfflineSelector, OnlineSelector
from batchsel.selectors.capabilities import FIELDS, SelectorCapabilities

N, B = 60, 6
#: what CostGroupedSelector changes of the selector's capabilities, on purpose: a window's
#: steps come in a random order, so its short batch need not be the epoch's last
GROUPED_CHANGES = {"full_batches": False}


@pytest.fixture(scope="module")
def selectors():
    """One of every selector class ``batchsel`` exports (two SMDLs: its feedback depends
    on its weights)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, 4)).astype(np.float32)
    y = np.arange(N) % 3
    graph = EmbeddingIndex(x, metric="euclidean", kind="flat", progress=False).knn_graph(k=5)
    return {
        "Selector": [Selector(N, B)],
        "AutoSelector": [batchsel.AutoSelector(N, B)],
        "RandomSelector": [RandomSelector(N, B)],
        "SubmodularSelector": [
            batchsel.SubmodularSelector(x, B, pool_size=24),
            batchsel.SubmodularSelector(x, B, pool_size=24, weights=(0.5, 0.5, 0.0, 0.0)),
        ],
        "LossRankSelector": [batchsel.LossRankSelector(N, B)],
        "GraphBlockSelector": [batchsel.GraphBlockSelector(graph, 12, blocks_per_batch=2)],
        "CoresetSelector": [batchsel.CoresetSelector(x, y, B, fraction=0.5)],
        "InfoBatchSelector": [batchsel.InfoBatchSelector(N, B, epochs=3)],
        "ScorePruningSelector": [batchsel.ScorePruningSelector(y, B, epochs=3)],
        "BucketSelector": [batchsel.BucketSelector(rng.integers(1, 50, N), max_cost=200)],
        "StepBalancedSelector": [batchsel.StepBalancedSelector(RandomSelector(N, B), rng.integers(1, 50, N))],
    }


def _exported_selectors() -> list[str]:
    return [name for name in batchsel.__all__ if name.endswith("Selector")]


def test_cost_grouped_keeps_every_capability_but_full_batches(selectors):
    """Over every selector class in ``batchsel.__all__``: the wrapper's capabilities are the
    selector's, field by field, but ``full_batches`` (0.1 copied eight flags by name and
    left ``variable_batch_size``, ``partitions`` and ``supports_start`` at the defaults)."""
    costs = np.arange(N) % 17
    assert set(_exported_selectors()) == set(selectors) | {"CostGroupedSelector"}, "a selector to add here"
    for name, built in selectors.items():
        for sel in built:
            grouped = CostGroupedSelector(sel, costs)
            theirs, ours = sel.capabilities(), grouped.capabilities()
            for field in FIELDS:
                expected = GROUPED_CHANGES.get(field, getattr(theirs, field))
                assert getattr(ours, field) == expected, (name, field)
            assert SelectorProfile(grouped).capabilities == ours
    with pytest.raises(ValueError, match="already a CostGroupedSelector"):
        CostGroupedSelector(CostGroupedSelector(RandomSelector(N, B), costs), costs)


#: what StepBalancedSelector changes on purpose: micro-batches of varying sizes, none full,
#: whose weights carry the step's normalization
STEP_CHANGES = {"variable_batch_size": True, "weighted_plans": True, "full_batches": False, "elastic_resume": False}


def test_step_balanced_keeps_every_capability_but_its_micro_batches(selectors):
    costs = np.arange(N) % 17 + 1
    for name, built in selectors.items():
        for sel in built:
            if sel.online:
                with pytest.raises(ValueError, match="CostGroupedSelector"):
                    batchsel.StepBalancedSelector(sel, costs)
                continue
            theirs = sel.capabilities()
            ours = batchsel.StepBalancedSelector(sel, costs).capabilities()
            for field in FIELDS:
                assert getattr(ours, field) == STEP_CHANGES.get(field, getattr(theirs, field)), (name, field)


def test_step_balanced_states_its_micro_batches_per_step():
    sel = batchsel.StepBalancedSelector(RandomSelector(N, 8, seed=0), np.arange(N) % 17 + 1, accumulation=4)
    assert sel.capabilities().micro_batches_per_step == sel.micro_batches_per_step == 4
    assert RandomSelector(N, 8).capabilities().micro_batches_per_step == 1


def test_cost_grouped_changes_full_batches_on_purpose():
    """Regrouping moves a rank's short batch away from the end: not full but the last."""
    sel = CostGroupedSelector(RandomSelector(10, 4, seed=0), np.arange(10)[::-1], window=3)
    assert RandomSelector.full_batches and not sel.capabilities().full_batches
    sizes = [[len(b) for b in sel.plan(e).batches(0)] for e in range(3)]
    assert any(s[-1] == max(s) for s in sizes), sizes


def test_the_flag_attributes_read_the_one_declaration(selectors):
    for built in selectors.values():
        for sel in built:
            caps = sel.capabilities()
            assert isinstance(caps, SelectorCapabilities)
            for field in FIELDS:
                assert getattr(sel, field) == getattr(caps, field)
            assert sel._unplanned_params == caps.unplanned_params  # the former name
    assert (OnlineSelector.online, OnlineSelector.uses_feedback, OfflineSelector.online) == (True, True, False)
    assert batchsel.GraphBlockSelector._unplanned_params == ("cache_dir", "neighbors")
    # a class's own answer is what its default instance gives; SMDL's logits follow U's weight
    smdl = selectors["SubmodularSelector"]
    assert batchsel.SubmodularSelector.feedback_fields == smdl[0].feedback_fields == ("embeddings",)
    assert smdl[1].feedback_fields == ("logits", "embeddings")


def test_the_profile_reads_the_capabilities_once():
    calls = []

    class Counted(RandomSelector):
        def capabilities(self):
            calls.append(1)
            return super().capabilities()

    profile = SelectorProfile(Counted(N, B))
    answers = [
        profile.online,
        profile.records_batches,
        profile.lag_matters,
        profile.weighted_plans,
        profile.full_batches,
        profile.variable_batch_size,
        profile.epoch_lengths_vary,
        profile.supports_start,
        profile.default_prefetch,
        profile.feedback_per_epoch,
    ]
    assert answers == [False, False, False, False, True, False, False, True, 0, False]
    assert len(calls) == 1


def test_a_class_declares_its_capabilities_as_class_keywords():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # declared: no warning

        class Reads(RandomSelector, uses_feedback=True, feedback_fields=["losses"], supports_start=False):
            def observe(self, indices, losses=None, logits=None, embeddings=None):
                pass

            def iter_batches(self, epoch, rank=0, world_size=1):
                yield from super().iter_batches(epoch, rank, world_size)

        class Logs(batchsel.LossRankSelector):  # keeps its base's uses_feedback=True: nothing to say
            def observe(self, indices, losses=None, logits=None, embeddings=None):
                super().observe(indices, losses)

    caps = Reads(N, B).capabilities()
    assert (caps.uses_feedback, caps.feedback_fields, caps.supports_start, caps.full_batches) == (
        True,
        ("losses",),
        False,
        True,
    )
    assert Logs.uses_feedback and Logs.feedback_fields == ("losses",)
    profile = SelectorProfile(Reads(N, B))
    assert profile.uses_feedback and profile.needed_fields == {"losses"} and not profile.supports_start


def test_overriding_observe_infers_nothing_and_warns_with_the_fix():
    with pytest.warns(UserWarning, match=r"declare uses_feedback.*class Observes\(\.\.\., uses_feedback=True\)") as w:

        class Observes(RandomSelector):
            def observe(self, indices, losses=None, logits=None, embeddings=None):
                pass

    assert w[0].filename == __file__  # points at the class, not at batchsel
    assert not Observes.uses_feedback and not Observes(N, B).capabilities().uses_feedback
    assert not SelectorProfile(Observes(N, B)).uses_feedback


def test_overriding_iter_batches_infers_nothing_and_warns_with_the_fix():
    with pytest.warns(UserWarning, match=r"class NoStart\(\.\.\., supports_start=False\)"):

        class NoStart(RandomSelector):
            def iter_batches(self, epoch, rank=0, world_size=1):
                yield from super().iter_batches(epoch, rank, world_size)

    assert NoStart.supports_start  # the base's, as the warning says
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # takes start, as its base: nothing to say

        class Starts(RandomSelector):
            def iter_batches(self, epoch, rank=0, world_size=1, start=0):
                yield from super().iter_batches(epoch, rank, world_size, start)

    assert Starts.supports_start


def test_a_former_class_attribute_is_folded_in_with_a_deprecation():
    """0.1's way of declaring keeps working: one declaration, the attribute's value."""
    with pytest.warns(DeprecationWarning, match=r"capabilities\(\)") as w:

        class Old(RandomSelector):
            uses_feedback = True
            feedback_fields = ["losses"]
            _unplanned_params = ("cache_dir",)

            def observe(self, indices, losses=None, logits=None, embeddings=None):
                pass

    assert not [x for x in w if x.category is UserWarning]  # uses_feedback is declared
    sel = Old(N, B)
    assert Old.uses_feedback and sel.capabilities().uses_feedback and "uses_feedback" not in vars(Old)
    assert sel.capabilities().feedback_fields == ("losses",)
    assert sel.unplanned_params == sel._unplanned_params == ("cache_dir",)
    profile = SelectorProfile(sel)
    assert profile.uses_feedback and profile.feedback_fields == {"losses"}

    class Later(RandomSelector):
        pass

    Later.full_batches = False  # assigned after the class was made: read as well
    assert not Later(N, B).capabilities().full_batches and not SelectorProfile(Later(N, B)).full_batches


def test_a_flag_set_on_the_selector_is_folded_in_with_a_deprecation():
    class Wraps(Selector):
        def __init__(self, inner):
            super().__init__(inner.num_examples, inner.batch_size)
            self.online, self.uses_feedback = inner.online, inner.uses_feedback

    with pytest.warns(DeprecationWarning, match=r"capabilities\(\)"):
        sel = Wraps(batchsel.LossRankSelector(N, B))
    assert sel.online and sel.capabilities().uses_feedback and SelectorProfile(sel).lag_matters
    assert not Wraps.online  # the class's own declaration is untouched


@pytest.mark.parametrize(
    "declaration, error, match",
    [
        ({"uses_feedbak": True}, TypeError, "unknown capabilities"),
        ({"feedback_fields": "losses"}, TypeError, "tuple of names"),
        ({"feedback_fields": ("loss",)}, ValueError, "feedback_fields"),
        ({"partitions": ("metis",)}, ValueError, "partitions"),
        ({"online": 1}, TypeError, "online must be True or False"),
        ({"default_prefetch": -1}, ValueError, "default_prefetch"),
    ],
)
def test_a_bad_declaration_is_refused_where_the_class_is_made(declaration, error, match):
    with pytest.raises(error, match=match):
        type("Bad", (RandomSelector,), {}, **declaration)


def test_a_capability_declared_twice_is_refused():
    with pytest.raises(TypeError, match="twice"):

        class Twice(RandomSelector, online=True):
            online = True


def test_capabilities_are_frozen_and_replaced():
    caps = RandomSelector(N, B).capabilities()
    with pytest.raises(dataclasses.FrozenInstanceError):
        caps.online = True  # type: ignore[misc]
    assert dataclasses.replace(caps, online=True).online and not RandomSelector(N, B).online
