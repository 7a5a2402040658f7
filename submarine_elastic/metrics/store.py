"""In-memory :class:`MetricsStore`: a ring of recent points per job plus rolling aggregates."""

from __future__ import annotations

import itertools
import operator
import statistics
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from submarine_elastic.metrics.api import (
    BYTES_PER_KEPT_POINT,
    MAX_CONFIGURATIONS,
    MAX_JOBS,
    MAX_REJECTION_CHARS,
    MAX_RESIZE_PAUSE_S,
    MAX_STEPS_PER_SECOND,
    MAX_THROUGHPUT_SIZES,
    RECENT_POINTS,
    RESIZE_PAUSES,
    SEQ_WINDOW,
    STEP_TIME_SAMPLES,
    WARM_UP_STEPS,
    WATCH_BUFFER_BYTES,
    WATCH_BUFFERS_BYTES,
    ConfigurationStat,
    IngestResult,
    InvalidPointError,
    JobSummary,
    MetricsStore,
    NoiseEstimate,
    RecentPoint,
    Subscription,
    ThroughputStat,
    UnknownJobError,
)
from submarine_elastic.metrics.proto import metrics_pb2
from submarine_elastic.metrics.steps import STEPS_OVERHEAD_BYTES, Steps
from submarine_elastic.metrics.validation import validate_batch


class _Header(NamedTuple):
    instance: str
    rank: int
    incarnation: str
    world_size: int


class _Chunk(NamedTuple):
    """Steps the store accepted from one batch."""

    header: _Header
    steps: Steps
    received: float


def _recorded(chunk: _Chunk) -> list[metrics_pb2.RecordedPoint]:
    header = chunk.header
    worker = metrics_pb2.WorkerRef(instance=header.instance, rank=header.rank)
    return [
        metrics_pb2.RecordedPoint(
            worker=worker,
            incarnation=header.incarnation,
            world_size=header.world_size,
            point=point,
            received_time=chunk.received,
        )
        for point in chunk.steps.points()
    ]


class _Pending:
    """Steps a subscription has not read yet; the first reader builds the event, outside the store's lock."""

    __slots__ = ("job_id", "chunk", "_event")

    def __init__(self, job_id: str, chunk: _Chunk) -> None:
        self.job_id = job_id
        self.chunk = chunk
        self._event: metrics_pb2.WatchEvent | None = None

    def event(self) -> metrics_pb2.WatchEvent:
        if self._event is None:  # two readers at once both build it; either copy serves
            self._event = metrics_pb2.WatchEvent(job_id=self.job_id, points=_recorded(self.chunk))
        return self._event


class _Throughput:
    __slots__ = ("eps", "step_time", "points")

    def __init__(self) -> None:
        self.eps: float | None = None
        self.step_time: float | None = None
        self.points = 0


class _Configuration:
    """Recent step times of one (world size, per-worker batch) of a job."""

    __slots__ = ("times", "steps")

    def __init__(self) -> None:
        self.times: deque[float] = deque(maxlen=STEP_TIME_SAMPLES)
        self.steps = 0


class _Job:
    """Everything the store holds for one job; guarded by the store's lock."""

    def __init__(self, job_id: str, points: int, max_bytes: int, trend_window: int) -> None:
        self.job_id = job_id
        self.capacity = points
        self.max_bytes = max_bytes
        self.ring: deque[_Chunk] = deque()
        self.ring_points = 0
        self.ring_bytes = 0
        # The newest RECENT_POINTS steps of the ring again, as tuples (RecentPoint), in the ring's order.
        self.recent: deque[RecentPoint] = deque(maxlen=RECENT_POINTS)
        # (instance, incarnation) -> (highest seq held, server time it arrived)
        self.last_seq: OrderedDict[tuple[str, str], tuple[int, float]] = OrderedDict()
        self.seen: OrderedDict[str, float] = OrderedDict()
        # Least recently reported world size first.
        self.throughput: OrderedDict[int, _Throughput] = OrderedDict()
        # (world size, batch size) -> recent step times; least recently reported first.
        self.configurations: OrderedDict[tuple[int, int], _Configuration] = OrderedDict()
        self.noise: NoiseEstimate | None = None
        # rank 0's newest step: (world size, step, wall time); and the pauses of the recent resizes
        self.rank0: tuple[int, int, float] | None = None
        self.resize_pauses: deque[float] = deque(maxlen=RESIZE_PAUSES)
        self.losses: deque[tuple[int, float]] = deque(maxlen=trend_window)
        self.world_size = 0
        self.last_step = 0
        self.last_loss: float | None = None
        self.loss_ema: float | None = None
        self.received = 0
        self.duplicate = 0
        self.rejected = 0
        self.last_rejection = ""
        self.missing = 0
        self.last_update = 0.0


class _Buffered:
    """Bytes of events every subscription of a store holds together (its own lock: readers take events
    outside the store's lock)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._bytes = 0

    def add(self, nbytes: int) -> None:
        with self._lock:
            self._bytes += nbytes

    @property
    def over(self) -> bool:
        return self._bytes > self.limit


class _Subscription(Subscription):
    def __init__(self, store: InMemoryStore, job_id: str | None, capacity: int, buffered: _Buffered) -> None:
        self.job_id = job_id
        self._store = store
        self._events: deque[_Pending] = deque()
        self._capacity = capacity
        self._bytes = 0
        self._buffered = buffered
        self._cond = threading.Condition(threading.Lock())
        self._dropped = 0
        self._closed = False

    @property
    def dropped(self) -> int:
        return self._dropped

    @property
    def closed(self) -> bool:
        return self._closed

    def put(self, event: _Pending) -> None:
        with self._cond:
            if self._closed:
                return
            self._events.append(event)
            self._held(event.chunk.steps.nbytes)
            # Beyond its own bounds, or while all subscriptions together hold too much, a subscription drops
            # its oldest events (keeping the newest one).
            while len(self._events) > 1 and (
                len(self._events) > self._capacity or self._bytes > WATCH_BUFFER_BYTES or self._buffered.over
            ):
                self._held(-self._events.popleft().chunk.steps.nbytes)
                self._dropped += 1
            self._cond.notify()

    def _held(self, nbytes: int) -> None:
        self._bytes += nbytes
        self._buffered.add(nbytes)

    def get(self, timeout: float) -> metrics_pb2.WatchEvent | None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._events and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)
            if not self._events:
                return None
            pending = self._events.popleft()
            self._held(-pending.chunk.steps.nbytes)
        return pending.event()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._events.clear()
            self._held(-self._bytes)
            self._cond.notify_all()
        self._store._unsubscribe(self)


class InMemoryStore(MetricsStore):
    """Keeps at most ``max_jobs`` jobs (evicting the least recently updated) and, per job, its most
    recent points (at most ``points_per_job`` of them in at most ``bytes_per_job`` bytes), the last seq
    of up to ``max_keys_per_job`` (worker, incarnation) keys and the throughput of up to
    ``MAX_THROUGHPUT_SIZES`` world sizes.

    Memory is bounded by ``max_jobs * (bytes_per_job + 2 * max_keys_per_job * KEY_ENTRY_BYTES)`` plus a
    few KiB of aggregates per job, whatever the clients send (``docs/security.md`` gives the figures).

    A point's seq may run ahead of the highest one held for its key by at most ``SEQ_WINDOW`` plus
    ``MAX_STEPS_PER_SECOND`` for every second since that key last delivered; a batch beyond is refused
    (a seq far ahead would make every later genuine point look like a resend).
    """

    def __init__(
        self,
        *,
        max_jobs: int = 256,
        points_per_job: int = 4096,
        bytes_per_job: int | None = None,
        max_keys_per_job: int = 256,
        trend_window: int = 128,
        ema_alpha: float = 0.1,
        activity_window_seconds: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Raises:
        ValueError: a bound is below 1, ``max_jobs`` above ``MAX_JOBS``, ``bytes_per_job`` below 64 KiB,
            ``trend_window`` below 2, or ``ema_alpha`` outside (0, 1].

        ``bytes_per_job`` defaults to ``points_per_job * BYTES_PER_KEPT_POINT`` (at least 64 KiB).
        """
        if bytes_per_job is None:
            bytes_per_job = max(64 * 1024, points_per_job * BYTES_PER_KEPT_POINT)
        for name, value in (
            ("max_jobs", max_jobs),
            ("points_per_job", points_per_job),
            ("max_keys_per_job", max_keys_per_job),
        ):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if max_jobs > MAX_JOBS:
            raise ValueError(
                f"max_jobs must be at most {MAX_JOBS} (ListJobs answers them in one reply), got {max_jobs}"
            )
        if bytes_per_job < 64 * 1024:
            raise ValueError(f"bytes_per_job must be at least 65536, got {bytes_per_job}")
        if trend_window < 2:
            raise ValueError(f"trend_window must be at least 2, got {trend_window}")
        if not 0 < ema_alpha <= 1:
            raise ValueError(f"ema_alpha must be in (0, 1], got {ema_alpha}")
        if activity_window_seconds <= 0:
            raise ValueError(f"activity_window_seconds must be positive, got {activity_window_seconds}")
        self._max_jobs = max_jobs
        self._points_per_job = points_per_job
        self._bytes_per_job = bytes_per_job
        self._max_keys = max_keys_per_job
        self._trend_window = trend_window
        self._alpha = ema_alpha
        self._activity_window = activity_window_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: OrderedDict[str, _Job] = OrderedDict()
        self._subs: list[_Subscription] = []
        self._buffered = _Buffered(WATCH_BUFFERS_BYTES)
        self._rejected_unattributed = 0

    # -- ingest ---------------------------------------------------------------------------------

    def ingest(self, batch: metrics_pb2.ReportBatch) -> IngestResult:
        try:
            steps = validate_batch(batch)
        except InvalidPointError as e:
            self._count_rejected(batch, str(e))
            raise
        worker = batch.worker
        header = _Header(worker.instance, worker.rank, batch.incarnation, batch.world_size)
        key = (header.instance, header.incarnation)
        with self._lock:
            now = self._clock()
            job = self._job_for(batch.job_id)
            held = job.last_seq.get(key)
            last = held[0] if held is not None else 0
            accepted = steps.after(last)
            count = len(accepted)
            if count:
                # A key the store has not seen starts where its first batch does (the service may have
                # restarted under a running worker); the gap before counts as missing within the window.
                base = last if held is not None else int(accepted.seq[0]) - 1
                window = SEQ_WINDOW + (MAX_STEPS_PER_SECOND * max(0.0, now - held[1]) if held is not None else 0)
                if accepted.last_seq - base > window:
                    error = InvalidPointError(
                        "seq",
                        f"{accepted.last_seq} runs {accepted.last_seq - base} past the highest seq held for "
                        f"worker {header.instance!r} incarnation {header.incarnation!r} ({base}); at most "
                        f"{int(window)} is plausible now",
                    )
                    job.rejected += len(steps)
                    job.last_rejection = str(error)[:MAX_REJECTION_CHARS]
                    raise error
            duplicates = len(steps) - count
            job.duplicate += duplicates
            if count:
                first = int(accepted.seq[0])
                before = first - 1 - last
                if held is None and before > SEQ_WINDOW:
                    before = 0  # a key picked up mid-run: what came before it is not known to be lost
                job.missing += before + accepted.last_seq - first + 1 - count
                last = accepted.last_seq
                chunk = _Chunk(header, accepted, now)
                self._keep(job, chunk)
                job.recent.extend(
                    RecentPoint(header.instance, header.rank, header.world_size, *row)
                    for row in accepted.rows(RECENT_POINTS)
                )
                if header.rank == 0:
                    self._track_resizes(job, header.world_size, accepted)
                self._aggregate(job, header.world_size, accepted, self._alpha)
                job.received += count
                job.last_update = now
                job.world_size = header.world_size
                job.last_seq[key] = (last, now)
                job.last_seq.move_to_end(key)
                if len(job.last_seq) > self._max_keys:
                    job.last_seq.popitem(last=False)
                job.seen[header.instance] = now
                job.seen.move_to_end(header.instance)
                if len(job.seen) > self._max_keys:
                    job.seen.popitem(last=False)
                self._jobs.move_to_end(batch.job_id)
                if self._subs:
                    self._publish(batch.job_id, chunk)
            return IngestResult(
                job_id=batch.job_id,
                key=f"{batch.job_id}/{header.instance}/{header.incarnation}",
                accepted=count,
                duplicates=duplicates,
                last_seq=last,
            )

    def _job_for(self, job_id: str) -> _Job:
        job = self._jobs.get(job_id)
        if job is None:
            job = _Job(job_id, self._points_per_job, self._bytes_per_job, self._trend_window)
            self._jobs[job_id] = job
            while len(self._jobs) > self._max_jobs:
                self._jobs.popitem(last=False)
        return job

    @staticmethod
    def _keep(job: _Job, chunk: _Chunk) -> None:
        """Appends ``chunk`` to the job's ring, dropping its oldest steps beyond the ring's capacity in
        points and in bytes."""
        ring = job.ring
        ring.append(chunk)
        job.ring_points += len(chunk.steps)
        job.ring_bytes += chunk.steps.nbytes
        while job.ring_points > job.capacity or job.ring_bytes > job.max_bytes:
            oldest = ring[0]
            size = len(oldest.steps)
            keep = size - (job.ring_points - job.capacity)  # rows of the oldest batch the point bound leaves
            if job.ring_bytes > job.max_bytes:
                if len(ring) > 1:
                    keep = 0
                else:  # one batch alone is over the budget: keep the rows that fit, at least one fewer
                    per_row = max(1, (oldest.steps.nbytes - STEPS_OVERHEAD_BYTES) // size)
                    keep = min(keep, size - 1, (job.max_bytes - STEPS_OVERHEAD_BYTES) // per_row)
            job.ring_bytes -= oldest.steps.nbytes
            if keep <= 0:
                ring.popleft()
                job.ring_points -= size
            else:
                tail = oldest.steps.tail(keep)
                ring[0] = oldest._replace(steps=tail)
                job.ring_points -= size - keep
                job.ring_bytes += tail.nbytes

    @staticmethod
    def _aggregate(job: _Job, world_size: int, steps: Steps, alpha: float) -> None:
        stat = job.throughput.get(world_size)
        if stat is None:
            stat = job.throughput[world_size] = _Throughput()
            if len(job.throughput) > MAX_THROUGHPUT_SIZES:
                job.throughput.popitem(last=False)
        else:
            job.throughput.move_to_end(world_size)
        stat.eps = _ema(stat.eps, steps.values("examples_per_second"), alpha)
        stat.step_time = _ema(stat.step_time, steps.values("step_time_seconds"), alpha)
        stat.points += len(steps)
        losses = steps.values("loss")
        if len(losses):
            job.loss_ema = _ema(job.loss_ema, losses, alpha)
            job.last_loss = float(losses[-1])
            job.losses.extend(steps.losses(job.losses.maxlen or len(losses)))
        job.last_step = steps.last_step
        for batch_size, times in steps.step_times(after_seq=WARM_UP_STEPS).items():
            key = (world_size, batch_size)
            configuration = job.configurations.get(key)
            if configuration is None:
                configuration = job.configurations[key] = _Configuration()
                if len(job.configurations) > MAX_CONFIGURATIONS:
                    job.configurations.popitem(last=False)
            else:
                job.configurations.move_to_end(key)
            configuration.times.extend(times.tolist())
            configuration.steps += len(times)
        found = steps.last_with("gradient_noise_scale", "grad_sq_norm", "grad_variance")
        if found is not None and (job.noise is None or found[0] >= job.noise.step):
            step, scale, (sq_norm, variance) = found
            job.noise = NoiseEstimate(step, scale, sq_norm, variance)

    @staticmethod
    def _track_resizes(job: _Job, world_size: int, steps: Steps) -> None:
        """Keeps the pause of a resize when rank 0's steps arrive at another ring size than its newest ones
        (:attr:`JobSummary.resize_pause_s`). Called before :meth:`_aggregate`, so the old size's step time is
        the one it ran at. A late batch of an earlier rank 0 (older than the newest steps) changes nothing."""
        first_step, first_wall, first_time = steps.edge(last=False)
        before = job.rank0
        if before is not None and world_size != before[0] and first_wall > before[2]:
            old_size, last_step, last_wall = before
            pause = first_wall - (first_time or 0.0) - last_wall
            redone = last_step - first_step + 1
            stat = job.throughput.get(old_size)
            if redone > 0 and stat is not None and stat.step_time is not None:
                pause += redone * stat.step_time
            if 0.0 <= pause <= MAX_RESIZE_PAUSE_S:
                job.resize_pauses.append(pause)
        last_step, last_wall, _ = steps.edge(last=True)
        if before is None or last_wall >= before[2]:
            job.rank0 = (world_size, last_step, last_wall)

    def _count_rejected(self, batch: metrics_pb2.ReportBatch, reason: str) -> None:
        count = max(1, len(batch.points) or len(batch.columns.seq))
        with self._lock:
            job = self._jobs.get(batch.job_id)
            if job is None:
                self._rejected_unattributed += count
            else:
                job.rejected += count
                job.last_rejection = reason[:MAX_REJECTION_CHARS]

    def _publish(self, job_id: str, chunk: _Chunk) -> None:
        targets = [sub for sub in self._subs if sub.job_id is None or sub.job_id == job_id]
        if not targets:
            return
        event = _Pending(job_id, chunk)
        for sub in targets:
            sub.put(event)

    # -- queries --------------------------------------------------------------------------------

    def jobs(self) -> list[str]:
        with self._lock:
            return list(self._jobs)

    def summary(self, job_id: str, *, trend: bool = True) -> JobSummary:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                raise UnknownJobError(job_id)
            now = self._clock()
            active = sum(1 for seen in job.seen.values() if now - seen <= self._activity_window)
            throughput = tuple(
                ThroughputStat(
                    world_size=size,
                    per_worker_examples_per_second=stat.eps or 0.0,
                    aggregate_examples_per_second=(stat.eps or 0.0) * size,
                    step_time_seconds=stat.step_time or 0.0,
                    points=stat.points,
                )
                for size, stat in sorted(job.throughput.items())
            )
            return JobSummary(
                job_id=job_id,
                world_size=job.world_size,
                active_workers=active,
                last_step=job.last_step,
                last_loss=job.last_loss,
                loss_ema=job.loss_ema,
                loss_slope_per_step=_slope(job.losses) if trend else None,
                throughput=throughput,
                points_received=job.received,
                points_duplicate=job.duplicate,
                points_rejected=job.rejected,
                last_rejection=job.last_rejection,
                points_missing=job.missing,
                last_update=job.last_update,
                noise=job.noise,
                configurations=tuple(
                    ConfigurationStat(size, batch, statistics.median(c.times), c.steps)
                    for (size, batch), c in sorted(job.configurations.items())
                ),
                resize_pause_s=statistics.median(job.resize_pauses) if job.resize_pauses else None,
            )

    def series(self, job_id: str, max_points: int) -> list[metrics_pb2.RecordedPoint]:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                raise UnknownJobError(job_id)
            wanted = min(max(max_points, 0), job.ring_points)
            chunks: list[_Chunk] = []
            for chunk in reversed(job.ring):
                if wanted <= 0:
                    break
                size = len(chunk.steps)
                chunks.append(chunk if size <= wanted else chunk._replace(steps=chunk.steps.tail(wanted)))
                wanted -= size
        # Chunks never change once kept, so the messages are built outside the lock.
        return [recorded for chunk in reversed(chunks) for recorded in _recorded(chunk)]

    def recent(self, job_id: str, max_points: int) -> list[RecentPoint]:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                raise UnknownJobError(job_id)
            # The ring may hold fewer points than the tuples (it also drops its oldest by bytes).
            wanted = min(max(max_points, 0), job.ring_points, len(job.recent))
            return list(itertools.islice(job.recent, len(job.recent) - wanted, None))

    def forget(self, job_id: str) -> None:
        with self._lock:
            self._jobs.pop(job_id, None)

    def rejected_unattributed(self) -> int:
        with self._lock:
            return self._rejected_unattributed

    # -- subscriptions --------------------------------------------------------------------------

    def subscribe(self, job_id: str | None = None, capacity: int = 1024) -> Subscription:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        sub = _Subscription(self, job_id, capacity, self._buffered)
        with self._lock:
            self._subs.append(sub)
        return sub

    def _unsubscribe(self, sub: _Subscription) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)

    def close(self) -> None:
        with self._lock:
            subs = list(self._subs)
        for sub in subs:
            sub.close()


def _ema(start: float | None, values: np.ndarray, alpha: float) -> float | None:
    """The exponential moving average ``start`` becomes after ``values`` (the first value when None),
    as ``ema += alpha * (value - ema)`` one value at a time would give, in closed form."""
    if start is None:
        if not len(values):
            return None
        start, values = float(values[0]), values[1:]
    count = len(values)
    if not count:
        return start
    decay = 1.0 - alpha
    weights = alpha * decay ** np.arange(count - 1, -1, -1, dtype=np.float64)
    return float(decay**count * start + weights @ values)


def _slope(points: deque[tuple[int, float]]) -> float | None:
    """Least-squares slope of loss over step; None without two distinct steps."""
    n = len(points)
    if n < 2:
        return None
    steps, losses = zip(*points, strict=True)  # the sums below run in C: a round reads every job's summary
    mean_x = sum(steps) / n
    mean_y = sum(losses) / n
    dx = list(map(operator.sub, steps, itertools.repeat(mean_x)))
    var_x = sum(map(operator.mul, dx, dx))
    if var_x == 0:
        return None
    cov = sum(map(operator.mul, dx, map(operator.sub, losses, itertools.repeat(mean_y))))
    return cov / var_x
