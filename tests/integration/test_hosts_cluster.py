"""`submarine cluster up --hosts 3`: the daemons on three hosts that are network namespaces (root), each
NodeManager registered from its own host, a service's containers running inside their hosts, and `down`
leaving nothing behind.

The cluster is the session's (``hosts_cluster``, started by `cluster up --hosts 3` in
``tests/integration/hosts.py``); the test of `down` takes it down, so it is marked to run after every other
test on it (``hosts_cluster_down``)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import psutil
import pytest
import requests
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import ClusterNotUpError, HostNetwork
from submarine_elastic.cluster.netns import NETNS_ETC
from submarine_elastic.dse import resolve_rm_url
from tests.integration.conftest import AS_USER, PORT_BASE, container_processes, eventually, processes_under
from tests.integration.hosts import HOSTS, SPREAD_WORKER_MB, HostsCluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("ip") is None,
        reason="hosts are network namespaces: root and iproute2 (CI runs as root)",
    ),
]


def cli_ok(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def net_namespace(pid: int) -> int:
    """The inode of a process's network namespace."""
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def namespace_inode(namespace: str) -> int:
    return os.stat(f"/run/netns/{namespace}").st_ino


def leftovers(plan: HostNetwork) -> list[str]:
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    found = [h.namespace for h in plan.all_hosts if h.namespace in spaces]
    found += [n for n in [plan.bridge, *(h.link for h in plan.all_hosts)] if f" {n}:" in links or f" {n}@" in links]
    found += [str(NETNS_ETC / h.namespace) for h in plan.all_hosts if (NETNS_ETC / h.namespace).exists()]
    return found


def test_every_daemon_runs_inside_its_host_and_each_nodemanager_registers_from_it(hosts_cluster: HostsCluster):
    cluster = hosts_cluster.cluster
    spec = cluster.spec()
    plan = cluster.network(spec)
    assert plan is not None
    hosts = plan.all_hosts
    # The CLI in the root namespace reaches the RM at host 0's address.
    assert spec.rm_url == f"http://{hosts[0].address}:{spec.rm_web_port}"
    assert resolve_rm_url(cluster=cluster) == spec.rm_url

    # HDFS is on by default on hosts: the NameNode beside the RM, a DataNode beside each NodeManager.
    expected = {
        "zk": hosts[0],
        "nn": hosts[0],
        "rm": hosts[0],
        **{f"nm-{h.index}": h for h in hosts},
        **{f"dn-{h.index}": h for h in hosts},
    }
    daemons = {d.name: d for d in cluster.running_daemons()}
    assert set(daemons) == set(expected)
    for name, host in expected.items():
        assert net_namespace(daemons[name].pid) == namespace_inode(host.namespace), f"{name} is not on {host.name}"
        assert net_namespace(daemons[name].pid) != net_namespace(os.getpid())

    nodes = requests.get(f"{spec.rm_url}/ws/v1/cluster/nodes", params=AS_USER, timeout=10).json()["nodes"]["node"]
    port = spec.nm_ports(0)["yarn.nodemanager.address"]
    assert sorted((n["id"], n["state"]) for n in nodes) == [(f"{h.name}:{port}", "RUNNING") for h in hosts]
    for host in hosts:
        # Each NodeManager answers at its own host's address, the one its name resolves to on every host.
        socket.create_connection((host.address, port), timeout=5).close()
        resolved = subprocess.run(
            hosts[0].command(["getent", "hosts", host.name]), capture_output=True, text=True, check=True
        )
        assert resolved.stdout.split()[0] == host.address

    status = " ".join(cli_ok("cluster", "status", "--cluster-dir", str(cluster.dir)).split())
    assert f"host-0 │ {hosts[0].address} │ {hosts[0].namespace} │ zk, nn, dn-0, rm, nm-0" in status
    for host in hosts[1:]:
        assert f"{host.name} │ {host.address} │ {host.namespace} │ dn-{host.index}, nm-{host.index}" in status
    assert f"HDFS: {spec.default_fs} (WebHDFS {spec.webhdfs_url}), {len(hosts)} DataNodes live" in status


def test_a_services_containers_run_inside_their_hosts(hosts_cluster: HostsCluster, tmp_path: Path):
    spec = hosts_cluster.spec
    plan = hosts_cluster.network
    assert plan is not None
    by_name = {h.name: h for h in plan.all_hosts}
    seen = tmp_path / "seen"
    seen.mkdir()
    # Each container writes the host name it sees, then sleeps.
    script = tmp_path / "sleeper.sh"
    script.write_text(f'hostname > "{seen}/$CONTAINER_ID"\nexec sleep 600\n')
    service = {
        "name": "on-hosts",
        "version": "1",
        "components": [
            {
                "name": "sleeper",
                "number_of_containers": HOSTS,
                "launch_command": f"sh {script}",
                # Two do not fit a NodeManager: the service's three containers land one on each host.
                "resource": {"cpus": 1, "memory": str(SPREAD_WORKER_MB)},
                "restart_policy": "NEVER",
            }
        ],
    }
    url = f"{spec.rm_url}/app/v1/services"
    resp = requests.post(url, json=service, params=AS_USER, timeout=30)
    assert resp.status_code == 202, resp.text

    def ready() -> list[dict] | None:
        status = requests.get(f"{url}/on-hosts", params=AS_USER, timeout=10).json()
        containers = [c for comp in status.get("components", []) for c in comp.get("containers", [])]
        done = [c for c in containers if c.get("state") == "READY" and (seen / c["id"]).exists()]
        return done if len(done) == HOSTS else None

    try:
        containers = eventually(ready, f"{HOSTS} containers READY", timeout=180, interval=1)
        placed = sorted(c["bare_host"] for c in containers)
        assert placed == sorted(by_name), "one container on each host"
        for container in containers:
            host = by_name[container["bare_host"]]
            assert container["ip"] == host.address
            assert (seen / container["id"]).read_text().strip() == host.name
            pids = container_processes(container["id"])
            sleeper = [p for p in pids if psutil.Process(p).name() == "sleep"]
            assert sleeper, f"no sleep process of {container['id']}"
            for pid in pids:
                assert net_namespace(pid) == namespace_inode(host.namespace), f"{pid} is not on {host.name}"
    finally:
        requests.delete(f"{url}/on-hosts", params=AS_USER, timeout=30)


def test_a_restarted_nodemanager_runs_on_its_host_again(hosts_cluster: HostsCluster):
    cluster = hosts_cluster.cluster
    old = next(d for d in cluster.running_daemons() if d.name == "nm-1")
    new = cluster.restart("nm-1", timeout=120)
    assert new.pid != old.pid
    assert net_namespace(new.pid) == namespace_inode(hosts_cluster.network.host(1).namespace)


@pytest.mark.hosts_cluster_down
def test_down_leaves_no_namespace_link_bridge_hosts_file_or_process(hosts_cluster: HostsCluster):
    cluster = hosts_cluster.cluster
    spec = cluster.spec()
    plan = cluster.network(spec)
    assert plan is not None and leftovers(plan) != []
    daemons = [psutil.Process(d.pid) for d in cluster.running_daemons()]
    out = cli_ok("cluster", "down", "--cluster-dir", str(cluster.dir))
    assert "stopped 9 daemons" in out
    assert leftovers(plan) == []
    assert [p.pid for p in daemons if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
    assert processes_under(cluster.dir) == []
    assert HostNetwork.recorded(cluster.dir) is None
    with pytest.raises(ClusterNotUpError):
        cluster.status()


def test_down_after_an_up_that_crashed_before_any_daemon_removes_the_network(tmp_path: Path):
    """`up` made the network and died before it recorded a daemon (cluster.json): `down` still finds it."""
    plan = HostNetwork(tmp_path / "crashed", 2, f"198.19.{(PORT_BASE // 100 + 1) % 256}.0/24")
    plan.create()
    sleeper = subprocess.Popen(plan.host(1).command(["sleep", "600"]))
    try:
        eventually(lambda: psutil.Process(sleeper.pid).name() == "sleep", "the sleeper running on host-1", 10, 0.1)
        result = CliRunner().invoke(cli, ["cluster", "down", "--cluster-dir", str(plan.state_dir)])
        assert result.exit_code == 0, result.output
        assert leftovers(plan) == []
        # Killed and reaped by `down` (this process is its parent: psutil's wait reaps it).
        assert not psutil.pid_exists(sleeper.pid)
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
        plan.destroy()
