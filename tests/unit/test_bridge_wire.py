"""The bridge's side of py4j's wire protocol, without a JVM: what a call may reach (against a recording
Java side), the bounds on lines, arguments, connections and silence (plain sockets against a real
bridge on port 0), and the rate-limited refusal log. ``tests/integration/test_bridge.py`` runs the
attacks from a real JVM and at full size."""

from __future__ import annotations

import io
import logging
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from submarine_elastic.bridge.api import (
    IDLE_TIMEOUT_S,
    LOGIN_TIMEOUT_S,
    MAX_ARGUMENTS,
    MAX_CONNECTIONS,
    MAX_LINE_BYTES,
    MAX_PENDING_CONNECTIONS,
    REFUSAL_LOG_INTERVAL_S,
    BridgeConfigError,
    BridgeLimits,
    BridgeTls,
    JavaSide,
)
from submarine_elastic.bridge.server import BridgeServer, write_tls_files
from submarine_elastic.bridge.service import INTERFACE, ElasticSchedulerService
from submarine_elastic.bridge.wire import BoundedLines, ProtocolViolation, RefusalLog, answer_call
from submarine_elastic.controller.api import DecisionRecord, JobRecord
from submarine_elastic.controller.memory import InMemoryController
from submarine_elastic.tls import CertificateAuthority

TOKEN = "unit-test-token-0123456789abcdef"


class Handle:
    """Stands for a Java object the recording side built."""

    def __init__(self, object_id: str) -> None:
        self._target_id = object_id

    def _get_object_id(self) -> str:
        return self._target_id


class RecordingJavaSide(JavaSide):
    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []

    def job(self, record: JobRecord) -> Any:
        return Handle(f"job-{record.job_id}")

    def job_list(self, records: list[JobRecord]) -> Any:
        return Handle(f"list-{len(records)}")

    def decision(self, record: DecisionRecord) -> Any:
        return Handle("decision")

    def error(self, kind: str, message: str) -> BaseException:
        self.errors.append((kind, message))
        return Exception(f"{kind}: {message}")


@pytest.fixture()
def java() -> RecordingJavaSide:
    return RecordingJavaSide()


@pytest.fixture()
def service(java: RecordingJavaSide) -> ElasticSchedulerService:
    return ElasticSchedulerService(InMemoryController(), java)


# ----------------------------------------------------------------------------- what a call may reach


def test_interface_methods_are_answered(service: ElasticSchedulerService) -> None:
    assert answer_call(service, "t", "jobSubmitted", ["sjob-a", "i1", "i4", "i2", "btrue"]) == "!yrjob-job-a\n"
    assert answer_call(service, "t", "reportMetrics", ["sjob-a", "i2", "L3000000000", "d512.5"]) == "!yn\n"
    assert answer_call(service, "t", "reportMetrics", ["sjob-a", "i2", "L7", "d1.0", "d0.25"]) == "!yn\n"
    assert answer_call(service, "t", "listJobs", []) == "!yrlist-1\n"
    assert answer_call(service, "t", "currentDecision", ["sjob-a"]) == "!yn\n"
    assert [m.step for m in service.controller.metrics("job-a")] == [3_000_000_000, 7]


@pytest.mark.parametrize(
    ("method", "args"),
    [
        ("__setattr__", ["scontroller", "sbroken"]),
        ("__getattribute__", ["s__class__"]),
        ("__class__", []),
        ("__init__", ["scontroller", "sjava"]),
        ("__dict__", []),
        ("_call", ["slistJobs", "n", "n"]),
        ("controller", []),
        ("java", []),
        ("dispatch", ["slistJobs", "n"]),
        ("Java", []),
        ("", []),
    ],
)
def test_members_outside_the_interface_are_refused_by_name(
    service: ElasticSchedulerService, java: RecordingJavaSide, method: str, args: list[str]
) -> None:
    controller = service.controller
    reply = answer_call(service, "t", method, args)
    assert reply.startswith("!xs")  # the recording side's exception goes back as a plain message
    assert java.errors == [("ElasticSchedulerException", f"{method!r} is not a method of {INTERFACE_NAME}")]
    assert "Traceback" not in reply and ".py" not in reply
    assert service.controller is controller and answer_call(service, "t", "listJobs", []) == "!yrlist-0\n"


INTERFACE_NAME = "org.submarineelastic.bridge.ElasticScheduler"


@pytest.mark.parametrize(
    ("method", "args", "message"),
    [
        ("listJobs", ["sextra"], "listJobs takes no arguments (str) of these types"),
        ("jobFinished", [], "jobFinished takes no arguments () of these types"),
        (
            "jobSubmitted",
            ["sjob-a", "i1", "i1", "i1", "i1"],
            "jobSubmitted takes no arguments (str, int, int, int, int)",
        ),
        ("jobSubmitted", ["sjob-a", "btrue", "i1", "i1", "btrue"], "(str, bool, int, int, bool)"),
        ("reportMetrics", ["sjob-a", "i1", "i1", "i1"], "reportMetrics takes no arguments (str, int, int, int)"),
        ("reportMetrics", ["sjob-a", "i1", "i1", "d1.0", "n"], "(str, int, int, float, null)"),
        ("jobFinished", ["ro12"], "argument 1 of 'jobFinished' is of a type the interface does not take"),
        ("jobFinished", ["f1;org.Foo"], "argument 1 of 'jobFinished' is of a type"),
        ("listJobs", ["lo3"], "argument 1 of 'listJobs' is of a type"),
        ("jobFinished", ["jAAAA"], "argument 1 of 'jobFinished' is of a type"),
    ],
)
def test_arguments_no_overload_takes_are_refused(
    service: ElasticSchedulerService, java: RecordingJavaSide, method: str, args: list[str], message: str
) -> None:
    assert answer_call(service, "t", method, args).startswith("!xs")
    [(kind, said)] = java.errors
    assert kind == "ElasticSchedulerException" and message in said


def test_only_the_entry_point_is_served(service: ElasticSchedulerService, java: RecordingJavaSide) -> None:
    assert answer_call(service, "p0", "listJobs", []).startswith("!xs")
    assert java.errors == [
        ("ElasticSchedulerException", f"no object 'p0' here: the bridge serves only its {INTERFACE_NAME}")
    ]


def test_a_long_member_name_is_cut_in_the_message(service: ElasticSchedulerService, java: RecordingJavaSide) -> None:
    answer_call(service, "t", "x" * 10_000, [])
    [(_, message)] = java.errors
    assert len(message) < 200 and "xxx..." in message


def test_a_malformed_number_is_an_internal_error_without_a_traceback(service: ElasticSchedulerService) -> None:
    reply = answer_call(service, "t", "reportMetrics", ["sjob-a", "inope", "i1", "d1.0"])
    assert reply == "!xsinternal error in the bridge; its log has the details\n"


def test_a_typed_java_exception_goes_back_as_a_reference() -> None:
    from py4j.protocol import Py4JJavaError

    from submarine_elastic.bridge.wire import encode_error

    assert encode_error(Py4JJavaError("x", Handle("o42"))) == "!xro42\n"
    assert encode_error(ValueError("two\nlines")) == "!xstwo\\nlines\n"


def test_the_interface_table_is_the_java_interface() -> None:
    assert {name: sorted(len(types) for types in overloads) for name, overloads in INTERFACE.items()} == {
        "jobSubmitted": [5, 6],
        "jobFinished": [1],
        "reportMetrics": [4, 5],
        "currentDecision": [1],
        "listJobs": [0],
    }


# ----------------------------------------------------------------------------- bounds and the refusal log


def test_the_stated_bounds() -> None:
    assert (MAX_CONNECTIONS, MAX_PENDING_CONNECTIONS, LOGIN_TIMEOUT_S, IDLE_TIMEOUT_S) == (64, 16, 5.0, 300.0)
    assert (MAX_LINE_BYTES, MAX_ARGUMENTS, REFUSAL_LOG_INTERVAL_S) == (65536, 8, 60.0)
    assert BridgeLimits() == BridgeLimits(64, 16, 5.0, 300.0, 60.0)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"max_connections": 0}, "max_connections must be an integer of at least 1, got 0"),
        ({"max_pending": True}, "max_pending must be an integer of at least 1, got True"),
        ({"login_timeout_s": 0}, "login_timeout_s must be a number of seconds above 0, got 0"),
        ({"idle_timeout_s": float("inf")}, "idle_timeout_s must be a number of seconds above 0, got inf"),
        ({"refusal_log_interval_s": "60"}, "refusal_log_interval_s must be a number of seconds above 0, got '60'"),
    ],
)
def test_bad_limits_are_named(kwargs: dict[str, Any], named: str) -> None:
    with pytest.raises(BridgeConfigError) as raised:
        BridgeLimits(**kwargs)
    assert str(raised.value) == named


def test_lines_are_bounded() -> None:
    lines = BoundedLines(
        io.BufferedReader(io.BytesIO(b"c\n" + b"x" * (MAX_LINE_BYTES - 1) + b"\n" + b"y" * MAX_LINE_BYTES))
    )
    assert lines.readline() == b"c\n"
    assert len(lines.readline()) == MAX_LINE_BYTES
    with pytest.raises(ProtocolViolation, match=f"longer than {MAX_LINE_BYTES} bytes"):
        lines.readline()


def test_the_refusal_log_writes_one_line_per_interval_with_the_count(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    log = RefusalLog("logins with a wrong or no token", 60.0, clock=lambda: now[0])
    caplog.set_level(logging.INFO)
    for _ in range(1500):
        log.refused()
        now[0] += 0.01  # 15 s in all
    now[0] += 50.0
    log.refused("the last")
    log.flush()
    log.flush()
    assert [r.getMessage() for r in caplog.records] == [
        "py4j bridge refused 1 logins with a wrong or no token; at most one such line every 60 s",
        "py4j bridge refused 1500 logins with a wrong or no token in the last 65 s (last: the last); "
        "at most one such line every 60 s",
    ]


# ----------------------------------------------------------------------------- a bridge on port 0, plain sockets


@pytest.fixture()
def fake_jvm() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield int(sock.getsockname()[1])


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


def _login(port: int, token: str = TOKEN) -> tuple[socket.socket, bytes]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(f"A\n{token}\ne\n".encode())
    return sock, sock.recv(64)


def _wait(condition: Any, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_logged_in_connections_are_bounded(fake_jvm: int) -> None:
    # Idle connections are kept far longer than the test runs, so both slots are surely held at the third login.
    limits = BridgeLimits(max_connections=2, max_pending=2, login_timeout_s=60.0, idle_timeout_s=60.0)
    with BridgeServer(InMemoryController(), token=TOKEN, python_port=0, java_port=fake_jvm, limits=limits) as bridge:
        first, second = _login(bridge.port), _login(bridge.port)
        assert first[1] == second[1] == b"!yv\n"
        third, answer = _login(bridge.port)
        assert answer == b"!yv\n"  # the token was right, but no logged-in slot is free
        assert _closed_within(third, 3.0)
        assert bridge.guard.logged_in == 2
        for sock in (first[0], second[0], third):
            sock.close()
        assert _wait(lambda: bridge.guard.logged_in == 0 and bridge.guard.pending == 0)


def test_a_logged_in_connection_is_closed_when_idle_and_not_before(fake_jvm: int) -> None:
    idle = 1.0
    limits = BridgeLimits(max_connections=2, max_pending=2, login_timeout_s=idle, idle_timeout_s=idle)
    with BridgeServer(InMemoryController(), token=TOKEN, python_port=0, java_port=fake_jvm, limits=limits) as bridge:
        started = time.monotonic()  # before the login: its idle time starts after this
        sock, answer = _login(bridge.port)
        assert answer == b"!yv\n"
        assert _closed_within(sock, idle + 6.0)
        assert time.monotonic() - started >= idle  # closed for idleness, not before
        assert _wait(lambda: bridge.guard.logged_in == 0 and bridge.guard.pending == 0)
        sock.close()


def test_a_wrong_token_is_refused_in_constant_time_and_the_connection_closed(fake_jvm: int) -> None:
    with BridgeServer(InMemoryController(), token=TOKEN, python_port=0, java_port=fake_jvm) as bridge:
        for wrong in ("x", TOKEN[:-1], TOKEN + "x", ""):
            sock, answer = _login(bridge.port, wrong)
            assert answer == b"!xn\n" and _closed_within(sock, 3.0)
            sock.close()
        sock = socket.create_connection(("127.0.0.1", bridge.port), timeout=5)
        sock.sendall(b"c\nt\nlistJobs\ne\n")  # a call before the login
        assert _closed_within(sock, 3.0)
        sock.close()


@pytest.mark.parametrize(
    "sent",
    [
        b"z\n127.0.0.1\n1\n2\n",  # a command the bridge does not serve (py4j's Java side knows it)
        b"c\nt\nlistJobs\n" + b"i1\n" * (MAX_ARGUMENTS + 1) + b"e\n",
        b"c\nt\n" + b"x" * (MAX_LINE_BYTES + 10) + b"\n",
        b"g\nt\nnot-the-end\n",
        b"c\nt\n\xff\xfe\n",
    ],
    ids=["unknown-command", "too-many-arguments", "long-line", "gc-without-end", "not-utf8"],
)
def test_a_protocol_violation_closes_the_connection(fake_jvm: int, sent: bytes) -> None:
    with BridgeServer(InMemoryController(), token=TOKEN, python_port=0, java_port=fake_jvm) as bridge:
        sock, answer = _login(bridge.port)
        assert answer == b"!yv\n"
        try:
            sock.sendall(sent)
        except ConnectionError:
            pass
        assert _closed_within(sock, 3.0)
        sock.close()
        assert _wait(lambda: bridge.guard.logged_in == 0)


def test_releasing_a_proxy_is_answered_and_releases_nothing(fake_jvm: int) -> None:
    with BridgeServer(InMemoryController(), token=TOKEN, python_port=0, java_port=fake_jvm) as bridge:
        sock, _ = _login(bridge.port)
        sock.sendall(b"g\nt\ne\n")
        assert sock.recv(64) == b"!y\n"
        sock.close()


def test_pending_connections_are_bounded(fake_jvm: int) -> None:
    limits = BridgeLimits(max_pending=3, login_timeout_s=1.0)
    with BridgeServer(InMemoryController(), token=TOKEN, python_port=0, java_port=fake_jvm, limits=limits) as bridge:
        before = threading.active_count()
        held = [socket.create_connection(("127.0.0.1", bridge.port), timeout=5) for _ in range(3)]
        assert _wait(lambda: bridge.guard.pending == 3)
        try:
            extra = socket.create_connection(("127.0.0.1", bridge.port), timeout=5)
        except ConnectionResetError:
            pass  # reset before connect() returned
        else:
            assert _closed_within(extra, 0.9)  # well before the login timeout
            extra.close()
        assert threading.active_count() - before <= 3
        assert all(_closed_within(sock, 4.0) for sock in held)
        for sock in held:
            sock.close()


# ----------------------------------------------------------------------------- TLS


def _tls_login(port: int, ca: Path, cert: tuple[Path, Path] | None) -> bytes:
    """Log in over TLS, checking the bridge against ``ca`` and presenting ``cert``; what came back
    (``b""`` when the bridge refused the connection)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(ca)
    if cert is not None:
        context.load_cert_chain(*cert)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
                sock.sendall(f"A\n{TOKEN}\ne\n".encode())
                return sock.recv(64)
    except (ssl.SSLError, ConnectionError):
        return b""


def test_tls_requires_a_client_certificate_of_the_ca(tmp_path: Path, fake_jvm: int) -> None:
    tls = write_tls_files(tmp_path / "tls", CertificateAuthority.create("unit test CA"), "127.0.0.1")
    other = CertificateAuthority.create("another CA").issue_client("intruder")
    other.write(tmp_path, "intruder")
    ca, jvm = tmp_path / "tls" / "ca.crt", (tmp_path / "tls" / "jvm.crt", tmp_path / "tls" / "jvm.key")
    with BridgeServer(InMemoryController(), token=TOKEN, python_port=0, java_port=fake_jvm, tls=tls) as bridge:
        assert _tls_login(bridge.port, ca, jvm) == b"!yv\n"
        assert _tls_login(bridge.port, ca, None) == b""
        assert _tls_login(bridge.port, ca, (tmp_path / "intruder.crt", tmp_path / "intruder.key")) == b""
        with socket.create_connection(("127.0.0.1", bridge.port), timeout=5) as plain:
            plain.sendall(f"A\n{TOKEN}\ne\n".encode())
            assert _closed_within(plain, 3.0)
        assert _wait(lambda: bridge.guard.pending == 0 and bridge.guard.logged_in == 0)


def test_bridge_tls_takes_a_server_context_only(tmp_path: Path) -> None:
    with pytest.raises(BridgeConfigError, match="PROTOCOL_TLS_SERVER"):
        BridgeTls(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
    with pytest.raises(BridgeConfigError, match="cannot load the bridge's TLS files"):
        BridgeTls.from_files(tmp_path / "no.crt", tmp_path / "no.key", tmp_path / "ca.crt")


def test_while_the_bridge_waits_for_the_jvm_only_calls_and_releases_are_served(fake_jvm: int) -> None:
    """The bridge builds a returned value with commands of its own on the caller's connection; what the
    JVM sends before answering them is held to the same rules."""
    with BridgeServer(InMemoryController(), token=TOKEN, python_port=0, java_port=fake_jvm) as bridge:
        sock, _ = _login(bridge.port)
        lines = sock.makefile("rb")
        sock.sendall(b"c\nt\nlistJobs\ne\n")
        assert lines.readline() == b"a\n"  # the bridge asks the JVM for an array to build the list with
        while lines.readline() != b"e\n":
            pass
        sock.sendall(b"g\nt\ne\n")  # a release meanwhile: answered
        assert lines.readline() == b"!y\n"
        sock.sendall(b"c\nt\n__setattr__\nscontroller\nsx\ne\n")  # a call meanwhile: refused, which
        assert lines.readline() in (b"i\n", b"r\n")  # starts by building the exception in the JVM
        while lines.readline() != b"e\n":
            pass
        sock.sendall(b"z\n")  # anything else closes the connection
        assert _closed_within(sock, 3.0)
        lines.close()
        sock.close()
        assert _wait(lambda: bridge.guard.logged_in == 0)


#: Starts a bridge, runs its process out of file descriptors with connections, gives them back, and
#: prints whether a login then still works.
FD_EXHAUSTION = """
import os, resource, socket, sys, time
from submarine_elastic.bridge.server import BridgeServer
from submarine_elastic.controller.memory import InMemoryController
token = sys.argv[1]
bridge = BridgeServer(InMemoryController(), token=token, python_port=0, java_port=1).start()
used = len(os.listdir("/proc/self/fd"))
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (used + 8, hard))
held = []
try:
    for _ in range(16):
        held.append(socket.create_connection(("127.0.0.1", bridge.port), timeout=2))
except OSError:
    pass
time.sleep(0.5)
for sock in held:
    sock.close()
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
time.sleep(0.5)
with socket.create_connection(("127.0.0.1", bridge.port), timeout=5) as sock:
    sock.sendall(("A\\n" + token + "\\ne\\n").encode())
    print("answer", sock.recv(64))
bridge.stop()
"""


def test_running_out_of_file_descriptors_does_not_stop_the_bridge() -> None:
    result = subprocess.run([sys.executable, "-c", FD_EXHAUSTION, TOKEN], capture_output=True, text=True, timeout=60)
    assert "answer b'!yv\\n'" in result.stdout, result.stdout + result.stderr
    assert "accepting failed: OSError" in result.stderr


def test_a_login_sent_a_byte_at_a_time_gets_the_login_timeout_in_all(fake_jvm: int) -> None:
    limits = BridgeLimits(login_timeout_s=1.5)
    with BridgeServer(InMemoryController(), token=TOKEN, python_port=0, java_port=fake_jvm, limits=limits) as bridge:
        sock = socket.create_connection(("127.0.0.1", bridge.port), timeout=5)
        started = time.monotonic()
        sock.sendall(b"A\n")
        closed = False
        for byte in TOKEN.encode():  # well within the timeout each, 16 s in all
            time.sleep(0.5)
            try:
                sock.sendall(bytes([byte]))
            except ConnectionError:
                closed = True
            if closed or _closed_within(sock, 0.01):
                break
        took = time.monotonic() - started
        sock.close()
        assert took < 1.5 + 1.5, f"still open after {took:.1f} s"
        assert _wait(lambda: bridge.guard.pending == 0)
