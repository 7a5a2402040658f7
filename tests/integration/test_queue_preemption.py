"""Queues and preemption on a real 2-node pseudo-cluster (``cluster up --queues prod:50,research:50``), with real
TensorFlow and Horovod: an elastic job in research borrows prod's idle half and grows to the whole cluster; a
fixed-size job arrives in prod; YARN preempts research's workers; the elastic job shrinks without a worker
failure (no committed step lost, every sample once per epoch, identical weights); the prod job starts within a
bound; after it ends the elastic job grows back.

Sizes, all multiples of 512 MB so that no node is left with a hole too small for a worker: each node offers
1536 MB; the elastic job is an ApplicationMaster, a driver and up to 4 workers of 512 MB each (3072 MB, the
cluster), the prod job an ApplicationMaster and one container of 512 MB (1024 MB, within its guarantee), so
YARN preempts two of research's workers for it and the elastic job goes on with two.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from submarine_elastic.cluster import ClusterSpec, LocalCluster, QueueSpec
from submarine_elastic.elastic.client import JobClient
from submarine_elastic.yarn import (
    Component,
    ContainerStatus,
    Resource,
    RestartPolicy,
    Service,
    ServiceState,
    YarnError,
    YarnServiceClient,
)
from tests.integration.conftest import PORT_BASE, eventually, submarine
from tests.integration.jobcheck import REPO, SAMPLES, check_training, finish

pytestmark = pytest.mark.integration

#: What the prod job may wait for its container, from its submission: the preemption monitor's round (1 s) and
#: its wait before kill (3 s), twice (its ApplicationMaster, then its container), plus the NodeManagers'
#: heartbeats and the AM's start. Measured 16.7 s on the 2-core CI machine under load; the bound leaves room.
PROD_START_WITHIN_S = 60.0


@pytest.fixture(scope="module")
def queues_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ClusterSpec, LocalCluster]]:
    spec = ClusterSpec(
        nodes=2,
        node_memory_mb=1536,
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
    """A fixed-size job: one 512 MB container that runs ``seconds`` and ends the service."""
    return Service(
        name=name,
        version="1",
        queue="prod",
        components=[
            Component(
                name="main",
                number_of_containers=1,
                launch_command=f"sleep {seconds}",
                resource=Resource(cpus=1, memory="512"),
                restart_policy=RestartPolicy.NEVER,
            )
        ],
    )


def ready(yarn: YarnServiceClient, name: str, component: str) -> list[ContainerStatus]:
    """The component's READY containers; [] while the service is not known yet."""
    try:
        return yarn.ready_instances(name, component)
    except YarnError:
        return []


def ended(yarn: YarnServiceClient, name: str) -> bool:
    try:
        return yarn.status(name).state in (ServiceState.SUCCEEDED, ServiceState.STOPPED)
    except YarnError:
        return False


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
    train = (
        f"{sys.executable} {REPO}/examples/train_elastic.py --samples {SAMPLES} --epochs 100 --step-sleep 0.03 "
        f"--until-file {tmp_path}/stop --log-dir {tmp_path}/log"
    )
    with YarnServiceClient(rm, poll_interval=0.5) as yarn:
        submarine(
            rm, "job", "run", "--name", name, "--queue", "research", "--elastic", "--num_workers", "4",
            "--min_workers", "1", "--max_workers", "4", "--worker_resources", "memory-mb=512,vcores=1",
            "--worker_launch_cmd", train,
        )  # fmt: skip
        try:
            with JobClient(name, yarn, locate_timeout=120) as job:
                job.wait_for_size(4, timeout=300)  # the whole cluster: research borrows prod's idle half
                [research] = [q for q in yarn.queues() if q.name == "research"]
                assert (research.capacity, research.max_capacity, research.max_memory_mb) == (50.0, 100.0, 3072)
                assert research.used_capacity == pytest.approx(100.0)
                time.sleep(2)  # train a few steps at full size

                submitted = time.monotonic()
                yarn.create(prod_job(prod, 20), wait=False)
                eventually(lambda: ready(yarn, prod, "main"), "the prod job's container", PROD_START_WITHIN_S)
                prod_started = time.monotonic() - submitted
                shrunk = job.wait_for_size(2, timeout=60)
                # Preempted, not failed: no failure counted, each preempted worker says so, and YARN is not
                # asked for their containers again.
                assert not shrunk.failures and not shrunk.error, shrunk
                preempted = sorted(w.instance for w in shrunk.workers if w.preempted)
                assert len(preempted) == 2, shrunk.workers
                reasons = sorted(e.reason for e in shrunk.timeline if e.reason.startswith("preempted"))
                assert reasons == [f"preempted by YARN: {w}" for w in preempted]
                eventually(lambda: worker_count(yarn, name) == 2, "YARN's worker count lowered", 60)
                shown = " ".join(submarine(rm, "job", "show", name).split())
                assert "queue root.research (guaranteed 50%, maximum 100%" in shown

                # The prod job ends; the elastic job grows back on its own.
                eventually(lambda: ended(yarn, prod), "the prod job's end", 120)
                prod_ended = time.monotonic()
                grown = job.wait_for_size(4, timeout=180)
                grew_back = time.monotonic() - prod_ended
                assert grown.timeline[-1].reason == "capacity returned after preemption"
                assert not grown.failures
                print(f"prod started {prod_started:.1f} s after submission; research grew back to 4 workers "
                      f"{grew_back:.1f} s after prod ended")  # fmt: skip
            time.sleep(2)
            finish(yarn, name, tmp_path)
        finally:
            yarn.destroy(name, missing_ok=True)
            yarn.destroy(prod, missing_ok=True)
    steps = check_training(tmp_path / "log")
    sizes = [steps[s][0]["size"] for s in sorted(steps)]
    assert max(sizes) == 4 and 2 in sizes and sizes[-1] == 4
