"""Training-side elastic helpers: exactly-once data across resizes, batch rules, momentum ramp."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tf_hooks.elastic import data, rules


def test_permutation_is_the_same_everywhere_and_differs_per_epoch():
    a, b = data.epoch_permutation(100, 3, seed=7), data.epoch_permutation(100, 3, seed=7)
    np.testing.assert_array_equal(a, b)
    assert sorted(a.tolist()) == list(range(100))
    assert not np.array_equal(a, data.epoch_permutation(100, 4, seed=7))


@settings(max_examples=200, deadline=None)
@given(
    samples=st.integers(1, 300),
    batch=st.integers(1, 64),
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=40),
)
def test_any_sequence_of_ring_sizes_covers_the_epoch_exactly_once(samples: int, batch: int, sizes: list[int]):
    perm = data.epoch_permutation(samples, 0)
    seen: list[int] = []
    cursor, i = 0, 0
    while cursor < samples:
        size = sizes[i % len(sizes)]
        for rank in range(size):
            seen.extend(data.shard(perm, cursor, batch, rank, size).tolist())
        cursor += data.step_length(samples, cursor, batch)
        i += 1
    assert sorted(seen) == list(range(samples))


def test_shards_differ_by_at_most_one():
    perm = data.epoch_permutation(64, 0)
    lengths = [len(data.shard(perm, 0, 10, r, 3)) for r in range(3)]
    assert lengths == [4, 3, 3]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((-1, 4, 0, 1), "cursor -1"),
        ((64, 4, 0, 1), "cursor 64"),
        ((0, 0, 0, 1), "global_batch"),
        ((0, 4, 2, 2), "rank 2"),
    ],
)
def test_bad_shard_arguments_are_named(args: tuple[int, int, int, int], message: str):
    with pytest.raises(ValueError, match=message):
        data.shard(data.epoch_permutation(64, 0), *args)


def test_fixed_global_batch_splits_and_keeps_the_learning_rate():
    rule = rules.BatchRule("fixed_global", 64, 0.1)
    assert [rule.local_batch(3, r) for r in range(3)] == [22, 21, 21]
    assert rule.global_batch(3) == 64
    assert rule.target_lr(1) == rule.target_lr(4) == 0.1


def test_fixed_local_batch_scales_the_learning_rate():
    linear = rules.BatchRule("fixed_local", 32, 0.1, base_workers=2, lr_scaling="linear")
    root = rules.BatchRule("fixed_local", 32, 0.1, base_workers=2, lr_scaling="sqrt")
    assert linear.global_batch(4) == 128
    assert linear.target_lr(4) == pytest.approx(0.2)
    assert root.target_lr(8) == pytest.approx(0.2)


def test_momentum_ramp_follows_dynamic_minibatch_sgd():
    assert [rules.momentum_gamma(t, 10, 3.0, 8) for t in (9, 10, 14, 18, 30)] == [1.0, 1.0, 2.0, 3.0, 3.0]
    rule = rules.BatchRule("fixed_local", 32, 0.1, lr_scaling="linear", ramp_steps=8)
    assert rule.lr_at(100, 100, 0.1, 2) == pytest.approx(0.1)
    assert rule.lr_at(104, 100, 0.1, 2) == pytest.approx(0.15)
    assert rule.lr_at(120, 100, 0.1, 2) == pytest.approx(0.2)
    assert rule.lr_at(100, 100, 0.0, 2) == pytest.approx(0.2)  # the ring's first size: no ramp


def test_a_resize_in_the_middle_of_a_ramp_goes_on_from_the_current_rate():
    rule = rules.BatchRule("fixed_local", 32, 0.1, lr_scaling="linear", ramp_steps=8)
    before = rule.lr_at(104, 100, 0.1, 2)  # half way from 0.1 to 0.2
    # 2 -> 4 workers at step 104: the new ramp starts where the rate is, not at 2 workers' 0.2
    assert rule.lr_at(104, 104, before, 4) == pytest.approx(before)
    assert rule.lr_at(108, 104, before, 4) == pytest.approx((before + 0.4) / 2)
    assert rule.lr_at(112, 104, before, 4) == pytest.approx(0.4)
    rates = [rule.lr_at(t, 100, 0.1, 2) for t in range(100, 105)] + [
        rule.lr_at(t, 104, before, 4) for t in range(105, 113)
    ]
    assert all(b - a <= (0.4 - before) / 8 + 1e-12 for a, b in zip(rates, rates[1:], strict=False)), rates


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"mode": "both"}, "mode"),
        ({"batch": 0}, "batch"),
        ({"base_lr": 0.0}, "base_lr"),
        ({"lr_scaling": "cubic"}, "lr_scaling"),
        ({"base_workers": 0}, "base_workers"),
    ],
)
def test_bad_rules_name_the_field(kwargs: dict, field: str):
    args = {"mode": "fixed_global", "batch": 8, "base_lr": 0.1, **kwargs}
    with pytest.raises(ValueError, match=field):
        rules.BatchRule(**args)
