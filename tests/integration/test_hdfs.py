"""HDFS on the cluster on hosts (the session's ``hosts_cluster``): the NameNode and DataNodes run inside their
hosts, and a job's files are on HDFS, its submitter's alone, its containers started from them, gone after
``job kill``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner

from submarine_elastic import env
from submarine_elastic.cli.main import cli
from submarine_elastic.webhdfs import WebHdfs, WebHdfsError
from tests.integration.conftest import eventually, submarine
from tests.integration.hosts import HostsCluster

pytestmark = pytest.mark.integration

JOB = "hdfs-files"
#: What a job's containers use and its submitting side does not: on HDFS only.
CONTAINERS_ONLY = {"driver.key", "agent.crt", "agent.key", "job-ca.crt"}


def net_namespace(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def test_a_jobs_files_are_on_hdfs_its_users_alone_and_job_kill_removes_them(
    hosts_cluster: HostsCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    spec, cluster = hosts_cluster.spec, hosts_cluster.cluster
    assert spec.hdfs and spec.webhdfs_url is not None
    daemons = {d.name: d for d in cluster.running_daemons()}
    for name, host in [("nn", hosts_cluster.network.host(0))] + [
        (f"dn-{h.index}", h) for h in hosts_cluster.network.all_hosts
    ]:
        inode = os.stat(f"/run/netns/{host.namespace}").st_ino
        assert net_namespace(daemons[name].pid) == inode, f"{name} is not on {host.name}"

    jobs = tmp_path / "jobs"
    monkeypatch.setenv("SUBMARINE_CLUSTER_DIR", str(cluster.dir))
    monkeypatch.setenv("SUBMARINE_JOBS_DIR", str(jobs))
    submarine(
        spec.rm_url, "job", "run", "--name", JOB, "--num_workers", "1",
        "--worker_resources", "memory-mb=512,vcores=1", "--worker_launch_cmd", "sleep 600",
    )  # fmt: skip
    user = env.settings().user()
    directory = f"/submarine-jobs/{user}/{JOB}"
    try:
        with WebHdfs(spec.webhdfs_url, user) as hdfs:
            status = hdfs.status(directory)
            assert status is not None and (status["owner"], status["permission"]) == (user, "700")
            files = hdfs.list(directory)
            assert CONTAINERS_ONLY | {"job.token", "driver.crt"} <= set(files)
            assert {(f["owner"], f["permission"]) for f in files.values()} == {(user, "600")}
        # Not in the local jobs directory, nor in a directory of the cluster's every NodeManager reads.
        assert not CONTAINERS_ONLY & {p.name for p in jobs.rglob("*")}
        assert not (cluster.dir / "yarn-services").exists()

        # The containers started from them: the agent attached to the driver over mutual TLS, with the token,
        # certificates and keys YARN localized from HDFS.
        eventually(
            lambda: "attached" in submarine(spec.rm_url, "job", "show", JOB), "the worker attached to its driver", 180
        )
        service = requests.get(f"{spec.rm_url}/app/v1/services/{JOB}", params={"user.name": user}, timeout=10).json()
        localized = {f["src_file"] for f in service["configuration"]["files"]}
        assert localized == {f"{spec.default_fs}{directory}/{name}" for name in files}

        with WebHdfs(spec.webhdfs_url, "mallory") as other:
            for read in (lambda: other.read(f"{directory}/job.token"), lambda: other.list(directory)):
                with pytest.raises(WebHdfsError) as refused:
                    read()
                assert refused.value.status_code == 403 and refused.value.exception == "AccessControlException"
    finally:
        result = CliRunner().invoke(cli, ["job", "kill", JOB], env={"SUBMARINE_RM_URL": spec.rm_url})
    assert result.exit_code == 0, result.output
    with WebHdfs(spec.webhdfs_url, user) as hdfs:
        assert hdfs.status(directory) is None
    assert not (jobs / JOB).exists()
