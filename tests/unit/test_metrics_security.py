"""The metrics service against a job that misbehaves: per-job credentials, plausibility, and bounds.

Each test plays one attack of issue 14 against a real in-process server bound to port 0 (or the store
the service runs on) and asserts what an operator would check: the status code, the victim's figures,
that unary calls are still answered.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator

import grpc
import numpy as np
import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from submarine_elastic.limits import MAX_ACK_KEYS, MAX_REPORT_MESSAGE_BYTES, MAX_SEQ
from submarine_elastic.metrics.api import (
    BYTES_PER_KEPT_POINT,
    KEY_ENTRY_BYTES,
    MAX_JOBS,
    MAX_POINTS_PER_REPLY,
    MAX_REJECTION_CHARS,
    MAX_STREAMS,
    MAX_STREAMS_PER_JOB,
    MAX_THROUGHPUT_SIZES,
    SEQ_WINDOW,
    WATCH_BUFFER_BYTES,
    WATCH_BUFFERS_BYTES,
    InvalidPointError,
)
from submarine_elastic.metrics.auth import job_credential
from submarine_elastic.metrics.proto import metrics_pb2, metrics_pb2_grpc
from submarine_elastic.metrics.server import MetricsServer
from submarine_elastic.metrics.store import InMemoryStore
from tf_hooks import wire
from tf_hooks.api import StepBlock
from tf_hooks.config import MetricsConfig
from tf_hooks.sender import GrpcSink

OPERATOR_TOKEN = "operator-t0ken-for-tests"
KEY = b"service-key-for-tests-0123456789"
OPERATOR = (("authorization", f"Bearer {OPERATOR_TOKEN}"),)


def auth(job: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {job_credential(KEY, job)}"),)


def batch(
    seqs: list[int], job: str = "job-a", incarnation: str = "inc-1", world_size: int = 1, **fields: object
) -> metrics_pb2.ReportBatch:
    values: dict[str, object] = {"loss": 1.0, "examples_per_second": 64.0, "step_time_seconds": 0.5}
    values.update(fields)
    return metrics_pb2.ReportBatch(
        job_id=job,
        worker=metrics_pb2.WorkerRef(instance="worker-0", rank=0),
        incarnation=incarnation,
        world_size=world_size,
        points=[metrics_pb2.StepPoint(seq=s, step=min(s, 2**62), wall_time=1.7e9, **values) for s in seqs],  # type: ignore[arg-type]
    )


def wait_for(condition: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    srv = MetricsServer(token=OPERATOR_TOKEN, job_key=KEY, watch_poll_seconds=0.05).start()
    yield srv
    srv.stop(grace=0)


@pytest.fixture
def stub(server: MetricsServer) -> Iterator[metrics_pb2_grpc.MetricsServiceStub]:
    with grpc.insecure_channel(server.address) as channel:
        yield metrics_pb2_grpc.MetricsServiceStub(channel)


def code_of(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as e:
        call()
    return e.value.code(), e.value.details()


# ------------------------------------------------------------------------- per-job credentials


def test_a_jobs_credential_cannot_write_another_jobs_metrics(
    server: MetricsServer, stub: metrics_pb2_grpc.MetricsServiceStub
) -> None:
    stub.Report(iter([batch([1, 2, 3], job="victim")]), metadata=auth("victim"), timeout=5)
    before = server.store.summary("victim")
    code, details = code_of(
        lambda: stub.Report(iter([batch([2**40], job="victim", loss=1e15)]), metadata=auth("attacker"), timeout=5)
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "job 'attacker'" in details and "'victim'" in details
    assert job_credential(KEY, "attacker").split(".")[1] not in details
    assert server.store.summary("victim") == before
    ack = stub.Report(iter([batch([4, 5], job="victim")]), metadata=auth("victim"), timeout=5)
    assert ack.accepted == 2 and ack.duplicates == 0


def test_a_jobs_credential_reads_its_own_job_only(
    server: MetricsServer, stub: metrics_pb2_grpc.MetricsServiceStub
) -> None:
    for job in ("job-a", "job-b"):
        stub.Report(iter([batch([1], job=job)]), metadata=auth(job), timeout=5)
    mine = stub.GetJob(metrics_pb2.GetJobRequest(job_id="job-a", max_points=5), metadata=auth("job-a"), timeout=5)
    assert mine.summary.points_received == 1
    code, _ = code_of(lambda: stub.GetJob(metrics_pb2.GetJobRequest(job_id="job-b"), metadata=auth("job-a"), timeout=5))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    listed = stub.ListJobs(metrics_pb2.ListJobsRequest(), metadata=auth("job-a"), timeout=5)
    assert [j.job_id for j in listed.jobs] == ["job-a"]
    for request in (metrics_pb2.WatchRequest(job_id="job-b"), metrics_pb2.WatchRequest()):
        code, _ = code_of(lambda r=request: next(iter(stub.Watch(r, metadata=auth("job-a"), timeout=5))))  # type: ignore[misc]
        assert code == grpc.StatusCode.PERMISSION_DENIED
    # The operator (the controller, the CLI) reads every job, and may still report for any (one shared token).
    listed = stub.ListJobs(metrics_pb2.ListJobsRequest(), metadata=OPERATOR, timeout=5)
    assert [j.job_id for j in listed.jobs] == ["job-a", "job-b"]
    assert stub.Report(iter([batch([2], job="job-b")]), metadata=OPERATOR, timeout=5).accepted == 1


def test_a_forged_or_missing_credential_is_unauthenticated(stub: metrics_pb2_grpc.MetricsServiceStub) -> None:
    forged = job_credential(b"another-key-of-32-bytes-00000000", "job-a")
    for metadata in ((("authorization", f"Bearer {forged}"),), (("authorization", "Bearer job-a."),), ()):
        code, _ = code_of(lambda m=metadata: stub.ListJobs(metrics_pb2.ListJobsRequest(), metadata=m, timeout=5))  # type: ignore[misc]
        assert code == grpc.StatusCode.UNAUTHENTICATED


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    calls=st.lists(
        st.tuples(
            st.sampled_from(["job-a", "job-b", "job-c"]),  # whose credential
            st.sampled_from(["job-a", "job-b", "job-c"]),  # the job the batch names
            st.sampled_from(["w-0", "w-1"]),
            st.lists(st.integers(1, 2**48), min_size=1, max_size=5, unique=True).map(sorted),
            st.floats(-1e15, 1e15, allow_nan=False),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_one_jobs_calls_never_change_another_jobs_data(
    server: MetricsServer,
    stub: metrics_pb2_grpc.MetricsServiceStub,
    calls: list[tuple[str, str, str, list[int], float]],
) -> None:
    prefix = f"p{next(_examples)}-"
    for caller, target, instance, seqs, loss in calls:
        caller, target = prefix + caller, prefix + target
        others = {job: _state(server, job) for job in server.store.jobs() if job != caller}
        b = batch(seqs, job=target, incarnation=instance, loss=loss)
        b.worker.instance = instance
        try:
            stub.Report(iter([b]), metadata=auth(caller), timeout=5)
        except grpc.RpcError as e:
            expected = grpc.StatusCode.PERMISSION_DENIED if caller != target else grpc.StatusCode.INVALID_ARGUMENT
            assert e.code() == expected, e.details()
        else:
            assert caller == target
        assert {job: _state(server, job) for job in others} == others


_examples = itertools.count()


def _state(server: MetricsServer, job: str) -> tuple[object, ...]:
    summary = server.store.summary(job)
    points = [(p.worker.instance, p.point.seq, p.point.loss) for p in server.store.series(job, 10_000)]
    return (summary.points_received, summary.points_rejected, summary.last_loss, summary.points_missing, points)


# ------------------------------------------------------------------------- plausibility


def test_a_seq_far_ahead_is_refused_and_later_genuine_points_still_count(
    server: MetricsServer, stub: metrics_pb2_grpc.MetricsServiceStub
) -> None:
    me = auth("job-a")
    stub.Report(iter([batch(list(range(1, 11)))]), metadata=me, timeout=5)
    for seq in (2**63, 2**47, 10 + 2 * SEQ_WINDOW):
        code, details = code_of(lambda s=seq: stub.Report(iter([batch([s], loss=1e15)]), metadata=me, timeout=5))  # type: ignore[misc]
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "seq" in details
    ack = stub.Report(iter([batch(list(range(11, 59)))]), metadata=me, timeout=5)
    assert (ack.accepted, ack.duplicates) == (48, 0)
    summary = stub.GetJob(metrics_pb2.GetJobRequest(job_id="job-a"), metadata=me, timeout=5).summary
    assert summary.points_received == 58 and summary.points_missing == 0 and summary.last_loss == 1.0
    assert summary.points_rejected == 3 and "past the highest seq held" in summary.last_rejection


def test_a_key_silent_for_a_while_may_run_ahead_as_far_as_a_worker_could_have_trained() -> None:
    now = [1000.0]
    store = InMemoryStore(clock=lambda: now[0])
    store.ingest(batch([1]))
    now[0] += 60  # the service was unreachable for a minute: the worker's queue dropped what it could not keep
    assert store.ingest(batch([1 + SEQ_WINDOW + 60 * 10_000])).accepted == 1
    with pytest.raises(InvalidPointError, match="seq"):
        store.ingest(batch([2 + 2 * SEQ_WINDOW + 60 * 10_000]))


def test_a_key_the_store_has_not_seen_starts_where_it_first_reports() -> None:
    store = InMemoryStore()
    assert store.ingest(batch([5_000_000, 5_000_001])).accepted == 2  # the service restarted under a worker
    assert store.summary("job-a").points_missing == 0
    with pytest.raises(InvalidPointError, match="largest seq"):
        store.ingest(batch([MAX_SEQ + 1], incarnation="inc-2"))


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"step_time_seconds": 0.0}, "step_time_seconds"),
        ({"step_time_seconds": 1e6}, "step_time_seconds"),
        ({"examples_per_second": 1e12}, "examples_per_second"),
        ({"batch_size": 2**30}, "batch_size"),
        ({"learning_rate": 1e9}, "learning_rate"),
    ],
)
def test_implausible_values_are_refused_naming_the_field_and_counted(fields: dict[str, object], named: str) -> None:
    store = InMemoryStore()
    store.ingest(batch([1]))
    with pytest.raises(InvalidPointError, match=named):
        store.ingest(batch([2], **fields))
    summary = store.summary("job-a")
    assert summary.points_rejected == 1 and named in summary.last_rejection
    columns = metrics_pb2.ReportBatch.FromString(
        wire.header("job-a", "worker-0", 0, "inc-1", 1)
        + wire.columns(
            np.array([3], np.uint64),
            np.array([3]),
            np.array([1.7e9]),
            {
                name: np.array([value], np.int64 if name == "batch_size" else np.float64)
                for name, value in fields.items()
            },
        )
    )
    with pytest.raises(InvalidPointError, match=named):
        store.ingest(columns)


# ------------------------------------------------------------------------- bounds


def _idle_report(stub: metrics_pb2_grpc.MetricsServiceStub, metadata: object, hold: threading.Event) -> grpc.Future:
    def nothing() -> Iterator[metrics_pb2.ReportBatch]:
        hold.wait()
        return
        yield  # a generator that sends no batch until released

    return stub.Report.future(nothing(), metadata=metadata, timeout=30)


def test_idle_streams_cannot_starve_the_service(
    server: MetricsServer, stub: metrics_pb2_grpc.MetricsServiceStub
) -> None:
    hold = threading.Event()
    futures = []
    try:
        for i in range(MAX_STREAMS):
            futures.append(_idle_report(stub, auth(f"job-{i % 8}"), hold))
        wait_for(lambda: server.open_streams == MAX_STREAMS)
        started = time.monotonic()
        code, details = code_of(lambda: stub.Report(iter([batch([1])]), metadata=auth("job-z"), timeout=5))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "most streams" in details
        code, _ = code_of(lambda: next(iter(stub.Watch(metrics_pb2.WatchRequest(), metadata=OPERATOR, timeout=5))))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        for _ in range(20):
            stub.ListJobs(metrics_pb2.ListJobsRequest(), metadata=OPERATOR, timeout=2)
        assert time.monotonic() - started < 5
    finally:
        hold.set()
    for future in futures:
        assert future.result(timeout=10).accepted == 0


def test_one_job_holds_at_most_its_share_of_streams(
    server: MetricsServer, stub: metrics_pb2_grpc.MetricsServiceStub
) -> None:
    hold = threading.Event()
    try:
        futures = [_idle_report(stub, auth("greedy"), hold) for _ in range(MAX_STREAMS_PER_JOB)]
        wait_for(lambda: server.open_streams == MAX_STREAMS_PER_JOB)
        code, details = code_of(
            lambda: stub.Report(iter([batch([1], job="greedy")]), metadata=auth("greedy"), timeout=5)
        )
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "job 'greedy'" in details
        assert stub.Report(iter([batch([1])]), metadata=auth("job-a"), timeout=5).accepted == 1
    finally:
        hold.set()
    for future in futures:
        future.result(timeout=10)


def test_a_report_stream_that_sends_nothing_is_ended() -> None:
    srv = MetricsServer(token=OPERATOR_TOKEN, job_key=KEY, idle_seconds=0.4).start()
    hold = threading.Event()
    try:
        with grpc.insecure_channel(srv.address) as channel:
            stub = metrics_pb2_grpc.MetricsServiceStub(channel)
            future = _idle_report(stub, auth("job-a"), hold)
            with pytest.raises(grpc.RpcError) as e:
                future.result(timeout=5)
            assert e.value.code() == grpc.StatusCode.CANCELLED
            wait_for(lambda: srv.open_streams == 0)
    finally:
        hold.set()
        srv.stop(grace=0)


def test_a_world_size_flood_keeps_a_bounded_throughput_table(
    server: MetricsServer, stub: metrics_pb2_grpc.MetricsServiceStub
) -> None:
    me = auth("job-a")
    flood = [batch([size], incarnation=f"i{size}", world_size=size) for size in range(1, 1001)]
    for start in range(0, len(flood), MAX_ACK_KEYS):
        stub.Report(iter(flood[start : start + MAX_ACK_KEYS]), metadata=me, timeout=10)
    reply = stub.GetJob(metrics_pb2.GetJobRequest(job_id="job-a"), metadata=me, timeout=5)
    assert len(reply.summary.throughput) == MAX_THROUGHPUT_SIZES
    assert [t.world_size for t in reply.summary.throughput] == list(range(1001 - MAX_THROUGHPUT_SIZES, 1001))
    # With its longest rejection reason too, the most jobs a store keeps list in one default-sized reply.
    assert (reply.ByteSize() + MAX_REJECTION_CHARS) * MAX_JOBS < 4 * 1024 * 1024


def test_the_acknowledgement_does_not_grow_with_the_stream(stub: metrics_pb2_grpc.MetricsServiceStub) -> None:
    me = auth("job-a")
    one_key = stub.Report(iter([batch([seq]) for seq in range(1, 501)]), metadata=me, timeout=10)
    assert one_key.accepted == 500 and one_key.ByteSize() < 64
    keys = [batch([1], incarnation=f"inc-{k}") for k in range(MAX_ACK_KEYS + 1)]
    code, details = code_of(lambda: stub.Report(iter(keys), metadata=me, timeout=10))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and str(MAX_ACK_KEYS) in details
    ack = stub.Report(iter(keys[:MAX_ACK_KEYS]), metadata=me, timeout=10)
    assert len(ack.last_seq) == MAX_ACK_KEYS


def _metric_names() -> list[str]:
    return [f"m{i:02d}_" + "x" * 60 for i in range(32)]


def test_a_large_batch_is_split_by_the_sender_and_delivered(server: MetricsServer) -> None:
    """10,000 steps with 32 user metrics: over MAX_REPORT_MESSAGE_BYTES as one batch, so the sender cuts it."""
    n = 10_000
    names = _metric_names()
    config = MetricsConfig(
        endpoint=server.address,
        job_id="big-job",
        instance="worker-0",
        token=job_credential(KEY, "big-job"),
        queue_size=n,
        max_stream_points=n,
        max_batch_points=n,
        flush_interval=3600.0,
    )
    sink = GrpcSink(config, channel=grpc.insecure_channel(server.address))
    block = StepBlock(
        rank=0,
        world_size=1,
        step=np.arange(n),
        wall_time=np.full(n, 1.7e9),
        loss=np.linspace(2, 1, n),
        step_time_seconds=np.full(n, 0.1),
        user_metrics={name: np.full(n, float(i)) for i, name in enumerate(names)},
    )
    pending = [block]
    sink.add_source(lambda: [pending.pop()] if pending else [])
    assert sink.flush(30)
    stats = sink.close(5)
    assert (stats.acked, stats.rejected, stats.last_error) == (n, 0, None)
    assert server.store.summary("big-job").points_received == n
    # The same steps in one batch are more than the service receives.
    one_piece = wire.header("big-job", "worker-0", 0, "one-piece", 1) + wire.columns(
        np.arange(1, n + 1, dtype=np.uint64),
        block.step,
        block.wall_time,
        {"loss": block.loss, "step_time_seconds": block.step_time_seconds},
        list(block.user_metrics.items()),
    )
    assert len(one_piece) > MAX_REPORT_MESSAGE_BYTES
    with grpc.insecure_channel(server.address) as channel:
        stub = metrics_pb2_grpc.MetricsServiceStub(channel)
        request = metrics_pb2.ReportBatch.FromString(one_piece)
        code, _ = code_of(lambda: stub.Report(iter([request]), metadata=OPERATOR, timeout=10))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_replies_fit_a_clients_default_receive_size(
    server: MetricsServer, stub: metrics_pb2_grpc.MetricsServiceStub
) -> None:
    """A Watch event of a large batch is cut into events of MAX_POINTS_PER_REPLY; GetJob asks for at most that."""
    names = _metric_names()
    n = (MAX_REPORT_MESSAGE_BYTES - 8192) // (8 * (3 + 3 + len(names)))
    body = wire.header("job-a", "worker-0", 0, "inc-1", 1) + wire.columns(
        np.arange(1, n + 1, dtype=np.uint64),
        np.arange(n),
        np.full(n, 1.7e9),
        {"loss": np.ones(n), "examples_per_second": np.ones(n), "step_time_seconds": np.ones(n)},
        [(name, np.ones(n)) for name in names],
    )
    assert n > 3 * MAX_POINTS_PER_REPLY and len(body) <= MAX_REPORT_MESSAGE_BYTES
    watch = stub.Watch(metrics_pb2.WatchRequest(job_id="job-a", with_summary=True), metadata=OPERATOR, timeout=20)
    received: list[int] = []
    reader = threading.Thread(target=lambda: received.extend(len(e.points) for e in itertools.islice(watch, 4)))
    reader.start()
    wait_for(lambda: server.open_streams == 1)
    stub.Report(iter([metrics_pb2.ReportBatch.FromString(body)]), metadata=auth("job-a"), timeout=10)
    reader.join(20)
    watch.cancel()
    assert sum(received) == n and max(received) == MAX_POINTS_PER_REPLY
    reply = stub.GetJob(
        metrics_pb2.GetJobRequest(job_id="job-a", max_points=MAX_POINTS_PER_REPLY), metadata=OPERATOR, timeout=5
    )
    assert len(reply.points) == MAX_POINTS_PER_REPLY and reply.ByteSize() < 4 * 1024 * 1024
    code, details = code_of(
        lambda: stub.GetJob(
            metrics_pb2.GetJobRequest(job_id="job-a", max_points=MAX_POINTS_PER_REPLY + 1), metadata=OPERATOR, timeout=5
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "max_points" in details


def test_memory_stays_bounded_whatever_the_jobs_send() -> None:
    """Jobs of single-step batches of 32 user metrics each (the costliest shape): the process grows by less
    than the store's stated bound, where 2048 such points once took about 28 MB."""
    jobs, points, kept = 2, 3072, 2048
    store = InMemoryStore(points_per_job=kept)
    names = _metric_names()
    template = batch([1])
    for name in names:
        template.points[0].user_metrics[name] = 1.0
    process = psutil.Process()
    before = process.memory_info().rss
    for j in range(jobs):
        template.job_id = f"flood-{j}"
        raw = template.SerializeToString()
        for seq in range(1, points + 1):
            one = metrics_pb2.ReportBatch.FromString(raw)  # a message of its own, as the service parses each
            one.points[0].seq = seq
            store.ingest(one)
    grown = process.memory_info().rss - before
    bound = jobs * (kept * BYTES_PER_KEPT_POINT + 2 * 256 * KEY_ENTRY_BYTES + 64 * 1024)
    assert grown < bound + 16 * 1024 * 1024, f"grew {grown / 2**20:.0f} MiB"
    assert all(0 < len(store.series(f"flood-{j}", kept)) < kept for j in range(jobs))


def test_watchers_that_never_read_hold_a_bounded_number_of_bytes() -> None:
    store = InMemoryStore()
    n, names = 1000, _metric_names()
    subs = [store.subscribe(None) for _ in range(6)]
    for k in range(300):  # 300 batches of 1000 steps of 32 user metrics: about 90 MB of values
        seq = np.arange(k * n + 1, (k + 1) * n + 1, dtype=np.uint64)
        store.ingest(
            metrics_pb2.ReportBatch.FromString(
                wire.header(f"job-{k % 3}", "worker-0", 0, "inc-1", 1)
                + wire.columns(seq, seq.astype(np.int64), np.full(n, 1.7e9), {}, [(m, np.ones(n)) for m in names])
            )
        )
    held = []
    for sub in subs:
        points = 0
        while (event := sub.get(0)) is not None:
            points += len(event.points)
        held.append(points * 8 * (3 + len(names)))
        assert sub.dropped > 0 and held[-1] <= WATCH_BUFFER_BYTES
    assert sum(held) <= WATCH_BUFFERS_BYTES + len(subs) * n * 8 * (3 + len(names))
