"""`job run --placement spread` on the shared 2-node pseudo-cluster: YARN puts the two workers on two nodes, as
its own REST API reports each container's node, and the job's driver names the same node for each worker (what
the controller counts as the job's placement)."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from submarine_elastic import env
from submarine_elastic.cluster import ClusterSpec
from submarine_elastic.submit.client import JobClient
from submarine_elastic.yarn import YarnServiceClient
from tests.integration.conftest import eventually, submarine

pytestmark = pytest.mark.integration

JOB = "spread"


def container_nodes(rm_url: str, app_id: str) -> dict[str, str]:
    """The node (``host:port``) of each live container of the application's current attempt, from the RM."""
    app = f"{rm_url}/ws/v1/cluster/apps/{app_id}"
    user = {"user.name": env.settings().user()}
    attempts = requests.get(f"{app}/appattempts", params=user, timeout=10).json()
    attempt = attempts["appAttempts"]["appAttempt"][-1]["appAttemptId"]
    answer = requests.get(f"{app}/appattempts/{attempt}/containers", params=user, timeout=10)
    containers = answer.json().get("container") or []
    if isinstance(containers, dict):  # the RM's JSON gives a lone container as an object, not a list of one
        containers = [containers]
    return {c["containerId"]: c["nodeId"] for c in containers}


def test_spread_puts_each_worker_on_its_own_node(
    yarn: YarnServiceClient, cluster_spec: ClusterSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUBMARINE_JOBS_DIR", str(tmp_path / "jobs"))
    submarine(
        cluster_spec.rm_url, "job", "run", "--name", JOB, "--num_workers", "2", "--placement", "spread",
        "--worker_resources", "memory-mb=512,vcores=1", "--worker_launch_cmd", "sleep 600", "--no_snapshot",
    )  # fmt: skip
    try:
        workers = yarn.wait_for_ready(JOB, "worker", 2, timeout=120)
        service = yarn.status(JOB)
        # YARN holds the constraint (as `yarn app -status` shows it): without one, two workers on this idle cluster
        # may land on two nodes as well, by the order the NodeManagers' heartbeats come in.
        [spec] = [c for c in service.raw["components"] if c["name"] == "worker"]
        constraints = spec.get("placement_policy", {}).get("constraints", [])
        assert [(c["type"], c["scope"], c["target_tags"]) for c in constraints] == [
            ("ANTI_AFFINITY", "NODE", ["worker"])
        ], spec.get("placement_policy")
        app_id = service.id
        assert app_id
        nodes = container_nodes(cluster_spec.rm_url, app_id)
        placed = {w.component_instance_name: nodes[w.id] for w in workers}
        assert len(set(placed.values())) == 2, f"both workers on one node: {placed}"

        with JobClient(JOB, yarn, locate_timeout=60) as job:

            def reported() -> dict[str, str] | None:
                status = job.status()
                named = {w.instance: w.node for w in status.workers}
                return named if len(named) == 2 and all(named.values()) else None

            assert eventually(reported, "the driver names the node of both workers", 60) == placed
    finally:
        yarn.destroy(JOB, missing_ok=True)
