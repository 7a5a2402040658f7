"""InMemoryStore: de-duplication, gaps, bounds, aggregates and subscriptions."""

from __future__ import annotations

import dataclasses
import math
import threading

import pytest

from submarine_elastic.metrics.api import RECENT_POINTS, InvalidPointError, MetricsStore, RecentPoint, UnknownJobError
from submarine_elastic.metrics.proto import metrics_pb2
from submarine_elastic.metrics.store import InMemoryStore


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def batch(
    seqs: list[int],
    *,
    job: str = "job-a",
    instance: str = "worker-0",
    incarnation: str = "inc-1",
    rank: int = 0,
    world_size: int = 1,
    loss: float | None = None,
    eps: float | None = None,
) -> metrics_pb2.ReportBatch:
    points = []
    for seq in seqs:
        point = metrics_pb2.StepPoint(seq=seq, step=seq * 10, wall_time=1.7e9 + seq)
        if loss is not None:
            point.loss = loss
        if eps is not None:
            point.examples_per_second = eps
            point.step_time_seconds = 0.5
        points.append(point)
    return metrics_pb2.ReportBatch(
        job_id=job,
        worker=metrics_pb2.WorkerRef(instance=instance, rank=rank),
        incarnation=incarnation,
        world_size=world_size,
        points=points,
    )


def steps(store: InMemoryStore, job: str = "job-a") -> list[int]:
    return [p.point.step for p in store.series(job, 10_000)]


def test_resent_points_are_kept_once() -> None:
    store = InMemoryStore()
    first = store.ingest(batch([1, 2, 3]))
    again = store.ingest(batch([2, 3, 4, 5]))
    assert (first.accepted, first.duplicates, first.last_seq) == (3, 0, 3)
    assert (again.accepted, again.duplicates, again.last_seq) == (2, 2, 5)
    assert again.key == "job-a/worker-0/inc-1"
    assert steps(store) == [10, 20, 30, 40, 50]
    summary = store.summary("job-a")
    assert (summary.points_received, summary.points_duplicate, summary.points_missing) == (5, 2, 0)


def test_a_new_incarnation_has_its_own_seq_space() -> None:
    store = InMemoryStore()
    store.ingest(batch([1, 2]))
    result = store.ingest(batch([1, 2], incarnation="inc-2", world_size=2, rank=1))
    assert result.accepted == 2
    assert store.summary("job-a").points_received == 4
    assert store.summary("job-a").world_size == 2


def test_gaps_in_seq_are_counted_as_missing() -> None:
    store = InMemoryStore()
    store.ingest(batch([3, 4]))  # 1 and 2 never arrived
    store.ingest(batch([8]))  # 5, 6, 7 never arrived
    summary = store.summary("job-a")
    assert (summary.points_received, summary.points_missing) == (3, 5)


def test_ring_keeps_the_most_recent_points() -> None:
    store = InMemoryStore(points_per_job=4)
    store.ingest(batch(list(range(1, 11))))
    assert steps(store) == [70, 80, 90, 100]
    assert [p.point.step for p in store.series("job-a", 2)] == [90, 100]
    assert store.summary("job-a").points_received == 10


def test_least_recently_updated_job_is_evicted() -> None:
    store = InMemoryStore(max_jobs=2)
    store.ingest(batch([1], job="job-a"))
    store.ingest(batch([1], job="job-b"))
    store.ingest(batch([2], job="job-a"))
    store.ingest(batch([1], job="job-c"))
    assert sorted(store.jobs()) == ["job-a", "job-c"]
    with pytest.raises(UnknownJobError):
        store.summary("job-b")


def test_dedup_keys_per_job_are_bounded() -> None:
    store = InMemoryStore(max_keys_per_job=2)
    for inc in ("i1", "i2", "i3"):
        store.ingest(batch([1], incarnation=inc))
    # i1 was forgotten, so its resend counts again; i3 is still known.
    assert store.ingest(batch([1], incarnation="i1")).accepted == 1
    assert store.ingest(batch([1], incarnation="i3")).duplicates == 1


def test_aggregates_throughput_per_world_size_and_loss_trend() -> None:
    store = InMemoryStore(ema_alpha=0.5)
    store.ingest(batch([1], eps=100.0, world_size=2, loss=4.0))
    store.ingest(batch([2], eps=200.0, world_size=2, loss=2.0))
    store.ingest(batch([1], eps=50.0, world_size=4, incarnation="inc-2", loss=1.0))
    summary = store.summary("job-a")
    assert [t.world_size for t in summary.throughput] == [2, 4]
    two, four = summary.throughput
    assert (two.per_worker_examples_per_second, two.aggregate_examples_per_second, two.points) == (150.0, 300.0, 2)
    assert (four.per_worker_examples_per_second, four.aggregate_examples_per_second) == (50.0, 200.0)
    assert four.step_time_seconds == 0.5
    assert summary.last_loss == 1.0
    assert summary.loss_ema == pytest.approx(0.5 * 1.0 + 0.5 * (0.5 * 2.0 + 0.5 * 4.0))
    # losses (step, loss): (10, 4), (20, 2), (10, 1): least squares slope over step
    xs, ys = [10, 20, 10], [4.0, 2.0, 1.0]
    mx, my = sum(xs) / 3, sum(ys) / 3
    expected = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    assert summary.loss_slope_per_step == pytest.approx(expected)
    assert summary.last_step == 10
    # without the trend (what the controller reads every round), the rest as it is
    assert store.summary("job-a", trend=False) == dataclasses.replace(summary, loss_slope_per_step=None)


def test_active_workers_counts_recent_instances() -> None:
    clock = FakeClock()
    store = InMemoryStore(activity_window_seconds=30, clock=clock)
    store.ingest(batch([1], instance="worker-0"))
    clock.now += 20
    store.ingest(batch([1], instance="worker-1", world_size=2, rank=1))
    assert store.summary("job-a").active_workers == 2
    clock.now += 20
    assert store.summary("job-a").active_workers == 1
    assert store.summary("job-a").last_update == 1020.0


def test_invalid_batch_changes_nothing_and_is_counted() -> None:
    store = InMemoryStore()
    store.ingest(batch([1], loss=1.0))
    bad = batch([2, 3], loss=2.0)
    bad.points[1].loss = math.nan
    with pytest.raises(InvalidPointError) as e:
        store.ingest(bad)
    assert e.value.field == "points[1].loss"
    summary = store.summary("job-a")
    assert (summary.points_received, summary.points_rejected, summary.last_loss) == (1, 2, 1.0)
    assert steps(store) == [10]
    # the valid seq 2 was not consumed by the rejected batch
    assert store.ingest(batch([2])).accepted == 1


def test_rejections_of_unknown_or_invalid_jobs_are_unattributed() -> None:
    store = InMemoryStore()
    with pytest.raises(InvalidPointError, match="job_id"):
        store.ingest(batch([1], job="Not_A_Job"))
    with pytest.raises(InvalidPointError, match="world_size"):
        store.ingest(batch([1, 2], job="job-new", world_size=0))
    assert store.rejected_unattributed() == 3
    assert store.jobs() == []


def test_a_forgotten_job_is_gone_and_starts_afresh() -> None:
    store = InMemoryStore()
    store.ingest(batch([1, 2], loss=1.0, eps=100.0))
    store.ingest(batch([1], job="job-b"))
    store.forget("job-a")
    store.forget("job-x")  # nothing held: nothing happens
    assert store.jobs() == ["job-b"]
    with pytest.raises(UnknownJobError):
        store.summary("job-a")
    store.ingest(batch([1], loss=2.0))  # the same worker's seq 1 again is a new point, not a resend
    assert steps(store) == [10]
    assert store.summary("job-a").points_received == 1


def test_unknown_job_queries_raise() -> None:
    store = InMemoryStore()
    with pytest.raises(UnknownJobError, match="job-x"):
        store.summary("job-x")
    with pytest.raises(UnknownJobError):
        store.series("job-x", 5)


def test_subscription_gets_accepted_points_only() -> None:
    store = InMemoryStore()
    sub = store.subscribe("job-a")
    other = store.subscribe("job-b")
    everything = store.subscribe()
    store.ingest(batch([1, 2]))
    store.ingest(batch([2, 3]))
    first, second = sub.get(1.0), sub.get(1.0)
    assert first is not None and second is not None
    assert [p.point.seq for p in first.points] == [1, 2]
    assert [p.point.seq for p in second.points] == [3]
    assert second.points[0].worker.instance == "worker-0"
    assert sub.get(0.01) is None
    assert other.get(0.01) is None
    assert everything.get(0.01) is not None


def test_slow_subscriber_loses_oldest_events_without_blocking_ingest() -> None:
    store = InMemoryStore()
    sub = store.subscribe(capacity=2)
    for seq in range(1, 6):
        store.ingest(batch([seq]))
    assert sub.dropped == 3
    events = [sub.get(0.1), sub.get(0.1)]
    assert [e.points[0].point.seq for e in events if e is not None] == [4, 5]


def test_close_wakes_a_blocked_subscriber() -> None:
    store = InMemoryStore()
    sub = store.subscribe()
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(sub.get(30.0)))
    reader.start()
    store.close()
    reader.join(5.0)
    assert not reader.is_alive()
    assert got == [None] and sub.closed
    store.ingest(batch([1]))  # no subscriber left, ingest still works


@pytest.mark.parametrize(
    "kwargs",
    [{"max_jobs": 0}, {"points_per_job": 0}, {"max_keys_per_job": 0}, {"trend_window": 1}, {"ema_alpha": 0.0}],
)
def test_constructor_rejects_bad_bounds(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        InMemoryStore(**kwargs)  # type: ignore[arg-type]


def noisy(seqs: list[int], noise: dict[int, float], **kwargs: object) -> metrics_pb2.ReportBatch:
    """``batch`` whose steps at the seqs in ``noise`` carry a noise estimate of that scale."""
    b = batch(seqs, **kwargs)  # type: ignore[arg-type]
    for point in b.points:
        if point.seq in noise:
            point.gradient_noise_scale = noise[point.seq]
            point.grad_sq_norm = 0.5
            point.grad_variance = 0.5 * noise[point.seq]
    return b


def test_the_latest_noise_estimate_is_kept_per_job() -> None:
    store = InMemoryStore()
    store.ingest(batch([1, 2]))
    assert store.summary("job-a").noise is None  # no worker measured it
    store.ingest(noisy([3, 4, 5], {3: 100.0, 4: 200.0}))
    noise = store.summary("job-a").noise
    assert noise is not None
    assert (noise.step, noise.gradient_noise_scale, noise.grad_sq_norm, noise.grad_variance) == (40, 200.0, 0.5, 100.0)
    # Another rank's estimate of an earlier step, arriving later, does not replace a newer one.
    store.ingest(noisy([1, 2], {2: 50.0}, instance="worker-1", rank=1, world_size=2))
    assert store.summary("job-a").noise.gradient_noise_scale == 200.0  # type: ignore[union-attr]
    store.ingest(noisy([6], {6: 300.0}))
    assert store.summary("job-a").noise.step == 60  # type: ignore[union-attr]


def test_step_times_are_kept_per_configuration_with_their_median() -> None:
    store = InMemoryStore()
    b = batch(list(range(1, 101)), world_size=2)
    for i, point in enumerate(b.points):
        point.step_time_seconds = 100.0 if i < 30 else 0.25  # the oldest 30 fall out of the kept 64
        point.batch_size = 32 if i % 2 == 0 else 16
    store.ingest(b)
    store.ingest(batch([1, 2], incarnation="inc-2", world_size=3, eps=64.0))  # no batch size reported
    summary = store.summary("job-a")
    assert [(c.world_size, c.batch_size, c.median_step_time_seconds, c.steps) for c in summary.configurations] == [
        (2, 16, 0.25, 50),
        (2, 32, 0.25, 49),  # seq 1, the incarnation's first step, is its warm-up
        (3, 0, 0.5, 1),
    ]


def test_the_first_step_of_each_incarnation_is_left_out_of_the_step_times() -> None:
    """A ring's first step also traces the step for its new per-worker batch and opens the ring's connections:
    timed, it made a configuration measured over a few steps look several times slower than it runs."""
    store = InMemoryStore()
    for incarnation, size in (("inc-1", 2), ("inc-2", 3)):
        b = batch([1, 2, 3], incarnation=incarnation, world_size=size)
        for point, took in zip(b.points, (2.0, 0.25, 0.25), strict=True):
            point.step_time_seconds = took
            point.batch_size = 32
        store.ingest(b)
    b = batch([4, 5], incarnation="inc-2", world_size=3)  # the same ring goes on: nothing of it is left out
    for point in b.points:
        point.step_time_seconds, point.batch_size = 0.25, 32
    store.ingest(b)
    assert [(c.world_size, c.median_step_time_seconds, c.steps) for c in store.summary("job-a").configurations] == [
        (2, 0.25, 2),
        (3, 0.25, 4),
    ]


def test_configurations_per_job_are_bounded() -> None:
    from submarine_elastic.metrics.api import MAX_CONFIGURATIONS, STEP_TIME_SAMPLES

    store = InMemoryStore()
    for size in range(1, MAX_CONFIGURATIONS + 3):
        store.ingest(batch(list(range(1, STEP_TIME_SAMPLES + 10)), incarnation=f"inc-{size}", world_size=size, eps=1.0))
    configurations = store.summary("job-a").configurations
    assert [c.world_size for c in configurations] == list(range(3, MAX_CONFIGURATIONS + 3))
    assert all(c.steps == STEP_TIME_SAMPLES + 8 for c in configurations)  # each incarnation's first step left out


def timed(
    rank: int, world_size: int, rows: list[tuple[int, float, float]], *, instance: str = ""
) -> metrics_pb2.ReportBatch:
    """One worker's steps ``(step, wall time, step time)`` at ``world_size``, seqs from 1 in its own incarnation."""
    return metrics_pb2.ReportBatch(
        job_id="job-a",
        worker=metrics_pb2.WorkerRef(instance=instance or f"worker-{rank}", rank=rank),
        incarnation=f"ring-of-{world_size}",
        world_size=world_size,
        points=[
            metrics_pb2.StepPoint(seq=i + 1, step=step, wall_time=1.7e9 + wall, step_time_seconds=took)
            for i, (step, wall, took) in enumerate(rows)
        ],
    )


def test_a_resize_pause_is_rank_0s_gap_between_sizes_less_the_steps_own_time() -> None:
    store = InMemoryStore()
    store.ingest(timed(0, 2, [(s, 0.5 * s, 0.5) for s in range(1, 11)]))  # last step 10 ends at 5.0
    store.ingest(timed(1, 2, [(s, 0.5 * s, 0.5) for s in range(1, 11)]))
    assert store.summary("job-a").resize_pause_s is None  # no resize yet
    # Step 11 at three workers takes 0.4 s and ends at 7.4: the ring stood still for 2.0 s.
    store.ingest(timed(0, 3, [(11, 7.4, 0.4), (12, 7.8, 0.4)]))
    # another rank's steps at the new size, and a late batch of the old size, change nothing
    store.ingest(timed(2, 3, [(11, 9.0, 0.4)]))
    store.ingest(timed(0, 2, [(10, 5.0, 0.5)], instance="worker-old"))
    assert store.summary("job-a").resize_pause_s == pytest.approx(2.0)
    # A lost peer: back to two workers from the commit at step 11, so step 12 is trained again; the pause
    # is 1.0 s of standing still plus one step of 0.4 s redone. The median of 2.0 and 1.4 is 1.7.
    store.ingest(timed(0, 2, [(12, 7.8 + 1.0 + 0.5, 0.5)], instance="worker-0b"))
    assert store.summary("job-a").resize_pause_s == pytest.approx(1.7)
    # A job lost whole and resumed from a checkpoint long after is no resize pause.
    store.ingest(timed(0, 1, [(8, 4000.0, 0.9)]))
    assert store.summary("job-a").resize_pause_s == pytest.approx(1.7)


@pytest.mark.parametrize(
    "bounds",
    [{}, {"points_per_job": 50}, {"bytes_per_job": 64 * 1024}],
    ids=["default", "ring-of-50-points", "ring-bounded-by-bytes"],
)
def test_recent_points_are_the_series_newest_points_without_messages(bounds: dict[str, int]) -> None:
    store = InMemoryStore(**bounds)
    for seq in range(1, 400):
        for rank in range(3):
            point = metrics_pb2.StepPoint(seq=seq, step=seq, wall_time=1.7e9 + seq)
            if seq % 3:
                point.loss = 1.0 / seq
            if seq % 4:
                point.step_time_seconds = 0.1 * (rank + 1)
            if seq % 5:
                point.batch_size = 32 + rank
            points = [point]
            if seq % 7 == 0:  # a resend of the point before, then the new one
                points.insert(0, metrics_pb2.StepPoint(seq=seq - 1, step=seq - 1, wall_time=1.7e9 + seq - 1))
            store.ingest(
                metrics_pb2.ReportBatch(
                    job_id="job-a",
                    worker=metrics_pb2.WorkerRef(instance=f"worker-{rank}", rank=rank),
                    incarnation="inc-1",
                    world_size=3,
                    points=points,
                )
            )
    store.ingest(batch([1], job="job-b", loss=0.5))  # another job's points are not among job-a's
    for max_points in (0, 1, 40, 128, RECENT_POINTS, RECENT_POINTS + 100):
        built = MetricsStore.recent(store, "job-a", max_points)  # from the messages series() builds
        assert store.recent("job-a", max_points) == built
        assert len(built) == min(max_points, RECENT_POINTS, len(store.series("job-a", 10_000)))
    assert store.recent("job-b", 10) == [RecentPoint("worker-0", 0, 1, 10, 0.5, None, None)]
    with pytest.raises(UnknownJobError):
        store.recent("nope", 10)
