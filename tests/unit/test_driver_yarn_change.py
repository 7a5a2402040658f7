"""The driver on a worker count someone else gave YARN (``yarn app -flex``): within the job's limits it is the
operator's target, carried out by the resizer; outside, refused and YARN put back by the resizer, which the
refusal wakes. A read of YARN older than the driver's own last count is not taken for anyone's change."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from horovod.runner.common.util.hosts import SlotInfo
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from submarine_elastic.elastic.driver import JobDriver
from submarine_elastic.elastic.ringhost import AgentHandle
from submarine_elastic.protocol.api import JobPhase, Limits, WorkerState
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.yarn import ComponentStatus, ServiceStatus
from tests.unit._driver_support import RecordingYarn, ReformingRing


@pytest.fixture()
def yarn() -> RecordingYarn:
    return RecordingYarn()


@pytest.fixture()
def driver(yarn: RecordingYarn) -> Iterator[JobDriver]:
    job = JobDriver("job", Limits(2, 1, 3), yarn, token=None, iface="lo", elastic_timeout=60)  # type: ignore[arg-type]
    job.phase = JobPhase.RUNNING
    threading.Thread(target=job.resizer.loop, daemon=True, name="resizer").start()
    yield job


def worker(desired: int) -> ComponentStatus:
    return ComponentStatus("worker", "STABLE", desired)


def until(check: object, timeout: float = 10) -> None:
    Retrying(stop=stop_after_delay(timeout), wait=wait_fixed(0.05), retry=retry_if_result(lambda ok: not ok))(check)


def test_a_flex_within_the_limits_is_taken_versioned_and_applied(driver: JobDriver, yarn: RecordingYarn):
    change = driver.resizer.on_yarn(worker(3), driver.sync.generation)
    assert change is not None and change.target is not None
    until(lambda: driver.target == 3)
    assert driver.targets.version == 1
    assert driver.timeline[-1].reason == "flex through YARN: 2 -> 3 workers"
    until(lambda: yarn.targets == [(3, ())])  # the resizer confirms YARN's count
    assert driver.resizer.on_yarn(worker(3), driver.sync.generation) is None  # taken once


def test_a_flex_above_the_limits_is_refused_and_the_resizer_puts_yarn_back(driver: JobDriver, yarn: RecordingYarn):
    change = driver.resizer.on_yarn(worker(5), driver.sync.generation)
    assert change is not None and change.target is None
    until(lambda: yarn.targets == [(2, ())])
    assert driver.target == 2 and driver.targets.version == 0
    assert "5 is above the job's --max_workers 3; refused, YARN put back to 2" in driver.timeline[-1].reason
    until(lambda: not driver.sync.reconciling)


def test_a_read_older_than_the_drivers_own_count_is_not_an_operators_change(driver: JobDriver, yarn: RecordingYarn):
    stale = driver.sync.generation
    driver.sync.set_target(3)  # the driver's own resize, after YARN was read at 2
    driver.sync.stop()  # and YARN has it
    assert driver.resizer.on_yarn(worker(2), stale) is None
    assert driver.targets.version == 0


@dataclass
class FlexedYarn(RecordingYarn):
    """YARN flexed to ``desired`` workers by an operator: its worker component reports that count."""

    desired: int = 0
    decommissioned: tuple[str, ...] = ()

    def status(self, name: str) -> ServiceStatus:
        worker = ComponentStatus("worker", "STABLE", self.desired, decommissioned=self.decommissioned)
        return ServiceStatus(name, "STABLE", components=(worker,))


def test_a_worker_yarn_stops_for_an_operators_flex_down_leaves_as_on_a_scale_in_not_a_preemption():
    yarn = FlexedYarn(desired=1)
    job = JobDriver("job", Limits(3, 1, 3), yarn, token=None, iface="lo", elastic_timeout=60)  # type: ignore[arg-type]
    job.phase = JobPhase.RUNNING
    agents = []
    for i in range(3):
        agent = AgentHandle(f"c-{i}", f"worker-{i}", f"container-{i}", "127.0.0.1")
        job.registry.add(agent)
        job.registry.move(agent.agent_id, WorkerState.WARM)
        job.registry.move(agent.agent_id, WorkerState.RUNNING)
        agents.append(agent)
    # YARN stops its highest-numbered instances, worker-2 and worker-1; their SIGTERMs reach the driver.
    for stopped in (agents[2], agents[1]):
        job.resizer.on_preempted(stopped, "SIGTERM from its NodeManager")
        assert stopped.state is WorkerState.LEAVING and not stopped.preempted
    target = job.targets.next(0)
    assert target is not None
    assert (target.workers, sorted(target.remove)) == (1, ["worker-1", "worker-2"])
    assert target.reason == "flex through YARN: 3 -> 1 workers"
    assert job.targets.next(0) is None  # taken once, and no preemption lowered the target again
    assert job.resizer.preempted_from is None  # nothing grows back


def test_a_read_that_caught_a_decommission_half_written_is_read_again_before_it_is_taken():
    """Seen in CI: ``yarn app -decommission JOB -instances worker-0`` on a job at 2; the driver's read caught YARN's
    count lowered to 1 before worker-0 was listed decommissioned, took it for a flex down (whose leaver is
    worker-1, YARN's highest instance) while YARN stopped worker-0, and called worker-0 preempted. A count
    lowered with no instance named is read again first."""
    yarn = FlexedYarn(desired=1, decommissioned=("worker-0",))  # what YARN says once the decommission is written
    job = JobDriver("job", Limits(2, 1, 3), yarn, token=None, iface="lo", elastic_timeout=60)  # type: ignore[arg-type]
    job.phase = JobPhase.RUNNING
    for i in range(2):
        agent = AgentHandle(f"c-{i}", f"worker-{i}", f"container-{i}", "127.0.0.1")
        job.registry.add(agent)
        job.registry.move(agent.agent_id, WorkerState.WARM)
        job.registry.move(agent.agent_id, WorkerState.RUNNING)
    half_written = worker(1)  # the count lowered, worker-0 not yet listed
    change = job.resizer.on_yarn(half_written, job.sync.generation)
    assert change is not None and change.target is not None
    target = job.targets.next(0)
    assert target is not None
    assert (target.workers, list(target.remove)) == (1, ["worker-0"])
    assert target.reason == "decommission of worker-0 through YARN: 2 -> 1 workers"


def decommissioned_job(
    discovery_lag: float | None = None, *, heard: bool = True
) -> tuple[JobDriver, ReformingRing, list[AgentHandle]]:
    """A job at 2 workers (limits 1..3) in a ring of Horovod's stand-in (its discovery read every
    ``discovery_lag`` seconds, else when asked); worker-0 decommissioned through YARN, its agent's word of it
    (``Preempted``) taken by the driver when ``heard``."""
    yarn = FlexedYarn(desired=1, decommissioned=("worker-0",))
    job = JobDriver("job", Limits(2, 1, 3), yarn, token=None, iface="lo", elastic_timeout=60)  # type: ignore[arg-type]
    job.phase = JobPhase.RUNNING
    agents = []
    for i in range(2):
        agent = AgentHandle(f"c-{i}", f"worker-{i}", f"container-{i}", "127.0.0.1")
        job.registry.add(agent)
        job.registry.move(agent.agent_id, WorkerState.WARM)
        job.registry.move(agent.agent_id, WorkerState.RUNNING)
        agents.append(agent)
    ring = ReformingRing(["c-0", "c-1"], lambda: [a.agent_id for a in job.registry.available()], discovery_lag)
    job._hvd = ring  # type: ignore[assignment]
    if heard:
        job.resizer.on_preempted(agents[0], "SIGTERM from its NodeManager")
    return job, ring, agents


def reform_after_the_exit_of_worker_0(job: JobDriver, ring: ReformingRing) -> None:
    """The survivor (c-1) comes to the re-form at its next commit and waits there for every slot of its ring,
    while worker-0's exit is told to Horovod as the driver reports it (Horovod records it, or ignores a host no
    longer in the ring); returns once the ring re-formed."""
    survivor_reformed = threading.Thread(target=ring.record_ready, args=("c-1", 0))
    survivor_reformed.start()
    code, _ = job._create_worker(SlotInfo("c-0", 0, 0, 0, 2, 1, 2), [threading.Event()])
    ring.handle_exit("c-0", code)
    survivor_reformed.join(10)
    assert not survivor_reformed.is_alive(), "the ring did not re-form"


def test_a_decommissioned_worker_stopped_while_it_waited_for_its_slot_is_not_recorded_twice():
    # Its process asked for its slot in the next ring (recorded ready), then YARN's SIGKILL took the container.
    # Recorded again, it would fill the survivor's place at the re-form, which would go ahead without it.
    job, ring, (decommissioned, _) = decommissioned_job()
    asked = threading.Thread(target=ring.record_ready, args=("c-0", 0), daemon=True)
    asked.start()
    until(lambda: "c-0" in ring.states)
    job.detach(decommissioned)
    result: list[tuple[int, float]] = []
    exit_told = threading.Thread(
        target=lambda: result.append(job._create_worker(SlotInfo("c-0", 0, 0, 0, 2, 1, 2), [threading.Event()])),
        daemon=True,
    )
    exit_told.start()
    exit_told.join(0.5)
    assert exit_told.is_alive() and ring.rendezvous == 0  # it waits for the survivor, who has not come yet
    ring.record_ready("c-1", 0)
    exit_told.join(10)
    assert result and result[0][0] == 0 and ring.assigned == {"c-1"}
    ring.handle_exit("c-0", result[0][0])  # a host no longer in the ring: Horovod ignores it
    assert ring.states == {"c-0": "READY", "c-1": "READY"}
    assert not job.failures and not job._fatal.is_set()


def test_a_decommissioned_worker_whose_agent_went_before_the_re_form_leaves_without_a_failure():
    """`yarn app -decommission JOB -instances worker-0` on a job at 2 workers: YARN stops worker-0's container and
    its agent goes (the NodeManager's SIGKILL) before Horovod has re-formed the ring without it. Its exit told to
    Horovod then was a failure (its host blacklisted; once every host of a ring is, the job stopped); it leaves
    at the re-form instead, as on a scale-in, and the survivor trains on alone."""
    job, ring, (decommissioned, _) = decommissioned_job()
    assert decommissioned.state is WorkerState.LEAVING and not decommissioned.preempted
    job.detach(decommissioned)  # gone without a word, its process never asked for a slot in the next ring
    # The survivor comes to the re-form at its next commit, and waits there for every slot of its ring.
    reform_after_the_exit_of_worker_0(job, ring)
    assert ring.states == {"c-0": "READY", "c-1": "READY"}  # no failure, no success: Horovod blacklists nothing
    assert ring.assigned == {"c-1"}  # the new ring: the survivor alone
    assert not job.failures and not job._fatal.is_set() and not job.error
    target = job.targets.next(0)
    assert target is not None and target.reason == "decommission of worker-0 through YARN: 2 -> 1 workers"
    status = job.servicer.Status(pb.StatusRequest(), None)
    assert [w.instance for w in status.workers if w.rank >= 0] == ["worker-1"]
    assert not any(w.preempted for w in status.workers)


def test_a_withdrawn_worker_that_went_before_horovods_discovery_saw_it_go_gets_no_place_in_the_next_ring():
    """Horovod forms the next ring from the hosts its discovery thread last read (once a second). A worker
    withdrawn and gone at once (a flex through YARN whose container was stopped 40 ms after the withdrawal),
    recorded ready before that thread saw it gone, was given a place in the next ring: no process took it, and
    the ring waited in Gloo's rendezvous until every rank aborted. It is recorded once discovery has seen it
    go: the next ring is the survivor's alone."""
    job, ring, (decommissioned, _) = decommissioned_job(discovery_lag=1.0)  # Horovod's period
    try:
        job.detach(decommissioned)
        reform_after_the_exit_of_worker_0(job, ring)
        assert ring.assigned == {"c-1"}, "the next ring kept a place for the worker that went"
        assert ring.states == {"c-0": "READY", "c-1": "READY"}
        assert not job.failures and not job._fatal.is_set()
    finally:
        ring.stop()


def test_a_worker_that_left_on_request_unheard_by_the_driver_is_no_finished_training():
    """YARN stops worker-0's container (a decommission) and its agent has the process leave at its next commit;
    the agent's word of it (``Preempted``) never reached the driver (its stream was re-attaching), only the exit
    (code 0, ``leaving``). A clean exit of a worker the ring still counts was the job's success to Horovod, and
    "finished its training" to the driver: the job ended SUCCEEDED at the decommission. It is a leaver: it
    leaves at the re-form, and the survivor trains on."""
    job, ring, agents = decommissioned_job(heard=False)
    left = pb.AgentEvent(exited=pb.Exited(exit_code=0, leaving=True, joined=True))
    job.on_event(agents[0], left)
    assert agents[0].state is WorkerState.LEFT
    reform_after_the_exit_of_worker_0(job, ring)
    assert "SUCCESS" not in ring.states.values(), "a worker that left was told to Horovod as the job's success"
    assert ring.assigned == {"c-1"}
    assert not job.finished_workers
    assert not job.failures and not job._fatal.is_set()
