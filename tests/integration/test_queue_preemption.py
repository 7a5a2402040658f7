"""Queues and preemption on a real 2-node pseudo-cluster (``cluster up --queues prod:50,research:50``), with real
TensorFlow and Horovod: an elastic job in research borrows prod's idle half and grows to the whole cluster; a
fixed-size job arrives in prod; YARN preempts research's workers; the elastic job shrinks without a worker
failure (no committed step lost, every sample once per epoch, identical weights); the prod job starts within a
bound; after it ends the elastic job grows back.

The scenario and its sizes: ``tests/integration/queues.py``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from submarine_elastic.cluster import ClusterSpec, LocalCluster
from submarine_elastic.submit.client import JobClient
from submarine_elastic.yarn import YarnServiceClient
from tests.integration.conftest import PORT_BASE, eventually, submarine
from tests.integration.jobcheck import REPO, SAMPLES, check_training, finish
from tests.integration.queues import ended, queues_spec, run_research_job, start_prod, worker_count

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def queues_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ClusterSpec, LocalCluster]]:
    spec = queues_spec(PORT_BASE + 400)
    cluster = LocalCluster(tmp_path_factory.mktemp("queues-cluster"))
    cluster.up(spec, timeout=240)
    try:
        yield spec, cluster
    finally:
        cluster.down()


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
        run_research_job(rm, name, train)
        try:
            with JobClient(name, yarn, locate_timeout=120) as job:
                job.wait_for_size(4, timeout=300)  # the whole cluster: research borrows prod's idle half
                [research] = [q for q in yarn.queues() if q.name == "research"]
                assert (research.capacity, research.max_capacity, research.max_memory_mb) == (50.0, 100.0, 3072)
                assert research.used_capacity == pytest.approx(100.0)
                time.sleep(2)  # train a few steps at full size

                _, prod_started = start_prod(yarn, prod, 20)
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
