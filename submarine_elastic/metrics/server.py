"""The gRPC metrics service: ``Report``, ``Watch``, ``GetJob``, ``ListJobs``, plus health and reflection.

Start it from Python::

    with MetricsServer(port=0, token="s3cret").start() as server:
        print(server.address)

or with ``submarine metrics serve``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from submarine_elastic.metrics.api import (
    SERVICE_NAME,
    InvalidPointError,
    JobSummary,
    MetricsStore,
    ServerStartError,
    UnknownJobError,
)
from submarine_elastic.metrics.prometheus import PrometheusEndpoint
from submarine_elastic.metrics.proto import metrics_pb2, metrics_pb2_grpc
from submarine_elastic.metrics.store import InMemoryStore
from submarine_elastic.metrics.validation import validate_job_id
from submarine_elastic.rpc import BearerTokenInterceptor, check_token, dial_address

_log = logging.getLogger(__name__)

#: Methods any caller may use without the token: load balancers and orchestrators probe health.


def summary_to_proto(summary: JobSummary) -> metrics_pb2.JobSummary:
    """The wire form of ``summary``."""
    message = metrics_pb2.JobSummary(
        job_id=summary.job_id,
        world_size=summary.world_size,
        active_workers=summary.active_workers,
        last_step=summary.last_step,
        throughput=[
            metrics_pb2.ThroughputStat(
                world_size=t.world_size,
                per_worker_examples_per_second=t.per_worker_examples_per_second,
                aggregate_examples_per_second=t.aggregate_examples_per_second,
                step_time_seconds=t.step_time_seconds,
                points=t.points,
            )
            for t in summary.throughput
        ],
        points_received=summary.points_received,
        points_duplicate=summary.points_duplicate,
        points_rejected=summary.points_rejected,
        points_missing=summary.points_missing,
        last_update=summary.last_update,
    )
    if summary.last_loss is not None:
        message.last_loss = summary.last_loss
    if summary.loss_ema is not None:
        message.loss_ema = summary.loss_ema
    if summary.loss_slope_per_step is not None:
        message.loss_slope_per_step = summary.loss_slope_per_step
    return message


class MetricsServicer(metrics_pb2_grpc.MetricsServiceServicer):
    """Serves a :class:`MetricsStore` over gRPC."""

    def __init__(self, store: MetricsStore, *, watch_poll_seconds: float = 0.5, watch_capacity: int = 1024):
        self._store = store
        self._poll = watch_poll_seconds
        self._watch_capacity = watch_capacity
        self._lock = threading.Lock()
        self._watches: set[Any] = set()

    def Report(  # noqa: N802 (gRPC method name)
        self, request_iterator: Iterator[metrics_pb2.ReportBatch], context: grpc.ServicerContext
    ) -> metrics_pb2.ReportAck:
        accepted = duplicates = 0
        last_seq: dict[str, int] = {}
        for batch in request_iterator:
            try:
                result = self._store.ingest(batch)
            except InvalidPointError as e:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            accepted += result.accepted
            duplicates += result.duplicates
            last_seq[result.key] = result.last_seq
        return metrics_pb2.ReportAck(accepted=accepted, duplicates=duplicates, last_seq=last_seq)

    def Watch(  # noqa: N802
        self, request: metrics_pb2.WatchRequest, context: grpc.ServicerContext
    ) -> Iterator[metrics_pb2.WatchEvent]:
        if request.job_id:
            self._check_job_id(request.job_id, context)
        sub = self._store.subscribe(request.job_id or None, self._watch_capacity)
        with self._lock:
            self._watches.add(sub)
        context.add_callback(sub.close)
        try:
            while context.is_active() and not sub.closed:
                event = sub.get(self._poll)
                if event is None:
                    continue
                if request.with_summary or sub.dropped:
                    copy = metrics_pb2.WatchEvent()
                    copy.CopyFrom(event)
                    copy.events_dropped = sub.dropped
                    if request.with_summary:
                        try:
                            copy.summary.CopyFrom(summary_to_proto(self._store.summary(event.job_id)))
                        except UnknownJobError:
                            pass  # evicted since the event; send the points without a summary
                    event = copy
                yield event
        finally:
            sub.close()
            with self._lock:
                self._watches.discard(sub)

    def GetJob(  # noqa: N802
        self, request: metrics_pb2.GetJobRequest, context: grpc.ServicerContext
    ) -> metrics_pb2.GetJobResponse:
        self._check_job_id(request.job_id, context)
        try:
            summary = self._store.summary(request.job_id)
            points = self._store.series(request.job_id, request.max_points) if request.max_points else []
        except UnknownJobError as e:
            context.abort(grpc.StatusCode.NOT_FOUND, str(e))
        return metrics_pb2.GetJobResponse(summary=summary_to_proto(summary), points=points)

    def ListJobs(  # noqa: N802
        self, request: metrics_pb2.ListJobsRequest, context: grpc.ServicerContext
    ) -> metrics_pb2.ListJobsResponse:
        summaries = []
        for job_id in sorted(self._store.jobs()):
            try:
                summaries.append(summary_to_proto(self._store.summary(job_id)))
            except UnknownJobError:
                continue  # evicted between jobs() and summary()
        return metrics_pb2.ListJobsResponse(jobs=summaries)

    def close_watches(self) -> None:
        """Ends every open ``Watch`` stream at its next poll. Never blocks."""
        with self._lock:
            watches = list(self._watches)
        for sub in watches:
            sub.close()

    @staticmethod
    def _check_job_id(job_id: str, context: grpc.ServicerContext) -> None:
        try:
            validate_job_id(job_id)
        except InvalidPointError as e:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))


class _Malformed:
    """Stands in for a request message that did not parse."""


_MALFORMED = _Malformed()


class MalformedStreamGuard(grpc.ServerInterceptor):
    """Turns an unparsable message on a request stream into ``INVALID_ARGUMENT`` raised by the handler.

    With grpcio 1.85 a request-streaming call whose message fails to deserialize inside gRPC ends
    with ``INTERNAL`` but leaves the call registered, and ``server.stop()`` then waits forever. Here
    the deserializer never fails; the handler sees a marker and aborts the call the normal way.
    """

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None or not handler.request_streaming or handler.request_deserializer is None:
            return handler
        method: str = handler_call_details.method
        deserialize = handler.request_deserializer

        def safe(raw: bytes) -> Any:
            try:
                return deserialize(raw)
            except (DecodeError, ValueError, TypeError):
                return _MALFORMED

        def checked(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
            for request in requests:
                if request is _MALFORMED:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"a request message of {method} does not parse")
                yield request

        if handler.response_streaming:
            stream_stream = handler.stream_stream
            return grpc.stream_stream_rpc_method_handler(
                lambda requests, context: stream_stream(checked(requests, context), context),
                request_deserializer=safe,
                response_serializer=handler.response_serializer,
            )
        stream_unary = handler.stream_unary
        return grpc.stream_unary_rpc_method_handler(
            lambda requests, context: stream_unary(checked(requests, context), context),
            request_deserializer=safe,
            response_serializer=handler.response_serializer,
        )


@dataclass(frozen=True)
class TlsCredentials:
    """PEM certificate chain and private key the server presents."""

    certificate_chain: bytes
    private_key: bytes

    @classmethod
    def from_files(cls, certificate_chain: Path, private_key: Path) -> TlsCredentials:
        """Reads both files.

        Raises:
            ServerStartError: a file cannot be read.
        """
        try:
            return cls(certificate_chain.read_bytes(), private_key.read_bytes())
        except OSError as e:
            raise ServerStartError(f"cannot read TLS certificate or key: {e}") from e


class MetricsServer:
    """The gRPC service (and optionally a Prometheus endpoint) over one store.

    Without ``token`` every caller is accepted; without ``tls`` the port is plaintext.
    """

    def __init__(
        self,
        store: MetricsStore | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        tls: TlsCredentials | None = None,
        prometheus_port: int | None = None,
        prometheus_host: str | None = None,
        max_workers: int = 32,
        watch_poll_seconds: float = 0.5,
    ) -> None:
        """Nothing is bound until :meth:`start`.

        Raises:
            ValueError: a port is outside [0, 65535], ``max_workers`` is below 1, or the token is unusable.
        """
        for name, value in (("port", port), ("prometheus_port", prometheus_port)):
            if value is not None and not 0 <= value <= 65535:
                raise ValueError(f"{name} must be in [0, 65535], got {value}")
        if max_workers < 1:
            raise ValueError(f"max_workers must be at least 1, got {max_workers}")
        if token is not None:
            check_token(token)
        self.store: MetricsStore = store if store is not None else InMemoryStore()
        self._host = host
        self._requested_port = port
        self._token = token
        self._tls = tls
        self._prometheus_port = prometheus_port
        self._prometheus_host = prometheus_host or host
        self._max_workers = max_workers
        self._servicer = MetricsServicer(self.store, watch_poll_seconds=watch_poll_seconds)
        self._health = health.HealthServicer()
        self._server: grpc.Server | None = None
        self._prometheus: PrometheusEndpoint | None = None
        self._port = 0

    @property
    def port(self) -> int:
        """The bound gRPC port (0 before :meth:`start`)."""
        return self._port

    @property
    def address(self) -> str:
        """``host:port`` a client on this machine can dial."""
        return dial_address(self._host, self._port)

    @property
    def prometheus_port(self) -> int | None:
        """The bound Prometheus port, or None when not serving Prometheus."""
        return self._prometheus.port if self._prometheus else None

    def start(self) -> MetricsServer:
        """Binds and starts serving; returns at once.

        Raises:
            ServerStartError: a port is taken, the address is bad, or the server is already started.
        """
        if self._server is not None:
            raise ServerStartError("the metrics server is already started")
        interceptors: list[grpc.ServerInterceptor] = [BearerTokenInterceptor(self._token)] if self._token else []
        interceptors.append(MalformedStreamGuard())
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self._max_workers, thread_name_prefix="metrics-grpc"),
            interceptors=interceptors,
            options=[("grpc.so_reuseport", 0)],
        )
        metrics_pb2_grpc.add_MetricsServiceServicer_to_server(self._servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
        bind = f"{self._host}:{self._requested_port}"
        try:
            if self._tls is None:
                port = server.add_insecure_port(bind)
            else:
                credentials = grpc.ssl_server_credentials([(self._tls.private_key, self._tls.certificate_chain)])
                port = server.add_secure_port(bind, credentials)
        except RuntimeError as e:
            raise ServerStartError(f"cannot bind the metrics service to {bind}: {e}") from e
        if port == 0:
            raise ServerStartError(f"cannot bind the metrics service to {bind}")
        if self._prometheus_port is not None:
            self._prometheus = PrometheusEndpoint(self.store, self._prometheus_port, self._prometheus_host)
        server.start()
        self._server = server
        self._port = port
        for name in ("", SERVICE_NAME):
            self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        _log.info(
            "metrics service on %s:%d (%s, %s)",
            self._host,
            port,
            "TLS" if self._tls else "plaintext",
            "token required" if self._token else "no token",
        )
        return self

    def stop(self, grace: float = 1.0) -> None:
        """Stops accepting calls, lets running ones finish for up to ``grace`` seconds, then cancels them.

        Blocks until the server has stopped (about ``grace`` seconds at most). Safe to call twice.
        """
        server, self._server = self._server, None
        if server is None:
            return
        self._health.enter_graceful_shutdown()
        self._servicer.close_watches()
        server.stop(grace).wait()
        if self._prometheus is not None:
            self._prometheus.close()
            self._prometheus = None

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        """Blocks until the server stops or ``timeout`` seconds pass; True if it stopped."""
        server = self._server
        if server is None:
            return True
        return bool(server.wait_for_termination(timeout))

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
