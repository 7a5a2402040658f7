"""Fair-share arbiter: arrivals start without waiting, capacity freed by departures goes back."""

from __future__ import annotations

import random
from collections.abc import Sequence

from submarine_elastic.policy import (
    Allocation,
    Decision,
    FairShareArbiter,
    GreedyPolicy,
    PolicyEngine,
    Request,
    Snapshot,
    StaticPolicy,
)
from submarine_elastic.policy._alloc import admit, allocations, free_slots, initial_shares

from ._policy_support import job, snapshot


def engine(cooldown_s: float = 60.0) -> PolicyEngine:
    return PolicyEngine(GreedyPolicy(), FairShareArbiter(), cooldown_s=cooldown_s)


def targets(decisions: Sequence[Decision]) -> dict[str, int]:
    return {d.job_id: d.target_workers for d in decisions}


def test_an_arrival_to_a_full_cluster_takes_workers_from_the_elastic_job() -> None:
    a = job("job-a", current=8, max_workers=8, submitted_at=0.0, last_resize_at=0.0)
    b = job("job-b", min_workers=2, current=0, max_workers=8, submitted_at=900.0)
    e = engine()
    decisions = e.decide(snapshot(a, b, capacity=8, now=1000.0))
    assert targets(decisions) == {"job-a": 4, "job-b": 4}
    assert [d.reason for d in decisions] == [
        "fair share: gives 4 to job-b (4)",
        "fair share: starts with 4, taken from jobs above their minimum: job-a (4)",
    ]
    assert e.last_refusals == ()


def test_a_job_in_its_cooldown_gives_only_what_the_arrival_needs() -> None:
    a = job("job-a", current=8, max_workers=8, last_resize_at=990.0)
    b = job("job-b", min_workers=2, current=0, submitted_at=995.0)
    assert targets(engine().decide(snapshot(a, b, capacity=8, now=1000.0))) == {"job-a": 6, "job-b": 2}


def test_freed_capacity_goes_back_when_the_other_job_leaves() -> None:
    a = job("job-a", current=4, max_workers=8, last_resize_at=0.0)
    (decision,) = engine().decide(snapshot(a, capacity=8, now=1000.0))
    assert (decision.target_workers, decision.reason) == (8, "wants its maximum of 8")


def test_never_below_the_minimum_and_never_a_job_that_is_not_elastic() -> None:
    fixed = job("fixed", min_workers=4, max_workers=4, elastic=False, current=4)
    a = job("job-a", min_workers=4, current=4, max_workers=8)
    b = job("job-b", current=0, submitted_at=10.0)
    e = engine()
    assert e.decide(snapshot(fixed, a, b, capacity=8)) == []  # job-b waits: nothing may be taken
    assert e.last_refusals == ()


def test_arrivals_start_in_order_of_submission() -> None:
    a = job("job-a", min_workers=4, current=8, max_workers=8)
    b = job("job-b", min_workers=3, current=0, submitted_at=1.0)
    d = job("job-d", min_workers=3, current=0, submitted_at=2.0)
    # 4 can be taken from job-a: enough for job-b, not for job-d as well
    assert targets(engine().decide(snapshot(d, a, b, capacity=8))) == {"job-a": 4, "job-b": 4}


def test_a_blocked_large_arrival_lets_a_small_one_use_free_slots_only() -> None:
    fixed = job("fixed", min_workers=6, max_workers=6, elastic=False, current=6)
    big = job("job-big", min_workers=4, current=0, submitted_at=1.0)
    small = job("job-small", min_workers=2, max_workers=2, current=0, submitted_at=2.0)
    assert targets(engine().decide(snapshot(fixed, big, small, capacity=8))) == {"job-small": 2}


def test_an_arrival_that_is_not_elastic_gets_its_fixed_size() -> None:
    a = job("job-a", current=8, max_workers=8)
    fixed = job("fixed", min_workers=3, max_workers=3, elastic=False, current=0, submitted_at=5.0)
    assert targets(engine().decide(snapshot(a, fixed, capacity=8))) == {"job-a": 5, "fixed": 3}


def test_jobs_wanting_less_leave_the_rest_to_others() -> None:
    small = job("job-small", current=1, max_workers=2)
    large = job("job-large", current=1, max_workers=8)
    assert targets(engine(cooldown_s=0).decide(snapshot(small, large, capacity=8))) == {"job-small": 2, "job-large": 6}


def test_nothing_moves_when_everyone_has_what_they_want() -> None:
    a = job("job-a", current=3, max_workers=8)
    b = job("job-b", current=3, max_workers=8)
    e = PolicyEngine(StaticPolicy(), FairShareArbiter(), cooldown_s=0)
    assert e.decide(snapshot(a, b, capacity=8)) == []


def test_a_job_shrunk_for_an_arrival_gives_nothing_more_within_its_cooldown() -> None:
    """Seen live: 4 -> 2 for an arrival, then 2 -> 1 seven seconds later while the arrival still waited.
    The second shrink waits for the cooldown, whatever the arrival's need."""
    e = engine(cooldown_s=30.0)
    big = job("big", current=4, max_workers=4, submitted_at=0.0)
    small = job("small", min_workers=2, max_workers=2, elastic=False, current=0, submitted_at=500.0)
    assert targets(e.decide(snapshot(big, small, capacity=4, now=1000.0))) == {"big": 2, "small": 2}
    # The controller applied it at 1000 s; the cluster then looks one slot smaller and small still waits.
    big = job("big", current=2, max_workers=4, submitted_at=0.0, last_resize_at=1000.0)
    assert e.decide(snapshot(big, small, capacity=3, now=1007.0)) == []
    assert targets(e.decide(snapshot(big, small, capacity=3, now=1029.0))) == {}
    # Once the cooldown is over, the arrival may take from it again.
    assert targets(e.decide(snapshot(big, small, capacity=3, now=1030.0))) == {"big": 1, "small": 2}


def test_a_job_that_grew_in_its_cooldown_still_gives_to_an_arrival_at_once() -> None:
    e = engine(cooldown_s=30.0)
    big = job("big", current=2, max_workers=4, submitted_at=0.0)
    assert targets(e.decide(snapshot(big, capacity=4, now=1000.0))) == {"big": 4}
    big = job("big", current=4, max_workers=4, submitted_at=0.0, last_resize_at=1000.0)
    small = job("small", min_workers=2, max_workers=2, elastic=False, current=0, submitted_at=1005.0)
    assert targets(e.decide(snapshot(big, small, capacity=4, now=1005.0))) == {"big": 2, "small": 2}


class _ScanningFairShare(FairShareArbiter):
    """The arbiter with its hand-out and levelling as scans of every job for every slot and every move."""

    def allocate(self, snapshot: Snapshot, requests: Sequence[Request]) -> Sequence[Allocation]:
        shares = initial_shares(requests)
        available = snapshot.available
        admit(shares, available, donor_key=lambda s: (not s.movable, -s.workers, -s.job.submitted_at, s.job_id))
        free = free_slots(shares, available)
        while free > 0:
            wanting = [s for s in shares if s.admitted and s.movable and s.workers < s.desired]
            if not wanting:
                break
            min(wanting, key=lambda s: (s.workers, s.order)).workers += 1
            free -= 1
        if free_slots(shares, available) >= 0:
            while True:
                receivers = [s for s in shares if s.admitted and s.movable and s.workers < s.desired]
                donors = [s for s in shares if s.admitted and s.movable and s.workers > s.job.min_workers]
                if not receivers or not donors:
                    break
                receiver = min(receivers, key=lambda s: (s.workers, s.order))
                donor = max(donors, key=lambda s: (s.workers, s.order))
                if donor is receiver or donor.workers - receiver.workers < 2:
                    break
                donor.workers -= 1
                donor.gave[receiver.job_id] += 1
                receiver.workers += 1
                receiver.took[donor.job_id] += 1
        return allocations(shares, "fair share", lambda s: f"fair share: {s.workers} of the {s.desired} it wants")


def test_the_heaps_hand_out_and_level_as_scans_of_every_job_do() -> None:
    """Random clusters (jobs waiting, settled, fixed, wanting more or less, ties in submission time, room freed or
    short): the same allocations, reasons included, as the scans."""
    rng = random.Random(5)
    for _ in range(300):
        jobs = []
        for i in range(rng.randint(1, 25)):
            low = rng.randint(1, 3)
            high = rng.randint(low, 10)
            elastic = rng.random() < 0.85
            jobs.append(
                job(
                    f"job-{i:02d}",
                    min_workers=low if elastic else high,
                    max_workers=high,
                    elastic=elastic,
                    current=rng.choice([0, low, rng.randint(low, high)]) if elastic else rng.choice([0, high]),
                    submitted_at=float(rng.randint(0, 5)),
                    last_resize_at=rng.choice([None, 990.0, 0.0]),
                )
            )
        snap = snapshot(*jobs, capacity=rng.randint(0, 120), now=1000.0)
        for policy in (GreedyPolicy(), StaticPolicy()):
            fast = PolicyEngine(policy, FairShareArbiter(), cooldown_s=60.0).decide(snap)
            scanned = PolicyEngine(policy, _ScanningFairShare(), cooldown_s=60.0).decide(snap)
            assert fast == scanned
