"""The controller decides within each YARN queue: a queue's jobs hold at most its maximum, get its guarantee back
when they ask for it, and a cluster of one queue is counted as before.

Runs the controller against :class:`MiniYarn` (two nodes of 10 GB and 10 vcores: with each job's AM and driver
placed, 8 worker slots of 2048 MB) with the queues its scheduler reports.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import responses

from submarine_elastic.controller.api import JobBackend
from submarine_elastic.controller.service import ControllerService
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.policy import PolicyEngine, QueueShare, load_arbiter, load_job_policy

from .test_controller_capacity import Clock, MiniYarn

PROD = QueueShare("prod", 0.6, 1.0)
RESEARCH = QueueShare("research", 0.4, 0.5)


class QueuedYarn(MiniYarn):
    """MiniYarn whose scheduler reports ``queues``."""

    def __init__(self, queues: list[QueueShare]) -> None:
        super().__init__(nodes=2, memory_mb=10240, vcores=10)
        self.reported = queues

    def queues(self) -> list[QueueShare]:
        return self.reported


def controller(tmp_path: Path, yarn: JobBackend, clock: Clock) -> ControllerService:
    engine = PolicyEngine(load_job_policy("greedy"), load_arbiter("fair-share"), cooldown_s=30)
    return ControllerService(ControllerStore(tmp_path / "c.db"), engine, yarn, interval=5, clock=clock)


def grow_alone(tmp_path: Path, queues: list[QueueShare], queue: str | None) -> tuple[QueuedYarn, Clock, int]:
    """One greedy job of 1..8 workers alone on the cluster: the workers it is given in its first round."""
    yarn, clock = QueuedYarn(queues), Clock()
    yarn.submit("r", 1, on=("n0", "n1"))
    c = controller(tmp_path, yarn, clock)
    c.job_submitted("r", 1, 8, 1, queue=queue)
    [grown] = c.tick()
    assert c.wait_idle(5)
    return yarn, clock, grown.to_workers


def test_a_job_grows_no_further_than_its_queues_maximum(tmp_path: Path) -> None:
    yarn, clock, workers = grow_alone(tmp_path, [PROD, RESEARCH], "research")
    assert workers == 4  # half of the 8 slots, though prod leaves its 60 % idle
    assert len(yarn.jobs["r"].workers) == 4


@pytest.mark.parametrize("queues", [[], [QueueShare("default", 1.0, 1.0)]], ids=["no queues", "one queue"])
def test_one_queue_or_none_counts_the_cluster_as_one_pool(tmp_path: Path, queues: list[QueueShare]) -> None:
    _, _, workers = grow_alone(tmp_path, queues, None)
    assert workers == 8


def test_a_queue_lends_its_idle_guarantee_and_gets_it_back_when_its_job_arrives(tmp_path: Path) -> None:
    yarn, clock = QueuedYarn([PROD, RESEARCH]), Clock()
    yarn.submit("p", 1, on=("n0", "n1"))
    c = controller(tmp_path, yarn, clock)
    c.job_submitted("p", 1, 8, 1, queue="root.prod")  # a path names its leaf queue
    [grown] = c.tick()
    assert c.wait_idle(5)
    assert (grown.job_id, grown.to_workers) == ("p", 8)  # research's 40 % is idle: prod borrows it
    clock.now += 60
    yarn.submit("r", 1)  # its AM and driver fit beside p's workers; its worker does not
    c.job_submitted("r", 1, 8, 1, queue="research")
    decided = {d.job_id: d.to_workers for d in c.tick()}
    assert c.wait_idle(5)
    # research's guarantee is 40 % of 8 slots, 3 whole ones; the slot left over goes to prod
    assert decided == {"p": 5, "r": 3}
    assert (len(yarn.jobs["p"].workers), len(yarn.jobs["r"].workers)) == (5, 3)
    assert c.store.job("r").queue == "research"


def test_the_backend_reads_the_queues_shares_from_the_rm_and_keeps_them_while_it_does_not_answer() -> None:
    from submarine_elastic.controller.backend import YarnJobBackend

    from .test_job_queue import RM, leaf

    answer = {
        "scheduler": {
            "schedulerInfo": {
                "type": "capacityScheduler",
                "queues": {"queue": [leaf("prod", 60.000004, 100.0, 8192, 8), leaf("research", 40.0, 50.0, 4096, 4)]},
            }
        }
    }
    backend = YarnJobBackend(RM)
    with responses.RequestsMock() as rsps:
        rsps.get(f"{RM}/ws/v1/cluster/scheduler", json=answer)
        assert backend.queues() == [PROD, RESEARCH]  # 60.000004 as a live RM reports 60 %: 0.6
        rsps.get(f"{RM}/ws/v1/cluster/scheduler", status=503, body="unavailable")
        assert backend.queues() == [PROD, RESEARCH]
    backend.close()
