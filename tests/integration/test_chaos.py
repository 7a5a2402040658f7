"""A short seeded chaos run on a pseudo-cluster of its own: three elastic jobs on emulated GPUs under the
controller (goodput+goodput), a fault every ``EVERY_S`` on average for ``MINUTES`` (kill -9 and SIGSTOP of
training processes, agents, drivers, ApplicationMasters, a NodeManager, the ResourceManager, ZooKeeper and the
controller; an operator's flex and kill), and the checker over what was recorded: every fault recovered within
its deadline, every job ended as it should with every committed step once, every sample once per epoch,
identical weights on every rank, and nothing of the run left behind. ``benchmarks/bench_chaos.py`` is the long
run.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from submarine_elastic.chaos import ChaosRun, catalogue
from submarine_elastic.chaos.check import table
from submarine_elastic.cluster import ClusterSpec, LocalCluster
from submarine_elastic.replay import LiveReplay, plan_replay
from tests.integration.conftest import PORT_BASE, own_cluster

pytestmark = pytest.mark.integration

SPEC = ClusterSpec(nodes=2, gpus_per_node=2, node_memory_mb=8192, node_vcores=12, port_base=PORT_BASE + 1500)
#: Three jobs arriving within 10 s, each 1.5 to 2 minutes of training alone at its submitted size, so that
#: every fault finds jobs training.
WORKLOAD = """name,time,application,num_replicas,batch_size
c0,0,cifar10,2,256
n1,1000,ncf,2,512
c2,2000,cifar10,1,256
"""
TIME_SCALE = 0.005 * 8
MINUTES = 2.5
EVERY_S = 15.0
SEED = 7
KINDS = [k.name for k in catalogue(random.Random(0))]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with own_cluster(tmp_path_factory, "chaos-cluster", SPEC) as cluster:
        yield cluster


def test_a_short_chaos_run_ends_with_no_violation(cluster: LocalCluster, tmp_path: Path) -> None:
    workload = tmp_path / "workload.csv"
    workload.write_text(WORKLOAD)
    plan = plan_replay(str(workload), time_scale=TIME_SCALE, nodes=SPEC.nodes, gpus_per_node=SPEC.gpus_per_node)
    replay = LiveReplay(
        plan, "goodput+goodput", rm_url=SPEC.rm_url, out=tmp_path / "run", timeout_s=900, checkpoints=True
    )
    chaos = ChaosRun(replay, cluster, duration_s=MINUTES * 60, every_s=EVERY_S, seed=SEED, kinds=KINDS)
    result = chaos.run()
    print(table(result.faults, result.violations), *result.violations, sep="\n")
    kinds = collections.Counter(f.kind for f in result.faults)
    assert len(result.faults) >= 7 and len(kinds) >= 4, kinds
    assert result.violations == []
