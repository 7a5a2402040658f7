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
from pathlib import Path

import pytest

from submarine_elastic.bridge.api import java_sources, py4j_jar
from submarine_elastic.bridge.server import BridgeServer
from submarine_elastic.controller import locate
from submarine_elastic.controller.api import Controller, DecisionRecord, JobRecord, JobSource, JobState
from submarine_elastic.controller.client import ControllerClient
from submarine_elastic.controller.memory import InMemoryController
from submarine_elastic.daemon import process

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


def run_java(classpath: str, mode: str, java_port: int, python_port: int, token: str) -> str:
    """Run ``BridgeCheck MODE``; returns its output once it passed."""
    result = subprocess.run(
        ["java", "-cp", classpath, "BridgeCheck", mode, str(java_port), str(python_port)],
        env={**os.environ, "BRIDGE_TOKEN": token},
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
    # py4j logs every command at debug level, the auth command it sends to the JVM included.
    assert "Command to send: A\n***" in caplog.text
    assert token not in caplog.text
    # The UnknownJobException handed to Java on purpose is not logged as a py4j traceback.
    assert "exception while executing the Python Proxy" not in caplog.text


def test_a_controller_failure_reaches_java_as_a_typed_exception(java_classpath: str, token: str) -> None:
    with serve(BrokenController(), token) as bridge:
        output = run_java(java_classpath, "broken", bridge.java_port, bridge.port, token)
    assert "ElasticSchedulerException: internal error in the scheduler: RuntimeError: disk on fire" in output


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
        token = (where / "bridge.token").read_text().strip()
        output = run_java(java_classpath, "smoke", java_port, info.bridge_port, token)
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
    )
    try:
        first = _first_line(proc, timeout=30.0)
        listening = re.match(r"py4j bridge listening on 127\.0\.0\.1:(\d+) \(JVM ClientServer expected on", first)
        assert listening, first
        output = run_java(java_classpath, "smoke", java_port, int(listening.group(1)), token)
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
