"""A job carries its code and its Python: ``job run`` snapshots the directory it runs from onto the cluster's
HDFS and YARN localizes the snapshot into every container, so a job whose source directory is deleted right
after submission trains, grows onto new workers that run the same code, and writes where its flags say; its
driver, agents and training processes run the interpreter of the packed environment it was given."""

from __future__ import annotations

import io
import shutil
import sys
import sysconfig
import tarfile
from pathlib import Path

import psutil
import pytest

from submarine_elastic.submit.client import JobClient
from submarine_elastic.yarn import YarnServiceClient
from tests.integration.conftest import container_processes, run_job, submarine
from tests.integration.hosts import HostsCluster
from tests.integration.jobcheck import REPO, SAMPLES, check_training, finish, training_pids, wait_for_steps_at

pytestmark = pytest.mark.integration

JOB = "from-snapshot"


def tiny_env(path: Path) -> Path:
    """A packed virtualenv of a few hundred bytes (as venv-pack writes one: ``bin/python`` a link to the base
    interpreter, no packages of its own), whose ``.pth`` adds this environment's packages: what it tests is how
    the job reaches its interpreter, not the size of TensorFlow (``benchmarks/bench_jobcode.py`` measures that)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    base = Path(sys.base_prefix) / "bin" / version
    site_line = f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n"
    files = {
        "pyvenv.cfg": f"home = {base.parent}\ninclude-system-site-packages = false\n",
        f"lib/{version}/site-packages/submitter.pth": site_line,
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
        link = tarfile.TarInfo("bin/python")
        link.type, link.linkname = tarfile.SYMTYPE, str(base)
        tar.addfile(link)
    return path


def cmdlines(container_id: str) -> list[list[str]]:
    return [psutil.Process(pid).cmdline() for pid in container_processes(container_id)]


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
        f"python train_elastic.py --samples {SAMPLES} --epochs 100 --step-sleep 0.03 "
        f"--until-file {work}/stop --log-dir {work}/log"
    )
    env = tiny_env(tmp_path / "env.tar.gz")
    flags = ("--checkpoint_path", str(work / "ckpt"), "--checkpoint_every", "5", "--python_env", str(env))
    out = " ".join(run_job(rm, JOB, command, workers=1, flags=flags).split())
    monkeypatch.chdir(tmp_path)
    shutil.rmtree(source)  # the job must not need it, nor any later worker
    assert f"code: snapshot {hosts_cluster.spec.default_fs}/submarine-jobs/" in out, out

    with YarnServiceClient(rm, poll_interval=0.5) as yarn:
        try:
            with JobClient(JOB, yarn, locate_timeout=120) as job:
                job.wait_for_size(1, timeout=180)
            assert "ring has 3 workers" in submarine(rm, "job", "flex", JOB, "--workers", "3", "--timeout", "180")
            shown = " ".join(submarine(rm, "job", "show", JOB).split())
            assert "code: snapshot hdfs://" in shown and "MiB packed" in shown, shown
            assert "python: packed environment hdfs://" in shown, shown
            (driver,) = yarn.ready_instances(JOB, "driver")
            assert ["python-env/bin/python", "-m", "submarine_elastic.elastic.driver"] in cmdlines(driver.id)
            # Every worker, the two added after the source was gone too, trains in its container's copy, unpacked
            # from the one snapshot YARN localized (the file in its NodeManager's cache).
            copies = set()
            for worker in yarn.ready_instances(JOB, "worker"):
                (pid,) = training_pids(worker.id)
                cwd = Path(psutil.Process(pid).cwd())
                assert (cwd / "train_elastic.py").is_file() and cwd.name == "code" and worker.id in cwd.parts, cwd
                localized = (cwd.parent / "code.tar.gz").resolve()
                assert "filecache" in localized.parts, localized
                copies.add(localized.name)
                # The agent runs the environment's interpreter, and so does the command's `python`.
                assert ["python-env/bin/python", "-m", "submarine_elastic.elastic.agent"] in cmdlines(worker.id)
                path = psutil.Process(pid).environ()["PATH"].split(":")
                assert path[0].endswith(f"/{worker.id}/python-env/bin"), path
            assert len(copies) == 1 and copies.pop().startswith("code-"), copies
            # The ring of 3 commits a step before the job is told to end (it may otherwise end its epoch first).
            wait_for_steps_at(work / "log", 3, 1)
            finish(yarn, JOB, work, timeout=120)
        finally:
            yarn.destroy(JOB, missing_ok=True)

    steps = check_training(work / "log")  # identical weights on every rank, every sample once per epoch
    assert {1, 3} <= {records[0]["size"] for records in steps.values()}
    assert any((work / "ckpt").iterdir()), "no checkpoint where --checkpoint_path says"
    assert not source.exists(), "the job wrote into its deleted source directory"
