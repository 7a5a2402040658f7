"""Work-preserving restarts against real daemons: a YARN service keeps its containers (same ids, same
processes) across a ``kill -9`` of the ResourceManager or of a NodeManager followed by ``submarine cluster
restart``, and the Services API answers for it again.

The module runs a cluster of its own (ports ``SUBMARINE_TEST_PORT_BASE`` + 300), so the session's cluster
that other tests share is never restarted. Each test prints how long recovery took, from the fault to the
Services API reporting the service STABLE with its containers.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import psutil
import pytest
import requests
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import ClusterSpec, LocalCluster
from submarine_elastic.cluster.api import Daemon
from submarine_elastic.yarn import (
    Component,
    Resource,
    RestartPolicy,
    Service,
    ServiceState,
    ServiceStatus,
    YarnError,
    YarnServiceClient,
)
from tests.integration.conftest import AS_USER, PORT_BASE, container_processes, eventually, own_cluster

pytestmark = pytest.mark.integration

NAME = "survivor"
WORKERS = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    spec = ClusterSpec(nodes=2, node_memory_mb=2048, node_vcores=4, port_base=PORT_BASE + 300)
    with own_cluster(tmp_path_factory, "recovery-cluster", spec) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def spec(cluster: LocalCluster) -> ClusterSpec:
    return cluster.spec()


@pytest.fixture(scope="module")
def yarn(spec: ClusterSpec) -> Iterator[YarnServiceClient]:
    # No retries: while a daemon is down a request fails at once, and the tests poll.
    with YarnServiceClient(spec.rm_url, user="tester", poll_interval=0.5, retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def service(yarn: YarnServiceClient) -> Iterator[str]:
    worker = Component(
        name="worker",
        number_of_containers=WORKERS,
        launch_command="sleep 900",
        resource=Resource(cpus=1, memory="256"),
        restart_policy=RestartPolicy.ALWAYS,
    )
    yarn.create(Service(name=NAME, version="1", components=[worker]), wait=True, timeout=240)
    yield NAME
    yarn.destroy(NAME, missing_ok=True, timeout=120)


def restart(cluster: LocalCluster, name: str) -> str:
    """``submarine cluster restart NAME``, as an operator types it; a non-zero exit fails the test."""
    result = CliRunner().invoke(
        cli, ["cluster", "restart", name, "--cluster-dir", str(cluster.dir)], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return result.output


def daemon(cluster: LocalCluster, name: str) -> Daemon:
    return next(d for d in cluster.running_daemons() if d.name == name)


def workers(yarn: YarnServiceClient) -> dict[str, str]:
    """READY worker instances -> container id, as the Services API reports them."""
    return {c.component_instance_name: c.id for c in yarn.ready_instances(NAME, "worker")}


def stable_with(yarn: YarnServiceClient, expected: dict[str, str]) -> ServiceStatus | None:
    """The service's status once the Services API answers STABLE with exactly the ``expected`` workers."""
    try:
        status = yarn.status(NAME)
        ready = workers(yarn)
    except YarnError:  # the RM or the AM is not back yet
        return None
    return status if status.state == ServiceState.STABLE and ready == expected else None


def attempts(spec: ClusterSpec, app_id: str) -> list[tuple[str, str]]:
    """The application's attempts as the RM knows them: (attempt id, AM container id)."""
    raw = requests.get(f"{spec.rm_url}/ws/v1/cluster/apps/{app_id}/appattempts", params=AS_USER, timeout=10).json()
    return [(a["appAttemptId"], a["containerId"]) for a in raw["appAttempts"]["appAttempt"]]


def nm_containers(spec: ClusterSpec, index: int) -> dict[str, str]:
    """Container id -> state as NodeManager ``index`` itself reports them (its own REST API)."""
    port = spec.nm_ports(index)["yarn.nodemanager.webapp.address"]
    raw = requests.get(
        f"http://{spec.host}:{port}/ws/v1/node/containers",
        params=AS_USER,
        timeout=5,
        headers={"Accept": "application/json"},
    ).json()
    return {c["id"]: c["state"] for c in (raw.get("containers") or {}).get("container") or []}


def answers(url: str) -> bool:
    try:
        requests.get(url, timeout=2)
    except requests.ConnectionError:
        return False
    return True


def report(capsys: pytest.CaptureFixture[str], fault: str, **seconds: float) -> None:
    """Print the recovery times past pytest's capture, so that every run shows them."""
    times = ", ".join(f"{what.replace('_', ' ')} {s:.1f} s" for what, s in seconds.items())
    with capsys.disabled():
        print(f"\n    recovery from {fault}: {times}")


def test_restarting_an_unknown_daemon_is_refused_by_name(cluster: LocalCluster):
    before = {d.name: d.pid for d in cluster.running_daemons()}
    for name in ("nm-2", "resourcemanager"):
        result = CliRunner().invoke(cli, ["cluster", "restart", name, "--cluster-dir", str(cluster.dir)])
        assert result.exit_code == 1, result.output
        assert f"unknown daemon '{name}': this cluster's daemons are zk, rm, nm-0, nm-1" in result.output
    assert {d.name: d.pid for d in cluster.running_daemons()} == before


def test_zookeeper_restarts_under_a_running_service(
    cluster: LocalCluster, yarn: YarnServiceClient, service: str, capsys: pytest.CaptureFixture[str]
):
    before = workers(yarn)
    assert len(before) == WORKERS
    old = daemon(cluster, "zk")
    started = time.monotonic()
    restart(cluster, "zk")
    healthy = time.monotonic() - started
    assert daemon(cluster, "zk").pid != old.pid
    eventually(lambda: stable_with(yarn, before), "the service STABLE with its workers", 60)
    report(capsys, "cluster restart zk", cluster_healthy=healthy, service_STABLE=time.monotonic() - started)


def test_a_killed_resource_manager_restarts_and_the_service_keeps_its_containers(
    cluster: LocalCluster, spec: ClusterSpec, yarn: YarnServiceClient, service: str, capsys: pytest.CaptureFixture[str]
):
    before = workers(yarn)
    assert len(before) == WORKERS
    processes = {cid: container_processes(cid) for cid in before.values()}
    assert all(processes.values()), processes
    app_id = yarn.status(NAME).id
    assert app_id
    am_before = attempts(spec, app_id)
    assert len(am_before) == 1

    rm = daemon(cluster, "rm")
    os.kill(rm.pid, signal.SIGKILL)
    fault = time.monotonic()
    eventually(lambda: not answers(f"{spec.rm_url}/ws/v1/cluster/info"), "the killed RM to stop answering", 10, 0.1)
    # The RM's death touches no container.
    assert {cid: container_processes(cid) for cid in before.values()} == processes

    output = restart(cluster, "rm")
    healthy = time.monotonic() - fault
    assert "rm is not running" in output
    assert daemon(cluster, "rm").pid != rm.pid
    status = eventually(lambda: stable_with(yarn, before), "the service STABLE with the same workers", 120)
    report(
        capsys,
        "kill -9 of the RM + cluster restart rm",
        RM_answering_and_every_NM_RUNNING=healthy,
        service_STABLE_with_the_same_containers=time.monotonic() - fault,
    )

    assert status is not None and status.id == app_id
    worker = status.component("worker")
    assert worker is not None and worker.number_of_containers == WORKERS and worker.ready_count == WORKERS
    assert {cid: container_processes(cid) for cid in before.values()} == processes
    assert attempts(spec, app_id) == am_before  # the ApplicationMaster lived on: no second attempt
    nodes = requests.get(f"{spec.rm_url}/ws/v1/cluster/nodes", params=AS_USER, timeout=10).json()["nodes"]["node"]
    assert sorted(n["state"] for n in nodes) == ["RUNNING", "RUNNING"]


def test_a_killed_node_manager_restarts_and_takes_its_containers_back(
    cluster: LocalCluster, spec: ClusterSpec, yarn: YarnServiceClient, service: str, capsys: pytest.CaptureFixture[str]
):
    before = workers(yarn)
    assert len(before) == WORKERS
    processes = {cid: container_processes(cid) for cid in before.values()}
    # The NodeManager that runs the most workers.
    index = max(range(spec.nodes), key=lambda i: len(set(nm_containers(spec, i)) & set(before.values())))
    hosted = sorted(set(nm_containers(spec, index)) & set(before.values()))
    assert hosted
    name = f"nm-{index}"
    nm_web = f"http://{spec.host}:{spec.nm_ports(index)['yarn.nodemanager.webapp.address']}/ws/v1/node/info"

    nm = daemon(cluster, name)
    os.kill(nm.pid, signal.SIGKILL)
    fault = time.monotonic()
    eventually(lambda: not answers(nm_web), f"the killed {name} to stop answering", 10, 0.1)
    assert {cid: container_processes(cid) for cid in before.values()} == processes

    restart(cluster, name)
    healthy = time.monotonic() - fault
    assert daemon(cluster, name).pid != nm.pid
    eventually(lambda: stable_with(yarn, before), "the service STABLE with the same workers", 120)
    report(
        capsys,
        f"kill -9 of {name} + cluster restart {name}",
        NM_registered_anew=healthy,
        service_STABLE_with_the_same_containers=time.monotonic() - fault,
    )

    assert {cid: nm_containers(spec, index).get(cid) for cid in hosted} == dict.fromkeys(hosted, "RUNNING")
    assert {cid: container_processes(cid) for cid in before.values()} == processes

    # The restarted NodeManager manages what it took back: removing the worker stops its processes.
    instance = next(i for i, cid in before.items() if cid == hosted[0])
    yarn.decommission(NAME, "worker", [instance], wait=True, timeout=120)
    eventually(lambda: not _running(processes[hosted[0]]), f"{hosted[0]}'s processes to end", 60, 0.2)
    assert workers(yarn) == {i: c for i, c in before.items() if i != instance}


def _running(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.Error:
            continue
    return alive
