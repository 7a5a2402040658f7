"""A job outlives its driver, its hung workers and a preempted one: real pseudo-cluster, real TensorFlow + Horovod.

Each test runs one scenario of :mod:`tests.integration.faults`, which checks what a user sees as it goes:

- kill -9 the driver mid-training (``driver_kill``): the workers keep training, YARN relaunches the driver and
  its second incarnation adopts both of them, their ring re-forming around it at the size it had; `job show`
  says the job is driven by incarnation 2, and a later flex 2 -> 3 still re-forms the ring (Horovod's
  notification of the new ring reached the new driver);
- SIGSTOP the driver for 20 s, past its agents' keepalive (``driver_freeze``): their streams close, the
  workers train on, and once the driver runs again each agent re-attaches and takes its place back: no worker
  counts lost, nothing is relaunched;
- SIGSTOP a worker's training process for longer than the hung bound (``worker_hang``): its agent kills it
  within the bound and 3 s, the ring trains without it, `job show` says it hung, YARN relaunches it and it
  rejoins;
- SIGTERM a worker's agent, as its NodeManager does when YARN preempts the container, in a job at its
  ``--min_workers`` (``worker_preempted_at_min``): the ring cannot shrink, so the worker stays in it until its
  agent stops its process, YARN starts a replacement and the ring re-forms with it from the last commit.

Each ends with the job finishing, every committed step there exactly once, exactly-once data per epoch,
identical weights on every rank, YARN's READY worker containers exactly the ring's members and a healthy
cluster (:func:`~tests.integration.faults.run_fault`). What the fault cost is printed and written to
``recovery.json`` beside the test's files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from submarine_elastic.cluster import LocalCluster
from tests.integration.faults import SCENARIOS, recorded, run_fault
from tests.integration.jobcheck import step_times

pytestmark = pytest.mark.integration


def test_a_killed_driver_is_relaunched_and_adopts_the_training_workers(
    yarn_cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    report = run_fault(SCENARIOS["driver_kill"], yarn_cluster, tmp_path)
    recorded(report, tmp_path, capsys)
    assert report.notes["adopted_workers"] == 2
    assert str(report.notes["job_show"]).startswith("driver: incarnation 2 "), report.notes
    assert "flex_after_recovery_s" in report.timings_s
    # The driver's loss cost no worker: both kept their containers; from the kill on, the ring trained at 2
    # and then, flexed, at 3 to the end.
    assert report.containers_kept == ["worker-0", "worker-1"]
    after = [s for s in step_times(tmp_path / "log") if s.time > report.injected_at]
    assert {s.size for s in after} == {2, 3} and after[-1].size == 3


def test_a_driver_paused_past_its_agents_keepalive_takes_its_workers_back_as_they_were(
    yarn_cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    report = run_fault(SCENARIOS["driver_freeze"], yarn_cluster, tmp_path)
    recorded(report, tmp_path, capsys)
    # Every stream closed while it was stopped; once it ran again each agent re-attached and took its place
    # back: no container replaced, no worker counted lost (freeze_driver checks job show's failures).
    assert report.containers_kept == ["worker-0", "worker-1"] and report.containers_replaced == []


def test_a_stopped_worker_is_evicted_within_the_hung_bound_and_replaced(
    yarn_cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    report = run_fault(SCENARIOS["worker_hang"], yarn_cluster, tmp_path)
    recorded(report, tmp_path, capsys)
    bound = report.notes["hung_bound_s"]
    assert isinstance(bound, float)
    assert report.timings_s["hung_process_killed_s"] < bound + 3
    assert "hung" in str(report.notes["failure"])
    # The ring trained without it, then at full size again with it back.
    assert 1 in {s.size for s in step_times(tmp_path / "log") if s.time > report.injected_at}
    assert report.full_size == 2 and report.timings_s["ring_without_it_s"] < report.recovery_s


def test_a_worker_preempted_in_a_job_at_its_minimum_is_replaced_and_the_ring_re_forms_with_it(
    yarn_cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    report = run_fault(SCENARIOS["worker_preempted_at_min"], yarn_cluster, tmp_path)
    recorded(report, tmp_path, capsys)
    # The ring could not go on without it: training paused, then went on at full size with the other worker and
    # a replacement in a new container, from the last commit (run_fault checks every committed step is there once).
    assert report.full_size == 2 and len(report.notes["replacement"]) == 1  # type: ignore[arg-type]
    assert len(report.containers_kept) == 1 and report.notes["preempted_worker"] not in report.containers_kept
    assert {s.size for s in step_times(tmp_path / "log") if s.time > report.injected_at} == {2}
