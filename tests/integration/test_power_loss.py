"""Whole-cluster power loss: every daemon and every container of a pseudo-cluster killed at once, then
``submarine cluster up`` again, as a user does after a reboot. Real daemons, real TensorFlow + Horovod.

The module runs a 2-node cluster of its own (ports ``SUBMARINE_TEST_PORT_BASE`` + 1200) with two jobs training
when the power goes: one with ``--checkpoint_path``, one without. Every process of the cluster (the daemons
recorded in ``cluster.json`` and every process below them: launch scripts, ApplicationMasters, drivers, agents,
training processes) is stopped, then SIGKILLed, together. ``cluster up`` with the same options starts the same
cluster again with its state: the ResourceManager recovers both applications from ZooKeeper, the NodeManagers
report the dead containers lost, each service gets a new ApplicationMaster attempt that relaunches its
components. The checkpointing job resumes from its newest checkpoint: no committed step lost, none applied
twice after the checkpoint, every sample once per epoch, every rank with the same weights at the end; ``job
show`` names the relaunched driver and the ring formed anew. The other job ends, its reason naming what was
lost. The measured figures are printed (``pytest -s``) and written to ``power_loss.json`` beside the test's
files.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import ClusterSpec, LocalCluster
from submarine_elastic.cluster.processes import descendants, named_processes, process_of
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.submit.client import JobClient
from submarine_elastic.yarn import ServiceState, YarnServiceClient
from tests.integration.conftest import PORT_BASE, eventually, own_cluster, submarine
from tests.integration.jobcheck import check_training, finish, start_job, step_times, steps_across_a_loss
from tf_hooks.elastic.checkpoint import checkpoints_in, read_checkpoint

pytestmark = pytest.mark.integration

SPEC = ClusterSpec(nodes=2, node_memory_mb=4096, node_vcores=4, port_base=PORT_BASE + 1200)
#: Checkpoint every this many commits (the example commits every 4 steps and at each epoch's end).
EVERY = 5
COMMIT_EVERY = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with own_cluster(tmp_path_factory, "power-loss-cluster", SPEC) as cluster:
        yield cluster


def _cluster_processes(cluster: LocalCluster) -> list[psutil.Process]:
    """Every process of the cluster: its recorded daemons, the processes naming its directory, and all below."""
    roots = [p for d in cluster.running_daemons() if (p := process_of(d)) is not None]
    me = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    found = descendants(roots + named_processes(cluster.dir), including=True)
    return [p for p in found if p.pid not in me]


def _stop_everything(cluster: LocalCluster) -> list[psutil.Process]:
    """SIGSTOP every process of the cluster, walking it again until no new one appears; returns them."""
    stopped: dict[int, psutil.Process] = {}
    while new := [p for p in _cluster_processes(cluster) if p.pid not in stopped]:
        for proc in new:
            try:
                proc.send_signal(signal.SIGSTOP)
            except psutil.Error:
                continue
            stopped[proc.pid] = proc
    return list(stopped.values())


def _signal(procs: list[psutil.Process], sig: signal.Signals) -> None:
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            continue


def _power_loss(cluster: LocalCluster, ready: Callable[[], bool]) -> None:
    """Once ``ready()``, SIGKILL every process of the cluster at once. They are stopped first, so that what the
    loss leaves (the newest checkpoint, the last committed step) is read while nothing moves; should ``ready()``
    no longer hold then (a checkpoint landed on the last commit), they go on and the loss waits."""
    for _attempt in range(3):
        eventually(ready, "steps committed past a checkpoint in epoch 1", 180, 0.1)
        everything = _stop_everything(cluster)
        if ready():
            _signal(everything, signal.SIGKILL)
            _gone, alive = psutil.wait_procs(everything, timeout=15)
            assert not alive, f"processes of the cluster outlived SIGKILL: {alive}"
            return
        _signal(everything, signal.SIGCONT)
    pytest.fail("no moment with steps committed past the newest checkpoint")


def _newest_checkpoint(ckpt: Path) -> tuple[int, int] | None:
    """The newest checkpoint's commit count and the step the job trains next from it; None while none exists."""
    found = checkpoints_in(ckpt)
    if not found:
        return None
    checkpoint = read_checkpoint(found[-1][1])
    return checkpoint.commits, checkpoint.attrs["step"]


def test_after_a_power_loss_cluster_up_resumes_each_job_from_its_checkpoint(
    cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    rm = SPEC.rm_url
    kept, lost = "pl-ckpt", "pl-nockpt"
    kept_dir, lost_dir = tmp_path / kept, tmp_path / lost
    ckpt = kept_dir / "ckpt"
    start_job(rm, kept, kept_dir, 2, None, "--checkpoint_path", str(ckpt), "--checkpoint_every", str(EVERY))
    start_job(rm, lost, lost_dir, 1)
    try:
        with YarnServiceClient(rm, poll_interval=0.5) as yarn:
            for name, size in ((kept, 2), (lost, 1)):
                with JobClient(name, yarn, locate_timeout=120) as job:
                    job.wait_for_size(size, timeout=240)

        def trained_past_a_checkpoint() -> bool:
            newest, steps = _newest_checkpoint(ckpt), step_times(kept_dir / "log")
            last = steps[-1] if steps else None
            return newest is not None and last is not None and last.epoch >= 1 and last.number > newest[1]

        eventually(lambda: step_times(lost_dir / "log"), "a step of the job without checkpoints", 60, 0.2)
        _power_loss(cluster, trained_past_a_checkpoint)
        dead_at = time.time()
        assert cluster.running_daemons() == []
        newest = _newest_checkpoint(ckpt)
        assert newest is not None
        ckpt_commit, ckpt_step = newest

        # After the reboot: the same `cluster up`, which starts the cluster again with its state.
        args = ["cluster", "up", "--cluster-dir", str(cluster.dir), "--port-base", str(SPEC.port_base)]
        args += ["--nodes", "2", "--node-memory-mb", "4096", "--node-vcores", "4", "--timeout", "240"]
        result = CliRunner().invoke(cli, args, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        up_s = time.time() - dead_at
        assert "died; starting it again" in " ".join(result.output.split()), result.output

        with YarnServiceClient(rm, poll_interval=0.5) as yarn:
            # The RM recovered both applications: neither is unknown to it.
            assert {a.name for a in yarn.list(states=None)} >= {kept, lost}
            eventually(
                lambda: [s for s in step_times(kept_dir / "log") if s.time > dead_at and s.size == 2],
                "a step by a ring of 2 after the power loss",
                240,
                0.5,
            )
            resumed_s = time.time() - dead_at
            with JobClient(kept, yarn, locate_timeout=60) as job:
                status: pb.JobStatus = job.status()
            assert len(status.incarnations) == 2 and status.incarnations[1].adopted_workers == 0, status
            shown = " ".join(submarine(rm, "job", "show", kept).split())
            assert "driver: incarnation 2 " in shown, shown
            resumed = f"a new ring resumes from the newest checkpoint, of commit {ckpt_commit}"
            assert "no worker of its ring outlived the previous driver (a ring of 2; " in shown, shown
            assert resumed in shown, shown

            # The job without checkpoints ends, saying what was lost.
            def ended() -> bool:
                return yarn.status(lost).state in (ServiceState.STOPPED, ServiceState.SUCCEEDED, ServiceState.FAILED)

            eventually(ended, f"job {lost} to end", 120, 1)
            shown_lost = " ".join(submarine(rm, "job", "show", lost).split())
            assert "ended: FAILED" in shown_lost, shown_lost
            assert "the whole job was lost" in shown_lost and "--checkpoint_path" in shown_lost, shown_lost

            finish(yarn, kept, kept_dir)
    finally:
        with YarnServiceClient(rm, poll_interval=0.5) as yarn:
            for name in (kept, lost):
                yarn.destroy(name, missing_ok=True)

    before, after = steps_across_a_loss(kept_dir / "log", dead_at)
    first_after, last_before = min(after), max(before)
    # It went on from the newest checkpoint, not from step 0, and redid only the steps committed after it.
    assert first_after == ckpt_step, f"resumed at step {first_after}, the newest checkpoint is of step {ckpt_step}"
    assert 0 < ckpt_step <= last_before, "no committed step past the checkpoint was lost and redone"
    assert last_before - first_after + 1 <= 2 * EVERY * COMMIT_EVERY
    steps = check_training(kept_dir / "log", lost_at=dead_at)
    figures = {
        "checkpoint_step": ckpt_step,
        "checkpoint_commit": ckpt_commit,
        "last_step_before_loss": last_before,
        "steps_redone": last_before - first_after + 1,
        "loss_to_cluster_up_done_s": round(up_s, 1),
        "loss_to_ring_of_2_again_s": round(resumed_s, 1),
        "steps_total": len(steps),
    }
    path = tmp_path / "power_loss.json"
    path.write_text(json.dumps(figures, indent=2) + "\n")
    with capsys.disabled():
        print(f"\n    power loss: {path}\n    {json.dumps(figures)}")
