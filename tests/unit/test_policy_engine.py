"""PolicyEngine: containment of failing and nonsensical policies, anti-flapping, hooks, state."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest

from submarine_elastic.policy import (
    Allocation,
    ClusterArbiter,
    Decision,
    FairShareArbiter,
    GreedyPolicy,
    JobPolicy,
    JobView,
    PolicyConfigError,
    PolicyEngine,
    PolicyStateError,
    Request,
    Snapshot,
    StaticPolicy,
)

from ._policy_support import apply, job, snapshot


class Scripted(JobPolicy):
    """Answers with whatever the test's function returns; records the hooks it sees."""

    name = "scripted"

    def __init__(self, answer: Callable[[JobView, Snapshot], object]) -> None:
        self.answer = answer
        self.calls: list[tuple[str, str]] = []

    def before_train(self, job: JobView, snapshot: Snapshot) -> None:
        self.calls.append(("before_train", job.job_id))

    def after_step(self, job: JobView, snapshot: Snapshot) -> None:
        self.calls.append(("after_step", job.job_id))

    def on_resize(self, job: JobView, previous_workers: int, snapshot: Snapshot) -> None:
        self.calls.append(("on_resize", f"{job.job_id}:{previous_workers}->{job.current_workers}"))

    def after_train(self, job_id: str, snapshot: Snapshot) -> None:
        self.calls.append(("after_train", job_id))

    def propose(self, job: JobView, snapshot: Snapshot) -> Decision | None:
        return self.answer(job, snapshot)  # type: ignore[return-value]


class ScriptedArbiter(ClusterArbiter):
    name = "scripted-arbiter"

    def __init__(self, answer: Callable[[Snapshot, Sequence[Request]], object]) -> None:
        self.answer = answer

    def allocate(self, snapshot: Snapshot, requests: Sequence[Request]) -> Sequence[Allocation]:
        return self.answer(snapshot, requests)  # type: ignore[return-value]


def targets(decisions: Sequence[Decision]) -> dict[str, int]:
    return {d.job_id: d.target_workers for d in decisions}


# ----------------------------------------------------------------------------------- containment


def _boom(job: JobView, snapshot: Snapshot) -> Decision:
    if job.job_id == "job-a":
        raise RuntimeError("policy bug")
    return Decision(job.job_id, 3, "grow")


def test_a_raising_policy_is_contained_and_other_jobs_go_on(caplog: pytest.LogCaptureFixture) -> None:
    engine = PolicyEngine(Scripted(_boom), cooldown_s=0)
    snap = snapshot(job("job-a", current=2), job("job-b", current=1), capacity=8)
    with caplog.at_level(logging.WARNING, logger="submarine_elastic.policy.engine"):
        decisions = engine.decide(snap)
    assert targets(decisions) == {"job-b": 3}
    (refusal,) = engine.last_refusals
    assert (refusal.job_id, refusal.source) == ("job-a", "scripted")
    assert refusal.reason == "propose raised RuntimeError: policy bug"
    assert "policy bug" in caplog.text


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (lambda j, s: Decision(j.job_id, 5, "too many"), "target 5 is outside the job's limits [2, 4]"),
        (lambda j, s: Decision(j.job_id, 1, "too few"), "target 1 is outside the job's limits [2, 4]"),
        (
            lambda j, s: Decision("job-zz", 3, "someone else"),
            "decision for job 'job-zz' returned while deciding for 'job-a'",
        ),
        (lambda j, s: 3, "propose returned int, not a Decision or None"),
        (
            lambda j, s: Decision(j.job_id, -1, "negative"),
            "propose raised InvalidDecisionError: job-a: target_workers must be an int >= 0, got -1",
        ),
        (
            lambda j, s: Decision(j.job_id, 3, ""),
            "propose raised InvalidDecisionError: reason must be a non-empty string, got ''",
        ),
        (lambda j, s: Decision(j.job_id, 3, "swap", replace=("worker-9",)), "replace names unknown instances worker-9"),
    ],
)
def test_nonsense_is_refused_and_the_job_keeps_its_size(
    answer: Callable[[JobView, Snapshot], object], expected: str
) -> None:
    engine = PolicyEngine(Scripted(answer), cooldown_s=0)
    view = job("job-a", min_workers=2, max_workers=4, current=3, instances=("worker-0", "worker-1", "worker-2"))
    assert engine.decide(snapshot(view)) == []
    assert [r.reason for r in engine.last_refusals] == [expected]


def test_a_raising_hook_is_contained() -> None:
    class BadHook(StaticPolicy):
        def before_train(self, job: JobView, snapshot: Snapshot) -> None:
            raise KeyError("state")

    engine = PolicyEngine(BadHook())
    assert engine.decide(snapshot(job(current=2))) == []
    assert [r.reason for r in engine.last_refusals] == ["before_train raised KeyError: 'state'"]


def test_a_raising_arbiter_changes_nothing() -> None:
    def boom(snapshot: Snapshot, requests: Sequence[Request]) -> object:
        raise ZeroDivisionError("division by zero")

    engine = PolicyEngine(GreedyPolicy(), ScriptedArbiter(boom), cooldown_s=0)
    assert engine.decide(snapshot(job("job-a", current=1), job("job-b", current=0))) == []
    (refusal,) = engine.last_refusals
    assert (refusal.job_id, refusal.source, refusal.reason) == (
        None,
        "scripted-arbiter",
        "allocate raised ZeroDivisionError: division by zero",
    )


@pytest.mark.parametrize(
    ("allocations", "expected_targets", "expected_reasons"),
    [
        ([Allocation("job-x", 2, "ghost")], {}, ["allocation for unknown job 'job-x'"]),
        ([Allocation("job-a", 9, "huge")], {}, ["9 workers is outside the job's limits [1, 8]"]),
        (
            [Allocation("job-a", 5, "up"), Allocation("job-a", 6, "again")],
            {"job-a": 5},
            ["second allocation for the same job"],
        ),
        (
            [Allocation("job-a", 8, "all of it"), Allocation("job-b", 8, "all of it too")],
            {"job-a": 8},
            ["16 workers in total exceed the 10 available"],
        ),
        ("nonsense", {}, ["allocate returned str, not a sequence"]),
        ([("job-a", 3)], {}, ["allocate returned tuple, not an Allocation"]),
    ],
)
def test_nonsense_from_an_arbiter_is_refused(
    allocations: object, expected_targets: dict[str, int], expected_reasons: list[str]
) -> None:
    engine = PolicyEngine(GreedyPolicy(), ScriptedArbiter(lambda s, r: allocations), cooldown_s=0)
    snap = snapshot(job("job-a", current=2, submitted_at=0), job("job-b", current=2, submitted_at=5), capacity=10)
    assert targets(engine.decide(snap)) == expected_targets
    assert [r.reason for r in engine.last_refusals] == expected_reasons


def test_an_arbiter_may_not_resize_a_job_that_is_not_elastic() -> None:
    engine = PolicyEngine(StaticPolicy(), ScriptedArbiter(lambda s, r: [Allocation("fixed", 3, "shrink")]))
    snap = snapshot(job("fixed", min_workers=4, max_workers=4, elastic=False, current=4), capacity=8)
    assert engine.decide(snap) == []
    assert [r.reason for r in engine.last_refusals] == ["3 workers is outside the job's limits [4, 4]"]


def test_an_arbiter_may_not_grow_a_settled_job_or_shrink_it_without_an_arrival() -> None:
    allocations = [Allocation("job-a", 4, "more"), Allocation("job-b", 1, "less")]
    engine = PolicyEngine(StaticPolicy(), ScriptedArbiter(lambda s, r: allocations), cooldown_s=60)
    snap = snapshot(
        job("job-a", current=2, last_resize_at=990.0), job("job-b", current=3, last_resize_at=990.0), now=1000.0
    )
    assert engine.decide(snap) == []
    assert [r.reason for r in engine.last_refusals] == [
        "grows 2 -> 4 during its cooldown",
        "shrinks 3 -> 1 during its cooldown",
    ]


def test_decide_needs_a_snapshot() -> None:
    with pytest.raises(TypeError, match="decide needs a Snapshot, got dict"):
        PolicyEngine().decide({})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"job_policy": FairShareArbiter()}, "job_policy must be a JobPolicy"),
        ({"arbiter": StaticPolicy()}, "arbiter must be a ClusterArbiter"),
        ({"cooldown_s": -1}, "cooldown_s must be a finite number >= 0, got -1"),
        ({"cooldown_s": float("nan")}, "cooldown_s must be a finite number >= 0, got nan"),
        ({"reversal_cooldown_s": -5.0}, "reversal_cooldown_s must be a finite number >= 0, got -5.0"),
        ({"job_policies": {"job-a": "greedy"}}, "policy for 'job-a' must be a JobPolicy, got 'greedy'"),
    ],
)
def test_constructor_rejects_bad_arguments(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(PolicyConfigError, match=message):
        PolicyEngine(**kwargs)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------- anti-flapping


def test_cooldown_holds_a_voluntary_change_until_it_ends() -> None:
    engine = PolicyEngine(GreedyPolicy(), cooldown_s=60)
    view = job(current=2, max_workers=4, last_resize_at=950.0)
    assert engine.decide(snapshot(view, now=1000.0)) == []
    assert targets(engine.decide(snapshot(view, now=1010.0))) == {"job-a": 4}


def test_a_waiting_job_starts_at_its_minimum_without_a_cooldown() -> None:
    engine = PolicyEngine(cooldown_s=600)
    (decision,) = engine.decide(snapshot(job(min_workers=2, current=0, last_resize_at=999.0), now=1000.0))
    assert (decision.target_workers, decision.reason) == (2, "waiting: starts at its minimum of 2")


def test_reversing_the_last_change_waits_for_the_reversal_cooldown() -> None:
    wish = {"size": 3}
    engine = PolicyEngine(
        Scripted(lambda j, s: Decision(j.job_id, wish["size"], "wish")), cooldown_s=10, reversal_cooldown_s=100
    )
    view = job(current=2)
    (grow,) = engine.decide(snapshot(view, now=0.0))
    assert grow.target_workers == 3
    view = apply(view, grow, now=0.0)
    wish["size"] = 2
    assert engine.decide(snapshot(view, now=50.0)) == []  # past the cooldown, within the reversal cooldown
    assert targets(engine.decide(snapshot(view, now=100.0))) == {"job-a": 2}
    wish["size"] = 3
    view = replace(view, current_workers=2, last_resize_at=100.0)
    assert engine.decide(snapshot(view, now=150.0)) == []


def test_a_flapping_signal_resizes_at_most_once_per_cooldown() -> None:
    """The policy flips between 2 and 6 on every 5 s round for an hour; the job may follow at most once
    per cooldown (and, reversing each time, only once per reversal cooldown)."""
    flip = Scripted(lambda j, s: Decision(j.job_id, 6 if int(s.now / 5) % 2 else 2, "flip"))
    engine = PolicyEngine(flip, cooldown_s=60, reversal_cooldown_s=120)
    view = job(current=4)
    resizes = []
    for round_ in range(720):
        now = 5.0 * round_
        decisions = engine.decide(snapshot(view, capacity=8, now=now))
        if decisions:
            resizes.append(now)
            view = apply(view, decisions[0], now)
    gaps = [b - a for a, b in zip(resizes, resizes[1:], strict=False)]
    assert resizes and min(gaps) >= 120
    assert len(resizes) <= 3600 / 120 + 1


def test_replacement_waits_for_the_cooldown() -> None:
    swap = Scripted(lambda j, s: Decision(j.job_id, j.current_workers, "slow one", replace=("worker-1",)))
    engine = PolicyEngine(swap, cooldown_s=60)
    view = job(current=3, instances=("worker-0", "worker-1", "worker-2"), last_resize_at=990.0)
    assert engine.decide(snapshot(view, now=1000.0)) == []
    (decision,) = engine.decide(snapshot(view, now=1100.0))
    assert (decision.target_workers, decision.replace, decision.reason) == (3, ("worker-1",), "slow one")


# ------------------------------------------------------------------------------- the whole round


def test_non_elastic_jobs_are_never_asked_and_never_resized() -> None:
    asked: list[str] = []

    def answer(j: JobView, s: Snapshot) -> Decision:
        asked.append(j.job_id)
        return Decision(j.job_id, j.max_workers, "max")

    engine = PolicyEngine(Scripted(answer), cooldown_s=0)
    fixed = job("fixed", min_workers=3, max_workers=3, elastic=False, current=3)
    elastic = job("elastic", current=1, max_workers=4)
    assert targets(engine.decide(snapshot(fixed, elastic, capacity=8))) == {"elastic": 4}
    assert asked == ["elastic"]


def test_batch_size_and_learning_rate_pass_through_only_when_they_change() -> None:
    policy = Scripted(lambda j, s: Decision(j.job_id, j.current_workers, "tune", batch_size=256, learning_rate=0.4))
    engine = PolicyEngine(policy, cooldown_s=0)
    (decision,) = engine.decide(snapshot(job(current=2, batch_size=128, learning_rate=0.2)))
    assert (decision.target_workers, decision.batch_size, decision.learning_rate) == (2, 256, 0.4)
    assert engine.decide(snapshot(job(current=2, batch_size=256, learning_rate=0.4))) == []


def test_hooks_follow_the_job_lifecycle() -> None:
    policy = Scripted(lambda j, s: None)
    engine = PolicyEngine(policy)
    engine.decide(snapshot(job(current=2, step=10)))
    engine.decide(snapshot(job(current=2, step=10)))
    engine.decide(snapshot(job(current=3, step=20)))
    engine.decide(snapshot())
    assert policy.calls == [
        ("before_train", "job-a"),
        ("on_resize", "job-a:2->3"),
        ("after_step", "job-a"),
        ("after_train", "job-a"),
    ]


def test_per_job_policies_override_the_default() -> None:
    engine = PolicyEngine(StaticPolicy(), job_policies={"job-b": GreedyPolicy()}, cooldown_s=0)
    snap = snapshot(job("job-a", current=1, max_workers=4), job("job-b", current=1, max_workers=4), capacity=16)
    assert targets(engine.decide(snap)) == {"job-b": 4}
    engine.set_job_policy("job-b", None)
    engine.set_job_policy("job-a", GreedyPolicy())
    assert targets(engine.decide(snap)) == {"job-a": 4}


def test_decisions_are_logged_with_their_reason(caplog: pytest.LogCaptureFixture) -> None:
    engine = PolicyEngine(GreedyPolicy(), cooldown_s=0)
    with caplog.at_level(logging.INFO, logger="submarine_elastic.policy.engine"):
        engine.decide(snapshot(job(current=1, max_workers=3)))
    assert "policy decision for job-a: 1 -> 3 workers: wants its maximum of 3" in caplog.text


def test_state_dict_round_trip_loses_nothing() -> None:
    engine = PolicyEngine(Scripted(lambda j, s: Decision(j.job_id, 3, "grow")), cooldown_s=10, reversal_cooldown_s=100)
    view = job(current=2)
    (decision,) = engine.decide(snapshot(view, now=0.0))
    view = apply(view, decision, 0.0)
    state = json.loads(json.dumps(engine.state_dict()))
    assert state["jobs"] == {"job-a": {"workers": 2, "step": 0, "direction": 1, "shrunk_at": None, "submitted_at": 0.0}}

    shrink = Scripted(lambda j, s: Decision(j.job_id, 2, "shrink"))
    restarted = PolicyEngine(shrink, cooldown_s=10, reversal_cooldown_s=100)
    restarted.load_state_dict(state)
    assert restarted.decide(snapshot(view, now=50.0)) == []  # the reversal rule survived the restart
    assert shrink.calls == [("on_resize", "job-a:2->3")]  # no second before_train


@pytest.mark.parametrize(
    "state",
    [
        {},
        {"version": 99},
        {"version": 1, "jobs": {"job-a": {"workers": "x"}}},
        {"version": 1, "job_policies": {"job-z": {}}},
    ],
)
def test_load_state_dict_rejects_bad_state(state: dict[str, object]) -> None:
    with pytest.raises(PolicyStateError):
        PolicyEngine().load_state_dict(state)


def test_a_job_submitted_again_under_its_id_is_a_new_job() -> None:
    policy = Scripted(lambda j, s: None)
    engine = PolicyEngine(policy, cooldown_s=0)
    engine.decide(snapshot(job(current=2, submitted_at=0.0, step=500)))
    engine.decide(snapshot(job(current=2, submitted_at=600.0, step=3)))
    engine.decide(snapshot(job(current=2, submitted_at=600.0, step=9)))
    assert policy.calls == [
        ("before_train", "job-a"),
        ("after_train", "job-a"),
        ("before_train", "job-a"),
        ("after_step", "job-a"),
    ]


def test_a_job_policys_batch_applies_only_at_the_count_it_asked_for_it_with() -> None:
    """The batch was chosen for 4 workers; the cluster has room for the 2 the job holds, so it stays at 2 and
    its batch with it (applied at 2 it would be undone the next round)."""
    policy = Scripted(lambda j, s: Decision(j.job_id, 4, "wants 4 with a larger batch", batch_size=512))
    engine = PolicyEngine(policy, FairShareArbiter(), cooldown_s=0)
    assert engine.decide(snapshot(job(current=2, max_workers=4, batch_size=128), capacity=2)) == []


def test_an_arbiters_placement_is_applied_and_a_move_is_a_change_the_cooldown_holds() -> None:
    """Nodes an arbiter gives go with the count it gives; at the count a job holds, fewer nodes than it spans
    move its workers (a decision of its own), which the cooldown holds and a job that is not elastic never makes."""
    spread = replace(job("job-a", current=4, max_workers=8), placement=(2, 2))
    grows = replace(job("job-b", current=2, max_workers=8), placement=(2,))
    allocations = [Allocation("job-a", 4, "pack it", nodes=1), Allocation("job-b", 4, "grow it", nodes=1)]
    engine = PolicyEngine(StaticPolicy(), ScriptedArbiter(lambda s, r: allocations), cooldown_s=60)
    decided = {d.job_id: (d.target_workers, d.nodes, d.reason) for d in engine.decide(snapshot(spread, grows))}
    assert decided == {"job-a": (4, 1, "pack it"), "job-b": (4, 1, "grow it")}
    assert engine.last_refusals == ()
    # a job already on as few nodes as it is asked: nothing to do
    packed = replace(spread, placement=(4,))
    assert PolicyEngine(StaticPolicy(), ScriptedArbiter(lambda s, r: allocations[:1])).decide(snapshot(packed)) == []
    settled = replace(spread, last_resize_at=990.0)
    fixed = replace(job("job-a", min_workers=4, max_workers=4, elastic=False, current=4), placement=(2, 2))
    for view, why in (
        (settled, "moves its workers (2 -> 1 nodes) during its cooldown"),
        (fixed, "moves a job that is not elastic (2 -> 1 nodes)"),
    ):
        engine = PolicyEngine(StaticPolicy(), ScriptedArbiter(lambda s, r: allocations[:1]), cooldown_s=60)
        assert engine.decide(snapshot(view, now=1000.0)) == []
        assert [r.reason for r in engine.last_refusals] == [why]


def test_a_job_policys_nodes_apply_only_at_the_count_it_asked_for() -> None:
    policy = Scripted(lambda j, s: Decision(j.job_id, 4, "wants 4 on one node", nodes=1))
    engine = PolicyEngine(policy, FairShareArbiter(), cooldown_s=0)
    (grown,) = engine.decide(snapshot(replace(job(current=2, max_workers=4), placement=(1, 1)), capacity=8))
    assert (grown.target_workers, grown.nodes) == (4, 1)
    held = replace(job(current=2, max_workers=4), placement=(1, 1))
    assert engine.decide(snapshot(held, capacity=2)) == []  # kept at 2: no move the policy did not ask for


def test_a_job_policys_batch_held_by_the_cooldown_is_not_applied_at_the_count_it_keeps() -> None:
    """The batch was chosen for 4 workers; the cooldown holds the job at 2, and the batch with it (applied at 2 a
    simulated job swung between batches 200 and 3610 every round, the goodput arbiter undoing it each time)."""
    policy = Scripted(lambda j, s: Decision(j.job_id, 4, "wants 4 with a larger batch", batch_size=512, nodes=1))
    engine = PolicyEngine(policy, FairShareArbiter(), cooldown_s=60)
    held = job(current=2, max_workers=4, batch_size=128, last_resize_at=990.0)
    assert engine.decide(snapshot(held, capacity=8, now=1000.0)) == []
