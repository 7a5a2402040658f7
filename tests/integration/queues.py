"""The queue-preemption scenario on a real 2-node pseudo-cluster, shared by ``test_queue_preemption.py`` and
``benchmarks/bench_preemption.py``: queues prod:50 and research:50; a research job of :data:`RESEARCH_WORKERS`
workers fills the whole cluster (borrowing prod's idle half); a fixed-size job arrives in prod and YARN's
preemption monitor takes research's containers for it.

Sizes, all multiples of 512 MB so that no node is left with a hole too small for a worker: each node offers
:data:`NODE_MB`; the research job is an ApplicationMaster, a driver and :data:`RESEARCH_WORKERS` workers of
:data:`WORKER_MB` each (3072 MB, the cluster), the prod job an ApplicationMaster and one container of 512 MB
(1024 MB, within its guarantee), so YARN preempts two of research's workers for it.
"""

from __future__ import annotations

import time

from submarine_elastic.cluster import ClusterSpec, QueueSpec
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
from tests.integration.conftest import eventually, submarine

NODE_MB = 1536
WORKER_MB = 512
RESEARCH_WORKERS = 4
#: What the prod job may wait for its container, from its submission: the preemption monitor's round (1 s) and
#: its wait before kill (3 s), twice (its ApplicationMaster, then its container), plus the NodeManagers'
#: heartbeats and the AM's start. Measured 16.7 s on the 2-core CI machine under load; the bound leaves room.
PROD_START_WITHIN_S = 60.0


def queues_spec(port_base: int) -> ClusterSpec:
    """Two nodes of :data:`NODE_MB`, queues prod:50 and research:50 (each may grow to the whole cluster)."""
    return ClusterSpec(
        nodes=2,
        node_memory_mb=NODE_MB,
        node_vcores=4,
        port_base=port_base,
        queues=(QueueSpec("prod", 50), QueueSpec("research", 50)),
    )


def run_research_job(
    rm_url: str, name: str, command: str, *, elastic: bool = True, env: dict[str, str] | None = None
) -> str:
    """``submarine job run --queue research`` of ``command`` with :data:`RESEARCH_WORKERS` workers: elastic
    (1..4) or fixed-size."""
    limits = ["--elastic", "--min_workers", "1", "--max_workers", str(RESEARCH_WORKERS)] if elastic else []
    return submarine(
        rm_url, "job", "run", "--name", name, "--queue", "research", "--num_workers", str(RESEARCH_WORKERS), *limits,
        "--worker_resources", f"memory-mb={WORKER_MB},vcores=1", "--worker_launch_cmd", command,
        *[arg for k, v in (env or {}).items() for arg in ("--env", f"{k}={v}")],
    )  # fmt: skip


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


def start_prod(yarn: YarnServiceClient, name: str, seconds: int) -> tuple[float, float]:
    """Submit :func:`prod_job` and wait (at most :data:`PROD_START_WITHIN_S`) for its container to be READY.
    Returns (its submission, seconds since the epoch; seconds from submission to its container READY)."""
    submitted_at, submitted = time.time(), time.monotonic()
    yarn.create(prod_job(name, seconds), wait=False)
    eventually(lambda: ready(yarn, name, "main"), "the prod job's container", PROD_START_WITHIN_S, interval=0.25)
    return submitted_at, time.monotonic() - submitted


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
