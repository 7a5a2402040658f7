"""A job's client says which side it waited for when its driver does not answer in time."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest

from submarine_elastic.protocol.api import DriverUnreachableError
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.protocol.proto import elastic_pb2_grpc as pb_grpc
from submarine_elastic.submit.client import JobClient
from submarine_elastic.submit.jobspec import INSECURE_MARK, job_dir

JOB = "slowjob"


class _StuckDriver(pb_grpc.ElasticDriverServicer):
    """Takes every Status call and answers it only once ``release`` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def Status(self, request: pb.StatusRequest, context: grpc.ServicerContext) -> pb.JobStatus:
        self.release.wait(10)
        return pb.JobStatus(job=JOB)


@pytest.fixture
def insecure_job() -> str:
    directory = job_dir(JOB)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / INSECURE_MARK).write_text("plaintext control plane (job run --insecure)\n")
    return JOB


@pytest.fixture
def stuck_driver() -> Iterator[tuple[_StuckDriver, int]]:
    servicer = _StuckDriver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_ElasticDriverServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield servicer, port
    finally:
        servicer.release.set()
        server.stop(None)


def test_a_driver_that_takes_the_call_and_does_not_answer_is_told_apart(
    insecure_job: str, stuck_driver: tuple[_StuckDriver, int]
) -> None:
    _servicer, port = stuck_driver
    with JobClient(insecure_job, None, address=f"127.0.0.1:{port}", timeout=0.5) as client:
        with pytest.raises(DriverUnreachableError) as caught:
            client.status()
    assert str(caught.value) == (
        f"driver of {JOB}: DEADLINE_EXCEEDED: Deadline Exceeded; "
        f"connected to 127.0.0.1:{port}, the driver did not answer within 0.5 s"
    )


def test_a_driver_nobody_listens_for_is_a_connection_that_never_came(insecure_job: str) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: each connect is refused
        port = closed.getsockname()[1]
        with JobClient(insecure_job, None, address=f"127.0.0.1:{port}", timeout=0.5) as client:
            with pytest.raises(DriverUnreachableError) as caught:
                client.set_target(pb.Target(workers=2))
    assert str(caught.value).endswith(f"; no connection to 127.0.0.1:{port} within 0.5 s")
    assert "DEADLINE_EXCEEDED" in str(caught.value)
