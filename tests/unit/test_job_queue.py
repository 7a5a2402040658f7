"""`job run --queue Q`: every container of the job in Q, and a queue the scheduler does not have, or one whose
maximum cannot hold the job's fewest containers, refused before anything is submitted, naming the queue and
its limits; `job show` gives the queue the RM runs the job in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import responses
from click.testing import CliRunner
from responses import matchers

from submarine_elastic.cli.main import cli
from submarine_elastic.submit.jobspec import JobRequest, Limits, WorkerResources, build_service, job_dir

RM = "http://rm.example:8088"


def leaf(name: str, capacity: float, max_capacity: float, max_mb: int, max_vcores: int) -> dict[str, Any]:
    """One leaf of Hadoop 3.4.2's ``/ws/v1/cluster/scheduler`` (the fields read, as the RM names them)."""
    return {
        "type": "capacitySchedulerLeafQueueInfo", "queueName": name, "queuePath": f"root.{name}", "state": "RUNNING",
        "absoluteCapacity": capacity, "absoluteMaxCapacity": max_capacity, "absoluteUsedCapacity": 0.0,
        "resourcesUsed": {"memory": 0, "vCores": 0}, "maxEffectiveCapacity": {"memory": max_mb, "vCores": max_vcores},
        "pendingContainers": 0, "numApplications": 0,
    }  # fmt: skip


def rm_answers() -> None:
    queues = [leaf("prod", 60.0, 100.0, 8192, 8), leaf("research", 40.0, 50.0, 4096, 4)]
    responses.get(
        f"{RM}/ws/v1/cluster/scheduler",
        json={"scheduler": {"schedulerInfo": {"type": "capacityScheduler", "queues": {"queue": queues}}}},
    )
    responses.get(f"{RM}/conf", json={"property": {"key": "yarn.service.am-resource.memory", "value": "512"}})
    responses.get(f"{RM}/app/v1/services/qjob", status=404, json={"diagnostics": "Service qjob not found"})


def run(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str]:
    monkeypatch.setenv("SUBMARINE_RM_URL", RM)
    result = CliRunner().invoke(
        cli,
        ["job", "run", "--name", "qjob", "--elastic", "--insecure", "--worker_launch_cmd", "python train.py",
         "--workdir", str(Path.cwd()), *args],
        env={"COLUMNS": "300"},
    )  # fmt: skip
    return result.exit_code, " ".join(result.output.split())


def nothing_submitted() -> None:
    assert all(c.request.method == "GET" for c in responses.calls)
    assert not any("/app/v1/services" in str(c.request.url) for c in responses.calls)
    assert not job_dir("qjob").exists()


@responses.activate
def test_an_unknown_queue_is_refused_naming_the_queues_there_are(monkeypatch: pytest.MonkeyPatch) -> None:
    rm_answers()
    code, out = run(monkeypatch, "--queue", "reserach")
    assert code == 1, out
    assert f"--queue: the scheduler at {RM} has no queue 'reserach' (its queues: root.prod, root.research)" in out
    nothing_submitted()


@responses.activate
def test_a_minimum_over_the_queues_maximum_is_refused_naming_its_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    rm_answers()
    # AM 512 + driver 512 + 2 workers of 2048 MB = 5120 MB, over research's 4096 MB.
    code, out = run(
        monkeypatch, "--queue", "root.research", "--num_workers", "2", "--min_workers", "2", "--max_workers", "4",
        "--worker_resources", "memory-mb=2048,vcores=1",
    )  # fmt: skip
    assert code == 1, out
    assert (
        "--queue root.research: the job's fewest containers (ApplicationMaster, driver and --min_workers 2) need "
        "5120 MB and 4 vcores, over queue root.research's maximum of 4096 MB and 4 vcores (guaranteed 40%, "
        "maximum 50% of the cluster)" in out
    )
    nothing_submitted()


@responses.activate
def test_a_job_whose_minimum_fits_goes_on_to_submission(monkeypatch: pytest.MonkeyPatch) -> None:
    rm_answers()
    responses.post(f"{RM}/app/v1/services", status=500, json={"diagnostics": "stop here"})
    code, out = run(
        monkeypatch, "--queue", "research", "--num_workers", "4", "--min_workers", "1", "--max_workers", "4",
        "--worker_resources", "memory-mb=2048,vcores=1",
    )  # fmt: skip
    assert "no queue" not in out and "maximum of" not in out, out
    posted = [c.request for c in responses.calls if c.request.method == "POST"]
    assert len(posted) == 1 and json.loads(posted[0].body or "{}")["queue"] == "research"


@pytest.mark.parametrize("queue", [["--queue", "research"], []], ids=["in a queue", "without a queue"])
@responses.activate
def test_the_clusters_kill_delay_reaches_the_containers(monkeypatch: pytest.MonkeyPatch, queue: list[str]) -> None:
    """What a worker's agent reads to know how long its process has to leave the ring when YARN stops its
    container (preempted from any queue, a NodeManager decommissioned): every job has it, in a queue or not."""
    rm_answers()
    responses.get(
        f"{RM}/conf",
        json={"property": {"key": "yarn.nodemanager.sleep-delay-before-sigkill.ms", "value": "5000"}},
        match=[
            matchers.query_param_matcher({"name": "yarn.nodemanager.sleep-delay-before-sigkill.ms"}, strict_match=False)
        ],
    )
    responses.post(f"{RM}/app/v1/services", status=500, json={"diagnostics": "stop here"})
    run(monkeypatch, *queue, "--num_workers", "1", "--worker_resources", "memory-mb=512,vcores=1")
    [posted] = [c.request for c in responses.calls if c.request.method == "POST"]
    spec = json.loads(posted.body or "{}")
    assert spec["configuration"]["env"]["SUBMARINE_SIGKILL_DELAY_MS"] == "5000"  # every container's


@responses.activate
def test_a_job_without_a_queue_goes_on_when_the_rm_does_not_say_its_kill_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    """An RM whose /conf does not answer: the job is submitted, its workers stopped at once on SIGTERM."""
    responses.get(f"{RM}/conf", status=500, body="no configuration here")
    responses.get(f"{RM}/app/v1/services/qjob", status=404, json={"diagnostics": "Service qjob not found"})
    responses.post(f"{RM}/app/v1/services", status=500, json={"diagnostics": "stop here"})
    code, out = run(monkeypatch, "--num_workers", "1", "--worker_resources", "memory-mb=512,vcores=1")
    assert code == 1 and "stop here" in out, out  # the RM was asked to run the job
    [posted] = [c.request for c in responses.calls if c.request.method == "POST"]
    assert "SUBMARINE_SIGKILL_DELAY_MS" not in json.loads(posted.body or "{}")["configuration"]["env"]


def test_every_container_of_the_job_is_in_its_queue() -> None:
    req = JobRequest(
        name="qjob",
        launch_cmd="python train.py",
        limits=Limits(2, 1, 4),
        resources=WorkerResources(1024, 1),
        rm_url=RM,
        elastic=True,
        queue="research",
        workdir=Path.cwd(),
        insecure=True,
    )
    service = build_service(req)
    # The Services API has one queue per service: the AM, the driver and every worker run in it.
    assert service.queue == "research"
    assert {c.name for c in service.components} == {"driver", "worker"}


@responses.activate
def test_show_gives_the_queue_its_shares_and_why_workers_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUBMARINE_RM_URL", RM)
    responses.get(f"{RM}/app/v1/services/qjob", json={"name": "qjob", "state": "STARTED", "components": []})
    responses.get(
        f"{RM}/ws/v1/cluster/apps",
        json={"apps": {"app": [{"id": "application_1_0001", "name": "qjob", "state": "RUNNING", "queue": "research"}]}},
    )
    research = {**leaf("research", 40.0, 100.0, 8192, 8), "absoluteUsedCapacity": 100.0, "pendingContainers": 1}
    responses.get(
        f"{RM}/ws/v1/cluster/scheduler",
        json={"scheduler": {"schedulerInfo": {"queues": {"queue": [leaf("prod", 60.0, 100.0, 8192, 8), research]}}}},
    )
    result = CliRunner().invoke(cli, ["job", "show", "qjob"], env={"COLUMNS": "300"})
    out = " ".join(result.output.split())
    assert (
        "job qjob: YARN state STARTED, queue root.research (guaranteed 40%, maximum 100%, using 100% of the "
        "cluster, 1 containers pending (at its maximum))" in out
    ), out
