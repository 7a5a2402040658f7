"""Scaling-efficiency policy on synthetic throughput curves."""

from __future__ import annotations

from typing import Any

import pytest

from submarine_elastic.policy import PolicyConfigError, PolicyEngine, ScalingEfficiencyPolicy

from ._policy_support import job, run_single_job, snapshot

KNEE = {1: 100.0, 2: 190.0, 3: 260.0, 4: 300.0, 5: 320.0, 6: 330.0}


def engine(**kwargs: Any) -> PolicyEngine:
    return PolicyEngine(ScalingEfficiencyPolicy(probe_every_steps=50, **kwargs), cooldown_s=0, reversal_cooldown_s=0)


def test_linear_scaling_keeps_growing_to_the_maximum() -> None:
    sizes = run_single_job(engine(), job(current=1, max_workers=6, throughput={}), lambda k: 100.0 * k, rounds=8)
    assert sizes == [2, 3, 4, 5, 6, 6, 6, 6]


def test_saturating_throughput_stops_at_the_knee() -> None:
    # s(1->2) = 0.90, s(2->3) = 0.74, s(3->4) = 0.46 < S = 0.7: the probe to 4 is given back
    sizes = run_single_job(engine(threshold=0.7), job(current=1, max_workers=6), KNEE.__getitem__, rounds=8)
    assert sizes == [2, 3, 4, 3, 3, 3, 3, 3]


def test_a_job_that_does_not_scale_stays_at_one() -> None:
    sizes = run_single_job(engine(), job(current=1, max_workers=6), lambda k: 100.0, rounds=5)
    assert sizes == [2, 1, 1, 1, 1]


def test_probes_by_d_workers_every_k_steps() -> None:
    policy = ScalingEfficiencyPolicy(probe_workers=2, probe_every_steps=100)
    early = job(current=2, max_workers=8, throughput={2: 200.0}, steps=99)
    decision = policy.propose(early, snapshot(early))
    assert decision is not None and (decision.target_workers, decision.reason) == (
        2,
        "measuring throughput at 2 workers",
    )
    ready = job(current=2, max_workers=8, throughput={2: 200.0}, steps=100)
    decision = policy.propose(ready, snapshot(ready))
    assert decision is not None
    assert (decision.target_workers, decision.reason) == (4, "probing 2 -> 4 workers after 100 steps at 2")


def test_the_probe_is_capped_at_the_maximum() -> None:
    view = job(current=3, max_workers=4, throughput={3: 300.0})
    decision = ScalingEfficiencyPolicy(probe_workers=4).propose(view, snapshot(view))
    assert decision is not None and decision.target_workers == 4


def test_efficiency_exactly_at_the_threshold_is_not_enough() -> None:
    # s(2->3) = ((240 - 200) / 1) / (200 / 2) = 0.4
    view = job(current=3, throughput={2: 200.0, 3: 240.0})
    decision = ScalingEfficiencyPolicy(threshold=0.4).propose(view, snapshot(view))
    assert decision is not None
    assert (decision.target_workers, decision.reason) == (2, "scaling efficiency s=0.40 from 2 to 3 is not above S=0.4")


def test_growing_back_into_a_measured_size_needs_the_hysteresis_margin() -> None:
    # s(2->3) = 0.72: above S = 0.7 but not above S + 0.05
    view = job(current=2, throughput={1: 100.0, 2: 200.0, 3: 272.0})
    decision = ScalingEfficiencyPolicy(threshold=0.7, hysteresis=0.05).propose(view, snapshot(view))
    assert decision is not None and decision.target_workers == 2
    decision = ScalingEfficiencyPolicy(threshold=0.7, hysteresis=0.01).propose(view, snapshot(view))
    assert decision is not None and decision.target_workers == 3


def test_no_opinion_while_waiting_or_resizing() -> None:
    policy = ScalingEfficiencyPolicy()
    for view in (job(current=0), job(current=2, pending=1, throughput={2: 1.0})):
        assert policy.propose(view, snapshot(view)) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold": 1.5}, "threshold must be <= 1.0, got 1.5"),
        ({"threshold": -0.1}, "threshold must be >= 0.0, got -0.1"),
        ({"probe_workers": 0}, "probe_workers must be an int >= 1, got 0"),
        ({"probe_every_steps": 2.5}, "probe_every_steps must be an int >= 1, got 2.5"),
        ({"hysteresis": float("inf")}, "hysteresis must be a finite number, got inf"),
    ],
)
def test_rejects_bad_parameters(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(PolicyConfigError, match=message):
        ScalingEfficiencyPolicy(**kwargs)  # type: ignore[arg-type]
