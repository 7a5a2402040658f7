"""The controller's loop on a scripted cluster: arrivals, departures, persistence, restart."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from submarine_elastic.controller.api import InvalidJobError, UnknownJobError
from submarine_elastic.controller.service import ControllerService, JobBackend
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.policy import PolicyEngine, load_arbiter, load_job_policy


class FakeCluster(JobBackend):
    """Jobs resize instantly (or fail, when told); records every resize."""

    def __init__(self, capacity: int) -> None:
        self.slots = capacity
        self.sizes: dict[str, int] = {}
        self.resizes: list[tuple[str, int]] = []
        self.fail: set[str] = set()
        self.lock = threading.Lock()

    def capacity(self, live_jobs: int) -> int:
        return self.slots

    def ring_size(self, job_id: str) -> int | None:
        return self.sizes.get(job_id)

    def resize(self, job_id: str, workers: int, reason: str, timeout: float) -> None:
        with self.lock:
            self.resizes.append((job_id, workers))
        if job_id in self.fail:
            raise RuntimeError(f"driver of {job_id} refused")
        self.sizes[job_id] = workers

    def cluster_jobs(self) -> dict[str, int] | None:
        return None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def controller(tmp_path: Path, cluster: FakeCluster, clock: Clock, policy: str = "greedy") -> ControllerService:
    engine = PolicyEngine(load_job_policy(policy), load_arbiter("fair-share"), cooldown_s=0)
    return ControllerService(ControllerStore(tmp_path / "c.db"), engine, cluster, interval=1, clock=clock)


def settle(c: ControllerService) -> None:
    assert c.wait_idle(10)


def test_an_arrival_to_a_full_cluster_takes_workers_from_the_elastic_job(tmp_path: Path):
    cluster, clock = FakeCluster(capacity=4), Clock()
    c = controller(tmp_path, cluster, clock)
    c.job_submitted("big", 1, 4, 4)
    cluster.sizes["big"] = 4
    assert c.tick() == []  # it already has the whole cluster
    clock.now += 10
    c.job_submitted("small", 2, 2, 2, elastic=False)
    decided = c.tick()
    settle(c)
    assert [(d.job_id, d.from_workers, d.to_workers) for d in decided] == [("big", 4, 2)]
    assert cluster.resizes == [("big", 2)]
    [record] = c.timeline("big")
    assert record.applied and record.error is None and record.reason
    assert {j.job_id: (j.workers, j.target) for j in c.jobs()} == {"big": (2, 2), "small": (2, 2)}


def test_a_departure_gives_the_capacity_back(tmp_path: Path):
    cluster, clock = FakeCluster(capacity=4), Clock()
    c = controller(tmp_path, cluster, clock)
    c.job_submitted("big", 1, 4, 2)
    c.job_submitted("small", 2, 2, 2, elastic=False)
    cluster.sizes.update(big=2, small=2)
    assert c.tick() == []
    clock.now += 10
    c.job_finished("small")
    del cluster.sizes["small"]
    decided = c.tick()
    settle(c)
    assert [(d.job_id, d.to_workers) for d in decided] == [("big", 4)]
    assert cluster.sizes["big"] == 4
    assert c.decision("big").applied


def test_a_failed_resize_is_recorded_and_the_job_keeps_its_size(tmp_path: Path):
    cluster, clock = FakeCluster(capacity=4), Clock()
    c = controller(tmp_path, cluster, clock)
    c.job_submitted("big", 1, 4, 2)
    cluster.sizes["big"] = 2
    cluster.fail.add("big")
    c.tick()
    settle(c)
    record = c.decision("big")
    assert record is not None and not record.applied and "refused" in record.error
    assert c.store.job("big").target == 2 and c.store.job("big").workers == 2


def test_state_survives_a_restart_and_nothing_is_resized_twice(tmp_path: Path):
    cluster, clock = FakeCluster(capacity=8), Clock()
    first = controller(tmp_path, cluster, clock)
    first.job_submitted("job", 1, 4, 2)
    first.report_metrics("job", 2, 100, 512.0, loss=0.5)
    # A decision recorded but not applied when the controller died; the job did reach the size.
    from submarine_elastic.controller.api import DecisionRecord

    first.store.add_decision(DecisionRecord("job", clock.now, 2, 3, "probe"))
    cluster.sizes["job"] = 3
    first.store.close()

    second = controller(tmp_path, cluster, clock, policy="static")
    assert cluster.resizes == []
    [record] = second.timeline("job")
    assert record.applied and record.to_workers == 3
    assert second.store.job("job").workers == 3
    assert second.store.throughput("job") == {2: (512.0, 1)}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("Bad_Name", 1, 2, 1), "job id"),
        (("ok", 0, 2, 1), "min_workers"),
        (("ok", 2, 4, 1), "workers 1"),
        (("ok", 1, 2, 2), "fixed-size"),
    ],
)
def test_bad_jobs_are_refused_naming_the_value(tmp_path: Path, args: tuple, message: str):
    c = controller(tmp_path, FakeCluster(4), Clock())
    elastic = args != ("ok", 1, 2, 2)
    with pytest.raises(InvalidJobError, match=message):
        c.job_submitted(*args, elastic=elastic)
    assert c.jobs() == []


def test_unknown_jobs_and_bad_metrics(tmp_path: Path):
    c = controller(tmp_path, FakeCluster(4), Clock())
    with pytest.raises(UnknownJobError):
        c.job_finished("nope")
    with pytest.raises(UnknownJobError):
        c.decision("nope")
    c.job_submitted("job", 1, 2, 1)
    with pytest.raises(InvalidJobError, match="samples_per_second"):
        c.report_metrics("job", 1, 5, float("nan"))


def test_a_job_that_fits_starts_at_the_size_it_asked_for(tmp_path: Path):
    cluster, clock = FakeCluster(capacity=8), Clock()
    c = controller(tmp_path, cluster, clock, policy="static")
    c.job_submitted("job", 1, 4, 3)
    assert c.tick() == []  # its ring has not formed yet, but 3 slots are free: nothing to decide
    cluster.sizes["job"] = 3
    assert c.tick() == []
    assert cluster.resizes == []


class ReplacingCluster(FakeCluster):
    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.replaced: list[tuple[str, tuple[str, ...]]] = []

    def instances(self, job_id: str) -> tuple[str, ...]:
        return tuple(f"worker-{i}" for i in range(self.sizes.get(job_id, 0)))

    def replace(self, job_id: str, instances: tuple[str, ...], timeout: float) -> None:
        self.replaced.append((job_id, instances))


def test_a_straggler_seen_in_the_metrics_is_replaced(tmp_path: Path):
    from submarine_elastic.metrics.proto import metrics_pb2
    from submarine_elastic.metrics.store import InMemoryStore

    cluster, clock, metrics = ReplacingCluster(capacity=8), Clock(), InMemoryStore()
    engine = PolicyEngine(load_job_policy("straggler"), load_arbiter("fair-share"), cooldown_s=0)
    c = ControllerService(ControllerStore(tmp_path / "c.db"), engine, cluster, metrics=metrics, clock=clock)
    c.job_submitted("job", 1, 4, 4)
    cluster.sizes["job"] = 4
    for rank in range(4):
        step_time = 0.9 if rank == 2 else 0.3
        metrics.ingest(
            metrics_pb2.ReportBatch(
                job_id="job",
                worker=metrics_pb2.WorkerRef(instance=f"worker-{rank}", rank=rank),
                incarnation="a",
                world_size=4,
                points=[
                    metrics_pb2.StepPoint(
                        seq=s + 1,
                        step=s,
                        loss=1.0,
                        step_time_seconds=step_time,
                        examples_per_second=100.0,
                        batch_size=16,
                        wall_time=1.0 + s,
                    )
                    for s in range(10)
                ],
            )
        )
    [record] = c.tick()
    settle(c)
    assert cluster.replaced == [("job", ("worker-2",))]
    assert (record.from_workers, record.to_workers) == (4, 4) and "worker-2" in record.reason
    assert c.decision("job").applied


def test_a_restarted_controller_gives_jobs_their_own_policies_back(tmp_path: Path):
    cluster, clock = FakeCluster(capacity=8), Clock()
    first = controller(tmp_path, cluster, clock, policy="static")
    first.job_submitted("job", 1, 4, 2, policy="greedy")
    cluster.sizes["job"] = 2
    first.tick()
    settle(first)
    first.store.close()
    second = controller(tmp_path, cluster, clock, policy="static")
    assert type(second.engine.policy_for("job")).__name__ == "GreedyPolicy"
