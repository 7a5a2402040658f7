"""Utility-versus-cost policy: price mode and deadline mode on synthetic throughput."""

from __future__ import annotations

import pytest

from submarine_elastic.policy import PolicyConfigError, PolicyEngine, UtilityPolicy

from ._policy_support import job, run_single_job, snapshot

# marginal throughput 100, 90, 70, 40 samples/s; at 1e-3 per sample: worth 360, 324, 252, 144 per hour
KNEE = {1: 100.0, 2: 190.0, 3: 260.0, 4: 300.0, 5: 310.0, 6: 315.0}


def engine(policy: UtilityPolicy) -> PolicyEngine:
    return PolicyEngine(policy, cooldown_s=0, reversal_cooldown_s=0)


def test_cheap_workers_on_linear_scaling_grow_to_the_maximum() -> None:
    policy = UtilityPolicy(price_per_worker_hour=100.0, value_per_sample=1e-3)
    assert run_single_job(engine(policy), job(current=1, max_workers=5), lambda k: 100.0 * k, rounds=6) == [
        2,
        3,
        4,
        5,
        5,
        5,
    ]


def test_workers_dearer_than_their_output_are_not_added() -> None:
    policy = UtilityPolicy(price_per_worker_hour=500.0, value_per_sample=1e-3)
    assert run_single_job(engine(policy), job(current=1, max_workers=5), lambda k: 100.0 * k, rounds=3) == [1, 1, 1]


def test_stops_where_the_marginal_worker_is_no_longer_worth_its_price() -> None:
    # price 200 (+10 %): the 4th worker is estimated at 252/h and added, measured at 144/h and given back
    policy = UtilityPolicy(price_per_worker_hour=200.0, value_per_sample=1e-3)
    sizes = run_single_job(engine(policy), job(current=1, max_workers=6), KNEE.__getitem__, rounds=7)
    assert sizes == [2, 3, 4, 3, 3, 3, 3]


def test_reasons_name_the_money() -> None:
    policy = UtilityPolicy(price_per_worker_hour=200.0, value_per_sample=1e-3)
    view = job(current=4, throughput={3: 260.0, 4: 300.0})
    decision = policy.propose(view, snapshot(view))
    assert decision is not None
    assert (decision.target_workers, decision.reason) == (
        3,
        "the workers above 3 add 144/h each, less than their price 200/h",
    )


def test_deadline_grows_until_the_job_is_on_track() -> None:
    # 3.6e8 samples in about 1e6 s need 360 samples/s; with the 10 % margin, 4 workers of 100 samples/s
    policy = UtilityPolicy(deadline_s=1e6)
    start = job(current=1, max_workers=8, remaining=3.6e8)
    assert run_single_job(engine(policy), start, lambda k: 100.0 * k, rounds=6) == [2, 3, 4, 4, 4, 4]


def test_deadline_gives_workers_back_when_fewer_suffice() -> None:
    policy = UtilityPolicy(deadline_s=100.0, hysteresis=0.1)
    # 9 000 samples in 50 s: 180 samples/s; 2 workers make 200 < 180 * 1.2 = 216, so 3 (300) is the fewest
    view = job(current=6, remaining=9_000.0, submitted_at=0.0, throughput={n: 100.0 * n for n in range(1, 7)})
    decision = policy.propose(view, snapshot(view, now=50.0))
    assert decision is not None
    assert (decision.target_workers, decision.reason) == (3, "3 workers make the 180 samples/s its deadline needs")


def test_past_the_deadline_the_job_gets_its_maximum() -> None:
    view = job(current=2, max_workers=5, remaining=1.0, submitted_at=0.0, throughput={2: 10.0})
    decision = UtilityPolicy(deadline_s=10.0).propose(view, snapshot(view, now=11.0))
    assert decision is not None and decision.target_workers == 5


def test_deadline_without_remaining_samples_holds() -> None:
    view = job(current=2, throughput={2: 10.0})
    decision = UtilityPolicy(deadline_s=10.0).propose(view, snapshot(view, now=1.0))
    assert decision is not None
    assert (decision.target_workers, decision.reason) == (
        2,
        "deadline mode needs remaining_samples, which the job does not report",
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "needs price_per_worker_hour and value_per_sample, or deadline_s"),
        ({"price_per_worker_hour": 1.0}, "needs price_per_worker_hour and value_per_sample, or deadline_s"),
        ({"deadline_s": 10.0, "price_per_worker_hour": 1.0}, "give deadline_s or price_per_worker_hour"),
        ({"deadline_s": 0}, "deadline_s must be > 0, got 0"),
        ({"price_per_worker_hour": -1.0, "value_per_sample": 1.0}, "price_per_worker_hour must be >= 0, got -1.0"),
        ({"price_per_worker_hour": 1.0, "value_per_sample": 0}, "value_per_sample must be > 0, got 0"),
        ({"deadline_s": 5.0, "hysteresis": 1.0}, "hysteresis must be < 1, got 1.0"),
        ({"deadline_s": 5.0, "min_steps": 0}, "min_steps must be an int >= 1, got 0"),
    ],
)
def test_rejects_bad_parameters(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(PolicyConfigError, match=message):
        UtilityPolicy(**kwargs)  # type: ignore[arg-type]
