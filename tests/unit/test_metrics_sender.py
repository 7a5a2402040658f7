"""The training-side gRPC sink against a real in-process metrics service (no TensorFlow needed)."""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from submarine_elastic.metrics.proto import metrics_pb2, metrics_pb2_grpc
from submarine_elastic.metrics.server import MetricsServer, MetricsServicer
from submarine_elastic.metrics.store import InMemoryStore
from tf_hooks.api import NullSink, StepRecord
from tf_hooks.config import MetricsConfig
from tf_hooks.sender import GrpcSink, make_sink

JOB = "job-a"


def config(endpoint: str, **kwargs: object) -> MetricsConfig:
    settings: dict[str, object] = {
        "endpoint": endpoint,
        "job_id": JOB,
        "instance": "worker-0",
        "flush_interval": 0.02,
        "backoff_initial": 0.02,
        "backoff_max": 0.2,
        "rpc_timeout": 5.0,
    }
    settings.update(kwargs)
    return MetricsConfig(**settings)  # type: ignore[arg-type]


def rec(step: int, loss: object = None, rank: int = 0, world_size: int = 1, **kwargs: object) -> StepRecord:
    return StepRecord(step=step, wall_time=1.7e9 + step, rank=rank, world_size=world_size, loss=loss, **kwargs)  # type: ignore[arg-type]


def wait_for(condition: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


class FakeTensor:
    """Stands in for a TensorFlow tensor: only the sender thread may convert it."""

    def __init__(self, value: float) -> None:
        self.value = value
        self.converted_on: str | None = None

    def __float__(self) -> float:
        self.converted_on = threading.current_thread().name
        return self.value


@pytest.fixture(autouse=True)
def plaintext_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """These services are plaintext: the sender opens a plaintext channel only when told to."""
    monkeypatch.setenv("SUBMARINE_INSECURE", "1")


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    srv = MetricsServer(token="tok").start()
    yield srv
    srv.stop(grace=0)


@pytest.fixture
def dead_endpoint() -> Iterator[str]:
    """A bound port nobody listens on: connections are refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{s.getsockname()[1]}"


def series(store: InMemoryStore, job: str = JOB) -> list[metrics_pb2.RecordedPoint]:
    return store.series(job, 100_000)


def test_every_record_arrives_in_order_with_its_values(server: MetricsServer) -> None:
    sink = GrpcSink(config(server.address, token="tok"))
    tensors = [FakeTensor(1.0 / step) for step in range(1, 201)]
    lr_reads: list[int] = []

    def learning_rate() -> float:
        lr_reads.append(1)
        return 0.05

    for step, tensor in enumerate(tensors, start=1):
        sink.record(
            rec(step, tensor, examples_per_second=640.0, step_time_seconds=0.05, batch_size=32)._replace(
                learning_rate=learning_rate, user_metrics={"accuracy": step / 1000, "bad name": 1.0}
            )
        )
    assert sink.flush(10.0)
    stats = sink.close(5.0)
    points = series(server.store)
    assert [p.point.step for p in points] == list(range(1, 201))
    assert [p.point.seq for p in points] == list(range(1, 201))
    assert [p.point.loss for p in points] == [1.0 / step for step in range(1, 201)]
    assert all(dict(p.point.user_metrics) == {"accuracy": p.point.step / 1000} for p in points)
    assert {(p.point.batch_size, p.point.learning_rate, p.worker.instance) for p in points} == {(32, 0.05, "worker-0")}
    assert {t.converted_on for t in tensors} == {"tf-hooks-metrics-sender"}
    assert len(lr_reads) <= stats.streams  # read once per stream, not once per point
    assert (stats.recorded, stats.acked, stats.dropped, stats.rejected, stats.pending) == (200, 200, 0, 0, 0)


def test_flush_and_close_send_a_backlog_of_many_streams_at_once(server: MetricsServer) -> None:
    sink = GrpcSink(
        config(server.address, token="tok", flush_interval=3600.0, max_stream_points=100, max_batch_points=1000)
    )
    for step in range(1, 451):
        sink.record(rec(step, 1.0))
    started = time.monotonic()
    assert sink.flush(10.0)  # five streams back to back, not one per flush interval
    assert sink.stats().streams == 5
    for step in range(451, 901):
        sink.record(rec(step, 1.0))
    stats = sink.close(10.0)
    assert time.monotonic() - started < 5.0
    assert (stats.acked, stats.streams, stats.dropped) == (900, 10, 0)
    assert [p.point.step for p in series(server.store)] == list(range(1, 901))


def test_a_new_ring_starts_a_new_incarnation(server: MetricsServer) -> None:
    sink = GrpcSink(config(server.address, token="tok"))
    for step in (1, 2):
        sink.record(rec(step, 1.0, rank=0, world_size=2))
    assert sink.flush(10.0)
    first = sink.stats().incarnation
    for step in (3, 4, 5):
        sink.record(rec(step, 1.0, rank=2, world_size=3))
    assert sink.flush(10.0)
    second = sink.stats().incarnation
    sink.close(5.0)
    points = series(server.store)
    assert [(p.incarnation, p.point.seq, p.worker.rank, p.world_size) for p in points] == [
        (first, 1, 0, 2),
        (first, 2, 0, 2),
        (second, 1, 2, 3),
        (second, 2, 2, 3),
        (second, 3, 2, 3),
    ]
    assert first != second


def test_dead_endpoint_never_blocks_and_drops_oldest(dead_endpoint: str) -> None:
    sink = GrpcSink(config(dead_endpoint, queue_size=100, max_stream_points=50))
    started = time.perf_counter()
    for step in range(1, 20_001):
        sink.record(rec(step, 0.5))
    per_record = (time.perf_counter() - started) / 20_000
    assert per_record < 1e-3, f"record() took {per_record * 1e6:.1f} us on average"
    assert not sink.flush(10.0)  # gives up at the first failed attempt instead of waiting 10 s
    wait_for(lambda: sink.stats().failed_streams >= 2)
    started = time.monotonic()
    assert not sink.flush(10.0)  # while the last send failed, flush returns without waiting its 10 s
    assert time.monotonic() - started < 2.0
    stats = sink.stats()
    assert stats.acked == 0 and stats.pending <= 100 + 100 + 50  # handed over, queued, in flight
    assert stats.recorded == stats.dropped + stats.pending
    assert "UNAVAILABLE" in (stats.last_error or "")
    started = time.monotonic()
    final = sink.close(0.3)
    assert time.monotonic() - started < 2.5
    assert (final.recorded, final.dropped, final.pending) == (20_000, 20_000, 0)


class FlakyServicer(MetricsServicer):
    """Keeps what the first stream brings, then fails it as if the answer was lost on the way."""

    def __init__(self, store: InMemoryStore) -> None:
        super().__init__(store)
        self.calls = 0

    def Report(self, request_iterator, context):  # type: ignore[no-untyped-def]  # noqa: N802
        self.calls += 1
        ack = super().Report(request_iterator, context)
        if self.calls == 1:
            context.abort(grpc.StatusCode.UNAVAILABLE, "answer lost")
        return ack


def test_a_lost_answer_leads_to_a_resend_that_doubles_nothing() -> None:
    store = InMemoryStore()
    servicer = FlakyServicer(store)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    metrics_pb2_grpc.add_MetricsServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        sink = GrpcSink(config(f"127.0.0.1:{port}", flush_interval=3600.0))
        for step in range(1, 31):
            sink.record(rec(step, float(step)))
        assert not sink.flush(10.0)  # the first stream failed: flush stops waiting
        stats = sink.close(10.0)  # close keeps trying
    finally:
        server.stop(0)
    assert servicer.calls == 2
    assert [p.point.step for p in series(store)] == list(range(1, 31))
    summary = store.summary(JOB)
    assert (summary.points_received, summary.points_duplicate) == (30, 30)
    assert (stats.acked, stats.duplicates, stats.failed_streams, stats.dropped) == (30, 30, 1, 0)


def test_service_restart_mid_run_resumes_without_doubles(dead_endpoint: str) -> None:
    store = InMemoryStore()
    first = MetricsServer(store, token="tok").start()
    port = first.port
    sink = GrpcSink(config(first.address, token="tok", queue_size=40, max_stream_points=20))
    step = 0

    def train(steps: int) -> None:
        nonlocal step
        for _ in range(steps):
            step += 1
            sink.record(rec(step, float(step)))
            time.sleep(0.0005)  # a training step

    train(100)
    wait_for(lambda: sink.stats().acked >= 60)
    first.stop(grace=0)
    train(300)  # the service is down: the queue keeps the newest 40 of these
    wait_for(lambda: sink.stats().failed_streams >= 1)
    second = MetricsServer(store, port=port, token="tok").start()
    try:
        train(100)
        stats = sink.close(15.0)
    finally:
        second.stop(grace=0)
    steps = [p.point.step for p in series(store)]
    assert steps == sorted(set(steps)), "a point arrived twice or out of order"
    assert steps[-1] == 500
    summary = store.summary(JOB)
    assert stats.dropped >= 300 - 60  # 300 steps while down, 60 places to keep them
    assert summary.points_received + summary.points_missing == 500
    assert stats.dropped == summary.points_missing
    assert stats.acked == summary.points_received
    assert stats.duplicates == summary.points_duplicate
    assert stats.recorded == stats.acked + stats.dropped == 500


def test_wrong_token_rejects_and_counts(server: MetricsServer) -> None:
    sink = GrpcSink(config(server.address, token="wrong", backoff_max=0.05))
    for step in range(1, 11):
        sink.record(rec(step, 1.0))
    assert sink.flush(10.0)  # rejected records are settled too
    stats = sink.close(5.0)
    assert (stats.recorded, stats.rejected, stats.acked) == (10, 10, 0)
    assert (stats.last_error or "").startswith("UNAUTHENTICATED")
    assert server.store.jobs() == []


def test_no_endpoint_means_a_null_sink() -> None:
    sink = make_sink(MetricsConfig())
    assert isinstance(sink, NullSink)
    sink.record(rec(1, 1.0))
    assert sink.flush(0.0)
    assert sink.close(0.0).dropped == 1


# -- property: whatever the training side hands over, the service accepts what is sent -----------

_value = st.none() | st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**70), 2**70)


_jobs = itertools.count()


@pytest.fixture(scope="module")
def shared_server() -> Iterator[MetricsServer]:
    srv = MetricsServer(token="tok").start()
    yield srv
    srv.stop(grace=0)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    records=st.lists(
        st.builds(
            StepRecord,
            step=st.integers(-5, 2**62) | st.integers(2**63, 2**64),
            wall_time=st.floats(allow_nan=True, allow_infinity=True),
            rank=st.integers(-3, 5),
            world_size=st.integers(-1, 5),
            loss=_value,
            examples_per_second=st.none() | st.floats(allow_nan=True, allow_infinity=True),
            step_time_seconds=st.none() | st.floats(allow_nan=True, allow_infinity=True),
            batch_size=st.none() | st.integers(-5, 2**40),
            learning_rate=_value,
            user_metrics=st.none() | st.dictionaries(st.text(max_size=70), _value, max_size=40),
            grad_sq_norm=_value,
            grad_variance=_value,
            gradient_noise_scale=_value,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_sender_output_always_passes_the_service_rules(shared_server: MetricsServer, records: list[StepRecord]) -> None:
    job = f"prop-{next(_jobs)}"
    sink = GrpcSink(config(shared_server.address, job_id=job, token="tok", max_batch_points=2))
    for r in records:
        sink.record(r)
    assert sink.flush(10.0)
    stats = sink.close(5.0)
    unrepresentable = sum(1 for r in records if r.step > 2**63 - 1)
    assert stats.last_error is None  # nothing was refused by the service
    assert (stats.recorded, stats.rejected, stats.acked) == (
        len(records),
        unrepresentable,
        len(records) - unrepresentable,
    )
    if stats.acked:
        points = series(shared_server.store, job)
        assert [p.point.step for p in points] == [max(r.step, 0) for r in records if r.step <= 2**63 - 1]
        for incarnation in {p.incarnation for p in points}:  # a new (rank, world size) starts at seq 1
            seqs = [p.point.seq for p in points if p.incarnation == incarnation]
            assert seqs == sorted(set(seqs))
