"""A real job driver serving its control plane on an in-process gRPC server, as the CLI finds it."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from concurrent import futures

import grpc

from submarine_elastic.elastic.driver import JobDriver
from submarine_elastic.protocol.proto import elastic_pb2_grpc as pb_grpc
from submarine_elastic.submit.jobspec import INSECURE_MARK, SECRET_ENV, job_dir
from submarine_elastic.submit.store import remember_driver


@contextlib.contextmanager
def serving(servicer: JobDriver, name: str, token: str) -> Iterator[JobDriver]:
    """``servicer`` serving job ``name``'s control plane on a port of 127.0.0.1, plaintext (a job run
    ``--insecure``), the job's token and the driver's address where the CLI looks; all gone on the way out."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_ElasticDriverServicer_to_server(servicer.servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    directory = job_dir(name)
    directory.mkdir(parents=True)
    try:
        (directory / SECRET_ENV["SUBMARINE_JOB_TOKEN"]).write_text(token)
        (directory / INSECURE_MARK).write_text("")
        remember_driver(name, f"127.0.0.1:{port}")
        yield servicer
    finally:
        server.stop(0)
        shutil.rmtree(directory)
