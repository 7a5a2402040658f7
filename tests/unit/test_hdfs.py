"""HDFS of the pseudo-cluster: where its daemons run and listen, the configuration each gets, the WebHDFS
client, and a job's files on HDFS (what the spec localizes, what is written where, what a failure leaves)."""

from __future__ import annotations

import stat
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qs, urlsplit

import click
import pytest
import requests
import responses
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import ClusterSpec, DaemonNotRunningError, LocalCluster, Placement
from submarine_elastic.cluster.api import Daemon
from submarine_elastic.cluster.hdfs import HDFS_FRAMEWORK, HDFS_SERVICES
from submarine_elastic.submit.jobfiles import HdfsJobFiles
from submarine_elastic.submit.jobspec import JobSpecError, build_service, job_secrets
from submarine_elastic.submit.service import submit
from submarine_elastic.submit.store import forget_job
from submarine_elastic.webhdfs import WebHdfs, WebHdfsError
from submarine_elastic.yarn import RMUnreachableError, YarnError
from tests.unit.test_jobspec import RecordingYarn, request

NN = "http://127.0.0.1:21070"
DN = "http://127.0.0.1:21104"
FS = "hdfs://127.0.0.1:21020"


@pytest.fixture(autouse=True)
def jobs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SUBMARINE_JOBS_DIR", str(tmp_path / "jobs"))
    return tmp_path / "jobs"


@pytest.fixture()
def fake_lib(tmp_path: Path) -> Path:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "hadoop-yarn-server-resourcemanager-3.4.2.jar").write_bytes(b"")
    return lib


def site(files: dict[Path, bytes], path: Path) -> dict[str, str]:
    root = ET.fromstring(files[path])
    return {p.findtext("name", ""): p.findtext("value", "") for p in root.iter("property")}


# ------------------------------------------------------------------ the spec


def test_hdfs_is_on_by_default_on_hosts_off_on_loopback_and_its_daemons_start_before_yarn():
    assert ClusterSpec().hdfs is False and ClusterSpec().default_fs == "file:///"
    assert ClusterSpec().webhdfs_url is None
    loopback = ClusterSpec(nodes=2, port_base=21000, hdfs=True)
    assert loopback.default_fs == FS and loopback.webhdfs_url == NN
    assert loopback.daemon_names() == ("zk", "nn", "dn-0", "dn-1", "rm", "nm-0", "nm-1")
    # A DataNode's ports are in its NodeManager's block of ten, so two on one host do not collide.
    assert loopback.datanode_ports(1) == {
        "dfs.datanode.address": 21113,
        "dfs.datanode.http.address": 21114,
        "dfs.datanode.ipc.address": 21115,
    }
    assert loopback.daemon_ports("nn") == {
        21020: "NameNode dfs.namenode.rpc-address",
        21070: "NameNode dfs.namenode.http-address",
    }
    assert len(loopback.all_ports()) == len(set(loopback.all_ports())) == 5 + 1 + 2 + 2 * 3 + 2 * 3

    hosts = ClusterSpec(nodes=3, hosts=3, subnet="10.77.0.0/24", port_base=21000)
    assert hosts.hdfs is True and hosts.default_fs == "hdfs://10.77.0.2:21020"
    assert [hosts.daemon_host(n) for n in ("nn", "dn-0", "dn-1", "dn-2")] == [0, 0, 1, 2]
    assert hosts.datanode_ports(0) == hosts.datanode_ports(2)
    assert ClusterSpec(nodes=3, hosts=3, subnet="10.77.0.0/24", hdfs=False).daemon_names() == (
        "zk", "rm", "nm-0", "nm-1", "nm-2",
    )  # fmt: skip


def test_hdfs_on_a_secure_cluster_is_refused_naming_why():
    with pytest.raises(ValueError, match="HDFS on a secure cluster is not supported"):
        ClusterSpec(secure=True, hdfs=True)
    result = CliRunner().invoke(cli, ["cluster", "up", "--secure", "--hdfs", "--cluster-dir", "/nonexistent/c"])
    assert result.exit_code == 2
    assert "HDFS on a secure cluster is not supported" in " ".join(result.output.split())


def test_each_daemon_of_a_cluster_with_hdfs_is_configured_on_it(tmp_path: Path, fake_lib: Path):
    cluster = LocalCluster(tmp_path / "c", hadoop_lib=fake_lib)
    spec = ClusterSpec(nodes=3, hosts=3, subnet="10.77.0.0/24", port_base=21000)
    tarball = tmp_path / "service-dep.tar.gz"
    conf = cluster.dir / "conf"
    for name in ("rm", "nm-1", "nn", "dn-2"):
        files, _ = cluster.conf.daemon_files(name, spec, tarball, node=int(name[-1]) if name[-1].isdigit() else None)
        core = site(files, conf / name / "core-site.xml")
        yarn = site(files, conf / name / "yarn-site.xml")
        hdfs = site(files, conf / name / "hdfs-site.xml")
        assert core["fs.defaultFS"] == "hdfs://10.77.0.2:21020", name
        assert hdfs["dfs.namenode.rpc-address"] == "10.77.0.2:21020"
        assert hdfs["dfs.namenode.http-address"] == "10.77.0.2:21070"
        # In core-site.xml too, which a daemon loads from its start: a ResourceManager loads hdfs-site.xml only
        # once it uses HDFS, and until then `job run` found no NameNode in its /conf.
        assert core["dfs.namenode.http-address"] == "10.77.0.2:21070", name
        # The AM's jars and the Services API's files are on HDFS, for every NodeManager.
        assert yarn["yarn.service.framework.path"] == f"hdfs://10.77.0.2:21020{HDFS_FRAMEWORK}"
        assert yarn["yarn.service.base.path"] == HDFS_SERVICES
    files, _ = cluster.conf.daemon_files("nn", spec, tarball)
    assert site(files, conf / "nn" / "hdfs-site.xml")["dfs.namenode.name.dir"] == str(cluster.dir / "hdfs" / "name")
    assert conf / "nn" / "webapps" / "hdfs" / "WEB-INF" / "web.xml" in files
    files, _ = cluster.conf.daemon_files("dn-2", spec, tarball)
    dn = site(files, conf / "dn-2" / "hdfs-site.xml")
    # Bound to host 2's address, and named by it: WebHDFS sends clients in the root namespace there.
    assert dn["dfs.datanode.address"] == "10.77.0.4:21103" and dn["dfs.datanode.hostname"] == "10.77.0.4"
    assert dn["dfs.datanode.data.dir"] == str(cluster.dir / "hdfs" / "data-2")
    assert conf / "dn-2" / "webapps" / "datanode" / "WEB-INF" / "web.xml" in files

    without = ClusterSpec(nodes=2, port_base=21000)
    files, _ = cluster.conf.daemon_files("nm-0", without, tarball, node=0)
    assert site(files, conf / "nm-0" / "core-site.xml")["fs.defaultFS"] == "file:///"
    yarn = site(files, conf / "nm-0" / "yarn-site.xml")
    assert yarn["yarn.service.framework.path"] == f"file://{tarball}"
    assert yarn["yarn.service.base.path"] == str(cluster.dir / "yarn-services")


def test_a_datanode_restart_needs_the_namenode(tmp_path: Path, fake_lib: Path):
    cluster = LocalCluster(tmp_path / "c", hadoop_lib=fake_lib)
    cluster.dir.mkdir(parents=True)
    spec = ClusterSpec(nodes=1, port_base=21000, hdfs=True)
    cluster.state.write(spec, [Daemon("nn", 999999, -1, tmp_path / "nn.log")])
    with pytest.raises(DaemonNotRunningError, match="dn-0 needs nn, which is not running"):
        cluster.restart("dn-0")


def test_the_namenode_plan_formats_it_first_and_the_datanode_plan_names_its_container(tmp_path: Path, fake_lib: Path):
    cluster = LocalCluster(tmp_path / "c", hadoop_lib=fake_lib)
    spec = ClusterSpec(nodes=1, port_base=18000, hdfs=True)
    placement = Placement(zk_host="zookeeper", rm_host="resourcemanager", node_host="datanode-1")
    nn = cluster.daemon_plan("namenode", spec, placement)
    assert nn.command[-1] == "org.apache.hadoop.hdfs.server.namenode.NameNode"
    assert nn.format_command[-3:] == ("org.apache.hadoop.hdfs.server.namenode.NameNode", "-format", "-nonInteractive")
    assert nn.formatted == cluster.dir / "hdfs" / "name" / "current" / "VERSION"
    nn_site = site(dict(nn.files), cluster.dir / "conf" / "nn" / "hdfs-site.xml")
    assert nn_site["dfs.namenode.rpc-address"] == "namenode:18020"
    assert nn_site["dfs.namenode.rpc-bind-host"] == "0.0.0.0"
    dn = cluster.daemon_plan("datanode", spec, placement)
    assert dn.command[-1] == "org.apache.hadoop.hdfs.server.datanode.DataNode" and not dn.format_command
    dn_site = site(dict(dn.files), cluster.dir / "conf" / "dn-0" / "hdfs-site.xml")
    assert dn_site["dfs.datanode.hostname"] == "datanode-1" and dn_site["dfs.datanode.address"] == "0.0.0.0:18103"
    with pytest.raises(ValueError, match="a namenode is part of HDFS"):
        cluster.daemon_plan("namenode", ClusterSpec(nodes=1), placement)


# ------------------------------------------------------------------ WebHDFS


@responses.activate
def test_webhdfs_writes_a_file_in_two_steps_with_its_mode_as_its_user():
    responses.put(f"{NN}/webhdfs/v1/d/f", status=307, headers={"Location": f"{DN}/webhdfs/v1/d/f?op=CREATE&x=1"})
    responses.put(f"{DN}/webhdfs/v1/d/f", status=201)
    WebHdfs(NN, "alice").create("/d/f", b"secret", 0o600)
    to_nn, to_dn = responses.calls
    assert parse_qs(urlsplit(to_nn.request.url).query) == {
        "op": ["CREATE"], "user.name": ["alice"], "permission": ["600"], "overwrite": ["true"],
    }  # fmt: skip
    assert not to_nn.request.body, "the bytes go to the DataNode only"
    assert to_dn.request.url == f"{DN}/webhdfs/v1/d/f?op=CREATE&x=1" and to_dn.request.body == b"secret"


@responses.activate
def test_a_datanode_that_does_not_answer_is_excluded_and_the_namenode_asked_again():
    """A DataNode killed a moment ago: the NameNode, which takes minutes to declare it dead, still names it."""
    dead, live = "http://10.0.0.3:21104", "http://10.0.0.4:21104"
    responses.put(
        f"{NN}/webhdfs/v1/d/f", status=307, headers={"Location": f"{live}/webhdfs/v1/d/f?op=CREATE"},
        match=[responses.matchers.query_param_matcher({"excludedatanodes": "10.0.0.3"}, strict_match=False)],
    )  # fmt: skip
    responses.put(f"{NN}/webhdfs/v1/d/f", status=307, headers={"Location": f"{dead}/webhdfs/v1/d/f?op=CREATE"})
    responses.put(f"{dead}/webhdfs/v1/d/f", body=requests.ConnectionError("Connection refused"))
    responses.put(f"{live}/webhdfs/v1/d/f", status=201)
    WebHdfs(NN, "alice").create("/d/f", b"data", 0o600)
    asked = [parse_qs(urlsplit(c.request.url).query).get("excludedatanodes") for c in responses.calls]
    assert asked == [None, None, ["10.0.0.3"], None]  # NN, the dead DataNode, NN without it, the live one
    assert responses.calls[-1].request.body == b"data"
    # A DataNode that refuses (it answered) is HDFS's word: not tried elsewhere.
    responses.replace(responses.PUT, f"{dead}/webhdfs/v1/d/f", status=403, json={"RemoteException": {}})
    before = len(responses.calls)
    with pytest.raises(WebHdfsError, match="HTTP 403"):
        WebHdfs(NN, "alice").create("/d/f", b"data", 0o600)
    assert len(responses.calls) == before + 2


@responses.activate
def test_webhdfs_refusals_carry_hdfss_reason():
    denied = {"RemoteException": {"exception": "AccessControlException", "message": "Permission denied: user=bob"}}
    responses.get(f"{NN}/webhdfs/v1/user/alice/f", status=403, json=denied)
    with pytest.raises(WebHdfsError, match="refused \\(HTTP 403\\): Permission denied: user=bob") as refused:
        WebHdfs(NN, "bob").read("/user/alice/f")
    assert refused.value.status_code == 403 and refused.value.exception == "AccessControlException"
    missing = {"RemoteException": {"exception": "FileNotFoundException", "message": "File does not exist: /x"}}
    responses.get(f"{NN}/webhdfs/v1/x", status=404, json=missing)
    assert WebHdfs(NN, "bob").status("/x") is None
    with pytest.raises(ValueError, match="must be http"):
        WebHdfs("namenode:9870", "bob")
    with pytest.raises(WebHdfsError, match="no answer"):
        WebHdfs("http://127.0.0.1:1", "bob").mkdirs("/d", 0o700)


# ------------------------------------------------------------------ a job's files


class FakeHdfs:
    """WebHdfs in memory, as ``user``: paths -> (mode, bytes or None for a directory); fails a write when told."""

    def __init__(self, user: str = "alice", fail_on: str | None = None) -> None:
        self.user = user
        self.fail_on = fail_on
        self.paths: dict[str, tuple[int, bytes | None]] = {}
        self.owners: dict[str, str] = {}

    def mkdirs(self, path: str, permission: int) -> None:
        self.paths.setdefault(path, (permission, None))
        self.owners.setdefault(path, self.user)

    def status(self, path: str) -> dict[str, Any] | None:
        if path not in self.paths:
            return None
        mode, data = self.paths[path]
        length = {"length": len(data)} if data is not None else {}
        return {"owner": self.owners.get(path, self.user), "permission": f"{mode:o}", **length}

    def set_permission(self, path: str, permission: int) -> None:
        self.paths[path] = (permission, self.paths[path][1])

    def create(self, path: str, data: bytes | IO[bytes], permission: int) -> None:
        if self.fail_on is not None and path.endswith(self.fail_on):
            raise WebHdfsError("WebHDFS CREATE refused (HTTP 403): quota")
        self.paths[path] = (permission, data if isinstance(data, bytes) else data.read())

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        gone = [p for p in self.paths if p == path or p.startswith(path + "/")]
        for p in gone:
            del self.paths[p]
        return bool(gone)

    def under(self, path: str) -> dict[str, tuple[int, bytes | None]]:
        return {p.removeprefix(path + "/"): v for p, v in self.paths.items() if p.startswith(path + "/")}


def job_files(hdfs: FakeHdfs) -> HdfsJobFiles:
    return HdfsJobFiles(hdfs, FS)  # type: ignore[arg-type]


def test_with_hdfs_the_containers_files_are_localized_from_the_jobs_directory_there():
    files = job_files(FakeHdfs())
    req = request(files_uri=files.uri("mnist"))
    assert req.files_uri == "hdfs://127.0.0.1:21020/submarine-jobs/alice/mnist"
    localized = build_service(req).to_dict()["configuration"]["files"]
    assert {f["dest_file"]: f["src_file"] for f in localized} == {
        name: f"hdfs://127.0.0.1:21020/submarine-jobs/alice/mnist/{name}" for name in job_secrets(req)
    }
    for bad in ("file:///tmp/x", "hdfs://nn:8020/a b", "hdfs://nn:8020", "hdfs://nn:8020/$(id)"):
        with pytest.raises(JobSpecError, match="the job's files must be on HDFS"):
            request(files_uri=bad)


def test_submit_puts_the_containers_files_on_hdfs_owner_only_and_keeps_only_the_clients_locally(jobs_dir: Path):
    hdfs = FakeHdfs()
    files = job_files(hdfs)
    req = request(files_uri=files.uri("mnist"))
    yarn = RecordingYarn()
    submit(yarn, req, files=files)  # type: ignore[arg-type]
    on_hdfs = hdfs.under("/submarine-jobs/alice/mnist")
    assert set(on_hdfs) == set(job_secrets(req)) >= {"job.token", "driver.key", "agent.key", "job-ca.crt"}
    assert {mode for mode, _ in on_hdfs.values()} == {0o600}
    assert hdfs.paths["/submarine-jobs/alice/mnist"][0] == hdfs.paths["/submarine-jobs/alice"][0] == 0o700
    assert on_hdfs["job.token"][1] == b"t0ken"
    # What the containers use is not in the local jobs directory; job flex|show still find the driver.
    local = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (jobs_dir / "mnist").iterdir()}
    kept = ("job.token", "driver.crt", "driver-ca.crt", "client.crt", "client.key", "carried.json")
    assert local == {n: 0o600 for n in kept}
    assert yarn.created[0]["configuration"]["files"][0]["src_file"].startswith(f"{FS}/submarine-jobs/alice/")

    forget_job("mnist", files)
    assert hdfs.under("/submarine-jobs/alice/mnist") == {} and not (jobs_dir / "mnist").exists()


@pytest.mark.parametrize("fail", ["rm", "hdfs"])
def test_a_submit_that_fails_halfway_leaves_nothing_on_hdfs_or_locally(fail: str, jobs_dir: Path):
    hdfs = FakeHdfs(fail_on="agent.key" if fail == "hdfs" else None)
    files = job_files(hdfs)
    req = request(files_uri=files.uri("mnist"))
    error: Any = WebHdfsError if fail == "hdfs" else YarnError
    yarn = RecordingYarn(refuse=fail == "rm")
    with pytest.raises(error):
        submit(yarn, req, files=files)  # type: ignore[arg-type]
    assert hdfs.under("/submarine-jobs/alice/mnist") == {} and "/submarine-jobs/alice/mnist" not in hdfs.paths
    assert not (jobs_dir / "mnist").exists() and yarn.created == []


def test_a_directory_of_jobs_another_user_made_first_is_refused_naming_it(jobs_dir: Path):
    hdfs = FakeHdfs()
    hdfs.paths["/submarine-jobs/alice"] = (0o777, None)
    hdfs.owners["/submarine-jobs/alice"] = "mallory"
    files = job_files(hdfs)
    with pytest.raises(WebHdfsError, match="must be alice's alone .* it has owner mallory, mode 777"):
        submit(RecordingYarn(), request(files_uri=files.uri("mnist")), files=files)  # type: ignore[arg-type]
    assert set(hdfs.paths) == {"/submarine-jobs/alice"} and not (jobs_dir / "mnist").exists()


def test_submit_refuses_files_the_spec_does_not_name():
    files = job_files(FakeHdfs())
    with pytest.raises(JobSpecError, match="but its spec names None"):
        submit(RecordingYarn(), request(), files=files)
    with pytest.raises(JobSpecError, match="must match|job name|name"):
        files.path("../etc")


def test_the_controller_removes_an_ended_jobs_files_on_hdfs_and_locally(
    jobs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job that ended (its application gone) leaves no token, key or certificate on HDFS; an HDFS away leaves
    them, said (the controller tries again), but the local files go."""
    from submarine_elastic.controller import backend as controller_backend

    hdfs = FakeHdfs()
    files = job_files(hdfs)
    for name in ("mnist", "other"):
        submit(RecordingYarn(), request(name=name, files_uri=files.uri(name)), files=files)  # type: ignore[arg-type]
    monkeypatch.setattr(controller_backend, "cluster_job_files", lambda rm_url: files)
    yarn = controller_backend.YarnJobBackend("http://rm.test:8088")
    yarn.job_ended("mnist")
    assert hdfs.under("/submarine-jobs/alice/mnist") == {} and not (jobs_dir / "mnist").exists()
    assert hdfs.under("/submarine-jobs/alice/other") != {}  # another job's stay

    def away(rm_url: str) -> HdfsJobFiles:
        raise WebHdfsError("WebHDFS DELETE: no answer")

    monkeypatch.setattr(controller_backend, "cluster_job_files", away)
    with pytest.raises(OSError, match="its files on HDFS: WebHDFS DELETE: no answer"):
        yarn.job_ended("other")
    assert hdfs.under("/submarine-jobs/alice/other") != {} and not (jobs_dir / "other").exists()


def _rm_conf(rsps: Any, values: dict[str, str]) -> None:
    """The RM's ``/conf`` answers: each of ``values``, 404 for a property not set."""
    from responses import matchers

    for name in ("fs.defaultFS", "dfs.namenode.http-address"):
        match = [matchers.query_param_matcher({"name": name}, strict_match=False)]
        if name in values:
            body = {"property": {"key": name, "value": values[name], "resource": "x-site.xml"}}
            rsps.get("http://rm.test:8088/conf", json=body, match=match)
        else:
            rsps.get("http://rm.test:8088/conf", status=404, match=match)


def test_without_a_recorded_cluster_job_run_finds_hdfs_in_the_resourcemanagers_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster this machine did not start (no SUBMARINE_CLUSTER_DIR, no HADOOP_CONF_DIR): its RM's own
    configuration says its file system is HDFS and where the NameNode's web address is; before, the job's files
    stayed local and the RM refused the spec ("Wrong FS")."""
    from submarine_elastic.cli.job import _job_files

    monkeypatch.setenv("SUBMARINE_CLUSTER_DIR", str(tmp_path / "none"))
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    with responses.RequestsMock() as rsps:
        _rm_conf(rsps, {"fs.defaultFS": "hdfs://nn.test:8020", "dfs.namenode.http-address": "nn.test:9870"})
        files = _job_files("http://rm.test:8088")
    assert files is not None and files.uri("mnist") == f"hdfs://nn.test:8020/submarine-jobs/{files.hdfs.user}/mnist"
    assert files.hdfs.url == "http://nn.test:9870"
    with responses.RequestsMock(assert_all_requests_are_fired=False) as rsps:
        _rm_conf(rsps, {"fs.defaultFS": "file:///"})
        assert _job_files("http://rm.test:8088") is None  # local files, as on a cluster without HDFS
    with responses.RequestsMock() as rsps, pytest.raises(click.ClickException, match="names no NameNode web address"):
        _rm_conf(rsps, {"fs.defaultFS": "hdfs://nn.test:8020"})
        _job_files("http://rm.test:8088")
    # The RM restarting (a chaos run): not "no HDFS", whose files kept locally the RM refused once back ("Wrong
    # FS"), but the RM away; job run asks again once the RM answered its other calls, and only then takes an RM
    # without a configuration page for one without HDFS.
    for away_means_local in (False, True):
        with responses.RequestsMock() as rsps:
            rsps.get("http://rm.test:8088/conf", body=requests.ConnectionError("Connection refused"))
            if away_means_local:
                assert _job_files("http://rm.test:8088", away_means_local=True) is None
            else:
                with pytest.raises(RMUnreachableError):
                    _job_files("http://rm.test:8088")
