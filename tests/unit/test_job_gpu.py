"""`job run --worker_resources ...,gpu=N` on clusters that cannot give a worker N GPUs: refused before anything
is submitted, naming the resource and what the cluster offers.

The ResourceManager's answers are recordings of Hadoop 3.4.2's ``/ws/v1/cluster/metrics`` and
``/ws/v1/cluster/nodes`` (``recorded/``): a pseudo-cluster of one node without GPUs, and one of one node
with 2 stand-in GPUs (``cluster up --gpus-per-node 2``).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import responses
from click.testing import CliRunner

from submarine_elastic.cli import job as job_cli
from submarine_elastic.cli.main import cli
from submarine_elastic.submit import service
from submarine_elastic.submit.jobspec import JobRequest, JobSpecError, WorkerResources, job_dir
from submarine_elastic.submit.service import refuse_unplaceable
from submarine_elastic.yarn import YarnServiceClient

RM = "http://rm.example:8088"
RECORDED = Path(__file__).parent / "recorded"


def recorded(name: str) -> dict[str, Any]:
    return json.loads((RECORDED / f"rm-{name}.json").read_text())


def two_nodes_of_two_gpus() -> dict[str, Any]:
    nodes = recorded("nodes-gpu")
    second = copy.deepcopy(nodes["nodes"]["node"][0])
    second["id"] = "localhost:19610"
    nodes["nodes"]["node"].append(second)
    return nodes


def rm_answers(cluster: str, nodes: dict[str, Any] | None = None) -> None:
    responses.get(f"{RM}/ws/v1/cluster/metrics", json=recorded(f"metrics-{cluster}"))
    responses.get(f"{RM}/ws/v1/cluster/nodes", json=nodes or recorded(f"nodes-{cluster}"))
    responses.get(f"{RM}/app/v1/services/gpujob", status=404, json={"diagnostics": "Service gpujob not found"})


def run(monkeypatch: pytest.MonkeyPatch, resources: str) -> tuple[int, str]:
    monkeypatch.setenv("SUBMARINE_RM_URL", RM)
    result = CliRunner().invoke(
        cli,
        ["job", "run", "--name", "gpujob", "--elastic", "--insecure", "--worker_launch_cmd", "python train.py",
         "--worker_resources", resources, "--workdir", str(Path.cwd())],
    )  # fmt: skip
    return result.exit_code, " ".join(result.output.split())


def nothing_submitted() -> None:
    assert [c.request.method for c in responses.calls] == ["GET"] * len(responses.calls)
    assert not any("/app/v1/services" in str(c.request.url) for c in responses.calls)
    assert not job_dir("gpujob").exists()


@responses.activate
def test_a_cluster_without_the_gpu_type_is_named_and_nothing_is_submitted(monkeypatch: pytest.MonkeyPatch) -> None:
    rm_answers("cpu")
    code, out = run(monkeypatch, "memory-mb=1024,vcores=1,gpu=1")
    assert code == 1, out
    assert (
        f"--worker_resources asks yarn.io/gpu 1 per worker, but the ResourceManager at {RM} has no yarn.io/gpu "
        "resource type (it offers memory-mb, vcores)" in out
    )
    assert "submarine cluster up --gpus-per-node N" in out and "Traceback" not in out
    nothing_submitted()


@responses.activate
def test_more_gpus_than_the_largest_node_has_are_refused_naming_each_node(monkeypatch: pytest.MonkeyPatch) -> None:
    rm_answers("gpu", two_nodes_of_two_gpus())
    code, out = run(monkeypatch, "memory-mb=1024,vcores=1,gpu=3")
    assert code == 1, out
    assert (
        f"--worker_resources asks yarn.io/gpu 3 per worker, but the largest node of the cluster at {RM} has 2 "
        "(yarn.io/gpu by node: localhost:19600 2, localhost:19610 2)" in out
    )
    nothing_submitted()


@responses.activate
def test_as_many_gpus_as_a_node_has_go_on_to_submit(monkeypatch: pytest.MonkeyPatch) -> None:
    rm_answers("gpu")
    submitted: list[JobRequest] = []
    monkeypatch.setattr(job_cli, "submit", lambda yarn, req, files=None: submitted.append(req))
    code, out = run(monkeypatch, "memory-mb=1024,vcores=1,gpu=2")
    assert code == 0, out
    assert [r.resources.gpus for r in submitted] == [2]


@responses.activate
def test_workers_without_gpus_ask_the_rm_nothing_about_them() -> None:
    with YarnServiceClient(RM) as yarn:
        refuse_unplaceable(yarn, WorkerResources(1024, 1, 0))
    assert len(responses.calls) == 0


@responses.activate
def test_a_cluster_whose_nodes_are_all_gone_offers_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service, "NODES_WAIT_S", 1.5)  # it waits that long for a node first
    responses.get(f"{RM}/ws/v1/cluster/metrics", json=recorded("metrics-gpu"))
    responses.get(f"{RM}/ws/v1/cluster/nodes", json={"nodes": None})
    with (
        YarnServiceClient(RM) as yarn,
        pytest.raises(JobSpecError, match="has 0 .yarn.io/gpu by node: no running node"),
    ):
        refuse_unplaceable(yarn, WorkerResources(1024, 1, 1))
    assert len([c for c in responses.calls if c.request.url.startswith(f"{RM}/ws/v1/cluster/nodes")]) >= 2


@responses.activate
def test_a_job_run_right_after_the_rm_restarted_waits_for_its_nodes_to_register() -> None:
    # Seen in a chaos run: a job submitted while the ResourceManager had just restarted was refused for "no
    # running node", and its NodeManagers registered again seconds later.
    responses.get(f"{RM}/ws/v1/cluster/metrics", json=recorded("metrics-gpu"))
    responses.get(f"{RM}/ws/v1/cluster/nodes", json={"nodes": None})
    responses.get(f"{RM}/ws/v1/cluster/nodes", json=recorded("nodes-gpu"))
    with YarnServiceClient(RM) as yarn:
        refuse_unplaceable(yarn, WorkerResources(1024, 1, 2))
        with pytest.raises(JobSpecError, match="has 2"):  # judged on the nodes once they are back
            refuse_unplaceable(yarn, WorkerResources(1024, 1, 3))


@responses.activate
def test_the_nodes_report_their_gpus_as_the_rm_records_them() -> None:
    responses.get(f"{RM}/ws/v1/cluster/nodes", json=recorded("nodes-gpu"))
    responses.get(f"{RM}/ws/v1/cluster/metrics", json=recorded("metrics-gpu"))
    with YarnServiceClient(RM) as yarn:
        [node] = yarn.nodes()
        totals = yarn.resource_totals()
    assert (node.total_gpus, node.free_gpus, node.used_gpus) == (2, 2, 0)
    assert totals == {"memory-mb": 2048, "vcores": 2, "yarn.io/gpu": 2}


@responses.activate
def test_show_of_a_job_whose_application_master_failed_gives_yarns_diagnostics(monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's job: gpu=1 on a cluster without GPUs, submitted before this check existed. Its service AM failed
    three times, so no driver ran to record how the job ended: `job show` says what YARN says."""
    monkeypatch.setenv("SUBMARINE_RM_URL", RM)
    responses.get(f"{RM}/app/v1/services/gpujob", json={"name": "gpujob", "state": "FAILED", "components": []})
    responses.get(f"{RM}/ws/v1/cluster/apps", json=recorded("apps-am-failed"))
    result = CliRunner().invoke(cli, ["job", "show", "gpujob"])
    out = " ".join(result.output.split())
    assert result.exit_code == 0, out
    assert "job gpujob ended: FAILED (YARN state FAILED, final status FAILED)" in out
    assert "YARN's diagnostics of application_1795769466864_0001:" in out
    assert "Application application_1795769466864_0001 failed 3 times due to AM Container" in out
    assert "stderr.txt" not in out
