"""In-memory :class:`MetricsStore`: a ring of recent points per job plus rolling aggregates."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import NamedTuple

from submarine_elastic.metrics.api import (
    IngestResult,
    InvalidPointError,
    JobSummary,
    MetricsStore,
    Subscription,
    ThroughputStat,
    UnknownJobError,
)
from submarine_elastic.metrics.proto import metrics_pb2
from submarine_elastic.metrics.validation import validate_batch


class _Header(NamedTuple):
    instance: str
    rank: int
    incarnation: str
    world_size: int


class _Entry(NamedTuple):
    header: _Header
    point: metrics_pb2.StepPoint
    received: float


def _recorded(entry: _Entry) -> metrics_pb2.RecordedPoint:
    header = entry.header
    return metrics_pb2.RecordedPoint(
        worker=metrics_pb2.WorkerRef(instance=header.instance, rank=header.rank),
        incarnation=header.incarnation,
        world_size=header.world_size,
        point=entry.point,
        received_time=entry.received,
    )


class _Throughput:
    __slots__ = ("eps", "step_time", "points")

    def __init__(self) -> None:
        self.eps: float | None = None
        self.step_time: float | None = None
        self.points = 0


class _Job:
    """Everything the store holds for one job; guarded by the store's lock."""

    def __init__(self, job_id: str, points: int, trend_window: int) -> None:
        self.job_id = job_id
        self.ring: deque[_Entry] = deque(maxlen=points)
        self.last_seq: OrderedDict[tuple[str, str], int] = OrderedDict()
        self.seen: OrderedDict[str, float] = OrderedDict()
        self.throughput: dict[int, _Throughput] = {}
        self.losses: deque[tuple[int, float]] = deque(maxlen=trend_window)
        self.world_size = 0
        self.last_step = 0
        self.last_loss: float | None = None
        self.loss_ema: float | None = None
        self.received = 0
        self.duplicate = 0
        self.rejected = 0
        self.missing = 0
        self.last_update = 0.0


class _Subscription(Subscription):
    def __init__(self, store: InMemoryStore, job_id: str | None, capacity: int) -> None:
        self.job_id = job_id
        self._store = store
        self._events: deque[metrics_pb2.WatchEvent] = deque()
        self._capacity = capacity
        self._cond = threading.Condition(threading.Lock())
        self._dropped = 0
        self._closed = False

    @property
    def dropped(self) -> int:
        return self._dropped

    @property
    def closed(self) -> bool:
        return self._closed

    def put(self, event: metrics_pb2.WatchEvent) -> None:
        with self._cond:
            if self._closed:
                return
            if len(self._events) >= self._capacity:
                self._events.popleft()
                self._dropped += 1
            self._events.append(event)
            self._cond.notify()

    def get(self, timeout: float) -> metrics_pb2.WatchEvent | None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._events and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)
            return self._events.popleft() if self._events else None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._store._unsubscribe(self)


class InMemoryStore(MetricsStore):
    """Keeps at most ``max_jobs`` jobs (evicting the least recently updated) and, per job, the
    ``points_per_job`` most recent points and the last seq of up to ``max_keys_per_job``
    (worker, incarnation) keys.

    Memory is bounded by ``max_jobs * (points_per_job + max_keys_per_job)`` small records, whatever
    the clients send.
    """

    def __init__(
        self,
        *,
        max_jobs: int = 256,
        points_per_job: int = 4096,
        max_keys_per_job: int = 1024,
        trend_window: int = 128,
        ema_alpha: float = 0.1,
        activity_window_seconds: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Raises:
        ValueError: a bound is below 1, ``trend_window`` below 2, or ``ema_alpha`` outside (0, 1].
        """
        for name, value in (
            ("max_jobs", max_jobs),
            ("points_per_job", points_per_job),
            ("max_keys_per_job", max_keys_per_job),
        ):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if trend_window < 2:
            raise ValueError(f"trend_window must be at least 2, got {trend_window}")
        if not 0 < ema_alpha <= 1:
            raise ValueError(f"ema_alpha must be in (0, 1], got {ema_alpha}")
        if activity_window_seconds <= 0:
            raise ValueError(f"activity_window_seconds must be positive, got {activity_window_seconds}")
        self._max_jobs = max_jobs
        self._points_per_job = points_per_job
        self._max_keys = max_keys_per_job
        self._trend_window = trend_window
        self._alpha = ema_alpha
        self._activity_window = activity_window_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: OrderedDict[str, _Job] = OrderedDict()
        self._subs: list[_Subscription] = []
        self._rejected_unattributed = 0

    # -- ingest ---------------------------------------------------------------------------------

    def ingest(self, batch: metrics_pb2.ReportBatch) -> IngestResult:
        try:
            points = validate_batch(batch)
        except InvalidPointError:
            self._count_rejected(batch)
            raise
        worker = batch.worker
        header = _Header(worker.instance, worker.rank, batch.incarnation, batch.world_size)
        key = (header.instance, header.incarnation)
        alpha = self._alpha
        with self._lock:
            now = self._clock()
            job = self._job_for(batch.job_id)
            last = job.last_seq.get(key, 0)
            accepted: list[_Entry] = []
            duplicates = 0
            ring_append = job.ring.append
            for point in points:
                seq = point.seq
                if seq <= last:
                    duplicates += 1
                    continue
                job.missing += seq - last - 1
                last = seq
                entry = _Entry(header, point, now)
                ring_append(entry)
                accepted.append(entry)
            job.duplicate += duplicates
            if accepted:
                self._aggregate(job, header.world_size, accepted, alpha)
                job.received += len(accepted)
                job.last_update = now
                job.world_size = header.world_size
                job.last_seq[key] = last
                job.last_seq.move_to_end(key)
                if len(job.last_seq) > self._max_keys:
                    job.last_seq.popitem(last=False)
                job.seen[header.instance] = now
                job.seen.move_to_end(header.instance)
                if len(job.seen) > self._max_keys:
                    job.seen.popitem(last=False)
                self._jobs.move_to_end(batch.job_id)
                if self._subs:
                    self._publish(batch.job_id, accepted)
            return IngestResult(
                job_id=batch.job_id,
                key=f"{batch.job_id}/{header.instance}/{header.incarnation}",
                accepted=len(accepted),
                duplicates=duplicates,
                last_seq=last,
            )

    def _job_for(self, job_id: str) -> _Job:
        job = self._jobs.get(job_id)
        if job is None:
            job = _Job(job_id, self._points_per_job, self._trend_window)
            self._jobs[job_id] = job
            while len(self._jobs) > self._max_jobs:
                self._jobs.popitem(last=False)
        return job

    @staticmethod
    def _aggregate(job: _Job, world_size: int, accepted: list[_Entry], alpha: float) -> None:
        stat = job.throughput.get(world_size)
        if stat is None:
            stat = job.throughput[world_size] = _Throughput()
        eps = stat.eps
        step_time = stat.step_time
        loss_ema = job.loss_ema
        last_loss = job.last_loss
        losses_append = job.losses.append
        for entry in accepted:
            point = entry.point
            if point.HasField("examples_per_second"):
                value = point.examples_per_second
                eps = value if eps is None else eps + alpha * (value - eps)
            if point.HasField("step_time_seconds"):
                value = point.step_time_seconds
                step_time = value if step_time is None else step_time + alpha * (value - step_time)
            if point.HasField("loss"):
                last_loss = point.loss
                loss_ema = last_loss if loss_ema is None else loss_ema + alpha * (last_loss - loss_ema)
                losses_append((point.step, last_loss))
        stat.eps = eps
        stat.step_time = step_time
        stat.points += len(accepted)
        job.loss_ema = loss_ema
        job.last_loss = last_loss
        job.last_step = accepted[-1].point.step

    def _count_rejected(self, batch: metrics_pb2.ReportBatch) -> None:
        count = max(1, len(batch.points) or len(batch.columns.seq))
        with self._lock:
            job = self._jobs.get(batch.job_id)
            if job is None:
                self._rejected_unattributed += count
            else:
                job.rejected += count

    def _publish(self, job_id: str, accepted: list[_Entry]) -> None:
        targets = [sub for sub in self._subs if sub.job_id is None or sub.job_id == job_id]
        if not targets:
            return
        event = metrics_pb2.WatchEvent(job_id=job_id, points=[_recorded(entry) for entry in accepted])
        for sub in targets:
            sub.put(event)

    # -- queries --------------------------------------------------------------------------------

    def jobs(self) -> list[str]:
        with self._lock:
            return list(self._jobs)

    def summary(self, job_id: str) -> JobSummary:
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
                loss_slope_per_step=_slope(job.losses),
                throughput=throughput,
                points_received=job.received,
                points_duplicate=job.duplicate,
                points_rejected=job.rejected,
                points_missing=job.missing,
                last_update=job.last_update,
            )

    def series(self, job_id: str, max_points: int) -> list[metrics_pb2.RecordedPoint]:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                raise UnknownJobError(job_id)
            count = min(max(max_points, 0), len(job.ring))
            entries = list(job.ring)[len(job.ring) - count :]
        return [_recorded(entry) for entry in entries]

    def rejected_unattributed(self) -> int:
        with self._lock:
            return self._rejected_unattributed

    # -- subscriptions --------------------------------------------------------------------------

    def subscribe(self, job_id: str | None = None, capacity: int = 1024) -> Subscription:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        sub = _Subscription(self, job_id, capacity)
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


def _slope(points: deque[tuple[int, float]]) -> float | None:
    """Least-squares slope of loss over step; None without two distinct steps."""
    n = len(points)
    if n < 2:
        return None
    mean_x = sum(step for step, _ in points) / n
    mean_y = sum(loss for _, loss in points) / n
    var_x = sum((step - mean_x) ** 2 for step, _ in points)
    if var_x == 0:
        return None
    cov = sum((step - mean_x) * (loss - mean_y) for step, loss in points)
    return cov / var_x
