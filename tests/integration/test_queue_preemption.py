"""Queues and preemption on a real 2-node pseudo-cluster (``cluster up --queues prod:50,research:50``), with real
TensorFlow and Horovod: an elastic job in research borrows prod's idle half and grows to the whole cluster; a
fixed-size job arrives in prod; YARN preempts research's workers; the elastic job shrinks without a worker
failure (no committed step lost, every sample once per epoch, identical weights); the prod job starts within a
bound; after it ends the elastic job grows back.

Sizes: each node offers 2048 MB; the elastic job is an ApplicationMaster and a driver of 512 MB and up to 3
workers of 1024 MB (4096 MB: the cluster), the prod job an ApplicationMaster of 512 MB and one 1024 MB
container, so YARN preempts two of research's workers for it (its guarantee is 2048 MB).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from submarine_elastic.cluster import ClusterSpec, LocalCluster, QueueSpec
from submarine_elastic.elastic.client import JobClient
from submarine_elastic.yarn import Component, Resource, RestartPolicy, Service, ServiceState, YarnServiceClient
from tests.integration.conftest import PORT_BASE, eventually, submarine
from tests.integration.jobcheck import check_training, finish, start_job

pytestmark = pytest.mark.integration

#: What the prod job may wait for its container, from its submission: the preemption monitor's round (1 s),
#: its wait before kill (3 s), the NodeManagers' heartbeats and two preemptions in a row (measured 0 s here, so
#: far below; the bound leaves room for a loaded machine).
PROD_START_WITHIN_S = 60.0


@pytest.fixture(scope="module")
def queues_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ClusterSpec, LocalCluster]]:
    spec = ClusterSpec(
        nodes=2,
        node_memory_mb=2048,
        node_vcores=4,
        port_base=PORT_BASE + 400,
        queues=(QueueSpec("prod", 50), QueueSpec("research", 50)),
    )
    cluster = LocalCluster(tmp_path_factory.mktemp("queues-cluster"))
    cluster.up(spec, timeout=240)
    try:
        yield spec, cluster
    finally:
        cluster.down()


def prod_job(name: str, seconds: int) -> Service:
    """A fixed-size job: one 1024 MB container that runs ``seconds`` and ends the service."""
    return Service(
        name=name,
        version="1",
        queue="prod",
        components=[
            Component(
                name="main",
                number_of_containers=1,
                launch_command=f"sleep {seconds}",
                resource=Resource(cpus=1, memory="1024"),
                restart_policy=RestartPolicy.NEVER,
            )
        ],
    )


def worker_count(yarn: YarnServiceClient, name: str) -> int | None:
    """The number of worker containers YARN Services keeps for the job (what it asks the RM for)."""
    worker = yarn.status(name).component("worker")
    return None if worker is None else worker.number_of_containers


def test_preempted_workers_leave_gracefully_and_the_job_grows_back(
    queues_cluster: tuple[ClusterSpec, LocalCluster], tmp_path: Path
):
    spec, cluster = queues_cluster
    rm = spec.rm_url
    # `cluster status` reads the hierarchy `up --queues` wrote back from the scheduler.
    assert [(q.path, q.capacity, q.max_capacity) for q in cluster.status().queues] == [
        ("root.prod", 50.0, 100.0),
        ("root.research", 50.0, 100.0),
    ]
    name, prod = "research-elastic", "prod-fixed"
    with YarnServiceClient(rm, poll_interval=0.5) as yarn:
        start_job(rm, name, tmp_path, 3, None, "--queue", "research")
        try:
            with JobClient(name, yarn, locate_timeout=120) as job:
                job.wait_for_size(3, timeout=300)  # the whole cluster: research borrows prod's idle half
                [research] = [q for q in yarn.queues() if q.name == "research"]
                assert (research.capacity, research.max_capacity, research.max_memory_mb) == (50.0, 100.0, 4096)
                assert research.used_capacity == pytest.approx(100.0)
                time.sleep(2)  # train a few steps at full size

                submitted = time.monotonic()
                yarn.create(prod_job(prod, 20), wait=False)
                eventually(lambda: yarn.ready_instances(prod, "main"), "the prod job's container", PROD_START_WITHIN_S)
                prod_started = time.monotonic() - submitted
                shrunk = job.wait_for_size(1, timeout=60)
                # Preempted, not failed: no failure counted, each preempted worker says so, and YARN is not
                # asked for the containers again.
                assert not shrunk.failures and not shrunk.error, shrunk
                preempted = sorted(w.instance for w in shrunk.workers if w.preempted)
                assert len(preempted) == 2, shrunk.workers
                reasons = sorted(e.reason for e in shrunk.timeline if e.reason.startswith("preempted"))
                assert reasons == [f"preempted by YARN: {w}" for w in preempted]
                eventually(
                    lambda: worker_count(yarn, name) == 1,
                    "YARN's worker count lowered, not asked for again",
                    60,
                )
                shown = " ".join(submarine(rm, "job", "show", name).split())
                assert "queue root.research (guaranteed 50%, maximum 100%" in shown

                # The prod job ends; the elastic job grows back on its own.
                eventually(
                    lambda: yarn.status(prod).state in (ServiceState.SUCCEEDED, ServiceState.STOPPED), "prod ends", 120
                )
                ended = time.monotonic()
                grown = job.wait_for_size(3, timeout=180)
                grew_back = time.monotonic() - ended
                assert grown.timeline[-1].reason == "capacity returned after preemption"
                assert not grown.failures
                print(f"prod started {prod_started:.1f} s after submission; research grew back {grew_back:.1f} s "
                      f"after prod ended")  # fmt: skip
            time.sleep(2)
            finish(yarn, name, tmp_path)
        finally:
            yarn.destroy(name, missing_ok=True)
            yarn.destroy(prod, missing_ok=True)
    steps = check_training(tmp_path / "log")
    sizes = [steps[s][0]["size"] for s in sorted(steps)]
    assert max(sizes) == 3 and 1 in sizes and sizes[-1] == 3
