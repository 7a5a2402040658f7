"""Pinning a worker to its container's GPUs: YARN's assignment where the NodeManager makes one, else a claim
among the project's jobs that a dead worker's end releases, ``kill -9`` included.

The NodeManager answers are recordings of Hadoop 3.4.2's ``/ws/v1/node/resources/yarn.io%2Fgpu`` on
``cluster up --gpus-per-node 2`` (``recorded/nm-gpu-default-executor.json``), with two 1-GPU containers running
under its DefaultContainerExecutor (the discovered devices, ``totalGpuDevices`` and ``assignedGpuDevices`` empty),
and the same answer with the two lists as the LinuxContainerExecutor's GPU resource handler fills them.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import responses
import tenacity
from click.testing import CliRunner

from submarine_elastic.cli import job as job_cli
from submarine_elastic.cli.main import cli
from submarine_elastic.elastic import agent as agent_module
from submarine_elastic.elastic.driver import JobDriver
from submarine_elastic.elastic.gpus import (
    NM_GPU_RESOURCE,
    GpuPinningError,
    NodeGpus,
    claim,
    claims_dir,
    holders,
    parse_node_gpus,
    pin,
    read_node_gpus,
)
from submarine_elastic.elastic.ringhost import AgentHandle
from submarine_elastic.protocol.api import Limits
from submarine_elastic.submit.jobspec import JobRequest, WorkerResources, build_service
from tests.unit._driver_support import serving

RECORDED = Path(__file__).parent / "recorded"
NM = "http://nm.example:8042"
CONTAINER = "container_1795781400000_0001_01_000002"


def recorded() -> dict[str, Any]:
    return json.loads((RECORDED / "nm-gpu-default-executor.json").read_text())


def with_assignment(assigned: dict[str, list[int]]) -> dict[str, Any]:
    """The recorded answer as the LinuxContainerExecutor's GPU handler reports it: devices per container."""
    info = copy.deepcopy(recorded())
    info["totalGpuDevices"] = [
        {"index": g["minorNumber"], "minorNumber": g["minorNumber"]} for g in info["gpuDeviceInformation"]["gpus"]
    ]
    info["assignedGpuDevices"] = [
        {"index": minor, "minorNumber": minor, "containerId": container}
        for container, minors in assigned.items()
        for minor in minors
    ]
    return info


def no_sleep(_seconds: float) -> None:
    """tenacity's sleep in these tests: the retries run at once."""


def test_the_default_executor_offers_both_devices_and_assigns_none() -> None:
    info = recorded()
    assert info["totalGpuDevices"] == [] and info["assignedGpuDevices"] == [], "what the recording shows"
    node = parse_node_gpus(info)
    assert node.minors == (0, 1)
    assert set(node.uuids) == {0, 1} and all(u.startswith("GPU-") for u in node.uuids.values())
    assert node.assigned == {}


@responses.activate
def test_the_nodemanager_is_asked_as_the_user() -> None:
    responses.get(
        NM + NM_GPU_RESOURCE,
        json=recorded(),
        match=[responses.matchers.query_param_matcher({"user.name": "alice"})],
    )
    assert read_node_gpus(NM, "alice").minors == (0, 1)


@responses.activate
def test_a_nodemanager_without_the_gpu_plugin_is_named() -> None:
    responses.get(NM + NM_GPU_RESOURCE, status=500, json={"RemoteException": {"message": "no plugin"}})
    with pytest.raises(GpuPinningError, match=r"cannot read the GPUs of the NodeManager at http://nm.example:8042/"):
        read_node_gpus(NM, "alice")
    with pytest.raises(GpuPinningError, match="lists no GPU devices"):
        parse_node_gpus({"gpuDeviceInformation": None, "totalGpuDevices": [], "assignedGpuDevices": []})


def test_yarns_assignment_is_taken_as_it_is(tmp_path: Path) -> None:
    node = parse_node_gpus(with_assignment({"container_other": [0], CONTAINER: [1]}))
    pinning = pin(node, 1, CONTAINER, tmp_path / "claims", "me")
    assert (pinning.minors, pinning.source) == ((1,), "yarn")
    assert pinning.env() == {"CUDA_VISIBLE_DEVICES": node.uuids[1], "NVIDIA_VISIBLE_DEVICES": node.uuids[1]}
    assert not (tmp_path / "claims").exists(), "nothing claimed where YARN assigns"


def test_an_assignment_that_leaves_out_this_container_is_an_error(tmp_path: Path) -> None:
    node = parse_node_gpus(with_assignment({"container_other": [0, 1]}))
    with pytest.raises(GpuPinningError, match=f"lists \\[\\] for {CONTAINER}, which holds yarn.io/gpu 1"):
        pin(node, 1, CONTAINER, tmp_path, "me")


def test_two_workers_on_a_node_claim_different_devices_and_a_third_waits(tmp_path: Path) -> None:
    node = parse_node_gpus(recorded())
    first = pin(node, 1, "container_a", tmp_path, "container_a pid 1")
    second = pin(node, 1, "container_b", tmp_path, "container_b pid 2")
    assert (first.minors, second.minors) == ((0,), (1,))
    assert first.env()["CUDA_VISIBLE_DEVICES"] == node.uuids[0]
    assert holders(tmp_path) == {0: "container_a pid 1", 1: "container_b pid 2"}
    with pytest.raises(GpuPinningError, match=r"1 of the GPUs \[0, 1\] .* stayed taken for 0 s; held by \{0: "):
        pin(node, 1, "container_c", tmp_path, "c", timeout=0.0, sleep=no_sleep)
    first.release()
    third = pin(node, 1, "container_c", tmp_path, "container_c pid 3", timeout=0.0, sleep=no_sleep)
    assert third.minors == (0,)
    assert holders(tmp_path) == {0: "container_c pid 3", 1: "container_b pid 2"}


def test_a_claim_is_all_or_nothing(tmp_path: Path) -> None:
    held = claim(tmp_path, (0, 1), 1, "one")
    assert held is not None
    assert claim(tmp_path, (0, 1), 2, "two") is None
    assert holders(tmp_path) == {0: "one"}, "the device the failed claim could take is free again"
    # Every job's user claims in the same directory, whatever the umask of the first.
    assert {p.name: p.stat().st_mode & 0o7777 for p in tmp_path.glob("gpu-*.lock")} == {
        "gpu-0.lock": 0o666,
        "gpu-1.lock": 0o666,
    }
    assert tmp_path.stat().st_mode & 0o7777 == 0o1777


def test_a_worker_killed_with_sigkill_frees_its_devices(tmp_path: Path) -> None:
    """The lock lives as long as some process holds its descriptor: the claimer's child (the training process)
    keeps it past its parent, and kill -9 of the last one frees it."""
    script = textwrap.dedent(
        f"""
        import os, sys
        from pathlib import Path
        from submarine_elastic.elastic.gpus import claim
        taken = claim(Path({str(tmp_path)!r}), (0, 1), 2, "container_k pid " + str(os.getpid()))
        print(taken is not None, flush=True)
        sys.stdin.read()
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "True"
        assert set(holders(tmp_path)) == {0, 1}
        node = NodeGpus((0, 1))
        with pytest.raises(GpuPinningError, match="stayed taken"):
            pin(node, 1, "container_n", tmp_path, "n", timeout=0.0, sleep=no_sleep)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert holders(tmp_path) == {}
    assert pin(NodeGpus((0, 1)), 2, "container_n", tmp_path, "n", timeout=0.0, sleep=no_sleep).minors == (0, 1)


def test_more_devices_than_the_node_has_are_refused(tmp_path: Path) -> None:
    with pytest.raises(GpuPinningError, match="holds yarn.io/gpu 3, but its node has 2 devices"):
        pin(NodeGpus((0, 1)), 3, CONTAINER, tmp_path, "me")


def test_without_uuids_the_minor_numbers_are_named_in_pci_order(tmp_path: Path) -> None:
    pinning = pin(NodeGpus((0, 1, 2, 3)), 2, CONTAINER, tmp_path, "me")
    assert pinning.env() == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "NVIDIA_VISIBLE_DEVICES": "0,1",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }


def test_each_nodemanager_has_a_claim_directory_of_its_own(tmp_path: Path) -> None:
    assert claims_dir(tmp_path, "host-1", "19610") != claims_dir(tmp_path, "host-1", "19620")
    assert claims_dir(tmp_path, "../x", "1").parent == tmp_path


@responses.activate
def test_the_agent_pins_from_its_nodemanager_and_says_so_in_its_hello(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    responses.get(NM + NM_GPU_RESOURCE, json=recorded())
    monkeypatch.setenv("SUBMARINE_WORKER_GPUS", "1")
    monkeypatch.setenv("SUBMARINE_GPU_CLAIMS_DIR", str(tmp_path))
    monkeypatch.setenv("SUBMARINE_YARN_USER", "alice")
    monkeypatch.setenv("NM_HOST", "nm.example")
    monkeypatch.setenv("NM_PORT", "45454")
    monkeypatch.setenv("NM_HTTP_PORT", "8042")
    pinning = agent_module.pin_gpus(CONTAINER)
    assert pinning is not None and pinning.minors == (0,)
    assert holders(tmp_path / "nm.example_45454") == {0: f"{CONTAINER} pid {os.getpid()}"}
    agent = agent_module.Agent("true", "worker-0", CONTAINER, "127.0.0.1")
    agent.pinning = pinning
    assert list(agent.hello().hello.gpus) == [0]
    pinning.release()


def test_a_cpu_worker_is_not_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SUBMARINE_WORKER_GPUS", raising=False)
    assert agent_module.pin_gpus(CONTAINER) is None
    monkeypatch.setenv("SUBMARINE_WORKER_GPUS", "x")
    with pytest.raises(ValueError, match="SUBMARINE_WORKER_GPUS must be a positive integer, got 'x'"):
        agent_module.pin_gpus(CONTAINER)


def test_the_training_process_starts_with_its_devices_and_holds_their_claims(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUBMARINE_WORKDIR", str(tmp_path))
    monkeypatch.setenv("LOG_DIRS", str(tmp_path / "logs"))
    out = tmp_path / "seen"
    agent = agent_module.Agent(f"echo $CUDA_VISIBLE_DEVICES > {out}; sleep 30", "worker-0", CONTAINER, "127.0.0.1")
    node = parse_node_gpus(recorded())
    agent.pinning = pin(node, 1, CONTAINER, tmp_path / "claims", "me")
    agent.start_training()
    try:
        agent.pinning.release()  # the agent's own descriptors gone: the training process still holds the claim
        assert agent.training.proc is not None
        # The process writes what it was given as soon as it starts.
        tenacity.Retrying(
            stop=tenacity.stop_after_delay(30),
            wait=tenacity.wait_fixed(0.05),
            retry=tenacity.retry_if_result(lambda written: not written),
        )(lambda: out.exists() and out.read_text().strip())
        assert out.read_text().strip() == node.uuids[0]
        assert set(holders(tmp_path / "claims")) == {0}
    finally:
        assert agent.training.proc is not None
        os.killpg(agent.training.proc.pid, signal.SIGKILL)
        agent.training.proc.wait()
    assert holders(tmp_path / "claims") == {}


def test_a_gpu_job_tells_its_workers_their_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUBMARINE_JOBS_DIR", str(tmp_path / "jobs"))
    common: dict[str, Any] = {
        "launch_cmd": "python train.py",
        "limits": Limits(2, 1, 4),
        "rm_url": NM,
        "insecure": True,
    }
    gpu = build_service(JobRequest(name="gpujob", resources=WorkerResources(1024, 1, 2), **common)).to_dict()
    cpu = build_service(JobRequest(name="cpujob", resources=WorkerResources(1024, 1), **common)).to_dict()
    assert gpu["components"][1]["configuration"]["env"]["SUBMARINE_WORKER_GPUS"] == "2"
    assert "SUBMARINE_WORKER_GPUS" not in cpu["components"][1]["configuration"]["env"]


def test_job_show_lists_each_workers_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        monkeypatch.setenv("SUBMARINE_RM_URL", f"http://127.0.0.1:{s.getsockname()[1]}")
    monkeypatch.setattr(job_cli.console, "_width", 200)
    driver = JobDriver("gpujob", Limits(2, 1, 3), yarn=None, token="t", iface="lo", elastic_timeout=60)  # type: ignore[arg-type]
    driver.registry.add(AgentHandle("c2-a1", "worker-0", "container_x_01_000002", "127.0.0.1", (1,)))
    driver.registry.add(AgentHandle("c3-a1", "worker-1", "container_x_01_000003", "127.0.0.1", (0,)))
    with serving(driver, "gpujob", "t"):
        result = CliRunner().invoke(cli, ["job", "show", "gpujob"])
    assert result.exit_code == 0, result.output
    rows = [[cell.strip() for cell in line.split("│")] for line in result.output.splitlines() if "container_x" in line]
    assert "gpus" in result.output
    assert [(r[1], r[2], r[-2]) for r in rows] == [
        ("worker-0", "container_x_01_000002", "1"),
        ("worker-1", "container_x_01_000003", "0"),
    ], result.output
