"""The YARN Services client against the real ResourceManager: create, flex, decommission, relaunch, destroy."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from submarine_elastic.cluster import ClusterSpec, LocalCluster
from submarine_elastic.yarn import (
    Component,
    Resource,
    RestartPolicy,
    Service,
    ServiceAlreadyExistsError,
    ServiceNotFoundError,
    YarnServiceClient,
)
from tests.integration.conftest import container_processes, eventually, sigkill

pytestmark = pytest.mark.integration

NAME = "flexer"


def sleeper(name: str, workers: int) -> Service:
    return Service(
        name=name,
        version="1.0",
        components=[
            Component(
                name="worker",
                number_of_containers=workers,
                launch_command="sleep 900",
                resource=Resource(cpus=1, memory="256"),
                restart_policy=RestartPolicy.ALWAYS,
            )
        ],
    )


def instance_names(client: YarnServiceClient) -> list[str]:
    return [c.component_instance_name for c in client.ready_instances(NAME, "worker")]


@pytest.fixture(scope="module")
def client(yarn_cluster: LocalCluster, cluster_spec: ClusterSpec) -> Iterator[YarnServiceClient]:
    with YarnServiceClient(cluster_spec.rm_url, user="tester", poll_interval=0.5) as c:
        yield c


@pytest.fixture(scope="module")
def service(client: YarnServiceClient) -> Iterator[str]:
    status = client.create(sleeper(NAME, 2), wait=True, timeout=240)
    assert status.state is not None
    yield NAME
    client.destroy(NAME, missing_ok=True, timeout=120)


def test_create_starts_two_ready_workers(client: YarnServiceClient, service: str):
    assert instance_names(client) == ["worker-0", "worker-1"]
    for c in client.ready_instances(service, "worker"):
        assert c.id.startswith("container_")
        assert container_processes(c.id), f"no process runs for {c.id}"
    assert NAME in {a.name for a in client.list()}


def test_creating_the_same_name_again_is_refused(client: YarnServiceClient, service: str):
    with pytest.raises(ServiceAlreadyExistsError, match=NAME):
        client.create(sleeper(NAME, 1), wait=False)
    assert instance_names(client) == ["worker-0", "worker-1"]


def test_flex_2_to_4_to_1(client: YarnServiceClient, service: str):
    client.set_target(service, "worker", 4)
    grown = client.reconcile(service, "worker", timeout=180)
    assert grown.converged, grown.error
    assert instance_names(client) == ["worker-0", "worker-1", "worker-2", "worker-3"]

    client.set_target(service, "worker", 1)
    shrunk = client.reconcile(service, "worker", timeout=180)
    assert shrunk.converged, shrunk.error
    # YARN removes the highest-numbered instances on flex-down.
    assert instance_names(client) == ["worker-0"]


def test_decommission_removes_the_named_instance(client: YarnServiceClient, service: str):
    client.set_target(service, "worker", 3)
    assert client.reconcile(service, "worker", timeout=180).converged
    doomed = {c.component_instance_name: c.id for c in client.ready_instances(service, "worker")}["worker-0"]

    client.decommission(service, "worker", ["worker-0"], wait=True, timeout=120)
    assert instance_names(client) == ["worker-1", "worker-2"]
    assert client.status(service).component("worker").number_of_containers == 2
    eventually(lambda: not container_processes(doomed), "the decommissioned container's processes to end", 60, 0.2)


def test_a_killed_container_is_relaunched(client: YarnServiceClient, service: str):
    before = {c.component_instance_name: c.id for c in client.ready_instances(service, "worker")}
    victim = before["worker-1"]
    pids = container_processes(victim)
    assert pids, f"no process of {victim} found"
    sigkill(pids)

    def relaunched() -> dict[str, str] | None:
        after = {c.component_instance_name: c.id for c in client.ready_instances(service, "worker")}
        return after if after.get("worker-1") not in (None, victim) else None

    after = eventually(relaunched, "worker-1 relaunched", 180)
    assert after["worker-2"] == before["worker-2"]
    assert container_processes(after["worker-1"])


def test_a_target_that_names_an_instance_removes_it_and_no_other(client: YarnServiceClient, service: str):
    """What the driver asks when a scale-in keeps a lower instance: a flex would remove the highest."""
    before = instance_names(client)
    assert len(before) == 2
    target = client.set_target(service, "worker", 1, remove=[before[0]])
    result = client.reconcile(service, "worker", timeout=180)
    assert result.converged, result.error
    assert result.decommissioned == target.remove and not result.flexed
    assert instance_names(client) == [before[1]]
    assert before[0] in client.status(service).component("worker").decommissioned

    client.set_target(service, "worker", 2)  # grows again: the removed name is not used again
    grown = client.reconcile(service, "worker", timeout=180)
    assert grown.converged, grown.error
    assert before[0] not in instance_names(client) and len(instance_names(client)) == 2


def test_destroy_leaves_nothing_in_yarn(client: YarnServiceClient, service: str):
    ids = [c.id for c in client.ready_instances(service, "worker")]
    client.destroy(service, wait=True, timeout=120)
    with pytest.raises(ServiceNotFoundError):
        client.status(service)
    assert service not in {a.name for a in client.list()}
    eventually(lambda: not any(container_processes(i) for i in ids), "every container's processes to end", 60, 0.2)
