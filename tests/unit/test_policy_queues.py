"""Queues in the policy engine: the slots split by guarantee and maximum, one arbitration per queue."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from submarine_elastic.policy import (
    FairShareArbiter,
    GoodputArbiter,
    GreedyPolicy,
    InvalidSnapshotError,
    JobView,
    PolicyEngine,
    QueueShare,
    Snapshot,
    StaticPolicy,
)
from submarine_elastic.policy.queues import split_slots

from ._policy_support import job, random_snapshots

PROD = QueueShare("prod", 0.6, 1.0)
RESEARCH = QueueShare("research", 0.4, 0.5)
QUEUES = (PROD, RESEARCH)


def queued(view: JobView, queue: str) -> JobView:
    return replace(view, queue=queue)


def decide(
    engine: PolicyEngine,
    *jobs: JobView,
    capacity: int = 10,
    now: float = 1000.0,
    queues: tuple[QueueShare, ...] = QUEUES,
) -> dict[str, int]:
    """Every job's worker count after one round (those without a decision keep what they hold)."""
    free = max(0, capacity - sum(j.holding for j in jobs))
    snap = Snapshot(now=now, capacity=capacity, free=free, jobs=jobs, queues=queues)
    counts = {j.job_id: j.holding for j in jobs}
    counts.update({d.job_id: d.target_workers for d in engine.decide(snap)})
    return counts


def test_split_gives_each_queue_its_guarantee_when_both_ask_for_more() -> None:
    assert split_slots(10, QUEUES, {"prod": 10, "research": 10}) == {"prod": 6, "research": 4}


def test_split_lends_an_idle_guarantee_up_to_the_borrowers_maximum() -> None:
    assert split_slots(10, QUEUES, {"prod": 0, "research": 10}) == {"prod": 0, "research": 5}
    assert split_slots(10, QUEUES, {"prod": 10, "research": 1}) == {"prod": 9, "research": 1}


def test_split_rounds_down_and_gives_the_rounding_to_who_wants_it() -> None:
    thirds = (QueueShare("a", 1 / 3), QueueShare("b", 1 / 3), QueueShare("c", 1 / 3))
    assert split_slots(10, thirds, {"a": 10, "b": 10, "c": 10}) == {"a": 4, "b": 3, "c": 3}
    assert split_slots(10, thirds, {"a": 1, "b": 1, "c": 1}) == {"a": 1, "b": 1, "c": 1}


@st.composite
def split_inputs(draw: st.DrawFn) -> tuple[int, tuple[QueueShare, ...], dict[str, int]]:
    """Slots, queues whose whole-percent guarantees add up to 100 with maxima at or above them, and demands."""
    cuts = sorted(draw(st.lists(st.integers(0, 100), min_size=0, max_size=3)))
    guarantees = [b - a for a, b in zip([0, *cuts], [*cuts, 100], strict=True)]
    queues = tuple(QueueShare(f"q{i}", g / 100, draw(st.integers(g, 100)) / 100) for i, g in enumerate(guarantees))
    demand = {q.name: draw(st.integers(0, 80)) for q in queues}
    return draw(st.integers(0, 64)), queues, demand


@given(split_inputs())
def test_every_split_honours_guarantees_maxima_and_the_total(case: tuple[int, tuple[QueueShare, ...], dict]) -> None:
    available, queues, demand = case
    got = split_slots(available, queues, demand)
    assert sum(got.values()) <= available
    for q in queues:
        guaranteed, maximum = q.slots(available)
        assert min(guaranteed, demand[q.name]) <= got[q.name] <= min(maximum, max(demand[q.name], 0))
    wanting = [q for q in queues if got[q.name] < min(q.slots(available)[1], demand[q.name])]
    assert not wanting or sum(got.values()) == available  # nothing idle while a queue wants more and may have it


@pytest.mark.parametrize("arbiter", [FairShareArbiter, GoodputArbiter])
def test_a_queue_alone_grows_no_further_than_its_maximum(arbiter: type) -> None:
    engine = PolicyEngine(GreedyPolicy(), arbiter(), cooldown_s=0)
    linear = {k: 10.0 * k for k in range(1, 11)}
    counts = decide(engine, queued(job("r", current=1, max_workers=10, throughput=linear), "research"))
    assert counts["r"] == 5  # research may hold half of 10 slots, though 5 more are idle


def test_a_queue_borrows_idle_guarantee_and_gives_it_back_when_its_owner_asks() -> None:
    engine = PolicyEngine(GreedyPolicy(), FairShareArbiter(), cooldown_s=0)
    p = queued(job("p", current=1, max_workers=10, submitted_at=0.0), "prod")
    counts = decide(engine, p)
    assert counts == {"p": 10}  # research idle: prod takes its 4 as well
    p = replace(p, current_workers=10)
    r = queued(job("r", current=0, max_workers=10, submitted_at=500.0), "research")
    counts = decide(engine, p, r, now=2000.0)
    assert counts == {"p": 6, "r": 4}  # research's guarantee back at once


def test_the_guarantee_is_reclaimed_from_a_job_in_its_cooldown() -> None:
    engine = PolicyEngine(GreedyPolicy(), FairShareArbiter(), cooldown_s=600)
    r = queued(job("r", current=5, max_workers=10, last_resize_at=990.0), "research")
    p = queued(job("p", current=0, min_workers=6, max_workers=6, elastic=False, submitted_at=995.0), "prod")
    # research holds 5 (borrowed 1 of prod's idle 6); prod's fixed job of 6 arrives
    counts = decide(engine, r, p)
    assert counts == {"r": 4, "p": 6}


def test_a_queue_over_its_slots_with_nothing_to_shrink_keeps_the_other_from_starting() -> None:
    engine = PolicyEngine(StaticPolicy(), FairShareArbiter(), cooldown_s=0)
    r = queued(job("r", current=5, min_workers=5, max_workers=5, elastic=False), "research")
    p = queued(job("p", current=0, min_workers=6, max_workers=6, elastic=False, submitted_at=5.0), "prod")
    counts = decide(engine, r, p)
    assert counts == {"r": 5, "p": 0}  # 11 would not fit 10: the arrival waits for the fixed job to end


def test_slots_the_owners_arrival_cannot_use_stay_with_the_borrower() -> None:
    engine = PolicyEngine(GreedyPolicy(), FairShareArbiter(), cooldown_s=0)
    r = queued(job("r", current=10, max_workers=10), "research")
    big = queued(job("p", current=0, min_workers=8, max_workers=8, elastic=False, submitted_at=5.0), "prod")
    queues = (PROD, QueueShare("research", 0.4, 1.0))
    # prod's guarantee is 6 and research wants all 10: the job of 8 cannot start, so research keeps its 10
    assert decide(engine, r, big, queues=queues) == {"r": 10, "p": 0}
    small = replace(big, min_workers=6, max_workers=6)
    assert decide(engine, r, small, queues=queues) == {"r": 4, "p": 6}


def test_one_queue_decides_exactly_as_no_queue() -> None:
    for snap in random_snapshots(seed=7):
        one = replace(snap, queues=(QueueShare("default", 1.0, 1.0),))
        plain, queued_engine = (
            PolicyEngine(GreedyPolicy(), GoodputArbiter()),
            PolicyEngine(GreedyPolicy(), GoodputArbiter()),
        )
        assert queued_engine.decide(one) == plain.decide(snap)


def test_a_job_in_an_unknown_queue_is_refused_naming_it() -> None:
    with pytest.raises(InvalidSnapshotError, match="queue 'dev' is not one of the queues"):
        Snapshot(now=0.0, capacity=4, free=4, jobs=(queued(job("a"), "dev"),), queues=QUEUES)


def test_guarantees_over_the_cluster_are_refused() -> None:
    with pytest.raises(InvalidSnapshotError, match="add up to 1.2"):
        Snapshot(now=0.0, capacity=4, free=4, queues=(QueueShare("a", 0.6), QueueShare("b", 0.6)))


def test_each_queue_keeps_its_own_arbiter_state_across_a_restart() -> None:
    engine = PolicyEngine(GreedyPolicy(), GoodputArbiter(), cooldown_s=0)
    decide(engine, queued(job("p", throughput={1: 10.0}), "prod"), queued(job("r", throughput={1: 5.0}), "research"))
    state = engine.state_dict()
    assert set(state["queue_arbiters"]) == {"prod", "research"}
    again = PolicyEngine(GreedyPolicy(), GoodputArbiter(), cooldown_s=0)
    again.load_state_dict(state)
    assert again.state_dict() == state
