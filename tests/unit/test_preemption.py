"""A worker whose container YARN preempts (its NodeManager's SIGTERM, then SIGKILL after a delay) leaves the job
as on a scale-in: its agent tells the driver and has the training process leave at its next commit; the driver
withdraws it from the ring at once, counts no failure, lowers the target with the instance removed by name, and
grows back when capacity returns."""

from __future__ import annotations

import queue
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from horovod.runner.common.util.hosts import SlotInfo

from submarine_elastic.elastic import agent as agent_mod
from submarine_elastic.elastic.driver import JobDriver
from submarine_elastic.elastic.jobdriver import STOPPED_IN_RING_EXIT
from submarine_elastic.elastic.reconcile import Member, grow_back, stopped_by_the_scale_in, workers_that_fit
from submarine_elastic.elastic.ringhost import AgentHandle
from submarine_elastic.protocol.api import AgentState, JobPhase, Limits, WorkerState
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.protocol.records import WHOLE_JOB_LOST
from submarine_elastic.yarn import (
    ContainerState,
    ContainerStatus,
    NodeReport,
    QueueReport,
)
from tests.unit._driver_support import RecordingYarn

#: A training process that leaves when its agent sends anything (a Leave) on its channel.
LEAVES_WHEN_TOLD = (
    f"{sys.executable} -c \"import os, socket; s = socket.socket(fileno=int(os.environ['SUBMARINE_AGENT_FD'])); "
    "s.recv(1); print('left the ring')\""
)


def agent_in(state: AgentState, command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> agent_mod.Agent:
    monkeypatch.setenv("LOG_DIRS", str(tmp_path))
    monkeypatch.delenv("SUBMARINE_WORKDIR", raising=False)
    worker = agent_mod.Agent(command, "worker-2", "container-2", "host")
    worker._outbox = queue.Queue()
    worker.start_training()
    worker._state = state
    worker.joined = state is not AgentState.STARTING
    return worker


def drain(worker: agent_mod.Agent) -> list[str]:
    found = []
    assert worker._outbox is not None
    while not worker._outbox.empty():
        event = worker._outbox.get_nowait()
        if event is not None:
            found.append(event.WhichOneof("event"))
    return found


def test_on_sigterm_a_worker_in_the_ring_tells_the_driver_and_leaves_at_its_next_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = agent_in(AgentState.RUNNING, LEAVES_WHEN_TOLD, tmp_path, monkeypatch)
    started = time.monotonic()
    worker.leave_container(leave_s=10.0, stop_s=1.0)
    assert time.monotonic() - started < 5.0  # it left when told, not when stopped
    assert worker.state is AgentState.LEAVING
    code = worker.training.wait()
    exited = worker.exited(code).exited
    assert (exited.exit_code, exited.leaving, exited.stderr_tail) == (0, True, "")
    assert "left the ring" in (tmp_path / "training-1.log").read_text()
    assert drain(worker) == ["preempted"]
    # A Leave the driver sends after changes nothing: the process is going already.
    worker._handle(pb.AgentCommand(leave=pb.Leave()))
    worker.leave_container(leave_s=10.0)  # a second SIGTERM too
    assert worker.state is AgentState.EXITED


def test_a_process_that_does_not_leave_in_time_is_stopped_before_the_nodemanagers_sigkill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = agent_in(AgentState.RUNNING, "exec sleep 60", tmp_path, monkeypatch)
    started = time.monotonic()
    worker.leave_container(leave_s=0.5, stop_s=2.0)
    assert time.monotonic() - started < 3.0
    exited = worker.exited(worker.training.wait()).exited
    assert (exited.exit_code, exited.leaving) == (-15, True)


def test_a_process_that_never_joined_a_ring_is_stopped_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    worker = agent_in(AgentState.STARTING, "exec sleep 60", tmp_path, monkeypatch)
    worker.leave_container(leave_s=30.0, stop_s=2.0)
    assert worker.state is AgentState.STOPPING
    assert worker.exited(worker.training.wait()).exited.leaving
    assert worker._outbox is not None
    sent = worker._outbox.get_nowait()
    assert sent is not None and "the process is stopped" in sent.preempted.reason


def test_without_time_to_leave_the_process_is_stopped_at_once_and_the_driver_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A NodeManager kill delay under a second (Hadoop's default 250 ms): no time to reach a commit."""
    worker = agent_in(AgentState.RUNNING, "exec sleep 60", tmp_path, monkeypatch)
    started = time.monotonic()
    worker.leave_container(leave_s=0.0, stop_s=2.0)
    assert time.monotonic() - started < 1.0
    assert worker.exited(worker.training.wait()).exited.leaving
    assert drain(worker) == ["preempted"]


def test_a_container_stopped_after_its_process_left_tells_the_driver_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """YARN stops the container of a worker the driver removed (scale-in): that is no preemption."""
    worker = agent_in(AgentState.LEAVING, "true", tmp_path, monkeypatch)
    worker.exited(worker.training.wait())
    drain(worker)
    worker.leave_container(leave_s=3.0)
    assert worker.container_stopping.is_set()
    assert drain(worker) == []


def running_job(
    yarn: RecordingYarn, workers: int, limits: Limits, state_file: Path | None = None
) -> tuple[JobDriver, list[AgentHandle]]:
    driver = JobDriver(
        "job",
        limits,
        yarn,  # type: ignore[arg-type]
        token="t",
        iface="lo",
        elastic_timeout=60,
        queue="research",
        state_file=state_file,
    )
    driver.phase = JobPhase.RUNNING
    agents = []
    for i in range(workers):
        agent = AgentHandle(f"c-{i}", f"worker-{i}", f"container-{i}", "127.0.0.1")
        driver.registry.add(agent)
        driver.registry.move(agent.agent_id, WorkerState.WARM)
        driver.registry.move(agent.agent_id, WorkerState.RUNNING)
        agents.append(agent)
    return driver, agents


def test_the_driver_withdraws_a_preempted_worker_at_once_and_lowers_its_target_without_a_failure() -> None:
    yarn = RecordingYarn()
    driver, agents = running_job(yarn, 4, Limits(4, 1, 4))
    preempted = agents[1]
    driver.resizer.on_preempted(preempted, "SIGTERM from its NodeManager")
    assert preempted not in driver.registry.available()  # Horovod re-forms without it at its next commit
    assert preempted.state is WorkerState.LEAVING
    target = driver.targets.next(0)
    assert target is not None
    assert (target.workers, list(target.remove), target.reason) == (3, ["worker-1"], "preempted by YARN: worker-1")
    driver._note_exit(preempted, pb.Exited(exit_code=-15, joined=True))  # even a process the agent had to stop
    driver.registry.end(preempted, -15)
    driver.resizer.resize(target)
    # No Leave sent (the agent is leaving on its own), no failure, and YARN removes that very instance.
    assert preempted.commands.empty()
    assert not driver.failures and not driver._fatal.is_set()
    assert yarn.targets == [(3, ("worker-1",))]
    assert [e.reason for e in driver.targets.timeline] == ["preempted by YARN: worker-1"]
    status = driver.servicer.Status(pb.StatusRequest(), None)
    assert [(w.instance, w.preempted) for w in status.workers if w.preempted] == [("worker-1", True)]


def test_a_worker_the_driver_removes_is_not_taken_for_a_preempted_one() -> None:
    driver, agents = running_job(RecordingYarn(), 3, Limits(3, 1, 3))
    driver.registry.move(agents[2].agent_id, WorkerState.LEAVING)  # chosen by a scale-in
    driver.resizer.on_preempted(agents[2], "SIGTERM from its NodeManager")
    assert not agents[2].preempted and driver.targets.pending == 0


def test_a_worker_yarn_stops_while_it_brings_the_job_down_to_its_target_is_no_preemption() -> None:
    # Target 2, three workers: YARN allocated a container late for an earlier target of 3 and now stops one.
    driver, agents = running_job(RecordingYarn(), 3, Limits(2, 1, 3))
    driver.resizer.on_preempted(agents[2], "SIGTERM from its NodeManager")
    assert not agents[2].preempted and agents[2].state is WorkerState.LEAVING
    assert driver.targets.pending == 0 and driver.targets.workers == 2  # the target stays: no second stop


def test_a_worker_preempted_while_yarn_brings_the_job_down_to_its_target_is_a_preemption() -> None:
    # Target 2, three workers: YARN's flex down stops worker-2 (its highest-numbered); a SIGTERM to worker-0 is not
    # that scale-in but the scheduler taking worker-0's container.
    driver, agents = running_job(RecordingYarn(), 3, Limits(2, 1, 3))
    driver.resizer.on_preempted(agents[0], "SIGTERM from its NodeManager")
    assert agents[0].preempted and agents[0].state is WorkerState.LEAVING
    target = driver.targets.next(0)
    assert target is not None and (target.workers, list(target.remove)) == (1, ["worker-0"])


def test_yarn_stops_the_highest_numbered_workers_on_its_way_down_unless_the_driver_named_them() -> None:
    live = [Member(f"worker-{n}", n) for n in (0, 2, 10)]
    assert stopped_by_the_scale_in(live, 1, ()) == {"worker-10", "worker-2"}  # numbers, not names, in order
    assert stopped_by_the_scale_in(live, 2, ("worker-0",)) == {"worker-0"}
    assert stopped_by_the_scale_in(live, 3, ()) == set()


def test_at_its_minimum_a_preempted_worker_is_replaced_not_dropped() -> None:
    driver, agents = running_job(RecordingYarn(), 2, Limits(2, 2, 4))
    driver.resizer.on_preempted(agents[0], "SIGTERM from its NodeManager")
    target = driver.targets.next(0)
    assert target is not None and (target.workers, list(target.remove)) == (2, ["worker-0"])


def queue_report(pending: int = 0, used_mb: int = 0) -> QueueReport:
    return QueueReport(
        "research", "root.research", "RUNNING", 40.0, 100.0, 0.0, max_memory_mb=8192, max_vcores=8,
        used_memory_mb=used_mb, used_vcores=used_mb // 1024, pending_containers=pending,
    )  # fmt: skip


def node(free_mb: int) -> NodeReport:
    return NodeReport("n:1", "RUNNING", 4096, 4, free_mb, free_mb // 1024)


def test_workers_fit_only_while_nobody_waits_and_within_the_queues_maximum() -> None:
    nodes = [node(3072), node(2048)]
    assert workers_that_fit([queue_report()], nodes, 1024, 1, "research") == 5
    assert workers_that_fit([queue_report(pending=1)], nodes, 1024, 1, "research") == 0
    assert workers_that_fit([queue_report(used_mb=6144)], nodes, 1024, 1, "root.research") == 2
    assert workers_that_fit([], nodes, 2048, 1, None) == 2


@pytest.mark.parametrize(
    ("workers", "preempted_from", "fits", "expected"),
    [(2, 4, 1, 3), (2, 4, 5, 4), (2, 4, 0, None), (4, 4, 3, None), (2, None, 3, None)],
)
def test_a_preempted_job_grows_back_towards_its_target_before(
    workers: int, preempted_from: int | None, fits: int, expected: int | None
) -> None:
    assert grow_back(workers, preempted_from, fits) == expected


def test_the_driver_grows_back_when_capacity_returns_and_stops_at_its_target_before() -> None:
    yarn = RecordingYarn(free_queues=[queue_report(pending=1)], free_nodes=[node(4096)])
    driver, agents = running_job(yarn, 3, Limits(3, 1, 3))
    driver.resizer.on_preempted(agents[2], "SIGTERM from its NodeManager")
    taken = driver.targets.next(0)
    assert taken is not None
    driver.registry.end(agents[2], 0)
    driver.resizer.resize(taken)
    driver.sync.stop()
    driver.resizer.grow_back(1024, 1)  # prod still waits: nothing
    assert driver.targets.requested == 2
    yarn.free_queues = [queue_report()]
    driver.resizer.grow_back(1024, 1)
    grown = driver.targets.next(0)
    assert grown is not None and (grown.workers, grown.reason) == (3, "capacity returned after preemption")
    assert driver.resizer.preempted_from is None


def test_a_relaunched_driver_still_grows_back_to_the_target_before_the_preemption(tmp_path: Path) -> None:
    """The driver's container can be lost while its job is shrunk by a preemption: its successor grows back."""
    yarn = RecordingYarn(free_queues=[queue_report()], free_nodes=[node(4096)])
    state_file = tmp_path / "job.driver.json"
    driver, agents = running_job(yarn, 3, Limits(3, 1, 3), state_file)
    driver.resizer.on_preempted(agents[2], "SIGTERM from its NodeManager")
    taken = driver.targets.next(0)
    assert taken is not None
    driver.registry.end(agents[2], 0)
    driver.resizer.resize(taken)
    driver._persist()

    successor, _ = running_job(yarn, 2, Limits(3, 1, 3), state_file)
    assert successor.incarnation == 2 and successor.targets.workers == 2
    successor.resizer.grow_back(1024, 1)
    grown = successor.targets.next(0)
    assert grown is not None and (grown.workers, grown.reason) == (3, "capacity returned after preemption")


def test_at_its_minimum_a_preempted_worker_stays_in_the_ring_and_its_stop_is_a_lost_worker_for_horovod() -> None:
    yarn = RecordingYarn()
    driver, agents = running_job(yarn, 2, Limits(2, 2, 2))
    preempted = agents[0]
    driver.resizer.on_preempted(preempted, "SIGTERM from its NodeManager")
    # Withdrawn, the ring would wait for its replacement with the preempted process in it (the job hung).
    assert preempted in driver.registry.available() and preempted.preempted
    target = driver.targets.next(0)
    assert target is not None and (target.workers, list(target.remove)) == (2, ["worker-0"])
    driver._note_exit(preempted, pb.Exited(exit_code=-15, joined=True, leaving=True))  # its agent stopped it
    driver.registry.end(preempted, -15)
    driver.resizer.resize(target)
    assert yarn.targets == [(2, ("worker-0",))]  # replaced by name
    assert not driver.failures and not driver._fatal.is_set()
    # Horovod is told the process failed: the survivor rolls back to its last commit and re-forms with the
    # replacement (an exit code 0 would have Horovod end the job as finished).
    code, _ = driver._create_worker(SlotInfo("c-0", 0, 0, 0, 2, 1, 2), [threading.Event()])
    assert code == -15


def test_a_worker_yarn_stopped_that_leaves_its_ring_cleanly_is_never_the_jobs_success() -> None:
    # Its agent let it leave at its next commit (exit 0): to Horovod, a clean exit in the ring ends the job as
    # finished. It is told a failure instead, and the survivor re-forms with the replacement.
    driver, agents = running_job(RecordingYarn(), 2, Limits(2, 2, 2))
    driver.resizer.on_preempted(agents[0], "SIGTERM from its NodeManager")
    driver.registry.end(agents[0], 0)
    code, _ = driver._create_worker(SlotInfo("c-0", 0, 0, 0, 2, 1, 2), [threading.Event()])
    assert code == STOPPED_IN_RING_EXIT != 0
    assert not driver._fatal.is_set() and not driver.error


@pytest.mark.parametrize("exit_code", [0, -15])
@pytest.mark.parametrize("checkpoints", [None, "/shared/ckpt"])
def test_the_last_worker_yarn_stops_ends_a_job_without_checkpoints_saying_what_was_lost(
    checkpoints: str | None, exit_code: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `yarn app -flex JOB -component worker -1` at one worker (--min_workers 1): the driver puts YARN back, but
    # YARN stopped the container at once. A process that left cleanly had the job end SUCCEEDED; one its agent
    # stopped, with Horovod's exit codes as the reason.
    if checkpoints:
        monkeypatch.setenv("SUBMARINE_CHECKPOINT_PATH", checkpoints)
    else:
        monkeypatch.delenv("SUBMARINE_CHECKPOINT_PATH", raising=False)
    # Left at its commit (0), or stopped by its agent (-15): either way Horovod is told a failure.
    driver, agents = running_job(RecordingYarn(), 1, Limits(1, 1, 3))
    driver.resizer.on_preempted(agents[0], "SIGTERM from its NodeManager")
    driver.registry.end(agents[0], exit_code)
    code, _ = driver._create_worker(SlotInfo("c-0", 0, 0, 0, 1, 1, 1), [threading.Event()])
    assert code == (exit_code or STOPPED_IN_RING_EXIT)
    if checkpoints:  # the worker YARN starts in its place resumes from the checkpoint
        assert not driver._fatal.is_set() and not driver.error
    else:
        assert driver._fatal.is_set()
        assert driver.error.startswith(WHOLE_JOB_LOST) and "YARN stopped worker-0" in driver.error
        assert "--checkpoint_path" in driver.error


def test_an_exit_during_horovods_re_form_is_reported_after_it() -> None:
    driver, agents = running_job(RecordingYarn(), 2, Limits(2, 2, 2))
    forming = threading.Event()  # cleared: Horovod is forming a ring (waiting there for enough workers)
    driver._hvd = SimpleNamespace(  # type: ignore[assignment]
        _worker_registry=SimpleNamespace(_action_event=forming), has_rank_assignment=lambda host, slot: False
    )
    driver.registry.end(agents[1], -15)
    result: list[tuple[int, float]] = []
    worker = threading.Thread(
        target=lambda: result.append(driver._create_worker(SlotInfo("c-1", 1, 0, 1, 2, 1, 2), [threading.Event()]))
    )
    worker.start()
    worker.join(0.5)
    assert worker.is_alive() and not result  # recorded now, it would count in the next ring, which lacks it
    forming.set()
    worker.join(5)
    assert result and result[0][0] == -15


def test_a_preempted_worker_kept_in_its_ring_is_not_evicted_when_yarn_counts_its_container_ended() -> None:
    # YARN lists a preempted container FAILED while its agent still stops the process (seconds before its
    # SIGKILL): an eviction would withdraw it from a ring at --min_workers and list a lost NodeManager.
    driver, agents = running_job(RecordingYarn(), 2, Limits(2, 2, 2))
    driver.resizer.on_preempted(agents[1], "SIGTERM from its NodeManager")
    listed = (
        ContainerStatus(id="container-0", component_instance_name="worker-0", state=ContainerState.READY),
        ContainerStatus(id="container-1", component_instance_name="worker-1", state=ContainerState.FAILED),
    )
    assert driver._evict_orphans(listed) == []
    assert agents[1] in driver.registry.available() and not driver.failures


def test_only_a_worker_that_ended_its_training_on_its_own_counts_as_finished() -> None:
    # A job is SUCCEEDED only when a worker finished its training: Horovod also stops without an error when it
    # cannot form the next ring, and the workers it then stops exit cleanly.
    driver, agents = running_job(RecordingYarn(), 3, Limits(3, 1, 3))
    stop = threading.Event()
    stop.set()
    driver.registry.end(agents[0], 0)  # stopped by Horovod (its event set), cleanly
    driver._create_worker(SlotInfo("c-0", 0, 0, 0, 3, 1, 3), [stop])
    driver.resizer.on_preempted(agents[1], "SIGTERM from its NodeManager")  # YARN stopped it; it left cleanly
    driver.registry.end(agents[1], 0)
    driver._create_worker(SlotInfo("c-1", 0, 1, 1, 3, 1, 3), [threading.Event()])
    assert driver.finished_workers == set()
    driver.registry.end(agents[2], 0)  # its training ended on its own
    driver._create_worker(SlotInfo("c-2", 0, 2, 2, 3, 1, 3), [threading.Event()])
    assert driver.finished_workers == {agents[2].instance}
