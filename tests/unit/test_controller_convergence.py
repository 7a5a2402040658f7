"""When the controller counts a decision as applied (YARN's READY workers and the driver's ring both at its
size), what it says while it waits, when it calls a decision stalled, and what a restart does with a
resize still in flight."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from submarine_elastic.controller.api import (
    DecisionRecord,
    DecisionState,
    IllegalTransitionError,
    JobRecord,
    JobSize,
    JobSource,
    JobState,
)
from submarine_elastic.controller.service import ControllerService
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.policy import PolicyEngine, load_arbiter, load_job_policy
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from tests.unit.test_controller import Clock, FakeCluster

STALL_AFTER = 120.0


class Driving(FakeCluster):
    """A driver per job that takes a target at once (as an idle real one does) while YARN's READY workers
    (``ready``) and the ring (``sizes``) move only when the test moves them. ``targets`` is each driver's
    target; a job without one has no driver that answers."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.targets: dict[str, int] = {}
        self.ready: dict[str, int] = {}

    def start(self, job_id: str, workers: int) -> None:
        """The job runs with ``workers``: its driver, YARN and its ring agree."""
        self.targets[job_id] = self.ready[job_id] = self.sizes[job_id] = workers

    def set_target(self, job_id: str, target: pb.Target) -> None:
        workers = target.workers
        with self.lock:
            self.resizes.append((job_id, workers))
        if job_id in self.fail or job_id not in self.targets:
            raise RuntimeError(f"driver of {job_id} refused")
        self.targets[job_id] = workers

    def size(self, job_id: str) -> JobSize | None:
        if job_id not in self.targets:
            return None
        return JobSize(self.targets[job_id], self.sizes.get(job_id, 0), self.ready.get(job_id))


def controller(
    tmp_path: Path, cluster: FakeCluster, clock: Clock, policy: str = "greedy", db: str = "controller.db"
) -> ControllerService:
    engine = PolicyEngine(load_job_policy(policy), load_arbiter("fair-share"), cooldown_s=0)
    return ControllerService(
        ControllerStore(tmp_path / db),
        engine,
        cluster,
        interval=1,
        capacity=cluster.slots,
        clock=clock,
        stall_after=STALL_AFTER,
    )


def sent(c: ControllerService) -> DecisionRecord:
    """The job's latest decision once the controller has sent it (it may still be pending)."""
    assert c.wait_idle(10)
    [*_, last] = c.timeline("big")
    return last


def state(c: ControllerService) -> tuple[DecisionState, str | None]:
    last = c.decision("big")
    assert last is not None
    return last.state, last.progress


def shrinking(tmp_path: Path) -> tuple[Driving, Clock, ControllerService]:
    """``big`` holds the whole cluster of 4; ``small`` (2, fixed) arrives: big is told 4 -> 2."""
    cluster, clock = Driving(capacity=4), Clock()
    c = controller(tmp_path, cluster, clock)
    c.job_submitted("big", 1, 4, 4)
    cluster.start("big", 4)
    assert c.tick() == []
    clock.now += 10
    c.job_submitted("small", 2, 2, 2, elastic=False)
    [decision] = c.tick()
    assert (decision.job_id, decision.from_workers, decision.to_workers) == ("big", 4, 2)
    assert sent(c).state is DecisionState.PENDING
    assert cluster.targets["big"] == 2
    return cluster, clock, c


def test_a_decision_is_applied_only_once_yarn_and_the_ring_both_have_its_size(tmp_path: Path):
    cluster, clock, c = shrinking(tmp_path)
    assert state(c) == (DecisionState.PENDING, "YARN has 4 of 2; ring has 4 of 2")
    # The leavers left the ring at a commit; YARN still runs their containers.
    cluster.sizes["big"] = 2
    clock.now += 5
    c.tick()
    assert state(c) == (DecisionState.PENDING, "YARN has 4 of 2")
    assert c.job("big").workers == 2 and c.job("big").last_resize_at == 1010.0  # set when it was decided
    # YARN stopped one; a container of the ring fails and is relaunched: ring short, YARN right.
    cluster.ready["big"], cluster.sizes["big"] = 2, 1
    clock.now += 5
    c.tick()
    assert state(c) == (DecisionState.PENDING, "ring has 1 of 2")
    cluster.sizes["big"] = 2
    clock.now += 5
    c.tick()
    last = c.decision("big")
    assert last is not None and last.applied and last.progress is None and last.error is None
    job = c.job("big")
    assert (job.workers, job.target, job.last_resize_at) == (2, 2, clock.now)  # the cooldown starts when done
    assert cluster.resizes == [("big", 2)]


def test_the_pending_reason_is_shown_where_decisions_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from submarine_elastic.cli import controller as controller_cli
    from submarine_elastic.cli.main import cli

    cluster, clock, c = shrinking(tmp_path)
    cluster.sizes["big"] = 2
    clock.now += 5
    c.tick()
    c.store.close()
    monkeypatch.setenv("SUBMARINE_CONTROLLER_DIR", str(tmp_path))  # no controller runs: its store is read
    monkeypatch.setattr(controller_cli.console, "width", 200)  # one table row on one line
    history = CliRunner().invoke(cli, ["controller", "history", "big"], terminal_width=200)
    assert history.exit_code == 0, history.output
    [row] = [line for line in history.output.splitlines() if "pending" in line]
    assert "pending: YARN has 4 of 2" in row
    status = CliRunner().invoke(cli, ["controller", "status"], terminal_width=200)
    assert status.exit_code == 0, status.output
    [row] = [line for line in status.output.splitlines() if "big" in line]
    assert "4->2 (pending: YARN has 4 of 2): fair share: gives 2 to small" in row


def test_no_resize_is_stacked_on_one_still_converging(tmp_path: Path):
    cluster, clock, c = shrinking(tmp_path)
    c.job_finished("small")  # greedy wants all 4 back at once
    clock.now += 5
    assert c.tick() == [], "a second resize was sent while the first converges"
    assert cluster.resizes == [("big", 2)] and c.job("big").target == 2
    cluster.sizes["big"] = cluster.ready["big"] = 2
    clock.now += 5
    assert [(d.from_workers, d.to_workers) for d in c.tick()] == [(2, 4)]  # converged: the next one goes out
    assert c.timeline("big")[0].applied
    assert sent(c).to_workers == 4 and cluster.resizes == [("big", 2), ("big", 4)]


def test_a_decision_that_does_not_converge_in_time_is_stalled_not_applied(tmp_path: Path):
    cluster, clock, c = shrinking(tmp_path)
    cluster.sizes["big"] = 2  # the ring shrank; YARN never lets the containers go
    clock.now += STALL_AFTER - 1
    c.tick()
    assert state(c) == (DecisionState.PENDING, "YARN has 4 of 2")
    clock.now += 1
    c.tick()
    assert state(c) == (DecisionState.STALLED, "YARN has 4 of 2")
    assert not c.decision("big").applied  # type: ignore[union-attr]
    assert c.job("big").last_resize_at == 1010.0, "a stalled resize does not restart the cooldown"
    # A stalled resize holds no new one back: small leaves, big is grown again.
    c.job_finished("small")
    clock.now += 5
    assert [(d.from_workers, d.to_workers) for d in c.tick()] == [(2, 4)]
    last = sent(c)  # the resize thread has sent it (and noted its progress) before the timeline is read
    stalled, grow = c.timeline("big")
    assert stalled.state is DecisionState.STALLED and stalled.progress == "YARN has 4 of 2"
    assert last == grow and cluster.targets["big"] == 4


def test_a_stalled_decision_that_converges_late_is_applied(tmp_path: Path):
    cluster, clock, c = shrinking(tmp_path)
    clock.now += STALL_AFTER
    c.tick()
    assert state(c) == (DecisionState.STALLED, "YARN has 4 of 2; ring has 4 of 2")
    cluster.sizes["big"] = cluster.ready["big"] = 2
    clock.now += 5
    c.tick()
    assert state(c) == (DecisionState.APPLIED, None)


def test_a_decision_the_driver_refuses_fails_and_the_job_keeps_the_drivers_target(tmp_path: Path):
    cluster, clock = Driving(capacity=4), Clock()
    c = controller(tmp_path, cluster, clock)
    c.job_submitted("big", 1, 4, 2)
    cluster.start("big", 2)
    cluster.fail.add("big")
    c.tick()
    last = sent(c)
    assert last.state is DecisionState.FAILED and last.error == "driver of big refused"
    assert c.job("big").target == 2


def test_decision_states_move_one_way(tmp_path: Path):
    store = ControllerStore(tmp_path / "c.db")
    store.upsert_job(JobRecord("big", 1, 4, 2, 2, True, JobState.RUNNING, 1.0, JobSource.CLI))
    pending = store.add_decision(DecisionRecord("big", 2.0, 2, 4, "grow"))
    store.note_progress(pending, "YARN has 2 of 4")
    store.note_progress(pending, "YARN has 3 of 4", stalled=True)
    store.note_progress(pending, "YARN has 2 of 4")  # stalled stays stalled
    [record] = store.decisions("big")
    assert (record.state, record.progress) == (DecisionState.STALLED, "YARN has 2 of 4")
    store.finish_decision(pending, DecisionState.APPLIED)
    [record] = store.decisions("big")
    assert (record.state, record.progress, record.describe()) == (DecisionState.APPLIED, None, "applied")
    with pytest.raises(IllegalTransitionError, match="a decision applied has no progress"):
        store.note_progress(pending, "late")
    with pytest.raises(IllegalTransitionError, match="finished as applied or failed, not stalled"):
        store.finish_decision(pending, DecisionState.STALLED)
    with pytest.raises(ValueError, match="only a pending or stalled decision has progress"):
        DecisionRecord("big", 2.0, 2, 4, "grow", DecisionState.APPLIED, progress="YARN has 3 of 4")
    assert DecisionRecord("big", 2.0, 2, 4, "grow", progress="ring has 2 of 4").describe() == (
        "pending: ring has 2 of 4"
    )
    allowed = {
        (DecisionState.PENDING, DecisionState.APPLIED),
        (DecisionState.PENDING, DecisionState.FAILED),
        (DecisionState.PENDING, DecisionState.STALLED),
        (DecisionState.STALLED, DecisionState.APPLIED),
        (DecisionState.STALLED, DecisionState.FAILED),
    }
    for old in DecisionState:
        for new in DecisionState:
            if (old, new) in allowed:
                assert old.check(new) is new
            else:
                with pytest.raises(IllegalTransitionError, match=f"a decision {old} cannot become {new}"):
                    old.check(new)


# ----------------------------------------------------------------------------- restart


def growing_then_killed(tmp_path: Path) -> tuple[Driving, Clock]:
    """Capacity 6: ``big`` (1..4, greedy) at 2 is told 2 -> 4 (the driver took it; YARN has 3, the ring 2)
    beside ``other`` (2, fixed). Then the controller is killed: its store is all that is left."""
    cluster, clock = Driving(capacity=6), Clock()
    first = controller(tmp_path, cluster, clock, policy="static")
    first.job_submitted("big", 1, 4, 2, policy="greedy")
    first.job_submitted("other", 2, 2, 2, elastic=False)
    cluster.start("big", 2)
    cluster.start("other", 2)
    decided = first.tick()
    assert [(d.job_id, d.from_workers, d.to_workers) for d in decided] == [("big", 2, 4)]
    assert first.wait_idle(10)
    cluster.ready["big"] = 3
    first.store.close()
    return cluster, clock


def test_a_restart_adopts_the_resize_the_driver_took_and_sends_nothing_to_undo_it(tmp_path: Path):
    cluster, clock = growing_then_killed(tmp_path)
    assert cluster.resizes == [("big", 4)]
    clock.now += 30
    second = controller(tmp_path, cluster, clock, policy="static")
    assert second.job("big").target == 4, "the driver's target, not the ring the controller last read"
    last = second.decision("big")
    assert last is not None and (last.state, last.progress) == (
        DecisionState.PENDING,
        "YARN has 3 of 4; ring has 2 of 4",
    )
    # Rounds while it converges: greedy big is not resized again, and nothing is sent back to 2.
    for _ in range(3):
        clock.now += 5
        assert second.tick() == []
    assert cluster.resizes == [("big", 4)]
    assert cluster.targets == {"big": 4, "other": 2}
    cluster.ready["big"] = cluster.sizes["big"] = 4
    clock.now += 5
    second.tick()
    assert second.decision("big").applied  # type: ignore[union-attr]
    assert cluster.resizes == [("big", 4)]


def test_a_restart_fails_a_decision_the_driver_never_took_and_sends_it_no_other(tmp_path: Path):
    cluster, clock = Driving(capacity=4), Clock()
    first = controller(tmp_path, cluster, clock, policy="static")
    first.job_submitted("big", 1, 4, 2)
    cluster.start("big", 2)
    first.tick()
    # Recorded, then killed before the flex reached the driver.
    first.store.add_decision(DecisionRecord("big", clock.now, 2, 3, "probe"))
    first.store.update_job("big", target=3)
    first.store.close()
    clock.now += 30
    second = controller(tmp_path, cluster, clock, policy="static")
    last = second.decision("big")
    assert last is not None and last.state is DecisionState.FAILED
    assert last.error is not None and last.error.startswith("its driver's target is 2, not 3")
    assert second.job("big").target == 2
    second.tick()
    assert cluster.resizes == [] and cluster.targets["big"] == 2


def test_after_a_restart_a_job_whose_driver_does_not_answer_gets_no_resize_until_it_does(tmp_path: Path):
    cluster, clock = growing_then_killed(tmp_path)
    del cluster.targets["big"]  # its driver is restarting
    clock.now += 30
    second = controller(tmp_path, cluster, clock, policy="static")
    assert second.decision("big").state is DecisionState.PENDING  # type: ignore[union-attr]
    clock.now += 5
    assert second.tick() == []
    assert cluster.resizes == [("big", 4)]
    cluster.targets["big"] = 4  # back, still holding the target it took
    clock.now += 5
    second.tick()
    assert second.job("big").target == 4
    assert state(second) == (DecisionState.PENDING, "YARN has 3 of 4; ring has 2 of 4")
    assert cluster.resizes == [("big", 4)]


# ----------------------------------------------------------------------------- the backend on a real RM's API

RM = "http://rm.test:8088"


class Driver:
    """A job's driver as the backend's JobClient sees it: a status to return and the targets it was given."""

    def __init__(self, job: str, yarn: object, **_: object) -> None:
        self.targets: list[tuple[int, str]] = []
        self.reply: object = None
        DRIVERS[job] = self

    def status(self) -> object:
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply

    def set_target(self, target: object) -> None:
        self.targets.append((target.workers, target.reason))  # type: ignore[attr-defined]

    def close(self) -> None:
        pass


DRIVERS: dict[str, Driver] = {}


def test_the_backend_reads_the_drivers_target_ring_and_verdict_with_one_status_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from submarine_elastic.controller import backend as backend_module
    from submarine_elastic.protocol.api import DriverUnreachableError
    from submarine_elastic.protocol.proto import elastic_pb2 as pb

    monkeypatch.setattr(backend_module, "JobClient", Driver)
    backend = backend_module.YarnJobBackend(RM)
    backend.set_target("big", pb.Target(workers=3, reason="probe"))
    driver = DRIVERS["big"]
    assert driver.targets == [(3, "probe")], "one target, no waiting for the ring"
    # No call to the RM: YARN's READY workers are the driver's (it reconciles them), so a responses mock with
    # no route would fail any RM read.
    import responses

    with responses.RequestsMock():
        driver.reply = pb.JobStatus(job="big", phase=pb.JOB_RUNNING, target=3, world_size=2, yarn_ready=2)
        status = backend.status("big")
        assert status is not None and status.ring == 2 and status.batch_size is None  # the job's own batch
        seen = status.size
        assert seen == JobSize(target=3, ring=2, yarn_ready=2)
        assert seen.lag(3) == "YARN has 2 of 3; ring has 2 of 3"
        assert seen.lag(2) == "the driver's target is 3"  # YARN and the ring have 2: only the driver differs
        driver.reply = pb.JobStatus(
            job="big",
            phase=pb.JOB_RUNNING,
            target=1,
            world_size=3,
            workers=[pb.WorkerStatus(instance="worker-2", state=pb.WORKER_LEAVING, rank=2)],
            batch=pb.Target(workers=3, batch_size=256, version=2),
        )
        status = backend.status("big")
        assert status is not None and status.batch_size == 256  # the batch its driver set
        seen = status.size if status is not None else None
        assert seen is not None and seen.yarn_ready is None and seen.leaving == ("worker-2",)
        assert seen.lag(1) == "YARN's workers unknown; leaving: worker-2; ring has 3 of 1"
    driver.reply = DriverUnreachableError("driver of big: UNAVAILABLE")
    assert backend.status("big") is None
    backend.close()
