"""The gRPC sink: a bounded queue filled by the training thread and a background thread that streams it.

Delivery: every flush interval (or sooner when a batch is full) the sender takes up to
``max_stream_points`` records off the queue, sends them as one client-streaming ``Report`` call and
forgets them once the answer acknowledges their seq. When the call fails they stay "in flight" and
are sent again, first, on the next attempt; the service ignores the ones it already holds. While
the service is unreachable the queue keeps the newest ``queue_size`` records and counts the older
ones it drops; the sender retries with exponential backoff (tenacity) and resumes where it was.

Records come in two ways: :meth:`GrpcSink.record`, one at a time on the training thread, or in bulk
from a source (``add_source``): the Keras callback only appends raw steps to its own deque, and the
sender thread drains and converts them before each send, so that work stays off the training thread.
The points go out as bytes written by ``tf_hooks.wire``.

Seq numbers count up from 1 per incarnation, and the incarnation changes whenever the worker's
(rank, world size) does, i.e. when Horovod re-forms the ring, and with every new process.
"""

from __future__ import annotations

import bisect
import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import grpc
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_when_event_set,
    wait_exponential,
    wait_random,
)

from submarine_elastic.metrics.proto import metrics_pb2
from tf_hooks import wire
from tf_hooks.api import MetricsSink, NullSink, SenderStats, StepRecord
from tf_hooks.config import MetricsConfig

logger = logging.getLogger(__name__)

# Mirrors the service's rules (submarine_elastic/metrics/validation.py); a test keeps them in step.
_MAX_ABS = 1e15
_MAX_USER_METRICS = 32
_MAX_INT64 = 2**63 - 1
_USER_METRIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")

# The channel's own reconnect backoff (gRPC's default grows to 120 s) must not outlast ours.
_CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)


_SERVICE = metrics_pb2.DESCRIPTOR.services_by_name["MetricsService"]
_REPORT_METHOD = f"/{_SERVICE.full_name}/{_SERVICE.methods_by_name['Report'].name}"


class _Queued(NamedTuple):
    order: int
    incarnation: str
    seq: int
    record: StepRecord


class _Flight:
    """One ``ReportBatch`` (its bytes, built once) waiting for its acknowledgement; sent again until it comes."""

    __slots__ = ("header", "key", "orders", "points", "seqs")

    def __init__(self, header: bytes, key: str) -> None:
        self.header = header
        self.key = key
        self.points: list[bytes] = []  # each framed as a ReportBatch.points element
        self.orders: list[int] = []
        self.seqs: list[int] = []

    def payload(self) -> bytes:
        return self.header + b"".join(self.points)

    @property
    def batch(self) -> metrics_pb2.ReportBatch:
        """The message the service will parse (for tests and debugging)."""
        return metrics_pb2.ReportBatch.FromString(self.payload())


class _Retryable(Exception):
    """A stream failed for a reason that may pass (service down, slow, restarting)."""


def make_sink(config: MetricsConfig) -> MetricsSink:
    """A :class:`GrpcSink` for ``config``, or a :class:`NullSink` when it names no endpoint.

    Never blocks: connecting happens in the sender thread.
    """
    if not config.enabled:
        return NullSink()
    return GrpcSink(config)


class GrpcSink(MetricsSink):
    """Streams records to the metrics service from a daemon thread; see the module docstring."""

    def __init__(self, config: MetricsConfig, channel: grpc.Channel | None = None) -> None:
        """Starts the sender thread. ``channel`` replaces the one built from ``config`` (tests).

        Raises:
            ValueError: ``config`` names no endpoint and no ``channel`` is given.
        """
        if channel is None:
            if config.endpoint is None:
                raise ValueError("GrpcSink needs config.endpoint or a channel")
            channel = _channel(config)
        self._config = config
        self._channel = channel
        # Requests go out as the bytes tf_hooks.wire writes: no serializer.
        self._report = channel.stream_unary(_REPORT_METHOD, response_deserializer=metrics_pb2.ReportAck.FromString)
        self._metadata = (("authorization", f"Bearer {config.token}"),) if config.token else ()
        self._job_id = config.job_id or ""
        self._instance = config.instance
        self._boot = f"{os.getpid():x}-{time.time_ns() // 1_000_000:x}"

        self._lock = threading.Lock()
        self._pull_lock = threading.Lock()
        self._sources: list[Callable[[], list[StepRecord | int]]] = []
        self._settled = threading.Condition(self._lock)
        self._queue: deque[_Queued] = deque()
        self._inflight: list[_Flight] = []
        self._inflight_points = 0
        self._ring: tuple[int, int] | None = None
        self._generation = 0
        self._incarnation = ""
        self._seq = 0
        self._recorded = 0
        self._acked = 0
        self._dropped = 0
        self._rejected = 0
        self._duplicates = 0
        self._streams = 0
        self._failed_streams = 0
        self._reachable = True  # until a send says otherwise
        self._flushing = 0  # callers waiting in flush(): send what is queued without waiting for the interval
        self._last_error: str | None = None
        self._closed = False
        self._warned: set[str] = set()

        self._wake = threading.Event()
        self._closing = threading.Event()
        self._abandon = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tf-hooks-metrics-sender", daemon=True)
        self._thread.start()

    # -- training thread ----------------------------------------------------------------------

    def record(self, record: StepRecord) -> None:
        self._record(record, 0)

    def _record(self, record: StepRecord, lost_before: int) -> None:
        """Queues ``record``; ``lost_before`` records that a source lost just before it are counted as
        dropped and leave a gap in its incarnation's seq numbers."""
        ring = (record.rank, record.world_size)
        with self._lock:
            self._recorded += lost_before
            self._dropped += lost_before
            if self._closed:
                self._recorded += 1
                self._dropped += 1
                return
            if ring != self._ring:
                self._ring = ring
                self._generation += 1
                self._incarnation = f"{self._boot}.{self._generation}"
                self._seq = 0
            self._seq += lost_before + 1
            queue = self._queue
            if len(queue) >= self._config.queue_size:
                queue.popleft()
                self._dropped += 1
            # tuple.__new__: a NamedTuple's own constructor costs the training thread 0.4 µs more
            queue.append(tuple.__new__(_Queued, (self._recorded, self._incarnation, self._seq, record)))
            self._recorded += 1
            full = len(queue) >= self._config.max_batch_points
        if full:
            self._wake.set()

    # -- any thread -----------------------------------------------------------------------------

    def add_source(self, drain: Callable[[], list[StepRecord | int]]) -> Callable[[], None]:
        with self._lock:
            self._sources.append(drain)
        return self._wake.set

    def _pull(self) -> None:
        """Moves what the sources hold into the queue, in order; one caller at a time."""
        with self._pull_lock:
            for drain in self._sources:
                lost = 0
                for item in drain():
                    if isinstance(item, int):
                        lost += item
                    else:
                        self._record(item, lost)
                        lost = 0
                if lost:  # nothing kept after them: counted now, the gap shows with the next record
                    with self._lock:
                        self._recorded += lost
                        self._dropped += lost
                        self._seq += lost

    def flush(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        self._pull()
        with self._settled:
            target = self._recorded
            failures = self._failed_streams
            self._flushing += 1
            self._wake.set()
            try:
                while self._oldest_pending() < target:
                    remaining = deadline - time.monotonic()
                    stalled = not self._reachable or self._failed_streams > failures
                    if remaining <= 0 or stalled or not self._thread.is_alive():
                        return False
                    self._settled.wait(min(remaining, 0.5))
            finally:
                self._flushing -= 1
        return True

    def close(self, timeout: float) -> SenderStats:
        self._pull()
        with self._lock:
            already = self._closed
            self._closed = True
        if not already:
            self._closing.set()
            self._wake.set()
            self._thread.join(timeout)
            if self._thread.is_alive():
                self._abandon.set()
                self._channel.close()  # cancels a call in progress
                self._thread.join(2.0)
            self._channel.close()
        return self.stats()

    def stats(self) -> SenderStats:
        with self._lock:
            return SenderStats(
                recorded=self._recorded,
                acked=self._acked,
                dropped=self._dropped,
                rejected=self._rejected,
                pending=len(self._queue) + self._inflight_points,
                duplicates=self._duplicates,
                streams=self._streams,
                failed_streams=self._failed_streams,
                incarnation=self._incarnation,
                last_error=self._last_error,
            )

    def _oldest_pending(self) -> int:
        """Index of the oldest record not yet settled (``_recorded`` when none); holds the lock."""
        if self._inflight:
            return self._inflight[0].orders[0]
        if self._queue:
            return self._queue[0].order
        return self._recorded

    # -- sender thread --------------------------------------------------------------------------

    def _run(self) -> None:
        config = self._config
        try:
            while not self._abandon.is_set():
                self._pull()
                with self._lock:
                    pending = bool(self._queue or self._inflight)
                if not pending and self._closing.is_set():
                    break
                self._wake.wait(config.flush_interval)
                self._wake.clear()
                try:
                    self._send_with_retries()
                except Exception:
                    if self._abandon.is_set():
                        break  # close() gave up waiting and closed the channel under a send
                    # A bug here must not end reporting for the rest of the run.
                    logger.exception("metrics sender failed; retrying after %.1f s", config.backoff_max)
                    self._abandon.wait(config.backoff_max)
        finally:
            with self._settled:
                self._dropped += len(self._queue) + self._inflight_points
                self._queue.clear()
                self._inflight.clear()
                self._inflight_points = 0
                self._settled.notify_all()

    def _send_with_retries(self) -> None:
        config = self._config
        retrying = Retrying(
            retry=retry_if_exception_type(_Retryable),
            wait=wait_exponential(multiplier=config.backoff_initial, max=config.backoff_max)
            + wait_random(0, config.backoff_initial),
            stop=stop_when_event_set(self._abandon),
            sleep=self._sleep,
        )
        try:
            for attempt in retrying:
                with attempt:
                    self._send_once()
        except RetryError:
            pass  # abandoned while the service was unreachable; _run counts what is left as dropped

    def _sleep(self, seconds: float) -> None:
        self._abandon.wait(seconds)

    def _send_once(self) -> None:
        config = self._config
        self._pull()
        with self._lock:
            room = config.max_stream_points - self._inflight_points
            taken = [self._queue.popleft() for _ in range(min(room, len(self._queue)))]
        flights = self._build(taken)
        with self._lock:
            self._inflight.extend(flights)
            self._inflight_points += sum(len(f.orders) for f in flights)
            # While the service is unreachable, probe with one batch instead of sending them all.
            sending = self._inflight[: None if self._reachable else 1]
        if not sending:
            return
        try:
            ack = self._report(
                iter([f.payload() for f in sending]), timeout=config.rpc_timeout, metadata=self._metadata
            )
        except grpc.RpcError as e:
            self._failed(e, sending)
            return
        with self._settled:
            self._streams += 1
            self._reachable = True
            self._duplicates += ack.duplicates
            last_seq = ack.last_seq
            keep = []
            for flight in self._inflight:
                held = last_seq.get(flight.key, 0)
                done = bisect.bisect_right(flight.seqs, held)
                if done:
                    self._acked += done
                    self._inflight_points -= done
                    if done < len(flight.seqs):
                        del flight.points[:done], flight.orders[:done], flight.seqs[:done]
                if done < len(flight.seqs):
                    keep.append(flight)
            self._inflight = keep
            self._settled.notify_all()
            more = bool(
                self._inflight
                or len(self._queue) >= config.max_batch_points
                or (self._queue and (self._flushing or self._closing.is_set()))
            )
        if more:
            self._wake.set()

    def _failed(self, error: grpc.RpcError, sent: Sequence[_Flight]) -> None:
        code = error.code() if isinstance(error, grpc.Call) else None
        details = (error.details() if isinstance(error, grpc.Call) else None) or str(error)
        message = f"{code.name if code else 'error'}: {details}"
        with self._settled:
            self._failed_streams += 1
            self._last_error = message
            self._settled.notify_all()
        if code in (
            grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.UNAUTHENTICATED,
            grpc.StatusCode.PERMISSION_DENIED,
        ):
            # Sending the same points again cannot succeed: count them and move on.
            count = sum(len(f.orders) for f in sent)
            with self._settled:
                self._reachable = True
                self._rejected += count
                self._inflight_points -= count
                self._inflight = [f for f in self._inflight if not any(f is g for g in sent)]
                self._settled.notify_all()
            self._warn_once(code.name, "metrics service rejected %d points (%s)", count, message)
            if code is not grpc.StatusCode.INVALID_ARGUMENT:
                self._abandon.wait(self._config.backoff_max)
            return
        with self._settled:
            self._reachable = False
            self._settled.notify_all()
        self._warn_once("unavailable", "metrics service unreachable, retrying in the background (%s)", message)
        raise _Retryable(message)

    def _warn_once(self, kind: str, msg: str, *args: object) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            logger.warning(msg, *args)

    def _build(self, taken: Sequence[_Queued]) -> list[_Flight]:
        """Batches of consecutive records of one (incarnation, rank, world size), ``max_batch_points``
        at most, encoded once; lazy values are evaluated here (once per object and call)."""
        limit = self._config.max_batch_points
        cache: dict[int, float | None] = {}
        flights: list[_Flight] = []
        current: _Flight | None = None
        header: tuple[str, int, int] | None = None
        for queued in taken:
            r = queued.record
            world_size = r.world_size if r.world_size >= 1 else 1
            rank = r.rank if 0 <= r.rank < world_size else 0
            if current is None or header != (queued.incarnation, rank, world_size) or len(current.orders) >= limit:
                header = (queued.incarnation, rank, world_size)
                current = _Flight(
                    wire.header(self._job_id, self._instance, rank, queued.incarnation, world_size),
                    f"{self._job_id}/{self._instance}/{queued.incarnation}",
                )
                flights.append(current)
            try:
                current.points.append(self._encode(queued, cache))
            except Exception:
                logger.debug("a step record could not be turned into a point; omitted", exc_info=True)
                self._warn_once("record", "a step record could not be turned into a point; omitted")
                with self._settled:
                    self._rejected += 1
                continue
            current.orders.append(queued.order)
            current.seqs.append(queued.seq)
        return [f for f in flights if f.orders]

    def _encode(self, queued: _Queued, cache: dict[int, float | None]) -> bytes:
        """The record as a point the service accepts: values outside its rules are left out (optional
        ones) or replaced (a bad wall time by now). Raises for a record that cannot be a point.

        Plain in-range floats, the common case, take the short paths."""
        step, wall_time, _, _, loss, eps, step_time, batch_size, learning_rate, user_metrics = queued.record
        step = int(step)
        if step < 0:
            step = 0
        elif step > _MAX_INT64:
            raise ValueError(f"step {step} does not fit a point")
        wall_time = float(wall_time)
        if not 0 < wall_time <= _MAX_ABS:
            wall_time = time.time()
        if loss is not None and not (loss.__class__ is float and -_MAX_ABS <= loss <= _MAX_ABS):
            loss = self._number(loss, cache)
        if learning_rate is not None and not (learning_rate.__class__ is float and 0 <= learning_rate <= _MAX_ABS):
            learning_rate = self._number(learning_rate, cache)
            if learning_rate is not None and learning_rate < 0:
                learning_rate = None
        user: list[tuple[str, float]] = []
        if user_metrics:
            for key, lazy in user_metrics.items():
                if len(user) >= _MAX_USER_METRICS:
                    break
                if _metric_name_ok(key):
                    value = self._number(lazy, cache)
                    if value is not None:
                        user.append((key, value))
        return wire.point(
            queued.seq,
            step,
            wall_time,
            loss,
            float(eps) if eps is not None and 0 <= eps <= _MAX_ABS else None,
            float(step_time) if step_time is not None and 0 <= step_time <= _MAX_ABS else None,
            min(int(batch_size), _MAX_INT64) if batch_size is not None and batch_size >= 1 else None,
            learning_rate,
            user,
        )

    def _number(self, value: Any, cache: dict[int, float | None]) -> float | None:
        """A finite float within the service's range, or None (absent) for anything else."""
        if value is None:
            return None
        if isinstance(value, (float, int)):
            number = float(value)
        else:
            key = id(value)
            if key in cache:
                return cache[key]
            try:
                if callable(value):
                    value = value()
                    if value is None:  # e.g. a learning rate the model does not have
                        cache[key] = None
                        return None
                number = float(value)
            except Exception:
                logger.debug("a metric value could not be turned into a number; omitted", exc_info=True)
                self._warn_once("conversion", "a metric value could not be turned into a number; omitted")
                number = math.nan
            cache[key] = number if math.isfinite(number) and -_MAX_ABS <= number <= _MAX_ABS else None
            return cache[key]
        return number if math.isfinite(number) and -_MAX_ABS <= number <= _MAX_ABS else None


def _metric_name_ok(name: str) -> bool:
    return (
        isinstance(name, str)
        and 0 < len(name) <= 64
        and not name[0].isdigit()
        and name[0] != "."
        and set(name) <= _USER_METRIC_CHARS
    )


def _channel(config: MetricsConfig) -> grpc.Channel:
    endpoint = config.endpoint or ""
    if config.tls:
        credentials = grpc.ssl_channel_credentials(root_certificates=config.tls_ca)
        return grpc.secure_channel(endpoint, credentials, options=_CHANNEL_OPTIONS)
    return grpc.insecure_channel(endpoint, options=_CHANNEL_OPTIONS)
