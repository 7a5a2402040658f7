"""The controller knows each worker's node live: the agent says which NodeManager it runs on, the driver's Status
carries it, and the controller's snapshot gives the policies the job's workers per node."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from submarine_elastic import env
from submarine_elastic.controller.backend import placement_of
from submarine_elastic.elastic.driver import JobDriver
from submarine_elastic.policy import Snapshot
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.protocol.proto import elastic_pb2_grpc as pb_grpc
from tests.unit.test_controller import Clock, FakeCluster, controller
from tests.unit.test_driver_hello import ANSWER_WITHIN_S, driver, until, yarn  # noqa: F401 - fixtures

NODES = {0: "node-a:8041", 1: "node-b:8041"}


def test_an_agent_names_its_node_as_yarn_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NM_HOST", "node-a")
    monkeypatch.setenv("NM_PORT", "8041")
    assert env.settings().node_id() == "node-a:8041"
    monkeypatch.delenv("NM_PORT")
    assert env.settings().node_id() == ""  # outside a container: not known, never half a name


def test_the_drivers_status_names_the_node_of_each_worker(driver: tuple[JobDriver, str]) -> None:  # noqa: F811
    job, target = driver

    async def scenario() -> None:
        async with grpc.aio.insecure_channel(target) as channel:
            stub = pb_grpc.ElasticDriverStub(channel)
            calls = [stub.Attach() for _ in NODES]
            for number, call in enumerate(calls):
                hello = pb.Hello(instance=f"worker-{number}", container_id=f"c{number}", node=NODES[number])
                await call.write(pb.AgentEvent(hello=hello))

            async def listed() -> bool:
                status = await stub.Status(pb.StatusRequest(), timeout=ANSWER_WITHIN_S)
                return [(w.instance, w.node) for w in status.workers] == [
                    ("worker-0", "node-a:8041"),
                    ("worker-1", "node-b:8041"),
                ]

            await until(listed, "Status names worker-0 on node-a and worker-1 on node-b")
            for call in calls:
                call.cancel()

    asyncio.run(scenario())


def worker(instance: str, rank: int, node: str) -> pb.WorkerStatus:
    return pb.WorkerStatus(instance=instance, rank=rank, node=node)


def test_the_placement_counts_the_ring_members_on_each_node_most_first() -> None:
    status = pb.JobStatus(
        workers=[
            worker("worker-0", 0, "b:1"),
            worker("worker-1", 1, "a:1"),
            worker("worker-2", 2, "a:1"),
            worker("worker-3", -1, "c:1"),  # attached, not in the ring: holds no place in the ring's spread
        ]
    )
    assert placement_of(status) == (2, 1)


def test_the_placement_is_unknown_while_a_ring_members_node_is() -> None:
    status = pb.JobStatus(workers=[worker("worker-0", 0, "a:1"), worker("worker-1", 1, "")])
    assert placement_of(status) == ()
    assert placement_of(pb.JobStatus()) == ()


class PlacedCluster(FakeCluster):
    """Jobs whose drivers report where their workers run."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.placements: dict[str, tuple[int, ...]] = {}

    def placement(self, job_id: str) -> tuple[int, ...]:
        return self.placements.get(job_id, ())


def test_the_policies_see_each_jobs_workers_per_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, clock = PlacedCluster(capacity=8), Clock()
    c = controller(tmp_path, cluster, clock)
    c.job_submitted("spread", 1, 4, 3)
    c.job_submitted("packed", 1, 4, 2)
    c.job_submitted("unknown", 1, 4, 2)
    cluster.sizes.update(spread=3, packed=2, unknown=2)
    cluster.placements.update(spread=(2, 1), packed=(2,), unknown=())
    seen: list[Snapshot] = []
    monkeypatch.setattr(c.engine, "decide", lambda snapshot: seen.append(snapshot) or [])
    c.tick()
    [snapshot] = seen
    assert {j.job_id: (j.placement, j.nodes) for j in snapshot.jobs} == {
        "spread": ((2, 1), 2),
        "packed": ((2,), 1),
        "unknown": ((), None),
    }
