"""The controller round's parts as functions: the pure step (follow, count, decisions, lowered targets), each
job's entry in the book, and a backend's one status call."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from submarine_elastic.controller.api import (
    DECISION_TRANSITIONS,
    JOB_TRANSITIONS,
    DecisionRecord,
    DecisionState,
    DriverStatus,
    JobFootprint,
    JobRecord,
    JobSize,
    JobSource,
    JobState,
    JobSubmission,
    NodeResources,
    Resources,
)
from submarine_elastic.controller.book import Converging, Follow, JobBook, Tracked
from submarine_elastic.controller.capacity import SlotCount
from submarine_elastic.controller.jobmetrics import ReadMetrics
from submarine_elastic.controller.service import ControllerService
from submarine_elastic.controller.step import (
    ClusterRoom,
    Held,
    Observation,
    Room,
    Send,
    batch_change,
    check,
    count_fixed,
    count_yarn,
    follow,
    lower_short,
    queue_of,
    sends,
    step,
    takes_part,
    view,
)
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.policy import Decision, JobMetrics, PolicyEngine, Snapshot, load_arbiter, load_job_policy
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from tests.unit.test_controller import FakeCluster

STALL = 100.0


def job(
    name: str = "big",
    target: int = 2,
    *,
    run: int = 1,
    source: JobSource = JobSource.CLI,
    submitted_at: float = 1.0,
    min_workers: int = 1,
    queue: str | None = None,
) -> JobRecord:
    return JobRecord(
        name, min_workers, 8, target, target, True, JobState.RUNNING, submitted_at, source, run=run, queue=queue
    )


def converging(to: int = 4, *, at: float = 10.0, run: int = 1, **kwargs: object) -> Converging:
    return Converging(7, DecisionRecord("big", at, 2, to, "grow", run=run), run, **kwargs)  # type: ignore[arg-type]


def status(target: int, ring: int | None, ready: int | None = None, **kwargs: object) -> DriverStatus:
    size = JobSize(target, ring or 0, ring if ready is None else ready)
    return DriverStatus(size, ring, **kwargs)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- 1. following


def test_a_decision_is_applied_once_the_driver_yarn_and_the_ring_have_its_size() -> None:
    c = converging(4)
    applied = check("big", c, JobSize(4, 4, 4), 20.0, STALL)
    assert applied == Follow(
        "big",
        c,
        None,
        finish=(DecisionState.APPLIED, None),
        changes={"workers": 4, "observed_at": 20.0, "last_resize_at": 20.0},
    )
    batch_only = converging(4, restarts_cooldown=False)
    done = check("big", batch_only, JobSize(4, 4, 4), 20.0, STALL)
    assert done is not None and done.changes == {"workers": 4, "observed_at": 20.0}


def test_a_decision_not_converged_is_pending_with_why_then_stalled_and_unchanged_is_nothing() -> None:
    c = converging(4)
    pending = check("big", c, JobSize(4, 2, 3), 20.0, STALL)
    assert pending is not None and pending.progress == ("YARN has 3 of 4; ring has 2 of 4", False)
    assert pending.now == Converging(7, c.record, 1, why="YARN has 3 of 4; ring has 2 of 4")
    assert pending.finish is None and not pending.changes
    assert check("big", pending.now, JobSize(4, 2, 3), 30.0, STALL) is None  # nothing new
    stalled = check("big", pending.now, JobSize(4, 2, 3), 10.0 + STALL, STALL)
    assert stalled is not None and stalled.progress == ("YARN has 3 of 4; ring has 2 of 4", True)
    silent = check("big", c, None, 20.0, STALL)
    assert silent is not None and silent.progress == ("its driver does not answer", False)


def test_a_decision_of_a_job_that_ended_or_was_submitted_again_fails_unless_stalled() -> None:
    c = converging(4)
    tracked = {"big": Tracked(converging=c, unadopted=True)}
    [ended] = follow([], tracked, {}, 20.0, STALL)
    assert ended == Follow(
        "big", c, None, adopted=True, finish=(DecisionState.FAILED, "the job ended before it converged")
    )
    [again] = follow([job(run=2)], {"big": Tracked(converging=c)}, {"big": status(2, 2)}, 20.0, STALL)
    assert again.finish == (DecisionState.FAILED, "the job was submitted again before it converged")
    assert again.now is None
    stalled = converging(4, stalled=True, why="ring has 2 of 4")
    [quiet] = follow([], {"big": Tracked(converging=stalled)}, {}, 20.0, STALL)
    assert quiet.finish is None and quiet.now is None


def test_a_job_adopts_its_drivers_target_and_a_decision_for_another_size_fails() -> None:
    c = converging(4)
    [adopted] = follow(
        [job(target=2)], {"big": Tracked(converging=c, unadopted=True)}, {"big": status(3, 3)}, 20.0, STALL
    )
    assert adopted.adopted and adopted.now is None and adopted.changes == {"target": 3}
    assert adopted.finish is not None and adopted.finish[0] is DecisionState.FAILED
    assert adopted.finish[1] is not None and adopted.finish[1].startswith("its driver's target is 3, not 4")
    # The driver took it: adopted, then followed in the same round.
    [took] = follow([job(target=4)], {"big": Tracked(converging=c, unadopted=True)}, {"big": status(4, 4)}, 20, STALL)
    assert took.adopted and took.finish == (DecisionState.APPLIED, None) and took.changes["workers"] == 4
    # No answer: it stays unadopted; a decision being sent is its sender's to follow.
    assert follow([job()], {"big": Tracked(unadopted=True)}, {"big": None}, 20.0, STALL) == []
    sending = {"big": Tracked(converging=c, unadopted=True, sending=True)}
    assert follow([job()], sending, {"big": status(4, 4)}, 20.0, STALL) == []
    assert follow([job()], {"big": Tracked()}, {"big": status(4, 4)}, 20.0, STALL) == []


# ----------------------------------------------------------------------------- 2. counting


def test_fixed_slots_go_to_running_rings_then_to_jobs_whose_start_fits() -> None:
    jobs = [job("a", 3), job("b", 2), job("c", 4)]
    room = count_fixed(jobs, {"a": 2, "b": None, "c": None}, 6)
    assert room == Room(6, {"a": Held(2, 1), "b": Held(0, 2), "c": Held(0, 0)}, {})


def one_node(unit: Resources, held: int, free: int, **allocated: int) -> ClusterRoom:
    """A cluster of one node, ``n0``, in slots of ``unit``: ``held`` held, ``free`` free; ``allocated``: the worker
    containers YARN gave each job."""
    return ClusterRoom(
        nodes=(NodeResources("n0", free=Resources(unit.memory_mb * free, unit.vcores * free)),),
        footprints={name: JobFootprint(unit, n) for name, n in allocated.items()},
        slots=SlotCount(unit=unit, held=held, free=free, reserved=0, per_node={"n0": free}),
        kept=held + free,
    )


def test_yarn_slots_are_claimed_in_submission_order_and_a_short_running_job_is_named() -> None:
    cluster = one_node(Resources(2048, 1), held=2, free=1, a=2, b=0)
    jobs = [job("b", 2, submitted_at=2.0), job("a", 4, submitted_at=1.0)]
    room = count_yarn(jobs, {"a": 2, "b": None}, cluster, answered={"a", "b"})
    assert room.capacity == 3
    assert room.holding == {"a": Held(2, 1), "b": Held(0, 0)}
    assert room.short == {
        "a": (3, "only 3 of its 4 workers fit (2048 MB, 1 vcore each; 1 free slots of 2048 MB, 1 vcore)"),
        "b": (0, "only 0 of its 2 workers fit (2048 MB, 1 vcore each; 1 free slots of 2048 MB, 1 vcore); it has not "
              "started"),
    }  # fmt: skip
    assert room.unstarted == {"b"}
    assert set(count_yarn(jobs, {"a": 2, "b": None}, cluster).short) == {"a"}  # b's driver did not answer
    assert count_yarn(jobs, {}, ClusterRoom((), {}, None)) == Room(0, {}, {})


def test_a_job_the_workers_another_job_gives_back_would_fit_is_not_short_while_they_go() -> None:
    """A chaos run: the arbiter shrank c0 3 -> 2 for c2 and grew c2 1 -> 2 in one round; c0's worker left at its
    next commit and YARN stopped its container later than the settle time, so c2 was lowered back to 1 while the
    slot came free, grown again the next round, and so on four times. The worker a job holds above its target
    is on its way out: the job it would fit is not short meanwhile."""
    cluster = one_node(Resources(1024, 1), held=4, free=0, c0=3, c2=1)
    shrinking = [job("c0", 2, submitted_at=1.0), job("c2", 2, submitted_at=2.0)]
    room = count_yarn(shrinking, {"c0": 3, "c2": 1}, cluster, answered={"c0", "c2"})
    assert room.short == {} and room.holding == {"c0": Held(3, 0), "c2": Held(1, 0)}
    keeping = [job("c0", 3, submitted_at=1.0), job("c2", 2, submitted_at=2.0)]  # nothing goes: c2 is short
    assert count_yarn(keeping, {"c0": 3, "c2": 1}, cluster, answered={"c0", "c2"}).short == {
        "c2": (1, "only 1 of its 2 workers fit (1024 MB, 1 vcore each; 0 free slots of 1024 MB, 1 vcore)")
    }
    greedy = [job("c0", 2, submitted_at=1.0), job("c2", 3, submitted_at=2.0)]  # the one that goes is all it gets
    assert count_yarn(greedy, {"c0": 3, "c2": 1}, cluster, answered={"c0", "c2"}).short == {
        "c2": (1, "only 1 of its 3 workers fit (1024 MB, 1 vcore each; 0 free slots of 1024 MB, 1 vcore)")
    }


def test_a_job_that_has_not_started_is_lowered_to_what_fits_once_it_has_asked_the_settle_time() -> None:
    """An arrival asking for more than is free would have YARN give it the next GPUs that free, whoever the arbiter
    means them for: before its ring has ever reported, once its driver answers, it counts as short, and it is
    lowered to what fits (at least its minimum) ``settle`` seconds after it first asked (YARN's view of its
    containers lags the nodes' free room), not ``settle`` seconds after its ring reports (its whole startup
    later). A job whose ring was seen before and is re-forming (its driver relaunched) is not lowered."""
    cluster = one_node(Resources(1024, 1), held=3, free=1, a=3, new=0, back=0)
    new = job("new", 8, submitted_at=2.0, min_workers=1)
    back = replace(job("back", 2, submitted_at=3.0), observed_at=50.0)
    jobs = [job("a", 3), new, back]
    room = count_yarn(jobs, {"a": 3, "new": None, "back": None}, cluster, answered={"a", "new", "back"})
    assert room.holding["new"] == Held(0, 1) and room.short["new"][0] == 1
    assert room.unstarted == {"new"} and "back" not in room.short
    stalls, out, since = lower_short(jobs, room, set(), {}, 100.0, 10.0)
    assert (stalls, out, since) == ([], [], {"new": (1, 100.0)})  # asks from now on: not lowered yet
    waited = {"new": Tracked(short_since=(1, 100.0))}
    stalls, out, since = lower_short(jobs, room, set(), waited, 110.0, 10.0)
    assert stalls == [] and since == {"new": (1, 100.0)}
    assert [(s.record.job_id, s.record.from_workers, s.record.to_workers, s.changes) for s in out] == [
        ("new", 8, 1, {"target": 1})
    ]
    assert "it has not started" in out[0].record.reason
    # Nothing free: lowered to its minimum, its one request waiting for the next GPU.
    full = replace(cluster, slots=SlotCount(unit=Resources(1024, 1), held=4, free=0, reserved=0, per_node={"n0": 0}))
    two = replace(new, min_workers=2)
    room = count_yarn([job("a", 3), two], {"a": 3, "new": None}, full, answered={"new"})
    assert [s.record.to_workers for s in lower_short([two], room, set(), waited, 110.0, 10.0)[1]] == [2]
    # Through the step, its driver answering with no ring: lowered once it has asked the settle time. A driver
    # that does not answer yet would fail the target sent to it: none is.
    obs = Observation(
        now=110.0, jobs=(job("a", 3), new), statuses={"a": status(3, 3), "new": status(8, None)}, cluster=cluster
    )
    done = step(obs, {}, lambda snapshot: [], stall_after=STALL, settle=10.0)
    assert done.sends == () and done.short_since == {"new": (1, 110.0)}
    done = step(replace(obs, now=120.0), waited, lambda snapshot: [], stall_after=STALL, settle=10.0)
    assert [(s.record.job_id, s.record.to_workers) for s in done.sends] == [("new", 1)]
    silent = replace(obs, now=120.0, statuses={"a": status(3, 3), "new": None})
    done = step(silent, waited, lambda snapshot: [], stall_after=STALL, settle=10.0)
    assert done.sends == () and done.short_since == {}


def test_who_takes_part_in_counting_the_cluster() -> None:
    assert not takes_part(job(source=JobSource.CLI), 2, footprint_known=False)  # job run's, YARN shows none yet
    assert takes_part(job(source=JobSource.CLI), None, footprint_known=True)
    assert not takes_part(job(source=JobSource.YARN), None, footprint_known=True)  # someone else's, no ring
    assert takes_part(job(source=JobSource.BRIDGE), None, footprint_known=False)


def test_a_job_counts_in_the_leaf_queue_it_names() -> None:
    assert queue_of(job(queue="root.prod"), ["prod", "research"]) == "prod"
    assert queue_of(job(queue="other"), ["prod", "research"]) == "prod"
    assert queue_of(job(), ["research", "default"]) == "default"
    assert queue_of(job(queue="prod"), []) == "default"


# ----------------------------------------------------------------------------- 4. decisions


def test_decisions_become_records_to_send_and_none_for_a_busy_job() -> None:
    room = Room(8, {"a": Held(2, 0), "b": Held(2, 1), "c": Held(2, 0), "d": Held(2, 0)}, {})
    managed = {name: job(name, 2) for name in "abcd"}
    decisions = [
        Decision("a", 4, "grow"),
        Decision("b", 1, "shrink"),
        Decision("c", 2, "swap", replace=("worker-1",)),
        Decision("d", 2, "batch", batch_size=64),
    ]
    tracked = {"b": Tracked(converging=converging(3))}  # pending: busy
    out, decided = sends(decisions, managed, room, tracked, {}, 50.0)
    assert decided == {"a", "c", "d"}
    assert out == [
        Send(DecisionRecord("a", 50.0, 2, 4, "grow"), {"target": 4, "last_resize_at": 50.0}, 1, 2),
        Send(
            DecisionRecord("c", 50.0, 2, 2, "replace worker-1: swap"),
            {"last_resize_at": 50.0},
            1,
            2,
            replace=("worker-1",),
        ),
        Send(
            DecisionRecord("d", 50.0, 2, 2, "batch"),
            {},
            1,
            2,
            batch=pb.Target(batch_size=64, accum_steps=0),
            restarts_cooldown=False,
        ),
    ]


def test_a_batch_is_sent_once_and_a_learning_rate_alone_keeps_the_known_batch() -> None:
    assert batch_change(Decision("a", 2, "same"), None, None) is None
    sent = pb.Target(batch_size=64, accum_steps=1)
    assert batch_change(Decision("a", 2, "b", batch_size=64, accum_steps=1), None, sent) is None
    assert batch_change(Decision("a", 2, "lr", learning_rate=0.1), None, sent) == pb.Target(
        batch_size=64, accum_steps=0, learning_rate=0.1
    )
    measured = JobMetrics(batch_size=128)
    assert batch_change(Decision("a", 2, "lr", learning_rate=0.1), measured, None) == pb.Target(
        batch_size=128, accum_steps=0, learning_rate=0.1
    )
    assert batch_change(Decision("a", 2, "lr", learning_rate=0.1), JobMetrics(), None) is None


def test_a_target_that_does_not_fit_is_lowered_once_it_has_lasted_the_settle_time() -> None:
    room = Room(3, {"big": Held(2, 1)}, {"big": (3, "only 3 of its 4 workers fit")})
    managed = [job("big", 4)]
    stalls, out, since = lower_short(managed, room, set(), {}, 100.0, 10.0)
    assert (stalls, out, since) == ([], [], {"big": (1, 100.0)})
    pending = converging(4, why="YARN has 3 of 4")
    tracked = {"big": Tracked(converging=pending, short_since=(1, 100.0))}
    stalls, out, since = lower_short(managed, room, set(), tracked, 110.0, 10.0)
    noted = "YARN has 3 of 4; only 3 of its 4 workers fit"
    assert stalls == [
        Follow("big", pending, Converging(7, pending.record, 1, stalled=True, why=noted), progress=(noted, True))
    ]
    assert out == [
        Send(
            DecisionRecord("big", 110.0, 4, 3, "only 3 of its 4 workers fit"),
            {"target": 3},
            1,
            4,
            restarts_cooldown=False,
        )
    ]
    assert since == {"big": (1, 100.0)}
    # A new run starts its wait afresh; a job decided for this round, or unadopted, is left alone.
    assert lower_short([job("big", 4, run=2)], room, set(), tracked, 110.0, 10.0)[2] == {"big": (2, 110.0)}
    assert lower_short(managed, room, {"big"}, tracked, 110.0, 10.0)[1] == []
    unadopted = {"big": Tracked(unadopted=True, short_since=(1, 100.0))}
    assert lower_short(managed, room, set(), unadopted, 110.0, 10.0)[1] == []


# ----------------------------------------------------------------------------- the step


def test_a_job_that_has_not_reported_its_batch_is_seen_with_the_one_its_driver_set() -> None:
    """A chaos run: the controller, started again, read no metrics of a job yet, so its batch was unknown and
    every round's arbiter batch counted as a change: "keeps 4 workers; batch ? -> 256" decided three times in six
    seconds. The batch the job's driver last set stands in until the job's report; the report, when there is one,
    is what the policy sees."""
    obs = Observation(now=20.0, jobs=(job("c0", 4),), statuses={"c0": status(4, 4, batch_size=256)})
    assert view(job("c0", 4), Held(4, 0), obs, []).metrics.batch_size == 256
    reported = replace(obs, metrics={"c0": ReadMetrics(JobMetrics(step=9, batch_size=128), ())})
    assert view(job("c0", 4), Held(4, 0), reported, []).metrics == JobMetrics(step=9, batch_size=128)
    unset = replace(obs, statuses={"c0": status(4, 4)})  # the job's own batch, never set: still unknown
    assert view(job("c0", 4), Held(4, 0), unset, []).metrics.batch_size is None


def test_the_step_follows_counts_asks_the_policy_and_returns_what_to_do() -> None:
    pending = converging(3, at=10.0)
    obs = Observation(
        now=20.0,
        jobs=(job("big", 3), job("new", 1, submitted_at=2.0)),
        statuses={"big": status(3, 3, placement=(2, 1)), "new": None},
        metrics={"big": ReadMetrics(JobMetrics(step=5), (("big", 3, 30.0, 4),))},
        batch_limits={"big": (32, 256)},
        capacity=6,
    )
    seen: list[Snapshot] = []

    def decide(snapshot: Snapshot) -> list[Decision]:
        seen.append(snapshot)
        return [Decision("big", 4, "grow"), Decision("new", 2, "start")]

    done = step(obs, {"big": Tracked(converging=pending)}, decide, stall_after=STALL, settle=10.0)
    [applied] = done.follows
    assert applied.finish == (DecisionState.APPLIED, None)
    assert done.rings == {"big": 3} and done.counted and done.history == (("big", 3, 30.0, 4),)
    [snapshot] = seen
    big, new = snapshot.jobs
    assert (big.current_workers, big.pending_workers, big.placement, big.min_batch_size) == (3, 0, (2, 1), 32)
    assert (new.current_workers, new.pending_workers) == (0, 1)
    assert (snapshot.capacity, snapshot.free) == (6, 2)
    # Applied this round: big is no longer busy, and its cooldown restarted with it.
    assert [(s.record.job_id, s.record.to_workers, s.record.from_workers) for s in done.sends] == [
        ("big", 4, 3),
        ("new", 2, 1),
    ]


def test_with_the_nodes_unknown_the_step_only_follows() -> None:
    obs = Observation(now=20.0, jobs=(job(),), statuses={"big": status(2, 2)})
    done = step(obs, {}, lambda snapshot: pytest.fail("no snapshot"), stall_after=STALL, settle=10.0)
    assert (done.follows, done.rings, done.counted, done.sends) == ((), {"big": 2}, False, ())


# ----------------------------------------------------------------------------- the book


def test_the_book_applies_what_a_step_read_only_while_the_entry_still_holds_it() -> None:
    book = JobBook()
    c = converging(4)
    done = book.start_send("big", c)
    assert book.snapshot() == {"big": Tracked(converging=c, sending=True)} and book.sends() == [done]
    assert book.snapshot()["big"].busy
    book.send_ended("big", done)
    assert done.is_set() and book.sends() == []
    later = converging(5)
    assert not book.follow(Follow("big", later, None))  # read another decision: not applied
    assert book.follow(Follow("big", c, None, finish=(DecisionState.APPLIED, None)))
    assert book.converging("big") is None and not book.following()
    book.send_failed("big")
    assert book.snapshot()["big"] == Tracked(unadopted=True) and book.following()
    forgotten: list[str] = []
    book.submitted("big", new_run=True, forget=lambda: forgotten.append("big"))
    assert forgotten == ["big"] and not book.snapshot()["big"].unadopted


def test_reports_are_numbered_in_order_under_the_book_lock() -> None:
    book = JobBook()
    seqs: list[int] = []
    threads = [threading.Thread(target=book.report, args=("big", seqs.append)) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seqs == list(range(1, 21))
    book.submitted("big", new_run=True, forget=lambda: None)
    assert book.report("big", lambda seq: seq) == 1


# ----------------------------------------------------------------------------- the backend's one status call


class RingsOnly(FakeCluster):
    """A backend that sees only rings, with the optional hooks the default status call reads."""

    def instances(self, job_id: str) -> tuple[str, ...]:
        return ("worker-0", "worker-1")

    def batch_limits(self, job_id: str) -> tuple[int, int] | None:
        return (16, 64)


def test_a_backend_that_sees_only_rings_answers_one_status_per_job() -> None:
    backend = RingsOnly(capacity=4)
    backend.sizes["big"] = 2
    assert backend.status("big") == DriverStatus(JobSize(2, 2, 2), 2, ("worker-0", "worker-1"), (16, 64), ())
    assert backend.status("new") == DriverStatus(None, None, (), (16, 64), ())


# ----------------------------------------------------------------------------- states and the submission


def test_a_job_may_stay_in_its_state_and_a_decision_may_not() -> None:
    assert all(JOB_TRANSITIONS.can(s, s) for s in JobState)
    assert not any(DECISION_TRANSITIONS.can(s, s) for s in DecisionState)
    assert JOB_TRANSITIONS.final(JobState.FINISHED) and not JOB_TRANSITIONS.final(JobState.PENDING)
    assert DECISION_TRANSITIONS.final(DecisionState.APPLIED) and DECISION_TRANSITIONS.final(DecisionState.FAILED)
    assert DecisionState("pending") is DecisionState.PENDING  # as every earlier release wrote it


def test_a_submission_makes_its_first_record() -> None:
    submitted = JobSubmission("big", 1, 4, 2, source=JobSource.BRIDGE, policy="greedy", queue="prod")
    assert submitted.record(5.0, app_id="application_1") == JobRecord(
        "big",
        1,
        4,
        2,
        2,
        True,
        JobState.RUNNING,
        5.0,
        JobSource.BRIDGE,
        app_id="application_1",
        policy="greedy",
        queue="prod",
        requested=2,
    )


class Counted(FakeCluster):
    """Answers each status call from ``sizes`` and counts them."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.calls: list[str] = []

    def status(self, job_id: str) -> DriverStatus | None:
        self.calls.append(job_id)
        ring = self.sizes.get(job_id)
        return None if ring is None else DriverStatus(JobSize(ring, ring, ring), ring)


def test_a_round_asks_each_jobs_driver_once(tmp_path: Path) -> None:
    cluster = Counted(capacity=8)
    engine = PolicyEngine(load_job_policy("static"), load_arbiter("fair-share"))
    c = ControllerService(ControllerStore(tmp_path / "c.db"), engine, cluster, interval=1, capacity=8)
    c.job_submitted("a", 1, 4, 2)
    c.job_submitted("b", 1, 4, 2)
    cluster.sizes.update(a=2, b=2)
    cluster.calls.clear()
    assert c.tick() == []
    assert sorted(cluster.calls) == ["a", "b"]
    assert c.job("a").state is JobState.RUNNING and c.job("a").workers == 2
