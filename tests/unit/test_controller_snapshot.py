"""What the controller puts in the snapshot from the metrics store: the gradient noise scale, the global
batch, the measured step time of every configuration and the loss window (a real store, a scripted cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest

from submarine_elastic.controller.service import (
    LOSS_POINTS,
    METRICS_JOBS,
    METRICS_POINTS_PER_JOB,
    SERIES_WINDOW,
    ControllerService,
    metrics_store,
)
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.metrics.api import RECENT_POINTS
from submarine_elastic.metrics.proto import metrics_pb2
from submarine_elastic.metrics.store import InMemoryStore
from submarine_elastic.policy import LOSS_WINDOW, PolicyEngine, Snapshot, StepTime, load_arbiter, load_job_policy
from submarine_elastic.sim import ClusterConfig, ClusterView
from submarine_elastic.sim.policy_adapter import to_snapshot
from tests.unit.test_controller import Clock, ReplacingCluster
from tests.unit.test_sim_policies import view_job


def report(
    store: InMemoryStore,
    *,
    rank: int,
    world_size: int,
    batch: int,
    step_times: list[float],
    first_step: int,
    first_seq: int | None = None,
    **noise: float,
) -> None:
    store.ingest(
        metrics_pb2.ReportBatch(
            job_id="job",
            worker=metrics_pb2.WorkerRef(instance=f"worker-{rank}", rank=rank),
            incarnation=f"w{world_size}",
            world_size=world_size,
            points=[
                metrics_pb2.StepPoint(
                    seq=(first_step + 1 if first_seq is None else first_seq) + i,  # rising with a worker's steps
                    step=first_step + i,
                    step_time_seconds=t,
                    batch_size=batch,
                    wall_time=1.7e9 + first_step + i,
                    **(noise if i == len(step_times) - 1 else {}),
                )
                for i, t in enumerate(step_times)
            ],
        )
    )


def snapshot_of(tmp_path: Path, metrics: InMemoryStore, workers: int) -> Snapshot:
    cluster, clock = ReplacingCluster(capacity=8), Clock()
    engine = PolicyEngine(load_job_policy("static"), load_arbiter("fair-share"), cooldown_s=0)
    seen: list[Snapshot] = []
    decide = engine.decide
    engine.decide = lambda snapshot: seen.append(snapshot) or decide(snapshot)  # type: ignore[method-assign]
    c = ControllerService(
        ControllerStore(tmp_path / "c.db"), engine, cluster, metrics=metrics, capacity=cluster.slots, clock=clock
    )
    c.job_submitted("job", 1, max(4, workers), workers)
    cluster.sizes["job"] = workers
    c.tick()
    assert c.wait_idle(10)
    return seen[-1]


def test_the_snapshot_carries_noise_scale_batch_and_step_time_per_configuration(tmp_path: Path) -> None:
    metrics = InMemoryStore()
    # Two workers of 32, then three of 22 + 21 + 21 (a global batch of 64 split unevenly). Each ring's first step
    # (its warm-up: tracing for the new batch, the ring's connections) is left out of the step times.
    for rank in range(2):
        report(metrics, rank=rank, world_size=2, batch=32, step_times=[7.0, 0.5, 0.4, 9.0, 0.45, 0.5], first_step=0)
    for rank, batch in enumerate((22, 21, 21)):
        report(
            metrics,
            rank=rank,
            world_size=3,
            batch=batch,
            step_times=[5.0] + [0.3] * 4,
            first_step=10,
            first_seq=1,  # a new incarnation: its sender counts from 1 again
            gradient_noise_scale=500.0 + rank,
            grad_sq_norm=0.02,
            grad_variance=10.0,
        )
    [job] = snapshot_of(tmp_path, metrics, workers=3).jobs
    m = job.metrics
    assert m.gradient_noise_scale == 502.0  # the latest estimate (rank 2's came last at step 13)
    assert m.batch_size == 64
    assert m.configurations == (
        StepTime(workers=2, nodes=1, local_batch=32, accum_steps=0, seconds=0.5, steps=10),  # the median
        StepTime(workers=3, nodes=1, local_batch=21, accum_steps=0, seconds=0.3, steps=8),
        StepTime(workers=3, nodes=1, local_batch=22, accum_steps=0, seconds=0.3, steps=4),
    )


def test_a_job_that_reports_no_noise_or_batch_has_none_in_the_snapshot(tmp_path: Path) -> None:
    metrics = InMemoryStore()
    metrics.ingest(
        metrics_pb2.ReportBatch(
            job_id="job",
            worker=metrics_pb2.WorkerRef(instance="worker-0", rank=0),
            incarnation="a",
            world_size=1,
            points=[metrics_pb2.StepPoint(seq=1, step=1, loss=0.5, step_time_seconds=0.2, wall_time=1.7e9)],
        )
    )
    [job] = snapshot_of(tmp_path, metrics, workers=1).jobs
    assert (job.metrics.gradient_noise_scale, job.metrics.batch_size, job.metrics.configurations) == (None, None, ())


def test_the_snapshot_carries_the_measured_resize_cost(tmp_path: Path) -> None:
    metrics = InMemoryStore()
    # rank 0's step 4 at two workers ends at 1.7e9 + 4 s; step 10 at three ends 6 s later and took 0.3 s: 5.7 s lost
    report(metrics, rank=0, world_size=2, batch=32, step_times=[0.5] * 5, first_step=0)
    report(metrics, rank=0, world_size=3, batch=21, step_times=[0.3] * 4, first_step=10)
    [job] = snapshot_of(tmp_path, metrics, workers=3).jobs
    assert job.metrics.resize_cost_s == pytest.approx(5.7)


def test_the_global_batch_is_one_steps_across_a_batch_change_and_not_an_epochs_short_last_step(
    tmp_path: Path,
) -> None:
    """Rank 0 has reported steps at the new batch (3 x 134) that ranks 1 and 2 have not sent yet: the snapshot's
    batch is what the steps all three reported add up to (the old 22 + 21 + 21), never one rank's new batch
    beside the others' old ones. Once as many steps at the new batch are in, it is the new one; an epoch's
    shorter last step does not change it."""
    metrics = InMemoryStore()
    report(metrics, rank=0, world_size=3, batch=22, step_times=[0.3] * 4, first_step=0)
    report(metrics, rank=0, world_size=3, batch=134, step_times=[0.3] * 4, first_step=4)
    for rank in (1, 2):
        report(metrics, rank=rank, world_size=3, batch=21, step_times=[0.3] * 4, first_step=0)
    [job] = snapshot_of(tmp_path, metrics, workers=3).jobs
    assert job.metrics.batch_size == 64
    for rank in (1, 2):
        report(metrics, rank=rank, world_size=3, batch=134, step_times=[0.3] * 4, first_step=4)
    [job] = snapshot_of(tmp_path / "again", metrics, workers=3).jobs
    assert job.metrics.batch_size == 402
    for rank in range(3):  # the epoch's last step: 100 samples left, 34 + 33 + 33
        report(metrics, rank=rank, world_size=3, batch=34 if rank == 0 else 33, step_times=[0.1], first_step=8)
    [job] = snapshot_of(tmp_path / "short", metrics, workers=3).jobs
    assert job.metrics.batch_size == 402


def report_losses(store: InMemoryStore, *, rank: int, world_size: int, losses: dict[int, float]) -> None:
    store.ingest(
        metrics_pb2.ReportBatch(
            job_id="job",
            worker=metrics_pb2.WorkerRef(instance=f"worker-{rank}", rank=rank),
            incarnation="a",
            world_size=world_size,
            points=[
                metrics_pb2.StepPoint(seq=step + 1, step=step, loss=loss, wall_time=1.7e9 + step)
                for step, loss in sorted(losses.items())
            ],
        )
    )


def test_the_loss_window_has_one_entry_per_step_the_mean_of_the_ranks(tmp_path: Path) -> None:
    metrics = InMemoryStore()
    for first in range(0, 40, 4):  # 40 steps of two ranks, 4 at a time each; rank 1's loss is rank 0's plus 1
        for rank in range(2):
            losses = {step: 100.0 - step + rank for step in range(first, first + 4)}
            report_losses(metrics, rank=rank, world_size=2, losses=losses)
    [job] = snapshot_of(tmp_path, metrics, workers=2).jobs
    assert job.metrics.loss_window == tuple(100.5 - step for step in range(40 - LOSS_WINDOW, 40))


def test_a_large_rings_loss_window_spans_the_steps_of_the_points_read_in_a_round(tmp_path: Path) -> None:
    metrics = InMemoryStore()
    for first in range(0, 40, 4):  # 16 ranks, 40 steps
        for rank in range(16):
            report_losses(metrics, rank=rank, world_size=16, losses={s: 100.0 - s for s in range(first, first + 4)})
    [job] = snapshot_of(tmp_path, metrics, workers=16).jobs
    steps = LOSS_POINTS // 16
    assert job.metrics.loss_window == tuple(100.0 - step for step in range(40 - steps, 40))


def test_a_reported_loss_reaches_the_policies_through_the_metrics_store_as_in_the_simulator(tmp_path: Path) -> None:
    """What a JVM scheduler reports (``report_metrics``, the bridge's ``reportMetrics``) is kept as a point in the
    metrics store, nowhere else, and gives the same loss window as the simulator gives for the same history."""
    history = tuple(2.0 / (1 + epoch) for epoch in range(40))
    metrics = InMemoryStore()
    cluster, clock = ReplacingCluster(capacity=8), Clock()
    engine = PolicyEngine(load_job_policy("static"), load_arbiter("fair-share"), cooldown_s=0)
    seen: list[Snapshot] = []
    decide = engine.decide
    engine.decide = lambda snapshot: seen.append(snapshot) or decide(snapshot)  # type: ignore[method-assign]
    c = ControllerService(
        ControllerStore(tmp_path / "c.db"), engine, cluster, metrics=metrics, capacity=cluster.slots, clock=clock
    )
    c.job_submitted("job", 1, 4, 1)
    cluster.sizes["job"] = 1
    for step, loss in enumerate(history):
        c.report_metrics("job", 1, step, 100.0, loss=loss)
    assert [p.point.loss for p in metrics.series("job", 100)] == list(history)
    assert c.store.get("loss/job") is None
    c.tick()
    assert c.wait_idle(10)
    [job] = seen[-1].jobs
    simulated = ClusterView(
        0.0, ClusterConfig(1, 4), 4, (view_job(metric_history=history, metric_higher_is_better=False),)
    )
    [in_simulator] = to_snapshot(simulated).jobs
    assert job.metrics.loss_window == in_simulator.metrics.loss_window == history[-LOSS_WINDOW:]


def test_a_new_run_of_a_name_reads_none_of_the_last_runs_metrics(tmp_path: Path) -> None:
    metrics = InMemoryStore()
    engine = PolicyEngine(load_job_policy("static"), load_arbiter("fair-share"))
    c = ControllerService(ControllerStore(tmp_path / "c.db"), engine, ReplacingCluster(capacity=8), metrics=metrics)
    c.job_submitted("job", 1, 4, 2)
    report_losses(metrics, rank=0, world_size=2, losses={0: 1.0, 1: 0.9})
    c.report_metrics("job", 2, 2, 100.0, loss=0.8)
    c.job_submitted("job", 1, 4, 2)  # submitted again: a new run
    assert "job" not in metrics.jobs()
    c.report_metrics("job", 2, 0, 50.0, loss=2.0)
    assert [(p.point.step, p.point.loss) for p in metrics.series("job", 10)] == [(0, 2.0)]
    assert c.store.throughput("job") == {2: (50.0, 1)}


def test_the_controllers_metrics_store_keeps_every_job_of_a_controller_of_up_to_its_bound(tmp_path: Path) -> None:
    # More jobs than a metrics store keeps by default (256): each still has its metrics in the snapshot.
    jobs = 300
    cluster = ReplacingCluster(capacity=3 * jobs)
    seen: list[Snapshot] = []
    engine = PolicyEngine(load_job_policy("static"), load_arbiter("fair-share"), cooldown_s=0)
    decide = engine.decide
    engine.decide = lambda snapshot: seen.append(snapshot) or decide(snapshot)  # type: ignore[method-assign]
    c = ControllerService(ControllerStore(tmp_path / "c.db"), engine, cluster, capacity=cluster.slots, clock=Clock())
    for i in range(jobs):
        job = f"job-{i:03d}"
        c.job_submitted(job, 1, 2, 1)
        cluster.sizes[job] = 1
        c.metrics.ingest(
            metrics_pb2.ReportBatch(
                job_id=job,
                worker=metrics_pb2.WorkerRef(instance="worker-0", rank=0),
                incarnation="i1",
                world_size=1,
                points=[metrics_pb2.StepPoint(seq=1, step=i + 1, loss=1.0, wall_time=1.7e9)],
            )
        )
    c.tick()
    assert c.wait_idle(10)
    assert sorted(v.metrics.step for v in seen[-1].jobs) == list(range(1, jobs + 1))


def test_the_controllers_metrics_store_is_bounded_in_jobs_and_points() -> None:
    store = metrics_store()
    for i in range(METRICS_JOBS + 1):
        store.ingest(
            metrics_pb2.ReportBatch(
                job_id=f"job-{i:04d}",
                worker=metrics_pb2.WorkerRef(instance="worker-0", rank=0),
                incarnation="i1",
                world_size=1,
                points=[metrics_pb2.StepPoint(seq=1, step=1, wall_time=1.7e9)],
            )
        )
    assert len(store.jobs()) == METRICS_JOBS == 1024
    assert "job-0000" not in store.jobs()  # the least recently updated went
    report(store, rank=0, world_size=1, batch=32, step_times=[0.1] * (METRICS_POINTS_PER_JOB + 10), first_step=0)
    assert len(store.series("job", 10_000)) == METRICS_POINTS_PER_JOB == 1024
    # A round reads no more of a job than the store keeps as tuples.
    assert SERIES_WINDOW <= LOSS_POINTS <= RECENT_POINTS <= METRICS_POINTS_PER_JOB


def test_the_snapshot_carries_the_count_a_job_was_submitted_with(tmp_path: Path) -> None:
    """What the goodput policy caps a job at before it has measured anything: the simulator gives it the
    count the job was submitted with, and live it went unknown, so an arrival that had to wait started at one
    worker and grew 1 -> 2 -> 4 a measurement at a time (the simulator started it at 4)."""
    [job] = snapshot_of(tmp_path, InMemoryStore(), workers=3).jobs
    assert job.requested_workers == 3
