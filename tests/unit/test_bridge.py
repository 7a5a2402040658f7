"""The Python side of the py4j bridge, without a JVM: the interface's implementation against a recording
Java side, the server's lifecycle and configuration, its log filter, and ``submarine bridge serve``'s
token handling. ``tests/integration/test_bridge.py`` drives the same code from a real JVM."""

from __future__ import annotations

import logging
import math
import re
import socket
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import py4j
import pytest
from click.testing import CliRunner

from submarine_elastic.bridge.api import (
    JAVA_INTERFACE,
    JAVA_PACKAGE,
    BridgeConfigError,
    BridgeError,
    BridgeStartError,
    JavaSide,
    check_token,
    java_sources,
    py4j_jar,
)
from submarine_elastic.bridge.server import _PY4J_LOGGERS, TLS_FILES, BridgeServer, _Py4JLogFilter
from submarine_elastic.bridge.service import ElasticSchedulerService, JavaExceptionRaised, Py4JJavaSide
from submarine_elastic.cli.bridge import bridge
from submarine_elastic.controller.api import ControllerError, DecisionRecord, JobRecord
from submarine_elastic.controller.memory import InMemoryController
from submarine_elastic.netif import is_loopback

TOKEN = "unit-test-token-0123456789abcdef"
CLOCK = 1_700_000_000.0


@dataclass(frozen=True)
class FakeJavaError(Exception):
    kind: str
    message: str


class RecordingJavaSide(JavaSide):
    """Returns tagged tuples instead of Java objects."""

    def job(self, record: JobRecord) -> Any:
        return ("Job", record)

    def job_list(self, records: list[JobRecord]) -> Any:
        return ("List", tuple(records))

    def decision(self, record: DecisionRecord) -> Any:
        return ("Decision", record)

    def error(self, kind: str, message: str) -> BaseException:
        return FakeJavaError(kind, message)


@pytest.fixture()
def controller() -> InMemoryController:
    return InMemoryController(clock=lambda: CLOCK)


@pytest.fixture()
def service(controller: InMemoryController) -> ElasticSchedulerService:
    return ElasticSchedulerService(controller, RecordingJavaSide())


# ----------------------------------------------------------------------------- the interface


def _java_methods() -> dict[str, list[int]]:
    """Method name -> parameter counts, read from ElasticScheduler.java."""
    source = (java_sources() / "org" / "submarineelastic" / "bridge" / "ElasticScheduler.java").read_text()
    methods: dict[str, list[int]] = {}
    for name, params in re.findall(r"^    [\w<>]+ (\w+)\(([^)]*)\);", source, re.M):
        methods.setdefault(name, []).append(len([p for p in params.split(",") if p.strip()]))
    return methods


def test_the_service_implements_every_method_of_the_java_interface(service: ElasticSchedulerService) -> None:
    methods = _java_methods()
    assert methods == {
        "jobSubmitted": [5, 6],
        "jobFinished": [1],
        "reportMetrics": [4, 5],
        "currentDecision": [1],
        "listJobs": [0],
    }
    assert service.Java.implements == [JAVA_INTERFACE] == ["org.submarineelastic.bridge.ElasticScheduler"]
    for name in methods:
        assert callable(getattr(service, name))


def test_java_sources_and_the_py4j_jar_are_found() -> None:
    names = sorted(p.name for p in (java_sources() / Path(*JAVA_PACKAGE.split("."))).glob("*.java"))
    assert names == [
        "Decision.java",
        "ElasticScheduler.java",
        "ElasticSchedulerException.java",
        "InvalidJobException.java",
        "Job.java",
        "UnknownJobException.java",
    ]
    jar = py4j_jar()
    assert jar.is_file()
    assert jar.name == f"py4j{py4j.__version__}.jar"


# ----------------------------------------------------------------------------- calls and results


def test_job_submitted_records_a_bridge_job_and_returns_it(
    service: ElasticSchedulerService, controller: InMemoryController
) -> None:
    kind, record = service.jobSubmitted("job-a", 1, 4, 3, True)
    assert kind == "Job"
    assert record == JobRecord("job-a", 1, 4, 3, 3, True, "running", CLOCK, "bridge", requested=3)
    assert controller.jobs() == [record]


def test_a_bridge_job_in_a_queue_is_recorded_in_it_and_a_bad_queue_is_named(
    service: ElasticSchedulerService, controller: InMemoryController
) -> None:
    service.jobSubmitted("job-a", 1, 4, 3, True, "research")
    assert controller.job("job-a").queue == "research"
    with pytest.raises(Exception, match="queue 'no queue' is not a YARN queue name"):
        service.jobSubmitted("job-b", 1, 4, 3, True, "no queue")


def test_report_metrics_with_and_without_loss(service: ElasticSchedulerService, controller: InMemoryController) -> None:
    service.jobSubmitted("job-a", 1, 4, 2, True)
    assert service.reportMetrics("job-a", 2, 10, 250.5, 1.25) is None
    assert service.reportMetrics("job-a", 2, 3_000_000_000, 260.0) is None
    assert [(m.world_size, m.step, m.samples_per_second, m.loss) for m in controller.metrics("job-a")] == [
        (2, 10, 250.5, 1.25),
        (2, 3_000_000_000, 260.0, None),
    ]


def test_current_decision_is_none_until_one_is_made(
    service: ElasticSchedulerService, controller: InMemoryController
) -> None:
    service.jobSubmitted("job-a", 1, 4, 4, True)
    assert service.currentDecision("job-a") is None
    controller.decide("job-a", 2, "job-b arrived")
    assert service.currentDecision("job-a") == ("Decision", DecisionRecord("job-a", CLOCK, 4, 2, "job-b arrived"))


def test_list_jobs_in_submission_order(service: ElasticSchedulerService) -> None:
    assert service.listJobs() == ("List", ())
    service.jobSubmitted("job-b", 1, 1, 1, False)
    service.jobSubmitted("job-a", 1, 2, 2, True)
    service.jobFinished("job-b")
    kind, jobs = service.listJobs()
    assert kind == "List"
    assert [(j.job_id, j.state) for j in jobs] == [("job-b", "finished"), ("job-a", "running")]


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("method", "args"),
    [
        ("jobFinished", ("ghost",)),
        ("reportMetrics", ("ghost", 1, 1, 1.0)),
        ("currentDecision", ("ghost",)),
    ],
)
def test_an_unknown_job_becomes_an_unknown_job_exception(
    service: ElasticSchedulerService, method: str, args: tuple[Any, ...]
) -> None:
    with pytest.raises(FakeJavaError) as raised:
        getattr(service, method)(*args)
    assert raised.value == FakeJavaError("UnknownJobException", "no job named 'ghost'")


@pytest.mark.parametrize(
    ("method", "args", "named"),
    [
        ("jobSubmitted", ("job-c", 3, 2, 2, True), "min 3 and max 2"),
        ("jobSubmitted", ("Job_C", 1, 1, 1, True), "'Job_C'"),
        ("jobSubmitted", ("job-c", 1, 3, 2, False), "fixed-size job needs min == max"),
        ("jobSubmitted", ("job-c", 0, 3, 2, True), "min_workers must be an integer in [1, 100000], got 0"),
        ("reportMetrics", ("job-a", 2, 5, math.nan), "samples_per_second must be finite"),
        ("reportMetrics", ("job-a", 2, -1, 1.0), "step must be an integer in [0, 9223372036854775807], got -1"),
        ("reportMetrics", ("job-a", 0, 1, 1.0), "world_size must be an integer in [1, 100000], got 0"),
        ("reportMetrics", ("job-a", 2, 1, 1.0, math.inf), "loss must be finite and in [-1e+15, 1e+15], got inf"),
    ],
)
def test_bad_values_become_an_invalid_job_exception_naming_them(
    service: ElasticSchedulerService, method: str, args: tuple[Any, ...], named: str
) -> None:
    service.jobSubmitted("job-a", 1, 4, 2, True)
    with pytest.raises(FakeJavaError) as raised:
        getattr(service, method)(*args)
    assert raised.value.kind == "InvalidJobException"
    assert named in raised.value.message


@pytest.mark.parametrize("method", ["jobSubmitted", "jobFinished", "reportMetrics", "currentDecision"])
def test_a_null_job_id_is_refused_before_the_controller_sees_it(
    service: ElasticSchedulerService, controller: InMemoryController, method: str
) -> None:
    args = {"jobSubmitted": (None, 1, 1, 1, True), "reportMetrics": (None, 1, 1, 1.0)}.get(method, (None,))
    with pytest.raises(FakeJavaError) as raised:
        getattr(service, method)(*args)
    assert raised.value == FakeJavaError("InvalidJobException", f"{method}: the job id is null")
    assert controller.jobs() == []


class StoreDownError(ControllerError):
    pass


class FailingController(InMemoryController):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def jobs(self) -> list[JobRecord]:
        raise self.error


def test_other_controller_errors_keep_their_name_and_message() -> None:
    service = ElasticSchedulerService(FailingController(StoreDownError("database is locked")), RecordingJavaSide())
    with pytest.raises(FakeJavaError) as raised:
        service.listJobs()
    assert raised.value == FakeJavaError("ElasticSchedulerException", "StoreDownError: database is locked")


def test_a_bug_reaches_java_as_an_internal_error_and_is_logged_here(caplog: pytest.LogCaptureFixture) -> None:
    service = ElasticSchedulerService(FailingController(KeyError("oops")), RecordingJavaSide())
    with pytest.raises(FakeJavaError) as raised:
        service.listJobs()
    # The kind of failure only: its message could hold paths, and stays in this process's log.
    assert raised.value == FakeJavaError(
        "ElasticSchedulerException", "internal error in the scheduler (KeyError); the bridge's log has the details"
    )
    [record] = [r for r in caplog.records if r.name == "submarine_elastic.bridge.service"]
    assert record.levelno == logging.ERROR and record.exc_info is not None


def test_the_service_needs_a_controller_and_a_java_side() -> None:
    with pytest.raises(TypeError, match="Controller"):
        ElasticSchedulerService(object(), RecordingJavaSide())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="JavaSide"):
        ElasticSchedulerService(InMemoryController(), object())  # type: ignore[arg-type]


def test_the_py4j_java_side_refuses_to_work_unattached() -> None:
    with pytest.raises(BridgeError, match="not attached"):
        Py4JJavaSide().job(JobRecord("job-a", 1, 1, 1, 1, False, "running", CLOCK, "bridge"))


def test_java_exception_raised_formats_without_a_jvm() -> None:
    class Handle:
        _target_id = "o7"

    error = JavaExceptionRaised("no job named 'x'", Handle())
    assert str(error) == "no job named 'x'"
    assert error.java_exception._target_id == "o7"


# ----------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    "token",
    [
        "s3cret",
        "x" * 15,
        "has spaces but is long enough",
        "line\nbreak-0123456789",
        "back\\slash-0123456789",
        None,
        1234,
    ],
)
def test_bad_tokens_are_refused_without_showing_them(token: Any) -> None:
    with pytest.raises(BridgeConfigError) as raised:
        check_token(token)
    message = str(raised.value)
    assert "16 to 512 characters" in message
    if isinstance(token, str):
        assert token not in message
        assert f"got {len(token)} characters" in message


@pytest.mark.parametrize("token", [TOKEN, "A" * 16, "abc+/=._~-0123456789", "x" * 512])
def test_good_tokens_pass(token: str) -> None:
    assert check_token(token) == token


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"python_port": -1}, "python_port"),
        ({"python_port": 70000}, "python_port"),
        ({"python_port": True}, "python_port"),
        ({"java_port": 0}, "java_port"),
        ({"java_port": "25333"}, "java_port"),
        ({"host": ""}, "host"),
        ({"java_host": None}, "java_host"),
        ({"token": "short"}, "token"),
    ],
)
def test_bad_server_arguments_are_named(kwargs: dict[str, Any], named: str) -> None:
    arguments: dict[str, Any] = {"token": TOKEN, **kwargs}
    with pytest.raises(BridgeConfigError, match=named):
        BridgeServer(InMemoryController(), **arguments)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("localhost", True), ("::1", True), ("[::1]", True), ("0.0.0.0", False), ("10.1.2.3", False)],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


# ----------------------------------------------------------------------------- lifecycle


def _connects(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return True
    except ConnectionRefusedError:
        return False


@pytest.fixture()
def fake_jvm() -> Iterator[socket.socket]:
    """A listening socket where the JVM's ClientServer would be; nothing should ever connect to it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        sock.setblocking(False)
        yield sock


def _nothing_connected(sock: socket.socket) -> bool:
    try:
        conn, _ = sock.accept()
    except BlockingIOError:
        return True
    conn.close()
    return False


def test_start_listens_on_a_picked_port_and_stop_closes_it(fake_jvm: socket.socket) -> None:
    server = BridgeServer(InMemoryController(), token=TOKEN, python_port=0, java_port=fake_jvm.getsockname()[1])
    with pytest.raises(BridgeError, match="not started"):
        _ = server.port
    assert not server.running
    with server.start():
        assert server.running
        port = server.port
        assert port > 0
        assert _connects(port)
        with pytest.raises(BridgeError, match="already started"):
            server.start()
    assert not server.running
    assert not _connects(port)
    server.stop()  # a no-op
    # Stopping never tells the JVM to shut down.
    assert _nothing_connected(fake_jvm)


def test_a_taken_port_fails_to_start_and_leaves_the_jvm_alone(fake_jvm: socket.socket) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        server = BridgeServer(InMemoryController(), token=TOKEN, python_port=port, java_port=fake_jvm.getsockname()[1])
        with pytest.raises(BridgeStartError, match=f"cannot listen on 127.0.0.1:{port}"):
            server.start()
    assert not server.running
    # py4j's own ClientServer would have connected to the JVM here to send it a shutdown command.
    assert _nothing_connected(fake_jvm)
    for name in _PY4J_LOGGERS:
        assert not logging.getLogger(name).filters


def test_the_log_filter_is_installed_while_serving_only() -> None:
    with BridgeServer(InMemoryController(), token=TOKEN, python_port=0, java_port=1):
        for name in _PY4J_LOGGERS:
            assert any(isinstance(f, _Py4JLogFilter) for f in logging.getLogger(name).filters)
    for name in _PY4J_LOGGERS:
        assert not any(isinstance(f, _Py4JLogFilter) for f in logging.getLogger(name).filters)


def _record(msg: str, args: tuple[Any, ...] = (), exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, None) if exc is not None else None
    return logging.LogRecord("py4j.clientserver", logging.DEBUG, __file__, 1, msg, args, exc_info)


def test_the_log_filter_redacts_the_token_and_drops_deliberate_java_exceptions() -> None:
    log_filter = _Py4JLogFilter(TOKEN)
    record = _record(f"Command to send: A\n{TOKEN}\n")
    assert log_filter.filter(record)
    assert record.getMessage() == "Command to send: A\n***\n"

    formatted = _record("Answer received: %s", (f"x{TOKEN}y",))
    assert log_filter.filter(formatted)
    assert formatted.getMessage() == "Answer received: x***y"

    class Handle:
        _target_id = "o1"

    assert not log_filter.filter(_record("There was an exception", exc=JavaExceptionRaised("no job", Handle())))
    assert log_filter.filter(_record("There was an exception", exc=RuntimeError("a real bug")))


# ----------------------------------------------------------------------------- the CLI


@pytest.fixture(autouse=True)
def _cluster_ca_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``bridge serve`` issues its certificates from the cluster's CA: a CA of this test's own."""
    monkeypatch.setenv("SUBMARINE_CA_DIR", str(tmp_path / "ca"))
    monkeypatch.delenv("SUBMARINE_INSECURE", raising=False)


def test_bridge_is_a_command_of_submarine() -> None:
    from submarine_elastic.cli.main import cli

    assert cli.get_command(click.Context(cli), "bridge") is bridge
    assert "serve" in bridge.commands


def test_serve_needs_a_readable_token_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(bridge, ["serve", "--token-file", str(tmp_path / "missing")])
    assert result.exit_code == 1
    assert "cannot read the token file" in result.output and "--create-token" in result.output


def test_serve_refuses_a_bad_token_without_printing_it(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("my secret\n")
    token_file.chmod(0o600)
    result = CliRunner().invoke(bridge, ["serve", "--token-file", str(token_file)])
    assert result.exit_code == 1
    assert "16 to 512 characters" in result.output
    assert "my secret" not in result.output


def test_serve_creates_a_private_token_and_reports_a_taken_port(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            bridge, ["serve", "--token-file", str(token_file), "--create-token", "--port", str(port)]
        )
    assert result.exit_code == 1, result.output
    assert f"cannot listen on 127.0.0.1:{port}" in result.output
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = token_file.read_text().strip()
    assert check_token(token) == token
    assert token not in result.output


def test_serve_warns_about_a_token_file_others_can_read(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o644)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        result = CliRunner().invoke(
            bridge, ["serve", "--token-file", str(token_file), "--port", str(taken.getsockname()[1])]
        )
    assert "readable by others (mode 644)" in result.output
    assert TOKEN not in result.output


def test_serve_issues_tls_files_by_default_and_plaintext_only_when_told(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = str(taken.getsockname()[1])
        result = CliRunner().invoke(bridge, ["serve", "--token-file", str(token_file), "--port", port])
        assert f"cannot listen on 127.0.0.1:{port}" in result.output
        tls = tmp_path / "bridge-tls"
        assert sorted(p.name for p in tls.iterdir()) == sorted(TLS_FILES)
        assert stat.S_IMODE(tls.stat().st_mode) == 0o700
        assert {stat.S_IMODE((tls / k).stat().st_mode) for k in ("bridge.key", "jvm.key")} == {0o600}
        assert (tls / "ca.crt").read_bytes() == (tmp_path / "ca" / "ca.crt").read_bytes()

        plain = tmp_path / "plain"
        plain.mkdir()
        (plain / "token").write_text(TOKEN)
        (plain / "token").chmod(0o600)
        result = CliRunner().invoke(
            bridge, ["serve", "--token-file", str(plain / "token"), "--port", port, "--insecure"]
        )
        assert f"cannot listen on 127.0.0.1:{port}" in result.output
        assert not (plain / "bridge-tls").exists()


def test_a_bridge_beyond_loopback_needs_tls_or_insecure(fake_jvm: socket.socket) -> None:
    java_port = fake_jvm.getsockname()[1]
    for host in ("0.0.0.0", "192.0.2.1", "example.com"):
        with pytest.raises(BridgeConfigError) as raised:
            BridgeServer(InMemoryController(), token=TOKEN, host=host, java_port=java_port)
        assert f"host {host!r} is not loopback" in str(raised.value) and "--insecure" in str(raised.value)
        BridgeServer(InMemoryController(), token=TOKEN, host=host, java_port=java_port, insecure=True)
    BridgeServer(InMemoryController(), token=TOKEN, host="::1", java_port=java_port)


def test_the_bridge_serves_plaintext_where_the_projects_loopback_rule_says(fake_jvm: socket.socket) -> None:
    java_port = fake_jvm.getsockname()[1]
    for host in ("127.0.0.2", "LOCALHOST"):  # 127.0.0.0/8; a host name's case does not matter
        BridgeServer(InMemoryController(), token=TOKEN, host=host, java_port=java_port)
    with pytest.raises(BridgeConfigError, match="'localhost.example.com' is not loopback"):
        BridgeServer(InMemoryController(), token=TOKEN, host="localhost.example.com", java_port=java_port)
