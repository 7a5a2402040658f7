"""User code as brought: Horovod elastic scripts written for ``horovodrun`` (their own ``hvd.init()``, no
call into this project) run under ``submarine job run --elastic`` on the real pseudo-cluster.

What a user would check: every step trained in a ring of the size the job was flexed to, with every
member of that ring taking part (never a worker alone at world size 1); all ranks end with the same
weights; workers removed on scale-in exit cleanly; rank 0's own duties (the script's checkpoint
callback) keep happening after resizes; and a script that cannot train correctly fails the job at
once, with ``job show`` saying why.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.submit.client import JobClient
from submarine_elastic.submit.store import load_outcome
from submarine_elastic.yarn import ServiceState, YarnServiceClient
from tests.integration.conftest import committed_steps, eventually, run_job, wait_finished
from tests.integration.jobcheck import wait_for_steps_at

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = {
    "keras": "examples/horovod/keras_elastic.py --step-sleep 0.05 --checkpoint-dir {work}/ckpt",
    "tape": "examples/horovod/tape_elastic.py --batches 1000000 --step-sleep 0.03",
}


def run_plain(rm_url: str, name: str, command: str, *, workers: int = 2, legacy_keras: bool = True) -> None:
    run_job(rm_url, name, command, workers=workers, env={"TF_USE_LEGACY_KERAS": "1"} if legacy_keras else None)


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_a_plain_horovod_script_trains_in_the_ring_through_2_3_1_2(
    yarn: YarnServiceClient, tmp_path: Path, script: str
) -> None:
    name = f"plain-{script}"
    log_dir = tmp_path / "log"
    command = (
        f"{sys.executable} {REPO}/{SCRIPTS[script].format(work=tmp_path)} "
        f"--until-file {tmp_path}/stop --log-dir {log_dir}"
    )
    run_plain(yarn.rm_url, name, command)
    try:
        with JobClient(name, yarn) as client:
            client.wait_for_size(2, timeout=180)
            checkpoints_before = len(list((tmp_path / "ckpt").glob("*.h5")))
            for size in (3, 1, 2):
                client.set_target(pb.Target(workers=size, reason="test"))
                client.wait_for_size(size, timeout=120)
                wait_for_steps_at(log_dir, size, count=10)  # train at this size before the next resize
            status = client.status()
        (tmp_path / "stop").touch()
        wait_finished(yarn, name, timeout=180)
    finally:
        (tmp_path / "stop").touch()

    # Scale-in removed workers cleanly: exits with status 0, no failure recorded, job FINISHED.
    assert not status.failures, status.failures
    exited = [w for w in status.workers if w.state == pb.WORKER_EXITED]
    assert exited and all(w.HasField("exit_code") and w.exit_code == 0 for w in exited), exited
    outcome = load_outcome(name)
    assert outcome is not None and outcome.phase == "finished" and not outcome.failures, outcome

    steps = committed_steps(log_dir)
    assert len(steps) > 40
    sizes_in_order = []
    for step in sorted(steps):
        records = steps[step]
        size = records[0]["size"]
        # Every record of a step agrees on the ring size, and every rank of that ring took part.
        assert all(r["size"] == size for r in records), f"step {step}: {records}"
        assert sorted(r["rank"] for r in records) == list(range(size)), f"step {step}: {records}"
        if not sizes_in_order or sizes_in_order[-1] != size:
            sizes_in_order.append(size)
    assert sizes_in_order == [2, 3, 1, 2]

    finals = [np.load(p) for p in sorted(log_dir.glob("weights-rank*.npz"))]
    assert len(finals) == 2
    for key in finals[0].files:
        np.testing.assert_array_equal(finals[0][key], finals[1][key])
    if script == "keras":
        # Rank 0 stayed rank 0 (scale-in removes the highest ranks), so its checkpoint callback kept writing.
        assert len(list((tmp_path / "ckpt").glob("*.h5"))) > checkpoints_before


def test_scripts_that_cannot_train_correctly_fail_at_once_and_say_why(yarn: YarnServiceClient, tmp_path: Path) -> None:
    """Keras 3 with Horovod's Keras helpers, and a script that never calls hvd.init(), both submitted at once."""
    alone = tmp_path / "alone.py"
    alone.write_text("import time\nprint('training alone')\ntime.sleep(2)\n")
    run_plain(
        yarn.rm_url, "plain-keras3", f"{sys.executable} {REPO}/examples/horovod/keras_elastic.py", legacy_keras=False
    )
    run_plain(yarn.rm_url, "plain-alone", f"{sys.executable} {alone}", workers=1)
    ended = (ServiceState.STOPPED, ServiceState.FAILED, ServiceState.SUCCEEDED)
    for name in ("plain-keras3", "plain-alone"):
        eventually(lambda name=name: yarn.status(name).state in ended, f"{name} to end", 150, interval=1)

    keras3 = CliRunner().invoke(cli, ["job", "show", "plain-keras3"], env={"SUBMARINE_RM_URL": yarn.rm_url})
    assert keras3.exit_code == 0, keras3.output
    text = " ".join(keras3.output.split())
    assert "ended: FAILED" in text
    assert "KerasVersionError" in text and "DistributedOptimizer" in text and "TF_USE_LEGACY_KERAS=1" in text
    assert "keras_elastic.py" in text  # the traceback's last lines name the script's line

    lone = CliRunner().invoke(cli, ["job", "show", "plain-alone"], env={"SUBMARINE_RM_URL": yarn.rm_url})
    assert lone.exit_code == 0, lone.output
    text = " ".join(lone.output.split())
    assert "ended: FAILED" in text and "never called hvd.init()" in text
