"""The controller counts GPUs: a node holds as many workers of a GPU job as its free ``yarn.io/gpu`` allows (per
node: a worker's GPUs come from one node), an arrival's GPUs come from the elastic jobs holding them, and a job
whose workers ask more GPUs than any node has is refused, as ``job run`` refuses it.

The scenarios run the controller against :class:`MiniYarn` (``test_controller_capacity``) with GPUs on its nodes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import responses

from submarine_elastic.controller.api import InvalidJobError, JobFootprint, NodeResources, Resources
from submarine_elastic.controller.capacity import count_slots
from submarine_elastic.controller.client import ControllerClient
from submarine_elastic.controller.server import ControllerServer
from tests.unit.test_controller_capacity import RM, Clock, MiniYarn, component, controller

ONE_GPU = Resources(1024, 1, 1)
TWO_GPUS = Resources(1024, 1, 2)


def gpu_node(name: str, free_gpus: int, gpus: int = 2) -> NodeResources:
    """A node with memory and vcores to spare: only its GPUs bind."""
    return NodeResources(name, free=Resources(16384, 16, free_gpus), gpus=gpus)


def test_gpus_bind_a_gpu_worker_and_not_a_cpu_one() -> None:
    assert Resources(16384, 16, 2).count(ONE_GPU) == 2
    assert Resources(16384, 16, 2).count(TWO_GPUS) == 1
    assert Resources(16384, 16, 0).count(Resources(1024, 1)) == 16, "a worker without GPUs needs none"
    assert Resources(16384, 16, -1).count(ONE_GPU) == -1, "a GPU short: one worker has to go first"
    assert str(TWO_GPUS) == "1024 MB, 1 vcore, 2 GPUs"
    with pytest.raises(ValueError, match="positive"):
        Resources(1024, 1).count(Resources(1024, 1, -1))


def test_slots_are_counted_in_gpus_per_node() -> None:
    """Two nodes with one free GPU each hold two 1-GPU workers but no 2-GPU worker: 2 GPUs free in all are
    not 2 on one node."""
    one = count_slots([gpu_node("n0", 1), gpu_node("n1", 1)], {"a": JobFootprint(ONE_GPU, 2)})
    two = count_slots([gpu_node("n0", 1), gpu_node("n1", 1)], {"b": JobFootprint(TWO_GPUS, 1)})
    assert one is not None and two is not None
    assert (one.free, dict(one.per_node)) == (2, {"n0": 1, "n1": 1})
    assert (two.free, dict(two.per_node)) == (0, {"n0": 0, "n1": 0})


def test_an_arrival_takes_gpus_from_an_elastic_job(tmp_path: Path) -> None:
    """`big` holds all 4 GPUs of 2 nodes x 2 with 1-GPU workers, memory to spare; `small` arrives asking 2
    1-GPU workers: big gives up 2 workers, and small's workers get their GPUs."""
    yarn, clock = MiniYarn(memory_mb=16384, vcores=16, gpus=2), Clock()
    yarn.submit("big", 4, worker=ONE_GPU, on=("n0", "n1"))
    assert [(n.node_id, n.free.gpus) for n in yarn.nodes() or []] == [("n0", 0), ("n1", 0)]
    c = controller(tmp_path, yarn, clock)
    c.job_submitted("big", 1, 4, 4, policy="greedy", gpus=1)
    assert c.tick() == []
    clock.now += 60
    yarn.submit("small", 2, worker=ONE_GPU, min_ring=2)
    c.job_submitted("small", 2, 2, 2, elastic=False, gpus=1)
    decided = c.tick()
    assert c.wait_idle(5)
    assert [(d.job_id, d.from_workers, d.to_workers) for d in decided] == [("big", 4, 2)]
    assert len(yarn.jobs["small"].workers) == 2, "the GPUs big gave up went to small"
    assert [n.free.gpus for n in yarn.nodes() or []] == [0, 0]


def test_a_gpu_job_on_a_cluster_without_gpus_is_refused(tmp_path: Path) -> None:
    c = controller(tmp_path, MiniYarn(), Clock())
    with pytest.raises(InvalidJobError) as refused:
        c.job_submitted("gpujob", 1, 4, 2, gpus=1)
    assert str(refused.value) == (
        "job 'gpujob' asks yarn.io/gpu 1 per worker, but the largest node of the cluster has 0 "
        "(yarn.io/gpu by node: n0 0, n1 0); a worker's GPUs come from one node"
    )
    assert c.store.jobs() == [], "nothing recorded"


def test_more_gpus_per_worker_than_a_node_has_are_refused_and_as_many_accepted(tmp_path: Path) -> None:
    c = controller(tmp_path, MiniYarn(gpus=2), Clock())
    with pytest.raises(
        InvalidJobError, match="asks yarn.io/gpu 3 per worker, but the largest node of the cluster has 2"
    ):
        c.job_submitted("gpujob", 1, 4, 2, gpus=3)
    assert c.job_submitted("gpujob", 1, 4, 2, gpus=2).job_id == "gpujob"
    with pytest.raises(InvalidJobError, match=r"gpus must be an integer in \[0, 64\], got -1"):
        c.job_submitted("bad", 1, 4, 2, gpus=-1)


def test_the_refusal_reaches_a_client_of_the_controllers_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUBMARINE_INSECURE", "1")
    c = controller(tmp_path, MiniYarn(), Clock())
    with ControllerServer(c, token="t") as server, ControllerClient(server.address, "t", timeout=5) as client:
        with pytest.raises(
            InvalidJobError, match="asks yarn.io/gpu 2 per worker, but the largest node of the cluster has 0"
        ):
            client.job_submitted("gpujob", 1, 4, 2, gpus=2)
        assert client.job_submitted("cpujob", 1, 4, 2).job_id == "cpujob"


def test_the_backend_reads_gpus_of_nodes_and_of_a_jobs_workers() -> None:
    from submarine_elastic.controller.backend import YarnJobBackend

    nodes = json.loads((Path(__file__).parent / "recorded" / "rm-nodes-gpu.json").read_text())
    worker = component("worker", "1024", 1, 3)
    worker["resource"] = {"cpus": 1, "memory": "1024", "additional": {"yarn.io/gpu": {"value": 1, "unit": ""}}}
    backend = YarnJobBackend(RM)
    with responses.RequestsMock() as rsps:
        rsps.get(f"{RM}/ws/v1/cluster/nodes", json=nodes)
        [node] = backend.nodes() or []
        assert (node.gpus, node.free.gpus) == (2, 2)
        service = {"name": "big", "state": "STARTED", "components": [component("driver", "512", 1, 1), worker]}
        rsps.get(f"{RM}/app/v1/services/big", json=service)
        assert backend.footprint("big") == JobFootprint(ONE_GPU, 3)
    backend.close()
