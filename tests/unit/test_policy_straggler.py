"""Straggler policy: a persistently slow worker is named for replacement; noise and spikes are not."""

from __future__ import annotations

import pytest

from submarine_elastic.policy import PolicyConfigError, PolicyEngine, StragglerPolicy

from ._policy_support import job, snapshot

NAMES = ("worker-0", "worker-1", "worker-2", "worker-3")


def times(**slow: list[float]) -> dict[str, list[float]]:
    base = {name: [1.0, 1.02, 0.98, 1.01, 0.99, 1.0, 1.03, 0.97, 1.0, 1.01] for name in NAMES}
    base.update({k.replace("_", "-"): v for k, v in slow.items()})
    return base


def test_a_worker_three_times_slower_is_named() -> None:
    view = job(current=4, step_times=times(worker_2=[3.0] * 10))
    decision = StragglerPolicy().propose(view, snapshot(view))
    assert decision is not None
    assert (decision.target_workers, decision.replace) == (4, ("worker-2",))
    assert decision.reason == "worker-2 steps in 3s, 3.0x the median 1s of 4 workers: replace worker-2"


def test_one_slow_step_is_not_a_straggler() -> None:
    spike = [1.0, 1.0, 9.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    view = job(current=4, step_times=times(worker_1=spike))
    assert StragglerPolicy().propose(view, snapshot(view)) is None


def test_ordinary_noise_replaces_nobody() -> None:
    noisy = {name: [1.0 + 0.1 * ((i * 7 + n) % 5 - 2) for i in range(10)] for n, name in enumerate(NAMES)}
    view = job(current=4, step_times=noisy)
    assert StragglerPolicy().propose(view, snapshot(view)) is None


def test_slow_but_not_beyond_min_ratio_is_kept() -> None:
    view = job(current=4, step_times=times(worker_3=[1.4] * 10))
    assert StragglerPolicy(min_ratio=1.5).propose(view, snapshot(view)) is None
    decision = StragglerPolicy(min_ratio=1.3).propose(view, snapshot(view))
    assert decision is not None and decision.replace == ("worker-3",)


def test_the_slowest_go_first_up_to_max_replacements() -> None:
    many = {f"worker-{i}": [1.0] * 10 for i in range(8)}
    many["worker-5"] = [4.0] * 10
    many["worker-6"] = [2.5] * 10
    view = job(current=8, step_times=many)
    decision = StragglerPolicy(max_replacements=2).propose(view, snapshot(view, capacity=8))
    assert decision is not None and decision.replace == ("worker-5", "worker-6")
    decision = StragglerPolicy().propose(view, snapshot(view, capacity=8))
    assert decision is not None and decision.replace == ("worker-5",)


def test_needs_enough_peers_and_a_full_window() -> None:
    two = {"worker-0": [1.0] * 10, "worker-1": [3.0] * 10}
    view = job(current=2, step_times=two)
    assert StragglerPolicy().propose(view, snapshot(view)) is None
    short = times(worker_2=[3.0] * 9)
    view = job(current=4, step_times=short)
    assert StragglerPolicy().propose(view, snapshot(view)) is None  # worker-2 has 9 of 10 step times


def test_stale_reports_of_gone_workers_are_ignored() -> None:
    view = job(
        current=4, step_times=times(worker_2=[3.0] * 10), instances=("worker-0", "worker-1", "worker-3", "worker-4")
    )
    assert StragglerPolicy().propose(view, snapshot(view)) is None


def test_through_the_engine_the_straggler_is_replaced_without_resizing() -> None:
    engine = PolicyEngine(StragglerPolicy(), cooldown_s=60)
    view = job(current=4, step_times=times(worker_2=[3.0] * 10), instances=NAMES, last_resize_at=0.0)
    (decision,) = engine.decide(snapshot(view, now=100.0))
    assert (decision.target_workers, decision.replace) == (4, ("worker-2",))
    assert engine.last_refusals == ()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"window": 0}, "window must be an int >= 1, got 0"),
        ({"threshold": 0}, "threshold must be > 0.0, got 0"),
        ({"min_ratio": 0.5}, "min_ratio must be >= 1.0, got 0.5"),
        ({"min_peers": 2}, "min_peers must be an int >= 3, got 2"),
        ({"max_replacements": 0}, "max_replacements must be an int >= 1, got 0"),
        ({"mad_floor": 0}, "mad_floor must be > 0.0, got 0"),
    ],
)
def test_rejects_bad_parameters(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(PolicyConfigError, match=message):
        StragglerPolicy(**kwargs)  # type: ignore[arg-type]
