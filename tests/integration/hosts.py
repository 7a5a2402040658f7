"""The session's cluster on hosts (``submarine cluster up --hosts 3``: network namespaces, root only), which
conftest's ``hosts_cluster`` starts once for every test that runs a job across hosts.

Its ports are the session's port base + :data:`HOSTS_PORT_OFFSET` and its subnet follows from them (the rule
of ``test_hosts_cluster``), so it runs beside the session's loopback cluster, beside the clusters test modules
start of their own (+300..+1100; ``test_hosts_cluster``'s on the base itself and its subnet) and beside
another run with another base.

Each NodeManager has :data:`HOSTS_NODE_MB`: a job's workers of :data:`SPREAD_WORKER_MB` land one on each host
(two do not fit one), with the service's AM and the job's driver (512 MB each) beside them; workers of
1024 MB fit two a host, so a job of three still fits on two hosts when one is lost.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from submarine_elastic.cluster import ClusterSpec, HostNetwork, LocalCluster

HOSTS = 3
#: Above every other cluster a test session starts (the highest, test_kerberos's, at +1100).
HOSTS_PORT_OFFSET = 1300
HOSTS_NODE_MB = 2560
#: A worker this large has a host to itself (two do not fit a NodeManager), beside the AM or the driver.
SPREAD_WORKER_MB = 1536


def hosts_subnet(port_base: int) -> str:
    """A subnet of its own for each port base, so runs side by side never share one."""
    return f"198.19.{port_base // 100 % 256}.0/24"


@dataclass(frozen=True)
class HostsCluster:
    """A running cluster on hosts, its spec and its host network (namespaces, addresses, ``Host.command``)."""

    cluster: LocalCluster
    spec: ClusterSpec
    network: HostNetwork

    @property
    def rm_url(self) -> str:
        """``http://<host 0's address>:<port>``, reachable from the root namespace and from every host."""
        return self.spec.rm_url


def can_make_hosts() -> bool:
    return os.geteuid() == 0 and shutil.which("ip") is not None


@contextlib.contextmanager
def hosts_cluster_at(directory: Path, session_port_base: int) -> Iterator[HostsCluster]:
    """Start the 3-host cluster in ``directory``; on leaving, ``down`` it (also after a failed ``up``)."""
    port_base = session_port_base + HOSTS_PORT_OFFSET
    spec = ClusterSpec(
        nodes=HOSTS,
        hosts=HOSTS,
        subnet=hosts_subnet(port_base),
        node_memory_mb=HOSTS_NODE_MB,
        node_vcores=4,
        port_base=port_base,
    )
    cluster = LocalCluster(directory)
    try:
        cluster.up(spec, timeout=240)
        network = cluster.network(spec)
        assert network is not None
        yield HostsCluster(cluster, spec, network)
    finally:
        if cluster.state_file.exists() or HostNetwork.recorded(directory) is not None:
            cluster.down()
