"""``submarine job show|flex`` when the ResourceManager is down, and for jobs that ended.

The RM is a closed port (refused at once) or a recorded HTTP exchange; the job's driver is the real
servicer on an in-process gRPC server bound to port 0.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest
import responses
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.elastic.driver import JobDriver
from submarine_elastic.protocol.api import Limits
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.submit.jobspec import job_dir, outcome_path
from submarine_elastic.yarn import RM_UNREACHABLE_EXIT, YarnRequestError
from tests.unit._driver_support import serving

TOKEN = "job-token"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def rm_down(monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("SUBMARINE_RM_URL", url)
    return url


@pytest.fixture()
def driver() -> Iterator[JobDriver]:
    """The job ``mnist``'s driver, serving its control plane; the CLI knows its token and address."""
    servicer = JobDriver("mnist", Limits(2, 1, 3), yarn=None, token=TOKEN, iface="lo", elastic_timeout=60)  # type: ignore[arg-type]
    with serving(servicer, "mnist", TOKEN):
        yield servicer


def run(*args: str) -> tuple[int, str, float]:
    started = time.monotonic()
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, " ".join(result.output.split()), time.monotonic() - started


def test_show_with_the_rm_down_asks_the_driver_at_its_last_address(rm_down: str, driver: JobDriver) -> None:
    code, out, took = run("job", "show", "mnist")
    assert code == 0, out
    assert "the ResourceManager is unreachable" in out and "Traceback" not in out
    assert "phase waiting; ring of 0, target 2, limits 1..3" in out
    assert took < 20


def test_show_with_the_rm_down_and_no_known_driver_fails_clearly(rm_down: str) -> None:
    code, out, _ = run("job", "show", "mnist")
    assert code == RM_UNREACHABLE_EXIT
    assert "cannot show job mnist: the ResourceManager is unreachable" in out
    assert "driver's address is not known on this machine" in out and "Traceback" not in out


def test_flex_with_the_rm_down_goes_to_the_driver_which_holds_the_target_for_yarn(
    rm_down: str, driver: JobDriver
) -> None:
    code, out, took = run("job", "flex", "mnist", "--workers", "3", "--no-wait")
    assert code == 0, out
    assert "the ResourceManager is unreachable" in out and "last known address" in out
    assert "job mnist: 2 -> 3 workers (target 1)" in out
    taken = driver.targets.next(0)
    assert taken is not None and (taken.workers, taken.reason) == (3, "submarine job flex") and driver.requested == 3
    assert took < 20


def test_flex_with_the_rm_down_and_no_known_driver_refuses_and_changes_nothing(rm_down: str) -> None:
    code, out, took = run("job", "flex", "mnist", "--workers", "3")
    assert code == RM_UNREACHABLE_EXIT
    assert "cannot resize job mnist: the ResourceManager is unreachable" in out and "nothing was changed" in out
    assert "driver's address is not known on this machine" in out
    assert took < 20


def test_run_with_the_rm_down_exits_69_having_submitted_nothing(rm_down: str, caplog: pytest.LogCaptureFixture) -> None:
    """A script tells "the cluster is away, try again" (69, sysexits' EX_UNAVAILABLE) from "refused" (1)."""
    code, out, took = run(
        "job", "run", "--name", "mnist", "--num_workers", "1", "--worker_launch_cmd", "python -c 1",
    )  # fmt: skip
    assert code == RM_UNREACHABLE_EXIT, out
    assert "the ResourceManager is unreachable" in out and "try again once it is back" in out
    assert "Traceback" not in out and not job_dir("mnist").exists()
    # urllib3's retries (several lines each) are not logged without -v
    assert [r.getMessage() for r in caplog.records if r.name.startswith("urllib3")] == []
    assert took < 60


def test_an_hdfs_that_does_not_answer_is_the_cluster_away_and_one_that_refuses_is_a_refusal() -> None:
    """A NameNode restarting while `job run` writes the job's files: 69 (try again), as for the RM; nothing was
    submitted (the service is created after the files)."""
    from submarine_elastic.cli.job import _fail
    from submarine_elastic.webhdfs import WebHdfsError

    away = _fail(WebHdfsError("WebHDFS MKDIRS /submarine-jobs/root: no answer from http://nn:9870"))
    assert away.exit_code == RM_UNREACHABLE_EXIT
    assert away.message.startswith("HDFS did not answer (WebHDFS MKDIRS")
    assert away.message.endswith("nothing was submitted: try again once it is back")
    refused = _fail(WebHdfsError("WebHDFS CREATE /x refused (HTTP 403): denied", status_code=403))
    assert refused.exit_code == 1 and refused.message == "WebHDFS CREATE /x refused (HTTP 403): denied"
    denied = WebHdfsError("refused (HTTP 403): Permission denied", status_code=403, exception="AccessControlException")
    assert _fail(denied).exit_code == 1
    # A DataNode whose call to a NameNode being restarted failed (seen in a chaos run), and a NameNode starting.
    reset = "refused (HTTP 403): Call From host-0/198.18.0.2 to host-0:29420 failed on socket exception: reset"
    for away in (
        WebHdfsError(reset, status_code=403, exception="IOException"),
        WebHdfsError("refused (HTTP 403): Name node is in safe mode.", status_code=403, exception="SafeModeException"),
        # The RM's services API reads a service's definition from HDFS: the NameNode away is its HTTP 500.
        YarnRequestError(
            "GET /app/v1/services/j -> HTTP 500: Call From host-0/198.18.0.2 to host-0:29420 failed on connection "
            "exception: java.net.ConnectException: Connection refused",
            status_code=500,
        ),
    ):
        assert _fail(away).exit_code == RM_UNREACHABLE_EXIT, away
    assert _fail(YarnRequestError("GET /x -> HTTP 500: NullPointerException", status_code=500)).exit_code == 1
    # The NameNode starting (safe mode) under the services API: away, told in one line, not its Java stack.
    safe = YarnRequestError(
        "GET /app/v1/services/j -> HTTP 500: Zero blocklocations for /j.json. Name node is in safe mode.\n"
        "\tat org.apache.hadoop.hdfs.server.namenode.FSNamesystem.newSafemodeException(FSNamesystem.java:1661)",
        status_code=500,
    )
    assert _fail(safe).exit_code == RM_UNREACHABLE_EXIT and "FSNamesystem" not in _fail(safe).message
    # The controller a job is registered with before YARN hears of it, killed a moment ago (a chaos run).
    from submarine_elastic.controller.api import ControllerError, ControllerUnavailableError

    gone = ControllerUnavailableError("the controller at 10.0.0.1:4000 does not answer (DEADLINE_EXCEEDED: ...)")
    assert _fail(gone).exit_code == RM_UNREACHABLE_EXIT and "nothing was submitted" in _fail(gone).message
    assert _fail(ControllerError("INVALID_ARGUMENT: no policy 'x'")).exit_code == 1


@responses.activate
def test_show_of_an_ended_job_gives_the_reason_the_failed_workers_stderr_and_its_batch_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from submarine_elastic.cli import job as job_cli

    monkeypatch.setattr(job_cli.console, "_width", 200)  # a wide terminal: one table row a line
    rm = "http://rm.example:8088"
    monkeypatch.setenv("SUBMARINE_RM_URL", rm)
    responses.get(f"{rm}/app/v1/services/mnist", json={"name": "mnist", "state": "STOPPED", "components": []})
    responses.get(
        f"{rm}/ws/v1/cluster/apps",
        json={
            "apps": {
                "app": [{"id": "application_1_0002", "name": "mnist", "state": "FINISHED", "finalStatus": "FAILED"}]
            }
        },
    )
    failure = pb.WorkerFailure(
        time=time.time(),
        instance="worker-1",
        container_id="container_1_0002_01_000004",
        rank=-1,
        exit_code=1,
        reason="worker-1's training process exited with status 1 before it joined the ring",
        stderr_tail='Traceback (most recent call last):\n  File "train.py", line 3\nValueError: bad batch size\n',
        log_path="/logs/training-1.log",
    )
    outcome_path("mnist").parent.mkdir(parents=True, exist_ok=True)
    outcome_path("mnist").write_text(
        json.dumps(
            {
                "job": "mnist",
                "phase": "failed",
                "error": "worker-1's training process exited with status 1: ValueError: bad batch size",
                "time": time.time(),
                "failures": [json.loads(pb_json(failure))],
                "batch_timeline": [
                    json.loads(pb_json(pb.Target(workers=2, batch_size=b, version=v, reason=r, time=time.time())))
                    for b, v, r in ((128, 1, "goodput: batch 64 -> 128"), (256, 2, "goodput: batch 128 -> 256"))
                ],
            }
        )
    )
    code, out, _ = run("job", "show", "mnist")
    outcome_path("mnist").unlink()
    assert code == 0, out
    assert "job mnist ended: FAILED (YARN state STOPPED)" in out
    assert "reason: worker-1's training process exited with status 1: ValueError: bad batch size" in out
    assert 'File "train.py", line 3' in out and "full log: /logs/training-1.log" in out
    # the batch it ended with, and each setting with its reason (the driver's record outlives its service)
    assert "batch: global batch 256, accumulation steps 0" in out and "setting 2 since" in out
    assert "goodput: batch 64 -> 128" in out and "goodput: batch 128 -> 256" in out


@responses.activate
def test_show_of_a_job_nobody_knows_fails_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    rm = "http://rm.example:8088"
    monkeypatch.setenv("SUBMARINE_RM_URL", rm)
    responses.get(f"{rm}/app/v1/services/nope", status=404, json={"diagnostics": "Service nope not found"})
    code, out, _ = run("job", "show", "nope")
    assert code == 1 and "nope" in out


def pb_json(message: pb.WorkerFailure | pb.Target) -> str:
    from google.protobuf import json_format

    return json_format.MessageToJson(message, preserving_proto_field_name=True)


@pytest.mark.parametrize(("phase", "fails"), [("finished", False), ("failed", True)])
@responses.activate
def test_following_a_job_to_its_end_reports_a_failed_job_as_failed(phase: str, fails: bool) -> None:
    """The service of a failed job ends as STOPPED, like a finished one: the outcome tells them apart."""
    import click

    from submarine_elastic.cli.job import _follow
    from submarine_elastic.yarn import YarnServiceClient

    rm = "http://rm.example:8088"
    responses.get(f"{rm}/app/v1/services/mnist", json={"name": "mnist", "state": "STOPPED", "components": []})
    responses.get(f"{rm}/ws/v1/cluster/apps", json={"apps": None})
    outcome_path("mnist").parent.mkdir(parents=True, exist_ok=True)
    record = {"job": "mnist", "phase": phase, "error": "the ring did not form" if fails else "", "time": 0.0}
    outcome_path("mnist").write_text(json.dumps(record))
    try:
        with YarnServiceClient(rm) as yarn:
            if fails:
                with pytest.raises(click.ClickException, match="job mnist failed: the ring did not form"):
                    _follow(yarn, "mnist", timeout=5)
            else:
                _follow(yarn, "mnist", timeout=5)
    finally:
        outcome_path("mnist").unlink()


def test_waiting_for_a_size_names_why_the_ring_has_not_formed_and_stops_on_failure(driver: JobDriver) -> None:
    from submarine_elastic.protocol.api import FlexRefusedError
    from submarine_elastic.submit.client import JobClient
    from submarine_elastic.submit.store import last_driver_address

    with JobClient("mnist", None, address=last_driver_address("mnist"), timeout=5) as client:
        with pytest.raises(TimeoutError, match="no worker agent has attached yet"):
            client.wait_for_size(3, timeout=0.3, poll=0.1)
        driver.phase, driver.error = "failed", "the ring did not form within 60 s"
        with pytest.raises(FlexRefusedError, match="job mnist failed: the ring did not form within 60 s"):
            client.wait_for_size(3, timeout=30, poll=0.1)


class _Yarn:
    """What clear_ended_service asks of the YARN client."""

    def __init__(self, state: str | None) -> None:
        self.state, self.destroyed = state, []

    def status(self, name: str) -> object:
        from submarine_elastic.yarn import ServiceNotFoundError, ServiceState

        if self.state is None:
            raise ServiceNotFoundError(f"service {name} not found")
        state = ServiceState(self.state)
        return type("Status", (), {"state": state, "is_terminal": state in (ServiceState.STOPPED, ServiceState.FAILED)})

    def destroy(self, name: str, **kwargs: object) -> None:
        self.destroyed.append(name)


def test_a_new_job_may_take_the_name_of_an_ended_one_but_not_of_a_running_one() -> None:
    from submarine_elastic.submit.jobspec import JobSpecError
    from submarine_elastic.submit.service import clear_ended_service

    ended, running, unknown = _Yarn("STOPPED"), _Yarn("STABLE"), _Yarn(None)
    assert clear_ended_service(ended, "big") is True and ended.destroyed == ["big"]  # type: ignore[arg-type]
    assert clear_ended_service(unknown, "big") is False and unknown.destroyed == []  # type: ignore[arg-type]
    with pytest.raises(JobSpecError, match="--name big: a job of that name is running"):
        clear_ended_service(running, "big")  # type: ignore[arg-type]
    assert running.destroyed == []


@responses.activate
def test_job_run_under_a_running_jobs_name_is_refused_before_anything_is_submitted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rm = "http://rm.example:8088"
    monkeypatch.setenv("SUBMARINE_RM_URL", rm)
    responses.get(f"{rm}/app/v1/services/big", json={"name": "big", "state": "STABLE", "components": []})
    code, out, _ = run("job", "run", "--name", "big", "--elastic", "--worker_launch_cmd", "python train.py")
    assert code == 1 and "--name big: a job of that name is running (YARN state STABLE)" in out
    # What the RM's file system and kill delay are (its /conf), the service's state: no POST, no DELETE.
    assert [c.request.method for c in responses.calls] == ["GET", "GET", "GET"]
    assert not job_dir("big").exists()


def test_a_job_that_has_ended_is_said_to_have_ended_at_once_not_after_the_locate_timeout() -> None:
    from submarine_elastic.protocol.api import DriverUnreachableError
    from submarine_elastic.protocol.locate import driver_address

    asked: list[str] = []

    class Ended:
        def status(self, name: str) -> object:
            asked.append(name)
            status = _Yarn("STOPPED").status(name)
            status.component = lambda _name: None  # type: ignore[attr-defined]
            return status

    with pytest.raises(DriverUnreachableError, match="job 'mnist' has ended .*STOPPED.*submarine job show mnist"):
        driver_address("mnist", client=Ended(), port=1234, timeout=60)  # type: ignore[arg-type]
    assert asked == ["mnist"]  # asked once: no polling for a driver that cannot come back
