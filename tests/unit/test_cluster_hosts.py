"""The planning parts of a cluster on hosts (``submarine cluster up --hosts N``): where each daemon runs, what it
binds and is reached by, what ``up`` runs to start it on its host, what ``status`` shows and what ``down`` removes,
and the refusals; nothing is made."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import ClusterNotUpError, ClusterSpec, HostNetwork, LocalCluster, netns
from submarine_elastic.cluster.api import DEFAULT_SUBNET, Daemon
from submarine_elastic.cluster.netns import HostNetworkError


def test_on_hosts_the_central_daemons_are_on_host_0s_address_and_each_nodemanager_on_its_own_host():
    spec = ClusterSpec(nodes=3, hosts=3, subnet="10.77.0.0/24", port_base=20000)
    assert spec.host == "10.77.0.2"
    assert spec.rm_url == "http://10.77.0.2:20088"
    # zk, then HDFS (nn, dn-0..2), rm, nm-0..2: HDFS is on by default on hosts, a DataNode beside each NodeManager.
    assert [spec.daemon_host(n) for n in spec.daemon_names()] == [0, 0, 0, 1, 2, 0, 0, 1, 2]
    assert [spec.node_host(i) for i in range(3)] == ["host-0", "host-1", "host-2"]
    # Each host has its own address: every NodeManager has the same ports.
    assert (
        spec.nm_ports(0)
        == spec.nm_ports(2)
        == {
            "yarn.nodemanager.address": 20100,
            "yarn.nodemanager.localizer.address": 20101,
            "yarn.nodemanager.webapp.address": 20102,
        }
    )
    assert ClusterSpec(nodes=3, hosts=3).host == "198.18.0.2", f"the default subnet is {DEFAULT_SUBNET}"
    loopback = ClusterSpec(nodes=3)
    assert loopback.host == "127.0.0.1" and loopback.daemon_host("nm-2") is None
    assert loopback.nm_ports(2)["yarn.nodemanager.address"] == 18120


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nodes": 2, "hosts": 3}, "one NodeManager a host: nodes 2, hosts 3"),
        ({"nodes": 3, "hosts": 3, "secure": True}, "secure cluster runs on loopback only"),
        ({"nodes": 3, "hosts": 3, "subnet": "10.0.0.0/30"}, "no room for a bridge and 3 hosts"),
        ({"nodes": 3, "hosts": 3, "subnet": "fd00::/64"}, "not an IPv4 network"),
        ({"nodes": 1, "hosts": -1}, "hosts must be 0 .loopback. or 1..64, got -1"),
        ({"nodes": 3, "hosts": 3, "host": "10.0.0.9", "subnet": "10.77.0.0/24"}, "host 0's address 10.77.0.2"),
    ],
)
def test_a_cluster_on_hosts_that_cannot_be_is_refused_naming_the_value(kwargs: dict, message: str):
    with pytest.raises(ValueError, match=message):
        ClusterSpec(**kwargs)


def test_the_spec_of_a_cluster_on_hosts_is_read_back_from_its_directory(tmp_path: Path):
    cluster = LocalCluster(tmp_path)
    spec = ClusterSpec(nodes=2, hosts=2, subnet="10.77.0.0/24")
    cluster.state.write(spec, [])
    assert cluster.spec() == spec
    assert json.loads(cluster.state_file.read_text())["rm_url"] == "http://10.77.0.2:18088"
    plan = cluster.network(spec)
    assert plan == HostNetwork(cluster.dir, 2, "10.77.0.0/24")
    assert cluster.network(ClusterSpec()) is None


def _settings(cluster: LocalCluster, spec: ClusterSpec, name: str, node: int | None) -> dict[str, str]:
    files, settings = cluster.conf.daemon_files(name, spec, Path("/am.tar.gz"), node=node)
    return {k: v for s in settings.values() for k, v in s.items()}


def test_each_daemon_binds_its_own_hosts_address_and_reaches_the_others_across_the_bridge(tmp_path: Path):
    cluster = LocalCluster(tmp_path)
    spec = ClusterSpec(nodes=3, hosts=3, subnet="10.77.0.0/24", port_base=20000)
    rm = _settings(cluster, spec, "rm", None)
    assert rm["yarn.resourcemanager.hostname"] == "10.77.0.2"
    assert rm["yarn.resourcemanager.resource-tracker.address"] == "10.77.0.2:20031"
    assert rm["hadoop.zk.address"] == "10.77.0.2:20181"
    nm = _settings(cluster, spec, "nm-2", 2)
    assert nm["yarn.nodemanager.hostname"] == "host-2"
    assert nm["yarn.nodemanager.address"] == "host-2:20100"
    assert nm["yarn.nodemanager.webapp.address"] == "host-2:20102"
    assert nm["yarn.resourcemanager.scheduler.address"] == "10.77.0.2:20030"
    assert nm["hadoop.registry.zk.quorum"] == "10.77.0.2:20181"
    assert "yarn.nodemanager.bind-host" not in nm, "a NodeManager binds its host's address, not every interface"
    zk = cluster.conf.zk_files(spec, spec.host)[1]
    assert next(iter(zk.values()))["clientPortAddress"] == "10.77.0.2"
    # The loopback cluster's NodeManager as it always was.
    loopback = _settings(cluster, ClusterSpec(nodes=3, port_base=20000), "nm-2", 2)
    assert loopback["yarn.nodemanager.hostname"] == "127.0.0.1"
    assert loopback["yarn.nodemanager.address"] == "127.0.0.1:20120"


def test_up_starts_each_daemon_inside_its_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    started: list[list[str]] = []

    class Recorded:
        def __init__(self, argv: list[str], **_kwargs: object) -> None:
            started.append(argv)
            self.pid = 4242

    monkeypatch.setattr(subprocess, "Popen", Recorded)
    cluster = LocalCluster(tmp_path)
    (tmp_path / "logs").mkdir()
    spec = ClusterSpec(nodes=3, hosts=3, subnet="10.77.0.0/24")
    plan = cluster.network(spec)
    assert plan is not None
    cluster._start_zookeeper("java", spec)
    cluster._start_daemon("java", "rm", spec)
    cluster._start_daemon("java", "nm-2", spec)
    for argv, host in zip(started, [plan.host(0), plan.host(0), plan.host(2)], strict=True):
        assert argv[: len(host.command([]))] == host.command([])
        assert argv[len(host.command([]))].endswith("java")
    loopback = LocalCluster(tmp_path / "loopback")
    (loopback.dir / "logs").mkdir(parents=True)
    loopback._start_daemon("java", "nm-1", ClusterSpec())
    assert started[-1][0] == "java"


def test_status_shows_each_host_with_its_address_namespace_and_daemons(tmp_path: Path, monkeypatch):
    cluster = LocalCluster(tmp_path)
    spec = ClusterSpec(nodes=2, hosts=2, subnet="10.77.0.0/24", port_base=1100, hdfs=False)
    plan = cluster.network(spec)
    assert plan is not None
    cluster.state.write(spec, [Daemon("zk", 999999, -1, tmp_path / "zk.log")])
    # Host 1's namespace has gone (removed by hand, or the machine restarted).
    monkeypatch.setattr(netns, "_namespaces", lambda: [plan.host(0).namespace])
    st = cluster.status()
    assert st.rm_error is not None, "nothing answers at 10.77.0.2"
    assert [(h.host.name, h.host.address, h.present, h.daemons) for h in st.hosts] == [
        ("host-0", "10.77.0.2", True, ("zk", "rm", "nm-0")),
        ("host-1", "10.77.0.3", False, ("nm-1",)),
    ]
    out = CliRunner().invoke(cli, ["cluster", "status", "--cluster-dir", str(tmp_path)]).output
    assert "host-1" in out and "10.77.0.3" in out and "(missing)" in out
    assert LocalCluster(tmp_path / "loopback")._hosts(ClusterSpec()) == []


def test_down_after_an_up_that_crashed_before_recording_a_daemon_removes_the_host_network(tmp_path: Path, monkeypatch):
    destroyed: list[HostNetwork] = []
    monkeypatch.setattr(HostNetwork, "destroy", lambda self: destroyed.append(self) or ["bridge x"])
    cluster = LocalCluster(tmp_path)
    with pytest.raises(ClusterNotUpError):
        cluster.down()
    HostNetwork(cluster.dir, 3, "10.77.0.0/24")._record()
    assert cluster.down() == []
    assert destroyed == [HostNetwork(cluster.dir, 3, "10.77.0.0/24")]


def test_a_subnet_this_machine_already_uses_is_refused_before_anything_is_made(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(netns, "check_prerequisites", lambda: None)
    monkeypatch.setattr(netns, "_namespaces", list)
    monkeypatch.setattr(netns, "_root_addresses", lambda: [("lo", "127.0.0.1"), ("sebr9", "10.77.0.1")])
    made: list[tuple[str, ...]] = []
    monkeypatch.setattr(netns, "_ip", lambda *args: made.append(args))
    with pytest.raises(HostNetworkError, match="subnet 10.77.0.0/24 overlaps address 10.77.0.1 of sebr9"):
        HostNetwork(tmp_path, 2, "10.77.0.0/24").create()
    assert made == [] and not (tmp_path / netns.STATE_FILE).exists()


def _up(tmp_path: Path, *args: str):
    return CliRunner().invoke(cli, ["cluster", "up", "--cluster-dir", str(tmp_path / "c"), *args])


def test_up_on_hosts_without_root_refuses_clearly_and_makes_nothing(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    result = _up(tmp_path, "--hosts", "3")
    assert result.exit_code == 1
    assert "making network namespaces needs root" in result.output and "loopback cluster" in result.output
    assert not (tmp_path / "c" / netns.STATE_FILE).exists() and not (tmp_path / "c" / "cluster.json").exists()
    monkeypatch.setattr(netns.shutil, "which", lambda _: None)
    assert "ip command (iproute2) is not installed" in _up(tmp_path, "--hosts", "3").output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--subnet", "10.77.0.0/24"], "--subnet places hosts: give --hosts too"),
        (["--hosts", "3", "--nodes", "2"], "one NodeManager a host: --nodes 2 with --hosts 3"),
        (["--hosts", "3", "--secure"], "secure cluster runs on loopback only"),
        (["--hosts", "3", "--subnet", "10.0.0.0/30"], "no room for a bridge and 3 hosts"),
        (["--hosts", "65"], "65 is not in the range 1<=x<=64"),
    ],
)
def test_up_refuses_options_that_do_not_go_together(tmp_path: Path, args: list[str], message: str):
    result = _up(tmp_path, *args)
    assert result.exit_code == 2
    assert message in " ".join(result.output.replace("│", " ").split())
    assert not (tmp_path / "c").exists()
