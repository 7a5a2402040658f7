"""The pseudo-cluster's pure parts: port layout, spec validation, config overrides, refusals."""

from __future__ import annotations

import os
import socket
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from submarine_elastic import env
from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import (
    ClusterAlreadyUpError,
    ClusterNotUpError,
    ClusterSpec,
    DaemonNotRunningError,
    LocalCluster,
    Placement,
    PortInUseError,
    PrerequisiteError,
    UnknownDaemonError,
)
from submarine_elastic.cluster.api import Daemon
from submarine_elastic.cluster.hadoop_conf import override_xml
from submarine_elastic.cluster.processes import start_ticks


def test_ports_are_distinct_and_follow_the_base():
    spec = ClusterSpec(nodes=3, port_base=20000)
    ports = spec.all_ports()
    assert len(ports) == 1 + 5 + 3 * 3
    assert spec.zk_port == 20181
    assert spec.rm_url == "http://127.0.0.1:20088"
    assert spec.nm_ports(2) == {
        "yarn.nodemanager.address": 20120,
        "yarn.nodemanager.localizer.address": 20121,
        "yarn.nodemanager.webapp.address": 20122,
    }


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"nodes": 0}, "nodes"),
        ({"node_memory_mb": 100}, "node_memory_mb"),
        ({"node_vcores": 0}, "node_vcores"),
        ({"port_base": 80}, "port_base"),
        ({"port_base": 65500}, "port_base"),
    ],
)
def test_bad_specs_name_the_field(kwargs: dict, field: str):
    with pytest.raises(ValueError, match=field):
        ClusterSpec(**kwargs)


def test_override_replaces_and_adds_properties(tmp_path: Path):
    path = tmp_path / "yarn-site.xml"
    path.write_text(
        "<configuration><property><name>a</name><value>1</value></property>"
        "<property><name>b</name><value>2</value></property></configuration>"
    )
    override_xml(path, {"a": "10", "c": "30"})
    props = {p.findtext("name"): p.findtext("value") for p in ET.parse(path).getroot()}
    assert props == {"a": "10", "b": "2", "c": "30"}


def test_shipped_templates_enable_the_services_api():
    site_xml = env.settings().hadoop_conf_template() / "yarn-site.xml"
    props = {p.findtext("name"): p.findtext("value") for p in ET.parse(site_xml).getroot()}
    assert props["yarn.webapp.api-service.enable"] == "true"
    assert props["yarn.nodemanager.container-executor.class"].endswith("DefaultContainerExecutor")


@pytest.fixture()
def fake_lib(tmp_path: Path) -> Path:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "hadoop-yarn-server-resourcemanager-3.4.2.jar").write_bytes(b"")
    return lib


def test_missing_jars_are_a_prerequisite_error(tmp_path: Path):
    cluster = LocalCluster(tmp_path / "c", hadoop_lib=tmp_path / "nothing-here")
    with pytest.raises(PrerequisiteError, match="install.sh"):
        cluster.up(ClusterSpec(port_base=21000))


def _spec_holding_its_rm_web_port(holder: socket.socket) -> ClusterSpec:
    """A one-node spec whose ResourceManager web port ``holder`` has just taken from the kernel (so no other
    process has it) and whose other ports are free now: a fixed port base collided with clusters that other
    test runs on this machine had started there."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        spec = ClusterSpec(nodes=1, port_base=port - 88)
        others = [p for p in spec.all_ports() if p != port]
        if spec.port_base > 1024 and all(_free(p) for p in others):
            try:
                holder.bind(("127.0.0.1", port))
            except OSError:
                continue
            return spec
    raise AssertionError("no free port range for the test in 50 tries")


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_a_taken_port_is_refused_before_anything_starts(tmp_path: Path, fake_lib: Path):
    with socket.socket() as holder:
        spec = _spec_holding_its_rm_web_port(holder)
        holder.listen()
        with pytest.raises(PortInUseError, match=str(spec.rm_web_port)) as err:
            LocalCluster(tmp_path / "c", hadoop_lib=fake_lib).up(spec)
    assert "webapp" in err.value.role
    assert not (tmp_path / "c" / "cluster.json").exists()


def test_up_refuses_while_a_recorded_daemon_runs(tmp_path: Path, fake_lib: Path):
    cluster = LocalCluster(tmp_path / "c", hadoop_lib=fake_lib)
    cluster.dir.mkdir(parents=True)
    me = Daemon("rm", os.getpid(), start_ticks(os.getpid()), tmp_path / "rm.log")
    cluster.state.write(ClusterSpec(), [me])
    with pytest.raises(ClusterAlreadyUpError, match=f"rm={os.getpid()}"):
        cluster.up(ClusterSpec())


def test_a_recycled_pid_is_not_taken_for_a_daemon(tmp_path: Path):
    cluster = LocalCluster(tmp_path / "c")
    cluster.dir.mkdir(parents=True)
    stale = Daemon("rm", os.getpid(), start_ticks(os.getpid()) - 1, tmp_path / "rm.log")
    cluster.state.write(ClusterSpec(), [stale])
    assert cluster.running_daemons() == []


def test_status_and_down_without_a_cluster(tmp_path: Path):
    cluster = LocalCluster(tmp_path / "none")
    with pytest.raises(ClusterNotUpError):
        cluster.status()
    with pytest.raises(ClusterNotUpError):
        cluster.down()


@pytest.mark.parametrize("host", ["", "rm host", "rm;rm", "rm:8088"])
def test_a_placement_names_the_bad_host(host: str):
    with pytest.raises(ValueError, match=r"rm_host must be a host name or an IPv4 address, got"):
        Placement(zk_host="zookeeper", rm_host=host, node_host="nm-1")


def test_daemon_command_refuses_an_unknown_role_or_node(tmp_path: Path, fake_lib: Path):
    cluster = LocalCluster(tmp_path / "c", hadoop_lib=fake_lib)
    placement = Placement(zk_host="zookeeper", rm_host="resourcemanager", node_host="nm-1")
    with pytest.raises(
        ValueError,
        match="role must be one of zookeeper, resourcemanager, nodemanager, namenode, datanode, got 'historyserver'",
    ):
        cluster.daemon_command("historyserver", ClusterSpec(), placement)
    with pytest.raises(ValueError, match=r"node must be in \[0, 2\), got 2"):
        cluster.daemon_command("nodemanager", ClusterSpec(nodes=2), placement, node=2)
    assert not (tmp_path / "c" / "conf").exists()


def test_the_daemon_command_tells_a_bad_host_name_and_runs_nothing(
    tmp_path: Path, fake_lib: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("SUBMARINE_HADOOP_LIB", str(fake_lib))
    result = CliRunner().invoke(
        cli, ["cluster", "daemon", "nodemanager", "--node-host", "bad host", "--cluster-dir", str(tmp_path / "c")]
    )
    assert result.exit_code == 1
    assert "node_host must be a host name or an IPv4 address, got 'bad host'" in result.output


def test_daemon_names_and_their_ports():
    spec = ClusterSpec(nodes=2, port_base=20000)
    assert spec.daemon_names() == ("zk", "rm", "nm-0", "nm-1")
    assert spec.daemon_ports("zk") == {20181: "ZooKeeper client port"}
    assert set(spec.daemon_ports("rm")) == {20030, 20031, 20032, 20033, 20088}
    assert spec.daemon_ports("nm-1") == {
        20110: "NodeManager nm-1 yarn.nodemanager.address",
        20111: "NodeManager nm-1 yarn.nodemanager.localizer.address",
        20112: "NodeManager nm-1 yarn.nodemanager.webapp.address",
    }
    for name in ("nm-2", "nm-01", "resourcemanager"):
        with pytest.raises(ValueError, match=f"daemon must be one of zk, rm, nm-0, nm-1, got '{name}'"):
            spec.daemon_ports(name)


def site(path: Path) -> dict[str | None, str | None]:
    return {p.findtext("name"): p.findtext("value") for p in ET.parse(path).getroot()}


def test_shipped_templates_turn_on_work_preserving_restart():
    yarn = site(env.settings().hadoop_conf_template() / "yarn-site.xml")
    assert yarn["yarn.resourcemanager.recovery.enabled"] == "true"
    assert yarn["yarn.resourcemanager.work-preserving-recovery.enabled"] == "true"
    assert yarn["yarn.resourcemanager.store.class"] == (
        "org.apache.hadoop.yarn.server.resourcemanager.recovery.ZKRMStateStore"
    )
    assert yarn["yarn.nodemanager.recovery.enabled"] == "true"
    assert yarn["yarn.nodemanager.recovery.supervised"] == "true"
    # The RM caps a service's AM attempts at its own maximum.
    assert int(yarn["yarn.resourcemanager.am.max-attempts"] or 0) >= int(
        yarn["yarn.service.am-restart.max-attempts"] or 0
    )
    assert site(env.settings().hadoop_conf_template() / "core-site.xml")["hadoop.zk.address"] == "zookeeper:2181"


@pytest.mark.parametrize(
    "placement",
    [None, Placement(zk_host="zookeeper", rm_host="resourcemanager", node_host="nm-1")],
    ids=["up", "compose"],
)
def test_each_daemon_finds_the_clusters_zookeeper_and_each_node_keeps_its_own_recovery_state(
    tmp_path: Path, placement: Placement | None
):
    """The overrides `up` writes (one host) and `cluster daemon` writes (the docker-compose cluster)."""
    spec = ClusterSpec(nodes=2, port_base=20000)
    cluster = LocalCluster(tmp_path / "c")
    zk_host = placement.zk_host if placement else spec.host
    recovery_dirs = set()
    for name, node in (("rm", None), ("nm-0", 0), ("nm-1", 1)):
        _files, settings = cluster.conf.daemon_files(name, spec, tmp_path / "am.tar.gz", node=node, placement=placement)
        conf = cluster.dir / "conf" / name
        assert settings[conf / "core-site.xml"]["hadoop.zk.address"] == f"{zk_host}:{spec.zk_port}"
        if node is not None:
            yarn = settings[conf / "yarn-site.xml"]
            # Recovery needs the NodeManager back on the same address: a fixed port, never 0.
            assert yarn["yarn.nodemanager.address"].endswith(f":{spec.nm_ports(node)['yarn.nodemanager.address']}")
            recovery_dirs.add(yarn["yarn.nodemanager.recovery.dir"])
    assert recovery_dirs == {str(cluster.dir / "nm-0" / "recovery"), str(cluster.dir / "nm-1" / "recovery")}


def recorded(tmp_path: Path, **alive: bool) -> LocalCluster:
    """A cluster directory that records zk, rm, nm-0 and nm-1; a daemon named ``False`` has exited (its pid is
    this process's, with another start time), the others run (this process)."""
    cluster = LocalCluster(tmp_path / "c")
    cluster.dir.mkdir(parents=True)
    ticks = start_ticks(os.getpid())
    daemons = [
        Daemon(name, os.getpid(), ticks if alive.get(name.replace("-", "_"), True) else ticks - 1, tmp_path / "x.log")
        for name in ("zk", "rm", "nm-0", "nm-1")
    ]
    cluster.state.write(ClusterSpec(nodes=2), daemons)
    return cluster


def test_restart_of_an_unknown_daemon_names_it_and_the_known_ones(tmp_path: Path):
    cluster = recorded(tmp_path)
    with pytest.raises(
        UnknownDaemonError, match="unknown daemon 'nm-2': this cluster's daemons are zk, rm, nm-0, nm-1"
    ):
        cluster.restart("nm-2")
    result = CliRunner().invoke(cli, ["cluster", "restart", "namenode", "--cluster-dir", str(cluster.dir)])
    assert result.exit_code == 1
    assert "unknown daemon 'namenode': this cluster's daemons are zk, rm, nm-0, nm-1" in result.output


@pytest.mark.parametrize(("name", "needs", "dead"), [("rm", "zk", {"zk": False}), ("nm-1", "rm", {"rm": False})])
def test_restart_refuses_while_what_the_daemon_needs_is_down(tmp_path: Path, name: str, needs: str, dead: dict):
    cluster = recorded(tmp_path, **dead)
    before = cluster.state_file.read_text()
    with pytest.raises(DaemonNotRunningError, match=f"{name} needs {needs}, which is not running"):
        cluster.restart(name)
    assert cluster.state_file.read_text() == before


def test_restart_without_a_cluster(tmp_path: Path):
    with pytest.raises(ClusterNotUpError, match="no cluster in"):
        LocalCluster(tmp_path / "none").restart("rm")
