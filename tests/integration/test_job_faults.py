"""Infrastructure faults injected into a training elastic TensorFlow + Horovod job on the session's cluster.

Each test runs one scenario of :mod:`tests.integration.faults` (a NodeManager killed under the workers, a
NodeManager killed and left dead until the ResourceManager declares it LOST, the ResourceManager killed, the
ResourceManager frozen during a flex): the job trains through it, ends at full size
with YARN's worker containers exactly the ring's members, finishes with every committed step once, every sample
once per epoch and the same weights on every rank, and leaves the cluster healthy for the next test. Each
writes what the fault cost (recovery time, steps redone) to ``recovery.json`` in its temporary directory and
prints it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from submarine_elastic.cluster import LocalCluster
from tests.integration.faults import SCENARIOS, recorded, run_fault

pytestmark = pytest.mark.integration


def test_a_node_manager_killed_under_the_workers_costs_the_job_nothing(
    yarn_cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    report = run_fault(SCENARIOS["nm_kill"], yarn_cluster, tmp_path)
    recorded(report, tmp_path, capsys)
    assert report.notes["workers_on_node"], "the killed NodeManager held no worker"
    # Every worker is back in the ring: in the container it had, or in one YARN relaunched that rejoined.
    assert sorted(report.containers_kept + report.containers_replaced) == ["worker-0", "worker-1"]
    assert report.full_size == 2


def test_a_killed_resource_manager_restarts_under_the_job_and_a_flex_works_after(
    yarn_cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    report = run_fault(SCENARIOS["rm_kill"], yarn_cluster, tmp_path)
    recorded(report, tmp_path, capsys)
    # Work-preserving restart: the workers kept their containers.
    assert report.containers_kept == ["worker-0", "worker-1"]
    assert report.steps_redone == 0
    assert "flex_after_recovery_s" in report.timings_s


def test_a_flex_while_the_resource_manager_is_frozen_shrinks_the_ring_and_yarn_catches_up(
    yarn_cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    report = run_fault(SCENARIOS["rm_freeze"], yarn_cluster, tmp_path)
    recorded(report, tmp_path, capsys)
    assert report.full_size == 1 and len(report.containers_kept) == 1 and not report.containers_replaced
    assert report.steps_redone == 0
    # The ring shrank while the RM was frozen; YARN agreed only after it ran again.
    assert report.timings_s["ring_shrunk_s"] < report.timings_s["rm_resumed_s"] <= report.yarn_agrees_s


def test_a_node_manager_that_stays_dead_is_declared_lost_and_its_worker_relaunched_elsewhere_rejoins(
    yarn_cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    report = run_fault(SCENARIOS["nm_lost"], yarn_cluster, tmp_path)
    recorded(report, tmp_path, capsys)
    # The worker flexed onto the node to lose runs in a new container on the other node; the others kept theirs.
    assert report.notes["workers_on_node"] == ["worker-2"]
    assert sorted(report.notes["relaunched"]) == ["worker-2"]
    assert report.containers_kept == ["worker-0", "worker-1"] and report.full_size == 3
    # Declared LOST once silent for the bound (counted from its last heartbeat, up to one before the kill), not
    # before; the driver said why it stopped the orphan.
    assert report.notes["expiry_bound_s"] - 1 <= report.notes["lost_earliest_s"] <= report.timings_s["nm_lost_s"]
    assert "YARN counts it" in report.notes["failure_worker-2"]
    # Every NodeManager offers its whole size again (the scenario placed containers by sizing nodes to 0).
    size = yarn_cluster.spec().node_memory_mb
    assert [n.used_memory_mb + n.available_memory_mb for n in yarn_cluster.status().nodes] == [size, size]
