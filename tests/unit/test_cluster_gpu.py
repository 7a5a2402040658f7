"""`cluster up --gpus-per-node`: the configuration YARN's GPU plugin needs, the stand-in ``nvidia-smi`` and the
discovery XML it prints, parsed back as YARN reads it; the flag's refusals; GPUs in `cluster status`."""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import responses
from click.testing import CliRunner

from submarine_elastic import resources
from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import GPU_RESOURCE, ClusterSpec, GpuDiscoveryError, LocalCluster, Placement
from submarine_elastic.cluster.gpu import parse_nvidia_smi, standin_output
from submarine_elastic.cluster.hadoop_conf import write_files

TARBALL = Path("/nonexistent/service-dep.tar.gz")
FIXTURE = resources.gpu_fixture().read_bytes()


def site(content: bytes) -> dict[str, str]:
    return {p.findtext("name", ""): p.findtext("value", "") for p in ET.fromstring(content).iter("property")}


def test_the_fixture_is_one_h200_as_its_nvidia_smi_printed_it() -> None:
    [gpu] = parse_nvidia_smi(FIXTURE)
    assert gpu.product_name == "NVIDIA H200"
    assert gpu.minor_number == 0
    assert gpu.uuid.startswith("GPU-")
    assert gpu.pci_bus_id == "00000000:00:06.0"
    assert gpu.memory_total_mib == 143771
    root = ET.fromstring(FIXTURE)
    assert root.findtext("driver_version") and root.findtext("cuda_version")


def test_the_rm_declares_the_gpu_type_and_schedules_by_every_resource(tmp_path: Path) -> None:
    files, settings = LocalCluster(tmp_path).conf.daemon_files("rm", ClusterSpec(gpus_per_node=2), TARBALL)
    conf = tmp_path.resolve() / "conf" / "rm"
    assert site(files[conf / "resource-types.xml"]) == {"yarn.resource-types": GPU_RESOURCE}
    calculator = site(files[conf / "capacity-scheduler.xml"])["yarn.scheduler.capacity.resource-calculator"]
    assert calculator == "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator"
    assert "yarn.nodemanager.resource-plugins" not in site(files[conf / "yarn-site.xml"])
    assert conf / "capacity-scheduler.xml" in settings


def test_each_nodemanager_runs_the_gpu_plugin_on_its_own_standin(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    spec = ClusterSpec(nodes=2, gpus_per_node=3)
    seen: list[str] = []
    for node in range(2):
        files, _settings = cluster.conf.daemon_files(f"nm-{node}", spec, TARBALL, node=node)
        write_files(files)
        conf = cluster.dir / "conf" / f"nm-{node}"
        yarn = site(files[conf / "yarn-site.xml"])
        assert yarn["yarn.nodemanager.resource-plugins"] == GPU_RESOURCE
        assert yarn["yarn.nodemanager.resource-plugins.gpu.allowed-gpu-devices"] == "auto"
        directory = Path(yarn["yarn.nodemanager.resource-plugins.gpu.path-to-discovery-executables"])
        assert directory.is_absolute() and directory == conf / "gpu"
        assert site(files[conf / "resource-types.xml"]) == {"yarn.resource-types": GPU_RESOURCE}
        # What YARN's GpuDiscoverer runs.
        printed = subprocess.run([directory / "nvidia-smi", "-x", "-q"], capture_output=True, check=True).stdout
        devices = parse_nvidia_smi(printed)
        assert [d.minor_number for d in devices] == [0, 1, 2]
        assert {d.product_name for d in devices} == {"NVIDIA H200"}
        assert len({d.pci_bus_id for d in devices}) == 3
        assert ET.fromstring(printed).findtext("attached_gpus") == "3"
        seen += [d.uuid for d in devices]
    assert len(set(seen)) == 6, "every device of every node has a uuid of its own"


def test_the_standin_refuses_what_yarn_does_not_run(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    write_files(cluster.conf.daemon_files("nm-0", ClusterSpec(gpus_per_node=1), TARBALL, node=0)[0])
    standin = cluster.dir / "conf" / "nm-0" / "gpu" / "nvidia-smi"
    assert os.access(standin, os.X_OK)
    done = subprocess.run([standin, "-L"], capture_output=True, text=True)
    assert done.returncode == 2 and "only -x -q" in done.stderr


def test_a_cluster_without_gpus_has_no_gpu_configuration(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    for name, node in (("rm", None), ("nm-0", 0)):
        files, _settings = cluster.conf.daemon_files(name, ClusterSpec(), TARBALL, node=node)
        assert not any(p.name in ("resource-types.xml", "nvidia-smi") for p in files)
        assert not any("resource-plugins" in key for content in files.values() for key in _props(content))


def _props(content: bytes) -> dict[str, str]:
    try:
        return site(content)
    except ET.ParseError:
        return {}


def test_a_compose_nodemanager_gets_the_same_gpu_files(tmp_path: Path) -> None:
    plan_files, _settings = LocalCluster(tmp_path).conf.daemon_files(
        "nm-0", ClusterSpec(nodes=1, gpus_per_node=2), TARBALL, node=0, placement=Placement("zk", "rm", "nodemanager-1")
    )
    names = {p.relative_to(tmp_path.resolve() / "conf" / "nm-0").as_posix() for p in plan_files}
    assert {"resource-types.xml", "gpu/nvidia-smi", "gpu/nvidia-smi.xml"} <= names


@pytest.mark.parametrize(
    ("xml", "message"),
    [
        (b"not xml", "not XML"),
        (b"<log/>", "not <nvidia_smi_log>"),
        (b"<nvidia_smi_log><attached_gpus>2</attached_gpus><gpu/></nvidia_smi_log>", "attached_gpus '2'"),
        (
            b"<nvidia_smi_log><attached_gpus>1</attached_gpus><gpu id='x'><uuid>GPU-1</uuid></gpu></nvidia_smi_log>",
            "has no minor_number, product_name, memory",
        ),
    ],
)
def test_bad_discovery_output_is_named(xml: bytes, message: str) -> None:
    with pytest.raises(GpuDiscoveryError, match=message):
        parse_nvidia_smi(xml)


def test_the_standin_copies_nothing_when_asked_for_too_many() -> None:
    with pytest.raises(ValueError, match="count must be 0..16, got 17"):
        standin_output(FIXTURE, 17, "node")
    assert parse_nvidia_smi(standin_output(FIXTURE, 0, "node")) == []


@pytest.mark.parametrize("value", ["-1", "17", "two"])
def test_up_refuses_a_bad_gpu_count_and_starts_nothing(value: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["cluster", "up", "--cluster-dir", str(tmp_path), "--gpus-per-node", value])
    assert result.exit_code == 2
    assert "--gpus-per-node" in result.output and value in result.output
    assert not (tmp_path / "cluster.json").exists()


def test_the_spec_names_a_bad_gpu_count() -> None:
    with pytest.raises(ValueError, match="gpus_per_node must be 0..16, got -1"):
        ClusterSpec(gpus_per_node=-1)


def _node(port: int, used: int, avail: int) -> dict:
    def resource(gpus: int) -> dict:
        infos = [
            {"name": "memory-mb", "value": 1024},
            {"name": "vcores", "value": 1},
            {"name": GPU_RESOURCE, "value": gpus},
        ]
        return {"resourceInformations": {"resourceInformation": infos}}

    return {
        "id": f"localhost:{port}", "state": "RUNNING", "usedMemoryMB": 1024, "availMemoryMB": 1024,
        "usedVirtualCores": 1, "availableVirtualCores": 1, "numContainers": 1,
        "usedResource": resource(used), "availableResource": resource(avail),
    }  # fmt: skip


@responses.activate
def test_status_shows_gpus_used_and_free_per_node(tmp_path: Path) -> None:
    spec = ClusterSpec(gpus_per_node=2, port_base=20000)
    cluster = LocalCluster(tmp_path)
    cluster.state.write(spec, [])
    rm = spec.rm_url
    responses.get(
        f"{rm}/ws/v1/cluster/metrics",
        json={
            "clusterMetrics": {"totalMB": 4096, "allocatedMB": 2048, "totalVirtualCores": 4, "allocatedVirtualCores": 2}
        },
    )
    responses.get(f"{rm}/ws/v1/cluster/nodes", json={"nodes": {"node": [_node(20100, 1, 1), _node(20110, 2, 0)]}})
    responses.get(f"{rm}/ws/v1/cluster/apps", json={"apps": None})
    result = CliRunner().invoke(cli, ["cluster", "status", "--cluster-dir", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if "localhost:" in line]
    assert [row.split("│")[-2].strip() for row in rows] == ["1/1", "2/0"]
    assert "gpus 3/4 used" in result.output
