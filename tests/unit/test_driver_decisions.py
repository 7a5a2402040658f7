"""The job's driver writes each target it takes into the job's TensorBoard run: over real gRPC, SetTarget calls
as the controller and ``job flex`` send them, read back from the event file with TensorBoard's own reader;
a refused target is not written, and nothing is written without the directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from submarine_elastic.elastic.driver import JobDriver
from submarine_elastic.protocol.api import Limits
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.protocol.proto import elastic_pb2_grpc as pb_grpc
from tests.unit.test_driver_scale import RecordingYarn
from tf_hooks import tensorboard as tb


def serve(monkeypatch: pytest.MonkeyPatch, directory: Path | None) -> Iterator[pb_grpc.ElasticDriverStub]:
    if directory is None:
        monkeypatch.delenv("SUBMARINE_TENSORBOARD_DIR", raising=False)
    else:
        monkeypatch.setenv("SUBMARINE_TENSORBOARD_DIR", str(directory))
    job = JobDriver("decided", Limits(2, 1, 4), RecordingYarn(), token=None, iface="lo", elastic_timeout=60)  # type: ignore[arg-type]
    served = job.serve(0)
    assert served is not None
    server, port = served
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield pb_grpc.ElasticDriverStub(channel)
    server.stop(None)
    if job.decisions is not None:
        job.decisions.close()


def test_each_target_taken_is_written_with_its_reason(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator", reason="TensorBoard is not installed"
    )
    run = tmp_path / "run"
    for stub in serve(monkeypatch, run):
        stub.SetTarget(pb.Target(workers=3, reason="goodput: 3 workers 1.5x faster"), timeout=10)
        with pytest.raises(grpc.RpcError) as refused:
            stub.SetTarget(pb.Target(workers=9, reason="too many"), timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        stub.SetTarget(pb.Target(workers=3, batch_size=96, reason="goodput: batch 96"), timeout=10)
        stub.SetTarget(pb.Target(workers=2, reason="submarine job flex"), timeout=10)
    events = accumulator.EventAccumulator(str(run))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars(tb.DECISION_WORKERS)] == [(1, 3.0), (2, 3.0), (3, 2.0)]
    assert [(e.step, e.value) for e in events.Scalars(tb.DECISION_BATCH)] == [(2, 96.0)]
    texts = [(e.step, e.tensor_proto.string_val[0].decode()) for e in events.Tensors(tb.DECISION_REASON)]
    assert texts == [
        (1, "target 3 workers (2 in force): goodput: 3 workers 1.5x faster"),
        (2, "target 3 workers (2 in force), global batch 96: goodput: batch 96"),
        (3, "target 2 workers (2 in force): submarine job flex"),
    ]


def test_nothing_is_written_without_the_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    for stub in serve(monkeypatch, None):
        stub.SetTarget(pb.Target(workers=3, reason="r"), timeout=10)
    assert list(tmp_path.iterdir()) == []
