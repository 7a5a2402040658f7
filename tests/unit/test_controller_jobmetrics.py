"""The controller's read of a job's metrics: the loss window it keeps from one round to the next gives what a window
made afresh from the same points gives, and never a stale one after new points, a forgotten job or a larger ring."""

from __future__ import annotations

import collections
import dataclasses
import random
from pathlib import Path

import pytest

from submarine_elastic.controller.jobmetrics import LossWindow, MetricsReader, metrics_store, series
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.metrics.api import RecentPoint
from submarine_elastic.metrics.proto import metrics_pb2
from submarine_elastic.metrics.store import InMemoryStore
from submarine_elastic.policy import JobMetrics, loss_window


class Ranks:
    """Reports steps of one job's ranks, each rank its own seqs, with the losses given."""

    def __init__(self, store: InMemoryStore, job: str = "job-a") -> None:
        self.store, self.job = store, job
        self.seq: dict[int, int] = {}

    def report(self, rank: int, world_size: int, steps: list[tuple[int, float | None]]) -> None:
        points = []
        for step, loss in steps:
            self.seq[rank] = self.seq.get(rank, 0) + 1
            point = metrics_pb2.StepPoint(
                seq=self.seq[rank], step=step, wall_time=1.7e9 + step, step_time_seconds=0.1, batch_size=32
            )
            if loss is not None:
                point.loss = loss
            points.append(point)
        self.store.ingest(
            metrics_pb2.ReportBatch(
                job_id=self.job,
                worker=metrics_pb2.WorkerRef(instance=f"worker-{rank}", rank=rank),
                incarnation="inc-1",
                world_size=world_size,
                points=points,
            )
        )


@pytest.fixture
def reader(tmp_path: Path) -> tuple[MetricsReader, InMemoryStore, ControllerStore]:
    metrics = metrics_store()
    store = ControllerStore(tmp_path / "c.db")
    return MetricsReader(store, metrics), metrics, store


def afresh(metrics: InMemoryStore, store: ControllerStore, job: str = "job-a") -> tuple[float, ...]:
    return MetricsReader(store, metrics).read(job).metrics.loss_window


def test_a_kept_window_is_the_window_made_afresh_round_after_round(
    reader: tuple[MetricsReader, InMemoryStore, ControllerStore],
) -> None:
    """Ranks report uneven, out-of-order and lossless steps, the ring grows and shrinks: every round the kept
    window equals a new one's and the policy module's loss window of the same points, float for float."""
    kept, metrics, store = reader
    ranks = Ranks(metrics)
    rng = random.Random(7)
    size = 2
    for rnd in range(120):
        if rnd % 17 == 16:
            size = rng.randint(1, 8)
        for rank in range(size):
            steps = [
                (max(0, 2 * rnd + i - rng.randint(0, 2)), rng.random() if rng.random() < 0.9 else None)
                for i in range(rng.randint(1, 3))
            ]
            ranks.report(rank, size, steps)
        got = kept.read("job-a").metrics.loss_window
        wanted = max(40, min(32 * size, 256))
        points = metrics.recent("job-a", wanted)
        assert got == afresh(metrics, store) == loss_window((p.step, p.loss) for p in points if p.loss is not None)


def test_new_points_change_the_kept_window(reader: tuple[MetricsReader, InMemoryStore, ControllerStore]) -> None:
    kept, metrics, _ = reader
    ranks = Ranks(metrics)
    ranks.report(0, 2, [(1, 4.0)])
    ranks.report(1, 2, [(1, 2.0)])
    assert kept.read("job-a").metrics.loss_window == (3.0,)
    ranks.report(0, 2, [(2, 1.0)])
    assert kept.read("job-a").metrics.loss_window == (3.0, 1.0)
    ranks.report(1, 2, [(2, 0.5)])  # a step's mean changes when its other rank reports
    assert kept.read("job-a").metrics.loss_window == (3.0, 0.75)


def test_a_forgotten_job_starts_a_new_window(reader: tuple[MetricsReader, InMemoryStore, ControllerStore]) -> None:
    """A new run of the job's name reports the same steps again: none of the old run's losses stay."""
    kept, metrics, _ = reader
    ranks = Ranks(metrics)
    ranks.report(0, 1, [(1, 9.0), (2, 8.0)])
    assert kept.read("job-a").metrics.loss_window == (9.0, 8.0)
    metrics.forget("job-a")
    Ranks(metrics).report(0, 1, [(1, 1.0), (2, 2.0)])
    assert kept.read("job-a").metrics.loss_window == (1.0, 2.0)


def test_old_points_leave_the_kept_window(reader: tuple[MetricsReader, InMemoryStore, ControllerStore]) -> None:
    """One rank, 40 points a read: a step whose points left the store's window leaves the loss window too."""
    kept, metrics, store = reader
    ranks = Ranks(metrics)
    ranks.report(0, 1, [(step, float(step)) for step in range(60)])
    assert kept.read("job-a").metrics.loss_window == tuple(float(s) for s in range(28, 60))
    ranks.report(0, 1, [(60, 60.0)])
    assert kept.read("job-a").metrics.loss_window == tuple(float(s) for s in range(29, 61))
    assert kept.read("job-a").metrics.loss_window == afresh(metrics, store)


def test_a_window_does_not_slide_to_points_it_does_not_hold(
    reader: tuple[MetricsReader, InMemoryStore, ControllerStore],
) -> None:
    """A window of a job's 40 newest points does not slide to its 80 newest (they reach further back) nor to another
    job's points; the reader makes a new one."""
    _, metrics, _ = reader
    ranks = Ranks(metrics)
    ranks.report(0, 1, [(step, float(step)) for step in range(100)])
    window = LossWindow(metrics.recent("job-a", 40))
    assert not window.slide(metrics.recent("job-a", 80))
    Ranks(metrics, "job-b").report(0, 1, [(step, 1.0) for step in range(100)])
    assert not window.slide(metrics.recent("job-b", 40))
    assert window.entries() == tuple(float(s) for s in range(68, 100))
    assert window.slide(metrics.recent("job-a", 20))
    assert window.entries() == tuple(float(s) for s in range(80, 100))


def test_the_reader_forgets_the_windows_of_jobs_gone(
    reader: tuple[MetricsReader, InMemoryStore, ControllerStore],
) -> None:
    kept, metrics, _ = reader
    Ranks(metrics, "job-a").report(0, 1, [(1, 1.0)])
    Ranks(metrics, "job-b").report(0, 1, [(1, 2.0)])
    kept.read("job-a")
    kept.read("job-b")
    kept.keep_only({"job-b"})
    assert kept.read("job-b").metrics.loss_window == (2.0,)
    assert kept.read("job-a").metrics.loss_window == (1.0,)


def _step_times_point_by_point(points: list[RecentPoint]) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {}
    for p in points:
        if p.step_time_seconds is not None and p.instance:
            times.setdefault(p.instance, []).append(p.step_time_seconds)
    return times


def _global_batch_point_by_point(points: list[RecentPoint], world_size: int) -> int | None:
    by_step: dict[int, dict[int, int]] = {}
    newest: tuple[int, int] | None = None
    for p in points:
        if p.world_size == world_size and p.batch_size is not None:
            by_step.setdefault(p.step, {})[p.rank] = p.batch_size
            if newest is None or p.step >= newest[0]:
                newest = (p.step, p.batch_size)
    sums = [sum(ranks.values()) for _, ranks in sorted(by_step.items()) if len(ranks) == world_size]
    if sums:
        counts = collections.Counter(sums)
        most = max(counts.values())
        return next(total for total in reversed(sums) if counts[total] == most)
    return newest[1] * world_size if newest is not None else None


def test_one_pass_over_the_points_gives_the_step_times_and_global_batch_point_by_point() -> None:
    """Random recent points, ranks missing and repeated, rings of mixed sizes, fields left out, batches that tie:
    :func:`series` gives each instance's step times and the global batch that the straightforward reads give."""
    rng = random.Random(11)
    for _ in range(500):
        points = [
            RecentPoint(
                rng.choice(["worker-0", "worker-1", "worker-2", ""]),
                rng.randrange(3),
                rng.choice([2, 3]),
                rng.randrange(6),
                None,
                rng.choice([None, 0.1, 0.25, rng.random()]),
                rng.choice([None, 16, 32, 33]),
            )
            for _ in range(rng.randrange(0, 41))
        ]
        world_size = rng.choice([2, 3])
        step_times, batch = series(points, world_size)
        assert step_times == _step_times_point_by_point(points)
        assert list(step_times) == list(_step_times_point_by_point(points))
        assert batch == _global_batch_point_by_point(points, world_size)


def _checked(metrics: JobMetrics) -> JobMetrics:
    """The same metrics through the constructor, which checks every value and normalizes its form."""
    return JobMetrics(**{f.name: getattr(metrics, f.name) for f in dataclasses.fields(metrics)})


def test_the_metrics_read_are_what_the_checking_constructor_makes_of_them(
    reader: tuple[MetricsReader, InMemoryStore, ControllerStore],
) -> None:
    """The reader builds each job's metrics without checking them again: random rounds of random reports (losses,
    step times and batches left out or not, noise scales, resizes, steps out of order) give metrics the checking
    constructor makes the very same of, field for field, in the same types and order."""
    kept, metrics, store = reader
    rng = random.Random(17)
    for job in ("job-a", "job-b"):
        size, seq = 2, 0
        for rnd in range(60):
            if rnd % 11 == 10:
                size = rng.randint(1, 8)
            for rank in range(size):
                seq += 1
                point = metrics_pb2.StepPoint(
                    seq=seq, step=max(0, rnd - rng.randint(0, 1)), wall_time=1.7e9 + rnd + rank / 10
                )
                if rng.random() < 0.8:
                    point.loss = rng.uniform(-5, 5)
                if rng.random() < 0.8:
                    point.step_time_seconds = rng.choice([0.1, rng.uniform(0.001, 3)])
                if rng.random() < 0.8:
                    point.batch_size = rng.choice([16, 32, 33])
                if rng.random() < 0.8:
                    point.examples_per_second = rng.uniform(0, 500)
                if rng.random() < 0.3:
                    point.gradient_noise_scale = rng.uniform(0, 1000)
                    point.grad_sq_norm = 1.0
                    point.grad_variance = rng.uniform(0, 10)
                metrics.ingest(
                    metrics_pb2.ReportBatch(
                        job_id=job,
                        worker=metrics_pb2.WorkerRef(instance=f"worker-{rank}", rank=rank),
                        incarnation=f"inc-{seq}",
                        world_size=size,
                        points=[point],
                    )
                )
            read = kept.read(job)
            store.record_throughputs(list(read.history))
            got = read.metrics
            assert repr(got) == repr(_checked(got))
            assert got == _checked(got)
            assert list(got.throughput) == sorted(got.throughput)
            assert list(got.step_times) == sorted(got.step_times)
    assert kept.read("job-none").metrics == JobMetrics()
