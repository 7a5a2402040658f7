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
    return _point_columns(points)


def _point_columns(points: Sequence[metrics_pb2.StepPoint]) -> ColumnSteps:
    """Checks ``points`` and gathers them into columns, so the store keeps 8 bytes a value whichever way a
    batch came; each rule is checked on a whole column at once (one C-level pass per field).

    Raises:
        InvalidPointError: naming the first point and field that breaks a rule (rules in field order).
    """
    n = len(points)

    def check(name: str, values: np.ndarray, bad: np.ndarray, what: str) -> None:
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InvalidPointError(f"points[{i}].{name}", f"{values[i]} {what}")

    def column(name: str, dtype: type) -> np.ndarray:
        return np.fromiter(map(attrgetter(name), points), dtype, n)

    seq = column("seq", np.uint64)
    if seq[0] < 1:
        raise InvalidPointError("points[0].seq", "0 must be at least 1")
    if n > 1 and (falls := np.flatnonzero(seq[1:] <= seq[:-1])).size:
        i = int(falls[0]) + 1
        raise InvalidPointError(f"points[{i}].seq", f"{seq[i]} must be above the previous point's {seq[i - 1]}")
    check("seq", seq, seq > MAX_SEQ, f"is above the largest seq, {MAX_SEQ}")
    step = column("step", np.int64)
    check("step", step, step < 0, "is negative")
    wall_time = column("wall_time", np.float64)
    check(
        "wall_time",
        wall_time,
        ~((wall_time > 0) & (wall_time <= MAX_ABS_VALUE)),
        "is not a positive finite number",
    )
    optional: dict[str, np.ndarray] = {}
    for name, low, closed, high in STEP_FLOAT_BOUNDS:
        has = np.fromiter(map(methodcaller("HasField", name), points), np.bool_, n)
        if has.any():
            values = column(name, np.float64)
            ok = ((values >= low) if closed else (values > low)) & (values <= high)
            check(name, values, has & ~ok, f"is not {_rule(low, closed, high)}")
            values[~has] = np.nan
            optional[name] = values
    batch_size = None
    has = np.fromiter(map(methodcaller("HasField", "batch_size"), points), np.bool_, n)
    if has.any():
        batch_size = column("batch_size", np.int64)
        bad = has & ~((batch_size >= 1) & (batch_size <= MAX_BATCH_SIZE))
        check("batch_size", batch_size, bad, f"is outside [1, {MAX_BATCH_SIZE}]")
    user: dict[str, np.ndarray] = {}
    for i, user_metrics in enumerate(map(attrgetter("user_metrics"), points)):
        if not user_metrics:
            continue
        if len(user_metrics) > MAX_USER_METRICS:
            raise InvalidPointError(
                f"points[{i}].user_metrics", f"{len(user_metrics)} entries; at most {MAX_USER_METRICS}"
            )
        for name, value in user_metrics.items():
            metric = user.get(name)
            if metric is None:
                if (problem := USER_METRIC.problem(name)) is not None:
                    raise InvalidPointError(f"points[{i}].user_metrics", problem)
                if len(user) == MAX_USER_METRICS:
                    raise InvalidPointError(
                        f"points[{i}].user_metrics",
                        f"{name!r} would be the batch's user metric number {MAX_USER_METRICS + 1}; "
                        f"the points of a batch name at most {MAX_USER_METRICS} between them",
                    )
                metric = user[name] = np.full(n, np.nan)
            if not _in_range(value):
                raise InvalidPointError(f"points[{i}].user_metrics[{name}]", f"{value} is not {_RANGE}")
            metric[i] = value
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
