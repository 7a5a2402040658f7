"""Integration tests run against a real pseudo-cluster, started once per test session.

It uses its own directory and port base (``SUBMARINE_TEST_PORT_BASE``, default 19000), so it does
not collide with a cluster the developer has up on the default ports.
"""

from __future__ import annotations

import collections
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import ClusterSpec, LocalCluster
from submarine_elastic.yarn import ServiceState, YarnServiceClient

PORT_BASE = int(os.environ.get("SUBMARINE_TEST_PORT_BASE", "19000"))


@pytest.fixture(scope="session")
def cluster_spec() -> ClusterSpec:
    return ClusterSpec(nodes=2, node_memory_mb=4096, node_vcores=4, port_base=PORT_BASE)


@pytest.fixture(scope="session")
def yarn_cluster(tmp_path_factory: pytest.TempPathFactory, cluster_spec: ClusterSpec) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster"))
    cluster.up(cluster_spec, timeout=240)
    try:
        yield cluster
    finally:
        cluster.down()


@pytest.fixture()
def yarn(yarn_cluster: LocalCluster, cluster_spec: ClusterSpec) -> Iterator[YarnServiceClient]:
    with YarnServiceClient(cluster_spec.rm_url, poll_interval=0.5) as client:
        yield client


def submarine(rm_url: str, *args: str) -> str:
    """Run the ``submarine`` command in-process against ``rm_url``; a non-zero exit fails the test."""
    result = CliRunner().invoke(cli, list(args), env={"SUBMARINE_RM_URL": rm_url}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def run_job(
    rm_url: str,
    name: str,
    command: str,
    *,
    workers: int = 2,
    env: dict[str, str] | None = None,
    flags: tuple[str, ...] = (),
) -> str:
    """``submarine job run --elastic`` of ``command`` with 1..3 workers of 1024 MB and 1 vcore."""
    return submarine(
        rm_url,
        "job",
        "run",
        "--name",
        name,
        "--elastic",
        "--num_workers",
        str(workers),
        "--min_workers",
        "1",
        "--max_workers",
        "3",
        "--worker_resources",
        "memory-mb=1024,vcores=1",
        "--worker_launch_cmd",
        command,
        *[arg for k, v in (env or {}).items() for arg in ("--env", f"{k}={v}")],
        *flags,
    )


def committed_steps(log_dir: Path) -> dict[int, list[dict]]:
    """A training script's step log (``steps-*.jsonl``, one JSON record per rank and step) by step number."""
    steps: dict[int, list[dict]] = collections.defaultdict(list)
    for path in log_dir.glob("steps-*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            steps[record["step"]].append(record)
    return dict(steps)


def wait_finished(yarn: YarnServiceClient, name: str, timeout: float = 180) -> None:
    """Block until the job's service ended; a FAILED end fails the test."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = yarn.status(name).state
        if state in (ServiceState.STOPPED, ServiceState.SUCCEEDED, ServiceState.FAILED):
            assert state != ServiceState.FAILED, f"job {name} failed"
            return
        time.sleep(1)
    raise AssertionError(f"job {name} did not finish within {timeout} s")


def processes_under(path: Path) -> list[int]:
    """Pids of processes whose cwd, command line or environment mention ``path``."""
    marker = str(path.resolve()).encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            stat = (proc / "stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] == "Z":
                continue
            if (
                os.readlink(proc / "cwd").encode().startswith(marker)
                or marker in (proc / "cmdline").read_bytes()
                or marker in (proc / "environ").read_bytes()
            ):
                found.append(int(proc.name))
        except OSError:
            continue
    return found
