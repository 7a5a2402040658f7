"""Interfaces, value types and errors of the metrics service.

The wire schema (``proto/metrics.proto``) is the value type of a point: a store keeps the
``StepPoint`` messages it receives instead of copying them into Python objects, so ingest stays
cheap. What the scheduler side reads back (:class:`JobSummary`) is a plain frozen dataclass, so
the policy engine needs no protobuf.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import NamedTuple

from submarine_elastic.metrics.proto import metrics_pb2

#: The port ``submarine metrics serve`` listens on unless told otherwise.
DEFAULT_PORT = 50061
#: Full gRPC name of the service, as health checking and reflection know it.
SERVICE_NAME = "submarine.metrics.v1.MetricsService"

# Bounds of the service; docs/security.md states each and why. The wire-level ones every side shares
# (points and bytes of a batch, keys of an acknowledgement, the largest seq) are in submarine_elastic.limits.

#: Most jobs a store may be told to keep (``--max-jobs``): ListJobs answers them all in one reply.
MAX_JOBS = 1024
#: Bytes of recent points a job keeps for each of its ``points_per_job`` (the oldest go first): 1 MiB for
#: the default 4096 points, room for 32 user metrics a step in batches of 100.
BYTES_PER_KEPT_POINT = 256
#: What one (worker, incarnation) key costs in the per-job tables (strings of up to 128 and 64 characters).
KEY_ENTRY_BYTES = 512
#: World sizes whose throughput a job keeps (the least recently reported goes first).
MAX_THROUGHPUT_SIZES = 32
#: Configurations (world size, per-worker batch) whose step times a job keeps (the least recently
#: reported goes first)...
MAX_CONFIGURATIONS = 32
#: ... and the most recent step times each keeps for its median.
STEP_TIME_SAMPLES = 64
#: The first steps of each incarnation (a process's first ring, and each re-form that changed its rank or the
#: ring's size) left out of its configuration's step times: such a step also traces the step anew for the new
#: per-worker batch and opens the ring's connections, and once timed it made a configuration look several times
#: slower than it runs (a median over the few steps measured right after a resize).
WARM_UP_STEPS = 1
#: A job's most recent points kept besides its columns as :class:`RecentPoint` tuples, so that the controller reads
#: its window every round without building a message per point (:meth:`MetricsStore.recent`); about 40 KiB a job.
RECENT_POINTS = 256
#: Resize pauses a job keeps (the most recent), whose median its summary gives...
RESIZE_PAUSES = 8
#: ... each at most this long: a longer gap between rank 0's steps at two ring sizes is not a resize's pause
#: (the job was lost whole and resumed, or stopped) and is not kept.
MAX_RESIZE_PAUSE_S = 600.0
#: Characters of the reason a job's summary gives for its last rejected batch.
MAX_REJECTION_CHARS = 256
#: A seq may run this far ahead of the highest one held for its key at once (a sender's queue keeps
#: 10,000 steps; its drops show as gaps)...
SEQ_WINDOW = 100_000
#: ... plus this many for every second since the key last delivered (a worker that kept training while
#: the service was unreachable).
MAX_STEPS_PER_SECOND = 10_000
#: Bytes of points a Watch holds for a consumer that reads slowly (the oldest events go first)...
WATCH_BUFFER_BYTES = 16 * 1024 * 1024
#: ... and every Watch together (each beyond keeps its newest event only).
WATCH_BUFFERS_BYTES = 64 * 1024 * 1024
#: Points in one reply (a WatchEvent, GetJob's ``max_points``): 1024 points with 32 user metrics of
#: 64-character names stay under the 4 MiB a gRPC client receives by default.
MAX_POINTS_PER_REPLY = 1024
#: Report and Watch streams open at once, all jobs together; one more is refused RESOURCE_EXHAUSTED.
MAX_STREAMS = 32
#: Report and Watch streams of one job (its credential) open at once.
MAX_STREAMS_PER_JOB = 8
#: Threads answering calls beyond the streams: unary calls are answered while every stream slot is taken.
UNARY_THREADS = 8
#: A Report stream that sends no batch for this long is cancelled (its thread and slot freed).
STREAM_IDLE_SECONDS = 30.0


StepPoint = metrics_pb2.StepPoint
ReportBatch = metrics_pb2.ReportBatch
RecordedPoint = metrics_pb2.RecordedPoint
WatchEvent = metrics_pb2.WatchEvent


class RecentPoint(NamedTuple):
    """One recent step of a worker, the fields a policy's snapshot reads; None where the step left one out."""

    instance: str
    rank: int
    world_size: int
    step: int
    loss: float | None
    step_time_seconds: float | None
    batch_size: int | None

    @classmethod
    def of(cls, recorded: metrics_pb2.RecordedPoint) -> RecentPoint:
        point = recorded.point
        return cls(
            recorded.worker.instance,
            recorded.worker.rank,
            recorded.world_size,
            point.step,
            point.loss if point.HasField("loss") else None,
            point.step_time_seconds if point.HasField("step_time_seconds") else None,
            point.batch_size if point.HasField("batch_size") else None,
        )


class MetricsError(Exception):
    """Base of every error raised by ``submarine_elastic.metrics``."""


class InvalidPointError(MetricsError, ValueError):
    """A batch breaks a rule of the schema; ``field`` names where (``points[3].loss``)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class UnknownJobError(MetricsError, KeyError):
    """The store holds nothing for this job id (never reported, or evicted)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)
        self.job_id = job_id

    def __str__(self) -> str:
        return f"no metrics for job {self.job_id!r}"


class ServerStartError(MetricsError):
    """The gRPC or Prometheus endpoint could not be bound (port taken, bad address, bad certificate)."""


@dataclass(frozen=True)
class ThroughputStat:
    """Throughput of a job at one world size, from the points reported at that size."""

    world_size: int
    per_worker_examples_per_second: float
    aggregate_examples_per_second: float
    step_time_seconds: float
    points: int


@dataclass(frozen=True)
class ConfigurationStat:
    """Step time of a job in one configuration: world size and per-worker batch (0: not reported)."""

    world_size: int
    batch_size: int
    median_step_time_seconds: float
    steps: int


@dataclass(frozen=True)
class NoiseEstimate:
    """A worker's gradient noise estimate at one step: the smoothed |G|^2, tr(Sigma) and their ratio
    (the gradient noise scale, in samples)."""

    step: int
    gradient_noise_scale: float
    grad_sq_norm: float | None = None
    grad_variance: float | None = None


@dataclass(frozen=True)
class JobSummary:
    """Rolling aggregates of one job; every count covers the job's whole life in this store."""

    job_id: str
    world_size: int
    active_workers: int
    last_step: int
    last_loss: float | None
    loss_ema: float | None
    loss_slope_per_step: float | None
    throughput: tuple[ThroughputStat, ...]
    points_received: int
    points_duplicate: int
    points_rejected: int
    points_missing: int
    last_update: float
    #: Why the job's last rejected batch was refused ("" when none was).
    last_rejection: str = ""
    #: The latest gradient noise estimate a worker reported (the highest step), None when none did.
    noise: NoiseEstimate | None = None
    #: Step times per configuration, by world size then batch size.
    configurations: tuple[ConfigurationStat, ...] = ()
    #: The training time a change of the ring's size cost, in seconds: the median over the job's recent
    #: resizes of rank 0's gap between its last step at the old size and its first at the new one, less that
    #: step's own time, plus the steps trained again (a lost peer's uncommitted ones) at the old step time.
    #: None before the first resize.
    resize_pause_s: float | None = None


@dataclass(frozen=True)
class IngestResult:
    """What one accepted batch did: points kept, resends ignored, and the key's highest seq now held."""

    job_id: str
    key: str
    accepted: int
    duplicates: int
    last_seq: int


class Subscription(ABC):
    """Events of accepted points, in acceptance order, for one consumer.

    A consumer that reads too slowly loses the oldest events (counted in :attr:`dropped`); ingest
    never waits for a consumer.
    """

    @property
    @abstractmethod
    def dropped(self) -> int:
        """Events lost because the consumer's buffer was full."""

    @abstractmethod
    def get(self, timeout: float) -> metrics_pb2.WatchEvent | None:
        """The next event, or None when none arrives within ``timeout`` seconds or the subscription closed.

        Blocks up to ``timeout`` seconds. The event is shared with other consumers: do not modify it.
        """

    @property
    @abstractmethod
    def closed(self) -> bool:
        """True once :meth:`close` was called (by the consumer or because the store closed)."""

    @abstractmethod
    def close(self) -> None:
        """Stops delivery and wakes a consumer blocked in :meth:`get`. Never blocks."""


class MetricsStore(ABC):
    """Bounded per-job time series with de-duplication by (job, worker, incarnation, seq).

    Implementations are safe to call from many threads at once.
    """

    @abstractmethod
    def ingest(self, batch: metrics_pb2.ReportBatch) -> IngestResult:
        """Validates ``batch`` as a whole and keeps its new points; a rejected batch changes no aggregate.

        Never blocks on consumers.

        Raises:
            InvalidPointError: the batch breaks a rule; its points are counted as rejected (on the job
                when the job id is valid and known, otherwise in :meth:`rejected_unattributed`).
        """

    @abstractmethod
    def jobs(self) -> list[str]:
        """Ids of the jobs held, in no particular order."""

    @abstractmethod
    def summary(self, job_id: str, *, trend: bool = True) -> JobSummary:
        """The job's aggregates now; with ``trend`` False, without the loss slope (``loss_slope_per_step`` None):
        the slope over the trend window is most of a summary's cost, and the controller, which reads every job's
        summary every round, never reads it.

        Raises:
            UnknownJobError: the store holds nothing for ``job_id``.
        """

    @abstractmethod
    def series(self, job_id: str, max_points: int) -> list[metrics_pb2.RecordedPoint]:
        """Up to ``max_points`` of the job's most recent points, oldest first (copies).

        Raises:
            UnknownJobError: the store holds nothing for ``job_id``.
        """

    def recent(self, job_id: str, max_points: int) -> list[RecentPoint]:
        """The points :meth:`series` gives for ``min(max_points, RECENT_POINTS)``, as :class:`RecentPoint`:
        what the controller reads for every job every round, which a store may answer without building
        messages.

        Raises:
            UnknownJobError: the store holds nothing for ``job_id``.
        """
        return [RecentPoint.of(p) for p in self.series(job_id, min(max_points, RECENT_POINTS))]

    @abstractmethod
    def forget(self, job_id: str) -> None:
        """Drops the job's points and aggregates (a new run of its name starts afresh); nothing when none are
        held. Its subscribers stay subscribed."""

    @abstractmethod
    def subscribe(self, job_id: str | None = None, capacity: int = 1024) -> Subscription:
        """Events for ``job_id`` (None: every job) from now on; buffers up to ``capacity`` events.

        Raises:
            ValueError: ``capacity`` is less than 1.
        """

    @abstractmethod
    def rejected_unattributed(self) -> int:
        """Points rejected in batches whose job id was invalid or unknown."""

    @abstractmethod
    def close(self) -> None:
        """Closes every subscription; later calls to :meth:`ingest` still work. Never blocks."""
