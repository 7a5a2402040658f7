"""The gRPC metrics service: ``Report``, ``Watch``, ``GetJob``, ``ListJobs``, plus health and reflection.

Start it from Python::

    with MetricsServer(port=0, token="s3cret").start() as server:
        print(server.address)

or with ``submarine metrics serve``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from submarine_elastic.limits import MAX_ACK_KEYS, MAX_REPORT_MESSAGE_BYTES
from submarine_elastic.metrics.api import (
    MAX_POINTS_PER_REPLY,
    MAX_STREAMS,
    MAX_STREAMS_PER_JOB,
    SERVICE_NAME,
    STREAM_IDLE_SECONDS,
    UNARY_THREADS,
    InvalidPointError,
    JobSummary,
    MetricsStore,
    ServerStartError,
    UnknownJobError,
)
from submarine_elastic.metrics.auth import OPERATOR, Authenticator, Identity
from submarine_elastic.metrics.prometheus import PrometheusEndpoint
from submarine_elastic.metrics.proto import metrics_pb2, metrics_pb2_grpc
from submarine_elastic.metrics.store import InMemoryStore
from submarine_elastic.metrics.validation import validate_job_id
from submarine_elastic.rpc import STREAM_KEEPALIVE_SERVER_OPTIONS, BearerTokenInterceptor, dial_address

_log = logging.getLogger(__name__)

#: What a caller without a known credential is told (health checking needs none: see rpc.PUBLIC_METHOD_PREFIXES).
UNKNOWN_CREDENTIAL = "missing or unknown metrics credential"


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
        last_rejection=summary.last_rejection,
        configurations=[
            metrics_pb2.ConfigurationStat(
                world_size=c.world_size,
                batch_size=c.batch_size,
                median_step_time_seconds=c.median_step_time_seconds,
                steps=c.steps,
            )
            for c in summary.configurations
        ],
    )
    if summary.noise is not None:
        message.gradient_noise_scale = summary.noise.gradient_noise_scale
        message.noise_step = summary.noise.step
        if summary.noise.grad_sq_norm is not None:
            message.grad_sq_norm = summary.noise.grad_sq_norm
        if summary.noise.grad_variance is not None:
            message.grad_variance = summary.noise.grad_variance
    if summary.resize_pause_s is not None:
        message.resize_pause_seconds = summary.resize_pause_s
    if summary.last_loss is not None:
        message.last_loss = summary.last_loss
    if summary.loss_ema is not None:
        message.loss_ema = summary.loss_ema
    if summary.loss_slope_per_step is not None:
        message.loss_slope_per_step = summary.loss_slope_per_step
    return message


class StreamSlots:
    """Counts the streams open, in all and per job; refuses one beyond either bound. Thread-safe."""

    def __init__(self, total: int = MAX_STREAMS, per_job: int = MAX_STREAMS_PER_JOB) -> None:
        self._total = total
        self._per_job = per_job
        self._lock = threading.Lock()
        self._open = 0
        self._by_job: dict[str, int] = {}

    def acquire(self, job_id: str | None) -> str | None:
        """Takes a slot (counted against ``job_id`` too, unless None); returns why not when refused."""
        with self._lock:
            if self._open >= self._total:
                return f"the metrics service has its most streams open ({self._total}); try again later"
            if job_id is not None and self._by_job.get(job_id, 0) >= self._per_job:
                return f"job {job_id!r} has its most streams open ({self._per_job}); try again later"
            self._open += 1
            if job_id is not None:
                self._by_job[job_id] = self._by_job.get(job_id, 0) + 1
            return None

    def release(self, job_id: str | None) -> None:
        with self._lock:
            self._open -= 1
            if job_id is not None:
                left = self._by_job.pop(job_id) - 1
                if left:
                    self._by_job[job_id] = left

    @property
    def open(self) -> int:
        with self._lock:
            return self._open


class IdleStreamReaper:
    """Cancels a request stream that has sent nothing for ``idle_seconds``, from one daemon thread that looks
    every quarter of that (so a silent stream ends within 1.25 times the bound)."""

    def __init__(self, idle_seconds: float = STREAM_IDLE_SECONDS) -> None:
        if not idle_seconds > 0:
            raise ValueError(f"idle_seconds must be positive, got {idle_seconds}")
        self._idle = idle_seconds
        self._lock = threading.Lock()
        self._last: dict[grpc.ServicerContext, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="metrics-idle-reaper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def touch(self, context: grpc.ServicerContext) -> None:
        with self._lock:
            self._last[context] = time.monotonic()

    def forget(self, context: grpc.ServicerContext) -> None:
        with self._lock:
            self._last.pop(context, None)

    def _run(self) -> None:
        while not self._stop.wait(self._idle / 4):
            now = time.monotonic()
            with self._lock:
                silent = [c for c, last in self._last.items() if now - last > self._idle]
                for context in silent:
                    del self._last[context]
            for context in silent:
                context.cancel()


class MetricsServicer(metrics_pb2_grpc.MetricsServiceServicer):
    """Serves a :class:`MetricsStore` over gRPC.

    Without an ``auth``, every caller is the operator. A job's credential reports and reads its own job only.
    """

    def __init__(
        self,
        store: MetricsStore,
        *,
        auth: Authenticator | None = None,
        watch_poll_seconds: float = 0.5,
        watch_capacity: int = 1024,
        slots: StreamSlots | None = None,
        reaper: IdleStreamReaper | None = None,
    ):
        self._store = store
        self._auth = auth or Authenticator()
        self._poll = watch_poll_seconds
        self._watch_capacity = watch_capacity
        self._slots = slots or StreamSlots()
        self._reaper = reaper or IdleStreamReaper()
        self._lock = threading.Lock()
        self._watches: set[Any] = set()

    def Report(  # noqa: N802 (gRPC method name)
        self, request_iterator: Iterator[metrics_pb2.ReportBatch], context: grpc.ServicerContext
    ) -> metrics_pb2.ReportAck:
        identity = self._identity(context)
        self._take_slot(identity.job_id, context)
        accepted = duplicates = 0
        last_seq: dict[str, int] = {}
        self._reaper.touch(context)
        try:
            for batch in request_iterator:
                self._reaper.touch(context)
                if not identity.may_use(batch.job_id):
                    context.abort(
                        grpc.StatusCode.PERMISSION_DENIED,
                        f"{identity} may not report for job {batch.job_id!r}",
                    )
                key = f"{batch.job_id}/{batch.worker.instance}/{batch.incarnation}"
                if key not in last_seq and len(last_seq) >= MAX_ACK_KEYS:
                    context.abort(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"a Report stream carries at most {MAX_ACK_KEYS} worker incarnations; "
                        "send the rest in another stream",
                    )
                try:
                    result = self._store.ingest(batch)
                except InvalidPointError as e:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
                accepted += result.accepted
                duplicates += result.duplicates
                last_seq[result.key] = result.last_seq
        except grpc.RpcError:  # the stream was cancelled: by its client, or as idle
            if context.is_active():
                raise
        finally:
            self._reaper.forget(context)
            self._slots.release(identity.job_id)
        return metrics_pb2.ReportAck(accepted=accepted, duplicates=duplicates, last_seq=last_seq)

    def Watch(  # noqa: N802
        self, request: metrics_pb2.WatchRequest, context: grpc.ServicerContext
    ) -> Iterator[metrics_pb2.WatchEvent]:
        identity = self._identity(context)
        if request.job_id:
            self._check_job_id(request.job_id, context)
        if identity.job_id is not None and request.job_id != identity.job_id:
            context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{identity} may watch its own job only, not {repr(request.job_id) if request.job_id else 'every job'}",
            )
        slot = identity.job_id or request.job_id or None
        self._take_slot(slot, context)
        try:
            yield from self._watch(request, context)
        finally:
            self._slots.release(slot)

    def _watch(
        self, request: metrics_pb2.WatchRequest, context: grpc.ServicerContext
    ) -> Iterator[metrics_pb2.WatchEvent]:
        sub = self._store.subscribe(request.job_id or None, self._watch_capacity)
        with self._lock:
            self._watches.add(sub)
        context.add_callback(sub.close)
        try:
            while context.is_active() and not sub.closed:
                event = sub.get(self._poll)
                if event is None:
                    continue
                if request.with_summary or sub.dropped or len(event.points) > MAX_POINTS_PER_REPLY:
                    summary = None
                    if request.with_summary:
                        try:
                            summary = summary_to_proto(self._store.summary(event.job_id))
                        except UnknownJobError:
                            pass  # evicted since the event; send the points without a summary
                    for start in range(0, len(event.points), MAX_POINTS_PER_REPLY):
                        piece = metrics_pb2.WatchEvent(
                            job_id=event.job_id,
                            points=event.points[start : start + MAX_POINTS_PER_REPLY],
                            events_dropped=sub.dropped,
                        )
                        if summary is not None:
                            piece.summary.CopyFrom(summary)
                        yield piece
                    continue
                yield event
        finally:
            sub.close()
            with self._lock:
                self._watches.discard(sub)

    def GetJob(  # noqa: N802
        self, request: metrics_pb2.GetJobRequest, context: grpc.ServicerContext
    ) -> metrics_pb2.GetJobResponse:
        identity = self._identity(context)
        self._check_job_id(request.job_id, context)
        if not identity.may_use(request.job_id):
            context.abort(grpc.StatusCode.PERMISSION_DENIED, f"{identity} may not read job {request.job_id!r}")
        if request.max_points > MAX_POINTS_PER_REPLY:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"max_points: {request.max_points} is above {MAX_POINTS_PER_REPLY}, the most points a reply holds",
            )
        try:
            summary = self._store.summary(request.job_id)
            points = self._store.series(request.job_id, request.max_points) if request.max_points else []
        except UnknownJobError as e:
            context.abort(grpc.StatusCode.NOT_FOUND, str(e))
        return metrics_pb2.GetJobResponse(summary=summary_to_proto(summary), points=points)

    def ListJobs(  # noqa: N802
        self, request: metrics_pb2.ListJobsRequest, context: grpc.ServicerContext
    ) -> metrics_pb2.ListJobsResponse:
        identity = self._identity(context)
        summaries = []
        for job_id in sorted(self._store.jobs()):
            if not identity.may_use(job_id):
                continue
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

    def _identity(self, context: grpc.ServicerContext) -> Identity:
        identity = self._auth.identify(context.invocation_metadata())
        if identity is None:  # the interceptor refused it already, unless the servicer runs without one
            context.abort(grpc.StatusCode.UNAUTHENTICATED, UNKNOWN_CREDENTIAL)
        return identity or OPERATOR

    def _take_slot(self, job_id: str | None, context: grpc.ServicerContext) -> None:
        if (refusal := self._slots.acquire(job_id)) is not None:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)

    @property
    def open_streams(self) -> int:
        return self._slots.open

    def start(self) -> None:
        """Starts watching for idle streams."""
        self._reaper.start()

    def stop(self) -> None:
        """Stops watching for idle streams; blocks up to a quarter of the idle bound."""
        self._reaper.stop()

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
    """PEM certificate chain and private key the server presents; with ``client_ca``, mutual TLS: a caller
    must present a certificate that CA issued, or the handshake fails before any call."""

    certificate_chain: bytes
    private_key: bytes = field(repr=False)
    client_ca: bytes | None = None

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

    ``token`` is the operator's credential (every job); with ``job_key`` the service also takes each job's
    own credential (:func:`submarine_elastic.metrics.auth.job_credential`). With neither every caller is
    accepted; without ``tls`` the port is plaintext.

    Bounds: ``MAX_STREAMS`` streams at once (``MAX_STREAMS_PER_JOB`` of one job), beyond which a stream is
    refused RESOURCE_EXHAUSTED at once; ``MAX_STREAMS + UNARY_THREADS`` threads and concurrent calls, so
    unary calls are answered while every stream slot is taken; a Report stream silent for
    ``idle_seconds`` is cancelled; a request message of at most ``MAX_REPORT_MESSAGE_BYTES``.
    """

    def __init__(
        self,
        store: MetricsStore | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        job_key: bytes | None = None,
        tls: TlsCredentials | None = None,
        prometheus_port: int | None = None,
        prometheus_host: str | None = None,
        max_streams: int = MAX_STREAMS,
        max_streams_per_job: int = MAX_STREAMS_PER_JOB,
        idle_seconds: float = STREAM_IDLE_SECONDS,
        watch_poll_seconds: float = 0.5,
    ) -> None:
        """Nothing is bound until :meth:`start`.

        Raises:
            ValueError: a port is outside [0, 65535], a stream bound is below 1, ``idle_seconds`` is not
                positive, the token is unusable or the key too short.
        """
        for name, value in (("port", port), ("prometheus_port", prometheus_port)):
            if value is not None and not 0 <= value <= 65535:
                raise ValueError(f"{name} must be in [0, 65535], got {value}")
        for name, value in (("max_streams", max_streams), ("max_streams_per_job", max_streams_per_job)):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        self._auth = Authenticator(token, job_key)
        self.store: MetricsStore = store if store is not None else InMemoryStore()
        self._host = host
        self._requested_port = port
        self._token = token
        self._tls = tls
        self._prometheus_port = prometheus_port
        self._prometheus_host = prometheus_host or host
        self._max_workers = max_streams + UNARY_THREADS
        self._servicer = MetricsServicer(
            self.store,
            auth=self._auth,
            watch_poll_seconds=watch_poll_seconds,
            slots=StreamSlots(max_streams, max_streams_per_job),
            reaper=IdleStreamReaper(idle_seconds),
        )
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
    def open_streams(self) -> int:
        """Report and Watch streams being served now."""
        return self._servicer.open_streams

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
        interceptors: list[grpc.ServerInterceptor] = (
            []
            if self._auth.open
            else [
                BearerTokenInterceptor(
                    accepts=lambda metadata: self._auth.identify(metadata) is not None,
                    refusal=UNKNOWN_CREDENTIAL,
                )
            ]
        )
        interceptors.append(MalformedStreamGuard())
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self._max_workers, thread_name_prefix="metrics-grpc"),
            interceptors=interceptors,
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", MAX_REPORT_MESSAGE_BYTES),
                # A Watch whose client vanished without a word frees its stream slot once a ping goes
                # unanswered; connections that carry no call are closed.
                *STREAM_KEEPALIVE_SERVER_OPTIONS,
            ],
            maximum_concurrent_rpcs=self._max_workers,
        )
        metrics_pb2_grpc.add_MetricsServiceServicer_to_server(self._servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
        bind = f"{self._host}:{self._requested_port}"
        try:
            if self._tls is None:
                port = server.add_insecure_port(bind)
            else:
                credentials = grpc.ssl_server_credentials(
                    [(self._tls.private_key, self._tls.certificate_chain)],
                    root_certificates=self._tls.client_ca,
                    require_client_auth=self._tls.client_ca is not None,
                )
                port = server.add_secure_port(bind, credentials)
        except RuntimeError as e:
            raise ServerStartError(f"cannot bind the metrics service to {bind}: {e}") from e
        if port == 0:
            raise ServerStartError(f"cannot bind the metrics service to {bind}")
        if self._prometheus_port is not None:
            self._prometheus = PrometheusEndpoint(self.store, self._prometheus_port, self._prometheus_host)
        server.start()
        self._servicer.start()
        self._server = server
        self._port = port
        for name in ("", SERVICE_NAME):
            self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        _log.info(
            "metrics service on %s:%d (%s, %s)",
            self._host,
            port,
            "plaintext" if self._tls is None else "mutual TLS" if self._tls.client_ca else "TLS",
            "no credential" if self._auth.open else "credentials required",
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
        self._servicer.stop()
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
