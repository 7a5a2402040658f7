"""A worker whose container YARN lost with its NodeManager is evicted by the job's driver.

When the ResourceManager declares a NodeManager LOST, the service's ApplicationMaster lists that node's
containers STOPPED and relaunches their instances elsewhere, while the old containers' processes may live on
and stay in the ring. The driver reads the worker component from YARN (a stand-in backend here) and stops
such an agent, withdraws it from discovery and records why; it evicts nobody on less than YARN's word.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from types import SimpleNamespace

import pytest
from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

from submarine_elastic.elastic import jobdriver as driver_mod
from submarine_elastic.elastic.driver import JobDriver
from submarine_elastic.elastic.ringhost import LOST_EXIT, AgentHandle
from submarine_elastic.elastic.yarnsync import replaced_by_yarn
from submarine_elastic.protocol.api import JobPhase, Limits, WorkerState
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.yarn import (
    ComponentStatus,
    ComponentTarget,
    ContainerStatus,
    ReconcileResult,
    RMUnreachableError,
    ServiceBackend,
    ServiceState,
    ServiceStatus,
)

OLD = "container_e01_1700000000000_0001_01_000004"  # worker-1 on the NodeManager that was lost
NEW = "container_e01_1700000000000_0001_01_000007"  # worker-1 relaunched on the other one
W0 = "container_e01_1700000000000_0001_01_000003"


def container(cid: str, instance: str, state: str, host: str = "node-a") -> ContainerStatus:
    return ContainerStatus(id=cid, state=state, component_instance_name=instance, bare_host=host)


class StandInYarn(ServiceBackend):
    """Answers ``status`` with the worker containers it is given (or raises what it is given)."""

    def __init__(self) -> None:
        self.answers: list[Sequence[ContainerStatus] | Exception] = []
        self.reads = 0

    def status(self, name: str) -> ServiceStatus:
        self.reads += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        worker = ComponentStatus(name="worker", state="STABLE", number_of_containers=2, containers=tuple(answer))
        return ServiceStatus(name=name, state=ServiceState.STABLE, components=(worker,))

    def set_target(self, name: str, component: str, n: int, *, remove: Sequence[str] = ()) -> ComponentTarget:
        raise AssertionError("the eviction resizes nothing")

    def target(self, name: str, component: str) -> ComponentTarget | None:
        return None

    def reconcile(
        self, name: str, component: str, n: int | None = None, *, timeout: float, give_way: object = None
    ) -> ReconcileResult:
        raise AssertionError("the eviction reconciles nothing")

    def ready_instances(self, name: str, component: str) -> list[ContainerStatus]:
        raise AssertionError("not used")


def attached(driver: JobDriver, instance: str, cid: str, state: WorkerState) -> AgentHandle:
    agent = AgentHandle(f"{cid}-4242", instance, cid, "node-a", state=state, joined=state is not WorkerState.ATTACHED)
    driver.registry.add(agent)
    return agent


def commands(agent: AgentHandle) -> list[str]:
    sent = []
    while not agent.commands.empty():
        command = agent.commands.get_nowait()
        sent.append(command.WhichOneof("command") if command is not None else "end")
    return sent


@pytest.fixture()
def driver() -> JobDriver:
    driver = JobDriver("job", Limits(2, 1, 3), StandInYarn(), token=None, iface="lo", elastic_timeout=60)
    driver.phase = JobPhase.RUNNING
    return driver


@pytest.fixture()
def ring(driver: JobDriver) -> tuple[AgentHandle, AgentHandle, AgentHandle]:
    """worker-0 and the old worker-1 train in the ring (ranks 0 and 1); worker-1's relaunch is warm."""
    w0 = attached(driver, "worker-0", W0, WorkerState.RUNNING)
    old = attached(driver, "worker-1", OLD, WorkerState.RUNNING)
    new = attached(driver, "worker-1", NEW, WorkerState.WARM)
    driver._hvd = SimpleNamespace(
        host_assignments={w0.agent_id: [SimpleNamespace(rank=0)], old.agent_id: [SimpleNamespace(rank=1)]},
        world_size=lambda: 2,
    )
    return w0, old, new


def test_an_agent_whose_container_yarn_lists_stopped_and_relaunched_is_stopped_and_leaves_the_ring(
    driver: JobDriver, ring: tuple[AgentHandle, AgentHandle, AgentHandle]
) -> None:
    w0, old, new = ring
    listed = (
        container(W0, "worker-0", "READY", "node-b"),
        container(OLD, "worker-1", "STOPPED", "node-a"),
        container(NEW, "worker-1", "RUNNING_BUT_UNREADY", "node-b"),
    )
    assert driver._evict_orphans(listed) == [old]

    assert commands(old) == ["stop"] and commands(w0) == [] and commands(new) == []
    # Withdrawn from discovery: Horovod is offered worker-0 and the relaunched worker-1, not the orphan.
    assert driver.registry.find_available_hosts_and_slots() == {w0.agent_id: 1, new.agent_id: 1}
    (failure,) = driver.failures
    assert (failure.instance, failure.container_id, failure.rank) == ("worker-1", OLD, 1)
    assert failure.reason == (
        f"worker-1's container {OLD} was lost with its NodeManager on node-a: YARN counts it STOPPED and "
        f"relaunched worker-1 in container {NEW}; its agent still ran and was stopped, out of the ring"
    )
    status = driver.servicer.Status(pb.StatusRequest(), None)
    assert [(w.container_id, w.state) for w in status.workers if w.instance == "worker-1"] == [
        (OLD, pb.WORKER_LEAVING),
        (NEW, pb.WORKER_WARM),
    ]
    assert [f.reason for f in status.failures] == [failure.reason]

    # The next round finds it leaving: nothing is sent or recorded twice.
    assert driver._evict_orphans(listed) == []
    assert commands(old) == [] and len(driver.failures) == 1

    # Its process ends (Stop): it is counted out as having left, with no second failure.
    driver.servicer.read_events(
        old, old.commands, iter([pb.AgentEvent(exited=pb.Exited(exit_code=-15, leaving=True, joined=True))])
    )
    assert old.state is WorkerState.LEFT and len(driver.failures) == 1


def test_an_agent_whose_container_yarn_replaced_is_evicted_though_yarn_no_longer_lists_it(
    driver: JobDriver, ring: tuple[AgentHandle, AgentHandle, AgentHandle]
) -> None:
    w0, old, new = ring
    listed = (container(W0, "worker-0", "READY"), container(NEW, "worker-1", "READY", "node-b"))
    assert driver._evict_orphans(listed) == [old]
    assert commands(old) == ["stop"]
    assert "YARN counts it gone and relaunched worker-1 in container " + NEW in driver.failures[0].reason
    # Without YARN's placement of the old container, the host is the one its agent reported.
    assert "lost with its NodeManager on node-a:" in driver.failures[0].reason


@pytest.mark.parametrize(
    "listed",
    [
        # The ApplicationMaster lists nothing (it is recovering its containers after a restart).
        (),
        # worker-1's relaunch attached before the ApplicationMaster listed its new container: the old one is
        # still listed STOPPED, the new one not yet at all.
        (container(W0, "worker-0", "READY"), container(OLD, "worker-1", "STOPPED")),
        # A read older than the relaunch lists worker-1 in its earlier container: never a successor.
        (container(W0, "worker-0", "READY"), container(OLD, "worker-1", "READY")),
    ],
    ids=["nothing-listed", "relaunch-not-listed-yet", "earlier-container-listed"],
)
def test_nobody_is_evicted_without_yarns_word(driver: JobDriver, listed: tuple[ContainerStatus, ...]) -> None:
    w0 = attached(driver, "worker-0", W0, WorkerState.RUNNING)
    new = attached(driver, "worker-1", NEW, WorkerState.ATTACHED)
    assert driver._evict_orphans(listed) == []
    assert commands(w0) == [] and commands(new) == [] and driver.failures == []
    assert driver.registry.find_available_hosts_and_slots() == {w0.agent_id: 1}


def test_leaving_and_ended_agents_are_left_alone(driver: JobDriver) -> None:
    leaver = attached(driver, "worker-2", "container_e01_1700000000000_0001_01_000009", WorkerState.LEAVING)
    ended = attached(driver, "worker-1", OLD, WorkerState.EXITED)
    listed = (container(W0, "worker-0", "READY"), container(NEW, "worker-1", "READY"))
    assert driver._evict_orphans(listed) == []
    assert commands(leaver) == [] and commands(ended) == [] and driver.failures == []


def test_an_orphan_not_yet_warm_is_told_to_stop_until_its_process_ends_and_recorded_once(driver: JobDriver) -> None:
    orphan = attached(driver, "worker-1", OLD, WorkerState.ATTACHED)
    listed = (container(OLD, "worker-1", "STOPPED"),)
    assert driver._evict_orphans(listed) == [orphan]
    assert driver._evict_orphans(listed) == [orphan]
    assert commands(orphan) == ["stop", "stop"] and len(driver.failures) == 1
    assert driver.failures[0].rank == -1
    driver.registry.end(orphan, -15)
    assert driver._evict_orphans(listed) == []


def test_the_driver_reads_yarn_until_it_answers_and_then_evicts(
    driver: JobDriver, ring: tuple[AgentHandle, AgentHandle, AgentHandle], monkeypatch: pytest.MonkeyPatch
) -> None:
    w0, old, new = ring
    yarn = driver.yarn
    assert isinstance(yarn, StandInYarn)
    yarn.answers = [
        RMUnreachableError("GET /app/v1/services/job: ResourceManager unreachable"),
        # Read before the AM saw worker-1's container stop: it lists it READY; the relaunch's agent, attached
        # (in the fixture), is a later container, which an earlier one never evicts.
        [container(W0, "worker-0", "READY"), container(OLD, "worker-1", "READY")],
        [container(W0, "worker-0", "READY"), container(OLD, "worker-1", "STOPPED")],
    ]
    monkeypatch.setattr(driver_mod, "CONTAINER_CHECK_S", 0.01)
    watcher = threading.Thread(target=driver._watch_containers, daemon=True)
    watcher.start()
    try:
        Retrying(stop=stop_after_delay(10), wait=wait_fixed(0.02), retry=retry_if_result(lambda left: not left))(
            lambda: old.state is WorkerState.LEAVING
        )
    except RetryError as exc:
        raise AssertionError("the driver did not evict the orphan within 10 s") from exc
    finally:
        driver._fatal.set()
        watcher.join(timeout=5)
    assert not watcher.is_alive()
    assert yarn.reads >= 3 and commands(old) == ["stop"] and len(driver.failures) == 1
    assert commands(w0) == [] and commands(new) == []


# ------------------------------------------------------------------ the driver's own container

D_OLD = "container_e01_1700000000000_0001_01_000002"  # the driver on the NodeManager that was lost
D_NEW = "container_e01_1700000000000_0001_01_000009"  # the driver YARN runs now


def test_a_driver_that_yarn_replaced_knows_it_and_one_it_runs_does_not() -> None:
    assert replaced_by_yarn(D_OLD, (container(D_OLD, "driver-0", "READY"),)) == ""
    assert "counts this driver's container" in replaced_by_yarn(
        D_OLD, (container(D_OLD, "driver-0", "FAILED"), container(D_NEW, "driver-0", "READY"))
    )
    assert D_NEW in replaced_by_yarn(D_OLD, (container(D_NEW, "driver-0", "READY"),))
    assert replaced_by_yarn(D_OLD, ()) == ""  # no word from YARN: stays
    assert replaced_by_yarn("", (container(D_NEW, "driver-0", "READY"),)) == ""  # outside YARN


def test_agents_look_for_the_driver_yarn_runs_not_the_one_it_lost() -> None:
    from submarine_elastic.protocol.locate import driver_host

    lost = ContainerStatus(id=D_OLD, state="FAILED", component_instance_name="driver-0", ip="198.18.0.2")
    now = ContainerStatus(id=D_NEW, state="READY", component_instance_name="driver-0", ip="198.18.0.3")
    driver = ComponentStatus(name="driver", state="STABLE", number_of_containers=1, containers=(lost, now))
    assert driver_host(ServiceStatus(name="job", state=ServiceState.STABLE, components=(driver,))) == "198.18.0.3"


def test_an_agent_whose_stream_and_container_are_both_gone_counts_lost_at_once_not_as_a_leaver(
    driver: JobDriver, ring: tuple[AgentHandle, AgentHandle, AgentHandle], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen in CI: a host that died took worker-1's agent, whose stream the driver kept for its re-attach grace;
    YARN then listed its container gone, and the eviction marked it leaving, so its end at the grace's close was
    taken for a leaver's: it was recorded ready for the next ring, which formed with a place nobody took. Its
    stream and its container both gone, its process went with them: it counts lost at once."""
    monkeypatch.setattr(driver_mod, "REATTACH_GRACE_S", 3600.0)
    _w0, old, _new = ring
    driver.detach(old)
    assert old.stream_lost_at is not None and old.state is WorkerState.RUNNING  # in its grace
    listed = (container(W0, "worker-0", "READY"), container(OLD, "worker-1", "STOPPED"))
    assert driver._evict_orphans(listed) == [old]
    assert (old.state, old.exit_code, old.connected) == (WorkerState.EXITED, LOST_EXIT, False)  # lost: killed
    (failure,) = driver.failures
    assert failure.container_id == OLD and "was lost with its NodeManager" in failure.reason
