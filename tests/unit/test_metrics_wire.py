"""The sender's hand-written ReportBatch bytes parse to exactly what the protobuf API builds."""

from __future__ import annotations

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
