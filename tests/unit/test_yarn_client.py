"""YarnServiceClient against recorded HTTP: exact bodies and query strings, retries, typed errors, waits.

Most tests use ``responses``. ``responses`` replaces the transport below urllib3's retry loop for
connection errors, so dropped connections are tested against a tiny raw-socket server instead.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
import responses
from responses import matchers

from submarine_elastic.yarn import (
    ComponentNotFoundError,
    ComponentTarget,
    ContainerState,
    InvalidSpecError,
    KerberosUnavailableError,
    RMUnreachableError,
    Service,
    ServiceAlreadyExistsError,
    ServiceFailedError,
    ServiceNotFoundError,
    ServiceState,
    ServiceStateError,
    YarnAuthError,
    YarnRequestError,
    YarnServiceClient,
    YarnTimeoutError,
)
from submarine_elastic.yarn.client import SPEC_REWRITE_RETRIES, SPEC_REWRITE_RETRY_S

RM = "http://rm.test:8088"
SVC = f"{RM}/app/v1/services"
APPS = f"{RM}/ws/v1/cluster/apps"


class FakeClock:
    """Monotonic time that only moves when the client sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make_client(clock: FakeClock, url: str = RM, **kwargs: Any) -> YarnServiceClient:
    options: dict[str, Any] = {
        "user": "alice",
        "auth": "simple",
        "retries": 2,
        "backoff": 0.0,
        "timeout": 2.0,
        "poll_interval": 1.0,
        "clock": clock.time,
        "sleep": clock.sleep,
    }
    options.update(kwargs)
    return YarnServiceClient(url, **options)


@pytest.fixture
def client(clock: FakeClock) -> Iterator[YarnServiceClient]:
    with make_client(clock) as c:
        yield c


@pytest.fixture
def rsps() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock(assert_all_requests_are_fired=True) as mock:
        yield mock


def spec() -> Service:
    return Service.from_dict(
        {
            "name": "job",
            "version": "1",
            "components": [
                {
                    "name": "worker",
                    "number_of_containers": 2,
                    "launch_command": "sleep 3600",
                    "resource": {"cpus": 1, "memory": "256"},
                    "restart_policy": "ALWAYS",
                }
            ],
        }
    )


def container(instance: str, state: str = "READY", n: int = 0) -> dict[str, Any]:
    return {
        "id": f"container_1700000000000_0001_01_{n:06d}",
        "state": state,
        "component_instance_name": instance,
        "hostname": f"{instance}.job.alice",
        "ip": "127.0.0.1",
        "bare_host": f"nm{n}.local",
        "launch_time": 1700000000000 + n,
    }


def service_json(
    state: str | None = "STABLE",
    workers: list[tuple[str, str]] | None = None,
    desired: int | None = None,
    decommissioned: list[str] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "job", "version": "1", "id": "application_1700000000000_0001"}
    if state is not None:
        body["state"] = state
    if workers is not None:
        body["components"] = [
            {
                "name": "worker",
                "state": "STABLE",
                "number_of_containers": len(workers) if desired is None else desired,
                "containers": [container(name, st, i) for i, (name, st) in enumerate(workers)],
                **({"decommissioned_instances": decommissioned} if decommissioned is not None else {}),
            }
        ]
    return body


def query(call: Any) -> str:
    return urlsplit(call.request.url).query


def body(call: Any) -> Any:
    return json.loads(call.request.body)


# ------------------------------------------------------------------------------------------ create


def test_create_posts_the_exact_spec_then_polls_until_stable(
    client: YarnServiceClient, rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    rsps.post(
        SVC,
        status=202,
        json={"diagnostics": "Application ID: application_1700000000000_0001", "state": "ACCEPTED"},
    )
    rsps.get(f"{SVC}/job", json=service_json("ACCEPTED"))
    rsps.get(f"{SVC}/job", json=service_json("STARTED", [("worker-0", "READY"), ("worker-1", "RUNNING_BUT_UNREADY")]))
    rsps.get(f"{SVC}/job", json=service_json("STABLE", [("worker-0", "READY"), ("worker-1", "READY")]))

    status = client.create(spec(), timeout=30)

    assert status.state == ServiceState.STABLE
    assert [c.component_instance_name for c in status.component("worker").ready_containers] == [  # type: ignore[union-attr]
        "worker-0",
        "worker-1",
    ]
    post = rsps.calls[0]
    assert post.request.method == "POST"
    assert query(post) == "user.name=alice"
    assert post.request.headers["Content-Type"] == "application/json"
    assert body(post) == {
        "name": "job",
        "version": "1",
        "components": [
            {
                "name": "worker",
                "number_of_containers": 2,
                "launch_command": "sleep 3600",
                "resource": {"cpus": 1, "memory": "256"},
                "restart_policy": "ALWAYS",
            }
        ],
    }
    assert [query(c) for c in rsps.calls[1:]] == ["user.name=alice"] * 3
    assert clock.sleeps == [1.0, 1.0]


def test_create_without_wait_returns_the_acceptance(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.post(SVC, status=202, json={"diagnostics": "Application ID: application_17_0042", "state": "ACCEPTED"})
    status = client.create(spec(), wait=False)
    assert status.state == ServiceState.ACCEPTED
    assert status.id == "application_17_0042"
    assert len(rsps.calls) == 1


def test_create_validates_a_dict_spec_before_sending(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    bad = spec().to_dict()
    bad["components"][0]["resource"]["memory"] = "0"
    with pytest.raises(InvalidSpecError) as info:
        client.create(bad)
    assert info.value.fields == ("components.0.resource.memory",)
    assert len(rsps.calls) == 0


def test_create_maps_rm_400_to_invalid_spec_with_diagnostics(
    client: YarnServiceClient, rsps: responses.RequestsMock
) -> None:
    rsps.post(SVC, status=400, json={"diagnostics": "Dependency ps for component worker is invalid"})
    with pytest.raises(InvalidSpecError) as info:
        client.create(spec())
    assert "Dependency ps for component worker is invalid" in str(info.value)
    assert info.value.status_code == 400
    assert info.value.diagnostics == "Dependency ps for component worker is invalid"


def test_create_of_a_taken_name_is_already_exists(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.post(SVC, status=500, json={"diagnostics": "Service name job is already taken."})
    with pytest.raises(ServiceAlreadyExistsError, match="already taken"):
        client.create(spec())


def test_create_other_500_stays_a_request_error(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.post(SVC, status=500, json={"diagnostics": "Failed to write to HDFS"})
    with pytest.raises(YarnRequestError, match="HTTP 500: Failed to write to HDFS"):
        client.create(spec())


def test_post_is_not_retried_on_503(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.post(SVC, status=503, body="standby")
    with pytest.raises(RMUnreachableError) as info:
        client.create(spec())
    assert len(rsps.calls) == 1
    assert info.value.status_code == 503


# ------------------------------------------------------------------------------------ reads, retries


def test_get_is_retried_on_503_then_succeeds(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.get(f"{SVC}/job", status=503)
    rsps.get(f"{SVC}/job", status=503)
    rsps.get(f"{SVC}/job", json=service_json("STABLE", [("worker-0", "READY")]))
    status = client.status("job")
    assert status.state == ServiceState.STABLE
    assert len(rsps.calls) == 3


def test_get_gives_up_after_the_retries(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.get(f"{SVC}/job", status=503, json={"diagnostics": "RM is in standby"})
    with pytest.raises(RMUnreachableError, match="after 2 retries.*RM is in standby"):
        client.status("job")
    assert len(rsps.calls) == 3


def test_500_is_not_retried(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.get(f"{SVC}/job", status=500, json={"diagnostics": "boom"})
    with pytest.raises(YarnRequestError, match="boom"):
        client.status("job")
    assert len(rsps.calls) == 1


def test_status_parses_containers(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.get(f"{SVC}/job", json=service_json("STARTED", [("worker-0", "READY"), ("worker-1", "RUNNING_BUT_UNREADY")]))
    status = client.status("job")
    worker = status.component("worker")
    assert worker is not None
    assert worker.number_of_containers == 2
    c0, c1 = worker.containers
    assert (c0.id, c0.state, c0.hostname, c0.ip, c0.bare_host) == (
        "container_1700000000000_0001_01_000000",
        ContainerState.READY,
        "worker-0.job.alice",
        "127.0.0.1",
        "nm0.local",
    )
    assert c1.state == ContainerState.RUNNING_BUT_UNREADY
    assert not status.is_ready
    assert status.id == "application_1700000000000_0001"


EMPTY_SPEC = "No content to map due to end-of-input\n at [Source: (org.apache.hadoop.hdfs.client.HdfsDataInputStream)]"


def test_status_reads_again_a_spec_its_am_is_rewriting_on_hdfs(
    client: YarnServiceClient, rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    """While the AM rewrites a service's spec on HDFS (a flex, the service's end) the file is empty and the RM
    answers 500: status asks again shortly instead of failing the caller (the controller, job show, a wait)."""
    rsps.get(f"{SVC}/job", status=500, json={"diagnostics": EMPTY_SPEC})
    rsps.get(f"{SVC}/job", status=500, json={"diagnostics": EMPTY_SPEC})
    rsps.get(f"{SVC}/job", json=service_json("STARTED", [("worker-0", "READY")]))
    assert client.status("job").component("worker") is not None
    assert clock.sleeps == [SPEC_REWRITE_RETRY_S, SPEC_REWRITE_RETRY_S]


def test_status_gives_up_on_a_spec_that_stays_empty_and_on_any_other_500(
    client: YarnServiceClient, rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    for _ in range(SPEC_REWRITE_RETRIES + 1):
        rsps.get(f"{SVC}/job", status=500, json={"diagnostics": EMPTY_SPEC})
    with pytest.raises(YarnRequestError, match="No content to map") as info:
        client.status("job")
    assert info.value.status_code == 500 and len(clock.sleeps) == SPEC_REWRITE_RETRIES
    rsps.get(f"{SVC}/other", status=500, json={"diagnostics": "java.lang.NullPointerException"})
    with pytest.raises(YarnRequestError, match="NullPointerException"):
        client.status("other")
    assert len(clock.sleeps) == SPEC_REWRITE_RETRIES


def test_unknown_service_is_not_found_with_diagnostics(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.get(f"{SVC}/nope", status=404, json={"diagnostics": "Service nope not found", "code": -1})
    with pytest.raises(ServiceNotFoundError, match="Service nope not found") as info:
        client.status("nope")
    assert info.value.status_code == 404


def test_404_without_the_api_json_hints_at_the_api_switch(
    client: YarnServiceClient, rsps: responses.RequestsMock
) -> None:
    rsps.get(f"{SVC}/job", status=404, body="<html>Not Found</html>", content_type="text/html")
    with pytest.raises(YarnRequestError, match="yarn.webapp.api-service.enable"):
        client.status("job")


def test_forbidden_is_an_auth_error(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.get(f"{SVC}/job", status=403, json={"diagnostics": "User bob cannot perform operation"})
    with pytest.raises(YarnAuthError, match="User bob cannot perform operation"):
        client.status("job")


def test_invalid_names_are_refused_before_sending(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    for name in ("../etc", "Job", "job?x=1", ""):
        with pytest.raises(ValueError, match="must match"):
            client.status(name)
    assert len(rsps.calls) == 0


def test_list_queries_yarn_service_apps(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.get(
        APPS,
        json={
            "apps": {
                "app": [
                    {
                        "id": "application_17_0002",
                        "name": "zeta",
                        "user": "alice",
                        "queue": "default",
                        "state": "RUNNING",
                        "finalStatus": "UNDEFINED",
                        "applicationType": "yarn-service",
                        "applicationTags": "name: zeta,version: 1",
                        "progress": 100.0,
                        "startedTime": 1700000000000,
                        "runningContainers": 3,
                        "allocatedMB": 1536,
                        "allocatedVCores": 3,
                        "diagnostics": "",
                    },
                    {"id": "application_17_0001", "name": "alpha", "state": "ACCEPTED"},
                ]
            }
        },
    )
    apps = client.list()
    assert query(rsps.calls[0]) == (
        "applicationTypes=yarn-service&states=NEW%2CNEW_SAVING%2CSUBMITTED%2CACCEPTED%2CRUNNING&user.name=alice"
    )
    assert [(a.name, a.state) for a in apps] == [("alpha", "ACCEPTED"), ("zeta", "RUNNING")]
    zeta = apps[1]
    assert zeta.tags == ("name: zeta", "version: 1")
    assert (zeta.running_containers, zeta.allocated_mb, zeta.allocated_vcores) == (3, 1536, 3)
    assert zeta.diagnostics is None


def test_nodes_reads_total_and_free_room_per_running_node(
    client: YarnServiceClient, rsps: responses.RequestsMock
) -> None:
    rsps.get(
        f"{RM}/ws/v1/cluster/nodes",
        json={
            "nodes": {
                "node": [
                    {
                        "id": "nm1:45454",
                        "state": "RUNNING",
                        "usedMemoryMB": 2560,
                        "availMemoryMB": 1536,
                        "usedVirtualCores": 2,
                        "availableVirtualCores": 2,
                        "totalResource": {"memory": 4096, "vCores": 4},
                    },
                    # Hadoop before 3.3 reports no totalResource: used plus available.
                    {
                        "id": "nm0:45454",
                        "state": "RUNNING",
                        "usedMemoryMB": 512,
                        "availMemoryMB": 3584,
                        "usedVirtualCores": 1,
                        "availableVirtualCores": 3,
                    },
                ]
            }
        },
    )
    nodes = client.nodes()
    assert query(rsps.calls[0]) == "states=RUNNING&user.name=alice"
    assert [(n.node_id, n.total_memory_mb, n.total_vcores, n.free_memory_mb, n.free_vcores) for n in nodes] == [
        ("nm0:45454", 4096, 4, 3584, 3),
        ("nm1:45454", 4096, 4, 1536, 2),
    ]
    assert [(n.used_memory_mb, n.used_vcores) for n in nodes] == [(512, 1), (2560, 2)]


def test_config_value_reads_one_property_and_none_when_unset(
    client: YarnServiceClient, rsps: responses.RequestsMock
) -> None:
    rsps.get(
        f"{RM}/conf",
        match=[matchers.query_param_matcher({"name": "yarn.service.am-resource.memory", "user.name": "alice"})],
        json={"property": {"key": "yarn.service.am-resource.memory", "value": "512", "isFinal": False}},
    )
    rsps.get(f"{RM}/conf", status=404, body="yarn.service.am-resource.cpus not found")
    assert client.config_value("yarn.service.am-resource.memory") == "512"
    assert client.config_value("yarn.service.am-resource.cpus") is None


def test_status_reads_each_components_container_size(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    body = service_json("STABLE", [("worker-0", "READY")])
    body["components"][0]["resource"] = {"cpus": 2, "memory": "2048", "additional": {}}
    rsps.get(f"{SVC}/job", json=body)
    worker = client.status("job").component("worker")
    assert worker is not None and (worker.memory_mb, worker.vcores) == (2048, 2)


def test_list_all_states_and_empty_answer(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.get(APPS, json={"apps": None})
    assert client.list(states=None, user="bob") == []
    assert query(rsps.calls[0]) == "applicationTypes=yarn-service&user=bob&user.name=alice"


def test_an_applications_state_and_one_the_rm_does_not_know(
    client: YarnServiceClient, rsps: responses.RequestsMock
) -> None:
    rsps.get(f"{APPS}/application_1_0001", json={"app": {"id": "application_1_0001", "state": "RUNNING"}})
    rsps.get(
        f"{APPS}/application_1_0002",
        status=404,
        json={"RemoteException": {"message": "app with id: application_1_0002 not found"}},
    )
    assert client.app_state("application_1_0001") == "RUNNING"
    assert client.app_state("application_1_0002") is None


def test_ready_instances_are_sorted_by_instance_number(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.get(
        f"{SVC}/job",
        json=service_json(
            "STARTED",
            [("worker-10", "READY"), ("worker-2", "READY"), ("worker-1", "RUNNING_BUT_UNREADY"), ("worker-0", "READY")],
        ),
    )
    ready = client.ready_instances("job", "worker")
    assert [c.component_instance_name for c in ready] == ["worker-0", "worker-2", "worker-10"]
    assert [c.instance_number for c in ready] == [0, 2, 10]
    assert ready[0].hostname == "worker-0.job.alice"


def test_ready_instances_of_unknown_component(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.get(f"{SVC}/job", json=service_json("STABLE", [("worker-0", "READY")]))
    with pytest.raises(ComponentNotFoundError, match="has no component 'ps'"):
        client.ready_instances("job", "ps")


def test_ready_instances_empty_before_the_am_runs(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.get(f"{SVC}/job", json=service_json("ACCEPTED"))
    assert client.ready_instances("job", "worker") == []


# -------------------------------------------------------------------------------------- flex & co


def test_flex_puts_the_count_to_the_component(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.put(
        f"{SVC}/job/components/worker",
        json={"diagnostics": "Updating component (worker) size from 2 to 4"},
        match=[matchers.json_params_matcher({"number_of_containers": 4}, strict_match=True)],
    )
    client.flex("job", "worker", 4)
    assert query(rsps.calls[0]) == "user.name=alice"
    assert body(rsps.calls[0]) == {"number_of_containers": 4}


def test_put_is_retried_on_503(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.put(f"{SVC}/job/components/worker", status=503)
    rsps.put(f"{SVC}/job/components/worker", status=200, json={"diagnostics": "ok"})
    client.flex("job", "worker", 1)
    assert len(rsps.calls) == 2
    assert [body(c) for c in rsps.calls] == [{"number_of_containers": 1}] * 2


def test_flex_rejects_a_negative_count_locally(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    with pytest.raises(ValueError, match="n must be an int >= 0, got -1"):
        client.flex("job", "worker", -1)
    assert len(rsps.calls) == 0


def test_flex_of_a_service_that_is_not_running_is_a_state_error(
    client: YarnServiceClient, rsps: responses.RequestsMock
) -> None:
    diag = "job is at ACCEPTED state, flex can only be invoked when service is running"
    rsps.put(f"{SVC}/job/components/worker", status=500, json={"diagnostics": diag})
    rsps.get(f"{SVC}/job", json=service_json("ACCEPTED"))
    with pytest.raises(ServiceStateError, match="not running; RM said: job is at ACCEPTED state") as info:
        client.flex("job", "worker", 3)
    assert info.value.status_code == 500


def test_flex_of_an_unknown_service_is_not_found(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.put(f"{SVC}/nope/components/worker", status=500, json={"diagnostics": "File nope.json does not exist"})
    rsps.get(f"{SVC}/nope", status=404, json={"diagnostics": "Service nope not found"})
    with pytest.raises(ServiceNotFoundError, match="cannot flex service 'nope': not found"):
        client.flex("nope", "worker", 3)


def test_flex_of_an_unknown_component_is_component_not_found(
    client: YarnServiceClient, rsps: responses.RequestsMock
) -> None:
    rsps.put(f"{SVC}/job/components/ps", status=500, json={"diagnostics": "Components [ps] do not exist"})
    rsps.get(f"{SVC}/job", json=service_json("STABLE", [("worker-0", "READY")]))
    with pytest.raises(ComponentNotFoundError, match="no component 'ps'"):
        client.flex("job", "ps", 3)


def test_decommission_puts_the_named_instances(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.put(
        f"{SVC}/job",
        status=202,
        json={"diagnostics": "Service job has successfully decommissioned instances.", "state": "ACCEPTED"},
    )
    rsps.get(f"{SVC}/job", json=service_json("FLEX", [("worker-0", "READY"), ("worker-1", "READY")], desired=1))
    rsps.get(f"{SVC}/job", json=service_json("STABLE", [("worker-1", "READY")]))
    client.decommission("job", "worker", ["worker-0"], wait=True, timeout=10)
    assert query(rsps.calls[0]) == "user.name=alice"
    assert body(rsps.calls[0]) == {"components": [{"name": "worker", "decommissioned_instances": ["worker-0"]}]}
    assert len(rsps.calls) == 3


@pytest.mark.parametrize("instances", [[], ["ps-0"], ["worker"], ["worker-x"]])
def test_decommission_rejects_bad_instance_names(
    client: YarnServiceClient, rsps: responses.RequestsMock, instances: list[str]
) -> None:
    with pytest.raises(ValueError):
        client.decommission("job", "worker", instances)
    assert len(rsps.calls) == 0


def test_stop_puts_stopped_and_waits(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.put(
        f"{SVC}/job",
        json={"diagnostics": "Successfully stopped service job"},
        match=[matchers.json_params_matcher({"state": "STOPPED"}, strict_match=True)],
    )
    rsps.get(f"{SVC}/job", json=service_json("STABLE", [("worker-0", "READY")]))
    rsps.get(f"{SVC}/job", json=service_json("STOPPED"))
    client.stop("job", timeout=10)
    assert query(rsps.calls[0]) == "user.name=alice"
    assert len(rsps.calls) == 3


def test_stop_of_a_stopped_service_is_not_an_error(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.put(f"{SVC}/job", status=400, json={"diagnostics": "Service job is already stopped"})
    rsps.get(f"{SVC}/job", json=service_json("STOPPED"))
    client.stop("job", wait=False)


def test_stop_of_an_unknown_service(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.put(f"{SVC}/nope", status=404, json={"diagnostics": "Application is not found"})
    with pytest.raises(ServiceNotFoundError):
        client.stop("nope")


def test_start_puts_started_and_waits_until_ready(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.put(
        f"{SVC}/job",
        json={"diagnostics": "Service job is successfully started with ApplicationId: application_17_0009"},
        match=[matchers.json_params_matcher({"state": "STARTED"}, strict_match=True)],
    )
    rsps.get(f"{SVC}/job", json=service_json("STABLE", [("worker-0", "READY")]))
    assert client.start("job", timeout=10).state == ServiceState.STABLE


def test_start_refused_for_a_stopped_service_is_a_state_error(
    client: YarnServiceClient, rsps: responses.RequestsMock
) -> None:
    rsps.put(f"{SVC}/job", status=400, json={"diagnostics": "queue is full"})
    rsps.get(f"{SVC}/job", json=service_json("STOPPED"))
    with pytest.raises(ServiceStateError, match="queue is full"):
        client.start("job")


def test_destroy_deletes_and_waits_until_gone(
    client: YarnServiceClient, rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    rsps.delete(f"{SVC}/job", json={"diagnostics": "Successfully destroyed service job"})
    rsps.get(f"{SVC}/job", status=404, json={"diagnostics": "Service job not found"})
    rsps.get(APPS, json={"apps": {"app": [{"id": "application_17_1", "name": "job", "state": "RUNNING"}]}})
    rsps.get(f"{SVC}/job", status=404, json={"diagnostics": "Service job not found"})
    rsps.get(APPS, json={"apps": None})
    client.destroy("job", timeout=10)
    assert rsps.calls[0].request.method == "DELETE"
    assert rsps.calls[0].request.body is None
    assert query(rsps.calls[0]) == "user.name=alice"
    assert len(rsps.calls) == 5
    assert clock.sleeps == [1.0]


def test_destroy_of_an_unknown_service(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.delete(f"{SVC}/nope", status=400, json={"diagnostics": "Service nope doesn't exist"})
    with pytest.raises(ServiceNotFoundError, match="doesn't exist"):
        client.destroy("nope")


def test_destroy_missing_ok(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.delete(f"{SVC}/nope", status=400, json={"diagnostics": "Service nope doesn't exist"})
    client.destroy("nope", wait=False, missing_ok=True)


def test_destroy_of_a_service_that_will_not_stop(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    diag = "Failed to destroy service job, because it is still running."
    rsps.delete(f"{SVC}/job", status=400, json={"diagnostics": diag})
    with pytest.raises(ServiceStateError, match="still running"):
        client.destroy("job")


def test_hadoop_version(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.get(f"{SVC}/version", json={"hadoop_version": "3.4.1"})
    assert client.hadoop_version() == "3.4.1"


# ---------------------------------------------------------------------------------------- waits


def test_wait_times_out_naming_what_and_the_last_state(
    client: YarnServiceClient, rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    rsps.get(f"{SVC}/job", json=service_json("STARTED", [("worker-0", "READY"), ("worker-1", "RUNNING_BUT_UNREADY")]))
    with pytest.raises(YarnTimeoutError) as info:
        client.wait_until_ready("job", timeout=5)
    message = str(info.value)
    assert "waiting for service 'job' to become ready" in message
    assert "state=STARTED (worker 1/2 READY)" in message
    assert clock.now == 5.0
    assert len(rsps.calls) == 6
    assert info.value.last_state is not None


def test_wait_keeps_polling_through_an_unreachable_rm(
    client: YarnServiceClient, rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    rsps.get(f"{SVC}/job", status=503)
    rsps.get(f"{SVC}/job", status=503)
    rsps.get(f"{SVC}/job", status=503)
    rsps.get(f"{SVC}/job", json=service_json("STABLE", [("worker-0", "READY")]))
    assert client.wait_until_ready("job", timeout=5).state == ServiceState.STABLE
    assert clock.sleeps == [1.0]


def test_wait_fails_fast_when_the_service_fails(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.get(f"{SVC}/job", json=service_json("FAILED"))
    with pytest.raises(ServiceFailedError, match="state=FAILED"):
        client.wait_until_ready("job", timeout=60)


def test_wait_for_ready_count(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.get(f"{SVC}/job", json=service_json("FLEX", [("worker-0", "READY"), ("worker-1", "READY")], desired=1))
    rsps.get(f"{SVC}/job", json=service_json("STABLE", [("worker-0", "READY")]))
    ready = client.wait_for_ready("job", "worker", 1, timeout=10)
    assert [c.component_instance_name for c in ready] == ["worker-0"]


# -------------------------------------------------------------------------------------- declarative


def test_set_target_records_and_reconcile_flexes_and_converges(
    client: YarnServiceClient, rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    client.set_target("job", "worker", 3)
    assert len(rsps.calls) == 0  # saying the target sends nothing
    assert client.target("job", "worker") == ComponentTarget(3)

    rsps.get(f"{SVC}/job", json=service_json("STABLE", [("worker-0", "READY")]))
    rsps.put(f"{SVC}/job/components/worker", json={"diagnostics": "Updating component (worker) size from 1 to 3"})
    rsps.get(f"{SVC}/job", json=service_json("FLEX", [("worker-0", "READY"), ("worker-1", "READY")], desired=3))
    rsps.get(
        f"{SVC}/job",
        json=service_json("STABLE", [("worker-0", "READY"), ("worker-1", "READY"), ("worker-2", "READY")]),
    )
    result = client.reconcile("job", "worker", timeout=30)

    assert body(rsps.calls[1]) == {"number_of_containers": 3}
    assert result.converged
    assert result.error is None
    assert (result.target, result.desired, result.ready) == (3, 3, 3)
    assert result.ready_instances == ("worker-0", "worker-1", "worker-2")
    assert result.service_state == ServiceState.STABLE
    assert result.flexed
    assert result.elapsed_s == 2.0


FLEX_URL = f"{SVC}/job/components/worker"
TWO_READY = [("worker-0", "READY"), ("worker-1", "READY")]
THREE_READY = [*TWO_READY, ("worker-2", "READY")]


def test_a_flex_the_rm_refuses_with_503_is_sent_again_and_the_loop_converges(
    client: YarnServiceClient, rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    """The RM unavailable during a flex (its retries spent): reconcile keeps the target and sends it again."""
    rsps.get(f"{SVC}/job", json=service_json("STABLE", TWO_READY))
    for _ in range(3):  # the first attempt and the session's 2 retries
        rsps.put(FLEX_URL, status=503, json={"diagnostics": "RM is in standby"})
    rsps.get(f"{SVC}/job", json=service_json("STABLE", TWO_READY))
    rsps.put(FLEX_URL, json={"diagnostics": "Updating component (worker) size from 2 to 3"})
    rsps.get(f"{SVC}/job", json=service_json("FLEX", [*TWO_READY, ("worker-2", "RUNNING_BUT_UNREADY")], desired=3))
    rsps.get(f"{SVC}/job", json=service_json("STABLE", THREE_READY))

    result = client.reconcile("job", "worker", 3, timeout=30)

    sent = [(c.request.method, c.response.status_code) for c in rsps.calls]
    refused, taken = [("PUT", 503)] * 3, [("PUT", 200)]
    assert sent == [("GET", 200), *refused, ("GET", 200), *taken, ("GET", 200), ("GET", 200)]
    assert all(body(c) == {"number_of_containers": 3} for c in rsps.calls if c.request.method == "PUT")
    assert result.converged and result.error is None and result.flexed
    assert result.ready_instances == ("worker-0", "worker-1", "worker-2")
    assert clock.sleeps == [1.0, 1.0, 1.0]


def test_a_flex_that_cannot_connect_comes_back_as_data_until_the_rm_is_back(
    client: YarnServiceClient, rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    rsps.get(f"{SVC}/job", json=service_json("STABLE", TWO_READY))
    rsps.put(FLEX_URL, body=requests.ConnectionError("connection refused"))
    give_up_at = client.reconcile("job", "worker", 3, timeout=0)  # one read, one failed flex: a result, no raise
    assert not give_up_at.converged and not give_up_at.flexed
    assert isinstance(give_up_at.error, YarnTimeoutError)
    assert "ResourceManager at http://rm.test:8088 unreachable" in str(give_up_at.error)
    assert (give_up_at.target, give_up_at.desired, give_up_at.ready) == (3, 2, 2)

    rsps.get(f"{SVC}/job", json=service_json("STABLE", TWO_READY))
    rsps.put(FLEX_URL, json={"diagnostics": "ok"})
    rsps.get(f"{SVC}/job", json=service_json("STABLE", THREE_READY))
    later = client.reconcile("job", "worker", timeout=30)  # the recorded target
    assert later.converged and later.flexed and later.error is None


def test_named_instances_are_decommissioned_not_flexed_away(
    client: YarnServiceClient, rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    """Scale-in that keeps worker-2 (rank 0): a flex to 2 would remove worker-2; the target names worker-0."""
    client.set_target("job", "worker", 2, remove=["worker-0"])
    rsps.get(f"{SVC}/job", json=service_json("STABLE", THREE_READY))
    for _ in range(3):
        rsps.put(f"{SVC}/job", status=503)  # lost: sent again at the next read, still by name
    rsps.get(f"{SVC}/job", json=service_json("STABLE", THREE_READY))
    rsps.put(
        f"{SVC}/job",
        json={"diagnostics": "ok"},
        match=[
            matchers.json_params_matcher(
                {"components": [{"name": "worker", "decommissioned_instances": ["worker-0"]}]}, strict_match=True
            )
        ],
    )
    # Taken (desired 2), worker-0 still stopping: nothing is sent again.
    rsps.get(f"{SVC}/job", json=service_json("STABLE", THREE_READY, desired=2, decommissioned=["worker-0"]))
    kept = [("worker-1", "READY"), ("worker-2", "READY")]
    rsps.get(f"{SVC}/job", json=service_json("STABLE", kept, decommissioned=["worker-0"]))

    result = client.reconcile("job", "worker", timeout=30)

    assert not any(c.request.url.startswith(FLEX_URL) for c in rsps.calls)
    assert [c.request.method for c in rsps.calls].count("PUT") == 4
    assert result.converged and result.decommissioned == ("worker-0",) and not result.flexed
    assert result.ready_instances == ("worker-1", "worker-2")


def test_a_target_names_only_instances_of_its_component(client: YarnServiceClient) -> None:
    with pytest.raises(ValueError, match="instance 'ps-0' is not an instance of component 'worker'"):
        client.set_target("job", "worker", 1, remove=["ps-0"])
    with pytest.raises(ValueError, match=r"'worker-x' does not end in -<number>"):
        client.set_target("job", "worker", 1, remove=["worker-x"])
    with pytest.raises(ValueError, match="n must be an int >= 0, got -1"):
        client.set_target("job", "worker", -1)
    assert client.target("job", "worker") is None


def test_reconcile_resends_a_flex_the_rm_does_not_have(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.get(f"{SVC}/job", json=service_json("STABLE", [("worker-0", "READY"), ("worker-1", "READY")]))
    rsps.put(
        f"{SVC}/job/components/worker",
        json={"diagnostics": "ok"},
        match=[matchers.json_params_matcher({"number_of_containers": 1}, strict_match=True)],
    )
    rsps.get(f"{SVC}/job", json=service_json("STABLE", [("worker-0", "READY")]))
    result = client.reconcile("job", "worker", 1, timeout=30)
    assert result.converged
    assert result.flexed
    assert result.ready_instances == ("worker-0",)


def test_reconcile_returns_failures_as_data(client: YarnServiceClient, rsps: responses.RequestsMock) -> None:
    rsps.get(f"{SVC}/gone", status=404, json={"diagnostics": "Service gone not found"})
    result = client.reconcile("gone", "worker", 2, timeout=30)
    assert not result.converged
    assert isinstance(result.error, ServiceNotFoundError)
    assert result.ready == 0
    assert result.desired is None


def test_reconcile_times_out_as_data(client: YarnServiceClient, rsps: responses.RequestsMock, clock: FakeClock) -> None:
    rsps.get(f"{SVC}/job", json=service_json("FLEX", [("worker-0", "READY"), ("worker-1", "RUNNING_BUT_UNREADY")]))
    result = client.reconcile("job", "worker", 2, timeout=3)
    assert not result.converged
    assert isinstance(result.error, YarnTimeoutError)
    assert "waiting for 2 READY worker containers of service 'job'" in str(result.error)
    assert "worker 1/2 READY" in str(result.error)
    assert (result.desired, result.ready) == (2, 1)
    assert result.elapsed_s == 3.0
    assert clock.now == 3.0


def test_reconcile_is_bounded_by_its_timeout_when_the_rm_takes_connections_but_does_not_answer() -> None:
    """A stopped (SIGSTOP) or overloaded RM: the kernel takes the connection, no answer comes. Each request of
    reconcile waits only what is left of its timeout and is not sent again, so the caller (a job's driver
    taking resizes between reconciliations) is held about the timeout, not read timeout x (1 + retries)."""
    with socket.create_server(("127.0.0.1", 0)) as frozen:  # listens, never accepts, never answers
        url = f"http://127.0.0.1:{frozen.getsockname()[1]}"
        with YarnServiceClient(url, user="alice", auth="simple", timeout=(5.0, 10.0), retries=2) as client:
            started = time.monotonic()
            result = client.reconcile("job", "worker", 1, timeout=1.5)
            took = time.monotonic() - started
    assert took < 4, f"reconcile(timeout=1.5) held its caller {took:.1f} s"
    assert not result.converged and isinstance(result.error, YarnTimeoutError)
    assert "unreachable" in str(result.error) and "Read timed out" in str(result.error)


def test_reconcile_treats_an_unreachable_rm_as_transient(
    client: YarnServiceClient, rsps: responses.RequestsMock
) -> None:
    for _ in range(3):
        rsps.get(f"{SVC}/job", status=503)
    rsps.get(f"{SVC}/job", json=service_json("STABLE", [("worker-0", "READY")]))
    result = client.reconcile("job", "worker", 1, timeout=30)
    assert result.converged


def test_reconcile_needs_a_target(client: YarnServiceClient) -> None:
    with pytest.raises(ValueError, match="no target for job/worker"):
        client.reconcile("job", "worker", timeout=1)


# ---------------------------------------------------------------------------------------- auth/config


def test_user_defaults_to_the_environment(
    clock: FakeClock, rsps: responses.RequestsMock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUBMARINE_YARN_USER", "svc-user")
    monkeypatch.delenv("SUBMARINE_YARN_AUTH", raising=False)
    client = make_client(clock, user=None, auth=None)
    rsps.get(f"{SVC}/version", json={"hadoop_version": "3.4.1"})
    client.hadoop_version()
    assert query(rsps.calls[0]) == "user.name=svc-user"


def test_bad_auth_from_environment_is_rejected(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUBMARINE_YARN_AUTH", "ldap")
    with pytest.raises(ValueError, match="auth must be 'simple' or 'kerberos', got None"):
        make_client(clock, auth=None)


@pytest.mark.parametrize("url", ["rm:8088", "ftp://rm", "", "http://"])
def test_bad_rm_url_is_rejected(clock: FakeClock, url: str) -> None:
    with pytest.raises(ValueError, match="rm_url"):
        make_client(clock, url=url)


def test_kerberos_without_the_extra_is_a_clear_error(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "requests_gssapi", None)
    with pytest.raises(KerberosUnavailableError, match=r"pip install 'submarine-elastic\[kerberos\]'"):
        make_client(clock, auth="kerberos")


def test_kerberos_uses_spnego_and_no_user_name(
    clock: FakeClock, rsps: responses.RequestsMock, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("gssapi")

    class FakeSpnego(requests.auth.AuthBase):
        def __init__(self, mutual_authentication: int, **options: Any) -> None:
            self.mutual_authentication = mutual_authentication
            self.options = options

        def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
            r.headers["Authorization"] = "Negotiate fake-token"
            return r

    fake = types.ModuleType("requests_gssapi")
    fake.HTTPSPNEGOAuth = FakeSpnego  # type: ignore[attr-defined]
    fake.OPTIONAL, fake.REQUIRED = 2, 1  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "requests_gssapi", fake)
    monkeypatch.delenv("SUBMARINE_YARN_KEYTAB", raising=False)
    client = make_client(clock, auth="kerberos", user="ignored")
    assert client._auth is not None and client._auth.mutual_authentication == 1  # type: ignore[attr-defined]
    rsps.get(f"{SVC}/job", json=service_json("STABLE", []))
    client.status("job")
    assert query(rsps.calls[0]) == ""
    assert rsps.calls[0].request.headers["Authorization"] == "Negotiate fake-token"


# ---------------------------------------------------------------------------- dropped connections


class DroppingServer:
    """A raw HTTP server on 127.0.0.1 that drops or answers each connection as scripted.

    Each script entry is ``None`` (read the whole request, then close without answering) or a
    ``(status, json_body)`` answer. Requests are recorded as ``(method, path)`` before anything else.
    """

    def __init__(self, script: list[tuple[int, Any] | None]) -> None:
        self.script = list(script)
        self.seen: list[tuple[str, str]] = []
        self._closing = False
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(5)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        for step in self.script:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                if self._closing:
                    return
                method, path = self._read_request(conn)
                self.seen.append((method, path))
                if step is None:
                    continue
                status, payload = step
                data = json.dumps(payload).encode()
                head = (
                    f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
                )
                conn.sendall(head.encode() + data)

    @staticmethod
    def _read_request(conn: socket.socket) -> tuple[str, str]:
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = conn.recv(65536)
            if not chunk:
                break
            buf += chunk
        head, _, rest = buf.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        length = 0
        for line in lines[1:]:
            key, _, value = line.partition(":")
            if key.strip().lower() == "content-length":
                length = int(value)
        while len(rest) < length:
            rest += conn.recv(65536)
        method, path, _ = lines[0].split(" ", 2)
        return method, path

    def close(self) -> None:
        self._closing = True
        if self._thread.is_alive():
            # wake the accept() of a script step no request came for
            with socket.create_connection(self._sock.getsockname(), timeout=1):
                pass
        self._thread.join(timeout=5)
        self._sock.close()


@pytest.fixture
def server_factory() -> Iterator[Callable[[list[tuple[int, Any] | None]], DroppingServer]]:
    servers: list[DroppingServer] = []

    def make(script: list[tuple[int, Any] | None]) -> DroppingServer:
        server = DroppingServer(script)
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


def test_get_is_retried_after_a_dropped_connection(
    clock: FakeClock, server_factory: Callable[[list[tuple[int, Any] | None]], DroppingServer]
) -> None:
    server = server_factory([None, (200, service_json("STABLE", [("worker-0", "READY")]))])
    with make_client(clock, url=server.url) as client:
        assert client.status("job").state == ServiceState.STABLE
    assert server.seen == [("GET", "/app/v1/services/job?user.name=alice")] * 2


def test_post_is_not_retried_after_a_dropped_connection(
    clock: FakeClock, server_factory: Callable[[list[tuple[int, Any] | None]], DroppingServer]
) -> None:
    server = server_factory([None, (202, {"diagnostics": "Application ID: application_1_1"})])
    with make_client(clock, url=server.url) as client, pytest.raises(RMUnreachableError) as info:
        client.create(spec(), wait=False)
    assert "may have applied it" in str(info.value)
    assert server.seen == [("POST", "/app/v1/services?user.name=alice")]


def test_a_resent_delete_that_finds_its_own_work_done_succeeds(
    clock: FakeClock, server_factory: Callable[[list[tuple[int, Any] | None]], DroppingServer]
) -> None:
    server = server_factory([None, (400, {"diagnostics": "Service job doesn't exist"})])
    with make_client(clock, url=server.url) as client:
        client.destroy("job", wait=False)
    assert [m for m, _ in server.seen] == ["DELETE", "DELETE"]


def test_a_first_delete_of_an_unknown_service_still_fails(
    clock: FakeClock, server_factory: Callable[[list[tuple[int, Any] | None]], DroppingServer]
) -> None:
    server = server_factory([(400, {"diagnostics": "Service job doesn't exist"})])
    with make_client(clock, url=server.url) as client, pytest.raises(ServiceNotFoundError):
        client.destroy("job", wait=False)


def test_refused_connection_is_rm_unreachable(clock: FakeClock) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with make_client(clock, url=f"http://127.0.0.1:{port}") as client, pytest.raises(RMUnreachableError) as info:
        client.status("job")
    assert f"127.0.0.1:{port}" in str(info.value)


def test_a_reconciliation_gives_way_after_a_read_when_asked_and_keeps_the_target(
    client: YarnServiceClient, rsps: responses.RequestsMock, clock: FakeClock
) -> None:
    """A driver's resizer reconciling a scale-out while a scale-in comes: it stops after the read in which it is
    asked to (not at its timeout), as a reconciliation out of time, and the target stays recorded."""
    rsps.get(f"{SVC}/job", json=service_json("STABLE", TWO_READY))
    rsps.put(FLEX_URL, json={"diagnostics": "Updating component (worker) size from 2 to 3"})
    rsps.get(f"{SVC}/job", json=service_json("FLEX", [*TWO_READY, ("worker-2", "RUNNING_BUT_UNREADY")], desired=3))
    asked = iter([False, True])

    result = client.reconcile("job", "worker", 3, timeout=30, give_way=lambda: next(asked))

    assert [c.request.method for c in rsps.calls] == ["GET", "PUT", "GET"]
    assert not result.converged and isinstance(result.error, YarnTimeoutError)
    assert (result.desired, result.ready) == (3, 2) and result.flexed
    assert result.elapsed_s < 30
    assert client.target("job", "worker") == ComponentTarget(3)
