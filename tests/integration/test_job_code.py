"""A job carries its code: ``job run`` snapshots the directory it runs from onto the cluster's HDFS and YARN
localizes the snapshot into every container, so a job whose source directory is deleted right after
submission trains, grows onto new workers that run the same code, and writes where its flags say."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import psutil
import pytest

from submarine_elastic.elastic.client import JobClient
from submarine_elastic.yarn import YarnServiceClient
from tests.integration.conftest import run_job, submarine
from tests.integration.hosts import HostsCluster
from tests.integration.jobcheck import REPO, SAMPLES, check_training, finish, training_pids

pytestmark = pytest.mark.integration

JOB = "from-snapshot"


def test_a_job_whose_source_is_deleted_after_job_run_trains_flexes_onto_workers_running_its_snapshot(
    hosts_cluster: HostsCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    rm = hosts_cluster.rm_url
    monkeypatch.setenv("SUBMARINE_CLUSTER_DIR", str(hosts_cluster.cluster.dir))  # the job's files on its HDFS
    monkeypatch.setenv("SUBMARINE_JOBS_DIR", str(tmp_path / "jobs"))
    source, work = tmp_path / "source", tmp_path / "work"
    source.mkdir()
    shutil.copy(REPO / "examples" / "train_elastic.py", source)
    monkeypatch.chdir(source)
    command = (
        f"{sys.executable} train_elastic.py --samples {SAMPLES} --epochs 100 --step-sleep 0.03 "
        f"--until-file {work}/stop --log-dir {work}/log"
    )
    flags = ("--checkpoint_path", str(work / "ckpt"), "--checkpoint_every", "20")
    out = " ".join(run_job(rm, JOB, command, workers=1, flags=flags).split())
    shutil.rmtree(source)  # the job must not need it, nor any later worker
    assert f"code: snapshot {hosts_cluster.spec.default_fs}/submarine-jobs/" in out, out

    with YarnServiceClient(rm, poll_interval=0.5) as yarn:
        try:
            with JobClient(JOB, yarn, locate_timeout=120) as job:
                job.wait_for_size(1, timeout=180)
            assert "ring has 3 workers" in submarine(rm, "job", "flex", JOB, "--workers", "3", "--timeout", "180")
            shown = " ".join(submarine(rm, "job", "show", JOB).split())
            assert "code: snapshot hdfs://" in shown and "MiB packed" in shown, shown
            assert "python: the submitter's interpreter" in shown, shown
            # Every worker, the two added after the source was gone too, trains in a copy YARN localized from the
            # one snapshot (the extracted archive in its NodeManager's cache).
            copies = set()
            for worker in yarn.ready_instances(JOB, "worker"):
                (pid,) = training_pids(worker.id)
                cwd = Path(psutil.Process(pid).cwd())
                assert (cwd / "train_elastic.py").is_file() and "filecache" in cwd.parts, cwd
                copies.add(cwd.name)
            assert len(copies) == 1 and copies.pop().startswith("code-"), copies
            finish(yarn, JOB, work, timeout=120)
        finally:
            yarn.destroy(JOB, missing_ok=True)

    steps = check_training(work / "log")  # identical weights on every rank, every sample once per epoch
    assert {1, 3} <= {records[0]["size"] for records in steps.values()}
    assert any((work / "ckpt").iterdir()), "no checkpoint where --checkpoint_path says"
    assert not source.exists(), "the job wrote into its deleted source directory"
