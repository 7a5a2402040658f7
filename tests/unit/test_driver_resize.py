"""The driver holds its worker target and reconciles YARN with it, against recorded HTTP exchanges:
a flex the ResourceManager does not take is sent again until YARN has it, and meanwhile the job's
status says why; a scale-in that keeps rank 0 removes its leavers by name."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
import responses
from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

from submarine_elastic.elastic import yarnsync
from submarine_elastic.elastic.driver import JobDriver
from submarine_elastic.elastic.reconcile import first_ring_ready
from submarine_elastic.elastic.ringhost import AgentHandle, AgentRegistry
from submarine_elastic.protocol.api import JobPhase, Limits, WorkerState
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.yarn import ComponentTarget, YarnServiceClient

RM = "http://rm.test:8088"
SERVICE = f"{RM}/app/v1/services/job"
FLEX = f"{SERVICE}/components/worker"


class FakeClock:
    """Monotonic time that moves only when the YARN client sleeps between reads."""

    def __init__(self) -> None:
        self.now = 0.0

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def service(workers: list[str], desired: int | None = None, decommissioned: list[str] | None = None) -> dict:
    return {
        "name": "job",
        "state": "STABLE",
        "components": [
            {
                "name": "worker",
                "state": "STABLE",
                "number_of_containers": len(workers) if desired is None else desired,
                "decommissioned_instances": decommissioned or [],
                "containers": [
                    {"id": f"container_1_0001_01_{i:06d}", "state": "READY", "component_instance_name": name}
                    for i, name in enumerate(workers)
                ],
            }
        ],
    }


@pytest.fixture()
def rsps() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        yield mock


@pytest.fixture()
def driver() -> Iterator[JobDriver]:
    clock = FakeClock()
    yarn = YarnServiceClient(RM, user="alice", auth="simple", retries=0, clock=clock.time, sleep=clock.sleep)
    with yarn:
        driver = JobDriver("job", Limits(2, 1, 3), yarn, token=None, iface="lo", elastic_timeout=60)
        driver.phase = JobPhase.RUNNING  # a job that trains: its ring formed
        yield driver


def status(driver: JobDriver) -> pb.JobStatus:
    return driver.servicer.Status(pb.StatusRequest(), None)  # type: ignore[arg-type]


def sent(rsps: responses.RequestsMock) -> list[tuple[str, int]]:
    return [(c.request.method, c.response.status_code) for c in rsps.calls]  # type: ignore[union-attr]


def test_a_flex_the_rm_refuses_is_held_and_sent_again_until_yarn_has_it(
    driver: JobDriver, rsps: responses.RequestsMock
) -> None:
    driver.resizer.resize(pb.Target(workers=3, reason="test"))
    assert driver.yarn.target("job", "worker") == ComponentTarget(3)
    assert len(rsps.calls) == 0  # recorded: the resizer's reconciliation sends it

    # The RM is unavailable for the whole first slice: every flex is answered 503.
    rsps.get(SERVICE, json=service(["worker-0", "worker-1"]))
    rsps.put(FLEX, status=503, json={"diagnostics": "ResourceManager is in standby"})
    driver.sync.reconcile()
    assert {c.request.method for c in rsps.calls} == {"GET", "PUT"}
    assert all(json.loads(c.request.body) == {"number_of_containers": 3} for c in rsps.calls if c.request.body)
    first = status(driver)
    assert first.target == 3
    assert first.error.startswith("YARN does not have the resize to 3 workers yet: timed out after 10s")
    assert "HTTP 503" in first.error and "ResourceManager is in standby" in first.error

    # The RM is back: the same target is sent again and YARN converges.
    rsps.reset()
    rsps.get(SERVICE, json=service(["worker-0", "worker-1"]))
    rsps.put(FLEX, json={"diagnostics": "Updating component (worker) size from 2 to 3"})
    rsps.get(SERVICE, json=service(["worker-0", "worker-1", "worker-2"]))
    driver.sync.reconcile()
    assert sent(rsps) == [("GET", 200), ("PUT", 200), ("GET", 200)]
    assert json.loads(rsps.calls[1].request.body) == {"number_of_containers": 3}
    assert driver.sync.result is not None and driver.sync.result.converged
    assert status(driver).error == ""


def test_a_flex_that_cannot_connect_is_reported_then_converges(driver: JobDriver, rsps: responses.RequestsMock) -> None:
    driver.resizer.resize(pb.Target(workers=3, reason="test"))
    rsps.get(SERVICE, json=service(["worker-0", "worker-1"]))
    rsps.put(FLEX, body=requests.ConnectionError("connection refused"))
    driver.sync.reconcile()
    assert "ResourceManager at http://rm.test:8088 unreachable" in status(driver).error

    rsps.reset()
    rsps.get(SERVICE, json=service(["worker-0", "worker-1"]))
    rsps.put(FLEX, json={"diagnostics": "ok"})
    rsps.get(SERVICE, json=service(["worker-0", "worker-1", "worker-2"]))
    driver.sync.reconcile()
    assert driver.sync.result is not None and driver.sync.result.converged and status(driver).error == ""


def until(done: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll ``done`` every 50 ms for up to ``timeout`` s; fail naming ``what`` if it never holds."""
    retrying = Retrying(stop=stop_after_delay(timeout), wait=wait_fixed(0.05), retry=retry_if_result(lambda ok: not ok))
    try:
        retrying(done)
    except RetryError as exc:
        raise AssertionError(f"{what} within {timeout} s") from exc


def test_the_resizer_keeps_the_target_through_a_refused_flex_and_converges_on_its_own(
    driver: JobDriver, rsps: responses.RequestsMock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(yarnsync, "RECONCILE_PAUSE_S", 0.05)
    rsps.get(SERVICE, json=service(["worker-0", "worker-1"]))
    refused = rsps.put(FLEX, status=503, json={"diagnostics": "ResourceManager is in standby"})
    threading.Thread(target=driver.resizer.loop, daemon=True, name="resizer").start()
    driver.targets.take(pb.Target(workers=3, reason="test"), driver.limits, None, ())
    until(lambda: refused.call_count > 0 and driver.sync.result is not None, "a refused flex")
    assert "HTTP 503" in status(driver).error

    # The RM takes flexes again: the resizer, which kept the target, gets YARN there by itself.
    rsps.replace(responses.PUT, FLEX, json={"diagnostics": "ok"})
    rsps.replace(responses.GET, SERVICE, json=service(["worker-0", "worker-1", "worker-2"]))
    until(lambda: driver.sync.result is not None and driver.sync.result.converged, "YARN at the target")
    assert status(driver).error == "" and not driver.sync.reconciling


def warm(driver: JobDriver, instance: str) -> AgentHandle:
    agent = AgentHandle(f"c-{instance}", instance, f"container-{instance}", "127.0.0.1")
    driver.registry.add(agent)
    driver.registry.move(agent.agent_id, WorkerState.WARM)
    return agent


def test_a_scale_in_that_keeps_a_lower_instance_removes_the_leaver_by_name(
    driver: JobDriver, rsps: responses.RequestsMock
) -> None:
    agents = [warm(driver, f"worker-{i}") for i in range(3)]
    driver.targets.applied(3, "three workers")
    resize = threading.Thread(
        target=driver.resizer.resize, args=(pb.Target(workers=2, remove=["worker-0"], reason="test"),)
    )
    resize.start()
    leave = agents[0].commands.get(timeout=10)
    assert leave.WhichOneof("command") == "leave"
    assert status(driver).workers[0].state == pb.WORKER_LEAVING
    driver.registry.end(agents[0], 0)  # its training process left cleanly
    resize.join(10)
    assert not resize.is_alive()
    assert driver.yarn.target("job", "worker") == ComponentTarget(2, ("worker-0",))
    states = [w.state for w in status(driver).workers]
    assert states == [pb.WORKER_EXITED, pb.WORKER_WARM, pb.WORKER_WARM]  # LEFT reads exited

    rsps.get(SERVICE, json=service(["worker-0", "worker-1", "worker-2"]))
    rsps.put(SERVICE, json={"diagnostics": "ok"})
    rsps.get(SERVICE, json=service(["worker-1", "worker-2"], decommissioned=["worker-0"]))
    driver.sync.reconcile()
    assert [(c.request.method, c.request.url.split("?")[0]) for c in rsps.calls] == [
        ("GET", SERVICE),
        ("PUT", SERVICE),
        ("GET", SERVICE),
    ]
    body: Any = json.loads(rsps.calls[1].request.body)
    assert body == {"components": [{"name": "worker", "decommissioned_instances": ["worker-0"]}]}
    assert driver.sync.result is not None and driver.sync.result.converged


def test_horovod_is_offered_no_warm_worker_beyond_the_target_and_never_loses_a_ring_member_to_it(
    driver: JobDriver,
) -> None:
    """Seen in CI: after a scale-in to 2, a container YARN started late for a removed instance warmed up and was
    offered to Horovod, which re-formed the ring at 3 and, once YARN stopped it, at 2 again."""
    ring = [warm(driver, f"worker-{i}") for i in (0, 2)]
    for agent in ring:
        driver.registry.move(agent.agent_id, WorkerState.RUNNING)
    late = warm(driver, "worker-4")
    driver.targets.applied(2, "scale-in")
    assert driver.registry.find_available_hosts_and_slots() == {"c-worker-0": 1, "c-worker-2": 1}
    driver.targets.applied(3, "scale-out")  # wanted again: it joins
    assert driver.registry.find_available_hosts_and_slots() == {"c-worker-0": 1, "c-worker-2": 1, late.agent_id: 1}
    driver.targets.applied(1, "scale-in")  # before the resizer withdraws a leaver, the ring stays as it is
    assert driver.registry.find_available_hosts_and_slots() == {"c-worker-0": 1, "c-worker-2": 1}


def test_a_job_whose_service_is_gone_stops_reconciling(driver: JobDriver, rsps: responses.RequestsMock) -> None:
    driver.resizer.resize(pb.Target(workers=3, reason="test"))
    rsps.get(SERVICE, status=404, json={"diagnostics": "Service job not found"})
    driver.sync.reconcile()
    assert not driver.sync.reconciling
    assert len(rsps.calls) == 1


@pytest.mark.parametrize(
    ("warm", "live", "waited_s", "unchanged_s", "ready"),
    [
        (3, 3, 0.5, 0.5, True),  # the target is warm
        (2, 2, 6.0, 6.0, True),  # every container YARN started is warm, none came for 6 s: the cluster is full
        (2, 2, 6.0, 4.0, False),  # a container came 4 s ago: YARN may still be placing the rest
        (2, 3, 20.0, 15.0, False),  # a worker still warms up: wait for it
        (2, 3, 31.0, 25.0, True),  # at the latest after 30 s with at least --min_workers
        (0, 0, 60.0, 60.0, False),  # below --min_workers: never
    ],
)
def test_the_first_ring_forms_without_waiting_for_containers_yarn_has_not_placed(
    warm: int, live: int, waited_s: float, unchanged_s: float, ready: bool
) -> None:
    assert (
        first_ring_ready(warm=warm, live=live, target=3, minimum=1, waited_s=waited_s, unchanged_s=unchanged_s) is ready
    )


def test_the_first_ring_wait_returns_once_the_target_is_warm_and_none_after_its_timeout() -> None:
    registry = AgentRegistry()
    stop = threading.Event()
    assert registry.await_first_ring(lambda: 1, 1, 0.05, stop) is None  # nobody came
    agent = AgentHandle("a0", "worker-0", "c0", "h")
    registry.add(agent)
    registry.move("a0", WorkerState.WARM)
    settled = registry.await_first_ring(lambda: 1, 1, 5.0, stop)
    assert settled is not None and settled >= 0.0
    stop.set()
    assert registry.await_first_ring(lambda: 2, 2, 5.0, stop) is not None  # stopped: the caller ends the job
