"""An elastic TensorFlow job across the hosts of ``cluster up --hosts 3``: its driver and workers in different
network namespaces, Horovod's rendezvous and Gloo on the hosts' own interface, metrics reported from every
host to a controller in the root namespace, and the job flexed and shown from host 0 as from the root
namespace. Nothing reaches another host over loopback.
"""

from __future__ import annotations

import collections
import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import Host
from submarine_elastic.controller import locate
from submarine_elastic.controller.api import ControllerInfo
from submarine_elastic.metrics.proto import metrics_pb2, metrics_pb2_grpc
from submarine_elastic.rpc import bearer, open_channel
from submarine_elastic.submit.client import JobClient
from submarine_elastic.tls import cluster_ca
from submarine_elastic.yarn import ContainerStatus, ServiceNotFoundError, YarnServiceClient
from tests.integration.conftest import container_processes, eventually, submarine
from tests.integration.hosts import SPREAD_WORKER_MB, HostsCluster
from tests.integration.jobcheck import check_training, finish, start_job, training_pids, wait_for_steps_at

pytestmark = pytest.mark.integration

SUBMARINE = str(Path(sys.executable).parent / "submarine")
#: The state column of an established connection in /proc/net/tcp.
TCP_ESTABLISHED = "01"


def net_namespace(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def namespace_inode(host: Host) -> int:
    return os.stat(f"/run/netns/{host.namespace}").st_ino


def on_host(hosts: HostsCluster, container: ContainerStatus) -> Host:
    """The host a container runs on, checked: YARN's address for it is the host's, and each of its processes
    sits in the host's network namespace."""
    host = next(h for h in hosts.network.all_hosts if h.name == container.bare_host)
    assert container.ip == host.address, f"{container.id} on {host.name} has address {container.ip}"
    pids = container_processes(container.id)
    assert pids, f"no process of {container.id}"
    for pid in pids:
        assert net_namespace(pid) == namespace_inode(host), f"process {pid} of {container.id} is not on {host.name}"
    return host


@pytest.fixture()
def controller(
    hosts_cluster: HostsCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ControllerInfo]:
    """`submarine controller start` in the root namespace, with its defaults, for the cluster on hosts; ``job
    run`` puts a job's files on that cluster's HDFS (``SUBMARINE_CLUSTER_DIR`` names it)."""
    monkeypatch.setenv("SUBMARINE_RM_URL", hosts_cluster.rm_url)
    monkeypatch.setenv("SUBMARINE_CLUSTER_DIR", str(hosts_cluster.cluster.dir))
    monkeypatch.setenv("SUBMARINE_CONTROLLER_DIR", str(tmp_path / "controller"))
    out = submarine(hosts_cluster.rm_url, "controller", "start")
    info = locate.running()
    assert info is not None, out
    try:
        yield info
    finally:
        CliRunner().invoke(cli, ["controller", "stop"], catch_exceptions=False)


def tcp_peers(pid: int) -> set[tuple[str, str]]:
    """(local, remote) IPv4 addresses of the established TCP connections of process ``pid``, read in its own
    network namespace (``/proc/PID/net/tcp``; psutil reads the caller's)."""
    sockets = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                sockets.add(target[len("socket:[") : -1])

    def address(field: str) -> str:
        return socket.inet_ntoa(bytes.fromhex(field.split(":")[0])[::-1])

    found = set()
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        cols = line.split()
        if cols[3] == TCP_ESTABLISHED and cols[9] in sockets:
            found.add((address(cols[1]), address(cols[2])))
    return found


def on_host_0(hosts: HostsCluster, *args: str) -> str:
    """``submarine ARGS`` run on host 0 (in its namespace); a non-zero exit fails the test."""
    argv = hosts.network.host(0).command([SUBMARINE, *args])
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert result.returncode == 0, f"{args} on host 0: {result.stdout}{result.stderr}"
    return result.stdout


def metrics_of(info: ControllerInfo, name: str) -> metrics_pb2.GetJobResponse:
    """The job's summary and latest points from the controller's metrics service, as `job show` reads them."""
    issued = cluster_ca().issue_client("submarine cli")
    token = locate.read_token(locate.directory(), locate.METRICS_TOKEN)
    with open_channel(info.metrics_endpoint, ca=issued.ca, client_cert=(issued.cert, issued.key)) as channel:
        return metrics_pb2_grpc.MetricsServiceStub(channel).GetJob(
            metrics_pb2.GetJobRequest(job_id=name, max_points=1024), metadata=bearer(token), timeout=10
        )


def test_a_job_across_hosts_trains_flexes_and_reports_from_every_host(
    hosts_cluster: HostsCluster, controller: ControllerInfo, tmp_path: Path
):
    hosts = hosts_cluster
    bridge = hosts.network.bridge_address
    # The controller in the root namespace listens on, and advertises, the bridge's address: every host
    # routes there (loopback would be each host's own).
    assert controller.metrics_endpoint.rsplit(":", 1)[0] == bridge
    assert controller.address.rsplit(":", 1)[0] == bridge

    name = "across-hosts"
    # Workers this large have a host each: the three land on the three hosts.
    resources = f"memory-mb={SPREAD_WORKER_MB},vcores=1"
    start_job(hosts.rm_url, name, tmp_path, 1, None, "--worker_resources", resources)
    with YarnServiceClient(hosts.rm_url, poll_interval=0.5) as yarn:
        try:
            with JobClient(name, yarn, locate_timeout=120) as job:
                job.wait_for_size(1, timeout=180)
            out = submarine(hosts.rm_url, "job", "flex", name, "--workers", "2", "--timeout", "180")
            assert "ring has 2 workers" in out
            wait_for_steps_at(tmp_path / "log", 2, count=5)  # train at this size before the next resize
            # From host 0's namespace: the CLI finds the driver through the RM and dials it on its host.
            out = on_host_0(hosts, "job", "flex", name, "--workers", "3", "--timeout", "180")
            assert "ring has 3 workers" in out

            (driver,) = yarn.ready_instances(name, "driver")
            workers = yarn.ready_instances(name, "worker")
            driver_host = on_host(hosts, driver)
            worker_hosts = {w.component_instance_name: on_host(hosts, w) for w in workers}
            assert sorted(h.name for h in worker_hosts.values()) == sorted(h.name for h in hosts.network.all_hosts)
            assert sum(h != driver_host for h in worker_hosts.values()) == 2

            # Gloo's full mesh: each training process holds connections from its host's address (on eth0, its
            # host's only link) to the address of every other worker's host, none over loopback.
            for worker in workers:
                (pid,) = training_pids(worker.id)
                mine = worker_hosts[worker.component_instance_name].address
                others = {h.address for i, h in worker_hosts.items() if i != worker.component_instance_name}
                peers = tcp_peers(pid)
                assert others <= {remote for local, remote in peers if local == mine}, (worker.id, peers)
                # The job was told the controller's routable address; no interface was named for it.
                seen = psutil.Process(pid).environ()
                assert seen["SUBMARINE_METRICS_ENDPOINT"] == controller.metrics_endpoint
                assert "SUBMARINE_GLOO_IFACE" not in seen

            def reported_by_all() -> metrics_pb2.GetJobResponse | None:
                got = metrics_of(controller, name)
                latest = {p.worker.instance for p in got.points if p.world_size == 3}
                return got if latest == set(worker_hosts) else None

            eventually(reported_by_all, "metrics at world size 3 from the worker on each host", 60)

            shown = " ".join(on_host_0(hosts, "job", "show", name).split())
            assert "phase running; ring of 3, target 3" in shown, shown
            for instance in worker_hosts:
                assert f"{instance} │" in shown, shown
            assert [e.to_workers for e in job_timeline(yarn, name)] == [2, 3]
            finish(yarn, name, tmp_path, timeout=120)
            # Killed from host 0: the service removed, and the controller in the root namespace told (a controller
            # it cannot reach fails the command).
            assert f"job {name} killed" in on_host_0(hosts, "job", "kill", name)
            with pytest.raises(ServiceNotFoundError):
                yarn.status(name)
        finally:
            yarn.destroy(name, missing_ok=True)

    steps = check_training(tmp_path / "log")
    sizes = [steps[s][0]["size"] for s in sorted(steps)]
    assert sizes[0] == 1 and {1, 2, 3} <= set(sizes)
    # What the controller received from the hosts: each point at the ring size its step really ran with.
    got = metrics_of(controller, name)
    assert {t.world_size for t in got.summary.throughput} >= {1, 2, 3}
    by_step: dict[int, set[int]] = collections.defaultdict(set)
    for point in got.points:
        by_step[point.point.step].add(point.world_size)
    assert by_step
    for step, reported in by_step.items():
        if step not in steps:
            continue  # trained, reported, and rolled back by a resize: trained again under the same number
        assert reported == {steps[step][0]["size"]}, f"step {step}: metrics {reported}, ring {steps[step][0]['size']}"


def job_timeline(yarn: YarnServiceClient, name: str) -> list:
    with JobClient(name, yarn, locate_timeout=30) as job:
        return list(job.status().timeline)
