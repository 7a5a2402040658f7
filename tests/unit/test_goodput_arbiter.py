"""The goodput arbiter's weighting by remaining time, its preemption of jobs in their cooldown for a
waiting job, and a fresh job's first size."""

from __future__ import annotations

from dataclasses import replace

import pytest

from submarine_elastic.policy import GoodputArbiter, GoodputPolicy, JobView, PolicyConfigError, PolicyEngine, Request
from submarine_elastic.policy.goodput import MAX_REMAINING_EXPONENT, REMAINING_EXPONENT

from .test_policy_goodput import FAST, allocate, goodput_job, snap


def remaining(view: JobView, samples: float) -> JobView:
    return replace(view, metrics=replace(view.metrics, remaining_samples=samples))


def test_a_job_near_its_end_gets_more_workers_than_an_alike_job_far_from_it() -> None:
    near = remaining(goodput_job("job-a", current=8, measured=FAST, noise=1e5), 1e5)
    far = remaining(goodput_job("job-b", current=8, measured=FAST, noise=1e5), 1e9)
    counts = allocate(GoodputArbiter(resize_cost_s=0, hysteresis=0), snap(near, far))
    assert REMAINING_EXPONENT > 0
    assert counts["job-a"][0] > 8 > counts["job-b"][0]
    # without the weighting (or without remaining work reported) the power mean shares them evenly
    plain = allocate(GoodputArbiter(resize_cost_s=0, hysteresis=0, remaining_exponent=0), snap(near, far))
    assert plain.get("job-a", (8, None))[0] == plain.get("job-b", (8, None))[0] == 8
    unknown = (goodput_job(j, current=8, measured=FAST, noise=1e5) for j in ("job-a", "job-b"))
    even = allocate(GoodputArbiter(resize_cost_s=0, hysteresis=0), snap(*unknown))
    assert even.get("job-a", (8, None))[0] == even.get("job-b", (8, None))[0] == 8


@pytest.mark.parametrize("bad", [-0.5, MAX_REMAINING_EXPONENT + 0.5, float("nan")])
def test_the_remaining_exponent_is_bounded(bad: float) -> None:
    with pytest.raises(PolicyConfigError, match="remaining_exponent"):
        GoodputArbiter(remaining_exponent=bad)
    GoodputArbiter(remaining_exponent=MAX_REMAINING_EXPONENT)  # the bound itself is accepted


def test_a_waiting_job_takes_workers_from_a_job_in_its_cooldown() -> None:
    running = goodput_job("job-a", current=16, measured=FAST, noise=1e5)
    waiting = goodput_job("job-b", current=0, measured=())
    s = snap(running, waiting)
    arbiter = GoodputArbiter()

    def counts(preemptible: bool) -> dict[str, int]:
        requests = [
            Request(running, 16, settled=True, reason="cooldown", preemptible=preemptible),
            Request(waiting, 16, settled=False, reason="wish"),
        ]
        return {a.job_id: a.workers for a in arbiter.allocate(s, requests)}

    taken = counts(True)
    assert taken["job-b"] >= 1 and taken["job-a"] == 16 - taken["job-b"]
    # a job already shrunk within its cooldown gives nothing, and a settled job never grows
    kept = counts(False)
    assert kept.get("job-b", 0) == 0 and kept.get("job-a", 16) == 16


def test_the_engine_starts_a_waiting_job_beside_a_job_in_its_cooldown() -> None:
    running = replace(goodput_job("job-a", current=16, measured=FAST, noise=1e5), last_resize_at=9990.0)
    waiting = goodput_job("job-b", current=0, measured=(), submitted_at=9995.0)
    engine = PolicyEngine(GoodputPolicy(), GoodputArbiter(), cooldown_s=600)
    decisions = {d.job_id: d.target_workers for d in engine.decide(snap(running, waiting))}
    assert engine.last_refusals == ()
    assert decisions["job-b"] >= 1 and decisions["job-a"] == 16 - decisions["job-b"]


def test_before_its_first_measurement_a_job_gets_the_count_it_was_submitted_with() -> None:
    fresh = replace(goodput_job(current=0, measured=()), requested_workers=1)
    counts = allocate(GoodputArbiter(), snap(fresh, capacity=64, slots=4))
    assert counts["job-a"][0] == 1  # not a whole node: a one-worker job may be slower on four
    wide = replace(goodput_job(current=0, measured=()), requested_workers=12)
    assert allocate(GoodputArbiter(), snap(wide, capacity=64, slots=4))["job-a"][0] == 12


def test_a_resize_is_charged_against_the_time_the_job_has_left() -> None:
    arbiter = GoodputArbiter(resize_cost_s=30, hysteresis=0, remaining_exponent=0)

    def counts(samples: float) -> dict[str, int]:
        a = remaining(goodput_job("job-a", current=12, submitted_at=0.0, measured=FAST, noise=1e5), samples)
        b = remaining(goodput_job("job-b", current=4, submitted_at=0.0, measured=FAST, noise=1e5), samples)
        return {job_id: workers for job_id, (workers, _) in allocate(arbiter, snap(a, b)).items()}

    assert counts(1e9)["job-a"] < 12  # hours left: 30 s is worth moving to an even split
    # a minute or two left: the same 30 s is most of it, and both keep what they hold
    assert counts(2e5).get("job-a", 12) == 12 and counts(2e5).get("job-b", 4) == 4
