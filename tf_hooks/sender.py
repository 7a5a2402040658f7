"""The gRPC sink: a bounded queue filled by the training thread and a background thread that streams it.

Delivery: every flush interval (or sooner when a stream's worth, ``max_stream_points``, waits) the
sender takes up to ``max_stream_points`` steps off the queue, sends them as one client-streaming
``Report`` call (in batches cut to the service's ``MAX_REPORT_MESSAGE_BYTES``, of at most
``MAX_ACK_KEYS`` incarnations a call) and forgets them once the answer acknowledges their seq. A call costs the client
about a millisecond of CPU whatever it carries, so the defaults send few, large calls (one a second).
When the call fails the steps stay "in flight" and are sent again, first, on the next attempt; the
service ignores the ones it already holds. While the service is unreachable the queue keeps the
newest ``queue_size`` steps and counts the older ones it drops; the sender retries with exponential
backoff (tenacity) and resumes where it was.

Steps come in two ways: :meth:`GrpcSink.record`, one :class:`StepRecord` at a time, which only
appends to a bounded deque, or in bulk from a source (``add_source``): the Keras callback keeps its
own deque of raw steps. Either way the sender thread takes them in (``_pull``) and works column by
column: a :class:`StepBlock` per run of steps with one (rank, world size), values outside the
service's rules made absent with a few NumPy operations, and each batch written as one
``StepColumns`` message (``tf_hooks.wire``), so the per-step work left is a handful of list
comprehensions. Nothing of this runs on the training thread.

Seq numbers count up from 1 per incarnation, and the incarnation changes whenever the worker's
(rank, world size) does, i.e. when Horovod re-forms the ring, and with every new process.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import grpc
import numpy as np
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception_type,
    stop_when_event_set,
    wait_exponential,
    wait_random,
)

from submarine_elastic import env
from submarine_elastic.limits import (
    MAX_ABS_VALUE,
    MAX_ACK_KEYS,
    MAX_BATCH_SIZE,
    MAX_INT64,
    MAX_REPORT_MESSAGE_BYTES,
    MAX_USER_METRICS,
    STEP_FLOAT_BOUNDS,
    USER_METRIC,
)
from submarine_elastic.metrics.proto import metrics_pb2
from submarine_elastic.rpc import InsecureChannelError, bearer, open_channel
from tf_hooks import wire
from tf_hooks.api import MetricsSink, NullSink, SenderStats, StepBlock, StepRecord, as_floats
from tf_hooks.config import MetricsConfig

logger = logging.getLogger(__name__)


# The channel's own reconnect backoff (gRPC's default grows to 120 s) must not outlast ours.
_CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)


_SERVICE = metrics_pb2.DESCRIPTOR.services_by_name["MetricsService"]
_REPORT_METHOD = f"/{_SERVICE.full_name}/{_SERVICE.methods_by_name['Report'].name}"


class _Chunk:
    """Queued steps of one incarnation and ring position, column by column (row ``i`` is one step).

    Values already satisfy the service's rules. Within an incarnation a step's place in the order
    of records (what :meth:`GrpcSink.flush` waits for) is its seq plus ``offset``.
    """

    __slots__ = ("incarnation", "offset", "optional", "rank", "seq", "step", "user", "wall_time", "world_size")

    def __init__(
        self,
        incarnation: str,
        rank: int,
        world_size: int,
        offset: int,
        seq: np.ndarray,
        step: np.ndarray,
        wall_time: np.ndarray,
        optional: dict[str, np.ndarray | None],
        user: list[tuple[str, np.ndarray]],
    ) -> None:
        self.incarnation = incarnation
        self.rank = rank
        self.world_size = world_size
        self.offset = offset
        self.seq = seq
        self.step = step
        self.wall_time = wall_time
        self.optional = optional  # loss, examples_per_second, ...; None: absent throughout
        self.user = user

    def __len__(self) -> int:
        return len(self.seq)

    @property
    def first_order(self) -> int:
        return int(self.seq[0]) + self.offset

    def rows(self, start: int, stop: int | None = None) -> _Chunk:
        """Rows ``start:stop`` (views, no copy)."""
        cut = slice(start, stop)
        return _Chunk(
            self.incarnation,
            self.rank,
            self.world_size,
            self.offset,
            self.seq[cut],
            self.step[cut],
            self.wall_time[cut],
            {k: None if v is None else v[cut] for k, v in self.optional.items()},
            [(name, values[cut]) for name, values in self.user],
        )


class _Flight:
    """One ``ReportBatch`` waiting for its acknowledgement; sent again (rows not yet held) until it comes."""

    __slots__ = ("_payload", "chunk", "header", "key")

    def __init__(self, header: bytes, key: str, chunk: _Chunk) -> None:
        self.header = header
        self.key = key
        self.chunk = chunk
        self._payload: bytes | None = None

    def payload(self) -> bytes:
        if self._payload is None:
            c = self.chunk
            self._payload = self.header + wire.columns(c.seq, c.step, c.wall_time, c.optional, c.user)
        return self._payload

    def settle(self, held: int) -> int:
        """Forgets the rows whose seq is at most ``held``; returns how many."""
        done = int(np.searchsorted(self.chunk.seq, held, side="right"))
        if done:
            self.chunk = self.chunk.rows(done)
            self._payload = None
        return done


class _Retryable(Exception):
    """A stream failed for a reason that may pass (service down, slow, restarting)."""


def make_sink(config: MetricsConfig) -> MetricsSink:
    """A :class:`GrpcSink` for ``config``, or a :class:`NullSink` when it names no endpoint; with a
    ``tensorboard_dir``, beside a :class:`~tf_hooks.tensorboard.TensorBoardSink` writing rank 0's steps there.

    Never blocks: connecting happens in the sender thread.
    """
    sink = _service_sink(config)
    if config.tensorboard_dir is None:
        return sink
    from tf_hooks.tensorboard import FanoutSink, TensorBoardSink

    board = TensorBoardSink(config.tensorboard_dir, queue_size=config.queue_size)
    return board if isinstance(sink, NullSink) else FanoutSink(sink, board, queue_size=config.queue_size)


def _service_sink(config: MetricsConfig) -> MetricsSink:
    if not config.enabled:
        return NullSink()
    try:
        return GrpcSink(config)
    except (InsecureChannelError, ValueError, OSError) as exc:
        # Training goes on without metrics rather than send its token in plaintext.
        logger.error("metrics are not reported: %s", exc)
        return NullSink()


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
        self._metadata = bearer(config.token)
        self._job_id = config.job_id or ""
        self._instance = config.instance
        self._boot = f"{os.getpid():x}-{time.time_ns() // 1_000_000:x}"

        self._lock = threading.Lock()
        self._pull_lock = threading.Lock()
        self._settled = threading.Condition(self._lock)
        # record(): (index, record) pairs; a gap in the indexes is records the full deque dropped.
        self._records: deque[tuple[int, StepRecord]] = deque(maxlen=config.queue_size)
        self._handed = 0  # record() calls; written by the training thread only
        self._next_record = 0  # the index the next drained record should have
        self._pulls_begun = 0
        self._pulls_done = 0
        self._records_wake_at = min(config.max_stream_points, config.queue_size)
        self._sources: list[Callable[[], list[StepBlock | int]]] = [self._drain_records]
        self._queue: deque[_Chunk] = deque()
        self._queued = 0  # rows in _queue
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
        self._closed = False  # record() takes nothing more
        self._finished = False  # the sender thread has stopped
        self._warned: set[str] = set()

        self._wake = threading.Event()
        self._closing = threading.Event()
        self._abandon = threading.Event()
        self._retrying = Retrying(  # used by the sender thread only
            retry=retry_if_exception_type(_Retryable),
            wait=wait_exponential(multiplier=config.backoff_initial, max=config.backoff_max)
            + wait_random(0, config.backoff_initial),
            stop=stop_when_event_set(self._abandon),
            sleep=self._sleep,
        )
        self._thread = threading.Thread(target=self._run, name="tf-hooks-metrics-sender", daemon=True)
        self._thread.start()

    # -- training thread ----------------------------------------------------------------------

    def record(self, record: StepRecord) -> None:
        if self._closed:
            with self._lock:
                self._recorded += 1
                self._dropped += 1
            return
        records = self._records
        records.append((self._handed, record))
        self._handed += 1
        if len(records) == self._records_wake_at:
            self._wake.set()

    # -- any thread -----------------------------------------------------------------------------

    def add_source(self, drain: Callable[[], list[StepBlock | int]]) -> Callable[[], None]:
        with self._pull_lock:
            self._sources.append(drain)
        return self._wake.set

    def _pull(self) -> None:
        """Moves what record() and the sources hold into the queue, in order. Runs on the sender thread
        only, so that converting values (a tensor's, a learning rate's) never costs the caller."""
        with self._pull_lock:
            with self._lock:
                self._pulls_begun += 1
                this = self._pulls_begun
            for drain in self._sources:
                lost = 0
                try:
                    items = drain()
                except Exception:  # a source's bug must not stop the others or the sender
                    logger.debug("a metrics source failed", exc_info=True)
                    self._warn_once("source", "a metrics source failed; its steps are lost")
                    items = []
                for item in items:
                    if isinstance(item, int):
                        lost += item
                        continue
                    try:
                        self._enqueue(item, lost)
                    except Exception:
                        logger.debug("a block of steps could not be queued; omitted", exc_info=True)
                        self._warn_once("block", "a block of steps could not be queued; omitted")
                        with self._lock:
                            self._recorded += lost + len(item)
                            self._dropped += lost
                            self._rejected += len(item)
                            self._seq += lost
                    lost = 0
                if lost:  # nothing kept after them: counted now, the gap shows with the next step
                    with self._lock:
                        self._recorded += lost
                        self._dropped += lost
                        self._seq += lost
            with self._settled:
                self._pulls_done = this
                self._settled.notify_all()

    def _enqueue(self, block: StepBlock, lost_first: int) -> None:
        """Queues ``block`` with seq numbers that skip the steps lost before each row (``lost_first``
        more before its first). Raises ValueError for a block whose columns differ in length."""
        n = len(block)
        if n == 0:
            return
        rank, world_size, step, wall_time, optional, user = _clean(block)
        advance = np.ones(n, dtype=np.int64)
        if block.lost_before is not None:
            advance += np.maximum(np.asarray(block.lost_before, dtype=np.int64), 0)
        advance[0] += max(lost_first, 0)
        seq = np.cumsum(advance, dtype=np.uint64)
        lost = int(seq[-1]) - n
        ring = (block.rank, block.world_size)
        with self._lock:
            if self._finished:  # the sender has stopped: nothing more goes out
                self._recorded += lost + n
                self._dropped += lost + n
                return
            if ring != self._ring:
                self._ring = ring
                self._generation += 1
                self._incarnation = f"{self._boot}.{self._generation}"
                self._seq = 0
            offset = self._recorded - self._seq - 1
            seq += np.uint64(self._seq)
            self._seq = int(seq[-1])
            self._recorded += lost + n
            self._dropped += lost
            self._queue.append(
                _Chunk(self._incarnation, rank, world_size, offset, seq, step, wall_time, optional, user)
            )
            self._queued += n
            # The queue and record()'s deque, whose records are newer, keep the newest queue_size.
            excess = self._queued + len(self._records) - self._config.queue_size
            while excess > 0 and self._queue:
                head = self._queue[0]
                if len(head) <= excess:
                    self._queue.popleft()
                    cut = len(head)
                else:
                    self._queue[0] = head.rows(excess)
                    cut = excess
                self._queued -= cut
                self._dropped += cut
                excess -= cut
            full = self._queued >= self._config.max_stream_points
        if full:
            self._wake.set()

    def _drain_records(self) -> list[StepBlock | int]:
        """What record() queued, as blocks of consecutive records of one (rank, world size)."""
        records = self._records
        popleft = records.popleft
        items = [popleft() for _ in range(len(records))]
        if not items:
            return []
        out: list[StepBlock | int] = []
        index = np.fromiter((i for i, _ in items), dtype=np.int64, count=len(items))
        lost = np.diff(index, prepend=self._next_record - 1) - 1
        self._next_record = int(index[-1]) + 1
        cache: dict[int, float] = {}  # lazy values called once per drain
        start = 0
        for stop in [*(i for i in range(1, len(items)) if items[i][1][2:4] != items[i - 1][1][2:4]), len(items)]:
            run = [record for _, record in items[start:stop]]
            try:
                items_of_run, rejected = _block_of(run, lost[start:stop], cache)
            except Exception:  # a record of the wrong shape: its run cannot be points
                logger.debug("step records could not be turned into points", exc_info=True)
                items_of_run, rejected = [int(lost[start:stop].sum())], len(run)
            if rejected:
                self._warn_once("record", "%d step records could not be turned into points; omitted", rejected)
                with self._lock:
                    self._recorded += rejected
                    self._rejected += rejected
            out.extend(items_of_run)
            start = stop
        return out

    def flush(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._settled:
            pulled = self._pulls_begun + 1  # the sender's next pull takes in what was handed over until now
            failures = self._failed_streams
            self._flushing += 1
            self._wake.set()
            try:
                while self._pulls_done < pulled:
                    remaining = deadline - time.monotonic()
                    stalled = not self._reachable or self._failed_streams > failures
                    if remaining <= 0 or stalled or not self._thread.is_alive():
                        return False
                    self._settled.wait(min(remaining, 0.5))
                target = self._recorded
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
        if self._finished:
            self._pull()  # count what sources got after the end as dropped
        with self._pull_lock, self._lock:  # not halfway through a pull: every count settled
            handed = self._handed - self._next_record  # to record(), not yet taken in
            waiting = min(handed, len(self._records))  # the rest the full deque has dropped
            return SenderStats(
                recorded=self._recorded + handed,
                acked=self._acked,
                dropped=self._dropped + handed - waiting,
                rejected=self._rejected,
                pending=self._queued + self._inflight_points + waiting,
                duplicates=self._duplicates,
                streams=self._streams,
                failed_streams=self._failed_streams,
                incarnation=self._incarnation,
                last_error=self._last_error,
            )

    def _oldest_pending(self) -> int:
        """Index of the oldest record not yet settled (``_recorded`` when none); holds the lock."""
        if self._inflight:
            return self._inflight[0].chunk.first_order
        if self._queue:
            return self._queue[0].first_order
        return self._recorded

    # -- sender thread --------------------------------------------------------------------------

    def _run(self) -> None:
        config = self._config
        try:
            while not self._abandon.is_set():
                if self._closing.is_set():
                    self._pull()
                    with self._lock:
                        if not (self._queue or self._inflight):
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
            self._pull()  # what was handed over before close() or is left after abandoning: counted below
            with self._settled:
                self._finished = True
                self._dropped += self._queued + self._inflight_points
                self._queue.clear()
                self._queued = 0
                self._inflight.clear()
                self._inflight_points = 0
                self._settled.notify_all()

    def _send_with_retries(self) -> None:
        try:
            for attempt in self._retrying:  # each loop starts afresh (tenacity resets its state)
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
            self._take(config.max_stream_points - self._inflight_points)
            # While the service is unreachable, probe with one batch instead of sending them all.
            sending = _within_ack(self._inflight[: None if self._reachable else 1])
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
                done = flight.settle(last_seq.get(flight.key, 0))
                self._acked += done
                self._inflight_points -= done
                if len(flight.chunk):
                    keep.append(flight)
            self._inflight = keep
            self._settled.notify_all()
            more = bool(
                self._inflight
                or self._queued >= config.max_stream_points
                or (self._queue and (self._flushing or self._closing.is_set()))
            )
        if more:
            self._wake.set()

    def _take(self, room: int) -> None:
        """Moves up to ``room`` of the oldest queued steps in flight, as batches of at most
        ``max_batch_points``; holds the lock (so a flush never sees them in neither place)."""
        while room > 0 and self._queue:
            head = self._queue.popleft()
            if len(head) > room:
                self._queue.appendleft(head.rows(room))
                head = head.rows(0, room)
            room -= len(head)
            self._queued -= len(head)
            self._inflight_points += len(head)
            header = wire.header(self._job_id, self._instance, head.rank, head.incarnation, head.world_size)
            key = f"{self._job_id}/{self._instance}/{head.incarnation}"
            limit = min(self._config.max_batch_points, _rows_that_fit(header, head))
            for start in range(0, len(head), limit):
                self._inflight.append(_Flight(header, key, head.rows(start, start + limit)))

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
            count = sum(len(f.chunk) for f in sent)
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


def _within_ack(flights: list[_Flight]) -> list[_Flight]:
    """The first of ``flights`` that touch at most ``MAX_ACK_KEYS`` keys: what one stream may carry."""
    keys: set[str] = set()
    for i, flight in enumerate(flights):
        if flight.key not in keys:
            if len(keys) == MAX_ACK_KEYS:
                return flights[:i]
            keys.add(flight.key)
    return flights


#: Bytes a packed column costs besides its values: its tag and length (a length of up to 5 bytes).
_COLUMN_FRAME_BYTES = 6


def _rows_that_fit(header: bytes, chunk: _Chunk) -> int:
    """How many rows of ``chunk`` one ``ReportBatch`` with ``header`` holds within MAX_REPORT_MESSAGE_BYTES
    (at least 1: a single step of 32 user metrics is a few KiB)."""
    columns = 3 + sum(values is not None for values in chunk.optional.values()) + len(chunk.user)
    fixed = len(header) + _COLUMN_FRAME_BYTES * (1 + columns)
    fixed += sum(3 * _COLUMN_FRAME_BYTES + len(name.encode()) for name, _ in chunk.user)
    return max(1, (MAX_REPORT_MESSAGE_BYTES - fixed) // (8 * columns))


def _kept(values: np.ndarray | None, bounds: tuple[str, float, bool, float], n: int) -> np.ndarray | None:
    """``values`` with what breaks the service's rules (NaN, infinite, out of ``bounds``) made absent
    (NaN); None when no value is left."""
    if values is None:
        return None
    name, low, closed, high = bounds
    array = np.asarray(values, dtype=np.float64)
    if array.shape != (n,):
        raise ValueError(f"column {name} has shape {array.shape}, the block has {n} steps")
    ok = ((array >= low) if closed else (array > low)) & (array <= high)
    if ok.all():
        return array
    if not ok.any():
        return None
    return np.where(ok, array, np.nan)


def _clean(
    block: StepBlock,
) -> tuple[int, int, np.ndarray, np.ndarray, dict[str, np.ndarray | None], list[tuple[str, np.ndarray]]]:
    """``block``'s ring position and columns (step, wall time, the optional ones, user metrics) as the
    service takes them: steps below 0 become 0, a bad wall time becomes now, other values outside the
    rules become absent, user metrics with bad names and those after the first 32 are left out.

    Raises:
        ValueError: a column's length differs from the block's.
    """
    n = len(block)
    world_size = block.world_size if block.world_size >= 1 else 1
    rank = block.rank if 0 <= block.rank < world_size else 0
    step = np.maximum(np.asarray(block.step, dtype=np.int64), 0)
    wall_time = np.asarray(block.wall_time, dtype=np.float64)
    if step.shape != (n,) or wall_time.shape != (n,):
        raise ValueError(f"step and wall_time need {n} values, got {step.shape} and {wall_time.shape}")
    bad = ~((wall_time > 0) & (wall_time <= MAX_ABS_VALUE))
    if bad.any():
        wall_time = np.where(bad, time.time(), wall_time)
    optional: dict[str, np.ndarray | None] = {
        bounds[0]: _kept(getattr(block, bounds[0]), bounds, n) for bounds in STEP_FLOAT_BOUNDS
    }
    batch_size = None
    if block.batch_size is not None:
        batch_size = np.asarray(block.batch_size, dtype=np.int64)
        if batch_size.shape != (n,):
            raise ValueError(f"column batch_size has shape {batch_size.shape}, the block has {n} steps")
        usable = (batch_size > 0) & (batch_size <= MAX_BATCH_SIZE)
        batch_size = np.where(usable, batch_size, 0) if usable.any() else None
    optional["batch_size"] = batch_size
    user: list[tuple[str, np.ndarray]] = []
    for name, values in block.user_metrics.items():
        if len(user) >= MAX_USER_METRICS:
            break
        if USER_METRIC.matches(name):
            kept = _kept(values, (name, -MAX_ABS_VALUE, True, MAX_ABS_VALUE), n)
            if kept is not None:
                user.append((name, kept))
    return rank, world_size, step, wall_time, optional, user


def _block_of(
    records: Sequence[StepRecord], lost: np.ndarray, cache: dict[int, float]
) -> tuple[list[StepBlock | int], int]:
    """Records of one (rank, world size) as a drain's items, and how many could not be a point (a
    step that is not an integer below 2**63: counted as rejected, taking no seq number)."""
    (
        steps,
        wall_time,
        ranks,
        world_sizes,
        loss,
        eps,
        step_time,
        batch_size,
        learning_rate,
        user,
        sq_norm,
        variance,
        noise_scale,
    ) = zip(*records, strict=True)
    keep = None
    try:
        step = np.array(steps, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        keep = np.array([_fits_int64(s) for s in steps], dtype=bool)
        step = np.array([int(s) if k else 0 for s, k in zip(steps, keep, strict=True)], dtype=np.int64)
    sizes = as_floats(batch_size)
    sizes_ok = (sizes >= 1) & (sizes <= MAX_BATCH_SIZE)
    names = dict.fromkeys(k for metrics in user if metrics for k in metrics if isinstance(k, str))
    block = StepBlock(
        rank=ranks[0],
        world_size=world_sizes[0],
        step=step,
        wall_time=as_floats(wall_time),
        loss=as_floats(loss, cache),
        examples_per_second=as_floats(eps),
        step_time_seconds=as_floats(step_time),
        batch_size=np.where(sizes_ok, sizes, 0).astype(np.int64) if sizes_ok.any() else None,
        learning_rate=as_floats(learning_rate, cache),
        user_metrics={name: as_floats([m.get(name) if m else None for m in user], cache) for name in names},
        grad_sq_norm=_present(sq_norm, cache),
        grad_variance=_present(variance, cache),
        gradient_noise_scale=_present(noise_scale, cache),
        lost_before=lost,
    )
    if keep is None:
        return [block], 0
    rejected = int((~keep).sum())
    lost_so_far = np.cumsum(lost)
    if not keep.any():
        return [int(lost_so_far[-1])], rejected
    # The steps lost before a rejected record move to the next kept one (or after the block).
    kept_lost = np.diff(lost_so_far[keep], prepend=0)
    trailing = int(lost_so_far[-1] - lost_so_far[keep][-1])
    block = dataclasses.replace(
        block,
        step=step[keep],
        wall_time=block.wall_time[keep],
        loss=_rows(block.loss, keep),
        examples_per_second=_rows(block.examples_per_second, keep),
        step_time_seconds=_rows(block.step_time_seconds, keep),
        batch_size=_rows(block.batch_size, keep),
        learning_rate=_rows(block.learning_rate, keep),
        user_metrics={name: values[keep] for name, values in block.user_metrics.items()},
        grad_sq_norm=_rows(block.grad_sq_norm, keep),
        grad_variance=_rows(block.grad_variance, keep),
        gradient_noise_scale=_rows(block.gradient_noise_scale, keep),
        lost_before=kept_lost,
    )
    return [block, trailing] if trailing else [block], rejected


def _present(values: tuple[Any, ...], cache: dict[int, float]) -> np.ndarray | None:
    """``values`` as floats, or None when every one is None (the usual case: a column costs nothing then)."""
    if values.count(None) == len(values):
        return None
    return as_floats(values, cache)


def _rows(column: np.ndarray | None, keep: np.ndarray) -> np.ndarray | None:
    return None if column is None else column[keep]


def _fits_int64(value: Any) -> bool:
    try:
        return int(value) <= MAX_INT64
    except (TypeError, ValueError, OverflowError):
        return False


def _channel(config: MetricsConfig) -> grpc.Channel:
    """TLS when the config has a CA (or the system's), with the job's client certificate when its
    container has one; plaintext only under ``SUBMARINE_INSECURE``.

    Raises:
        InsecureChannelError: no CA and plaintext not asked for.
        ValueError, OSError: the client certificate's variables are unusable.
    """
    return open_channel(
        config.endpoint or "",
        ca=config.tls_ca,
        tls=config.tls,
        client_cert=env.settings().read_metrics_tls_client(),
        insecure=env.settings().insecure,
        options=_CHANNEL_OPTIONS,
    )
