"""Every schema rule names its field; arbitrary batches never corrupt a store's aggregates."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from submarine_elastic.metrics.api import InvalidPointError
from submarine_elastic.metrics.proto import metrics_pb2
from submarine_elastic.metrics.store import InMemoryStore
from submarine_elastic.metrics.validation import validate_batch


def good() -> metrics_pb2.ReportBatch:
    return metrics_pb2.ReportBatch(
        job_id="job-a",
        worker=metrics_pb2.WorkerRef(instance="worker-0", rank=1),
        incarnation="1a-2b.1",
        world_size=2,
        points=[
            metrics_pb2.StepPoint(
                seq=seq,
                step=seq,
                loss=0.5,
                examples_per_second=10.0,
                step_time_seconds=0.1,
                batch_size=32,
                learning_rate=0.01,
                wall_time=1.7e9,
                user_metrics={"accuracy": 0.9},
                grad_sq_norm=0.02,
                grad_variance=10.0,
                gradient_noise_scale=500.0,
            )
            for seq in (1, 2)
        ],
    )


def _set(path: str, value: object) -> Callable[[metrics_pb2.ReportBatch], None]:
    def apply(b: metrics_pb2.ReportBatch) -> None:
        target: object = b
        *parents, leaf = path.split(".")
        for part in parents:
            target = b.points[int(part[7:-1])] if part.startswith("points[") else getattr(target, part)
        setattr(target, leaf, value)

    return apply


CORRUPTIONS: list[tuple[str, Callable[[metrics_pb2.ReportBatch], None]]] = [
    ("job_id", _set("job_id", "")),
    ("job_id", _set("job_id", "Job_A")),
    ("job_id", _set("job_id", "a" * 65)),
    ("worker", lambda b: b.ClearField("worker")),
    ("worker.instance", _set("worker.instance", "")),
    ("worker.instance", _set("worker.instance", "worker 0")),
    ("incarnation", _set("incarnation", "")),
    ("world_size", _set("world_size", 0)),
    ("world_size", _set("world_size", 100_001)),
    ("worker.rank", _set("worker.rank", 2)),
    ("worker.rank", _set("worker.rank", -1)),
    ("points", lambda b: b.ClearField("points")),
    ("points[0].seq", _set("points[0].seq", 0)),
    ("points[1].seq", _set("points[1].seq", 1)),
    ("points[1].step", _set("points[1].step", -1)),
    ("points[0].wall_time", _set("points[0].wall_time", 0.0)),
    ("points[0].wall_time", _set("points[0].wall_time", math.inf)),
    ("points[1].loss", _set("points[1].loss", math.nan)),
    ("points[1].loss", _set("points[1].loss", -math.inf)),
    ("points[1].loss", _set("points[1].loss", 1e300)),
    ("points[0].examples_per_second", _set("points[0].examples_per_second", math.inf)),
    ("points[0].examples_per_second", _set("points[0].examples_per_second", -1.0)),
    ("points[0].step_time_seconds", _set("points[0].step_time_seconds", math.nan)),
    ("points[0].learning_rate", _set("points[0].learning_rate", -0.1)),
    ("points[1].grad_sq_norm", _set("points[1].grad_sq_norm", -0.01)),
    ("points[1].grad_sq_norm", _set("points[1].grad_sq_norm", math.inf)),
    ("points[0].grad_variance", _set("points[0].grad_variance", math.nan)),
    ("points[0].grad_variance", _set("points[0].grad_variance", -1.0)),
    ("points[0].gradient_noise_scale", _set("points[0].gradient_noise_scale", -1.0)),
    ("points[0].gradient_noise_scale", _set("points[0].gradient_noise_scale", 1.01e12)),
    ("points[1].gradient_noise_scale", _set("points[1].gradient_noise_scale", math.inf)),
    ("points[0].batch_size", _set("points[0].batch_size", 0)),
    ("points[0].batch_size", _set("points[0].batch_size", -32)),
    ("points[0].user_metrics", lambda b: b.points[0].user_metrics.__setitem__("bad name", 1.0)),
    ("points[0].user_metrics", lambda b: b.points[0].user_metrics.update({f"m{i}": 1.0 for i in range(40)})),
    ("points[0].user_metrics[accuracy]", lambda b: b.points[0].user_metrics.__setitem__("accuracy", math.nan)),
]


def test_the_reference_batch_is_valid() -> None:
    validate_batch(good())


@pytest.mark.parametrize(("field", "corrupt"), CORRUPTIONS, ids=[f"{f}-{i}" for i, (f, _) in enumerate(CORRUPTIONS)])
def test_each_rule_names_its_field(field: str, corrupt: Callable[[metrics_pb2.ReportBatch], None]) -> None:
    b = good()
    corrupt(b)
    with pytest.raises(InvalidPointError) as e:
        validate_batch(b)
    assert e.value.field == field
    assert str(e.value).startswith(f"{field}: ")


def as_columns(batch: metrics_pb2.ReportBatch) -> metrics_pb2.ReportBatch:
    """``batch`` with its points moved into columns (NaN, or batch size 0, where a point lacks a field)."""
    out = metrics_pb2.ReportBatch()
    out.CopyFrom(batch)
    out.ClearField("points")
    points = batch.points
    columns = out.columns
    columns.SetInParent()
    columns.seq.extend(p.seq for p in points)
    columns.step.extend(p.step for p in points)
    columns.wall_time.extend(p.wall_time for p in points)
    for name in (
        "loss",
        "examples_per_second",
        "step_time_seconds",
        "batch_size",
        "learning_rate",
        "grad_sq_norm",
        "grad_variance",
        "gradient_noise_scale",
    ):
        if any(p.HasField(name) for p in points):
            absent = 0 if name == "batch_size" else math.nan
            getattr(columns, name).extend(getattr(p, name) if p.HasField(name) else absent for p in points)
    for name in dict.fromkeys(k for p in points for k in p.user_metrics):
        columns.user_metrics.add(name=name, values=[p.user_metrics.get(name, math.nan) for p in points])
    return out


def test_columns_carry_the_same_points() -> None:
    b = good()
    b.points[1].ClearField("loss")
    b.points[1].ClearField("batch_size")
    b.points[1].ClearField("gradient_noise_scale")
    del b.points[1].user_metrics["accuracy"]
    assert validate_batch(as_columns(b)).points() == list(b.points)


def _col(path: str, index: int | None, value: object) -> Callable[[metrics_pb2.ReportBatch], None]:
    """Sets a value of a column (``user_metrics[NAME]`` for a user metric) or, with index None,
    appends one so the column is one too long."""

    def apply(b: metrics_pb2.ReportBatch) -> None:
        columns = b.columns
        if path.startswith("user_metrics["):
            name = path[len("user_metrics[") : -1]
            values = next(m for m in columns.user_metrics if m.name == name).values
        else:
            values = getattr(columns, path)
        if index is None:
            values.append(value)
        else:
            values[index] = value

    return apply


COLUMN_CORRUPTIONS: list[tuple[str, Callable[[metrics_pb2.ReportBatch], None]]] = [
    ("columns", lambda b: b.points.add(seq=9, wall_time=1.0)),
    ("columns.seq", lambda b: (b.columns.ClearField("seq"), b.columns.ClearField("step"))),
    ("columns.seq[0]", _col("seq", 0, 0)),
    ("columns.seq[1]", _col("seq", 1, 1)),
    ("columns.step", _col("step", None, 3)),
    ("columns.step", lambda b: b.columns.ClearField("step")),
    ("columns.step[1]", _col("step", 1, -1)),
    ("columns.wall_time[0]", _col("wall_time", 0, 0.0)),
    ("columns.wall_time[1]", _col("wall_time", 1, math.nan)),
    ("columns.loss", _col("loss", None, 1.0)),
    ("columns.loss[1]", _col("loss", 1, math.inf)),
    ("columns.loss[0]", _col("loss", 0, -1e300)),
    ("columns.examples_per_second[0]", _col("examples_per_second", 0, -1.0)),
    ("columns.step_time_seconds[1]", _col("step_time_seconds", 1, math.inf)),
    ("columns.learning_rate[0]", _col("learning_rate", 0, -0.1)),
    ("columns.batch_size[0]", _col("batch_size", 0, -32)),
    ("columns.grad_sq_norm[1]", _col("grad_sq_norm", 1, -0.01)),
    ("columns.grad_variance[0]", _col("grad_variance", 0, math.inf)),
    ("columns.gradient_noise_scale[1]", _col("gradient_noise_scale", 1, 2e12)),
    ("columns.gradient_noise_scale", _col("gradient_noise_scale", None, 1.0)),
    ("columns.user_metrics[1].name", lambda b: b.columns.user_metrics.add(name="bad name")),
    ("columns.user_metrics[1].name", lambda b: b.columns.user_metrics.add(name="accuracy")),
    ("columns.user_metrics", lambda b: [b.columns.user_metrics.add(name=f"m{i}") for i in range(40)]),
    ("columns.user_metrics[accuracy]", _col("user_metrics[accuracy]", None, 1.0)),
    ("columns.user_metrics[accuracy][1]", _col("user_metrics[accuracy]", 1, -math.inf)),
]


@pytest.mark.parametrize(
    ("field", "corrupt"), COLUMN_CORRUPTIONS, ids=[f"{f}-{i}" for i, (f, _) in enumerate(COLUMN_CORRUPTIONS)]
)
def test_each_column_rule_names_its_field(field: str, corrupt: Callable[[metrics_pb2.ReportBatch], None]) -> None:
    b = as_columns(good())
    corrupt(b)
    with pytest.raises(InvalidPointError) as e:
        validate_batch(b)
    assert e.value.field == field
    assert str(e.value).startswith(f"{field}: ")


def test_too_many_points_is_rejected() -> None:
    b = good()
    del b.points[:]
    b.points.extend(metrics_pb2.StepPoint(seq=i, wall_time=1.0) for i in range(1, 10_002))
    with pytest.raises(InvalidPointError, match="10001 points"):
        validate_batch(b)


# -- property: arbitrary batches ------------------------------------------------------------------

_any_float = st.floats(allow_nan=True, allow_infinity=True)
_point = st.builds(
    lambda seq, step, loss, eps, st_, bs, lr, wall, um: metrics_pb2.StepPoint(
        seq=seq,
        step=step,
        wall_time=wall,
        user_metrics=um,
        **{
            k: v
            for k, v in (
                ("loss", loss),
                ("examples_per_second", eps),
                ("step_time_seconds", st_),
                ("batch_size", bs),
                ("learning_rate", lr),
            )
            if v is not None
        },
    ),
    st.integers(0, 2**64 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.none() | _any_float,
    st.none() | _any_float,
    st.none() | _any_float,
    st.none() | st.integers(-(2**63), 2**63 - 1),
    st.none() | _any_float,
    _any_float,
    st.dictionaries(st.text(max_size=8), _any_float, max_size=3),
)
_batch = st.builds(
    lambda job, inst, inc, ws, rank, pts: metrics_pb2.ReportBatch(
        job_id=job, worker=metrics_pb2.WorkerRef(instance=inst, rank=rank), incarnation=inc, world_size=ws, points=pts
    ),
    st.sampled_from(["job-a", "job-b", "", "Job", "x" * 70]) | st.text(max_size=5),
    st.sampled_from(["worker-0", "worker-1", "", "w w"]),
    st.sampled_from(["i1", "i2", ""]),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**31), 2**31 - 1),
    st.lists(_point, max_size=4),
)


def _corrupt(
    b: metrics_pb2.ReportBatch, corruption: tuple[str, Callable[[metrics_pb2.ReportBatch], None]]
) -> metrics_pb2.ReportBatch:
    try:
        corruption[1](b)
    except (IndexError, StopIteration):
        pass  # the corruption needs more points (or a column) than the batch has; send it as it is
    return b


_valid_point = st.builds(
    lambda step, loss, eps, um: metrics_pb2.StepPoint(
        step=step,
        loss=loss,
        examples_per_second=eps,
        step_time_seconds=0.1,
        batch_size=8,
        learning_rate=0.01,
        wall_time=1.7e9,
        user_metrics=um,
    ),
    st.integers(0, 10_000),
    st.floats(-1e6, 1e6),
    st.floats(0, 1e6),
    st.dictionaries(st.sampled_from(["acc", "top5", "x.y"]), st.floats(-1e6, 1e6), max_size=2),
)


def _with_seqs(points: list[metrics_pb2.StepPoint], seqs: list[int]) -> list[metrics_pb2.StepPoint]:
    for point, seq in zip(points, sorted(seqs), strict=False):
        point.seq = seq
    return points[: len(seqs)]


_valid_batch = st.builds(
    lambda job, inst, inc, ws, rank, pts: metrics_pb2.ReportBatch(
        job_id=job, worker=metrics_pb2.WorkerRef(instance=inst, rank=rank), incarnation=inc, world_size=ws, points=pts
    ),
    st.sampled_from(["job-a", "job-b"]),
    st.sampled_from(["worker-0", "worker-1"]),
    st.sampled_from(["i1", "i2"]),
    st.integers(4, 8),
    st.integers(0, 3),
    st.builds(
        _with_seqs,
        st.lists(_valid_point, min_size=4, max_size=4),
        st.sets(st.integers(1, 8), min_size=1, max_size=4).map(list),
    ),
)
_mixed_batch = st.one_of(
    _valid_batch,
    _valid_batch,
    st.builds(_corrupt, _valid_batch, st.sampled_from(CORRUPTIONS)),
    _batch,
    _valid_batch.map(as_columns),
    st.builds(_corrupt, _valid_batch.map(as_columns), st.sampled_from(COLUMN_CORRUPTIONS)),
    _batch.map(as_columns),
)


def _seqs(b: metrics_pb2.ReportBatch) -> list[int]:
    return [p.seq for p in b.points] or list(b.columns.seq)


@settings(max_examples=100, deadline=None)
@given(_valid_batch)
def test_a_valid_batch_means_the_same_in_columns(b: metrics_pb2.ReportBatch) -> None:
    assert validate_batch(as_columns(b)).points() == validate_batch(b).points()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_mixed_batch, max_size=12))
def test_arbitrary_batches_never_corrupt_the_store(batches: list[metrics_pb2.ReportBatch]) -> None:
    store = InMemoryStore()
    held: dict[tuple[str, str, str], int] = {}
    expected: dict[str, dict[str, int]] = {}
    for b in batches:
        try:
            store.ingest(b)
        except InvalidPointError as e:
            assert e.field
            counts = expected.get(b.job_id)
            if counts is not None:
                counts["rejected"] += max(1, len(_seqs(b)))
            continue
        counts = expected.setdefault(b.job_id, {"received": 0, "duplicate": 0, "rejected": 0})
        key = (b.job_id, b.worker.instance, b.incarnation)
        for seq in _seqs(b):
            if seq <= held.get(key, 0):
                counts["duplicate"] += 1
            else:
                counts["received"] += 1
                held[key] = seq
    assert sorted(store.jobs()) == sorted(expected)
    for job, counts in expected.items():
        s = store.summary(job)
        assert (s.points_received, s.points_duplicate, s.points_rejected) == (
            counts["received"],
            counts["duplicate"],
            counts["rejected"],
        )
        numbers = [s.last_loss, s.loss_ema, s.loss_slope_per_step, s.last_update]
        for t in s.throughput:
            numbers += [t.per_worker_examples_per_second, t.aggregate_examples_per_second, t.step_time_seconds]
        assert all(math.isfinite(x) for x in numbers if x is not None), s
        for recorded in store.series(job, 10_000):
            validate_batch(
                metrics_pb2.ReportBatch(
                    job_id=job,
                    worker=recorded.worker,
                    incarnation=recorded.incarnation,
                    world_size=recorded.world_size,
                    points=[recorded.point],
                )
            )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_valid_batch, st.booleans()), max_size=10), st.integers(1, 9), st.floats(0.05, 1.0))
def test_the_store_keeps_what_a_step_by_step_model_keeps(
    batches: list[tuple[metrics_pb2.ReportBatch, bool]], ring: int, alpha: float
) -> None:
    """Points batches or column batches, the ring, dedup and aggregates are those of one step at a time."""
    store = InMemoryStore(points_per_job=ring, ema_alpha=alpha, trend_window=4)

    def ema(old: float | None, value: float) -> float:
        return value if old is None else old + alpha * (value - old)

    held: dict[tuple[str, str, str], int] = {}
    kept: dict[str, list[tuple[str, str, int, metrics_pb2.StepPoint]]] = {}
    eps: dict[tuple[str, int], float] = {}
    loss_ema: dict[str, float] = {}
    losses: dict[str, list[tuple[int, float]]] = {}
    for b, in_columns in batches:
        store.ingest(as_columns(b) if in_columns else b)
        key = (b.job_id, b.worker.instance, b.incarnation)
        for p in b.points:
            if p.seq <= held.get(key, 0):
                continue
            held[key] = p.seq
            kept.setdefault(b.job_id, []).append((b.worker.instance, b.incarnation, b.world_size, p))
            eps[b.job_id, b.world_size] = ema(eps.get((b.job_id, b.world_size)), p.examples_per_second)
            loss_ema[b.job_id] = ema(loss_ema.get(b.job_id), p.loss)
            losses.setdefault(b.job_id, []).append((p.step, p.loss))
    for job, points in kept.items():
        series = store.series(job, 100)
        assert [(r.worker.instance, r.incarnation, r.world_size, r.point) for r in series] == points[-ring:]
        s = store.summary(job)
        assert s.points_received == len(points)
        assert (s.last_step, s.last_loss) == (points[-1][3].step, points[-1][3].loss)
        assert s.loss_ema == pytest.approx(loss_ema[job], rel=1e-9, abs=1e-6)
        assert {t.world_size: t.per_worker_examples_per_second for t in s.throughput} == pytest.approx(
            {size: value for (j, size), value in eps.items() if j == job}, rel=1e-9, abs=1e-6
        )
        trend = losses[job][-4:]
        distinct = len({step for step, _ in trend}) > 1
        assert (s.loss_slope_per_step is not None) == distinct
