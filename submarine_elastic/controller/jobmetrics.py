"""What the controller reads of a job's metrics each round, and what it writes for a caller that reports them.

The metrics store (:mod:`submarine_elastic.metrics`) holds what the training processes stream and what
:meth:`~submarine_elastic.controller.service.ControllerService.report_metrics` is given, alike; the controller's
SQLite store keeps the throughput per world size (history that survives a restart). :class:`MetricsReader` turns
both into the :class:`~submarine_elastic.policy.JobMetrics` of a job's view, with the throughput figures the
SQLite store has not seen yet.
"""

from __future__ import annotations

import collections
from collections.abc import Collection
from dataclasses import dataclass

from submarine_elastic.controller.api import MetricsReport
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.metrics.api import MAX_JOBS, MAX_POINTS_PER_REPLY, MetricsStore, RecentPoint
from submarine_elastic.metrics.api import UnknownJobError as NoMetricsError
from submarine_elastic.metrics.proto import metrics_pb2
from submarine_elastic.metrics.store import InMemoryStore
from submarine_elastic.policy import LOSS_WINDOW, JobMetrics, StepTime
from submarine_elastic.policy import _trusted as trusted
from submarine_elastic.policy.losses import step_mean

SERIES_WINDOW = 40  # recent points per job per round that give the step times per worker and the global batch
#: Most points read per job per round for its loss window (every rank reports each step): LOSS_WINDOW steps of up
#: to 8 ranks, about 1 ms; a larger ring's window spans fewer steps.
LOSS_POINTS = 8 * LOSS_WINDOW
#: Jobs the controller's metrics store keeps, the least recently updated evicted beyond: the most a store may keep,
#: so that a controller of up to that many live jobs reads every job's metrics...
METRICS_JOBS = MAX_JOBS
#: ... each with its newest points up to what one GetJob returns (``job show``); a round reads at most LOSS_POINTS.
#: About 0.55 MiB a job at most (docs/security.md), 560 MiB for all of them.
METRICS_POINTS_PER_JOB = MAX_POINTS_PER_REPLY
#: The worker name of the points a caller's :class:`MetricsReport` is kept as in the metrics store.
REPORTED = "controller-api"

#: A throughput figure to save: job id, world size, aggregate examples per second, steps measured.
HistoryRow = tuple[str, int, float, int]


@dataclass(frozen=True)
class ReadMetrics:
    """A job's metrics for its view, and the throughput figures (:data:`HistoryRow`) new since the last save."""

    metrics: JobMetrics
    history: tuple[HistoryRow, ...] = ()


def metrics_store() -> InMemoryStore:
    """The store of the controller's metrics service: the metrics of :data:`METRICS_JOBS` jobs, each
    :data:`METRICS_POINTS_PER_JOB` points deep (the store's own default keeps 256 jobs, and a controller of more
    would run the others without their metrics)."""
    return InMemoryStore(max_jobs=METRICS_JOBS, points_per_job=METRICS_POINTS_PER_JOB)


class LossWindow:
    """One job's loss window kept between rounds: the recent points it was made of, their losses by step (in the
    points' order) and each step's mean. A job's points arrive at the end of its store's recent points and leave at
    the start, so the next round's points are mostly this round's: :meth:`slide` takes the ones that came and
    drops the ones that went, and a round costs those and the steps they touch rather than the whole window (up to
    :data:`LOSS_POINTS` points of every job every round, the largest part of reading a job's metrics). The entries
    are the very floats :func:`~submarine_elastic.policy.loss_window` gives for the same points."""

    __slots__ = ("points", "_losses", "_means")

    def __init__(self, points: list[RecentPoint]) -> None:
        self.points = points
        self._losses: dict[int, collections.deque[float]] = {}
        self._means: dict[int, float] = {}
        self._add(points)

    def slide(self, points: list[RecentPoint]) -> bool:
        """Move to ``points``, the job's recent points now; False (nothing changed) when they are not this window's
        points less some of its oldest and plus newer ones (the store forgot the job, or the window reaches further
        back): the caller makes a new window then.

        The store keeps each point once, as one object, until it drops it: the newest point kept here found among
        ``points`` by identity, and the first of ``points`` found where it must be, every point between is the same."""
        held = self.points
        if not held or not points:
            return False
        last = held[-1]
        end = len(points) - 1
        while end >= 0 and points[end] is not last:
            end -= 1
        start = len(held) - end - 1  # where points[0] must be among the points held
        if end < 0 or start < 0 or held[start] is not points[0]:
            return False
        self._drop(held[:start])
        self._add(points[end + 1 :])
        self.points = points
        return True

    def entries(self) -> tuple[float, ...]:
        """The window: the newest :data:`LOSS_WINDOW` steps' mean losses, oldest first."""
        means = self._means
        return tuple(map(means.__getitem__, sorted(means)[-LOSS_WINDOW:]))

    def _add(self, points: list[RecentPoint]) -> None:
        touched = set()
        for p in points:
            if p.loss is not None:
                losses = self._losses.get(p.step)
                if losses is None:
                    losses = self._losses[p.step] = collections.deque()
                losses.append(p.loss)
                touched.add(p.step)
        for step in touched:
            self._means[step] = step_mean(self._losses[step])

    def _drop(self, points: list[RecentPoint]) -> None:
        touched = set()
        for p in points:
            if p.loss is not None:
                losses = self._losses[p.step]
                losses.popleft()  # the oldest point of its step among those held is the oldest loss kept for it
                touched.add(p.step)
        for step in touched:
            if self._losses[step]:
                self._means[step] = step_mean(self._losses[step])
            else:
                del self._losses[step], self._means[step]


class MetricsReader:
    """Reads each job's metrics for its view (:meth:`read`), keeping each job's :class:`LossWindow` from one round to
    the next. Used by the round's thread only.

    Args:
        store, metrics: the SQLite state (the throughput history) and the metrics store.
    """

    def __init__(self, store: ControllerStore, metrics: MetricsStore) -> None:
        self.store, self.metrics = store, metrics
        self._windows: dict[str, LossWindow] = {}

    def keep_only(self, job_ids: Collection[str]) -> None:
        """Forget the windows of jobs not among ``job_ids`` (ended, or no longer live)."""
        self._windows = {job_id: window for job_id, window in self._windows.items() if job_id in job_ids}

    def read(self, job_id: str) -> ReadMetrics:
        """The job's metrics: its saved throughput history updated with what the metrics store measured, its loss
        window, step times per worker, noise scale, global batch, resize cost and measured configurations."""
        history = self.store.throughput(job_id)
        updates: list[HistoryRow] = []
        losses: tuple[float, ...] = ()
        step = 0
        step_times: dict[str, list[float]] = {}
        noise_scale = batch_size = resize_cost = None
        configurations: tuple[StepTime, ...] = ()
        try:
            summary = self.metrics.summary(job_id, trend=False)
        except NoMetricsError:
            summary = None
            self._windows.pop(job_id, None)
        if summary is not None:
            step = summary.last_step
            for stat in summary.throughput:
                measured = (stat.aggregate_examples_per_second, stat.points)
                if history.get(stat.world_size) != measured:
                    history[stat.world_size] = measured
                    updates.append((job_id, stat.world_size, *measured))
            wanted = max(SERIES_WINDOW, min(LOSS_WINDOW * summary.world_size, LOSS_POINTS))
            points = self.metrics.recent(job_id, wanted)
            losses = self._loss_window(job_id, points)
            step_times, batch_size = series(points[-SERIES_WINDOW:], summary.world_size)
            if summary.noise is not None:
                noise_scale = summary.noise.gradient_noise_scale
            resize_cost = summary.resize_pause_s
            # Nodes are not in the points: every configuration counts as one node until they are.
            configurations = tuple(
                trusted.step_time(c.world_size, c.batch_size, c.median_step_time_seconds, c.steps)
                for c in summary.configurations
                if c.batch_size > 0 and c.median_step_time_seconds > 0
            )
        # Every value was checked as it came into the metrics store (or the controller's API) and is given in the
        # form JobMetrics' constructor leaves it: not checked again, for every job every round.
        job_metrics = trusted.job_metrics(
            step,
            {ws: trusted.throughput(*history[ws]) for ws in sorted(history)},
            {name: tuple(step_times[name]) for name in sorted(step_times)},
            losses,
            noise_scale,
            batch_size,
            configurations,
            resize_cost,
        )
        return ReadMetrics(job_metrics, tuple(updates))

    def _loss_window(self, job_id: str, points: list[RecentPoint]) -> tuple[float, ...]:
        window = self._windows.get(job_id)
        if window is None or not window.slide(points):
            window = self._windows[job_id] = LossWindow(points)
        return window.entries()


def report_batch(report: MetricsReport, seq: int, now: float) -> metrics_pb2.ReportBatch:
    """``report`` as the point a training process would stream: the job's throughput split evenly over its
    ``world_size`` workers (the store keeps examples per second per worker)."""
    point = metrics_pb2.StepPoint(
        seq=seq, step=report.step, examples_per_second=report.samples_per_second / report.world_size, wall_time=now
    )
    if report.loss is not None:
        point.loss = report.loss
    return metrics_pb2.ReportBatch(
        job_id=report.job_id,
        worker=metrics_pb2.WorkerRef(instance=REPORTED, rank=0),
        incarnation=REPORTED,
        world_size=report.world_size,
        points=[point],
    )


def series(points: list[RecentPoint], world_size: int) -> tuple[dict[str, list[float]], int | None]:
    """What a round reads of a job's recent ``points`` in one pass: each worker instance's step times, oldest first
    (in the order the instances first appear), and the job's global batch now at ``world_size``.

    The global batch comes from the steps every rank at ``world_size`` reported: the sum of the ranks' batches that
    most of those steps add up to (the newest such sum on a tie); else (no step has every rank's report yet) the
    newest step's batch times ``world_size``; None without one. One step's batches, never one rank's older batch
    beside another's newer one (a step just after a batch change would otherwise add up to neither); and the usual
    sum, not a short last step of an epoch."""
    step_times: dict[str, list[float]] = {}
    by_step: dict[int, dict[int, int]] = {}
    newest_step, newest_batch = 0, None  # the newest report's step and batch
    for instance, rank, size, step, _, seconds, batch in points:
        if seconds is not None and instance:
            times = step_times.get(instance)
            if times is None:
                step_times[instance] = [seconds]
            else:
                times.append(seconds)
        if size == world_size and batch is not None:
            ranks = by_step.get(step)
            if ranks is None:
                by_step[step] = {rank: batch}
            else:
                ranks[rank] = batch
            if newest_batch is None or step >= newest_step:
                newest_step, newest_batch = step, batch
    sums = [sum(by_step[step].values()) for step in sorted(by_step) if len(by_step[step]) == world_size]
    if not sums:
        return step_times, newest_batch * world_size if newest_batch is not None else None
    if sums.count(sums[0]) == len(sums):
        return step_times, sums[0]
    counts = collections.Counter(sums)
    most = max(counts.values())
    return step_times, next(total for total in reversed(sums) if counts[total] == most)
