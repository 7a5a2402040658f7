"""Goodput arbiter: workers go where throughput x statistical efficiency gains the most."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from submarine_elastic.policy import Decision, GoodputArbiter, GreedyPolicy, PolicyConfigError, PolicyEngine
from submarine_elastic.policy.goodput import estimated_throughput, statistical_efficiency

from ._policy_support import job, snapshot

LINEAR = {1: 100.0, 2: 200.0}
SATURATED = {1: 100.0, 2: 105.0, 3: 106.0, 4: 106.5}


def engine() -> PolicyEngine:
    return PolicyEngine(GreedyPolicy(), GoodputArbiter(), cooldown_s=60)


def targets(decisions: Sequence[Decision]) -> dict[str, int]:
    return {d.job_id: d.target_workers for d in decisions}


def test_free_workers_go_to_the_job_that_scales() -> None:
    a = job("job-a", current=2, throughput=LINEAR)
    b = job("job-b", min_workers=2, current=2, throughput={1: 100.0, 2: 110.0})
    decisions = engine().decide(snapshot(a, b, capacity=8))
    assert targets(decisions) == {"job-a": 6}
    assert decisions[0].reason == "goodput: 2 -> 6 of the 8 it wants; worker 6 adds 1.00 speedup"


def test_statistical_efficiency_decides_between_equally_fast_jobs() -> None:
    # same throughput; job-b's small gradient noise scale makes a larger batch worth little
    a = job("job-a", min_workers=2, current=2, throughput=LINEAR, noise=1e5, batch_size=64)
    b = job("job-b", min_workers=2, current=2, throughput=LINEAR, noise=32.0, batch_size=64)
    assert targets(engine().decide(snapshot(a, b, capacity=5))) == {"job-a": 3}
    assert targets(engine().decide(snapshot(b, a, capacity=5))) == {"job-a": 3}


def test_a_worker_moves_to_the_job_that_gains_more_than_the_other_loses() -> None:
    a = job("job-a", current=3, throughput=SATURATED)
    b = job("job-b", current=1, throughput={1: 100.0})
    assert targets(engine().decide(snapshot(a, b, capacity=4))) == {"job-a": 1, "job-b": 3}
    # the same move with the statistical efficiency: job-b at 2 workers keeps 2/3 of its goodput per sample
    a = job("job-a", current=2, throughput=LINEAR, noise=1e5, batch_size=64)
    b = job("job-b", current=2, throughput=LINEAR, noise=32.0, batch_size=64)
    assert targets(engine().decide(snapshot(a, b, capacity=4))) == {"job-a": 3, "job-b": 1}


def test_the_swap_margin_keeps_near_equal_jobs_still() -> None:
    a = job("job-a", current=2, throughput=LINEAR)
    b = job("job-b", current=2, throughput={1: 100.0, 2: 195.0})
    assert engine().decide(snapshot(a, b, capacity=4)) == []


def test_the_arrival_takes_from_the_job_that_loses_least() -> None:
    a = job("job-a", current=4, throughput={1: 100.0, 2: 200.0, 3: 300.0, 4: 400.0})
    c = job("job-c", current=4, throughput=SATURATED)
    b = job("job-b", min_workers=2, current=0, submitted_at=10.0)
    e = engine()
    assert targets(e.decide(snapshot(a, c, b, capacity=8))) == {"job-c": 1, "job-b": 3}
    assert e.last_refusals == ()


def test_no_worker_for_a_gain_below_min_gain() -> None:
    flat = job("job-a", current=2, throughput={1: 100.0, 2: 102.0})
    assert engine().decide(snapshot(flat, capacity=8)) == []
    e = PolicyEngine(GreedyPolicy(), GoodputArbiter(min_gain=0.0), cooldown_s=60)
    assert targets(e.decide(snapshot(flat, capacity=8))) == {"job-a": 8}


def test_statistical_efficiency_formula() -> None:
    view = job(current=2, noise=96.0, batch_size=64)  # local batch 32
    assert statistical_efficiency(view, 1) == 1.0
    assert statistical_efficiency(view, 4) == pytest.approx((96 + 32) / (96 + 128))
    assert statistical_efficiency(job(current=2), 4) == 1.0


def test_throughput_estimates() -> None:
    view = job(throughput={2: 200.0, 4: 300.0})
    assert estimated_throughput(view, 3) == 250.0  # interpolated
    assert estimated_throughput(view, 1) == 100.0  # scaled down from the smallest
    assert estimated_throughput(view, 6) == 400.0  # last marginal, 50 per worker
    assert estimated_throughput(job(), 3) == 3.0  # nothing measured: linear
    assert estimated_throughput(job(throughput={2: 200.0, 3: 150.0}), 5) == 50.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_gain": -1}, "min_gain must be >= 0.0, got -1"),
        ({"swap_margin": "x"}, "swap_margin must be a finite number"),
    ],
)
def test_rejects_bad_parameters(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(PolicyConfigError, match=message):
        GoodputArbiter(**kwargs)  # type: ignore[arg-type]
