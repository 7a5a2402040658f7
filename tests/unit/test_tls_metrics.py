"""The metrics service is mutual TLS by default: ``submarine metrics serve`` as a real process on an address
beyond loopback, probed as an attacker would; the hooks refuse a service they cannot check."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import grpc
import psutil
import pytest
from click.testing import CliRunner
from grpc_health.v1 import health_pb2, health_pb2_grpc

from submarine_elastic import tls
from submarine_elastic.cli.metrics import _server_tls, metrics
from submarine_elastic.metrics.proto import metrics_pb2, metrics_pb2_grpc
from submarine_elastic.rpc import bearer, open_channel
from tf_hooks.config import MetricsConfig
from tf_hooks.sender import NullSink, make_sink

SERVE = "from submarine_elastic.cli.metrics import metrics; metrics(prog_name='submarine metrics')"
TOKEN = "metrics-tls-token"


def _outside_address() -> str:
    """An IPv4 address of this machine beyond loopback (the test skips on a machine without one)."""
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not address.address.startswith("127."):
                return str(address.address)
    pytest.skip("this machine has no address beyond loopback")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``metrics serve --host <outside address>`` with nothing but a token: ``host:port`` and the CA dir."""
    host = _outside_address()
    (tmp_path / "token").write_text(TOKEN)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SUBMARINE_METRICS_")}
    environment.pop("SUBMARINE_INSECURE", None)
    environment["SUBMARINE_CA_DIR"] = str(tmp_path / "ca")
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, "serve", "--host", host, "--port", "0", "--token-file", str(tmp_path / "token")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        listening = re.search(rf"listening on {re.escape(host)}:(\d+) \((.*?),", line)
        assert listening, line + (proc.stderr.read() if proc.stderr else "")
        assert listening.group(2) == "mutual TLS", line
        yield f"{host}:{listening.group(1)}", tmp_path / "ca"
    finally:
        proc.kill()
        proc.wait(10)


def _get_job(channel: grpc.Channel) -> None:
    metrics_pb2_grpc.MetricsServiceStub(channel).GetJob(
        metrics_pb2.GetJobRequest(job_id="nobody"), metadata=bearer(TOKEN), timeout=5
    )


def test_a_plaintext_client_gets_nothing_from_the_service(served: tuple[str, Path]) -> None:
    address, _ = served
    with open_channel(address, insecure=True) as channel, pytest.raises(grpc.RpcError) as caught:
        _get_job(channel)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_client_without_a_certificate_of_the_cluster_is_refused(served: tuple[str, Path]) -> None:
    """The right CA for the server and the right token, but no client certificate, or one of another CA."""
    address, ca_dir = served
    ca = tls.cluster_ca_cert(ca_dir)
    stranger = tls.CertificateAuthority.create("another CA").issue_client("job x")
    for client_cert in (None, (stranger.cert, stranger.key)):
        with open_channel(address, ca=ca, client_cert=client_cert) as channel, pytest.raises(grpc.RpcError) as caught:
            _get_job(channel)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_client_of_the_cluster_is_served(served: tuple[str, Path]) -> None:
    address, ca_dir = served
    issued = tls.cluster_ca(ca_dir).issue_client("job x")
    with open_channel(address, ca=issued.ca, client_cert=(issued.cert, issued.key)) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as caught:
            _get_job(channel)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND  # past TLS and the token: no such job


def test_plaintext_beyond_loopback_is_refused(tmp_path: Path) -> None:
    (tmp_path / "token").write_text(TOKEN)
    host = _outside_address()
    result = CliRunner().invoke(
        metrics, ["serve", "--host", host, "--port", "0", "--token-file", str(tmp_path / "token"), "--insecure"]
    )
    assert result.exit_code == 2
    assert f"--insecure on {host}: plaintext is served on loopback only" in result.output


def test_plaintext_is_allowed_on_any_loopback_address_and_refused_on_a_look_alike_name() -> None:
    for host in ("127.0.0.2", "[::1]", "LOCALHOST"):
        assert _server_tls(host, True, None, None, None, False) is None
    with pytest.raises(click.UsageError, match="--insecure on localhost.example.com: plaintext is served on loopback"):
        _server_tls("localhost.example.com", True, None, None, None, False)


def test_hooks_without_a_ca_report_nothing_rather_than_send_their_token_in_plaintext(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No channel is opened at all: the sink is the null sink, and the log says why."""
    monkeypatch.delenv("SUBMARINE_INSECURE", raising=False)
    sink = make_sink(MetricsConfig(endpoint="127.0.0.1:9", job_id="job-a", token=TOKEN))
    assert isinstance(sink, NullSink)
    assert "metrics are not reported: no CA to check the server at 127.0.0.1:9 against" in caplog.text
