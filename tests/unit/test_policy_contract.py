"""Contract tests: every built-in job policy and arbiter must pass these, and so should a user's.

Subclass :class:`JobPolicyContract` or :class:`ArbiterContract` and implement ``make``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence

import pytest

from submarine_elastic.policy import (
    Allocation,
    ClusterArbiter,
    CompositePolicy,
    ConvergencePolicy,
    Decision,
    FairShareArbiter,
    GoodputArbiter,
    GoodputPolicy,
    GreedyPolicy,
    JobMetrics,
    JobPolicy,
    JobView,
    PolicyEngine,
    PolicyStateError,
    Request,
    ScalingEfficiencyPolicy,
    Snapshot,
    StaticPolicy,
    StragglerPolicy,
    UtilityPolicy,
)

from ._policy_support import job, random_snapshots, snapshot

SNAPSHOTS = random_snapshots(seed=7, count=80) + random_snapshots(seed=11, count=40)


def _run(engine: PolicyEngine, snapshots: Sequence[Snapshot]) -> list[tuple[list[Decision], tuple[object, ...]]]:
    return [(engine.decide(s), engine.last_refusals) for s in snapshots]


def _check_totals(snap: Snapshot, targets: dict[str, int]) -> None:
    held = sum(j.holding for j in snap.jobs)
    total = sum(targets.get(j.job_id, j.holding) for j in snap.jobs)
    assert total <= max(snap.available, held)


class JobPolicyContract:
    """What every JobPolicy must do."""

    def make(self) -> JobPolicy:
        raise NotImplementedError

    def test_proposals_stay_within_limits(self) -> None:
        policy = self.make()
        for snap in SNAPSHOTS:
            for view in snap.jobs:
                if not view.elastic:
                    continue
                decision = policy.propose(view, snap)
                if decision is None:
                    continue
                assert isinstance(decision, Decision)
                assert decision.job_id == view.job_id
                assert view.min_workers <= decision.target_workers <= view.max_workers
                assert decision.reason.strip() and "\n" not in decision.reason
                assert set(decision.replace) <= view.known_instances

    def test_engine_refuses_nothing_and_capacity_holds(self) -> None:
        engine = PolicyEngine(self.make(), FairShareArbiter(), cooldown_s=0)
        for snap in SNAPSHOTS:
            decisions = engine.decide(snap)
            assert engine.last_refusals == ()
            targets = {d.job_id: d.target_workers for d in decisions}
            for view in snap.jobs:
                if view.job_id in targets and targets[view.job_id] != view.holding:
                    assert view.min_workers <= targets[view.job_id] <= view.max_workers
            _check_totals(snap, targets)

    def test_deterministic(self) -> None:
        first = _run(PolicyEngine(self.make(), cooldown_s=30), SNAPSHOTS)
        second = _run(PolicyEngine(self.make(), cooldown_s=30), SNAPSHOTS)
        assert first == second

    def test_empty_snapshot(self) -> None:
        engine = PolicyEngine(self.make())
        assert engine.decide(Snapshot(now=0.0, capacity=0, free=0)) == []
        assert engine.decide(Snapshot(now=1.0, capacity=8, free=8)) == []
        assert engine.last_refusals == ()

    def test_unknown_metrics(self) -> None:
        policy = self.make()
        for view in (
            JobView("job-a", 1, 4, current_workers=2),
            JobView("job-b", 2, 4),
            JobView("job-c", 1, 4, current_workers=3, metrics=JobMetrics(step=10)),
        ):
            snap = snapshot(view)
            decision = policy.propose(view, snap)
            assert decision is None or view.min_workers <= decision.target_workers <= view.max_workers
            engine = PolicyEngine(self.make())
            engine.decide(snap)
            assert engine.last_refusals == ()

    def test_state_survives_a_restart(self) -> None:
        policy = self.make()
        half = len(SNAPSHOTS) // 2
        for snap in SNAPSHOTS[:half]:
            for view in snap.jobs:
                if view.elastic:
                    policy.propose(view, snap)
        restarted = self.make()
        restarted.load_state_dict(json.loads(json.dumps(policy.state_dict())))
        for snap in SNAPSHOTS[half:]:
            for view in snap.jobs:
                if view.elastic:
                    assert restarted.propose(view, snap) == policy.propose(view, snap)

    def test_rejects_foreign_state(self) -> None:
        with pytest.raises(PolicyStateError):
            self.make().load_state_dict({"not": "mine"})


class ArbiterContract:
    """What every ClusterArbiter must do."""

    def make(self) -> ClusterArbiter:
        raise NotImplementedError

    @staticmethod
    def requests(snap: Snapshot, rng: random.Random) -> list[Request]:
        out = []
        for view in snap.jobs:
            if not view.elastic:
                out.append(Request(view, view.min_workers, settled=not view.waiting, reason="fixed"))
                continue
            desired = rng.randint(view.min_workers, view.max_workers)
            out.append(Request(view, desired, settled=not view.waiting and rng.random() < 0.3, reason="wish"))
        return out

    def test_allocations_obey_the_rules(self) -> None:
        arbiter = self.make()
        rng = random.Random(3)
        for snap in SNAPSHOTS:
            requests = self.requests(snap, rng)
            result = list(arbiter.allocate(snap, requests))
            by_id = {r.job_id: r for r in requests}
            assert len({a.job_id for a in result}) == len(result)
            targets = {}
            for allocation in result:
                assert isinstance(allocation, Allocation)
                request = by_id[allocation.job_id]
                view = request.job
                targets[view.job_id] = allocation.workers
                if allocation.workers == view.holding:
                    continue
                assert view.min_workers <= allocation.workers <= view.max_workers
                assert view.elastic or view.waiting
                if request.settled:
                    assert allocation.workers < view.holding
            admitted = any(by_id[j].job.waiting and w >= by_id[j].job.min_workers for j, w in targets.items())
            for job_id, workers in targets.items():
                if by_id[job_id].settled and workers != by_id[job_id].holding:
                    assert admitted
            _check_totals(snap, targets)

    def test_engine_refuses_nothing(self) -> None:
        engine = PolicyEngine(GreedyPolicy(), self.make(), cooldown_s=30)
        for snap in SNAPSHOTS:
            engine.decide(snap)
            assert engine.last_refusals == ()

    def test_deterministic(self) -> None:
        first = _run(PolicyEngine(GreedyPolicy(), self.make()), SNAPSHOTS)
        second = _run(PolicyEngine(GreedyPolicy(), self.make()), SNAPSHOTS)
        assert first == second

    def test_empty_snapshot(self) -> None:
        assert list(self.make().allocate(Snapshot(now=0.0, capacity=4, free=4), [])) == []

    def test_unknown_metrics(self) -> None:
        views = [JobView("job-a", 1, 4, current_workers=2), JobView("job-b", 1, 4)]
        snap = snapshot(*views, capacity=4)
        result = self.make().allocate(snap, [Request(v, 4, settled=False, reason="wish") for v in views])
        targets = {a.job_id: a.workers for a in result}
        _check_totals(snap, targets)
        assert targets.get("job-b", 0) >= 1  # the waiting job starts

    def test_state_round_trip(self) -> None:
        arbiter = self.make()
        restarted = self.make()
        restarted.load_state_dict(json.loads(json.dumps(arbiter.state_dict())))
        rng = random.Random(5)
        for snap in SNAPSHOTS[:20]:
            requests = self.requests(snap, rng)
            assert list(arbiter.allocate(snap, requests)) == list(restarted.allocate(snap, requests))


# ------------------------------------------------------------------------------------- the built-ins


class TestStaticContract(JobPolicyContract):
    def make(self) -> JobPolicy:
        return StaticPolicy()


class TestGreedyContract(JobPolicyContract):
    def make(self) -> JobPolicy:
        return GreedyPolicy()


class TestScalingEfficiencyContract(JobPolicyContract):
    def make(self) -> JobPolicy:
        return ScalingEfficiencyPolicy(probe_every_steps=10)


class TestUtilityPriceContract(JobPolicyContract):
    def make(self) -> JobPolicy:
        return UtilityPolicy(price_per_worker_hour=50.0, value_per_sample=1e-3, min_steps=5)


class TestUtilityDeadlineContract(JobPolicyContract):
    def make(self) -> JobPolicy:
        return UtilityPolicy(deadline_s=3600.0, min_steps=5)


class TestStragglerContract(JobPolicyContract):
    def make(self) -> JobPolicy:
        return StragglerPolicy(window=5)


class TestConvergenceContract(JobPolicyContract):
    def make(self) -> JobPolicy:
        return ConvergencePolicy(window=8, tolerance=0.05)


class TestCompositeContract(JobPolicyContract):
    def make(self) -> JobPolicy:
        return CompositePolicy(
            [ConvergencePolicy(window=8), ScalingEfficiencyPolicy(probe_every_steps=10), StragglerPolicy()]
        )


class TestFairShareContract(ArbiterContract):
    def make(self) -> ClusterArbiter:
        return FairShareArbiter()


class TestGoodputContract(ArbiterContract):
    def make(self) -> ClusterArbiter:
        return GoodputArbiter()


class TestGoodputRestartCostContract(ArbiterContract):
    def make(self) -> ClusterArbiter:
        return GoodputArbiter(resize_cost_s=30.0, hysteresis=0.0, initial_workers=2)


class TestGoodputPolicyContract(JobPolicyContract):
    def make(self) -> JobPolicy:
        return GoodputPolicy()


class TestGoodputArbiterAsJobPolicyContract(JobPolicyContract):
    def make(self) -> JobPolicy:
        return GoodputArbiter()


def test_contract_covers_every_builtin() -> None:
    from submarine_elastic.policy import BUILTIN_POLICIES, load_policy_class

    covered = {
        StaticPolicy,
        GreedyPolicy,
        ScalingEfficiencyPolicy,
        UtilityPolicy,
        StragglerPolicy,
        ConvergencePolicy,
        CompositePolicy,
        FairShareArbiter,
        GoodputArbiter,
    }
    assert {load_policy_class(name) for name in BUILTIN_POLICIES} == covered


def test_a_broken_policy_fails_the_contract() -> None:
    """The contract can fail: a policy that asks for one more than the maximum does not pass."""

    class TooBig(JobPolicy):
        def propose(self, job: JobView, snapshot: Snapshot) -> Decision | None:
            return Decision(job.job_id, job.max_workers + 1, "more")

    class Contract(JobPolicyContract):
        def make(self) -> JobPolicy:
            return TooBig()

    with pytest.raises(AssertionError):
        Contract().test_proposals_stay_within_limits()
    with pytest.raises(AssertionError):
        Contract().test_engine_refuses_nothing_and_capacity_holds()
    assert job().job_id == "job-a"
