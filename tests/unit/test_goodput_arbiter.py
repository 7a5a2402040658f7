"""The goodput arbiter's weighting by remaining time, its preemption of jobs in their cooldown for a
waiting job, and a fresh job's first size."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from submarine_elastic.policy import GoodputArbiter, GoodputPolicy, JobView, PolicyConfigError, PolicyEngine, Request
from submarine_elastic.policy.goodput import MAX_REMAINING_EXPONENT, REMAINING_EXPONENT, _at
from submarine_elastic.policy.goodput_model import GoodputModel
from submarine_elastic.policy.goodput_programme import cheapest, programme

from .test_policy_goodput import FAST, MEASURED, allocate, allocate_full, goodput_job, snap


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


def test_jobs_weigh_by_their_order_in_remaining_work_not_by_how_far_apart_they_are() -> None:
    """Two alike jobs, one with twice or ten thousand times the other's remaining work: the same order, the same
    split (a job far behind is not starved for being far behind)."""
    arbiter = GoodputArbiter(resize_cost_s=0, hysteresis=0)

    def counts(far_samples: float) -> dict[str, int]:
        near = remaining(goodput_job("job-a", current=8, measured=FAST, noise=1e5), 1e5)
        far = remaining(goodput_job("job-b", current=8, measured=FAST, noise=1e5), far_samples)
        return {job_id: workers for job_id, (workers, _) in allocate(arbiter, snap(near, far)).items()}

    assert counts(2e5) == counts(1e9)
    assert counts(2e5)["job-a"] > counts(2e5)["job-b"] >= 1


def test_a_job_shrunk_weighs_what_it_weighed_before() -> None:
    """Its remaining work is counted at its submitted count, not at what it holds: shrunk from 8 to 2 workers, a job
    keeps its weight (and is not shrunk again for weighing less)."""
    arbiter = GoodputArbiter()

    def weights(held: int) -> list[float]:
        a = remaining(goodput_job("job-a", current=held, measured=FAST, noise=1e5), 1e8)
        b = remaining(goodput_job("job-b", current=8, measured=FAST, noise=1e5), 2e8)
        c = remaining(goodput_job("job-c", current=8, measured=FAST, noise=1e5), 0.5e8)
        s = snap(a, b, c)
        requests = [Request(j, 8, settled=False, reason="wish") for j in (a, b, c)]
        return arbiter._weights(requests, [arbiter._job_table(j, s) for j in (a, b, c)])

    assert weights(8) == weights(2) == [(2 / 3) ** REMAINING_EXPONENT, (1 / 3) ** REMAINING_EXPONENT, 1.0]


def test_remaining_work_is_ranked_at_the_count_each_job_was_submitted_with() -> None:
    """A job submitted at 16 workers with twice the samples left of one submitted at 1 is nearer its end as its user
    runs it: it ranks shorter and weighs more (at one worker both would rank the other way)."""
    arbiter = GoodputArbiter()
    wide = replace(remaining(goodput_job("job-a", current=16, measured=FAST, noise=1e5), 2e8), requested_workers=16)
    narrow = replace(remaining(goodput_job("job-b", current=1, measured=FAST, noise=1e5), 1e8), requested_workers=1)
    s = snap(wide, narrow)
    requests = [Request(j, j.current_workers, settled=False, reason="wish") for j in (wide, narrow)]
    assert arbiter._weights(requests, [arbiter._job_table(j, s) for j in (wide, narrow)]) == [
        1.0,
        (1 / 2) ** REMAINING_EXPONENT,
    ]


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


def _cheapest_by_matrix(dp: np.ndarray, ks: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The dynamic programme's step as a rooms x options matrix, the first least option per room."""
    idx = np.arange(len(dp))[:, None] - ks[None, :]
    cand = np.where(idx >= 0, dp[np.clip(idx, 0, None)], np.inf) + values[None, :]
    pick = np.argmin(cand, axis=1)
    return cand[np.arange(len(dp)), pick], pick


def test_the_programmes_step_per_option_is_the_matrix_one_ties_and_unreachable_rooms_included() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        rooms = int(rng.integers(1, 40))
        dp = rng.choice([0.5, 1.0, 2.0, np.inf], size=rooms)  # few distinct values: ties are common
        ks = rng.choice(np.arange(0, rooms + 5), size=int(rng.integers(1, 7)), replace=False).astype(np.int64)
        values = rng.choice([0.25, 0.5, 1.0], size=len(ks))
        best, pick = cheapest(dp, ks, values)
        want_best, want_pick = _cheapest_by_matrix(dp, ks, values)
        assert np.array_equal(best, want_best)
        assert np.array_equal(pick, want_pick)


def _solve_by_matrix(
    self: GoodputArbiter,
    requests: Sequence[Request],
    tables: Sequence[Any],
    now: float,
    capacity: int,
    slots: int | None,
    preempt: bool,
) -> tuple[list[int], list[bool]] | None:
    """The arbiter's programme over every room for every job, each step a rooms x options matrix."""
    dp = np.zeros(capacity + 1)
    choices = []
    for request, table, weight in zip(requests, tables, self._weights(requests, tables), strict=True):
        ks, values, moves = self._options(request, table, now, slots, preempt, weight)
        dp, pick = _cheapest_by_matrix(dp, ks, values)
        choices.append((ks, moves, pick))
    if not np.isfinite(dp[capacity]):
        return None
    counts, moved, left = [], [], capacity
    for ks, moves, pick in reversed(choices):
        counts.append(int(ks[pick[left]]))
        moved.append(bool(moves[pick[left]]))
        left -= counts[-1]
    return counts[::-1], moved[::-1]


def _programme_by_matrix(
    options: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], capacity: int
) -> tuple[list[int], list[bool]] | None:
    """The arbiter's programme over every room for every job, each step a rooms x options matrix."""
    dp = np.zeros(capacity + 1)
    picks = []
    for ks, values, _ in options:
        dp, pick = _cheapest_by_matrix(dp, ks, values)
        picks.append(pick)
    if not np.isfinite(dp[capacity]):
        return None
    counts, moved, left = [], [], capacity
    for (ks, _, moves), pick in zip(reversed(options), reversed(picks), strict=True):
        counts.append(int(ks[pick[left]]))
        moved.append(bool(moves[pick[left]]))
        left -= counts[-1]
    return counts[::-1], moved[::-1]


def test_the_programme_over_the_rooms_that_matter_is_the_one_over_every_room() -> None:
    """Ties everywhere, jobs that take none, options past the capacity, capacities too small and too large for the
    jobs: the same counts (and moves), or nothing fits for both."""
    rng = np.random.default_rng(11)
    for _ in range(300):
        options = []
        for _ in range(int(rng.integers(1, 12))):
            ks = np.sort(rng.choice(np.arange(0, 12), size=int(rng.integers(1, 6)), replace=False)).astype(np.int64)
            rng.shuffle(ks)
            values = rng.choice([0.25, 0.5, 1.0, 3.0], size=len(ks))
            options.append((ks, values, rng.random(len(ks)) < 0.3))
        capacity = int(rng.integers(0, 60))
        assert programme(options, capacity) == _programme_by_matrix(options, capacity)


@pytest.mark.parametrize("capacity", [130, 200, 400])
def test_the_arbiter_allocates_as_the_full_matrix_programme_does(
    capacity: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [
        goodput_job(f"job-{i:02d}", current=[0, 1, 2, 4, 8][i % 5], submitted_at=100.0 * i, max_workers=4 + i % 13)
        for i in range(40)
    ]
    s = snap(*jobs, capacity=capacity)
    fast = allocate_full(GoodputArbiter(), s)
    monkeypatch.setattr(GoodputArbiter, "_solve", _solve_by_matrix)
    assert allocate_full(GoodputArbiter(), s) == fast
    assert fast  # the arbiter changes jobs


def test_the_configuration_where_a_job_runs_spread_follows_its_measurements() -> None:
    """The cached configuration of a job spread wider than packed is the model's for what it measured now: a
    measurement that changed gives the new model's, not the one cached for the old."""
    spread = replace(goodput_job(current=4, measured=MEASURED), placement=(1, 1, 1, 1))
    first = _at(spread, MEASURED, 4, True, 4, 4)
    assert first == GoodputModel(spread, MEASURED, 4).at(4, 4)
    slower = tuple(replace(m, seconds=m.seconds * 3, sync_seconds=m.sync_seconds) for m in MEASURED)
    moved = replace(spread, metrics=replace(spread.metrics, configurations=slower))
    assert _at(moved, slower, 4, True, 4, 4) == GoodputModel(moved, slower, 4).at(4, 4) != first
    assert _at(spread, MEASURED, 4, True, 4, 2) == GoodputModel(spread, MEASURED, 4).at(4, 2)
