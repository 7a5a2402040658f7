"""A job's control plane is mutual TLS by default: the driver as `job run` configures it, started as YARN
starts it (a process with the spec's environment and the localized files), probed as an attacker would."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import psutil
import pytest

from submarine_elastic import tls
from submarine_elastic.elastic.driver import JobDriver, advertised_host
from submarine_elastic.protocol.api import DriverUnreachableError, Limits
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.protocol.proto import elastic_pb2_grpc as pb_grpc
from submarine_elastic.rpc import InsecureChannelError, bearer, open_channel
from submarine_elastic.submit.client import JobClient
from submarine_elastic.submit.jobspec import (
    INSECURE_MARK,
    JobRequest,
    WorkerResources,
    build_service,
    with_credentials,
    write_secrets,
)

TOKEN = "t0ken-of-the-job-1234"


@pytest.fixture(autouse=True)
def jobs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SUBMARINE_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.delenv("SUBMARINE_INSECURE", raising=False)
    return tmp_path / "jobs"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _request(name: str = "mnist", **kw: object) -> JobRequest:
    args: dict = {
        "name": name,
        "launch_cmd": "python train.py",
        "limits": Limits(1, 1, 2),
        "resources": WorkerResources(512, 1),
        "rm_url": f"http://127.0.0.1:{_free_port()}",  # nobody there: the driver never gets a worker
        "driver_port": _free_port(),
        "token": TOKEN,
        "python": sys.executable,
    }
    args.update(kw)
    return with_credentials(JobRequest(**args))


def _container_env(req: JobRequest, **changes: str | None) -> dict[str, str]:
    """The driver container's environment: the spec's variables, ``$PWD`` the job's directory (where YARN
    would have localized its files)."""
    directory = write_secrets(req)
    spec = build_service(req).to_dict()
    environment = {k: v.replace("$PWD", str(directory)) for k, v in spec["configuration"]["env"].items()}
    environment.update(SUBMARINE_JOB_ID=req.name, PYTHONPATH=os.getcwd(), HOME=os.environ.get("HOME", "/root"))
    for key, value in changes.items():
        if value is None:
            environment.pop(key, None)
        else:
            environment[key] = value
    return environment


def _listening(pid: int) -> list[tuple[str, int]]:
    """The addresses ``pid`` listens on (an IPv4 address gRPC binds as IPv6-mapped shown as IPv4)."""
    return [
        (c.laddr.ip.removeprefix("::ffff:"), c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    ]


@pytest.fixture()
def driver_process(tmp_path: Path) -> Iterator[tuple[JobRequest, subprocess.Popen[bytes]]]:
    req = _request()
    log = (tmp_path / "driver.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "submarine_elastic.elastic.driver"],
        env=_container_env(req),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while len(_listening(proc.pid)) < 2:  # the control plane and Horovod's rendezvous
            assert proc.poll() is None, (tmp_path / "driver.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "driver.log").read_text()
            time.sleep(0.2)
        yield req, proc
    finally:
        proc.kill()
        proc.wait()
        log.close()


def _status(channel: grpc.Channel) -> pb.JobStatus:
    return pb_grpc.ElasticDriverStub(channel).Status(pb.StatusRequest(), metadata=bearer(TOKEN), timeout=5)


def test_the_driver_binds_the_containers_address_not_every_interface(
    driver_process: tuple[JobRequest, subprocess.Popen[bytes]],
) -> None:
    req, proc = driver_process
    bound = _listening(proc.pid)
    assert (advertised_host(), req.driver_port) in bound
    # Neither the control plane nor Horovod's rendezvous key-value store listens on every interface.
    assert all(ip not in ("0.0.0.0", "::") for ip, _ in bound), bound


def test_the_job_client_reaches_its_driver_over_mutual_tls(
    driver_process: tuple[JobRequest, subprocess.Popen[bytes]],
) -> None:
    req, _ = driver_process
    with JobClient(req.name, None, address=f"{advertised_host()}:{req.driver_port}") as client:
        assert client.status().target == 1


def test_a_plaintext_client_gets_nothing_from_the_driver(
    driver_process: tuple[JobRequest, subprocess.Popen[bytes]],
) -> None:
    req, _ = driver_process
    with open_channel(f"{advertised_host()}:{req.driver_port}", insecure=True) as channel:
        with pytest.raises(grpc.RpcError) as caught:
            _status(channel)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("who", ["no client certificate", "another job's", "the cluster's"])
def test_the_driver_refuses_a_client_without_a_certificate_of_its_job(
    driver_process: tuple[JobRequest, subprocess.Popen[bytes]], who: str, tmp_path: Path
) -> None:
    """Even with the job's token and the right CA for the server, the handshake fails."""
    req, _ = driver_process
    job_tls = req.job_tls
    assert job_tls is not None
    cert = {
        "no client certificate": None,
        "another job's": tls.CertificateAuthority.create("other job CA").issue_client(f"{req.name}/client"),
        "the cluster's": tls.cluster_ca(tmp_path / "ca").issue_client(f"{req.name}/client"),
    }[who]
    channel = open_channel(
        f"{advertised_host()}:{req.driver_port}",
        ca=job_tls.driver.ca.encode(),
        client_cert=None if cert is None else (cert.cert, cert.key),
        server_name=tls.driver_server_name(req.name),
    )
    with channel, pytest.raises(grpc.RpcError) as caught:
        _status(channel)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_client_checks_the_driver_is_its_jobs(driver_process: tuple[JobRequest, subprocess.Popen[bytes]]) -> None:
    """Another job's client, with a certificate for its own job's name, does not accept this driver."""
    req, _ = driver_process
    job_tls = req.job_tls
    assert job_tls is not None
    channel = open_channel(
        f"{advertised_host()}:{req.driver_port}",
        ca=job_tls.driver.ca.encode(),
        client_cert=(job_tls.client[0].encode(), job_tls.client[1].encode()),
        server_name=tls.driver_server_name("other-job"),
    )
    with channel, pytest.raises(grpc.RpcError) as caught:
        _status(channel)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def _driver_exit(environment: dict[str, str]) -> tuple[int | None, str]:
    """The driver's exit status (None: still running after 30 s, then killed) and its output."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "submarine_elastic.elastic.driver"],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        return None, out
    return proc.returncode, out


def test_a_driver_without_a_token_refuses_to_start() -> None:
    environment = _container_env(_request(), SUBMARINE_JOB_TOKEN_FILE=None)
    code, out = _driver_exit(environment)
    assert code == 2, out
    assert "no job token" in out and "refusing to open the control plane" in out


def test_a_driver_without_tls_refuses_to_serve_plaintext() -> None:
    environment = _container_env(_request(), SUBMARINE_DRIVER_TLS_CERT_FILE=None, SUBMARINE_DRIVER_TLS_KEY_FILE=None)
    code, out = _driver_exit(environment)
    assert code == 2, out
    assert "refusing to serve the control plane in plaintext" in out


def test_a_client_without_a_ca_refuses_and_never_sends_its_token() -> None:
    """The job's directory has its token but no CA (not a job run --insecure): `job show|flex` refuse to
    dial, where they used to send the token to whatever answered in plaintext."""
    seen: list[str] = []

    class Recorder(grpc.ServerInterceptor):
        def intercept_service(self, continuation, details):  # type: ignore[no-untyped-def]
            seen.append(dict(details.invocation_metadata).get("authorization", ""))
            return continuation(details)

    req = _request(insecure=True)
    directory = write_secrets(req)
    (directory / INSECURE_MARK).unlink()  # a directory without a CA, and without plaintext asked for
    driver = JobDriver(req.name, req.limits, yarn=None, token=TOKEN, iface="lo", elastic_timeout=60)  # type: ignore[arg-type]
    server = grpc.server(futures.ThreadPoolExecutor(2), interceptors=[Recorder()])
    pb_grpc.add_ElasticDriverServicer_to_server(driver.servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with pytest.raises(DriverUnreachableError, match=r"no CA to check the server at 127\.0\.0\.1:\d+ against") as e:
            with JobClient(req.name, None, address=f"127.0.0.1:{port}") as client:
                client.status()
    finally:
        server.stop(None)
    assert isinstance(e.value.__cause__, InsecureChannelError)
    assert seen == []


def test_job_run_insecure_asks_for_plaintext_explicitly() -> None:
    req = _request(insecure=True)
    spec = build_service(req).to_dict()
    environment = spec["configuration"]["env"]
    assert environment["SUBMARINE_INSECURE"] == "1"
    assert not any(name.startswith("SUBMARINE_DRIVER_TLS") for name in environment)
    assert {f["dest_file"] for f in spec["configuration"]["files"]} == {"job.token"}
