"""What the YARN side of the pseudo-cluster answers: ZooKeeper's ``ruok``, the ResourceManager's REST
resources (its state, its nodes), and the wait until every NodeManager is RUNNING in it.

Every call has a timeout of a few seconds; a daemon that does not answer reads as not ready.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping

import requests
from tenacity import RetryCallState

from submarine_elastic import env
from submarine_elastic.cluster.api import ClusterSpec, Daemon, DaemonStartError, NodeInfo, Progress
from submarine_elastic.cluster.processes import alive, poll, tail
from submarine_elastic.yarn import GPU_RESOURCE, refuse_cookies, resource_values


def zk_ok(host: str, port: int) -> bool:
    """Whether ZooKeeper at ``host:port`` answers ``imok`` (within a second)."""
    try:
        with socket.create_connection((host, port), timeout=1.0) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"
    except OSError:
        return False


def get_json(url: str, params: dict[str, str] | None = None, *, auth: requests.auth.AuthBase | None = None) -> dict:
    """GET a ResourceManager REST resource as the YARN user (the cluster refuses anonymous requests): with
    ``auth`` (SPNEGO on a secure cluster) on a session of its own that sends no cookie in its stead (see
    ``yarn.session.refuse_cookies``), else simple auth. Blocks for at most 5 s.

    Raises:
        requests.RequestException: no answer, or an error status.
    """
    query = {**({} if auth is not None else {"user.name": env.settings().user()}), **(params or {})}
    with refuse_cookies(requests.Session()) as session:
        resp = session.get(url, params=query, timeout=5.0, headers={"Accept": "application/json"}, auth=auth)
    resp.raise_for_status()
    return resp.json()


def rm_started(rm_url: str, auth: requests.auth.AuthBase | None = None) -> bool:
    """Whether the RM at ``rm_url`` says it is STARTED."""
    try:
        info = get_json(f"{rm_url}/ws/v1/cluster/info", auth=auth)["clusterInfo"]
    except (requests.RequestException, KeyError, ValueError):
        return False
    return info.get("state") == "STARTED"


def rm_nodes(rm_url: str, auth: requests.auth.AuthBase | None = None) -> list[NodeInfo]:
    """The nodes the RM at ``rm_url`` lists ([] when it does not answer)."""
    try:
        raw = get_json(f"{rm_url}/ws/v1/cluster/nodes", auth=auth)
    except requests.RequestException:
        return []
    nodes = (raw.get("nodes") or {}).get("node") or []
    return [
        NodeInfo(
            node_id=n["id"],
            state=n["state"],
            used_memory_mb=int(n.get("usedMemoryMB", 0)),
            available_memory_mb=int(n.get("availMemoryMB", 0)),
            used_vcores=int(n.get("usedVirtualCores", 0)),
            available_vcores=int(n.get("availableVirtualCores", 0)),
            containers=int(n.get("numContainers", 0)),
            last_health_update_ms=int(n.get("lastHealthUpdate", 0)),
            used_gpus=resource_values(n.get("usedResource")).get(GPU_RESOURCE, 0),
            available_gpus=resource_values(n.get("availableResource")).get(GPU_RESOURCE, 0),
        )
        for n in nodes
    ]


def wait_nodes(
    spec: ClusterSpec,
    nms: list[Daemon],
    timeout: float,
    say: Progress,
    auth: requests.auth.AuthBase | None,
    *,
    fresh_since: Mapping[str, float] | None = None,
) -> None:
    """Block until every NM of ``nms`` is RUNNING in the RM (polled every 0.5 s, at most ``timeout`` s).
    An NM named in ``fresh_since`` must also have reported its health since that time (seconds since
    the epoch): after a restart the RM lists the NM it knew until the new one registers.

    Raises:
        DaemonStartError: an NM exited, or one did not register in time (naming it, with its log).
    """
    since_ms = {name: at * 1000 for name, at in (fresh_since or {}).items()}
    seen = -1
    ready: set[str] = set()

    def node_id(d: Daemon) -> str:
        index = int(d.name.removeprefix("nm-"))
        return f"{spec.node_host(index)}:{spec.nm_ports(index)['yarn.nodemanager.address']}"

    def key(node: str) -> str:
        # Node ids are "<host>:<NM port>". On loopback the host is what 127.0.0.1 resolves to, and the
        # port tells which NM a node is; on hosts every NM has the same port and its host's name.
        return node if spec.hosts else node.rsplit(":", 1)[-1]

    def all_running() -> bool:
        nonlocal ready, seen
        for d in nms:
            if not alive(d):
                raise DaemonStartError(d.name, "exited before registering", d.log, tail(d))
        nodes = {key(n.node_id): n for n in rm_nodes(spec.rm_url, auth)}
        ready = {
            d.name
            for d in nms
            if (n := nodes.get(key(node_id(d)))) is not None
            and n.state == "RUNNING"
            and n.last_health_update_ms >= since_ms.get(d.name, 0)
        }
        if len(ready) != seen:
            seen = len(ready)
            say(f"{seen}/{len(nms)} NodeManagers RUNNING")
        return len(ready) == len(nms)

    def missing(_state: RetryCallState) -> bool:
        worst = next((d for d in nms if d.name not in ready), nms[0])
        raise DaemonStartError(
            worst.name, f"did not register with the ResourceManager within {timeout:.0f} s", worst.log, tail(worst)
        )

    if nms:
        poll(all_running, timeout, 0.5, missing)
