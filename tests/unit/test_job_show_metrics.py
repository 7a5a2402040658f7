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
