"""A job outlives its driver and its hung workers: real pseudo-cluster, real TensorFlow + Horovod.

- kill -9 the driver mid-training: YARN relaunches it, the workers keep training meanwhile, their agents
  re-attach and the new incarnation adopts them; their ring re-forms around its rendezvous at a commit,
  `job show` lists both incarnations, and a later flex still re-forms the ring (Horovod's notification of the
  new ring reached the new driver);
- SIGSTOP a worker's training process for longer than the hung bound: its agent kills it, the ring goes
  on without it within the bound, YARN relaunches it and it rejoins; `job show` says it hung.

Each ends with the job finishing, every committed step there exactly once, exactly-once data per epoch,
identical weights on every rank, and YARN's worker container count equal to the ring size. The measured
recovery times are printed (``pytest -s``) and written beside the test's files.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from submarine_elastic.cluster import ClusterSpec
from submarine_elastic.elastic.client import JobClient
from submarine_elastic.yarn import YarnServiceClient
from tests.integration.conftest import committed_steps, container_processes, eventually, submarine
from tests.integration.jobcheck import check_training, finish, start_job, training_pids

pytestmark = pytest.mark.integration

#: The hung bound the SIGSTOP test runs with (the default is 10 s).
HUNG_AFTER_S = 5


def _driver_pids(yarn: YarnServiceClient, name: str) -> list[int]:
    driver = yarn.status(name).component("driver")
    assert driver is not None and driver.containers, "the job has no driver container"
    pids = []
    for pid in container_processes(driver.containers[0].id):
        try:
            cmdline = psutil.Process(pid).cmdline()
        except psutil.Error:
            continue
        if cmdline[1:3] == ["-m", "submarine_elastic.elastic.driver"]:  # python itself, not the shell that runs it
            pids.append(pid)
    return pids


def _steps_after(log_dir: Path, moment: float) -> list[dict]:
    return sorted(
        (r for rs in committed_steps(log_dir).values() for r in rs if r["time"] > moment), key=lambda r: r["time"]
    )


def _record(tmp_path: Path, name: str, figures: dict[str, float]) -> None:
    print(f"\n{name}: " + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()))
    (tmp_path / f"{name}.json").write_text(json.dumps(figures))


def _yarn_matches_ring(yarn: YarnServiceClient, job: JobClient, name: str) -> None:
    eventually(
        lambda: len(yarn.ready_instances(name, "worker")) == job.status().world_size,
        "YARN's worker containers to match the ring size",
        60,
    )


def test_a_killed_driver_is_relaunched_and_adopts_the_training_workers(
    yarn: YarnServiceClient, cluster_spec: ClusterSpec, tmp_path: Path
):
    name = "recover-driver"
    log_dir = tmp_path / "log"
    start_job(cluster_spec.rm_url, name, tmp_path)
    try:
        with JobClient(name, yarn, locate_timeout=120) as job:
            job.wait_for_size(2, timeout=240)
            time.sleep(3)
            (victim,) = _driver_pids(yarn, name)
            killed_at = time.time()
            os.kill(victim, signal.SIGKILL)
            # The workers keep training while no driver runs.
            eventually(lambda: _steps_after(log_dir, killed_at + 0.5), "a step committed without a driver", 30, 0.2)
            # YARN relaunches the driver; it adopts both workers and their ring re-forms around it.
            status = eventually(
                lambda: (
                    (s := job.status()).incarnations
                    and len(s.incarnations) == 2
                    and s.incarnations[1].recovered_after > 0
                    and s
                ),
                "the relaunched driver to adopt the ring",
                120,
                0.5,
            )
            assert status.incarnations[1].adopted_workers == 2
            assert status.world_size == 2 and sorted(w.rank for w in status.workers if w.rank >= 0) == [0, 1]
            adopted_at = status.incarnations[1].started + status.incarnations[1].recovered_after
            shown = submarine(cluster_spec.rm_url, "job", "show", name)
            assert "incarnation 2" in shown, shown
            # A later resize still re-forms the ring: the new driver reaches the ring's rank 0.
            out = submarine(cluster_spec.rm_url, "job", "flex", name, "--workers", "3", "--timeout", "240")
            assert "ring has 3 workers" in out
            _yarn_matches_ring(yarn, job, name)
            time.sleep(2)
        finish(yarn, name, tmp_path)
    finally:
        yarn.destroy(name, missing_ok=True)
    steps = check_training(log_dir)
    after = _steps_after(log_dir, killed_at)
    # The driver's loss cost no worker: from the kill on, the ring trained at 2 and then, flexed, at 3.
    assert {r["size"] for r in after} == {2, 3} and max(steps) in {r["step"] for r in after if r["size"] == 3}
    _record(
        tmp_path,
        name,
        {
            "driver_relaunched_and_ring_adopted_s": adopted_at - killed_at,
            "steps_while_driver_down": len({r["step"] for r in after if r["time"] < adopted_at}),
        },
    )


def test_a_stopped_worker_is_evicted_within_the_hung_bound_and_replaced(
    yarn: YarnServiceClient, cluster_spec: ClusterSpec, tmp_path: Path
):
    name = "recover-hung"
    log_dir = tmp_path / "log"
    start_job(cluster_spec.rm_url, name, tmp_path, 2, {"SUBMARINE_HUNG_AFTER_S": str(HUNG_AFTER_S)})
    try:
        with JobClient(name, yarn, locate_timeout=120) as job:
            job.wait_for_size(2, timeout=240)
            time.sleep(3)
            before = {w.instance: w.container_id for w in job.status().workers}
            (victim,) = training_pids(before["worker-1"])
            stopped_at = time.time()
            os.kill(victim, signal.SIGSTOP)
            try:
                eventually(
                    lambda: not psutil.pid_exists(victim) or psutil.Process(victim).status() == "zombie",
                    "the agent to kill the hung process",
                    HUNG_AFTER_S + 10,
                    0.2,
                )
                killed_at = time.time()
                eventually(lambda: job.status().world_size == 1, "the ring to re-form without it", 30, 0.2)
                alone_at = time.time()
            finally:
                if psutil.pid_exists(victim):
                    os.kill(victim, signal.SIGCONT)
            failures = job.status().failures
            assert any(f.instance == "worker-1" and "hung" in f.reason for f in failures), failures
            # YARN relaunches it in its container and it rejoins.
            job.wait_for_size(2, timeout=240)
            full_at = time.time()
            _yarn_matches_ring(yarn, job, name)
            time.sleep(2)
        finish(yarn, name, tmp_path)
    finally:
        yarn.destroy(name, missing_ok=True)
    steps = check_training(log_dir)
    assert 1 in {steps[s][0]["size"] for s in steps}, "the ring never ran without the hung worker"
    assert killed_at - stopped_at < HUNG_AFTER_S + 3
    _record(
        tmp_path,
        name,
        {
            "stop_to_kill_s": killed_at - stopped_at,
            "stop_to_ring_without_it_s": alone_at - stopped_at,
            "stop_to_full_size_s": full_at - stopped_at,
        },
    )
