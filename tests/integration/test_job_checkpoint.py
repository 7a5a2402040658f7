"""A job lost whole resumes from its last checkpoint: real pseudo-cluster, real TensorFlow + Horovod.

The example job runs with ``--checkpoint_path``, checkpointing every few commits. Once a checkpoint exists
and the job trained on past it, every process of every container of the job (the driver and both workers)
is killed at once. YARN relaunches them all; the new driver incarnation finds none of the previous ring's
workers to adopt and forms a new ring, whose rank 0 reads the newest checkpoint. The job goes on from the
checkpoint's step (not from step 0), trains the steps between the checkpoint and the loss again, and finishes
with every step once (each step's last attempt), every sample once per epoch and the same weights on every
rank. The redone steps see the same data and give the same loss as the first time: the weights, the
optimizer's slots and the data cursor came back with the checkpoint. The measured figures are printed
(``pytest -s``) and written to ``whole_job_loss.json`` beside the test's files.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from submarine_elastic.cluster import ClusterSpec
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.submit.client import JobClient
from submarine_elastic.yarn import YarnServiceClient
from tests.integration.conftest import container_processes, eventually, submarine
from tests.integration.jobcheck import check_training, finish, start_job, step_times, steps_across_a_loss
from tf_hooks.elastic.checkpoint import checkpoints_in, read_checkpoint

pytestmark = pytest.mark.integration

#: Checkpoint every this many commits (the example commits every 4 steps and at each epoch's end).
EVERY = 5
#: The example's ``--commit-every`` (the job runs with its default).
COMMIT_EVERY = 4
#: Steps the job trains past its newest checkpoint before it is lost.
PAST_CHECKPOINT = 4


def _job_processes(yarn: YarnServiceClient, name: str) -> dict[str, list[psutil.Process]]:
    """Every process of every container of the job's components, by container id."""
    found = {}
    for component in yarn.status(name).components:
        for container in component.containers:
            procs = []
            for pid in container_processes(container.id):
                try:
                    procs.append(psutil.Process(pid))
                except psutil.NoSuchProcess:
                    continue
            found[container.id] = procs
    return found


def _signal(procs: list[psutil.Process], sig: signal.Signals) -> None:
    for proc in procs:
        try:
            os.kill(proc.pid, sig)
        except ProcessLookupError:
            continue


def _newest_checkpoint_step(ckpt: Path) -> tuple[int, int] | None:
    """The newest checkpoint's commit count and the step the job trains next from it; None while none exists."""
    found = checkpoints_in(ckpt)
    if not found:
        return None
    checkpoint = read_checkpoint(found[-1][1])
    return checkpoint.commits, checkpoint.attrs["step"]


def test_a_job_lost_whole_resumes_from_its_last_checkpoint(
    yarn: YarnServiceClient, cluster_spec: ClusterSpec, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    name = "ckpt-whole-loss"
    log_dir, ckpt = tmp_path / "log", tmp_path / "ckpt"
    flags = ("--checkpoint_path", str(ckpt), "--checkpoint_every", str(EVERY))
    start_job(cluster_spec.rm_url, name, tmp_path, 2, None, *flags)
    try:
        with JobClient(name, yarn, locate_timeout=120) as job:
            job.wait_for_size(2, timeout=240)

            def trained_past_a_checkpoint() -> bool:
                newest = _newest_checkpoint_step(ckpt)
                steps = step_times(log_dir)
                # In the second epoch or later: the run after the loss ends an epoch the first run began.
                last = steps[-1] if steps else None
                return (
                    newest is not None
                    and last is not None
                    and last.epoch >= 1
                    and last.number >= newest[1] + PAST_CHECKPOINT - 1
                )

            # Lose the whole job at once: every process of the driver's and the workers' containers. They are
            # stopped first, so that what the loss leaves (the newest checkpoint, the last committed step) is
            # read while nothing moves; should a checkpoint have landed on the last commit meanwhile (no step
            # past it to redo), they go on and the loss waits for the next interval.
            victims = _job_processes(yarn, name)
            assert len(victims) == 3 and all(victims.values()), f"expected a driver and 2 workers: {victims}"
            everyone = [p for procs in victims.values() for p in procs]
            for _attempt in range(3):
                eventually(
                    trained_past_a_checkpoint,
                    f"{PAST_CHECKPOINT} steps committed past a checkpoint in epoch 1",
                    120,
                    0.1,
                )
                _signal(everyone, signal.SIGSTOP)
                if trained_past_a_checkpoint():
                    break
                _signal(everyone, signal.SIGCONT)
            else:
                pytest.fail(f"no moment with {PAST_CHECKPOINT} steps committed past the newest checkpoint")
            killed_at = time.time()
            _signal(everyone, signal.SIGKILL)
            _gone, alive = psutil.wait_procs(everyone, timeout=10)
            assert not alive, f"processes of the job outlived SIGKILL: {alive}"
            dead_at = time.time()
            newest = _newest_checkpoint_step(ckpt)
            assert newest is not None
            ckpt_commit, ckpt_step = newest

            # YARN relaunches every container; the job trains again.
            eventually(lambda: [s for s in step_times(log_dir) if s.time > dead_at], "a step after the loss", 150, 0.2)

            def relaunched_ring() -> pb.JobStatus | None:
                status = job.status()
                return status if len(status.incarnations) == 2 and status.world_size == 2 else None

            status = eventually(relaunched_ring, "the relaunched driver to train a ring of 2", 60, 0.5)
            assert status is not None
            # None of the previous ring's workers survived: the new incarnation adopted none and formed a new ring.
            assert status.incarnations[1].adopted_workers == 0
            driver_back_s = status.incarnations[1].started - killed_at
            shown = submarine(cluster_spec.rm_url, "job", "show", name)
            assert "incarnation 2" in shown, shown
            eventually(
                lambda: [s for s in step_times(log_dir) if s.time > dead_at and s.size == 2],
                "a step by a ring of 2 after the loss",
                60,
                0.2,
            )
            # It checkpoints again, counting commits on from the checkpoint it resumed from.
            eventually(
                lambda: (n := _newest_checkpoint_step(ckpt)) is not None and n[0] > ckpt_commit,
                "a checkpoint written after the resume",
                60,
                0.2,
            )
        finish(yarn, name, tmp_path)
    finally:
        yarn.destroy(name, missing_ok=True)

    before, after = steps_across_a_loss(log_dir, dead_at)
    last_before = max(before)
    first_after = min(after)
    # It went on from the checkpoint, not from scratch, and redid the steps committed after it.
    assert first_after == ckpt_step, f"resumed at step {first_after}, the newest checkpoint is of step {ckpt_step}"
    assert 0 < ckpt_step <= last_before - PAST_CHECKPOINT + 1
    redone = list(range(first_after, last_before + 1))
    # Fewer than EVERY commits were lost, or 2 x EVERY when the write of the one due last was still running.
    assert len(redone) <= 2 * EVERY * COMMIT_EVERY, f"{len(redone)} steps redone"
    # A redone step saw the same data as the first time and, from the checkpoint's weights and optimizer slots,
    # the same loss (up to float rounding in a ring of another split).
    for step in redone:
        first, again = before[step][0], after[step][0]
        assert (again["epoch"], again["batch"]) == (first["epoch"], first["batch"]), f"step {step}: other data"
        np.testing.assert_allclose(again["loss"], first["loss"], rtol=1e-4, err_msg=f"step {step}")
    steps = check_training(log_dir, lost_at=dead_at)

    first_step_at = min(r["time"] for r in after[first_after])
    figures = {
        "checkpoint_every_commits": EVERY,
        "checkpoint_commit": ckpt_commit,
        "checkpoint_step": ckpt_step,
        "last_step_before_loss": last_before,
        "steps_redone": len(redone),
        "loss_to_driver_relaunched_s": round(driver_back_s, 2),
        "loss_to_first_step_after_resume_s": round(first_step_at - killed_at, 2),
        "steps_total": len(steps),
    }
    path = tmp_path / "whole_job_loss.json"
    path.write_text(json.dumps(figures, indent=2) + "\n")
    with capsys.disabled():
        print(f"\n    whole-job loss: {path}\n    {json.dumps(figures)}")


def _training_processes(yarn: YarnServiceClient, name: str) -> list[psutil.Process]:
    """The training processes of the job's worker containers (not their agents)."""
    found = []
    for procs in _job_processes(yarn, name).values():
        for proc in procs:
            try:
                if "train_elastic.py" in " ".join(proc.cmdline()):
                    found.append(proc)
            except psutil.NoSuchProcess:
                continue
    return found


def test_a_ring_whose_every_worker_is_killed_resumes_from_the_checkpoint_under_the_next_driver(
    yarn: YarnServiceClient, cluster_spec: ClusterSpec, tmp_path: Path
):
    """Seen in a chaos run: a job of one worker lost it (kill -9 of its training process, its driver running on):
    with no worker left holding the committed state, Horovod stopped the ring and the job ended FAILED, though it
    wrote checkpoints. The driver now exits for YARN to relaunch it; the next incarnation finds no worker of the
    ring and forms a new one from the newest checkpoint, and the job finishes with every step once."""
    name = "ckpt-ring-loss"
    log_dir, ckpt = tmp_path / "log", tmp_path / "ckpt"
    start_job(cluster_spec.rm_url, name, tmp_path, 2, None, "--checkpoint_path", str(ckpt), "--checkpoint_every", "2")
    try:
        with JobClient(name, yarn, locate_timeout=120) as job:
            job.wait_for_size(2, timeout=240)
            eventually(
                lambda: _newest_checkpoint_step(ckpt) is not None and any(s.epoch >= 1 for s in step_times(log_dir)),
                "a checkpoint, in the second epoch",
                120,
                0.2,
            )
            victims = _training_processes(yarn, name)
            assert len(victims) == 2, f"expected 2 training processes: {victims}"
            _signal(victims, signal.SIGKILL)
            psutil.wait_procs(victims, timeout=10)
            dead_at = time.time()
            newest = _newest_checkpoint_step(ckpt)
            assert newest is not None

            def relaunched_ring() -> pb.JobStatus | None:
                status = job.status()
                return status if len(status.incarnations) == 2 and status.world_size == 2 else None

            status = eventually(relaunched_ring, "the next driver to train a ring of 2", 180, 0.5)
            assert status is not None and status.incarnations[1].adopted_workers == 0
        finish(yarn, name, tmp_path)
    finally:
        yarn.destroy(name, missing_ok=True)
    _before, after = steps_across_a_loss(log_dir, dead_at)
    assert min(after) == newest[1], f"resumed at step {min(after)}, the newest checkpoint is of step {newest[1]}"
    check_training(log_dir, lost_at=dead_at)
