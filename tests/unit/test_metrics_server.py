"""The gRPC metrics service on a real in-process server bound to port 0."""

from __future__ import annotations

import math
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from submarine_elastic.metrics.api import SERVICE_NAME, ServerStartError
from submarine_elastic.metrics.proto import metrics_pb2, metrics_pb2_grpc
from submarine_elastic.metrics.server import MetricsServer, TlsCredentials
from submarine_elastic.metrics.store import InMemoryStore
from tests.tls import self_signed

TOKEN = "t0ken-for-tests"
AUTH = (("authorization", f"Bearer {TOKEN}"),)


def wait_for(condition: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def batch(seqs: list[int], job: str = "job-a", loss: float = 1.0, **fields: object) -> metrics_pb2.ReportBatch:
    return metrics_pb2.ReportBatch(
        job_id=job,
        worker=metrics_pb2.WorkerRef(instance="worker-0", rank=0),
        incarnation="inc-1",
        world_size=1,
        points=[
            metrics_pb2.StepPoint(seq=s, step=s, loss=loss, wall_time=1.7e9, examples_per_second=64.0, **fields)  # type: ignore[arg-type]
            for s in seqs
        ],
    )


@pytest.fixture(params=[None])
def server(request: pytest.FixtureRequest) -> Iterator[MetricsServer]:
    """A server with the test token; ``prometheus_port`` comes from indirect parametrization."""
    srv = MetricsServer(token=TOKEN, prometheus_port=request.param, watch_poll_seconds=0.05).start()
    yield srv
    srv.stop(grace=0)


@pytest.fixture
def stub(server: MetricsServer) -> Iterator[metrics_pb2_grpc.MetricsServiceStub]:
    with grpc.insecure_channel(server.address) as channel:
        yield metrics_pb2_grpc.MetricsServiceStub(channel)


def test_report_acks_and_deduplicates(server: MetricsServer, stub: metrics_pb2_grpc.MetricsServiceStub) -> None:
    ack = stub.Report(iter([batch([1, 2]), batch([2, 3])]), metadata=AUTH, timeout=5)
    assert (ack.accepted, ack.duplicates) == (3, 1)
    assert dict(ack.last_seq) == {"job-a/worker-0/inc-1": 3}
    job = stub.GetJob(metrics_pb2.GetJobRequest(job_id="job-a", max_points=10), metadata=AUTH, timeout=5)
    assert [p.point.seq for p in job.points] == [1, 2, 3]
    assert job.summary.points_received == 3 and job.summary.points_duplicate == 1
    assert job.summary.throughput[0].aggregate_examples_per_second == 64.0
    jobs = stub.ListJobs(metrics_pb2.ListJobsRequest(), metadata=AUTH, timeout=5)
    assert [j.job_id for j in jobs.jobs] == ["job-a"]


@pytest.mark.parametrize("metadata", [(), (("authorization", "Bearer wrong"),), (("authorization", TOKEN),)])
def test_wrong_or_missing_token_is_unauthenticated(
    stub: metrics_pb2_grpc.MetricsServiceStub, server: MetricsServer, metadata: tuple[tuple[str, str], ...]
) -> None:
    calls = [
        lambda: stub.Report(iter([batch([1])]), metadata=metadata, timeout=5),
        lambda: stub.GetJob(metrics_pb2.GetJobRequest(job_id="job-a"), metadata=metadata, timeout=5),
        lambda: stub.ListJobs(metrics_pb2.ListJobsRequest(), metadata=metadata, timeout=5),
        lambda: next(iter(stub.Watch(metrics_pb2.WatchRequest(), metadata=metadata, timeout=5))),
    ]
    for call in calls:
        with pytest.raises(grpc.RpcError) as e:
            call()
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert server.store.jobs() == []


def test_invalid_batch_is_invalid_argument_naming_the_field(
    server: MetricsServer, stub: metrics_pb2_grpc.MetricsServiceStub
) -> None:
    bad = batch([3, 4])
    bad.points[1].loss = math.nan
    with pytest.raises(grpc.RpcError) as e:
        stub.Report(iter([batch([1, 2]), bad, batch([5])]), metadata=AUTH, timeout=5)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith("points[1].loss: nan")
    summary = server.store.summary("job-a")
    # the batch before the bad one is kept, the bad one is counted, the stream ended there
    assert (summary.points_received, summary.points_rejected, summary.last_step) == (2, 2, 2)


def test_queries_check_job_ids(stub: metrics_pb2_grpc.MetricsServiceStub) -> None:
    with pytest.raises(grpc.RpcError) as e:
        stub.GetJob(metrics_pb2.GetJobRequest(job_id="nope"), metadata=AUTH, timeout=5)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as e:
        stub.GetJob(metrics_pb2.GetJobRequest(job_id="Bad/Id"), metadata=AUTH, timeout=5)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details().startswith("job_id:")


def test_watch_streams_accepted_points_with_summaries(
    server: MetricsServer, stub: metrics_pb2_grpc.MetricsServiceStub
) -> None:
    stream = stub.Watch(metrics_pb2.WatchRequest(job_id="job-a", with_summary=True), metadata=AUTH, timeout=10)
    events: list[metrics_pb2.WatchEvent] = []

    def read() -> None:
        for event in stream:
            events.append(event)
            if len(events) == 2:
                return

    reader = threading.Thread(target=read)
    reader.start()
    # the subscription exists once the server-side handler runs; wait for it, then report
    wait_for(lambda: server._servicer._watches)
    stub.Report(iter([batch([1, 2], job="job-b")]), metadata=AUTH, timeout=5)
    stub.Report(iter([batch([1, 2]), batch([2, 3])]), metadata=AUTH, timeout=5)
    stub.Report(iter([batch([4], loss=0.25)]), metadata=AUTH, timeout=5)
    reader.join(10)
    stream.cancel()
    assert [[p.point.seq for p in e.points] for e in events] == [[1, 2], [3], [4]][: len(events)]
    assert len(events) == 2
    assert events[1].summary.points_received == 3 and events[1].summary.points_duplicate == 1


def test_watch_ends_when_the_server_stops(server: MetricsServer, stub: metrics_pb2_grpc.MetricsServiceStub) -> None:
    stream = stub.Watch(metrics_pb2.WatchRequest(), metadata=AUTH, timeout=30)
    done = threading.Event()
    codes: list[object] = []

    def read() -> None:
        try:
            for _ in stream:
                pass
            codes.append(grpc.StatusCode.OK)
        except grpc.RpcError as e:
            codes.append(e.code())
        done.set()

    threading.Thread(target=read, daemon=True).start()
    wait_for(lambda: server._servicer._watches)
    started = time.monotonic()
    server.stop(grace=5)
    assert time.monotonic() - started < 2.0  # the watch ended at once instead of waiting out the grace
    assert done.wait(10)
    assert codes == [grpc.StatusCode.OK]


def test_health_is_open_and_reflection_lists_the_service(server: MetricsServer) -> None:
    with grpc.insecure_channel(server.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", SERVICE_NAME):
            answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
        with pytest.raises(grpc.RpcError) as e:
            list(reflect.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        answers = list(
            reflect.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), metadata=AUTH, timeout=5
            )
        )
        names = {s.name for s in answers[0].list_services_response.service}
        assert SERVICE_NAME in names and "grpc.health.v1.Health" in names


@pytest.mark.parametrize("server", [0], indirect=True)
def test_prometheus_endpoint_exposes_per_job_series(
    server: MetricsServer, stub: metrics_pb2_grpc.MetricsServiceStub
) -> None:
    stub.Report(iter([batch([1, 2, 3], loss=0.5)]), metadata=AUTH, timeout=5)
    bad = batch([4])
    bad.points[0].step = -1
    with pytest.raises(grpc.RpcError):
        stub.Report(iter([bad]), metadata=AUTH, timeout=5)
    with pytest.raises(grpc.RpcError):
        stub.Report(iter([batch([1], job="NOT-valid")]), metadata=AUTH, timeout=5)
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.prometheus_port}/metrics", timeout=5).read().decode()
    samples = {
        (s.name, s.labels.get("job")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("submarine_metrics_job_points_received_total", "job-a")] == 3
    assert samples[("submarine_metrics_job_points_rejected_total", "job-a")] == 1
    assert samples[("submarine_metrics_job_loss", "job-a")] == 0.5
    assert samples[("submarine_metrics_job_workers", "job-a")] == 1
    assert samples[("submarine_metrics_job_step", "job-a")] == 3
    assert samples[("submarine_metrics_job_throughput_examples_per_second", "job-a")] == 64.0
    assert samples[("submarine_metrics_points_rejected_unattributed_total", None)] == 1
    assert samples[("submarine_metrics_jobs", None)] == 1
    # no per-step, per-worker or per-incarnation labels
    assert {k for s in samples for k in ([s[1]] if s[1] else [])} == {"job-a"}


def test_port_in_use_is_a_start_error(server: MetricsServer) -> None:
    with pytest.raises(ServerStartError, match=str(server.port)):
        MetricsServer(port=server.port).start()


def test_constructor_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="port"):
        MetricsServer(port=70000)
    with pytest.raises(ValueError, match="token"):
        MetricsServer(token="has space")


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"))


def test_tls_with_token(tls_files: tuple[Path, Path]) -> None:
    cert, key = tls_files
    srv = MetricsServer(token=TOKEN, tls=TlsCredentials.from_files(cert, key)).start()
    try:
        credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        with grpc.secure_channel(f"localhost:{srv.port}", credentials) as channel:
            stub = metrics_pb2_grpc.MetricsServiceStub(channel)
            assert stub.Report(iter([batch([1])]), metadata=AUTH, timeout=5).accepted == 1
        with grpc.insecure_channel(f"localhost:{srv.port}") as plain:
            with pytest.raises(grpc.RpcError) as e:
                metrics_pb2_grpc.MetricsServiceStub(plain).Report(iter([batch([2])]), metadata=AUTH, timeout=2)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        srv.stop(grace=0)


# -- property: arbitrary messages over the wire ---------------------------------------------------

_wire_point = st.builds(
    metrics_pb2.StepPoint,
    seq=st.integers(0, 6),
    step=st.integers(-3, 3),
    loss=st.floats(allow_nan=True, allow_infinity=True),
    examples_per_second=st.floats(-1.0, 1e20),
    wall_time=st.sampled_from([0.0, 1.7e9, math.inf]),
    batch_size=st.integers(-1, 2),
)
_wire_batch = st.builds(
    metrics_pb2.ReportBatch,
    job_id=st.sampled_from(["job-a", "job-b", "", "BAD"]),
    worker=st.builds(metrics_pb2.WorkerRef, instance=st.sampled_from(["worker-0", ""]), rank=st.integers(-1, 2)),
    incarnation=st.sampled_from(["i1", "i2", ""]),
    world_size=st.integers(0, 3),
    points=st.lists(_wire_point, max_size=3),
)
_frame = st.one_of(_wire_batch.map(lambda b: b.SerializeToString()), st.binary(max_size=40))


@pytest.fixture(scope="module")
def fuzz_target() -> Iterator[tuple[MetricsServer, grpc.Channel]]:
    srv = MetricsServer(store=InMemoryStore()).start()
    channel = grpc.insecure_channel(srv.address)
    yield srv, channel
    channel.close()
    srv.stop(grace=0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=st.lists(_frame, min_size=1, max_size=4))
def test_arbitrary_frames_never_crash_the_service(
    fuzz_target: tuple[MetricsServer, grpc.Channel], frames: list[bytes]
) -> None:
    srv, channel = fuzz_target
    report = channel.stream_unary(
        "/submarine.metrics.v1.MetricsService/Report",
        request_serializer=lambda b: b,
        response_deserializer=metrics_pb2.ReportAck.FromString,
    )
    try:
        report(iter(frames), timeout=5)
    except grpc.RpcError as e:
        # bad batch, or bytes that are not a ReportBatch at all
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    for job in srv.store.jobs():
        s = srv.store.summary(job)
        values = [s.last_loss, s.loss_ema, s.loss_slope_per_step] + [
            t.aggregate_examples_per_second for t in s.throughput
        ]
        assert all(math.isfinite(v) for v in values if v is not None)
        assert s.last_step >= 0
