"""One versioned target from every writer: the driver checks each with the one batch rule, numbers it uniquely
under concurrent SetTarget calls (over real gRPC), applies them in version order so the last one taken wins,
and reports its verdict (ring at target, converged, why not) as data in Status."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from submarine_elastic.elastic.driver import JobDriver
from submarine_elastic.elastic.reconcile import TargetBook, target_problem
from submarine_elastic.limits import MAX_ACCUM_STEPS, batch_setting_problem
from submarine_elastic.policy import Decision, InvalidDecisionError
from submarine_elastic.protocol.api import BatchLimits, FlexRefusedError, Limits, verdict
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.protocol.proto import elastic_pb2_grpc as pb_grpc
from tests.unit.test_driver_scale import RecordingYarn

WRITERS = 8
CALLS_EACH = 25


@pytest.fixture()
def served() -> Iterator[tuple[JobDriver, RecordingYarn, pb_grpc.ElasticDriverStub]]:
    """A job of 2 workers (1 to 4), batch limits 32..512, its driver served on port 0 with its resizer."""
    yarn = RecordingYarn()
    driver = JobDriver(
        "targets", Limits(2, 1, 4), yarn, token=None, iface="lo", elastic_timeout=60, batch_limits=BatchLimits(32, 512)
    )  # type: ignore[arg-type]
    out = driver.serve(0)
    assert out is not None
    server, port = out
    threading.Thread(target=driver.resizer.loop, daemon=True, name="resizer").start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield driver, yarn, pb_grpc.ElasticDriverStub(channel)
    channel.close()
    server.stop(None)


def test_concurrent_targets_get_unique_versions_and_the_last_taken_wins(
    served: tuple[JobDriver, RecordingYarn, pb_grpc.ElasticDriverStub],
) -> None:
    driver, yarn, stub = served
    replies: list[tuple[int, int, int]] = []  # (version, workers, batch)
    lock = threading.Lock()
    start = threading.Barrier(WRITERS)

    def writer(n: int) -> None:
        start.wait()
        for i in range(CALLS_EACH):
            workers, batch = 1 + (n + i) % 4, 32 * (1 + (n * CALLS_EACH + i) % 16)
            reply = stub.SetTarget(pb.Target(workers=workers, batch_size=batch, reason=f"writer {n}"), timeout=10)
            with lock:
                replies.append((reply.version, workers, batch))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    versions = sorted(v for v, _, _ in replies)
    assert versions == list(range(1, WRITERS * CALLS_EACH + 1)), "two targets got the same version"
    last_version, last_workers, last_batch = max(replies)
    # Every batch change is in the timeline in version order, and the batch in force is the newest target's.
    timeline = driver.batch_timeline
    assert [t.version for t in timeline] == sorted(t.version for t in timeline)
    status = stub.Status(pb.StatusRequest(), timeout=10)
    assert status.version == last_version
    assert (status.batch.version, status.batch.batch_size) == (last_version, last_batch)
    # The resizer applies the targets in version order: it ends at the last one taken, and YARN is told so.
    deadline = time.monotonic() + 10
    while driver.targets.pending or driver.target != last_workers or yarn.targets[-1][0] != last_workers:
        assert time.monotonic() < deadline, f"the resizer did not end at {last_workers}: {yarn.targets[-3:]}"
        time.sleep(0.05)
    assert driver.target == last_workers and driver.requested == last_workers


def test_a_refused_target_takes_no_version_and_names_the_value(
    served: tuple[JobDriver, RecordingYarn, pb_grpc.ElasticDriverStub],
) -> None:
    driver, _, stub = served
    for bad, says in [
        (pb.Target(workers=9), "9 workers is above the job's --max_workers 4"),
        (pb.Target(workers=2, batch_size=16), "batch size 16 is outside the job's [--min_batch_size 32"),
        (pb.Target(workers=2, batch_size=64, accum_steps=MAX_ACCUM_STEPS + 1), "accumulation steps must lie in"),
        (pb.Target(workers=2, learning_rate=0.1), "come with a batch size"),
        (pb.Target(workers=1, remove=["worker-7"]), "unknown worker instances: worker-7"),
    ]:
        with pytest.raises(grpc.RpcError) as refused:
            stub.SetTarget(bad, timeout=10)
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert says in (refused.value.details() or "")
    assert stub.SetTarget(pb.Target(workers=3), timeout=10).version == 1
    assert driver.batch_timeline == []


def test_the_target_book_orders_keeps_and_resumes_versions() -> None:
    clock = iter(range(100, 200))
    book = TargetBook(2, clock=lambda: float(next(clock)))
    limits = Limits(2, 1, 4)
    taken, previous = book.take(pb.Target(workers=3, reason="grow"), limits, None, ())
    assert (taken.version, taken.time, previous) == (1, 100.0, 2)
    book.take(pb.Target(workers=3, batch_size=64), limits, None, ())
    book.take(pb.Target(workers=3, batch_size=64), limits, None, ())  # the batch in force: no new setting
    assert [t.version for t in book.batch_timeline] == [2]
    assert [book.next(0).version for _ in range(3)] == [1, 2, 3]  # type: ignore[union-attr]
    assert book.next(0) is None
    assert book.applied(3, "grow") == 2 and book.workers == 3
    # A relaunched driver's book goes on from its predecessor's last version.
    again = TargetBook(3, version=book.version, batch_timeline=book.batch_timeline)
    assert again.take(pb.Target(workers=2), limits, None, ())[0].version == 4
    with pytest.raises(FlexRefusedError, match="0 workers is below the job's --min_workers 1"):
        again.take(pb.Target(workers=0), limits, None, ())


def test_the_verdict_says_converged_only_when_yarn_the_ring_and_the_leavers_agree() -> None:
    assert verdict(3, 3, (), 3) == verdict(3, 3, (), 3)
    done = verdict(3, 3, (), 3)
    assert (done.ring_at_target, done.converged, done.lag) == (True, True, "")
    yarn_behind = verdict(1, 1, (), 3, "the RM did not answer")
    assert (yarn_behind.ring_at_target, yarn_behind.converged) == (True, False)
    assert yarn_behind.lag == "YARN has 3 of 1; the RM did not answer"
    leaving = verdict(1, 3, ("worker-1", "worker-2"), 3)
    assert not leaving.ring_at_target and leaving.lag == "YARN has 3 of 1; leaving: worker-1, worker-2; ring has 3 of 1"
    assert verdict(2, 2, (), None).lag == "YARN's workers unknown"
    # READY at the target while YARN still lists a container it stops (a flex put back): not converged yet.
    stopping = verdict(3, 3, (), 3, yarn_settled=False)
    assert (stopping.ring_at_target, stopping.converged) == (True, False)
    assert stopping.lag == "YARN has 3 of 3 READY, other worker containers not gone yet"


def test_a_policy_cannot_propose_what_the_driver_refuses() -> None:
    """One rule: what Decision refuses is what the driver refuses, with the same words."""
    for batch, accum, lr in [(0, 0, None), (64, MAX_ACCUM_STEPS + 1, None), (64, 0, float("nan")), (2**25, 0, None)]:
        problem = batch_setting_problem(batch, accum, lr)
        assert problem is not None
        with pytest.raises(InvalidDecisionError) as refused:
            Decision("job", 2, "test", batch_size=batch, accum_steps=accum, learning_rate=lr)
        assert problem in str(refused.value)
        target = pb.Target(workers=2, batch_size=batch, accum_steps=accum)
        if lr is not None:
            target.learning_rate = lr
        assert target_problem(target, Limits(2, 1, 4), None, ()) == problem
