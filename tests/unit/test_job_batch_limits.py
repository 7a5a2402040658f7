"""``submarine job run --min_batch_size/--max_batch_size``: checked before anything is submitted, and handed to
the job's driver in its environment."""

from __future__ import annotations

from pathlib import Path

import pytest
import responses
from click.testing import CliRunner

from submarine_elastic import env
from submarine_elastic.cli import job as job_cli
from submarine_elastic.cli.main import cli
from submarine_elastic.limits import MAX_BATCH_SIZE
from submarine_elastic.protocol.api import BatchLimits, Limits
from submarine_elastic.submit.jobspec import JobRequest, WorkerResources, build_service, job_dir
from submarine_elastic.submit.service import batch_limits

RM = "http://rm.example:8088"


def run(*flags: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli,
        ["job", "run", "--name", "mnist", "--elastic", "--insecure", "--worker_launch_cmd", "python train.py", *flags],
    )
    return result.exit_code, " ".join(result.output.split())


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--min_batch_size", "0", "--max_batch_size", "64"), "--min_batch_size must be at least 1, got 0"),
        (("--max_batch_size", "-3"), "--max_batch_size must be at least 1, got -3"),
        (("--min_batch_size", "128", "--max_batch_size", "64"), "--min_batch_size 128 is above --max_batch_size 64"),
        (("--min_batch_size", "32"), "--min_batch_size needs --max_batch_size"),
        (
            ("--max_batch_size", str(MAX_BATCH_SIZE + 1)),
            f"--max_batch_size {MAX_BATCH_SIZE + 1} is above {MAX_BATCH_SIZE}",
        ),
        (("--max_batch_size", "many"), "'many' is not a valid integer"),
    ],
)
@responses.activate
def test_bad_batch_limits_are_refused_naming_the_flag_before_anything_is_sent(
    monkeypatch: pytest.MonkeyPatch, flags: tuple[str, ...], message: str
) -> None:
    monkeypatch.setenv("SUBMARINE_RM_URL", RM)
    code, out = run(*flags)
    assert code == 2, out
    assert message in out and "Traceback" not in out
    assert len(responses.calls) == 0  # not even the RM was asked
    assert not job_dir("mnist").exists()


@responses.activate
def test_the_batch_limits_reach_the_submitted_jobs_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUBMARINE_RM_URL", RM)
    responses.get(f"{RM}/app/v1/services/mnist", status=404, json={"diagnostics": "Service mnist not found"})
    submitted: list[JobRequest] = []
    monkeypatch.setattr(job_cli, "submit", lambda yarn, req, files=None: submitted.append(req))
    code, out = run("--min_batch_size", "32", "--max_batch_size", "512", "--workdir", str(Path.cwd()))
    assert code == 0, out
    (req,) = submitted
    assert req.batch_limits == BatchLimits(32, 512)
    spec_env = build_service(req).to_dict()["configuration"]["env"]
    assert (spec_env["SUBMARINE_MIN_BATCH_SIZE"], spec_env["SUBMARINE_MAX_BATCH_SIZE"]) == ("32", "512")


def test_a_maximum_alone_lets_the_batch_go_down_to_one_and_the_driver_reads_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert batch_limits(None, 256) == BatchLimits(1, 256)
    assert batch_limits(None, None) is None
    spec_env = build_service(request(BatchLimits(1, 256))).to_dict()["configuration"]["env"]
    for name in ("SUBMARINE_MIN_BATCH_SIZE", "SUBMARINE_MAX_BATCH_SIZE"):
        monkeypatch.setenv(name, spec_env[name])
    assert env.settings().batch_limits() == (1, 256)  # what the driver reads at its start


def test_a_job_without_batch_flags_has_no_batch_limits_in_its_environment() -> None:
    spec_env = build_service(request(None)).to_dict()["configuration"]["env"]
    assert "SUBMARINE_MIN_BATCH_SIZE" not in spec_env and "SUBMARINE_MAX_BATCH_SIZE" not in spec_env


def request(batch_limits: BatchLimits | None) -> JobRequest:
    """A job request as `job run` builds it, with ``batch_limits``."""
    return JobRequest(
        name="mnist",
        launch_cmd="python train.py",
        limits=Limits(2, 1, 4),
        resources=WorkerResources(2048, 1),
        rm_url="http://127.0.0.1:18088",
        driver_port=31000,
        token="t0ken",
        insecure=True,
        batch_limits=batch_limits,
    )
