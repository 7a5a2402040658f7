"""`cluster up --queues`: the CapacityScheduler hierarchy and preemption settings written for the RM, the
NodeManagers' kill delay, the flag's refusals, and each queue's capacities in `cluster status`."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import responses
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import ClusterSpec, LocalCluster, QueueSpec
from submarine_elastic.cluster.queues import parse_queues

TARBALL = Path("/nonexistent/service-dep.tar.gz")
QUEUES = (QueueSpec("prod", 60), QueueSpec("research", 40, 100))
SCHEDULER = "yarn.scheduler.capacity.root"
PREEMPTION = "yarn.resourcemanager.monitor.capacity.preemption"


def site(content: bytes) -> dict[str, str]:
    return {p.findtext("name", ""): p.findtext("value", "") for p in ET.fromstring(content).iter("property")}


def test_the_rm_gets_the_queue_hierarchy_and_the_preemption_monitor(tmp_path: Path) -> None:
    files, settings = LocalCluster(tmp_path).conf.daemon_files("rm", ClusterSpec(queues=QUEUES), TARBALL)
    conf = tmp_path.resolve() / "conf" / "rm"
    scheduler = site(files[conf / "capacity-scheduler.xml"])
    assert scheduler[f"{SCHEDULER}.queues"] == "prod,research"
    assert (scheduler[f"{SCHEDULER}.prod.capacity"], scheduler[f"{SCHEDULER}.prod.maximum-capacity"]) == ("60", "100")
    assert scheduler[f"{SCHEDULER}.research.capacity"] == "40"
    # One user's job may fill its queue's maximum, not stop at the guarantee.
    assert float(scheduler[f"{SCHEDULER}.research.user-limit-factor"]) * 40 == pytest.approx(100)
    assert scheduler[f"{SCHEDULER}.research.acl_submit_applications"] == "*"
    # Least-used first: under FIFO an application whose ask cannot be met holds back every later one.
    assert {scheduler[f"{SCHEDULER}.{q}.ordering-policy"] for q in ("prod", "research")} == {"fair"}
    yarn = site(files[conf / "yarn-site.xml"])
    assert yarn["yarn.resourcemanager.scheduler.monitor.enable"] == "true"
    assert yarn["yarn.resourcemanager.scheduler.monitor.policies"].endswith(".ProportionalCapacityPreemptionPolicy")
    assert int(yarn[f"{PREEMPTION}.monitoring_interval"]) <= 1000
    assert int(yarn[f"{PREEMPTION}.max_wait_before_kill"]) <= 5000
    assert yarn[f"{PREEMPTION}.natural_termination_factor"] == "1.0"
    assert yarn[f"{PREEMPTION}.max_ignored_over_capacity"] == "0"
    assert yarn[f"{PREEMPTION}.intra-queue-preemption.enabled"] == "false"
    assert conf / "capacity-scheduler.xml" in settings


def test_a_nodemanager_gives_a_preempted_container_seconds_between_sigterm_and_sigkill(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    files, _ = cluster.conf.daemon_files("nm-1", ClusterSpec(queues=QUEUES), TARBALL, node=1)
    yarn = site(files[cluster.dir / "conf" / "nm-1" / "yarn-site.xml"])
    assert 5000 <= int(yarn["yarn.nodemanager.sleep-delay-before-sigkill.ms"]) <= 10000
    assert "yarn.resourcemanager.scheduler.monitor.enable" not in yarn


def test_without_queues_the_cluster_keeps_one_queue_and_no_preemption(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    files, _ = cluster.conf.daemon_files("rm", ClusterSpec(), TARBALL)
    conf = cluster.dir / "conf" / "rm"
    scheduler = site(files[conf / "capacity-scheduler.xml"])
    assert scheduler[f"{SCHEDULER}.queues"] == "default"
    assert scheduler[f"{SCHEDULER}.default.ordering-policy"] == "fair"
    assert "yarn.resourcemanager.scheduler.monitor.enable" not in site(files[conf / "yarn-site.xml"])


def test_a_compose_resourcemanager_gets_the_same_queues(tmp_path: Path) -> None:
    args = ["cluster", "daemon", "resourcemanager", "--cluster-dir", str(tmp_path), "--queues", "a:50,b:50:80"]
    result = CliRunner().invoke(cli, [*args, "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "#   yarn.scheduler.capacity.root.queues=a,b\n" in result.output
    assert "#   yarn.scheduler.capacity.root.b.maximum-capacity=80\n" in result.output
    assert "#   yarn.resourcemanager.scheduler.monitor.enable=true\n" in result.output


def test_queues_parse_with_a_default_maximum() -> None:
    assert parse_queues("prod:60, research:40:70") == (QueueSpec("prod", 60, 100), QueueSpec("research", 40, 70))


def test_the_queue_survives_the_recorded_state(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path)
    cluster.state.write(ClusterSpec(queues=QUEUES), [])
    assert cluster.spec().queues == QUEUES


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("prod:60,research:30", "must add up to 100, got 90 (prod 60, research 30)"),
        ("prod:60:50,research:40", "queue 'prod': maximum capacity must be 60..100 percent"),
        ("prod", "queue 'prod' is not NAME:CAPACITY"),
        ("prod:6x,research:40", "queue 'prod:6x' is not NAME:CAPACITY"),
        ("prod:60,prod:40", "queue 'prod' is given twice"),
        ("Prod:100", "queue name must match [a-z][a-z0-9_-]*, got 'Prod'"),
        ("prod:100:101", "queue 'prod': maximum capacity must be 100..100 percent"),
        ("prod:100,", "queue '' is not NAME:CAPACITY"),
    ],
)
def test_up_names_a_bad_queue_and_starts_nothing(value: str, message: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["cluster", "up", "--cluster-dir", str(tmp_path), "--queues", value], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 2
    assert "--queues" in result.output
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "conf").exists()


def _queue(name: str, capacity: float, used: float, pending: int, pending_mb: int) -> dict[str, object]:
    return {
        "type": "capacitySchedulerLeafQueueInfo", "queueName": name, "queuePath": f"root.{name}",
        "state": "RUNNING", "absoluteCapacity": capacity, "absoluteMaxCapacity": 100.0,
        "absoluteUsedCapacity": used, "resourcesUsed": {"memory": int(used * 40.96), "vCores": 1},
        "maxEffectiveCapacity": {"memory": 4096, "vCores": 8}, "pendingContainers": pending, "numApplications": 1,
        "resources": {"resourceUsagesByPartition": [{"partitionName": "", "pending": {"memory": pending_mb}}]},
    }  # fmt: skip


@responses.activate
def test_status_shows_each_queues_guaranteed_max_used_and_pending(tmp_path: Path) -> None:
    spec = ClusterSpec(queues=QUEUES, port_base=20000)
    cluster = LocalCluster(tmp_path)
    cluster.state.write(spec, [])
    rm = spec.rm_url
    responses.get(
        f"{rm}/ws/v1/cluster/metrics",
        json={
            "clusterMetrics": {"totalMB": 4096, "allocatedMB": 4096, "totalVirtualCores": 8, "allocatedVirtualCores": 2}
        },
    )
    responses.get(f"{rm}/ws/v1/cluster/nodes", json={"nodes": None})
    responses.get(f"{rm}/ws/v1/cluster/apps", json={"apps": None})
    queues = [_queue("prod", 60.0, 0.0, 2, 1024), _queue("research", 40.0, 100.0, 0, 0)]
    responses.get(
        f"{rm}/ws/v1/cluster/scheduler",
        json={"scheduler": {"schedulerInfo": {"type": "capacityScheduler", "queues": {"queue": queues}}}},
    )
    result = CliRunner().invoke(cli, ["cluster", "status", "--cluster-dir", str(tmp_path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = {
        cells[0]: cells[1:]
        for line in result.output.splitlines()
        if "root." in line and (cells := [c.strip() for c in line.split("│")[1:-1]])
    }
    assert rows == {
        "root.prod": ["60%", "100%", "0.0%", "0", "2", "1024"],
        "root.research": ["40%", "100%", "100.0%", "4096", "0", "0"],
    }
