"""The sender's hand-written ReportBatch bytes (points and columns) parse to exactly what the protobuf API builds."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from submarine_elastic.metrics.proto import metrics_pb2
from tf_hooks import wire

_UINT = st.integers(0, 2**63 - 1)
_FINITE = st.floats(-1e15, 1e15, allow_nan=False)
_OPTIONAL = st.none() | _FINITE
_NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.]{0,63}", fullmatch=True)
_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=80)

_points = st.fixed_dictionaries(
    {
        "seq": st.integers(0, 2**64 - 1),
        "step": _UINT,
        "wall_time": _FINITE,
        "loss": _OPTIONAL,
        "examples_per_second": _OPTIONAL,
        "step_time_seconds": _OPTIONAL,
        "batch_size": st.none() | _UINT,
        "learning_rate": _OPTIONAL,
        "user_metrics": st.dictionaries(_NAME, _FINITE, max_size=5),
    }
)


@given(
    job_id=_TEXT,
    instance=_TEXT,
    rank=st.integers(0, 2**31 - 1),
    incarnation=_TEXT,
    world_size=st.integers(0, 2**31 - 1),
    points=st.lists(_points, max_size=6),
)
def test_hand_encoded_batch_parses_to_the_protobuf_message(
    job_id: str, instance: str, rank: int, incarnation: str, world_size: int, points: list[dict[str, object]]
) -> None:
    encoded = wire.header(job_id, instance, rank, incarnation, world_size) + b"".join(
        wire.point(**{**p, "user_metrics": list(p["user_metrics"].items())})  # type: ignore[arg-type,attr-defined]
        for p in points
    )
    expected = metrics_pb2.ReportBatch(
        job_id=job_id,
        worker=metrics_pb2.WorkerRef(instance=instance, rank=rank),
        incarnation=incarnation,
        world_size=world_size,
        points=[metrics_pb2.StepPoint(**{k: v for k, v in p.items() if v is not None}) for p in points],  # type: ignore[arg-type]
    )
    parsed = metrics_pb2.ReportBatch.FromString(encoded)
    assert parsed == expected
    for got, want in zip(parsed.points, expected.points, strict=True):  # presence of optional fields too
        for field in ("loss", "examples_per_second", "step_time_seconds", "batch_size", "learning_rate"):
            assert got.HasField(field) == want.HasField(field), field


@given(st.integers(0, 2**64 - 1))
def test_varint_round_trips_through_protobuf(n: int) -> None:
    assert metrics_pb2.StepPoint.FromString(b"\x08" + wire.varint(n)).seq == n


_OPTIONAL_COLUMNS = ("loss", "examples_per_second", "step_time_seconds", "batch_size", "learning_rate")


@st.composite
def _columns(draw: st.DrawFn) -> dict[str, object]:
    n = draw(st.integers(0, 6))
    floats = st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=n, max_size=n)
    optional = {
        name: draw(st.none() | (st.lists(_UINT, min_size=n, max_size=n) if name == "batch_size" else floats))
        for name in _OPTIONAL_COLUMNS
    }
    return {
        "seq": draw(st.lists(st.integers(0, 2**64 - 1), min_size=n, max_size=n)),
        "step": draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n)),
        "wall_time": draw(floats),
        "optional": optional,
        "user_metrics": draw(st.lists(st.tuples(_NAME, floats), max_size=3)),
    }


@given(instance=_TEXT, incarnation=_TEXT, world_size=st.integers(0, 2**31 - 1), columns=_columns())
def test_hand_encoded_columns_parse_to_the_protobuf_message(
    instance: str, incarnation: str, world_size: int, columns: dict[str, object]
) -> None:
    optional: dict[str, list[float]] = columns["optional"]  # type: ignore[assignment]
    user: list[tuple[str, list[float]]] = columns["user_metrics"]  # type: ignore[assignment]
    encoded = wire.header("job-a", instance, 0, incarnation, world_size) + wire.columns(
        np.array(columns["seq"], dtype=np.uint64),
        np.array(columns["step"], dtype=np.int64),
        np.array(columns["wall_time"], dtype=np.float64),
        {k: None if v is None else np.array(v) for k, v in optional.items()},
        [(name, np.array(values, dtype=np.float64)) for name, values in user],
    )
    expected = metrics_pb2.ReportBatch(
        job_id="job-a",
        worker=metrics_pb2.WorkerRef(instance=instance),
        incarnation=incarnation,
        world_size=world_size,
        columns=metrics_pb2.StepColumns(
            seq=columns["seq"],  # type: ignore[arg-type]
            step=columns["step"],  # type: ignore[arg-type]
            wall_time=columns["wall_time"],  # type: ignore[arg-type]
            user_metrics=[metrics_pb2.MetricColumn(name=name, values=values) for name, values in user],
            **{k: v for k, v in optional.items() if v is not None},  # type: ignore[arg-type]
        ),
    )
    parsed = metrics_pb2.ReportBatch.FromString(encoded)
    # Compared as canonical bytes: NaN != NaN would fail an == between messages that are the same.
    assert parsed.SerializeToString(deterministic=True) == expected.SerializeToString(deterministic=True)
    assert parsed.HasField("columns")
