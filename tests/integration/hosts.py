"""The session's cluster on hosts (``submarine cluster up --hosts 3``: network namespaces, root only), which
conftest's ``hosts_cluster`` starts once, through the command a user types, for every test on hosts: the
cluster's own checks (``test_hosts_cluster``, whose last one takes it down), HDFS, a job across the hosts
and the host faults.

Its ports are the session's port base + :data:`HOSTS_PORT_OFFSET` and its subnet follows from them, so it runs
beside the session's loopback cluster, beside the clusters test modules start of their own (+300..+1100) and
beside another run with another base.

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

import pytest
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import ClusterSpec, HostNetwork, LocalCluster

HOSTS = 3
#: The test modules on the session's cluster on hosts: under pytest-xdist one worker runs them all, so that one
#: starts the cluster (a module on it not named here still works, at the cost of a cluster on another worker).
ON_HOSTS = frozenset(
    {"test_hdfs.py", "test_host_faults.py", "test_hosts_cluster.py", "test_hosts_job.py", "test_job_code.py"}
)
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
    """Start the 3-host cluster in ``directory`` with ``submarine cluster up --hosts 3``, which must name the
    ResourceManager it started; on leaving, ``down`` it (also after a failed ``up``) unless a test did."""
    port_base = session_port_base + HOSTS_PORT_OFFSET
    args = ["cluster", "up", "--cluster-dir", str(directory), "--port-base", str(port_base), "--timeout", "240"]
    args += ["--hosts", str(HOSTS), "--subnet", hosts_subnet(port_base)]
    args += ["--node-memory-mb", str(HOSTS_NODE_MB), "--node-vcores", "4"]
    cluster = LocalCluster(directory)
    try:
        result = CliRunner().invoke(cli, args, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        spec = cluster.spec()
        assert f"ResourceManager: {spec.rm_url}" in " ".join(result.output.split())
        network = cluster.network(spec)
        assert network is not None
        yield HostsCluster(cluster, spec, network)
    finally:
        if cluster.state_file.exists() or HostNetwork.recorded(directory) is not None:
            cluster.down()


class HostsClusters:
    """The session's cluster on hosts: started on first use, and again after a test took it down (the test of
    ``cluster down`` runs last, but a worker of pytest-xdist may be given another module on hosts after it);
    the one running at the end is taken down."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory, session_port_base: int) -> None:
        self._tmp = tmp_path_factory
        self._port_base = session_port_base
        self._stack = contextlib.ExitStack()
        self._current: HostsCluster | None = None

    def running(self) -> HostsCluster:
        if self._current is None or not self._current.cluster.state_file.exists():
            directory = self._tmp.mktemp("hosts-cluster")
            self._current = self._stack.enter_context(hosts_cluster_at(directory, self._port_base))
        return self._current

    def __enter__(self) -> HostsClusters:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
