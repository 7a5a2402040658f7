"""``submarine metrics serve`` as a real process: listens, checks the token, stops on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import click
import grpc
import pytest
from click.testing import CliRunner
from grpc_health.v1 import health_pb2, health_pb2_grpc

from submarine_elastic.cli.metrics import metrics
from submarine_elastic.metrics.auth import job_credential
from submarine_elastic.metrics.proto import metrics_pb2, metrics_pb2_grpc

SERVE = "from submarine_elastic.cli.metrics import metrics; metrics(prog_name='submarine metrics')"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], int, int]]:
    token_file = tmp_path / "token"
    token_file.write_text("cli-token\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUBMARINE_METRICS_")}
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, "serve", "--port", "0", "--prometheus-port", "0"]
        + ["--token-file", str(token_file), "--insecure"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        listening = re.search(r"listening on 127\.0\.0\.1:(\d+) \(plaintext, token required\)", proc.stdout.readline())
        assert listening, proc.stderr.read() if proc.stderr else ""
        prometheus = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", proc.stdout.readline())
        assert prometheus
        yield proc, int(listening.group(1)), int(prometheus.group(1))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_serve_until_sigterm(served: tuple[subprocess.Popen[str], int, int]) -> None:
    proc, port, prometheus_port = served
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        stub = metrics_pb2_grpc.MetricsServiceStub(channel)
        batch = metrics_pb2.ReportBatch(
            job_id="cli-job",
            worker=metrics_pb2.WorkerRef(instance="worker-0"),
            incarnation="i1",
            world_size=1,
            points=[metrics_pb2.StepPoint(seq=1, step=1, loss=0.5, wall_time=1.7e9)],
        )
        with pytest.raises(grpc.RpcError) as e:
            stub.Report(iter([batch]), timeout=10)
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        ack = stub.Report(iter([batch]), metadata=(("authorization", "Bearer cli-token"),), timeout=10)
        assert ack.accepted == 1
    text = urllib.request.urlopen(f"http://127.0.0.1:{prometheus_port}/metrics", timeout=10).read().decode()
    assert 'submarine_metrics_job_loss{job="cli-job"} 0.5' in text
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=15)
    assert proc.returncode == 0
    assert "metrics service stopped" in out


def test_refuses_an_open_unauthenticated_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SUBMARINE_METRICS_TOKEN", raising=False)
    monkeypatch.delenv("SUBMARINE_METRICS_TOKEN_FILE", raising=False)
    result = CliRunner().invoke(metrics, ["serve", "--host", "0.0.0.0", "--port", "0"])
    assert result.exit_code == 2
    assert "--allow-unauthenticated" in result.output


def test_tls_options_go_together(tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("x")
    result = CliRunner().invoke(metrics, ["serve", "--port", "0", "--tls-cert", str(cert)])
    assert result.exit_code == 2
    assert "--tls-cert and --tls-key go together" in result.output


def test_bad_certificate_is_reported(tmp_path: Path) -> None:
    cert, key, token = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "token"
    cert.write_text("not a certificate")
    key.write_text("not a key")
    token.write_text("tok")
    result = CliRunner().invoke(
        metrics, ["serve", "--port", "0", "--tls-cert", str(cert), "--tls-key", str(key), "--token-file", str(token)]
    )
    assert result.exit_code == 1
    assert "cannot bind" in result.output


def test_the_submarine_command_has_the_group() -> None:
    from submarine_elastic.cli.main import cli

    assert cli.get_command(click.Context(cli), "metrics") is metrics


def test_credential_prints_the_jobs_own_credential(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("a-service-key-of-enough-bytes-123\n")
    result = CliRunner().invoke(metrics, ["credential", "job-a", "--job-key-file", str(key)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == job_credential(b"a-service-key-of-enough-bytes-123", "job-a")
    result = CliRunner().invoke(metrics, ["credential", "Not_A_Job", "--job-key-file", str(key)])
    assert result.exit_code == 1 and "'Not_A_Job' is not a YARN service name" in result.output
    key.write_text("short")
    result = CliRunner().invoke(metrics, ["credential", "job-a", "--job-key-file", str(key)])
    assert result.exit_code == 1 and "at least 16" in result.output and "short" not in result.output
