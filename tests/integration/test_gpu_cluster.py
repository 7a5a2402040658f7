"""`submarine cluster up --gpus-per-node 2`: the real ResourceManager and NodeManagers with YARN's GPU plugin,
each NodeManager discovering its devices through the stand-in ``nvidia-smi``; the RM scheduling them, and
`job run` refusing what no node holds.

Starts a 2-node cluster of its own (port base ``SUBMARINE_TEST_PORT_BASE`` + 500) and brings it down.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
import requests
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import GPU_RESOURCE, ClusterSpec, LocalCluster
from submarine_elastic.cluster.gpu import parse_nvidia_smi
from submarine_elastic.elastic.jobspec import job_dir
from submarine_elastic.yarn import YarnServiceClient
from submarine_elastic.yarn.spec import Component, Resource, ResourceInformation, RestartPolicy, Service
from tests.integration.conftest import AS_USER, PORT_BASE, eventually

pytestmark = pytest.mark.integration

GPUS = 2


@pytest.fixture(scope="module")
def gpu_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, ClusterSpec]]:
    cluster_dir = tmp_path_factory.mktemp("gpu-cluster")
    port_base = PORT_BASE + 500
    result = CliRunner().invoke(
        cli,
        ["cluster", "up", "--cluster-dir", str(cluster_dir), "--gpus-per-node", str(GPUS), "--port-base",
         str(port_base), "--node-memory-mb", "3072", "--node-vcores", "4", "--timeout", "240"],
    )  # fmt: skip
    cluster = LocalCluster(cluster_dir)
    try:
        assert result.exit_code == 0, result.output
        yield cluster, cluster.spec()
    finally:
        if cluster.state_file.exists():
            cluster.down()


def test_the_resourcemanager_counts_two_gpus_on_each_node(gpu_cluster: tuple[LocalCluster, ClusterSpec]) -> None:
    cluster, spec = gpu_cluster
    nodes = requests.get(f"{spec.rm_url}/ws/v1/cluster/nodes", params=AS_USER, timeout=10).json()["nodes"]["node"]
    assert len(nodes) == 2
    for node in nodes:
        total = {r["name"]: r["value"] for r in node["totalResource"]["resourceInformations"]["resourceInformation"]}
        assert total[GPU_RESOURCE] == GPUS, node
    status = cluster.status()
    assert [(n.used_gpus, n.available_gpus) for n in status.nodes] == [(0, GPUS), (0, GPUS)]
    shown = CliRunner().invoke(cli, ["cluster", "status", "--cluster-dir", str(cluster.dir)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "gpus used/free" in shown.output and f"gpus 0/{2 * GPUS} used" in shown.output


def test_each_nodemanager_discovered_the_devices_its_standin_prints(
    gpu_cluster: tuple[LocalCluster, ClusterSpec],
) -> None:
    cluster, spec = gpu_cluster
    seen: list[str] = []
    for i in range(spec.nodes):
        standin = cluster.dir / "conf" / f"nm-{i}" / "gpu" / "nvidia-smi"
        printed = parse_nvidia_smi(subprocess.run([standin, "-x", "-q"], capture_output=True, check=True).stdout)
        port = spec.nm_ports(i)["yarn.nodemanager.webapp.address"]
        url = f"http://{spec.host}:{port}/ws/v1/node/resources/{requests.utils.quote(GPU_RESOURCE, safe='')}"
        info = requests.get(url, params=AS_USER, timeout=10).json()
        discovered = info["gpuDeviceInformation"]["gpus"]
        assert [(g["uuid"], int(g["minorNumber"])) for g in discovered] == [
            (d.uuid, d.minor_number) for d in printed
        ], info
        assert {g["productName"] for g in discovered} == {"NVIDIA H100 80GB HBM3"}
        seen += [d.uuid for d in printed]
    assert len(set(seen)) == spec.nodes * GPUS, "no two devices share a uuid"


def test_one_gpu_containers_fill_the_gpus_and_a_fifth_waits(gpu_cluster: tuple[LocalCluster, ClusterSpec]) -> None:
    """YARN schedules the stand-in GPUs: five 1-GPU containers on 2 nodes x 2 GPUs, where memory and vcores would
    hold all five, run four, two on each node, and leave the fifth pending."""
    _cluster, spec = gpu_cluster
    gpu = {GPU_RESOURCE: ResourceInformation(value=1, unit="")}
    service = Service(
        name="gpusleep",
        version="1.0",
        components=[
            Component(
                name="worker",
                number_of_containers=5,
                launch_command="sleep 900",
                resource=Resource(cpus=1, memory="256", additional=gpu),
                restart_policy=RestartPolicy.ALWAYS,
            )
        ],
    )
    with YarnServiceClient(spec.rm_url, user="tester", poll_interval=0.5) as yarn:
        yarn.create(service, wait=False)
        try:
            eventually(lambda: len(yarn.ready_instances("gpusleep", "worker")) == 4, "4 workers READY", 240)

            def pending() -> bool:
                metrics = requests.get(f"{spec.rm_url}/ws/v1/cluster/metrics", params=AS_USER, timeout=10).json()
                return int(metrics["clusterMetrics"]["containersPending"]) >= 1

            eventually(pending, "the fifth container pending in the RM", 60)
            assert [(n.used_gpus, n.free_gpus) for n in yarn.nodes()] == [(2, 0), (2, 0)]
            assert all(n.free_memory_mb >= 256 and n.free_vcores >= 1 for n in yarn.nodes()), "GPUs alone hold it"
            assert len(yarn.ready_instances("gpusleep", "worker")) == 4
        finally:
            yarn.destroy("gpusleep", missing_ok=True, timeout=120)


def test_job_run_refuses_more_gpus_than_a_node_has(
    gpu_cluster: tuple[LocalCluster, ClusterSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    _cluster, spec = gpu_cluster
    monkeypatch.setenv("SUBMARINE_RM_URL", spec.rm_url)
    result = CliRunner().invoke(
        cli,
        ["job", "run", "--name", "toobig", "--elastic", "--insecure", "--worker_launch_cmd", "sleep 60",
         "--worker_resources", f"memory-mb=256,vcores=1,gpu={GPUS + 1}"],
    )  # fmt: skip
    out = " ".join(result.output.split())
    assert result.exit_code == 1, out
    assert (
        f"asks yarn.io/gpu {GPUS + 1} per worker, but the largest node of the cluster at {spec.rm_url} has {GPUS}"
        in out
    )
    assert not job_dir("toobig").exists()
    with YarnServiceClient(spec.rm_url) as yarn:
        assert "toobig" not in {a.name for a in yarn.list(states=None)}


def test_down_leaves_nothing_listening(gpu_cluster: tuple[LocalCluster, ClusterSpec]) -> None:
    cluster, spec = gpu_cluster
    cluster.down()
    for port in spec.all_ports():
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://{spec.host}:{port}/", timeout=2)
