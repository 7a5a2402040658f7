"""The rules a ``ReportBatch`` must follow before a store keeps any of it."""

from __future__ import annotations

from submarine_elastic.metrics.api import (
    INCARNATION_PATTERN,
    INSTANCE_PATTERN,
    JOB_ID_PATTERN,
    MAX_ABS_VALUE,
    MAX_POINTS_PER_BATCH,
    MAX_USER_METRICS,
    MAX_WORLD_SIZE,
    USER_METRIC_PATTERN,
    InvalidPointError,
)
from submarine_elastic.metrics.proto import metrics_pb2

_RANGE = f"a finite number in [-{MAX_ABS_VALUE:g}, {MAX_ABS_VALUE:g}]"
_NON_NEGATIVE = f"a finite number in [0, {MAX_ABS_VALUE:g}]"


def _in_range(value: float) -> bool:
    return -MAX_ABS_VALUE <= value <= MAX_ABS_VALUE


def _short(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:40] + "...")


def validate_job_id(job_id: str) -> None:
    """Checks ``job_id`` is a YARN service name.

    Raises:
        InvalidPointError: it is not (field ``job_id``).
    """
    if not JOB_ID_PATTERN.fullmatch(job_id):
        raise InvalidPointError("job_id", f"{_short(job_id)} is not a job name ([a-z][a-z0-9-]{{0,63}})")


def validate_batch(batch: metrics_pb2.ReportBatch) -> None:
    """Checks every rule of ``metrics.proto`` on ``batch``; stops at the first broken one.

    Raises:
        InvalidPointError: naming the first field that breaks a rule.
    """
    validate_job_id(batch.job_id)
    if not batch.HasField("worker"):
        raise InvalidPointError("worker", "missing")
    if not INSTANCE_PATTERN.fullmatch(batch.worker.instance):
        raise InvalidPointError("worker.instance", f"{_short(batch.worker.instance)} is not an instance name")
    if not INCARNATION_PATTERN.fullmatch(batch.incarnation):
        raise InvalidPointError("incarnation", f"{_short(batch.incarnation)} is not 1-64 of [A-Za-z0-9._:-]")
    world_size = batch.world_size
    if not 1 <= world_size <= MAX_WORLD_SIZE:
        raise InvalidPointError("world_size", f"{world_size} is outside [1, {MAX_WORLD_SIZE}]")
    if not 0 <= batch.worker.rank < world_size:
        raise InvalidPointError("worker.rank", f"{batch.worker.rank} is outside [0, world_size={world_size})")
    points = batch.points
    if not 1 <= len(points) <= MAX_POINTS_PER_BATCH:
        raise InvalidPointError("points", f"{len(points)} points; a batch holds 1 to {MAX_POINTS_PER_BATCH}")
    previous_seq = 0
    for i, point in enumerate(points):
        seq = point.seq
        if seq <= previous_seq:
            what = "must be at least 1" if i == 0 else f"must be above the previous point's {previous_seq}"
            raise InvalidPointError(f"points[{i}].seq", f"{seq} {what}")
        previous_seq = seq
        _validate_point(i, point)


def _validate_point(i: int, point: metrics_pb2.StepPoint) -> None:
    if point.step < 0:
        raise InvalidPointError(f"points[{i}].step", f"{point.step} is negative")
    wall_time = point.wall_time
    if not 0 < wall_time <= MAX_ABS_VALUE:
        raise InvalidPointError(f"points[{i}].wall_time", f"{wall_time} is not a positive finite number")
    if point.HasField("loss") and not _in_range(point.loss):
        raise InvalidPointError(f"points[{i}].loss", f"{point.loss} is not {_RANGE}")
    for name in ("examples_per_second", "step_time_seconds", "learning_rate"):
        if point.HasField(name):
            value = getattr(point, name)
            if not 0 <= value <= MAX_ABS_VALUE:
                raise InvalidPointError(f"points[{i}].{name}", f"{value} is not {_NON_NEGATIVE}")
    if point.HasField("batch_size") and point.batch_size < 1:
        raise InvalidPointError(f"points[{i}].batch_size", f"{point.batch_size} is below 1")
    user_metrics = point.user_metrics
    if user_metrics:
        if len(user_metrics) > MAX_USER_METRICS:
            raise InvalidPointError(
                f"points[{i}].user_metrics", f"{len(user_metrics)} entries; at most {MAX_USER_METRICS}"
            )
        for key, value in user_metrics.items():
            if not USER_METRIC_PATTERN.fullmatch(key):
                raise InvalidPointError(f"points[{i}].user_metrics", f"{_short(key)} is not a metric name")
            if not _in_range(value):
                raise InvalidPointError(f"points[{i}].user_metrics[{key}]", f"{value} is not {_RANGE}")
