"""The py4j bridge driven from a real JVM.

A small Java client (``java/BridgeCheck.java``) is compiled with ``javac`` against the bridge's Java
sources and the py4j jar the py4j wheel ships, then run once per scenario against a bridge in this
process. It checks what it receives and prints ``PASS <checks>``; the tests here check what the
controller recorded. No cluster needed: the controller is the in-memory one.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from submarine_elastic.bridge.api import (
    LOGIN_TIMEOUT_S,
    MAX_PENDING_CONNECTIONS,
    REFUSAL_LOG_INTERVAL_S,
    BridgeLimits,
    java_sources,
    py4j_jar,
)
from submarine_elastic.bridge.server import BridgeServer, write_tls_files
from submarine_elastic.controller import locate
from submarine_elastic.controller.api import Controller, DecisionRecord, JobRecord, JobSource, JobState
from submarine_elastic.controller.client import ControllerClient
from submarine_elastic.controller.memory import InMemoryController
from submarine_elastic.daemon import process
from submarine_elastic.tls import CertificateAuthority

pytestmark = pytest.mark.integration

CLOCK = 1_700_000_000.25
#: Ports other tools on this machine use; the tests must stay out of them.
RESERVED = (range(18000, 20000), range(20000, 21001))
JAVA_TIMEOUT = 60


def free_port() -> int:
    """A loopback port that was free a moment ago, outside the reserved ranges. py4j's Java
    ClientServer cannot report a port it picked before the bridge needs it, so the test picks one."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if not any(port in r for r in RESERVED):
            return port


@pytest.fixture(scope="session")
def java_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    javac = shutil.which("javac")
    if javac is None or shutil.which("java") is None:
        pytest.skip("needs a JDK (javac and java on PATH)")
    out = tmp_path_factory.mktemp("bridge-classes")
    sources = sorted(str(p) for p in java_sources().rglob("*.java"))
    sources.append(str(Path(__file__).parent / "java" / "BridgeCheck.java"))
    jar = str(py4j_jar())
    result = subprocess.run(
        # C1 only and the serial collector: about half the CPU time for a compile this small.
        [javac, "-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC", "--release", "8", "-Xlint:all", "-Xlint:-options"]
        + ["-cp", jar, "-d", str(out), *sources],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr, result.stderr
    return os.pathsep.join([str(out), jar])


class ArbiterLikeController(InMemoryController):
    """Answers arrivals and departures the way a fair-share arbiter would: job-b's arrival shrinks
    job-a to 2 workers, its departure grows job-a back to 4."""

    def job_submitted(self, job_id: str, *args: object, **kwargs: object) -> JobRecord:
        record = super().job_submitted(job_id, *args, **kwargs)  # type: ignore[arg-type]
        if job_id == "job-b":
            self.decide("job-a", 2, "job-b arrived: fair share")
        return record

    def job_finished(self, job_id: str) -> None:
        super().job_finished(job_id)
        if job_id == "job-b":
            self.decide("job-a", 4, "job-b left: capacity back")


class BrokenController(InMemoryController):
    def jobs(self) -> list[JobRecord]:
        raise RuntimeError("disk on fire")


def run_java(
    classpath: str, mode: str, java_port: int, python_port: int, token: str, *extra: str, tls_dir: Path | None = None
) -> str:
    """Run ``BridgeCheck MODE`` (over TLS with the files in ``tls_dir``); returns its output once it passed."""
    result = subprocess.run(
        ["java", "-cp", classpath, "BridgeCheck", mode, str(java_port), str(python_port), *extra],
        env={**os.environ, "BRIDGE_TOKEN": token, **({"BRIDGE_TLS_DIR": str(tls_dir)} if tls_dir else {})},
        capture_output=True,
        text=True,
        timeout=JAVA_TIMEOUT,
    )
    assert result.returncode == 0 and re.search(r"^PASS \d+$", result.stdout, re.M), (
        f"BridgeCheck {mode} failed (rc {result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    return result.stdout


def passed(output: str) -> int:
    match = re.search(r"^PASS (\d+)$", output, re.M)
    assert match
    return int(match.group(1))


@pytest.fixture()
def token() -> str:
    return secrets.token_urlsafe(32)


def serve(controller: Controller, token: str) -> BridgeServer:
    return BridgeServer(controller, token=token, python_port=0, java_port=free_port()).start()


def test_a_jvm_drives_arrival_departure_and_reads_decisions(java_classpath: str, token: str) -> None:
    controller = ArbiterLikeController(clock=lambda: CLOCK)
    with serve(controller, token) as bridge:
        output = run_java(java_classpath, "scenario", bridge.java_port, bridge.port, token)
    assert passed(output) == 43
    assert "UnknownJobException: no job named 'nope'" in output

    jobs = controller.jobs()
    assert [(j.job_id, j.state, j.source, j.target) for j in jobs] == [
        ("job-a", "running", "bridge", 4),
        ("job-b", "finished", "bridge", 2),
    ]
    assert [(j.min_workers, j.max_workers, j.workers, j.elastic) for j in jobs] == [(1, 4, 4, True), (2, 2, 2, False)]
    assert [(m.world_size, m.step, m.samples_per_second, m.loss) for m in controller.metrics("job-a")] == [
        (2, 100, 512.5, 0.25),
        (2, 3_000_000_000, 520.0, None),
    ]
    assert controller.timeline("job-a") == [
        DecisionRecord("job-a", CLOCK, 4, 2, "job-b arrived: fair share"),
        DecisionRecord("job-a", CLOCK, 2, 4, "job-b left: capacity back"),
    ]


def test_a_wrong_token_is_refused(java_classpath: str, token: str) -> None:
    controller = InMemoryController()
    wrong = secrets.token_urlsafe(32)
    with serve(controller, token) as bridge:
        output = run_java(java_classpath, "wrong-token", bridge.java_port, bridge.port, wrong)
        assert "Authentication with callback server unsuccessful" in output
        assert passed(output) == 3
        assert controller.jobs() == []
        # The refused client leaves the bridge serving the right token.
        run_java(java_classpath, "smoke", bridge.java_port, bridge.port, token)
    assert [j.job_id for j in controller.jobs()] == ["job-s"]


def test_concurrent_jvm_threads(java_classpath: str, token: str) -> None:
    controller = InMemoryController()
    with serve(controller, token) as bridge:
        output = run_java(java_classpath, "concurrent", bridge.java_port, bridge.port, token)
    assert passed(output) == 201
    reports = controller.metrics("job-c")
    assert sorted(r.step for r in reports) == list(range(200))
    assert sorted({r.samples_per_second for r in reports}) == [100.0, 101.0, 102.0, 103.0]


def test_returned_objects_are_released_in_the_jvm_and_the_token_is_never_logged(
    java_classpath: str, token: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with serve(InMemoryController(), token) as bridge:
        output = run_java(java_classpath, "memory", bridge.java_port, bridge.port, token)
    assert "released in the JVM (held: 3)" in output
    assert token not in caplog.text
    # The UnknownJobException handed to Java on purpose is not logged as a py4j traceback.
    assert "exception while executing the Python Proxy" not in caplog.text


def test_a_controller_failure_reaches_java_as_a_typed_exception(java_classpath: str, token: str) -> None:
    with serve(BrokenController(), token) as bridge:
        output = run_java(java_classpath, "broken", bridge.java_port, bridge.port, token)
    assert "ElasticSchedulerException: internal error in the scheduler (RuntimeError)" in output
    assert "disk on fire" not in output


def test_the_controller_serves_the_bridge_through_its_api(java_classpath: str, tmp_path: Path) -> None:
    """``submarine controller start --bridge-port``: the JVM's calls reach the live controller through its gRPC
    API, checked there like any caller's, and the job is the controller's (no cluster: its ResourceManager
    does not answer, so it decides nothing)."""
    where, java_port = tmp_path / "controller", free_port()
    info = process.start(
        f"http://127.0.0.1:{free_port()}", bridge_port=0, bridge_java_port=java_port, directory=where, timeout=60
    )
    try:
        assert info.bridge_port and info.bridge_token_file == str(where / "bridge.token")
        # Mutual TLS by default: the JVM needs the client certificate the controller issued.
        assert info.bridge_tls_dir == str(where / "bridge-tls")
        token = (where / "bridge.token").read_text().strip()
        with pytest.raises(AssertionError):
            run_java(java_classpath, "smoke", java_port, info.bridge_port, token)
        output = run_java(
            java_classpath, "smoke", java_port, info.bridge_port, token, tls_dir=Path(info.bridge_tls_dir)
        )
        assert passed(output) == 4
        with ControllerClient.connect(where) as controller:  # type: ignore[union-attr]
            [job] = controller.jobs()
        assert (job.job_id, job.source, job.state, job.min_workers, job.max_workers) == (
            "job-s",
            JobSource.BRIDGE,
            JobState.FINISHED,
            1,
            3,
        )
        assert token not in (where / "controller.log").read_text()
    finally:
        assert process.stop(where)
    assert locate.running(where) is None and not (where / "controller.json").exists()


SERVE = "from submarine_elastic.cli.bridge import bridge; bridge(prog_name='submarine bridge')"


def test_submarine_bridge_serve(java_classpath: str, token: str, tmp_path: Path) -> None:
    token_file = tmp_path / "bridge.token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    java_port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, "serve", "--port", "0", "--java-port", str(java_port)]
        + ["--token-file", str(token_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SUBMARINE_CA_DIR": str(tmp_path / "ca")},
    )
    try:
        first = _first_line(proc, timeout=30.0)
        listening = re.match(r"py4j bridge listening on 127\.0\.0\.1:(\d+) \(TLS; the JVM's certificate", first)
        assert listening, first
        port = int(listening.group(1))
        output = run_java(java_classpath, "smoke", java_port, port, token, tls_dir=tmp_path / "bridge-tls")
        assert passed(output) == 4
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, err
    assert "py4j bridge stopped" in rest
    assert token not in first + rest + err


def _first_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The process's first line of output; fails after ``timeout`` seconds instead of hanging."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline() if proc.stdout else ""))
    reader.daemon = True
    reader.start()
    reader.join(timeout)
    assert lines and lines[0], f"no output from serve within {timeout} s (exit code {proc.poll()})"
    return lines[0]


# ----------------------------------------------------------------------------- attacks


def test_members_outside_the_interface_are_refused_and_the_bridge_keeps_serving(
    java_classpath: str, token: str
) -> None:
    """A caller with the token calls ``__setattr__('controller', ...)``, ``__getattribute__('__class__')``,
    a private method and attributes through an interface of those names: each is an
    ``ElasticSchedulerException`` without traceback or path, no Python object is handed out, and the
    next caller (a fresh JVM) is served as before."""
    controller = InMemoryController()
    with serve(controller, token) as bridge:
        pool = bridge._gateway.gateway_property.pool  # type: ignore[union-attr]
        held = len(pool)
        output = run_java(java_classpath, "probe", bridge.java_port, bridge.port, token)
        assert passed(output) == 16
        assert len(pool) == held, "a probe registered a Python object for the JVM"
        assert "'__setattr__' is not a method of org.submarineelastic.bridge.ElasticScheduler" in output
        assert "listJobs takes no arguments (str) of these types" in output
        assert run_java(java_classpath, "smoke", bridge.java_port, bridge.port, token)
    assert [j.job_id for j in controller.jobs()] == ["job-s"]


def test_an_idle_connection_is_closed_and_the_jvm_reconnects(java_classpath: str, token: str) -> None:
    limits = BridgeLimits(idle_timeout_s=1.0)
    with BridgeServer(InMemoryController(), token=token, python_port=0, java_port=free_port(), limits=limits) as bridge:
        output = run_java(java_classpath, "idle", bridge.java_port, bridge.port, token, "2500")
        assert passed(output) == 3
        assert bridge.guard.logged_in <= 1


#: Opens N connections to a port, sends nothing, and prints one line per connection: seconds from its
#: connect to the bridge closing it ("-" if still open after the last argument's seconds). A process of
#: its own, so the attack does not share the bridge's interpreter lock.
IDLE_ATTACK = """
import select, socket, sys, time
port, count, limit = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
opened, closed = {}, {}


def look(wait):
    readable, _, _ = select.select(list(opened.keys() - closed.keys()), [], [], wait)
    for sock in readable:
        closed[sock] = time.monotonic() - opened[sock]


for _ in range(count):
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    except ConnectionResetError:
        closed[object()] = 0.0
        continue
    opened[sock] = time.monotonic()
    look(0)
end = time.monotonic() + limit
while opened.keys() - closed.keys() and time.monotonic() < end:
    look(0.05)
for sock, at in closed.items():
    print(f"{at:.3f}")
for sock in opened.keys() - closed.keys():
    print("-")
"""


def test_idle_connections_that_never_log_in_are_bounded_and_closed(java_classpath: str, token: str) -> None:
    """500 connections that send nothing: beyond MAX_PENDING_CONNECTIONS they are closed at once, the
    bridge's threads never grow past that bound, the rest are closed after LOGIN_TIMEOUT_S, and a JVM is
    served as before."""
    attack = 500
    with serve(InMemoryController(), token) as bridge:
        baseline = threading.active_count()
        peak = 0
        attacker = subprocess.Popen(
            [sys.executable, "-c", IDLE_ATTACK, str(bridge.port), str(attack), str(LOGIN_TIMEOUT_S + 10)],
            stdout=subprocess.PIPE,
            text=True,
        )
        while attacker.poll() is None:
            peak = max(peak, threading.active_count() - baseline)
            time.sleep(0.01)
        lines = attacker.communicate()[0].split()
        closed_after = sorted(float(line) for line in lines if line != "-")
        at_once = sum(t < LOGIN_TIMEOUT_S / 2 for t in closed_after)
        print(
            f"threads above baseline at most {peak}; {at_once} of {attack} closed within {LOGIN_TIMEOUT_S / 2} s "
            f"(median {closed_after[len(closed_after) // 2] if closed_after else None} s), the last after "
            f"{closed_after[-1:]} s"
        )
        assert len(lines) == attack and len(closed_after) == attack, "connections left open"
        assert peak <= MAX_PENDING_CONNECTIONS
        assert at_once >= attack - MAX_PENDING_CONNECTIONS
        assert closed_after[-1] <= LOGIN_TIMEOUT_S + 2
        assert bridge.guard.pending == 0  # each slot is given back before its socket closes
        ending = time.monotonic() + 5.0  # the last threads return from closing their sockets
        while threading.active_count() - baseline > 1 and time.monotonic() < ending:
            time.sleep(0.05)
        assert threading.active_count() - baseline <= 1  # the connection threads ended (a log line at most)
        assert passed(run_java(java_classpath, "smoke", bridge.java_port, bridge.port, token)) == 4


def test_failed_logins_write_a_bounded_number_of_log_lines(token: str, caplog: pytest.LogCaptureFixture) -> None:
    """1,500 logins with a wrong token: each is refused, and the bridge and py4j log at most one line per
    REFUSAL_LOG_INTERVAL_S about them (with the count), plus one when the bridge stops."""
    caplog.set_level(logging.DEBUG)
    wrong = secrets.token_urlsafe(32)
    attempts = 1500
    with serve(InMemoryController(), token) as bridge:
        caplog.clear()
        started = time.monotonic()
        for _ in range(attempts):
            with socket.create_connection(("127.0.0.1", bridge.port), timeout=5) as sock:
                sock.sendall(f"A\n{wrong}\ne\n".encode())
                assert sock.recv(64) == b"!xn\n"
        took = time.monotonic() - started
    # py4j's finalizer may still release handles of earlier tests' JVMs, which are gone: not this attack's.
    records = [
        r
        for r in caplog.records
        if r.name.startswith(("py4j", "submarine_elastic.bridge")) and "garbage collecting" not in r.getMessage()
    ]
    lines = sum(len(r.getMessage().splitlines()) + len((r.exc_text or "").splitlines()) for r in records)
    print(f"{attempts} failed logins in {took:.1f} s: {len(records)} log records, {lines} lines")
    refusals = [r.getMessage() for r in records if "wrong or no token" in r.getMessage()]
    assert 1 <= len(refusals) <= 2 + int(took // REFUSAL_LOG_INTERVAL_S), refusals
    assert sum(int(re.search(r"refused (\d+) ", m).group(1)) for m in refusals) == attempts  # type: ignore[union-attr]
    assert len(records) <= len(refusals) + 3, [r.getMessage() for r in records][:20]
    assert wrong not in caplog.text and token not in caplog.text


def test_mutual_tls_with_certificates_of_one_ca(java_classpath: str, token: str, tmp_path: Path) -> None:
    """With TLS the JVM calls the bridge, and the bridge builds and releases the returned objects, over
    one TLS connection; a plain-TCP login on the bridge's port is refused."""
    tls = write_tls_files(tmp_path / "tls", CertificateAuthority.create("bridge test CA"), "127.0.0.1")
    controller = InMemoryController()
    java_port = free_port()
    with BridgeServer(controller, token=token, python_port=0, java_port=java_port, tls=tls) as bridge:
        output = run_java(java_classpath, "memory", java_port, bridge.port, token, tls_dir=tmp_path / "tls")
        assert "released in the JVM (held: 3)" in output
        with socket.create_connection(("127.0.0.1", bridge.port), timeout=5) as plain:
            plain.sendall(f"A\n{token}\ne\n".encode())
            plain.settimeout(LOGIN_TIMEOUT_S + 2)
            try:
                answer = plain.recv(64)
            except ConnectionError:
                answer = b""
        assert b"!yv" not in answer
    assert [j.job_id for j in controller.jobs()] == ["job-m"]
