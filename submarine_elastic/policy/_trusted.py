"""Internal, for the controller's metrics reader only: :class:`~.api.JobMetrics` and the figures in it made of
values taken as they are, unchecked. The reader builds every job's metrics every round, and the constructors'
checks cost as much as the rest of reading them; its values were checked where they came in (the metrics store's
ingest, the controller's API). Everything else uses the constructors, which check every value."""

from __future__ import annotations

from submarine_elastic.policy.api import JobMetrics, StepTime, Throughput


def throughput(samples_per_second: float, steps: int) -> Throughput:
    """``Throughput(samples_per_second, steps)``, unchecked."""
    measured = object.__new__(Throughput)
    measured.__dict__.update(samples_per_second=samples_per_second, steps=steps)
    return measured


def step_time(workers: int, local_batch: float, seconds: float, steps: int) -> StepTime:
    """``StepTime(workers, 1, local_batch, 0, seconds, steps=steps)`` (one node, no accumulation, no sync time
    measured apart), unchecked."""
    measured = object.__new__(StepTime)
    measured.__dict__.update(
        workers=workers,
        nodes=1,
        local_batch=local_batch,
        accum_steps=0,
        seconds=seconds,
        sync_seconds=None,
        steps=steps,
    )
    return measured


def job_metrics(
    step: int,
    throughput: dict[int, Throughput],
    step_times: dict[str, tuple[float, ...]],
    loss_window: tuple[float, ...],
    gradient_noise_scale: float | None,
    batch_size: int | None,
    configurations: tuple[StepTime, ...],
    resize_cost_s: float | None,
) -> JobMetrics:
    """The :class:`JobMetrics` of these values, unchecked; given in the form its constructor leaves them:
    ``throughput`` in world-size order, ``step_times`` in name order with tuples of floats, ``loss_window`` a tuple
    of floats (no learning rate, remaining samples nor accumulation steps)."""
    metrics = object.__new__(JobMetrics)
    metrics.__dict__.update(
        step=step,
        throughput=throughput,
        step_times=step_times,
        loss_window=loss_window,
        gradient_noise_scale=gradient_noise_scale,
        batch_size=batch_size,
        learning_rate=None,
        remaining_samples=None,
        configurations=configurations,
        accum_steps=None,
        resize_cost_s=resize_cost_s,
    )
    return metrics
