"""The rules a ``ReportBatch`` must follow before a store keeps any of it."""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter, methodcaller

import numpy as np

from submarine_elastic.limits import (
    INCARNATION,
    INSTANCE,
    JOB_NAME,
    MAX_ABS_VALUE,
    MAX_BATCH_SIZE,
    MAX_POINTS_PER_BATCH,
    MAX_SEQ,
    MAX_USER_METRICS,
    MAX_WORLD_SIZE,
    STEP_FLOAT_BOUNDS,
    USER_METRIC,
)
from submarine_elastic.metrics.api import InvalidPointError
from submarine_elastic.metrics.proto import metrics_pb2
from submarine_elastic.metrics.steps import ColumnSteps

_RANGE = f"a finite number in [-{MAX_ABS_VALUE:g}, {MAX_ABS_VALUE:g}]"


def _rule(low: float, closed: bool, high: float) -> str:
    return f"a finite number in {'[' if closed else '('}{low:g}, {high:g}]"


def _in_range(value: float) -> bool:
    return -MAX_ABS_VALUE <= value <= MAX_ABS_VALUE


def validate_job_id(job_id: str) -> None:
    """Checks ``job_id`` is a YARN service name.

    Raises:
        InvalidPointError: it is not (field ``job_id``).
    """
    if (problem := JOB_NAME.problem(job_id)) is not None:
        raise InvalidPointError("job_id", problem)


def validate_batch(batch: metrics_pb2.ReportBatch) -> ColumnSteps:
    """Checks every rule of ``metrics.proto`` on ``batch``; stops at the first broken one.

    Returns:
        The batch's steps as NumPy columns (copied from its columns, or gathered from its points).

    Raises:
        InvalidPointError: naming the first field that breaks a rule.
    """
    validate_job_id(batch.job_id)
    if not batch.HasField("worker"):
        raise InvalidPointError("worker", "missing")
    if (problem := INSTANCE.problem(batch.worker.instance)) is not None:
        raise InvalidPointError("worker.instance", problem)
    if (problem := INCARNATION.problem(batch.incarnation)) is not None:
        raise InvalidPointError("incarnation", problem)
    world_size = batch.world_size
    if not 1 <= world_size <= MAX_WORLD_SIZE:
        raise InvalidPointError("world_size", f"{world_size} is outside [1, {MAX_WORLD_SIZE}]")
    if not 0 <= batch.worker.rank < world_size:
        raise InvalidPointError("worker.rank", f"{batch.worker.rank} is outside [0, world_size={world_size})")
    if batch.HasField("columns"):
        if batch.points:
            raise InvalidPointError("columns", "a batch carries its steps in points or in columns, not in both")
        return _column_steps(batch.columns)
    points = batch.points
    if not 1 <= len(points) <= MAX_POINTS_PER_BATCH:
        raise InvalidPointError("points", f"{len(points)} points; a batch holds 1 to {MAX_POINTS_PER_BATCH}")
    previous_seq = 0
    for i, point in enumerate(points):
        seq = point.seq
        if seq <= previous_seq:
            what = "must be at least 1" if i == 0 else f"must be above the previous point's {previous_seq}"
            raise InvalidPointError(f"points[{i}].seq", f"{seq} {what}")
        if seq > MAX_SEQ:
            raise InvalidPointError(f"points[{i}].seq", f"{seq} is above the largest seq, {MAX_SEQ}")
        previous_seq = seq
        _validate_point(i, point)
    return _point_columns(points)


def _point_columns(points: Sequence[metrics_pb2.StepPoint]) -> ColumnSteps:
    """Valid ``points`` as columns, so the store keeps 8 bytes a value whichever way a batch came.

    Raises:
        InvalidPointError: the points name more than ``MAX_USER_METRICS`` user metrics between them.
    """
    n = len(points)
    seq = np.fromiter(map(attrgetter("seq"), points), np.uint64, n)
    step = np.fromiter(map(attrgetter("step"), points), np.int64, n)
    wall_time = np.fromiter(map(attrgetter("wall_time"), points), np.float64, n)
    optional: dict[str, np.ndarray] = {}
    for name, *_ in STEP_FLOAT_BOUNDS:
        has = np.fromiter(map(methodcaller("HasField", name), points), np.bool_, n)
        if has.any():
            values = np.fromiter(map(attrgetter(name), points), np.float64, n)
            values[~has] = np.nan
            optional[name] = values
    batch_size = None
    if any(map(methodcaller("HasField", "batch_size"), points)):
        batch_size = np.fromiter(map(attrgetter("batch_size"), points), np.int64, n)
    user: dict[str, np.ndarray] = {}
    for i, point in enumerate(points):
        for name, value in point.user_metrics.items():
            column = user.get(name)
            if column is None:
                if len(user) == MAX_USER_METRICS:
                    raise InvalidPointError(
                        f"points[{i}].user_metrics",
                        f"{name!r} would be the batch's user metric number {MAX_USER_METRICS + 1}; "
                        f"the points of a batch name at most {MAX_USER_METRICS} between them",
                    )
                column = user[name] = np.full(n, np.nan)
            column[i] = value
    return ColumnSteps(seq, step, wall_time, optional, batch_size, user)


def _column_steps(columns: metrics_pb2.StepColumns) -> ColumnSteps:
    """Checks ``columns`` against the same rules as points, all values of a column at once."""
    seq = np.fromiter(columns.seq, np.uint64, len(columns.seq))
    n = len(seq)
    if not 1 <= n <= MAX_POINTS_PER_BATCH:
        raise InvalidPointError("columns.seq", f"{n} steps; a batch holds 1 to {MAX_POINTS_PER_BATCH}")
    if seq[0] < 1:
        raise InvalidPointError("columns.seq[0]", "0 must be at least 1")
    if seq[-1] > MAX_SEQ:
        i = int(np.flatnonzero(seq > MAX_SEQ)[0])
        raise InvalidPointError(f"columns.seq[{i}]", f"{seq[i]} is above the largest seq, {MAX_SEQ}")
    if n > 1 and (bad := np.flatnonzero(seq[1:] <= seq[:-1])).size:
        i = int(bad[0]) + 1
        raise InvalidPointError(f"columns.seq[{i}]", f"{seq[i]} must be above the previous step's {seq[i - 1]}")

    def column(name: str, values: Sequence[float]) -> np.ndarray:
        if len(values) != n:
            raise InvalidPointError(f"columns.{name}", f"{len(values)} values; columns.seq has {n}")
        return np.fromiter(values, np.int64 if name in ("step", "batch_size") else np.float64, n)

    def optional_column(name: str, values: Sequence[float]) -> np.ndarray | None:
        if len(values) == 0:
            return None  # no step has the field
        if len(values) != n:
            raise InvalidPointError(f"columns.{name}", f"{len(values)} values; columns.seq has {n} (or leave it empty)")
        return column(name, values)

    def check(name: str, values: np.ndarray, ok: np.ndarray, rule: str) -> None:
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            raise InvalidPointError(f"columns.{name}[{i}]", f"{values[i]} is not {rule}")

    step = column("step", columns.step)
    wall_time = column("wall_time", columns.wall_time)
    check("step", step, step >= 0, "a step (>= 0)")
    check("wall_time", wall_time, (wall_time > 0) & (wall_time <= MAX_ABS_VALUE), "a positive finite number")
    optional: list[tuple[str, np.ndarray]] = []
    for name, low, closed, high in STEP_FLOAT_BOUNDS:
        values = optional_column(name, getattr(columns, name))
        if values is not None:
            above = values >= low if closed else values > low
            check(name, values, np.isnan(values) | (above & (values <= high)), f"NaN or {_rule(low, closed, high)}")
            optional.append((name, values))
    batch_size = optional_column("batch_size", columns.batch_size)
    if batch_size is not None:
        check(
            "batch_size",
            batch_size,
            (batch_size >= 0) & (batch_size <= MAX_BATCH_SIZE),
            f"0 (absent) or a batch size in [1, {MAX_BATCH_SIZE}]",
        )
    if len(columns.user_metrics) > MAX_USER_METRICS:
        raise InvalidPointError(
            "columns.user_metrics", f"{len(columns.user_metrics)} columns; at most {MAX_USER_METRICS}"
        )
    user: list[tuple[str, np.ndarray]] = []
    for j, metric in enumerate(columns.user_metrics):
        if (problem := USER_METRIC.problem(metric.name)) is not None:
            raise InvalidPointError(f"columns.user_metrics[{j}].name", problem)
        if any(metric.name == name for name, _ in user):
            raise InvalidPointError(f"columns.user_metrics[{j}].name", f"{metric.name!r} appears twice")
        values = optional_column(f"user_metrics[{metric.name}]", metric.values)
        if values is not None:
            ok = np.isnan(values) | ((values >= -MAX_ABS_VALUE) & (values <= MAX_ABS_VALUE))
            check(f"user_metrics[{metric.name}]", values, ok, f"NaN or {_RANGE}")
            user.append((metric.name, values))

    return ColumnSteps(seq, step, wall_time, dict(optional), batch_size, dict(user))


def _validate_point(i: int, point: metrics_pb2.StepPoint) -> None:
    if point.step < 0:
        raise InvalidPointError(f"points[{i}].step", f"{point.step} is negative")
    wall_time = point.wall_time
    if not 0 < wall_time <= MAX_ABS_VALUE:
        raise InvalidPointError(f"points[{i}].wall_time", f"{wall_time} is not a positive finite number")
    if point.HasField("loss") and not _in_range(point.loss):
        raise InvalidPointError(f"points[{i}].loss", f"{point.loss} is not {_RANGE}")
    for name, low, closed, high in STEP_FLOAT_BOUNDS[1:]:
        if point.HasField(name):
            value = getattr(point, name)
            if not ((low <= value if closed else low < value) and value <= high):
                raise InvalidPointError(f"points[{i}].{name}", f"{value} is not {_rule(low, closed, high)}")
    if point.HasField("batch_size") and not 1 <= point.batch_size <= MAX_BATCH_SIZE:
        raise InvalidPointError(f"points[{i}].batch_size", f"{point.batch_size} is outside [1, {MAX_BATCH_SIZE}]")
    user_metrics = point.user_metrics
    if user_metrics:
        if len(user_metrics) > MAX_USER_METRICS:
            raise InvalidPointError(
                f"points[{i}].user_metrics", f"{len(user_metrics)} entries; at most {MAX_USER_METRICS}"
            )
        for key, value in user_metrics.items():
            if (problem := USER_METRIC.problem(key)) is not None:
                raise InvalidPointError(f"points[{i}].user_metrics", problem)
            if not _in_range(value):
                raise InvalidPointError(f"points[{i}].user_metrics[{key}]", f"{value} is not {_RANGE}")
