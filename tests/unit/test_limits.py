"""Every side of a job takes the same names: what one accepts, none of the others refuses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from submarine_elastic.limits import SERVICE_NAME_MAX_LENGTH, USER_METRIC
from submarine_elastic.metrics.api import InvalidPointError
from submarine_elastic.metrics.proto import metrics_pb2
from submarine_elastic.metrics.validation import validate_batch, validate_job_id
from submarine_elastic.protocol.api import Limits
from submarine_elastic.submit.jobspec import JobRequest, JobSpecError, WorkerResources, build_service, job_dir
from tf_hooks.api import MetricsConfigError, StepBlock
from tf_hooks.config import MetricsConfig
from tf_hooks.sender import _clean


def _request(name: str) -> JobRequest:
    return JobRequest(
        name=name,
        launch_cmd="python train.py",
        limits=Limits(2, 1, 4),
        resources=WorkerResources(2048, 1),
        rm_url="http://127.0.0.1:18088",
        driver_port=31000,
        token="t0ken",
        python="/venv/bin/python",
    )


def _accepted_by_each_side(name: str) -> dict[str, bool]:
    verdicts = {}
    try:
        MetricsConfig(endpoint="127.0.0.1:1", job_id=name)
        verdicts["training hooks"] = True
    except MetricsConfigError:
        verdicts["training hooks"] = False
    try:
        validate_job_id(name)
        verdicts["metrics service"] = True
    except InvalidPointError:
        verdicts["metrics service"] = False
    try:
        build_service(_request(name))
        verdicts["job run (YARN spec)"] = True
    except JobSpecError:
        verdicts["job run (YARN spec)"] = False
    return verdicts


@pytest.mark.parametrize(
    ("name", "accepted"),
    [
        ("a" * SERVICE_NAME_MAX_LENGTH, True),
        ("a" * (SERVICE_NAME_MAX_LENGTH + 1), False),
        ("mnist-2", True),
        ("Mnist", False),
        ("2mnist", False),
        ("../etc", False),
    ],
)
def test_a_job_name_is_taken_or_refused_by_every_side_alike(name: str, accepted: bool) -> None:
    verdicts = _accepted_by_each_side(name)
    assert verdicts == dict.fromkeys(verdicts, accepted)


def test_a_refused_name_is_explained_with_the_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUBMARINE_JOBS_DIR", str(tmp_path))
    with pytest.raises(JobSpecError, match=r"--name: job name 'a{40}\.\.\.' is not a YARN service name: 1-63"):
        _request("a" * 64)
    with pytest.raises(JobSpecError, match="job name '../etc'"):
        job_dir("../etc")


@given(st.text(alphabet="abcXYZ019_.-:/ ", max_size=70))
def test_the_sender_keeps_exactly_the_user_metrics_the_service_takes(name: str) -> None:
    block = StepBlock(
        rank=0,
        world_size=1,
        step=np.array([1], dtype=np.int64),
        wall_time=np.array([1.7e9]),
        user_metrics={name: np.array([0.5])},
    )
    kept = [n for n, _ in _clean(block)[5]]
    batch = metrics_pb2.ReportBatch(
        job_id="job-a",
        worker=metrics_pb2.WorkerRef(instance="worker-0"),
        incarnation="1",
        world_size=1,
        points=[metrics_pb2.StepPoint(seq=1, step=1, wall_time=1.7e9, user_metrics={name: 0.5})],
    )
    try:
        validate_batch(batch)
        taken = True
    except InvalidPointError:
        taken = False
    assert (kept == [name]) == taken == USER_METRIC.matches(name)
