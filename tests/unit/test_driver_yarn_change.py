"""The driver on a worker count someone else gave YARN (``yarn app -flex``): within the job's limits it is the
operator's target, carried out by the resizer; outside, refused and YARN put back by the resizer, which the
refusal wakes. A read of YARN older than the driver's own last count is not taken for anyone's change."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pytest
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed

from submarine_elastic.elastic.driver import JobDriver
from submarine_elastic.elastic.ringhost import AgentHandle
from submarine_elastic.protocol.api import JobPhase, Limits, WorkerState
from submarine_elastic.yarn import ComponentStatus, ComponentTarget, ReconcileResult, ServiceStatus


@dataclass
class RecordingYarn:
    """Stands in for the YARN service: records the targets the driver sets; YARN has each one at once."""

    targets: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)

    def set_target(self, name: str, component: str, n: int, *, remove: Sequence[str] = ()) -> ComponentTarget:
        self.targets.append((n, tuple(remove)))
        return ComponentTarget(n, tuple(remove))

    def reconcile(self, name: str, component: str, n: int | None = None, *, timeout: float) -> ReconcileResult:
        n = self.targets[-1][0] if self.targets else 0
        names = tuple(f"worker-{i}" for i in range(n))
        return ReconcileResult(name, component, n, n, n, names, "STABLE", converged=True)


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

    def status(self, name: str) -> ServiceStatus:
        return ServiceStatus(name, "STABLE", components=(ComponentStatus("worker", "STABLE", self.desired),))


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
