"""`submarine cluster up|down|status` against real ZooKeeper, ResourceManager and NodeManager JVMs."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import requests

from submarine_elastic import env
from submarine_elastic.cluster import (
    ClusterAlreadyUpError,
    ClusterNotUpError,
    ClusterSpec,
    DaemonStartError,
    LocalCluster,
    PortInUseError,
)
from tests.integration.conftest import AS_USER, PORT_BASE, container_processes, eventually, processes_under

pytestmark = pytest.mark.integration


def test_status_shows_every_node_running_with_its_capacity(yarn_cluster: LocalCluster, cluster_spec: ClusterSpec):
    st = yarn_cluster.status()
    assert st.rm_error is None
    assert {d.name for d, alive in st.daemons if alive} == {"zk", "rm", "nm-0", "nm-1"}
    assert [n.state for n in st.nodes] == ["RUNNING", "RUNNING"]
    assert st.total_memory_mb == 2 * cluster_spec.node_memory_mb
    assert st.total_vcores == 2 * cluster_spec.node_vcores
    ports = sorted(int(n.node_id.rsplit(":", 1)[1]) for n in st.nodes)
    assert ports == [
        cluster_spec.nm_ports(0)["yarn.nodemanager.address"],
        cluster_spec.nm_ports(1)["yarn.nodemanager.address"],
    ]


def test_services_api_is_enabled(yarn_cluster: LocalCluster, cluster_spec: ClusterSpec):
    resp = requests.get(f"{cluster_spec.rm_url}/app/v1/services/version", params={"user.name": "test"}, timeout=10)
    assert resp.status_code == 200, resp.text
    assert resp.json()["hadoop_version"].startswith("3.4.2 ")


def test_up_twice_is_refused_and_keeps_the_running_cluster(yarn_cluster: LocalCluster, cluster_spec: ClusterSpec):
    before = [d.pid for d in yarn_cluster.running_daemons()]
    with pytest.raises(ClusterAlreadyUpError, match="already up"):
        yarn_cluster.up(cluster_spec)
    assert [d.pid for d in yarn_cluster.running_daemons()] == before


def test_a_taken_port_is_named_and_nothing_starts(
    yarn_cluster: LocalCluster, cluster_spec: ClusterSpec, tmp_path: Path
):
    other = LocalCluster(tmp_path / "other")
    with pytest.raises(PortInUseError) as err:
        other.up(cluster_spec)
    assert err.value.role == cluster_spec.all_ports()[err.value.port]
    assert f"port {err.value.port} ({err.value.role})" in str(err.value)
    assert other.running_daemons() == []
    assert processes_under(tmp_path / "other") == []


def test_a_node_that_never_registers_fails_with_its_log_and_leaves_nothing(tmp_path: Path):
    broken = tmp_path / "conf"
    shutil.copytree(env.settings().hadoop_conf_template(), broken)
    yarn_site = broken / "yarn-site.xml"
    yarn_site.write_text(
        yarn_site.read_text().replace(
            "org.apache.hadoop.yarn.server.nodemanager.DefaultContainerExecutor", "org.example.NoSuchExecutor"
        )
    )
    cluster = LocalCluster(tmp_path / "cluster", conf_template=broken)
    with pytest.raises(DaemonStartError) as err:
        cluster.up(ClusterSpec(nodes=1, port_base=PORT_BASE + 500), timeout=120)
    assert err.value.daemon == "nm-0"
    assert "NoSuchExecutor" in err.value.log_tail
    assert processes_under(tmp_path / "cluster") == []
    with pytest.raises(ClusterNotUpError):
        cluster.status()


# A container's command that starts a process in a session of its own: YARN's process group of the
# container does not hold it, and nothing on its command line names the cluster.
ESCAPER = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
time.sleep(600)
"""


def test_down_stops_the_daemons_and_their_containers_but_not_a_parent_whose_environment_names_the_cluster(
    tmp_path: Path,
):
    """`cluster down` run from a shell whose environment holds SUBMARINE_CLUSTER_DIR (as a `make`, or every
    process of the docker image, has it): that shell and a bystander with the same environment live on;
    the daemons and every process of the container, the escaped one too, are gone."""
    spec = ClusterSpec(nodes=1, port_base=PORT_BASE + 700)
    directory = tmp_path / "cluster"
    cluster = LocalCluster(directory)
    cluster.up(spec, timeout=240)
    naming_env = {**os.environ, "SUBMARINE_CLUSTER_DIR": str(directory)}
    bystander = subprocess.Popen(["sleep", "600"], env=naming_env)
    try:
        daemons = [psutil.Process(d.pid) for d in cluster.running_daemons()]
        escaper = tmp_path / "escaper.py"
        escaper.write_text(ESCAPER)
        service = {
            "name": "orphan-check",
            "version": "1",
            "components": [
                {
                    "name": "worker",
                    "number_of_containers": 1,
                    "launch_command": f"{sys.executable} {escaper}",
                    "resource": {"cpus": 1, "memory": "256"},
                    "restart_policy": "ALWAYS",
                }
            ],
        }
        url = f"{spec.rm_url}/app/v1/services"
        resp = requests.post(url, json=service, params={"user.name": "test"}, timeout=30)
        assert resp.status_code == 202, resp.text

        def ready_container() -> str | None:
            status = requests.get(f"{url}/orphan-check", params={"user.name": "test"}, timeout=10).json()
            ready = [c for comp in status.get("components", []) for c in comp.get("containers", [])]
            return next((c["id"] for c in ready if c["state"] == "READY"), None)

        container = eventually(ready_container, "the worker container READY", timeout=180)

        def escaped() -> list[psutil.Process]:
            family = [psutil.Process(pid) for pid in container_processes(container)]
            sleeper = [p for p in family if any("time.sleep(600)" in arg for arg in p.cmdline())]
            return family if any(p.pid == os.getpgid(p.pid) for p in sleeper) else []

        family = eventually(escaped, "the container's process in a session of its own", timeout=60)
        assert set(processes_under(directory)) >= {p.pid for p in daemons + family}

        parent = subprocess.run(
            [
                "sh",
                "-c",
                f'"{Path(sys.executable).with_name("submarine")}" cluster down --cluster-dir "{directory}"'
                " && echo the parent lives on",
            ],
            env=naming_env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        if cluster.state_file.exists():
            cluster.down()
    assert parent.returncode == 0 and "the parent lives on" in parent.stdout, (parent.returncode, parent.stderr)
    still = bystander.poll()
    bystander.kill()
    bystander.wait()
    assert still is None, f"a process whose environment names the cluster was stopped ({still})"
    assert [p.pid for p in daemons + family if _runs(p)] == []
    assert processes_under(directory) == []
    assert not cluster.state_file.exists()


def _runs(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_daemons_started_one_by_one_form_a_cluster_and_stop_on_sigterm(tmp_path: Path):
    """What each container of the docker-compose cluster runs, here with every host name 127.0.0.1."""
    spec = ClusterSpec(nodes=2, port_base=PORT_BASE + 900)
    directory = tmp_path / "cluster"
    hosts = ["--zk-host", "127.0.0.1", "--rm-host", "127.0.0.1", "--node-host", "127.0.0.1"]
    common = ["--cluster-dir", str(directory), "--port-base", str(spec.port_base), *hosts]
    started: dict[str, subprocess.Popen[bytes]] = {}

    def start(name: str, *args: str) -> None:
        log = (tmp_path / f"{name}.err").open("wb")
        started[name] = subprocess.Popen(
            [str(Path(sys.executable).with_name("submarine")), "cluster", "daemon", *args, *common],
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
        )

    def until(ready: Callable[[], bool], what: str, timeout: float = 180) -> None:
        def check() -> bool:
            dead = {name: p.returncode for name, p in started.items() if p.poll() is not None}
            assert not dead, f"exited while waiting for {what}: {dead}"
            with contextlib.suppress(requests.RequestException, OSError):
                return ready()
            return False

        eventually(check, what, timeout)

    def zk_ok() -> bool:
        with socket.create_connection(("127.0.0.1", spec.zk_port), timeout=2) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"

    def running_nodes() -> list[int]:
        nodes = requests.get(f"{spec.rm_url}/ws/v1/cluster/nodes", params=AS_USER, timeout=5).json()["nodes"] or {
            "node": []
        }
        return sorted(int(n["id"].rsplit(":", 1)[1]) for n in nodes["node"] if n["state"] == "RUNNING")

    try:
        start("zk", "zookeeper")
        until(zk_ok, "ZooKeeper to answer 'ruok'")
        start("rm", "resourcemanager")
        start("nm-0", "nodemanager", "--node", "0")
        start("nm-1", "nodemanager", "--node", "1", "--node-memory-mb", "2048")
        expected = [spec.nm_ports(i)["yarn.nodemanager.address"] for i in range(2)]
        until(lambda: running_nodes() == expected, f"NodeManagers on ports {expected} RUNNING", timeout=240)
        resp = requests.get(f"{spec.rm_url}/app/v1/services/version", params={"user.name": "test"}, timeout=10)
        assert resp.status_code == 200, resp.text
        memory = requests.get(f"{spec.rm_url}/ws/v1/cluster/metrics", params=AS_USER, timeout=5).json()[
            "clusterMetrics"
        ]
        assert memory["totalMB"] == spec.node_memory_mb + 2048
        for name, proc in started.items():
            # The command replaces itself with the JVM, so a container's stop signal reaches the daemon.
            assert psutil.Process(proc.pid).cmdline()[0].endswith("java"), name
        assert b"ResourceManager" in (tmp_path / "rm.err").read_bytes()  # logs go to stderr
    finally:
        for proc in reversed(started.values()):
            proc.send_signal(signal.SIGTERM)
        codes = {}
        for name, proc in started.items():
            try:
                codes[name] = proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = "killed after 60 s"
    assert all(isinstance(code, int) for code in codes.values()), codes
    assert processes_under(directory) == []
