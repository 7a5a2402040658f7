"""The client of the controller's gRPC API: a :class:`~submarine_elastic.controller.api.Controller` in
another process. ``submarine job run|kill``, ``submarine controller status|history``, the py4j bridge and
tests all reach the controller through it.

Find the running controller the way the CLI does, from its directory::

    with ControllerClient.connect() as controller:   # None when no controller runs there
        controller.job_submitted("big", 1, 4, 4)

Every call has a deadline (``timeout``, 10 s by default); reads are retried by gRPC while the controller
is briefly unreachable. Status codes come back as the controller's own errors.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import grpc

from submarine_elastic import env
from submarine_elastic.controller import locate
from submarine_elastic.controller.api import (
    Controller,
    ControllerAuthError,
    ControllerError,
    ControllerUnavailableError,
    ControllerView,
    DecisionRecord,
    IllegalTransitionError,
    InvalidJobError,
    JobRecord,
    JobSource,
    JobStatus,
    JobSubmission,
    UnknownJobError,
)
from submarine_elastic.controller.proto import controller_pb2 as pb
from submarine_elastic.controller.proto import controller_pb2_grpc as pb_grpc
from submarine_elastic.controller.store import SavedState
from submarine_elastic.controller.wire import (
    decision_from_proto,
    job_from_proto,
    source_to_proto,
    status_from_proto,
)
from submarine_elastic.rpc import bearer, open_channel

#: Seconds each call may take before it fails with ControllerUnavailableError.
DEFAULT_TIMEOUT = 10.0
#: The largest reply a client takes (the server sends at most as much).
MAX_REPLY_BYTES = 32 * 1024 * 1024
_SERVICE = "submarine.controller.v1.ControllerService"
#: Reads are safe to send again: gRPC retries them (within the call's deadline) while the port refuses.
_SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [{"service": _SERVICE, "method": m} for m in ("GetJob", "ListJobs", "GetHistory")],
                "retryPolicy": {
                    "maxAttempts": 4,
                    "initialBackoff": "0.1s",
                    "maxBackoff": "1s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    }
)
_ERRORS: dict[grpc.StatusCode, type[ControllerError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidJobError,
    grpc.StatusCode.NOT_FOUND: UnknownJobError,
    grpc.StatusCode.FAILED_PRECONDITION: IllegalTransitionError,
    grpc.StatusCode.UNAUTHENTICATED: ControllerAuthError,
    grpc.StatusCode.UNAVAILABLE: ControllerUnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: ControllerUnavailableError,
}

T = TypeVar("T")


class ControllerClient(Controller):
    """The controller at ``address``, called with ``token``. Thread-safe; one connection, opened lazily.

    Args:
        address: ``host:port`` of its API (:attr:`ControllerInfo.address`).
        token: its bearer token (never logged).
        timeout: seconds each call may take (> 0).
        ca: the certificates its API is checked against (default: the cluster's CA, ``SUBMARINE_CA_DIR``).
        insecure: plaintext (a controller started with ``--insecure``); default ``SUBMARINE_INSECURE``.

    Raises:
        ValueError: a bad timeout.
        ControllerAuthError: no ``ca`` given, plaintext not asked for, and the cluster's CA cannot be read.
    """

    def __init__(
        self,
        address: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        ca: bytes | None = None,
        insecure: bool | None = None,
    ) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        insecure = env.settings().insecure if insecure is None else insecure
        if ca is None and not insecure:
            from submarine_elastic.tls import CaError, cluster_ca_cert

            try:
                ca = cluster_ca_cert()
            except CaError as exc:
                raise ControllerAuthError(f"cannot check the controller's TLS certificate: {exc}") from exc
        self.address = address
        self.timeout = timeout
        self._metadata = bearer(token)
        self._channel = open_channel(
            address,
            ca=ca,
            insecure=insecure,
            options=[
                ("grpc.max_receive_message_length", MAX_REPLY_BYTES),
                ("grpc.enable_retries", 1),
                ("grpc.service_config", _SERVICE_CONFIG),
            ],
        )
        self._stub = pb_grpc.ControllerServiceStub(self._channel)

    @classmethod
    def connect(cls, directory: Path | None = None, *, timeout: float = DEFAULT_TIMEOUT) -> ControllerClient | None:
        """A client of the controller that serves from ``directory`` (default: ``SUBMARINE_CONTROLLER_DIR``),
        found by its state file; None when none runs there. Sends nothing yet.

        Raises:
            ControllerAuthError: its token cannot be read (named).
        """
        where = locate.directory(directory)
        info = locate.running(where)
        if info is None:
            return None
        return cls(info.address, locate.read_token(where, locate.API_TOKEN), timeout=timeout)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> ControllerClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _call(self, method: Callable[..., T], request: object) -> T:
        try:
            return method(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            code, details = exc.code(), exc.details() or ""
            error = _ERRORS.get(code, ControllerError)
            if error is ControllerUnavailableError:
                details = f"the controller at {self.address} does not answer ({code.name}: {details})"
            elif error is ControllerAuthError:
                details = f"the controller at {self.address} refused the token: {details}"
            elif error is ControllerError:
                details = f"{code.name}: {details}"
            raise error(details) from None

    # ------------------------------------------------------------------ Controller

    def job_submitted(
        self,
        job_id: str,
        min_workers: int,
        max_workers: int,
        workers: int,
        *,
        elastic: bool = True,
        source: JobSource = JobSource.CLI,
        policy: str | None = None,
        gpus: int = 0,
        queue: str | None = None,
    ) -> JobRecord:
        """Sent as given: the controller checks the values (:class:`JobSubmission`) and answers a bad one with
        ``INVALID_ARGUMENT`` naming it, raised here as :class:`InvalidJobError`."""
        try:
            request = pb.SubmitJobRequest(
                job_id=job_id,
                min_workers=min_workers,
                max_workers=max_workers,
                workers=workers,
                elastic=elastic,
                source=source_to_proto(source),
                policy=policy,
                gpus=gpus,
                queue=queue,
            )
        except (TypeError, ValueError) as exc:
            raise InvalidJobError(f"job {job_id!r} cannot be sent to the controller: {exc}") from exc
        return job_from_proto(self._call(self._stub.SubmitJob, request).job)

    def submit(self, job: JobSubmission) -> JobRecord:
        return self.job_submitted(**asdict(job))

    def job_finished(self, job_id: str) -> None:
        self._call(self._stub.EndJob, _job_request(pb.EndJobRequest, job_id))

    def report_metrics(
        self, job_id: str, world_size: int, step: int, samples_per_second: float, loss: float | None = None
    ) -> None:
        try:
            request = pb.ReportMetricsRequest(
                job_id=job_id, world_size=world_size, step=step, samples_per_second=samples_per_second, loss=loss
            )
        except (TypeError, ValueError) as exc:
            raise InvalidJobError(f"metrics of job {job_id!r} cannot be sent to the controller: {exc}") from exc
        self._call(self._stub.ReportMetrics, request)

    def jobs(self) -> list[JobRecord]:
        return [s.job for s in self.statuses()]

    def job(self, job_id: str) -> JobRecord:
        return job_from_proto(self._call(self._stub.GetJob, _job_request(pb.GetJobRequest, job_id)).job)

    def decision(self, job_id: str) -> DecisionRecord | None:
        reply = self._call(self._stub.GetJob, _job_request(pb.GetJobRequest, job_id))
        return decision_from_proto(reply.last_decision) if reply.HasField("last_decision") else None

    def timeline(self, job_id: str, *, all_runs: bool = False) -> list[DecisionRecord]:
        request = _job_request(pb.GetHistoryRequest, job_id)
        request.all_runs = all_runs
        return [decision_from_proto(d) for d in self._call(self._stub.GetHistory, request).decisions]

    def statuses(self, *, include_finished: bool = True) -> list[JobStatus]:
        reply = self._call(self._stub.ListJobs, pb.ListJobsRequest(include_finished=include_finished))
        return [status_from_proto(s) for s in reply.jobs]


def _job_request(kind: Callable[..., T], job_id: object) -> T:
    if not isinstance(job_id, str):
        raise UnknownJobError(f"no job named {job_id!r}")
    return kind(job_id=job_id)


@contextmanager
def view(directory: Path | None = None) -> Iterator[ControllerView | None]:
    """What may be read of the controller of ``directory``: the running one, through its API; else what a
    stopped one left in its database, opened read-only; None when none ever ran there.

    Raises:
        ControllerAuthError: it runs but its token cannot be read.
        ControllerError: its database cannot be read.
    """
    client = ControllerClient.connect(directory)
    if client is not None:
        with client:
            yield client
        return
    path = locate.directory(directory) / locate.DB
    if not path.exists():
        yield None
        return
    try:
        saved = SavedState(path)
    except sqlite3.Error as exc:
        raise ControllerError(f"cannot read the controller's state {path}: {exc}") from exc
    with saved:
        yield saved
