"""Where a job's containers run on the pseudo-cluster, and steering where YARN places the next ones: the
NodeManager of a node id, of each of a job's containers and of its ApplicationMaster; a node's size set as
``yarn rmadmin -updateNodeResource`` does, and a placement confined to one node."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import requests

from submarine_elastic.cluster import ClusterSpec, LocalCluster
from submarine_elastic.yarn import YarnServiceClient
from tests.integration.conftest import AS_USER


def nodes_of_containers(spec: ClusterSpec, yarn: YarnServiceClient, name: str) -> dict[str, str]:
    """:func:`container_nodes` of job ``name``, before there is a :class:`FaultRun`."""
    app_id = yarn.status(name).id
    base = f"{spec.rm_url}/ws/v1/cluster/apps/{app_id}/appattempts"
    attempts = requests.get(base, params=AS_USER, timeout=10).json()["appAttempts"]["appAttempt"]
    attempt = attempts[-1]["appAttemptId"]
    raw = requests.get(f"{base}/{attempt}/containers", params=AS_USER, timeout=10).json()
    return {c["containerId"]: node_of(spec, c["nodeId"]) for c in raw.get("container") or []}


def node_of(spec: ClusterSpec, node_id: str) -> str:
    """The NodeManager (``nm-<i>``) of a ResourceManager node id (``host:port``) on this pseudo-cluster: on
    loopback its port names it, on hosts (every NodeManager on the same port) its host, ``host-<i>``."""
    name, port = node_id.rsplit(":", 1)
    if spec.hosts:
        return f"nm-{int(name.removeprefix('host-'))}"
    by_port = {spec.nm_ports(i)["yarn.nodemanager.address"]: f"nm-{i}" for i in range(spec.nodes)}
    return by_port[int(port)]


def am_node(spec: ClusterSpec, yarn: YarnServiceClient, name: str) -> str:
    """The NodeManager running the job's ApplicationMaster (its current attempt); '' before it is placed."""
    app_id = yarn.status(name).id
    if not app_id:
        return ""
    raw = requests.get(f"{spec.rm_url}/ws/v1/cluster/apps/{app_id}/appattempts", params=AS_USER, timeout=10).json()
    attempts = (raw.get("appAttempts") or {}).get("appAttempt") or []
    node = attempts[-1].get("nodeId", "") if attempts else ""
    return node_of(spec, node) if node else ""


def set_node_size(spec: ClusterSpec, yarn: YarnServiceClient, node: str, memory_mb: int, vcores: int) -> None:
    """Sets what NodeManager ``node`` (``nm-<i>``) offers to containers, as an operator does with ``yarn rmadmin
    -updateNodeResource`` (the RM's REST equivalent): at 0 the scheduler places nothing more there, and the
    containers running there go on (no over-commit timeout). The NodeManager keeps heartbeating meanwhile."""
    (node_id,) = [n.node_id for n in yarn.nodes() if node_of(spec, n.node_id) == node]
    resp = requests.post(
        f"{spec.rm_url}/ws/v1/cluster/nodes/{node_id}/resource",
        params={"user.name": yarn.user or ""},
        json={"resource": {"memory": memory_mb, "vCores": vcores}, "overCommitTimeout": -1},
        timeout=10,
    )
    assert resp.status_code == 200, f"the RM refused to size {node} ({node_id}): HTTP {resp.status_code} {resp.text}"


@contextlib.contextmanager
def only_on(cluster: LocalCluster, yarn: YarnServiceClient, node: str) -> Iterator[None]:
    """While inside, the scheduler places containers on NodeManager ``node`` alone: the others offer nothing
    (:func:`set_node_size`); they are given back their size on the way out."""
    spec = cluster.spec()
    others = [f"nm-{i}" for i in range(spec.nodes) if f"nm-{i}" != node]
    try:
        for other in others:
            set_node_size(spec, yarn, other, 0, 0)
        yield
    finally:
        for other in others:
            set_node_size(spec, yarn, other, spec.node_memory_mb, spec.node_vcores)
