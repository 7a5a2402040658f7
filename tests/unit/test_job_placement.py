"""`job run --placement spread`: the worker component asks YARN for at most one worker a node, and a placement the
cluster cannot honour is refused before anything is submitted, naming the flag and the figures.

The nodes are the recording of Hadoop 3.4.2's ``/ws/v1/cluster/nodes`` (one node), doubled for a cluster of two.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import responses
from click.testing import CliRunner

from submarine_elastic.cli import job as job_cli
from submarine_elastic.cli.main import cli
from submarine_elastic.protocol.api import Limits
from submarine_elastic.submit.jobspec import JobRequest, Placement, WorkerResources, build_service, job_dir
from submarine_elastic.submit.service import PLACEMENT_HANDLER
from tests.unit.test_job_gpu import RM, recorded

CONF = f"{RM}/conf"


def two_nodes() -> dict[str, Any]:
    nodes = recorded("nodes-cpu")
    second = copy.deepcopy(nodes["nodes"]["node"][0])
    second["id"] = "localhost:19610"
    nodes["nodes"]["node"].append(second)
    return nodes


def rm_answers(handler: str | None = "scheduler") -> None:
    responses.get(f"{RM}/ws/v1/cluster/nodes", json=two_nodes())
    if handler is None:
        responses.get(CONF, status=404)
    else:
        responses.get(
            CONF, json={"property": {"key": PLACEMENT_HANDLER, "value": handler, "resource": "yarn-site.xml"}}
        )
    responses.get(f"{RM}/app/v1/services/spread", status=404, json={"diagnostics": "Service spread not found"})


def run(monkeypatch: pytest.MonkeyPatch, *flags: str) -> tuple[int, str]:
    monkeypatch.setenv("SUBMARINE_RM_URL", RM)
    result = CliRunner().invoke(
        cli,
        ["job", "run", "--name", "spread", "--insecure", "--worker_launch_cmd", "python train.py",
         "--workdir", str(Path.cwd()), *flags],
    )  # fmt: skip
    return result.exit_code, " ".join(result.output.split())


def nothing_submitted() -> None:
    assert [c.request.method for c in responses.calls] == ["GET"] * len(responses.calls)
    assert not any("/app/v1/services" in str(c.request.url) and c.request.method != "GET" for c in responses.calls)
    assert not job_dir("spread").exists()


def test_spread_puts_an_anti_affinity_of_the_workers_on_the_worker_component_only() -> None:
    req = JobRequest(
        "spread", "python train.py", Limits(2, 1, 2), WorkerResources(1024, 1), RM, placement=Placement.SPREAD
    )
    spec = build_service(req).to_dict()
    policies = {c["name"]: c.get("placement_policy") for c in spec["components"]}
    assert policies == {
        "driver": None,
        "worker": {"constraints": [{"type": "ANTI_AFFINITY", "scope": "NODE", "target_tags": ["worker"]}]},
    }
    without = build_service(JobRequest("spread", "python train.py", Limits(2, 1, 2), WorkerResources(1024, 1), RM))
    assert all("placement_policy" not in c for c in without.to_dict()["components"])


@responses.activate
def test_spread_of_as_many_workers_as_nodes_goes_on_to_submit(monkeypatch: pytest.MonkeyPatch) -> None:
    rm_answers()
    submitted: list[JobRequest] = []
    monkeypatch.setattr(job_cli, "submit", lambda yarn, req, files=None: submitted.append(req))
    code, out = run(monkeypatch, "--num_workers", "2", "--placement", "spread")
    assert code == 0, out
    assert [r.placement for r in submitted] == [Placement.SPREAD]


@responses.activate
def test_spread_of_more_workers_than_nodes_is_refused_and_nothing_is_submitted(monkeypatch: pytest.MonkeyPatch) -> None:
    rm_answers()
    code, out = run(monkeypatch, "--num_workers", "3", "--placement", "spread")
    assert code == 1, out
    assert (
        f"--placement spread puts at most one worker on a node, but --num_workers asks 3 workers and the cluster at "
        f"{RM} has 2 running nodes (localhost:19600, localhost:19610): at most 2 workers" in out
    )
    nothing_submitted()


@responses.activate
def test_an_elastic_spread_that_could_grow_past_the_nodes_names_max_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    rm_answers()
    code, out = run(monkeypatch, "--elastic", "--num_workers", "2", "--max_workers", "4", "--placement", "spread")
    assert code == 1, out
    assert "but --max_workers asks 4 workers" in out
    nothing_submitted()


@responses.activate
@pytest.mark.parametrize(("handler", "shown"), [(None, "'disabled'"), ("disabled", "'disabled'")])
def test_an_rm_that_does_not_handle_placement_constraints_is_named(
    monkeypatch: pytest.MonkeyPatch, handler: str | None, shown: str
) -> None:
    rm_answers(handler)
    code, out = run(monkeypatch, "--num_workers", "2", "--placement", "spread")
    assert code == 1, out
    assert (
        f"--placement spread: the ResourceManager at {RM} does not handle placement constraints ({PLACEMENT_HANDLER} "
        f"is {shown}); set it to 'scheduler'" in out
    )
    nothing_submitted()


def test_an_unknown_placement_is_refused_naming_the_flag_and_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = run(monkeypatch, "--placement", "scatter")
    assert code == 2, out
    assert "Invalid value for '--placement': 'scatter' is not 'spread'" in out
    assert not job_dir("spread").exists()
