"""What `job show` says of a job's metrics, from the metrics service's summary."""

from __future__ import annotations

from submarine_elastic.cli.job import summary_line
from submarine_elastic.metrics.proto import metrics_pb2 as mpb


def test_the_line_gives_step_loss_and_the_throughput_at_the_current_size():
    summary = mpb.JobSummary(job_id="j", world_size=2, last_step=41, last_loss=0.25)
    summary.throughput.add(world_size=1, aggregate_examples_per_second=50.0)
    summary.throughput.add(world_size=2, aggregate_examples_per_second=90.4)
    assert summary_line(summary) == ", step 41, loss 0.25, 90 samples/s"


def test_refused_points_are_shown_with_the_last_reason():
    summary = mpb.JobSummary(
        job_id="j", last_step=3, points_rejected=12, last_rejection="step_time_seconds 0.0 is outside (0, 86400]"
    )
    assert summary_line(summary) == (
        ", step 3; 12 metric points refused (last: step_time_seconds 0.0 is outside (0, 86400])"
    )


def test_the_gradient_noise_scale_is_shown_with_its_step_when_reported():
    summary = mpb.JobSummary(job_id="j", world_size=2, last_step=41, gradient_noise_scale=1234.5, noise_step=40)
    assert summary_line(summary) == ", step 41, gradient noise scale 1234 samples (step 40)"


def test_the_summary_of_a_store_carries_the_noise_estimate_to_the_wire():
    from submarine_elastic.metrics.server import summary_to_proto
    from submarine_elastic.metrics.store import InMemoryStore

    store = InMemoryStore()
    store.ingest(
        mpb.ReportBatch(
            job_id="j",
            worker=mpb.WorkerRef(instance="worker-0"),
            incarnation="a",
            world_size=2,
            points=[
                mpb.StepPoint(
                    seq=1, step=7, wall_time=1.7e9, gradient_noise_scale=80.0, grad_sq_norm=0.5, grad_variance=40.0
                )
            ],
        )
    )
    message = summary_to_proto(store.summary("j"))
    assert (message.gradient_noise_scale, message.grad_sq_norm, message.grad_variance, message.noise_step) == (
        80.0,
        0.5,
        40.0,
        7,
    )
    assert "gradient noise scale 80 samples (step 7)" in summary_line(message)
