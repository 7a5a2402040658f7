"""The pseudo-cluster's parts as units: the state file, the JVM command lines, the ApplicationMaster's archive,
the foreground daemon's checks, the processes' identity, a client configuration's HDFS and ZooKeeper's probe."""

from __future__ import annotations

import os
import socket
import tarfile
import threading
import time
from pathlib import Path

import pytest

from submarine_elastic.cluster import ClusterSpec, PrerequisiteError, QueueSpec
from submarine_elastic.cluster.api import Daemon
from submarine_elastic.cluster.foreground import check_role
from submarine_elastic.cluster.hadoop_conf import hdfs_addresses, xml_value
from submarine_elastic.cluster.jars import am_archive, pack_am_archive
from submarine_elastic.cluster.jvm import JAVA17_OPENS, RM_MAIN, JvmCommands
from submarine_elastic.cluster.kdc import KerberosRealm
from submarine_elastic.cluster.probes import zk_ok
from submarine_elastic.cluster.processes import alive, port_free, start_ticks
from submarine_elastic.cluster.state import StateFile


def test_the_state_file_round_trips_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    state = StateFile(tmp_path / "cluster.json")
    assert state.read() is None
    spec = ClusterSpec(nodes=2, queues=(QueueSpec("prod", 70, 90), QueueSpec("dev", 30)))
    daemons = [Daemon("zk", 11, 5, tmp_path / "logs" / "zk.log"), Daemon("rm", 12, 6, tmp_path / "logs" / "rm.log")]
    state.write(spec, daemons)
    assert state.read() == (spec, daemons)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cluster.json"]
    state.write(spec, daemons[:1])
    assert state.read() == (spec, daemons[:1])
    state.remove()
    state.remove()
    assert state.read() is None


def test_each_daemon_command_names_its_main_class_configuration_and_cluster(tmp_path: Path) -> None:
    jvm = JvmCommands(tmp_path / "c", tmp_path / "lib")
    cmd, env = jvm.daemon("/opt/java/bin/java", "rm")
    assert cmd[0] == "/opt/java/bin/java" and cmd[-1] == RM_MAIN and "-Xmx512m" in cmd
    assert f"-Dsubmarine.cluster.dir={tmp_path / 'c'}" in cmd and f"-Dservice.libdir={tmp_path / 'lib'}" in cmd
    assert set(JAVA17_OPENS) <= set(cmd)
    assert cmd[cmd.index("-cp") + 1] == f"{tmp_path / 'c' / 'conf' / 'rm'}:{tmp_path / 'lib'}/*"
    assert env["HADOOP_CONF_DIR"] == str(tmp_path / "c" / "conf" / "rm") and "KRB5_CONFIG" not in env
    realm = KerberosRealm.of_cluster(tmp_path / "c", ClusterSpec())
    nm, nm_env = jvm.daemon("java", "nm-1", console=True, realm=realm)
    assert f"-Djava.security.krb5.conf={realm.krb5_conf}" in nm and "-Dhadoop.root.logger=INFO,console" in nm
    assert not any(a.startswith("-Dservice.libdir") for a in nm)
    assert nm_env["KRB5_CONFIG"] == str(tmp_path / "c" / "krb5" / "krb5.conf")
    zk = jvm.zookeeper("java")
    assert zk[-1] == str(tmp_path / "c" / "conf" / "zk" / "zoo.cfg") and "-Dhadoop.root.logger=INFO,RFA" in zk
    assert jvm.format_namenode("java")[-2:] == ["-format", "-nonInteractive"]


def test_the_am_archive_is_packed_once_and_again_when_a_jar_is_newer(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("a.jar", "b.jar"):
        (lib / name).write_bytes(name.encode())
    said: list[str] = []
    tarball = pack_am_archive(lib, said.append)
    assert tarball == tmp_path / "service-dep.tar.gz" and len(said) == 1
    with tarfile.open(tarball) as tar:
        assert sorted(tar.getnames()) == ["a.jar", "b.jar"]
    assert am_archive(lib) == (tarball, [])
    assert pack_am_archive(lib, said.append) == tarball and len(said) == 1
    later = time.time() + 10
    os.utime(lib / "b.jar", (later, later))
    assert am_archive(lib) == (tarball, [lib / "a.jar", lib / "b.jar"])
    pack_am_archive(lib, said.append)
    assert len(said) == 2 and sorted(p.name for p in tmp_path.iterdir()) == ["lib", "service-dep.tar.gz"]


@pytest.mark.parametrize(
    ("role", "spec", "node", "message"),
    [
        ("historyserver", ClusterSpec(), 0, "role must be one of"),
        ("namenode", ClusterSpec(hdfs=False), 0, "part of HDFS"),
        ("nodemanager", ClusterSpec(nodes=2), 2, r"node must be in \[0, 2\), got 2"),
        ("nodemanager", ClusterSpec(nodes=2), -1, "got -1"),
    ],
)
def test_a_foreground_daemon_the_spec_has_not_is_refused(role: str, spec: ClusterSpec, node: int, message: str):
    with pytest.raises(ValueError, match=message):
        check_role(role, spec, node)


def test_a_daemon_is_named_by_its_pid_and_start_time(tmp_path: Path) -> None:
    me = start_ticks(os.getpid())
    assert me >= 0
    assert alive(Daemon("rm", os.getpid(), me, tmp_path / "rm.log"))
    assert not alive(Daemon("rm", os.getpid(), me + 1, tmp_path / "rm.log"))
    assert start_ticks(2**22 + 12345) == -1


def test_a_client_configuration_names_its_hdfs_or_none(tmp_path: Path) -> None:
    def site(name: str, **props: str) -> None:
        rows = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in props.items())
        (tmp_path / name).write_text(f"<configuration>{rows}</configuration>")

    site("core-site.xml", **{"fs.defaultFS": "file:///"})
    assert hdfs_addresses(tmp_path) is None
    site("core-site.xml", **{"fs.defaultFS": "hdfs://nn:8020"})
    with pytest.raises(PrerequisiteError, match="hdfs-site.xml"):
        hdfs_addresses(tmp_path)
    site("hdfs-site.xml", **{"dfs.namenode.http-address": "nn:9870"})
    assert hdfs_addresses(tmp_path) == ("hdfs://nn:8020", "http://nn:9870")
    assert xml_value((tmp_path / "hdfs-site.xml").read_bytes(), "dfs.replication") is None
    with pytest.raises(PrerequisiteError, match="HADOOP_CONF_DIR"):
        hdfs_addresses(tmp_path / "nowhere")


def test_zookeeper_answers_imok_and_a_bound_port_is_not_free() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert not port_free("127.0.0.1", port)

        def answer() -> None:
            conn, _ = server.accept()
            with conn:
                if conn.recv(4) == b"ruok":
                    conn.sendall(b"imok")

        thread = threading.Thread(target=answer)
        thread.start()
        assert zk_ok("127.0.0.1", port)
        thread.join(timeout=5)
    assert not zk_ok("127.0.0.1", port)
