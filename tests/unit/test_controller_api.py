"""The controller's gRPC API on a real in-process server bound to port 0: what each status code means, the
server's bounds, the client's deadlines, and the commands (``job run|kill``, ``controller status|history``,
the py4j bridge) that reach a running controller through it."""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest
import responses
from click.testing import CliRunner
from grpc_health.v1 import health_pb2, health_pb2_grpc

from submarine_elastic.bridge.api import JavaSide
from submarine_elastic.bridge.service import ElasticSchedulerService
from submarine_elastic.cli.main import cli
from submarine_elastic.controller import locate
from submarine_elastic.controller.api import (
    ClusterApp,
    ControllerAuthError,
    ControllerInfo,
    ControllerUnavailableError,
    DecisionRecord,
    IllegalTransitionError,
    InvalidJobError,
    JobBackend,
    JobFootprint,
    JobRecord,
    JobSource,
    JobState,
    JobSubmission,
    NodeResources,
    UnknownJobError,
)
from submarine_elastic.controller.client import ControllerClient
from submarine_elastic.controller.memory import InMemoryController
from submarine_elastic.controller.proto import controller_pb2 as pb
from submarine_elastic.controller.proto import controller_pb2_grpc as pb_grpc
from submarine_elastic.controller.server import MAX_REQUEST_BYTES, SERVICE_NAME, ControllerServer
from submarine_elastic.controller.service import ControllerService
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.metrics.auth import job_credential
from submarine_elastic.policy import PolicyEngine, load_arbiter, load_job_policy
from submarine_elastic.protocol.proto import elastic_pb2
from submarine_elastic.submit.jobspec import SECRET_ENV, job_dir

TOKEN = "controller-test-token-0123456789"
METRICS_KEY = "metrics-service-key-0123456789"
AUTH = (("authorization", f"Bearer {TOKEN}"),)


class Cluster(JobBackend):
    """Rings of the sizes the test sets; resizes are instant. The controller is given ``--capacity``."""

    def __init__(self) -> None:
        self.sizes: dict[str, int] = {}

    def nodes(self) -> list[NodeResources] | None:
        raise AssertionError("with --capacity the nodes are not read")

    def footprint(self, job_id: str) -> JobFootprint | None:
        raise AssertionError("with --capacity no footprint is read")

    def ring_size(self, job_id: str) -> int | None:
        return self.sizes.get(job_id)

    def set_target(self, job_id: str, target: elastic_pb2.Target) -> None:
        workers = target.workers
        self.sizes[job_id] = workers

    def cluster_jobs(self) -> dict[str, ClusterApp] | None:
        return None


@pytest.fixture(autouse=True)
def plaintext_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """These servers are plaintext on loopback: their clients connect so only when told to."""
    monkeypatch.setenv("SUBMARINE_INSECURE", "1")


@pytest.fixture()
def service(tmp_path: Path) -> Iterator[ControllerService]:
    engine = PolicyEngine(load_job_policy("greedy"), load_arbiter("fair-share"), cooldown_s=0)
    store = ControllerStore(tmp_path / "state" / "controller.db")
    yield ControllerService(store, engine, Cluster(), capacity=4, clock=lambda: 1000.0)
    store.close()


@pytest.fixture()
def server(service: ControllerService) -> Iterator[ControllerServer]:
    with ControllerServer(service, token=TOKEN) as srv:
        yield srv


@pytest.fixture()
def client(server: ControllerServer) -> Iterator[ControllerClient]:
    with ControllerClient(server.address, TOKEN, timeout=5) as c:
        yield c


@pytest.fixture()
def stub(server: ControllerServer) -> Iterator[pb_grpc.ControllerServiceStub]:
    with grpc.insecure_channel(server.address) as channel:
        yield pb_grpc.ControllerServiceStub(channel)


def code_of(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as raised:
        call()
    return raised.value.code(), raised.value.details()


# ----------------------------------------------------------------------------- the API


def test_a_job_submitted_through_the_api_is_the_controllers(
    client: ControllerClient, service: ControllerService
) -> None:
    record = client.job_submitted("big", 1, 4, 2, policy="greedy")
    assert record == JobRecord(
        "big", 1, 4, 2, 2, True, JobState.PENDING, 1000.0, JobSource.CLI, policy="greedy", requested=2
    )
    assert service.store.job("big") == record
    service.submit(JobSubmission("web", 1, 1, 1, elastic=False, source=JobSource.YARN), app_id="application_7")
    assert client.jobs() == service.jobs()
    assert client.job("web").app_id == "application_7"
    assert client.decision("big") is None and client.timeline("big") == []

    client.report_metrics("big", 2, 10, 512.5, loss=0.25)
    assert service.store.throughput("big") == {2: (512.5, 1)}
    client.job_finished("big")
    client.job_finished("big")  # again: nothing changes
    assert service.store.job("big").state is JobState.FINISHED
    assert [s.job.job_id for s in client.statuses(include_finished=False)] == ["web"]


def test_a_jobs_queue_goes_through_the_api_and_a_bad_one_is_named(
    client: ControllerClient, service: ControllerService
) -> None:
    assert client.job_submitted("big", 1, 4, 2, queue="root.research").queue == "root.research"
    assert service.store.job("big").queue == "root.research"
    assert client.job_submitted("small", 1, 1, 1, elastic=False).queue is None
    with pytest.raises(InvalidJobError, match="queue 'research/x' is not a YARN queue name"):
        client.job_submitted("odd", 1, 1, 1, elastic=False, queue="research/x")


def test_decisions_and_every_run_come_back_typed(client: ControllerClient, service: ControllerService) -> None:
    client.job_submitted("big", 1, 4, 2)
    service.backend.sizes["big"] = 2  # type: ignore[attr-defined]
    [grow] = service.tick()
    assert service.wait_idle(10)
    assert client.job("big").state is JobState.RUNNING  # its ring formed
    [applied] = client.timeline("big")
    assert (applied.from_workers, applied.to_workers, applied.applied, applied.error) == (2, 4, True, None)
    assert client.decision("big") == applied
    [status] = client.statuses()
    assert status.last_decision == applied and status.job.workers == 4
    client.job_submitted("big", 1, 4, 1)  # a new run
    assert client.job("big").run == 2 and client.timeline("big") == []
    assert client.timeline("big", all_runs=True) == [applied]


@pytest.mark.parametrize(
    ("request_", "named"),
    [
        (
            pb.SubmitJobRequest(job_id="Bad_Name", min_workers=1, max_workers=1, workers=1, source=pb.JOB_SOURCE_CLI),
            "'Bad_Name'",
        ),
        (
            pb.SubmitJobRequest(job_id="a" * 64, min_workers=1, max_workers=1, workers=1, source=pb.JOB_SOURCE_CLI),
            "1-63 characters",
        ),
        (
            pb.SubmitJobRequest(
                job_id="big", min_workers=0, max_workers=2, workers=1, elastic=True, source=pb.JOB_SOURCE_CLI
            ),
            "min_workers must be an integer in [1, 100000], got 0",
        ),
        (
            pb.SubmitJobRequest(
                job_id="big", min_workers=2, max_workers=4, workers=5, elastic=True, source=pb.JOB_SOURCE_CLI
            ),
            "workers 5 must lie within min 2 and max 4",
        ),
        (
            pb.SubmitJobRequest(
                job_id="big", min_workers=1, max_workers=2, workers=2, elastic=False, source=pb.JOB_SOURCE_CLI
            ),
            "a fixed-size job needs min == max, got 1 and 2",
        ),
        (
            pb.SubmitJobRequest(job_id="big", min_workers=1, max_workers=1, workers=1),
            "source must be one of cli, bridge, yarn, got JOB_SOURCE_UNSPECIFIED",
        ),
        (
            pb.SubmitJobRequest(
                job_id="big", min_workers=1, max_workers=1, workers=1, source=pb.JOB_SOURCE_CLI, policy="nope"
            ),
            "policy 'nope' cannot be used: no policy named 'nope'",
        ),
        (
            pb.SubmitJobRequest(
                job_id="big", min_workers=1, max_workers=1, workers=1, source=pb.JOB_SOURCE_CLI, policy="x\n"
            ),
            "a policy is 1-512 printable characters",
        ),
    ],
)
def test_a_bad_submission_is_invalid_argument_naming_the_value(
    stub: pb_grpc.ControllerServiceStub, service: ControllerService, request_: pb.SubmitJobRequest, named: str
) -> None:
    code, details = code_of(lambda: stub.SubmitJob(request_, metadata=AUTH, timeout=5))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert named in details
    assert service.jobs() == []


def test_bad_metrics_are_invalid_argument_and_the_client_raises_the_controllers_error(
    client: ControllerClient,
) -> None:
    client.job_submitted("big", 1, 4, 2)
    with pytest.raises(InvalidJobError, match=r"samples_per_second must be finite and in \[0, 1e\+15\], got nan"):
        client.report_metrics("big", 2, 1, float("nan"))
    with pytest.raises(InvalidJobError, match=r"world_size must be an integer in \[1, 100000\], got 0"):
        client.report_metrics("big", 0, 1, 1.0)
    with pytest.raises(InvalidJobError, match="cannot be sent to the controller: Value out of range"):
        client.job_submitted("big", 1, 2**40, 1)


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.EndJob(pb.EndJobRequest(job_id="ghost"), metadata=AUTH, timeout=5),
        lambda s: s.GetJob(pb.GetJobRequest(job_id="ghost"), metadata=AUTH, timeout=5),
        lambda s: s.GetHistory(pb.GetHistoryRequest(job_id="ghost", all_runs=True), metadata=AUTH, timeout=5),
        lambda s: s.ReportMetrics(
            pb.ReportMetricsRequest(job_id="ghost", world_size=1, step=1, samples_per_second=1.0),
            metadata=AUTH,
            timeout=5,
        ),
    ],
)
def test_an_unknown_job_is_not_found(stub: pb_grpc.ControllerServiceStub, call: Callable[[Any], object]) -> None:
    assert code_of(lambda: call(stub)) == (grpc.StatusCode.NOT_FOUND, "no job named 'ghost'")


def test_the_client_raises_unknown_job_errors(client: ControllerClient) -> None:
    for call in (
        lambda: client.job_finished("ghost"),
        lambda: client.decision("ghost"),
        lambda: client.timeline("ghost"),
        lambda: client.job(None),  # type: ignore[arg-type]
    ):
        with pytest.raises(UnknownJobError, match="no job named"):
            call()


@pytest.mark.parametrize("metadata", [(), (("authorization", "Bearer wrong"),), (("authorization", TOKEN),)])
def test_every_call_without_the_token_is_unauthenticated(
    stub: pb_grpc.ControllerServiceStub, service: ControllerService, metadata: tuple[tuple[str, str], ...]
) -> None:
    calls = [
        lambda: stub.SubmitJob(
            pb.SubmitJobRequest(job_id="big", min_workers=1, max_workers=1, workers=1, source=pb.JOB_SOURCE_CLI),
            metadata=metadata,
            timeout=5,
        ),
        lambda: stub.EndJob(pb.EndJobRequest(job_id="big"), metadata=metadata, timeout=5),
        lambda: stub.ListJobs(pb.ListJobsRequest(), metadata=metadata, timeout=5),
        lambda: stub.GetHistory(pb.GetHistoryRequest(job_id="big"), metadata=metadata, timeout=5),
    ]
    for call in calls:
        assert code_of(call) == (grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
    assert service.jobs() == []


def test_a_wrong_token_is_a_controller_auth_error_and_health_needs_none(server: ControllerServer) -> None:
    with ControllerClient(server.address, "not-the-token", timeout=5) as wrong:
        with pytest.raises(ControllerAuthError, match="refused the token: missing or wrong bearer token"):
            wrong.jobs()
    with grpc.insecure_channel(server.address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=5
        )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


class Refusing(InMemoryController):
    def job_finished(self, job_id: str) -> None:
        raise IllegalTransitionError("a finished job cannot become running")

    def jobs(self) -> list[JobRecord]:
        raise RuntimeError("disk on fire")


def test_an_illegal_transition_is_failed_precondition_and_a_bug_is_internal_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with ControllerServer(Refusing(), token=TOKEN) as srv, grpc.insecure_channel(srv.address) as channel:
        stub = pb_grpc.ControllerServiceStub(channel)
        assert code_of(lambda: stub.EndJob(pb.EndJobRequest(job_id="big"), metadata=AUTH, timeout=5)) == (
            grpc.StatusCode.FAILED_PRECONDITION,
            "a finished job cannot become running",
        )
        code, details = code_of(lambda: stub.ListJobs(pb.ListJobsRequest(), metadata=AUTH, timeout=5))
        with ControllerClient(srv.address, TOKEN, timeout=5) as client, pytest.raises(IllegalTransitionError):
            client.job_finished("big")
    assert (code, details) == (grpc.StatusCode.INTERNAL, "internal error in the controller: RuntimeError: disk on fire")
    assert "Traceback" in caplog.text and "disk on fire" in caplog.text


# ----------------------------------------------------------------------------- bounds and deadlines


def test_a_request_over_the_size_bound_is_refused_unread(stub: pb_grpc.ControllerServiceStub) -> None:
    huge = pb.GetJobRequest(job_id="a" * (MAX_REQUEST_BYTES + 1))
    code, _ = code_of(lambda: stub.GetJob(huge, metadata=AUTH, timeout=5))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED


class Blocking(InMemoryController):
    """Every ``jobs()`` call waits until the test releases it; ``entered`` counts the calls inside."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)

    def jobs(self) -> list[JobRecord]:
        self.entered.release()
        assert self.release.wait(30)
        return super().jobs()


def test_calls_beyond_the_concurrency_bound_are_refused_not_queued() -> None:
    controller = Blocking()
    with ControllerServer(controller, token=TOKEN, max_concurrent_rpcs=2) as srv:
        with ControllerClient(srv.address, TOKEN, timeout=20) as client:
            held = [threading.Thread(target=client.statuses) for _ in range(2)]
            for t in held:
                t.start()
            for _ in held:
                assert controller.entered.acquire(timeout=10)
            with pytest.raises(Exception, match="RESOURCE_EXHAUSTED") as refused:
                client.statuses()
            controller.release.set()
            for t in held:
                t.join(10)
    assert type(refused.value).__name__ == "ControllerError"


def test_every_client_call_has_a_deadline() -> None:
    controller = Blocking()
    with ControllerServer(controller, token=TOKEN) as srv, ControllerClient(srv.address, TOKEN, timeout=0.3) as c:
        started = time.monotonic()
        with pytest.raises(ControllerUnavailableError, match="does not answer \\(DEADLINE_EXCEEDED"):
            c.statuses()
        took = time.monotonic() - started
        controller.release.set()
    assert took < 5


def test_a_controller_that_is_gone_is_unavailable_within_the_deadline() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with ControllerClient(f"127.0.0.1:{port}", TOKEN, timeout=2) as c:
        with pytest.raises(ControllerUnavailableError, match=f"the controller at 127.0.0.1:{port} does not answer"):
            c.jobs()
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"token": ""}, "bearer token must be non-empty"),
        ({"token": "has space"}, "bearer token must be non-empty"),
        ({"token": TOKEN, "port": 70000}, "port must be an integer in [0, 65535], got 70000"),
        ({"token": TOKEN, "max_concurrent_rpcs": 0}, "max_concurrent_rpcs must be an integer >= 1, got 0"),
    ],
)
def test_the_server_refuses_bad_settings_naming_them(kwargs: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError) as raised:
        ControllerServer(InMemoryController(), **kwargs)
    assert named in str(raised.value) and "has space" not in str(raised.value)


# ----------------------------------------------------------------------------- finding it


def publish(server: ControllerServer, where: Path, pid: int | None = None) -> ControllerInfo:
    """Write the state file and token a controller writes, as if this process were the controller."""
    where.mkdir(parents=True, exist_ok=True)
    (where / locate.API_TOKEN).write_text(TOKEN)
    (where / locate.METRICS_TOKEN).write_text("metrics-token")
    (where / locate.METRICS_KEY).write_text(METRICS_KEY)
    process = psutil.Process(pid or os.getpid())
    info = ControllerInfo(
        pid=process.pid,
        create_time=process.create_time(),
        address=server.address,
        metrics_endpoint="127.0.0.1:9",
        db=str(where / locate.DB),
        rm_url="http://rm.example:8088",
        policy="greedy",
        arbiter="fair-share",
    )
    locate.write_info(where, info)
    return info


def test_the_client_finds_the_controller_by_its_state_file(server: ControllerServer, tmp_path: Path) -> None:
    where = tmp_path / "ctl"
    assert ControllerClient.connect(where) is None
    info = publish(server, where)
    with ControllerClient.connect(where) as client:  # type: ignore[union-attr]
        assert client.address == info.address and client.jobs() == []
    # A state file that is not a controller's, or whose process has gone (or whose pid was recycled), is no
    # controller.
    (where / locate.STATE).write_text('{"pid": "1"}')
    assert locate.running(where) is None
    locate.write_info(where, dataclasses.replace(info, create_time=info.create_time - 60))
    assert locate.running(where) is None and ControllerClient.connect(where) is None
    publish(server, where)
    (where / locate.API_TOKEN).unlink()
    with pytest.raises(ControllerAuthError, match="cannot read the controller's token .*controller.token: No such"):
        ControllerClient.connect(where)


@pytest.fixture()
def live(
    server: ControllerServer, service: ControllerService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> ControllerService:
    """The controller, published in SUBMARINE_CONTROLLER_DIR as a running one."""
    monkeypatch.setenv("SUBMARINE_CONTROLLER_DIR", str(tmp_path / "controller"))
    publish(server, locate.directory())
    return service


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), terminal_width=200)
    return result.exit_code, result.output


def test_controller_status_and_history_ask_the_running_controller(live: ControllerService) -> None:
    live.job_submitted("big", 1, 4, 2, source=JobSource.BRIDGE)
    live.store.add_decision(DecisionRecord("big", 1010.0, 2, 4, "wants its maximum of 4"))
    code, out = run("controller", "status")
    assert code == 0, out
    assert f"controller running (pid {os.getpid()})" in out
    [row] = [line for line in out.splitlines() if "big" in line]
    assert [cell.strip() for cell in row.split("│")[1:7]] == ["big", "running", "-", "2", "1..4", "bridge"]
    assert "2->4 (pending):" in row and "wants its" in out
    code, out = run("controller", "history", "big")
    assert code == 0 and "job big run 1: running, limits 1..4" in out and "pending" in out
    code, out = run("controller", "history", "ghost")
    assert code == 1 and "the controller knows no job 'ghost'" in out


@responses.activate
def test_job_run_registers_the_job_through_the_api_before_yarn_hears_of_it(
    live: ControllerService, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rm = "http://rm.example:8088"
    monkeypatch.setenv("SUBMARINE_RM_URL", rm)
    responses.get(f"{rm}/app/v1/services/big", status=404, json={"diagnostics": "Service big not found"})
    posted = responses.post(f"{rm}/app/v1/services", status=202, json={"diagnostics": "Application ID: app_1_1"})
    args = ["job", "run", "--name", "big", "--elastic", "--num_workers", "2", "--max_workers", "3"]
    args += ["--worker_launch_cmd", "python train.py", "--workdir", str(tmp_path)]
    code, out = run(*args, "--policy", "no-such-policy")
    assert code == 1 and "job 'big': policy 'no-such-policy' cannot be used" in out
    assert posted.call_count == 0 and live.jobs() == []

    code, out = run(*args, "--policy", "greedy")
    assert code == 0, out
    assert "the controller manages it with policy greedy" in out
    job = live.store.job("big")
    assert (job.min_workers, job.max_workers, job.workers, job.policy, job.state) == (1, 3, 2, "greedy", "pending")
    # The job streams its metrics to the controller's service with a credential of its own, never the
    # operator's token; it travels as a file, not in the spec.
    sent = responses.calls[-1].request.body
    credential = job_credential(METRICS_KEY.encode(), "big")
    assert b'"SUBMARINE_METRICS_ENDPOINT": "127.0.0.1:9"' in sent and credential.encode() not in sent
    assert (job_dir("big") / SECRET_ENV["SUBMARINE_METRICS_TOKEN"]).read_text() == credential


@responses.activate
def test_job_run_refused_by_yarn_ends_the_job_in_the_controller(
    live: ControllerService, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rm = "http://rm.example:8088"
    monkeypatch.setenv("SUBMARINE_RM_URL", rm)
    responses.get(f"{rm}/app/v1/services/big", status=404, json={"diagnostics": "Service big not found"})
    responses.post(f"{rm}/app/v1/services", status=400, json={"diagnostics": "Queue default is full"})
    code, out = run("job", "run", "--name", "big", "--num_workers", "1", "--worker_launch_cmd", "python t.py")
    assert code == 1 and "Queue default is full" in out
    assert live.store.job("big").state is JobState.FINISHED


@responses.activate
def test_job_kill_tells_the_controller(live: ControllerService, monkeypatch: pytest.MonkeyPatch) -> None:
    rm = "http://rm.example:8088"
    monkeypatch.setenv("SUBMARINE_RM_URL", rm)
    responses.delete(f"{rm}/app/v1/services/big", status=200, json={"diagnostics": "Successfully destroyed"})
    responses.get(f"{rm}/app/v1/services/big", status=404, json={"diagnostics": "Service big not found"})
    responses.get(f"{rm}/ws/v1/cluster/apps", json={"apps": None})
    live.job_submitted("big", 1, 4, 2)
    code, out = run("job", "kill", "big")
    assert code == 0, out
    assert live.store.job("big").state is JobState.FINISHED
    code, out = run("job", "kill", "big")  # one the controller has finished already, or never knew
    assert code == 0, out


# ----------------------------------------------------------------------------- the bridge through the API


class Recording(JavaSide):
    def job(self, record: JobRecord) -> Any:
        return ("Job", record)

    def job_list(self, records: list[JobRecord]) -> Any:
        return ("List", tuple(records))

    def decision(self, record: DecisionRecord) -> Any:
        return ("Decision", record)

    def error(self, kind: str, message: str) -> BaseException:
        return LookupError(kind, message)


def test_the_bridge_fronts_the_running_controller_through_the_api(
    client: ControllerClient, service: ControllerService, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    bridge = ElasticSchedulerService(client, Recording())
    kind, job = bridge.jobSubmitted("jvm-job", 1, 4, 2, True)
    assert kind == "Job" and job.source is JobSource.BRIDGE and job.state is JobState.RUNNING
    assert service.store.job("jvm-job").source is JobSource.BRIDGE
    with pytest.raises(LookupError) as refused:
        bridge.jobSubmitted("jvm-job", 3, 2, 2, True)
    assert refused.value.args == ("InvalidJobException", "job 'jvm-job': workers 2 must lie within min 3 and max 2")
    with pytest.raises(LookupError) as unknown:
        bridge.currentDecision("nope")
    assert unknown.value.args == ("UnknownJobException", "no job named 'nope'")
    bridge.reportMetrics("jvm-job", 2, 5, 100.0, None)
    assert service.store.throughput("jvm-job") == {2: (100.0, 1)}
    assert TOKEN not in caplog.text


def test_bridge_serve_live_needs_a_running_controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUBMARINE_CONTROLLER_DIR", str(tmp_path / "controller"))
    token_file = tmp_path / "bridge.token"
    token_file.write_text("a-bridge-token-0123456789")
    token_file.chmod(0o600)
    code, out = run("bridge", "serve", "--controller", "live", "--token-file", str(token_file), "--port", "0")
    assert code == 1 and "no controller runs here" in out
