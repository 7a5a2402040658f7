"""The controller's gRPC API: :class:`ControllerServicer` answers ``controller.proto`` from a
:class:`~submarine_elastic.controller.api.Controller`; :class:`ControllerServer` serves it, bounded and
behind a bearer token.

Start it from Python::

    with ControllerServer(controller, token=token).start() as server:
        print(server.address)  # what ControllerClient dials

Every error a controller raises comes back as a status code with its message: ``INVALID_ARGUMENT``
(:class:`~.api.InvalidJobError`), ``NOT_FOUND`` (:class:`~.api.UnknownJobError`), ``FAILED_PRECONDITION``
(:class:`~.api.IllegalTransitionError` or another :class:`~.api.ControllerError`); anything else is
``INTERNAL``, logged here with its traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent import futures
from types import TracebackType
from typing import NoReturn, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from submarine_elastic.controller.api import (
    Controller,
    ControllerError,
    IllegalTransitionError,
    InvalidJobError,
    UnknownJobError,
)
from submarine_elastic.controller.proto import controller_pb2 as pb
from submarine_elastic.controller.proto import controller_pb2_grpc as pb_grpc
from submarine_elastic.controller.wire import (
    decision_to_proto,
    job_to_proto,
    source_from_proto,
    status_to_proto,
)
from submarine_elastic.netif import is_loopback
from submarine_elastic.rpc import BearerTokenInterceptor, ServerTls, dial_address

_log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ControllerService"].full_name
#: Requests are a job id and a few numbers: anything bigger is refused (RESOURCE_EXHAUSTED) unread.
MAX_REQUEST_BYTES = 64 * 1024
#: The largest reply (a long history): about 100,000 decisions.
MAX_REPLY_BYTES = 32 * 1024 * 1024
#: Calls served at once; more are refused with RESOURCE_EXHAUSTED rather than queued without bound.
MAX_CONCURRENT_RPCS = 64
#: Threads serving calls (each call is a database read or write, or a short lock).
MAX_WORKERS = 8
#: A connection idle this long is closed (clients reconnect on their next call).
MAX_CONNECTION_IDLE_MS = 5 * 60 * 1000

T = TypeVar("T")


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    context.abort(code, message)
    raise AssertionError("grpc's abort returned")  # it raises; this keeps the type checker honest


def _answer(context: grpc.ServicerContext, method: str, call: Callable[[], T]) -> T:
    try:
        return call()
    except InvalidJobError as exc:
        _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
    except UnknownJobError as exc:
        _abort(context, grpc.StatusCode.NOT_FOUND, str(exc))
    except IllegalTransitionError as exc:
        _abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(exc))
    except ControllerError as exc:
        _abort(context, grpc.StatusCode.FAILED_PRECONDITION, f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - a bug: the caller gets INTERNAL, the traceback stays here
        _log.exception("controller %s failed", method)
        _abort(context, grpc.StatusCode.INTERNAL, f"internal error in the controller: {type(exc).__name__}: {exc}")


class ControllerServicer(pb_grpc.ControllerServiceServicer):
    """Serves ``ControllerService`` from ``controller`` (which checks every value; see :mod:`.api`).

    Each call blocks for as long as the controller's method (a database read or write).
    """

    def __init__(self, controller: Controller) -> None:
        if not isinstance(controller, Controller):
            raise TypeError(f"controller must be a submarine_elastic.controller.api.Controller, got {controller!r}")
        self._controller = controller

    def SubmitJob(  # noqa: N802 (gRPC method name)
        self, request: pb.SubmitJobRequest, context: grpc.ServicerContext
    ) -> pb.SubmitJobResponse:
        def call() -> pb.SubmitJobResponse:
            record = self._controller.job_submitted(
                request.job_id,
                request.min_workers,
                request.max_workers,
                request.workers,
                elastic=request.elastic,
                source=source_from_proto(request.source),
                policy=request.policy if request.HasField("policy") else None,
                gpus=request.gpus,
                queue=request.queue if request.HasField("queue") else None,
            )
            return pb.SubmitJobResponse(job=job_to_proto(record))

        return _answer(context, "SubmitJob", call)

    def EndJob(self, request: pb.EndJobRequest, context: grpc.ServicerContext) -> pb.EndJobResponse:  # noqa: N802
        def call() -> pb.EndJobResponse:
            self._controller.job_finished(request.job_id)
            return pb.EndJobResponse()

        return _answer(context, "EndJob", call)

    def ReportMetrics(  # noqa: N802
        self, request: pb.ReportMetricsRequest, context: grpc.ServicerContext
    ) -> pb.ReportMetricsResponse:
        def call() -> pb.ReportMetricsResponse:
            self._controller.report_metrics(
                request.job_id,
                request.world_size,
                request.step,
                request.samples_per_second,
                request.loss if request.HasField("loss") else None,
            )
            return pb.ReportMetricsResponse()

        return _answer(context, "ReportMetrics", call)

    def GetJob(self, request: pb.GetJobRequest, context: grpc.ServicerContext) -> pb.GetJobResponse:  # noqa: N802
        def call() -> pb.GetJobResponse:
            reply = pb.GetJobResponse(job=job_to_proto(self._controller.job(request.job_id)))
            last = self._controller.decision(request.job_id)
            if last is not None:
                reply.last_decision.CopyFrom(decision_to_proto(last))
            return reply

        return _answer(context, "GetJob", call)

    def ListJobs(self, request: pb.ListJobsRequest, context: grpc.ServicerContext) -> pb.ListJobsResponse:  # noqa: N802
        def call() -> pb.ListJobsResponse:
            statuses = self._controller.statuses(include_finished=request.include_finished)
            return pb.ListJobsResponse(jobs=[status_to_proto(s) for s in statuses])

        return _answer(context, "ListJobs", call)

    def GetHistory(  # noqa: N802
        self, request: pb.GetHistoryRequest, context: grpc.ServicerContext
    ) -> pb.GetHistoryResponse:
        def call() -> pb.GetHistoryResponse:
            decisions = self._controller.timeline(request.job_id, all_runs=request.all_runs)
            return pb.GetHistoryResponse(decisions=[decision_to_proto(d) for d in decisions])

        return _answer(context, "GetHistory", call)


class ControllerServer:
    """The controller's gRPC API (and gRPC health) on one port, every call but health behind ``token``.

    TLS given ``tls`` (``submarine controller`` serves a certificate of the cluster's CA); plaintext
    without, which is refused beyond loopback.

    Args:
        controller: what answers the calls (thread-safe: calls run concurrently).
        token: the bearer token every caller must send (printable ASCII without spaces); never logged.
        host, port: where to listen; port 0 picks a free one (see :attr:`address`).
        max_workers: threads serving calls.
        max_concurrent_rpcs: calls served at once; beyond it a call is refused with RESOURCE_EXHAUSTED.
        tls: its certificate and key (and a client CA for mutual TLS); None: plaintext, loopback only.

    Raises:
        ValueError: a bad token, port or bound (named; the token never shown), or plaintext on an address
            other than loopback.
    """

    def __init__(
        self,
        controller: Controller,
        *,
        token: str,
        host: str = "127.0.0.1",
        port: int = 0,
        max_workers: int = MAX_WORKERS,
        max_concurrent_rpcs: int = MAX_CONCURRENT_RPCS,
        tls: ServerTls | None = None,
    ) -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError(f"port must be an integer in [0, 65535], got {port!r}")
        for name, value in (("max_workers", max_workers), ("max_concurrent_rpcs", max_concurrent_rpcs)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if tls is None and not is_loopback(host):
            raise ValueError(f"the controller's API on {host} needs TLS: plaintext is served on loopback only")
        self._tls = tls
        self._auth = BearerTokenInterceptor(token)  # refuses a token gRPC metadata cannot carry
        self._servicer = ControllerServicer(controller)
        self._health = health.HealthServicer()
        self._host = host
        self._requested_port = port
        self._max_workers = max_workers
        self._max_concurrent_rpcs = max_concurrent_rpcs
        self._server: grpc.Server | None = None
        self._port = 0

    @property
    def port(self) -> int:
        """The bound port (0 before :meth:`start`)."""
        return self._port

    @property
    def address(self) -> str:
        """``host:port`` a client on this machine can dial."""
        return dial_address(self._host, self._port)

    def start(self) -> ControllerServer:
        """Bind and serve (on gRPC's threads); returns at once.

        Raises:
            ControllerError: the address cannot be bound, or the server is already started.
        """
        if self._server is not None:
            raise ControllerError("the controller's API is already started")
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self._max_workers, thread_name_prefix="controller-grpc"),
            interceptors=[self._auth],
            maximum_concurrent_rpcs=self._max_concurrent_rpcs,
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
                ("grpc.max_send_message_length", MAX_REPLY_BYTES),
                ("grpc.max_connection_idle_ms", MAX_CONNECTION_IDLE_MS),
            ],
        )
        pb_grpc.add_ControllerServiceServicer_to_server(self._servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        bind = f"{self._host}:{self._requested_port}"
        try:
            port = (
                server.add_insecure_port(bind)
                if self._tls is None
                else server.add_secure_port(bind, self._tls.credentials())
            )
        except RuntimeError as exc:
            raise ControllerError(f"cannot bind the controller's API to {bind}: {exc}") from exc
        if port == 0:
            raise ControllerError(f"cannot bind the controller's API to {bind}")
        server.start()
        self._server, self._port = server, port
        for name in ("", SERVICE_NAME):
            self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        _log.info(
            "controller API on %s (%s, token required)", self.address, "plaintext" if self._tls is None else "TLS"
        )
        return self

    def stop(self, grace: float = 1.0) -> None:
        """Stop accepting calls, let running ones finish for up to ``grace`` seconds, then cancel them.
        Blocks until stopped; stopping twice is a no-op."""
        server, self._server = self._server, None
        if server is None:
            return
        self._health.enter_graceful_shutdown()
        server.stop(grace).wait()

    def __enter__(self) -> ControllerServer:
        return self if self._server is not None else self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


__all__ = ["ControllerServer", "ControllerServicer", "MAX_REQUEST_BYTES", "MAX_REPLY_BYTES", "SERVICE_NAME"]
