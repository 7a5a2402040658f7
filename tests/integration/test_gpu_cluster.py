"""`submarine cluster up --gpus-per-node 2`: the real ResourceManager and NodeManagers with YARN's GPU plugin,
each NodeManager discovering its devices through the stand-in ``nvidia-smi``; the RM scheduling them, `job run`
refusing what no node holds, an elastic job of 1-GPU workers whose every training process sees its own
container's device and no other, through resizes and a kill; and a small live replay on emulated GPUs, static
against elastic (the mission: the cluster finishes its jobs sooner elastic).

Starts a 2-node cluster of its own (port base ``SUBMARINE_TEST_PORT_BASE`` + 600) and brings it down.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import GPU_RESOURCE, ClusterSpec, LocalCluster
from submarine_elastic.cluster.gpu import parse_nvidia_smi
from submarine_elastic.elastic.gpus import holders
from submarine_elastic.replay import LiveReplay, plan_replay
from submarine_elastic.replay.report import summary, write
from submarine_elastic.submit.client import JobClient
from submarine_elastic.submit.jobspec import job_dir
from submarine_elastic.yarn import YarnServiceClient
from submarine_elastic.yarn.spec import Component, Resource, ResourceInformation, RestartPolicy, Service
from tests.integration.conftest import AS_USER, PORT_BASE, committed_steps, eventually, sigkill, submarine
from tests.integration.jobcheck import REPO, SAMPLES, training_pids

pytestmark = pytest.mark.integration

GPUS = 2


@pytest.fixture(scope="module")
def gpu_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, ClusterSpec]]:
    cluster_dir = tmp_path_factory.mktemp("gpu-cluster")
    port_base = PORT_BASE + 600
    result = CliRunner().invoke(
        cli,
        ["cluster", "up", "--cluster-dir", str(cluster_dir), "--gpus-per-node", str(GPUS), "--port-base",
         str(port_base), "--node-memory-mb", "8192", "--node-vcores", "12", "--timeout", "240"],
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
        assert {g["productName"] for g in discovered} == {"NVIDIA H200"}
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


#: What each training process runs first: a record of the devices it was started with, then the example script.
RECORD = """#!/bin/bash
printf '{"container": "%s", "nm": "%s", "cuda": "%s", "nvidia": "%s", "pid": %d}\\n' \\
  "$CONTAINER_ID" "$NM_PORT" "$CUDA_VISIBLE_DEVICES" "$NVIDIA_VISIBLE_DEVICES" $$ >> "$(dirname "$0")/devices.jsonl"
exec "$@"
"""


def test_each_training_process_sees_its_own_containers_gpu_through_flexes_and_a_kill(
    gpu_cluster: tuple[LocalCluster, ClusterSpec], tmp_path: Path
) -> None:
    """1-GPU workers flexed 1 -> 4 -> 5 -> 2 on 2 nodes x 2 GPUs: every training process starts with the UUID of
    the one device its container holds, no two live workers on a node share one, the fifth worker waits for a GPU
    while the ring trains on at 4, and a worker killed with SIGKILL comes back on its container's device."""
    _cluster, spec = gpu_cluster
    name = "gpuflex"
    claims = tmp_path / "claims"
    (tmp_path / "record.sh").write_text(RECORD)
    uuid_of = _device_uuids(gpu_cluster)  # (NodeManager port, minor number) -> UUID
    node_of = {str(spec.nm_ports(i)["yarn.nodemanager.address"]): i for i in range(spec.nodes)}
    cmd = (
        f"bash {tmp_path}/record.sh {sys.executable} {REPO}/examples/train_elastic.py --samples {SAMPLES} "
        f"--epochs 100 --step-sleep 0.03 --until-file {tmp_path}/stop --log-dir {tmp_path}/log"
    )
    submarine(
        spec.rm_url, "job", "run", "--name", name, "--elastic", "--insecure", "--num_workers", "1",
        "--min_workers", "1", "--max_workers", "5", "--worker_resources", "memory-mb=512,vcores=1,gpu=1",
        "--worker_launch_cmd", cmd, "--env", f"SUBMARINE_GPU_CLAIMS_DIR={claims}",
    )  # fmt: skip
    seen: list[dict[str, str]] = []

    def check_live(job: JobClient) -> dict[str, tuple[int, int]]:
        """Every live worker's device: its training process's record, its claim and `job show` agree."""
        records = {r["container"]: r for r in _records(tmp_path)}
        devices: dict[str, tuple[int, int]] = {}
        for w in job.status().workers:
            if w.rank < 0:
                continue
            record = records[w.container_id]
            node = node_of[record["nm"]]
            assert len(w.gpus) == 1, w
            expected = uuid_of[(node, w.gpus[0])]
            assert record["cuda"] == record["nvidia"] == expected, (record, w)
            held = _held(claims, record["nm"])
            assert held[w.gpus[0]].startswith(f"{w.container_id} pid "), (held, w)
            devices[w.container_id] = (node, w.gpus[0])
        assert len(set(devices.values())) == len(devices), f"two workers share a device: {devices}"
        return devices

    with YarnServiceClient(spec.rm_url, user="tester", poll_interval=0.5) as yarn:
        try:
            with JobClient(name, yarn, locate_timeout=120) as job:
                job.wait_for_size(1, timeout=240)
                check_live(job)
                out = submarine(spec.rm_url, "job", "flex", name, "--workers", "4", "--timeout", "300")
                assert "ring has 4 workers" in out
                at_four = check_live(job)
                assert sorted(node for node, _minor in at_four.values()) == [0, 0, 1, 1]
                # A fifth 1-GPU worker: YARN has no GPU left for it (memory and vcores to spare), it waits.
                submarine(spec.rm_url, "job", "flex", name, "--workers", "5", "--no-wait")
                asked = time.time()

                def pending() -> bool:
                    metrics = requests.get(f"{spec.rm_url}/ws/v1/cluster/metrics", params=AS_USER, timeout=10).json()
                    return int(metrics["clusterMetrics"]["containersPending"]) >= 1

                eventually(pending, "the fifth worker's container pending in the RM", 60)
                assert all(n.free_memory_mb >= 512 and n.free_vcores >= 1 for n in yarn.nodes()), "GPUs alone hold it"
                eventually(
                    lambda: any(
                        r[0]["time"] > asked + 5 and r[0]["size"] == 4
                        for r in committed_steps(tmp_path / "log").values()
                    ),
                    "steps of the ring of 4 after the fifth was asked",
                    60,
                )
                assert job.status().world_size == 4
                assert len(_records(tmp_path)) == 4, "no training process started without a GPU"
                assert check_live(job) == at_four
                out = submarine(spec.rm_url, "job", "flex", name, "--workers", "2", "--timeout", "300")
                assert "ring has 2 workers" in out
                # YARN done with the scale-in too (the fifth instance's late container among what it stops).
                eventually(lambda: job.status().converged, "YARN at the ring's 2 workers", 120)
                at_two = check_live(job)
                # SIGKILL a worker's training process: YARN relaunches its agent in the same container, which
                # takes the container's GPU again and starts a new process on it.
                victim = sorted(at_two)[-1]
                killed = training_pids(victim)
                assert killed
                sigkill(killed)
                eventually(
                    lambda: any(r["container"] == victim and r["pid"] not in killed for r in _records(tmp_path)),
                    "the killed worker's new training process",
                    120,
                )
                job.wait_for_size(2, timeout=240)
                after = check_live(job)
                assert set(after) == set(at_two)
                seen = _records(tmp_path)
            (tmp_path / "stop").touch()
        finally:
            yarn.destroy(name, missing_ok=True, timeout=120)
    eventually(lambda: all(_held(claims, nm) == {} for nm in node_of), "every claim released with the job", 60)
    print("devices each training process saw:")
    for record in seen:
        print(f"  {record['container']} on NodeManager port {record['nm']}: CUDA_VISIBLE_DEVICES={record['cuda']}")


def _held(claims: Path, nm_port: str) -> dict[int, str]:
    """The claimed devices of the NodeManager at RPC port ``nm_port`` (its directory ends with the port)."""
    (directory,) = claims.glob(f"*_{nm_port}")
    return holders(directory)


def _records(work: Path) -> list[dict]:
    """The training processes' device records, in the order they started."""
    path = work / "devices.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _device_uuids(gpu_cluster: tuple[LocalCluster, ClusterSpec]) -> dict[tuple[int, int], str]:
    cluster, spec = gpu_cluster
    found = {}
    for i in range(spec.nodes):
        standin = cluster.dir / "conf" / f"nm-{i}" / "gpu" / "nvidia-smi"
        for device in parse_nvidia_smi(subprocess.run([standin, "-x", "-q"], capture_output=True, check=True).stdout):
            found[(i, device.minor_number)] = device.uuid
    return found


#: Four jobs on 2 x 2 GPUs: three asking for 3 workers (time scale 0.005: 11 to 16 s of training alone, at its
#: submitted size) and one for 1, arriving within 5 s. Under static FIFO no two of the first three fit together,
#: so they start in three waves (the last with the 1-worker job beside it), each paying a job's startup (its AM
#: and driver, every worker's TensorFlow import and first trace: 20 to 50 s here, most of a job's time);
#: elastic, the controller lowers what does not fit and the four share the GPUs, the room an arrival's minimum
#: needs kept for it while YARN places its AM and driver. The margin is wide so that a slow start under CI's
#: load (two modules at once on two cores) does not decide the outcome: a job's late start costs the static run
#: once per wave.
REPLAY_WORKLOAD = """name,time,application,num_replicas,batch_size
j0,0,cifar10,3,256
j1,500,ncf,3,512
j2,500,cifar10,3,256
j3,1000,cifar10,1,256
"""
REPLAY_TIME_SCALE = 0.005


def test_a_live_replay_finishes_its_jobs_sooner_elastic_than_static(
    gpu_cluster: tuple[LocalCluster, ClusterSpec], tmp_path: Path
) -> None:
    """`submarine replay`'s runs on the real cluster: every job of both runs ends SUCCEEDED having trained its
    planned samples, every committed step once and every sample once per epoch, its steps held for its
    application's GPU profile ("emulated" in its results); the goodput policy's mean JCT is below static FIFO's."""
    _cluster, spec = gpu_cluster
    workload = tmp_path / "workload.csv"
    workload.write_text(REPLAY_WORKLOAD)
    plan = plan_replay(str(workload), time_scale=REPLAY_TIME_SCALE, nodes=spec.nodes, gpus_per_node=spec.gpus_per_node)
    runs = [
        LiveReplay(plan, policy, rm_url=spec.rm_url, out=tmp_path / policy, timeout_s=600).run()
        for policy in ("static", "goodput+goodput")
    ]
    static, elastic = (summary(run) for run in runs)
    print(  # what the test's time went to, in its captured output
        *(f"{run.policy}: {run.wall_s:.0f} s, mean JCT {f['mean_jct_s']}, makespan {f['makespan_s']}"
          for run, f in zip(runs, (static, elastic), strict=True)), sep="\n"
    )  # fmt: skip
    for run, figures in zip(runs, (static, elastic), strict=True):
        assert figures["finished"] == len(plan.jobs), [(r.service, r.state) for r in run.records]
        assert figures["problems"] == {}
        for record in run.records:
            assert record.samples >= record.job.samples
            final = json.loads(
                next((tmp_path / run.policy / record.job.name / "log").glob("final-rank*.json")).read_text()
            )
            assert final["emulated"] == record.job.application and final["emulation"]["held_s"] > 0
    # Each run leaves no application of its jobs live (the next run's controller would count it as held).
    # Nor any container: a finished application's containers kept their GPUs into the next run before.
    with YarnServiceClient(spec.rm_url) as yarn:
        live = {a.name for a in yarn.list()}
        held = {n.node_id: n.used_gpus for n in yarn.nodes()}
    assert not live & {r.service for run in runs for r in run.records}, live
    assert sum(held.values()) == 0, held
    # Static ran each job at its size; elastic resized jobs around each other.
    assert all(max(n for _, n in r.ring) == r.job.workers for r in runs[0].records)
    assert elastic["decisions"] >= 1
    assert elastic["mean_jct_s"] < static["mean_jct_s"], (static, elastic)
    paths = write(runs, tmp_path / "report")
    assert "emulated" in paths["md"].read_text() and paths["png"].stat().st_size > 10_000


def test_down_leaves_nothing_listening(gpu_cluster: tuple[LocalCluster, ClusterSpec]) -> None:
    cluster, spec = gpu_cluster
    cluster.down()
    for port in spec.all_ports():
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://{spec.host}:{port}/", timeout=2)
