"""A real Hadoop YARN pseudo-cluster on loopback: ZooKeeper, a ResourceManager with the YARN
Services API, and N NodeManagers, each its own JVM started from the Maven-resolved jars.

With ``ClusterSpec.hosts`` the same daemons run on that many hosts instead, network namespaces on one
bridge (``cluster.netns``): ZooKeeper and the RM on host 0 bound to its address, one NodeManager on every
host bound to its host name, so every container of host K runs inside namespace K (a NodeManager's children
inherit it). The CLI in the root namespace reaches the RM at host 0's address, through the bridge.

Layout of the cluster directory (``SUBMARINE_CLUSTER_DIR``)::

    cluster.json          the spec and the daemons started (pid + start time), written by ``up`` and ``restart``
    hosts.json            on hosts, the host network, recorded before it is made (``cluster.netns``)
    conf/<daemon>/        per-daemon Hadoop configuration: cluster/hadoop/conf plus the overrides below
    logs/<daemon>.log     each daemon's log; logs/<daemon>.out its stdout/stderr
    zk/                   ZooKeeper's data: the service registry and the RM's state (its applications)
    nm-<i>/local nm-<i>/logs nm-<i>/recovery   a NodeManager's containers, their logs, its recovery state
    krb5/                 a secure cluster's Kerberos realm: its KDC's configuration and database, the
                          keytabs (``cluster.kdc``)

The configuration files under ``cluster/hadoop/conf`` are shared with the docker-compose cluster;
this module overrides only what differs on one host: addresses and ports, directories, node size.
They turn on work-preserving restart: ``restart`` of the RM or of a NodeManager keeps running containers.

Which processes are the cluster's (``down``, and ``up`` over a dead cluster's directory): the daemons
recorded in ``cluster.json`` (pid and start time, so a reused pid is not taken for one), every process
below them when ``down`` begins (the containers' launch scripts, ApplicationMasters, training processes,
also those that started a session of their own), and any process whose command line names this
cluster (a daemon's ``-Dsubmarine.cluster.dir=<dir>``, a container's script or log under
``<dir>/nm-<i>/``) with everything below it. Never a process for what its environment says: a
``make`` that started ``down``, or every process of the docker image, has the cluster directory there.
On hosts, also every process left in the hosts' namespaces when they are removed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import io
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import psutil
import requests
from tenacity import RetryCallState, Retrying, retry_if_result, stop_after_delay, wait_fixed

from submarine_elastic import env, resources
from submarine_elastic.cluster import gpu, queues
from submarine_elastic.cluster.api import (
    ROLES,
    ClusterAlreadyUpError,
    ClusterNotUpError,
    ClusterSpec,
    ClusterStatus,
    Daemon,
    DaemonNotRunningError,
    DaemonPlan,
    DaemonStartError,
    Host,
    HostStatus,
    NodeInfo,
    Placement,
    PortInUseError,
    PrerequisiteError,
    QueueSpec,
    ServiceSummary,
    UnknownDaemonError,
    host_address,
)
from submarine_elastic.cluster.kdc import KerberosRealm, kdc_answers
from submarine_elastic.cluster.netns import HostNetwork, check_prerequisites
from submarine_elastic.elastic.jobfiles import HDFS_JOBS
from submarine_elastic.webhdfs import WebHdfs, WebHdfsError
from submarine_elastic.yarn import (
    GPU_RESOURCE,
    YarnError,
    YarnServiceClient,
    refuse_cookies,
    resource_values,
    spnego_auth,
)

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

RM_MAIN = "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager"
NM_MAIN = "org.apache.hadoop.yarn.server.nodemanager.NodeManager"
RM_HEAP = "512m"
NM_HEAP = "256m"
ZK_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
NN_MAIN = "org.apache.hadoop.hdfs.server.namenode.NameNode"
DN_MAIN = "org.apache.hadoop.hdfs.server.datanode.DataNode"
NN_HEAP = "256m"
DN_HEAP = "128m"
#: Where ``up`` puts the ApplicationMaster's jar archive on a cluster's HDFS (``yarn.service.framework.path``).
HDFS_FRAMEWORK = "/yarn/framework/service-dep.tar.gz"
#: The Services API's files on a cluster's HDFS (``yarn.service.base.path``): ``services/<name>`` below it is
#: each service's, made by its user (0750). Mode 1777 (sticky, like /tmp) on both, so any user's service
#: may start and none removes another's.
HDFS_SERVICES = "/yarn-services"
#: The (empty) web application each HDFS daemon's HTTP server needs on its classpath: the Maven jars do not
#: carry Hadoop's ``webapps/`` directory, and WebHDFS is served without one.
HDFS_WEBAPPS = {"nn": "hdfs", "dn": "datanode"}
_EMPTY_WEBAPP = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<web-app xmlns="http://xmlns.jcp.org/xml/ns/javaee" version="3.1"/>\n'
)

# Hadoop 3.4.x predates Java 17: Guice, Jersey 1 and Hadoop's own reflection need these packages
# opened, in every daemon and in the service ApplicationMaster (yarn.service.am.java.opts).
JAVA17_OPENS = [
    f"--add-opens=java.base/{pkg}=ALL-UNNAMED"
    for pkg in (
        "java.lang",
        "java.lang.reflect",
        "java.io",
        "java.net",
        "java.nio",
        "java.util",
        "java.util.concurrent",
        "java.util.concurrent.atomic",
        "java.util.regex",
        "java.util.zip",
        "java.math",
        "java.text",
        "java.time",
        "sun.nio.ch",
        "sun.nio.cs",
        "sun.security.util",
        "sun.security.x509",
        "jdk.internal.misc",
    )
] + [
    "--add-exports=java.base/sun.net.dns=ALL-UNNAMED",
    "--add-exports=java.base/sun.net.util=ALL-UNNAMED",
]
# Small heaps and a quick-start JIT: the whole cluster shares two cores with the training jobs.
JVM_LEAN = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true"]
AM_JAVA_OPTS = " ".join(["-Xmx256m", *JVM_LEAN, *JAVA17_OPENS])

STATE_FILE = "cluster.json"
#: Seconds a daemon has between SIGTERM and SIGKILL on ``down``, and a leftover container process.
DAEMON_GRACE_S = 15.0
LEFTOVER_GRACE_S = 3.0
CONF_FILES = ("core-site.xml", "yarn-site.xml", "hdfs-site.xml", "capacity-scheduler.xml", "log4j.properties")


class LocalCluster:
    """Starts, stops and inspects the pseudo-cluster kept in ``cluster_dir``.

    Args:
        cluster_dir: state directory (default ``env.cluster_dir()``).
        hadoop_lib: directory of the Hadoop jars (default ``env.hadoop_lib()``).
        conf_template: the shared configuration files (default ``env.hadoop_conf_template()``).
    """

    def __init__(
        self,
        cluster_dir: Path | None = None,
        *,
        hadoop_lib: Path | None = None,
        conf_template: Path | None = None,
    ) -> None:
        self.dir = (cluster_dir or env.cluster_dir()).resolve()
        self.lib = (hadoop_lib or env.hadoop_lib()).resolve()
        self.conf_template = (conf_template or env.hadoop_conf_template()).resolve()

    # ------------------------------------------------------------------ state

    @property
    def state_file(self) -> Path:
        return self.dir / STATE_FILE

    def _read_state(self) -> tuple[ClusterSpec, list[Daemon]] | None:
        try:
            raw = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return None
        recorded = raw["spec"]
        spec = ClusterSpec(**{**recorded, "queues": tuple(QueueSpec(**q) for q in recorded.get("queues", ()))})
        daemons = [Daemon(d["name"], int(d["pid"]), int(d["start_ticks"]), Path(d["log"])) for d in raw["daemons"]]
        return spec, daemons

    def _write_state(self, spec: ClusterSpec, daemons: list[Daemon]) -> None:
        raw = {
            "spec": dataclasses.asdict(spec),
            "rm_url": spec.rm_url,
            "default_fs": spec.default_fs,
            "webhdfs_url": spec.webhdfs_url,
            "daemons": [{**dataclasses.asdict(d), "log": str(d.log)} for d in daemons],
        }
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(raw, indent=2))
        tmp.replace(self.state_file)

    def spec(self) -> ClusterSpec:
        """The spec of the cluster recorded in the directory.

        Raises:
            ClusterNotUpError: nothing is recorded there.
        """
        state = self._read_state()
        if state is None:
            raise ClusterNotUpError(f"no cluster in {self.dir}; start one with `submarine cluster up`")
        return state[0]

    def running_daemons(self) -> list[Daemon]:
        """Recorded daemons whose process still runs."""
        state = self._read_state()
        return [d for d in state[1] if _alive(d)] if state else []

    # ------------------------------------------------------------------ up

    def up(self, spec: ClusterSpec, *, timeout: float = 180.0, progress: Progress | None = None) -> str:
        """Start ZooKeeper, the RM and the NMs; block until every NM is RUNNING in the RM.

        Blocks for up to ``timeout`` seconds per phase (ZooKeeper, RM, NMs). On any failure every
        process started so far is stopped again, so nothing is left half-started.

        Returns:
            The RM web address.

        Raises:
            ClusterAlreadyUpError: daemons recorded in ``cluster_dir`` still run.
            PrerequisiteError: no Java, no Hadoop jars, no configuration templates.
            PortInUseError: a port of ``spec`` is taken.
            HostNetworkUnavailableError: on hosts, no ``ip`` command or not root (nothing was made).
            HostNetworkError: on hosts, a namespace could not be made (what was made is removed again).
            DaemonStartError: a daemon exited early or did not get ready in time (with its log tail).
        """
        say = progress or (lambda _msg: None)
        alive = self.running_daemons()
        if alive:
            pids = ", ".join(f"{d.name}={d.pid}" for d in alive)
            raise ClusterAlreadyUpError(
                f"a cluster is already up in {self.dir} ({pids}); run `submarine cluster down` first"
            )
        if spec.hosts:
            check_prerequisites()
        java = self._check_prerequisites()
        if spec.secure:
            self.realm(spec).check_tools()
        if not spec.hosts:
            # (The hosts' namespaces are made anew: nothing else holds a port there.)
            for port, role in sorted(spec.all_ports().items()):
                if not _port_free(spec.host, port):
                    raise PortInUseError(port, role)

        if self.dir.exists():
            # A stale directory from a cluster that died: clear leftovers, then start afresh.
            self._kill_orphans()
            self._destroy_network(say)
            for sub in ("conf", "zk", "hdfs", "logs", "tmp", "yarn-services", "krb5") + tuple(
                f"nm-{i}" for i in range(64)
            ):
                shutil.rmtree(self.dir / sub, ignore_errors=True)
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)

        tarball = self._dependency_tarball(say)
        started: list[Daemon] = []
        network = self.network(spec)
        try:
            if network is not None:
                say(f"making {spec.hosts} hosts on {spec.subnet}: namespaces joined by bridge {network.bridge}")
                network.create()
            if spec.secure:
                realm = self.realm(spec)
                say(f"creating Kerberos realm {realm.realm} in {realm.dir}; its KDC on {spec.host}:{spec.kdc_port}")
                realm.create()
                started.append(self._start_kdc(realm))
                self._write_state(spec, started)
                _wait(lambda: kdc_answers(spec.host, spec.kdc_port), timeout, started[-1], "did not listen")
            say(f"starting ZooKeeper on {spec.host}:{spec.zk_port}{self._on(spec, 'zk')}")
            started.append(self._start_zookeeper(java, spec))
            self._write_state(spec, started)
            _wait(lambda: _zk_ok(spec.host, spec.zk_port), timeout, started[-1], "did not answer 'ruok'")
            if spec.hdfs:
                self._start_hdfs(java, spec, tarball, started, timeout, say)

            say(f"starting ResourceManager (web {spec.rm_url}){self._on(spec, 'rm')}")
            self._write_conf("rm", spec, tarball)
            started.append(self._start_daemon(java, "rm", spec))
            self._write_state(spec, started)
            auth = self._rm_auth(spec)
            _wait(lambda: _rm_started(spec.rm_url, auth), timeout, started[-1], "did not answer on its web address")

            say(f"starting {spec.nodes} NodeManagers" + (", one on each host" if spec.hosts else ""))
            nm_daemons = []
            for i in range(spec.nodes):
                self._write_conf(f"nm-{i}", spec, tarball, node=i)
                nm_daemons.append(self._start_daemon(java, f"nm-{i}", spec))
                started.append(nm_daemons[-1])
                self._write_state(spec, started)
            self._wait_nodes(spec, nm_daemons, timeout, say)
        except BaseException:
            say("start failed; stopping what was started")
            self._stop(started)
            if network is not None:
                self._destroy_network(say)
            self.state_file.unlink(missing_ok=True)
            raise
        say(f"cluster up: ResourceManager at {spec.rm_url}")
        return spec.rm_url

    def _start_hdfs(
        self, java: str, spec: ClusterSpec, tarball: Path, started: list[Daemon], timeout: float, say: Progress
    ) -> None:
        """Format the NameNode (once: a name directory that holds an image is kept), start it and a DataNode
        per node, wait until every DataNode is live and the NameNode out of safe mode, then make what YARN
        and the jobs need on it (:meth:`_init_hdfs`). Appends each daemon to ``started`` as it starts.

        Raises:
            DaemonStartError: the format failed, or a daemon exited or did not get ready in time.
        """
        say(f"starting HDFS: NameNode {spec.default_fs} (WebHDFS {spec.webhdfs_url}){self._on(spec, 'nn')}")
        self._write_conf("nn", spec, tarball)
        self._format_namenode(java)
        started.append(self._start_daemon(java, "nn", spec))
        self._write_state(spec, started)
        datanodes = []
        for i in range(spec.nodes):
            self._write_conf(f"dn-{i}", spec, tarball)
            datanodes.append(self._start_daemon(java, f"dn-{i}", spec))
            started.append(datanodes[-1])
            self._write_state(spec, started)
        self._wait_datanodes(spec, started[-spec.nodes - 1], datanodes, timeout, say)
        self._init_hdfs(str(spec.webhdfs_url), tarball, say)

    def _format_command(self, java: str) -> list[str]:
        conf = self.dir / "conf" / "nn"
        return [
            java, f"-Xmx{NN_HEAP}", *JVM_LEAN, *JAVA17_OPENS, *self._log_props("nn-format", conf, console=True),
            "-cp", f"{conf}:{self.lib}/*", NN_MAIN, "-format", "-nonInteractive",
        ]  # fmt: skip

    @property
    def _namenode_image(self) -> Path:
        """Present once the NameNode's name directory is formatted."""
        return self.dir / "hdfs" / "name" / "current" / "VERSION"

    def _format_namenode(self, java: str) -> None:
        """``NameNode -format`` unless the name directory is formatted already (blocks for a few seconds).

        Raises:
            DaemonStartError: the format failed (its output's tail in the message).
        """
        if self._namenode_image.is_file():
            return
        out = self.dir / "logs" / "nn-format.out"
        with out.open("wb") as stdout:
            done = subprocess.run(
                self._format_command(java), stdout=stdout, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.dir, env={**os.environ, "HADOOP_CONF_DIR": str(self.dir / "conf" / "nn")}, check=False,
                timeout=300,
            )  # fmt: skip
        if done.returncode != 0 or not self._namenode_image.is_file():
            tail = "\n".join(out.read_text(errors="replace").splitlines()[-25:])
            raise DaemonStartError("nn", f"could not be formatted (exit {done.returncode})", out, tail)

    def _wait_datanodes(
        self, spec: ClusterSpec, namenode: Daemon, datanodes: list[Daemon], timeout: float, say: Progress
    ) -> None:
        """Block until the NameNode answers out of safe mode with every DataNode of ``datanodes`` live
        (polled every 0.5 s, at most ``timeout`` s).

        Raises:
            DaemonStartError: a daemon exited, or did not get ready in time (naming it, with its log).
        """
        expected = {d.name: _datanode_address(spec, int(d.name.removeprefix("dn-"))) for d in datanodes}
        seen = -1
        live: set[str] = set()

        def ready() -> bool:
            nonlocal live, seen
            for d in (namenode, *datanodes):
                if not _alive(d):
                    raise DaemonStartError(d.name, "exited during start", d.log, _tail(d))
            info = _namenode_info(str(spec.webhdfs_url))
            if info is None:
                return False
            addresses = {node.get("xferaddr") for node in info["live"].values()}
            # The NameNode lists a restarted DataNode under the old one's address until that expires: the
            # DataNode itself must also say it is registered.
            live = {
                name
                for name, address in expected.items()
                if address in addresses and _datanode_registered(spec, int(name.removeprefix("dn-")))
            }
            if len(live) != seen:
                seen = len(live)
                say(f"{seen}/{len(datanodes)} DataNodes live")
            return len(live) == len(datanodes) and not info["safemode"]

        def missing(_state: RetryCallState) -> bool:
            worst = next((d for d in datanodes if d.name not in live), namenode)
            raise DaemonStartError(
                worst.name, f"was not live in the NameNode out of safe mode within {timeout:.0f} s", worst.log,
                _tail(worst),
            )  # fmt: skip

        _poll(ready, timeout, 0.5, missing)

    def prepare_hdfs(self, webhdfs_url: str, *, timeout: float = 180.0, progress: Progress | None = None) -> None:
        """What ``up`` makes on a fresh HDFS (:meth:`_init_hdfs`), for a cluster whose daemons start one by one
        (``submarine cluster daemon resourcemanager --hdfs``): blocks until the NameNode at ``webhdfs_url``
        has a live DataNode and is out of safe mode (polled every second, at most ``timeout`` s), then makes it.

        Raises:
            DaemonStartError: no NameNode with a live DataNode in time, or HDFS refused the files.
        """
        say = progress or (lambda _msg: None)

        def ready() -> bool:
            info = _namenode_info(webhdfs_url)
            return info is not None and bool(info["live"]) and not info["safemode"]

        def give_up(_state: RetryCallState) -> bool:
            raise DaemonStartError(
                "nn", f"at {webhdfs_url} had no live DataNode within {timeout:.0f} s", self.dir / "logs" / "nn.log", ""
            )

        say(f"waiting for HDFS at {webhdfs_url}")
        _poll(ready, timeout, 1.0, give_up)
        tarball, _jars = self._tarball_state()
        self._init_hdfs(webhdfs_url, tarball, say)

    def _init_hdfs(self, webhdfs_url: str, tarball: Path, say: Progress) -> None:
        """What YARN and the jobs need on a fresh HDFS, made as its superuser: ``/tmp``, :data:`HDFS_SERVICES`
        and its ``services``, :data:`HDFS_JOBS` and ``<hadoop.tmp.dir>/.yarn/services``, where each service's AM
        makes its instances' directories (each 1777: every user makes a directory of their own there), and the
        ApplicationMaster's jar archive at :data:`HDFS_FRAMEWORK` (readable by all, as every service's AM
        localizes it).

        Raises:
            DaemonStartError: HDFS refused or did not answer (naming the call).
        """
        try:
            with WebHdfs(webhdfs_url, getpass.getuser()) as hdfs:
                instances = str(self.dir / "tmp" / ".yarn" / "services")  # hadoop.tmp.dir, read as an HDFS path
                for shared in ("/tmp", HDFS_SERVICES, f"{HDFS_SERVICES}/services", HDFS_JOBS, instances):
                    hdfs.mkdirs(shared, 0o1777)
                    hdfs.set_permission(shared, 0o1777)  # MKDIRS applies the NameNode's umask
                framework = hdfs.status(HDFS_FRAMEWORK)
                if framework is None or framework["length"] != tarball.stat().st_size:
                    say(f"putting the ApplicationMaster's jars on HDFS ({tarball.stat().st_size >> 20} MB)")
                    hdfs.mkdirs(str(Path(HDFS_FRAMEWORK).parent), 0o755)
                    with tarball.open("rb") as data:
                        hdfs.create(HDFS_FRAMEWORK, data, 0o644)
        except WebHdfsError as exc:
            nn = self.dir / "logs" / "nn.log"
            raise DaemonStartError("nn", f"refused the cluster's first files: {exc}", nn, "") from exc

    def _check_prerequisites(self) -> str:
        java = shutil.which("java", path=_java_path())
        if java is None:
            raise PrerequisiteError("Java 17 is required but 'java' is not on PATH (nor in JAVA_HOME)")
        if not self.lib.is_dir() or not any(self.lib.glob("hadoop-yarn-server-resourcemanager-*.jar")):
            raise PrerequisiteError(
                f"the Hadoop jars are missing from {self.lib}; run scripts/install.sh "
                f"(needs Maven) or set SUBMARINE_HADOOP_LIB"
            )
        missing = [f for f in CONF_FILES if not (self.conf_template / f).is_file()]
        if missing:
            raise PrerequisiteError(f"configuration template {self.conf_template} lacks {', '.join(missing)}")
        return java

    def _tarball_state(self) -> tuple[Path, list[Path]]:
        """Where the AM's jar archive is, and the jars to pack into it ([] while it is up to date)."""
        tarball = self.lib.parent / "service-dep.tar.gz"
        jars = sorted(self.lib.glob("*.jar"))
        newest = max(j.stat().st_mtime for j in jars)
        if tarball.is_file() and tarball.stat().st_mtime >= newest:
            return tarball, []
        return tarball, jars

    def _dependency_tarball(self, say: Progress) -> Path:
        """The service AM's jars as one archive (``yarn.service.framework.path``).

        Without it the RM uploads every jar separately for each service it starts. Built once
        next to the jars and reused while the jar directory is unchanged.
        """
        tarball, jars = self._tarball_state()
        if not jars:
            return tarball
        say(f"packing {len(jars)} jars for the service ApplicationMaster into {tarball}")
        tmp = tarball.with_suffix(".tmp")
        with tarfile.open(tmp, "w:gz", compresslevel=1) as tar:
            for jar in jars:
                tar.add(jar, arcname=jar.name)
        tmp.replace(tarball)
        return tarball

    def _write_conf(
        self, name: str, spec: ClusterSpec, tarball: Path, node: int | None = None, placement: Placement | None = None
    ) -> Path:
        _write_files(self._conf_files(name, spec, tarball, node, placement)[0])
        return self.dir / "conf" / name

    def _conf_files(
        self, name: str, spec: ClusterSpec, tarball: Path, node: int | None = None, placement: Placement | None = None
    ) -> tuple[dict[Path, bytes], dict[Path, dict[str, str]]]:
        """One daemon's configuration files (path -> content), and the settings each overrides in the
        shared templates; reads the templates, writes nothing."""
        conf = self.dir / "conf" / name
        files = {conf / f: (self.conf_template / f).read_bytes() for f in CONF_FILES}
        zk_host, rm_host, node_host = (
            (placement.zk_host, placement.rm_host, placement.node_host)
            if placement
            else (spec.host, spec.host, spec.node_host(node or 0))
        )
        nn_host = placement.nn_host if placement else spec.host
        core = {
            "hadoop.registry.zk.quorum": f"{zk_host}:{spec.zk_port}",
            "hadoop.zk.address": f"{zk_host}:{spec.zk_port}",
            "hadoop.tmp.dir": str(self.dir / "tmp"),
            "fs.defaultFS": f"hdfs://{nn_host}:{spec.namenode_port}" if spec.hdfs else "file:///",
        }
        yarn = {
            "yarn.resourcemanager.hostname": rm_host,
            **{k: f"{rm_host}:{p}" for k, p in spec.rm_ports().items()},
            # With HDFS the Services API keeps each service's files there, and the NodeManagers localize the AM's
            # jars from it.
            "yarn.service.base.path": HDFS_SERVICES if spec.hdfs else str(self.dir / "yarn-services"),
            "yarn.service.framework.path": f"{core['fs.defaultFS']}{HDFS_FRAMEWORK}"
            if spec.hdfs
            else f"file://{tarball}",
            "yarn.service.am.java.opts": AM_JAVA_OPTS,
            "yarn.nodemanager.resource.memory-mb": str(spec.node_memory_mb),
            "yarn.nodemanager.resource.cpu-vcores": str(spec.node_vcores),
            "yarn.scheduler.maximum-allocation-mb": str(spec.node_memory_mb),
            "yarn.scheduler.maximum-allocation-vcores": str(spec.node_vcores),
        }
        hdfs = self._hdfs_settings(name, spec, nn_host, placement) if spec.hdfs else {}
        if node is not None and name.startswith("nm-"):
            nm_dir = self.dir / f"nm-{node}"
            yarn.update({k: f"{node_host}:{p}" for k, p in spec.nm_ports(node).items()})
            yarn.update(
                {
                    "yarn.nodemanager.hostname": node_host,
                    "yarn.nodemanager.local-dirs": str(nm_dir / "local"),
                    "yarn.nodemanager.log-dirs": str(nm_dir / "logs"),
                    "yarn.nodemanager.recovery.dir": str(nm_dir / "recovery"),
                }
            )
        if placement:
            # Reached by host name, listening on every interface of the daemon's own container.
            yarn["yarn.resourcemanager.bind-host"] = "0.0.0.0"
            yarn["yarn.nodemanager.bind-host"] = "0.0.0.0"
        elif spec.secure:
            realm = self.realm(spec)
            # The RM's and the NodeManagers' web endpoints alike: one HTTP/<host> key serves the one host.
            core.update(spnego_settings(realm))
            if node is not None:
                # The containers reach the cluster's KDC as the NodeManager does (a host's /etc/krb5.conf elsewhere).
                allowed = _xml_value(files[conf / "yarn-site.xml"], "yarn.nodemanager.env-whitelist") or ""
                yarn["yarn.nodemanager.env-whitelist"] = ",".join(filter(None, (allowed, "KRB5_CONFIG")))
        files[conf / "core-site.xml"] = _xml_with(files[conf / "core-site.xml"], core)
        files[conf / "yarn-site.xml"] = _xml_with(files[conf / "yarn-site.xml"], yarn)
        settings = {conf / "core-site.xml": core, conf / "yarn-site.xml": yarn}
        if hdfs:
            files[conf / "hdfs-site.xml"] = _xml_with(files[conf / "hdfs-site.xml"], hdfs)
            settings[conf / "hdfs-site.xml"] = hdfs
        if spec.queues and (name == "rm" or (node is not None and name.startswith("nm-"))):
            for path, changed in self._queue_conf(conf, name, spec).items():
                files[path] = _xml_with(files[path], changed)
                settings[path] = {**settings.get(path, {}), **changed}
        if spec.gpus_per_node and (name == "rm" or (node is not None and name.startswith("nm-"))):
            gpu_files, gpu_settings = self._gpu_conf(conf, name, spec, node_host)
            files.update(gpu_files)
            for path, changed in gpu_settings.items():
                files[path] = _xml_with(files[path], changed)
                settings[path] = {**settings.get(path, {}), **changed}
        webapp = HDFS_WEBAPPS.get(name.split("-")[0])
        if webapp is not None:
            files[conf / "webapps" / webapp / "WEB-INF" / "web.xml"] = _EMPTY_WEBAPP
        return files, settings

    def _queue_conf(self, conf: Path, name: str, spec: ClusterSpec) -> dict[Path, dict[str, str]]:
        """A cluster with queues' settings in the RM's or a NodeManager's configuration in ``conf``: the RM gets
        the queue hierarchy and the preemption monitor, a NodeManager the delay a preempted container has
        between SIGTERM and SIGKILL."""
        if name == "rm":
            return {
                conf / "capacity-scheduler.xml": queues.scheduler_settings(spec.queues),
                # The NodeManagers' kill delay too, as in the one yarn-site.xml of a real cluster: `job run` reads it.
                conf / "yarn-site.xml": {**queues.monitor_settings(), **queues.nodemanager_settings()},
            }
        return {conf / "yarn-site.xml": queues.nodemanager_settings()}

    def _gpu_conf(
        self, conf: Path, name: str, spec: ClusterSpec, node_host: str
    ) -> tuple[dict[Path, bytes], dict[Path, dict[str, str]]]:
        """A GPU cluster's additions to the RM's or a NodeManager's configuration in ``conf``: files to write
        (``resource-types.xml``; a NodeManager's stand-in ``nvidia-smi`` and what it prints) and settings to
        change: the RM schedules by every resource, a NodeManager runs the GPU plugin on the stand-in."""
        files = {conf / "resource-types.xml": gpu.resource_types_xml()}
        if name == "rm":
            return files, {conf / "capacity-scheduler.xml": dict(gpu.DOMINANT_RESOURCE_CALCULATOR)}
        directory = conf / "gpu"
        output = gpu.standin_output(resources.gpu_fixture().read_bytes(), spec.gpus_per_node, f"{node_host}/{name}")
        files[directory / gpu.OUTPUT] = output
        files[directory / gpu.EXECUTABLE] = gpu.standin_script(directory / gpu.OUTPUT)
        return files, {conf / "yarn-site.xml": gpu.plugin_settings(directory)}

    def _hdfs_settings(self, name: str, spec: ClusterSpec, nn_host: str, placement: Placement | None) -> dict[str, str]:
        """One daemon's ``hdfs-site.xml`` overrides: where the NameNode is (every daemon is its client), and
        for the NameNode and a DataNode their directories and addresses. A DataNode names itself by its
        host's address, where WebHDFS sends clients (the root namespace resolves no host name of the hosts)."""
        hdfs = {k: f"{nn_host}:{p}" for k, p in spec.namenode_ports().items()}
        if name == "nn":
            hdfs["dfs.namenode.name.dir"] = str(self.dir / "hdfs" / "name")
            if placement:
                hdfs.update({"dfs.namenode.rpc-bind-host": "0.0.0.0", "dfs.namenode.http-bind-host": "0.0.0.0"})
        elif name.startswith("dn-"):
            index = int(name.removeprefix("dn-"))
            if placement:
                bind, reached = "0.0.0.0", placement.node_host
            else:
                bind = reached = host_address(spec.subnet, index) if spec.hosts else spec.host
            hdfs.update({k: f"{bind}:{p}" for k, p in spec.datanode_ports(index).items()})
            hdfs["dfs.datanode.hostname"] = reached
            hdfs["dfs.datanode.data.dir"] = str(self.dir / "hdfs" / f"data-{index}")
        return hdfs

    def realm(self, spec: ClusterSpec) -> KerberosRealm:
        """The Kerberos realm of a ``secure`` cluster in this directory (its files, principals and KDC address;
        the user's principal is the login user's)."""
        return KerberosRealm(
            dir=self.dir / "krb5", host=spec.host, port=spec.kdc_port, user=getpass.getuser(), logs=self.dir / "logs"
        )

    def network(self, spec: ClusterSpec) -> HostNetwork | None:
        """The host network of a cluster on hosts in this directory (its plan; ``create`` makes it), else None."""
        return HostNetwork(self.dir, spec.hosts, spec.subnet) if spec.hosts else None

    def _host(self, spec: ClusterSpec, name: str) -> Host | None:
        """The host daemon ``name`` runs on, None on loopback."""
        network = self.network(spec)
        index = spec.daemon_host(name)
        return None if network is None or index is None else network.host(index)

    def _on(self, spec: ClusterSpec, name: str) -> str:
        host = self._host(spec, name)
        return f" on {host.name} ({host.address})" if host else ""

    def _destroy_network(self, say: Progress) -> None:
        """Removes the host network recorded in the directory (namespaces, links, bridge, hosts files and
        every process left in them), if any.

        Raises:
            HostNetworkError: something of it could not be removed.
        """
        network = HostNetwork.recorded(self.dir)
        if network is None:
            return
        removed = network.destroy()
        if removed:
            say(f"removed {', '.join(removed)}")

    def _start_kdc(self, realm: KerberosRealm, *, append_output: bool = False) -> Daemon:
        return self._spawn("kdc", realm.kdc_command(), env=realm.kdc_env(), append_output=append_output)

    def _rm_auth(self, spec: ClusterSpec) -> requests.auth.AuthBase | None:
        """How this process authenticates to the RM's web endpoints: None (simple, ``?user.name=``) or, on a
        secure cluster, SPNEGO as the user from the realm's keytab. Points this process's ``KRB5_CONFIG`` at
        the realm."""
        if not spec.secure:
            return None
        realm = self.realm(spec)
        os.environ["KRB5_CONFIG"] = str(realm.krb5_conf)
        return spnego_auth(keytab=realm.user_keytab, principal=realm.user_principal)

    def rm_client(self, spec: ClusterSpec, **options: Any) -> YarnServiceClient:
        """A YARN client of this cluster's RM: on a secure cluster, SPNEGO as the user from the realm's keytab
        (and this process's ``KRB5_CONFIG`` pointed at the realm); else the environment's settings.

        Raises:
            YarnAuthError: a secure cluster whose keytab no credentials could be had from.
        """
        if spec.secure:
            realm = self.realm(spec)
            os.environ["KRB5_CONFIG"] = str(realm.krb5_conf)
            options.update(auth="kerberos", keytab=realm.user_keytab, principal=realm.user_principal)
        return YarnServiceClient(spec.rm_url, **options)

    def _start_zookeeper(self, java: str, spec: ClusterSpec) -> Daemon:
        (self.dir / "zk").mkdir(exist_ok=True)
        _write_files(self._zk_files(spec, spec.host)[0])
        return self._spawn("zk", self._zk_command(java, spec), env=None, host=self._host(spec, "zk"))

    # ------------------------------------------------------------------ restart

    def restart(self, name: str, *, timeout: float = 180.0, progress: Progress | None = None) -> Daemon:
        """Restart one daemon (``zk``, ``rm`` or ``nm-<i>``) as an operator would: stop it (SIGTERM, SIGKILL
        after ``DAEMON_GRACE_S``; nothing to stop when it already died), then start it again with the
        configuration, ports and directories it had.

        Blocks until the cluster is healthy again, at most ``timeout`` s per phase: the restarted daemon
        answers (ZooKeeper ``ruok``, the RM its web address), then every running NodeManager is RUNNING in
        the RM, a restarted one registered anew. With the shipped configuration running work lives on: the
        RM reloads its applications from ZooKeeper and the NodeManagers and ApplicationMasters resync with
        it; a NodeManager takes its containers back.

        Returns:
            The daemon now running.

        Raises:
            ClusterNotUpError: nothing is recorded in the cluster directory.
            UnknownDaemonError: ``name`` is not one of this cluster's daemons.
            DaemonNotRunningError: what the daemon needs is down (ZooKeeper for the RM, the RM for a
                NodeManager); nothing was stopped.
            PrerequisiteError: no Java, no Hadoop jars, or the daemon's configuration directory is gone.
            PortInUseError: another process took one of the daemon's ports while it was down.
            DaemonStartError: the daemon exited or did not get healthy in time (with its log tail).
        """
        say = progress or (lambda _msg: None)
        state = self._read_state()
        if state is None:
            raise ClusterNotUpError(f"no cluster in {self.dir}; start one with `submarine cluster up`")
        spec, daemons = state
        if name not in spec.daemon_names():
            raise UnknownDaemonError(name, spec.daemon_names())
        by_name = {d.name: d for d in daemons}
        needs = {"kdc": None, "zk": None, "rm": "zk", "nn": None}.get(name, "nn" if name.startswith("dn-") else "rm")
        if needs is not None and not (needs in by_name and _alive(by_name[needs])):
            raise DaemonNotRunningError(
                f"{name} needs {needs}, which is not running; restart it first: `submarine cluster restart {needs}`"
            )
        java = self._check_prerequisites()
        conf = self.realm(spec).kdc_conf if name == "kdc" else self.dir / "conf" / name
        if not conf.exists():
            raise PrerequisiteError(f"{name}'s configuration {conf} is gone; `submarine cluster up` writes it anew")

        old = by_name.get(name)
        if old is not None and _alive(old):
            say(f"stopping {name} (pid {old.pid})")
            _terminate([old], grace=DAEMON_GRACE_S, group=False)
        else:
            say(f"{name} is not running" + (f" (pid {old.pid} has exited)" if old else ""))
        if not spec.hosts:
            # On hosts the daemon's namespace holds only the cluster's processes.
            for port, role in sorted(spec.daemon_ports(name).items()):
                if not _port_free(spec.host, port):
                    raise PortInUseError(port, role)

        say(f"starting {name}{self._on(spec, name)}")
        started_at = time.time()
        if name == "kdc":
            new = self._start_kdc(self.realm(spec), append_output=True)
        elif name == "zk":
            new = self._spawn(
                "zk", self._zk_command(java, spec), env=None, append_output=True, host=self._host(spec, "zk")
            )
        else:
            new = self._start_daemon(java, name, spec, append_output=True)
        by_name[name] = new
        daemons = [by_name[n] for n in spec.daemon_names() if n in by_name]
        self._write_state(spec, daemons)

        if name == "kdc":
            _wait(lambda: kdc_answers(spec.host, spec.kdc_port), timeout, new, "did not listen")
        if name == "zk":
            _wait(lambda: _zk_ok(spec.host, spec.zk_port), timeout, new, "did not answer 'ruok'")
        if name == "nn" or name.startswith("dn-"):
            datanodes = [d for d in daemons if d.name.startswith("dn-") and _alive(d)]
            self._wait_datanodes(spec, by_name["nn"], datanodes, timeout, say)
        rm = by_name["rm"]
        if not _alive(rm):
            say("rm is not running: `submarine cluster restart rm` starts it")
            return new
        auth = self._rm_auth(spec)
        _wait(lambda: _rm_started(spec.rm_url, auth), timeout, rm, "did not answer on its web address")
        nms = [d for d in daemons if d.name.startswith("nm-")]
        down = [d.name for d in nms if not _alive(d)]
        if down:
            say(f"not running: {', '.join(down)} (`submarine cluster restart` starts each)")
        running = [d for d in nms if d.name not in down]
        fresh = {name: started_at} if name.startswith("nm-") else None
        self._wait_nodes(spec, running, timeout, say, fresh_since=fresh)
        say(f"{name} restarted (pid {new.pid}); cluster healthy after {time.time() - started_at:.1f} s")
        return new

    def _zk_files(self, spec: ClusterSpec, bind_host: str) -> tuple[dict[Path, bytes], dict[Path, dict[str, str]]]:
        """ZooKeeper's configuration files and the settings ``zoo.cfg`` overrides; writes nothing."""
        conf = self.dir / "conf" / "zk"
        template = (self.conf_template / "zoo.cfg").read_text()
        settings = {"dataDir": str(self.dir / "zk"), "clientPort": str(spec.zk_port), "clientPortAddress": bind_host}
        lines = [line for line in template.splitlines() if not line.startswith(tuple(f"{k}=" for k in settings))]
        lines += [f"{k}={v}" for k, v in settings.items()]
        files = {
            conf / "zoo.cfg": ("\n".join(lines) + "\n").encode(),
            conf / "log4j.properties": (self.conf_template / "log4j.properties").read_bytes(),
        }
        return files, {conf / "zoo.cfg": settings}

    def _zk_command(self, java: str, spec: ClusterSpec, *, console: bool = False) -> list[str]:
        conf = self.dir / "conf" / "zk"
        return [
            java,
            "-Xmx128m",
            *JVM_LEAN,
            *self._log_props("zk", conf, console=console),
            "-Dzookeeper.admin.enableServer=false",
            "-cp",
            f"{conf}:{self.lib}/*",
            ZK_MAIN,
            str(conf / "zoo.cfg"),
        ]

    def _start_daemon(self, java: str, name: str, spec: ClusterSpec, *, append_output: bool = False) -> Daemon:
        """Start the RM (``rm``), a NodeManager (``nm-<i>``), the NameNode (``nn``) or a DataNode (``dn-<i>``)
        from its configuration in ``conf/<name>``."""
        main, heap = _MAINS[name.split("-")[0]]
        realm = self.realm(spec) if spec.secure else None
        return self._spawn(
            name,
            *self._daemon_command(java, name, main, heap, rm=name == "rm", realm=realm),
            append_output=append_output,
            host=self._host(spec, name),
        )

    def _daemon_command(
        self,
        java: str,
        name: str,
        main: str,
        heap: str,
        *,
        rm: bool = False,
        console: bool = False,
        realm: KerberosRealm | None = None,
    ) -> tuple[list[str], dict[str, str]]:
        conf = self.dir / "conf" / name
        cmd = [java, f"-Xmx{heap}", *JVM_LEAN, *JAVA17_OPENS, *self._log_props(name, conf, console=console)]
        if realm is not None:
            cmd.append(f"-Djava.security.krb5.conf={realm.krb5_conf}")
        if rm:
            # Where the services API finds the AM's jars when no framework tarball is usable.
            cmd.append(f"-Dservice.libdir={self.lib}")
        cmd += ["-cp", f"{conf}:{self.lib}/*", main]
        daemon_env = {
            "HADOOP_CONF_DIR": str(conf),
            "JAVA_HOME": _java_home(java),
            "HADOOP_YARN_HOME": str(self.lib.parent),
            "HADOOP_COMMON_HOME": str(self.lib.parent),
        }
        if realm is not None:
            daemon_env["KRB5_CONFIG"] = str(realm.krb5_conf)
        return cmd, daemon_env

    def _log_props(self, name: str, conf: Path, *, console: bool = False) -> list[str]:
        logs = self.dir / "logs"
        appender = "console" if console else "RFA"
        return [
            f"-Dsubmarine.cluster.dir={self.dir}",
            f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}",
            f"-Dhadoop.log.dir={logs}",
            f"-Dhadoop.log.file={name}.log",
            f"-Dyarn.log.dir={logs}",
            f"-Dyarn.log.file={name}.log",
            f"-Dhadoop.root.logger=INFO,{appender}",
            f"-Dzookeeper.root.logger=INFO,{appender}",
            f"-Dzookeeper.log.dir={logs}",
            f"-Dzookeeper.log.file={name}.log",
        ]

    def daemon_plan(self, role: str, spec: ClusterSpec, placement: Placement, *, node: int = 0) -> DaemonPlan:
        """What running one daemon of ``spec`` in the foreground takes (``submarine cluster daemon``): its
        command line and environment, and the configuration files, directories and ApplicationMaster
        archive to prepare first (reached by the host names of ``placement``, listening on every
        interface). ``node`` numbers a NodeManager or a DataNode (its ports and directories), for several
        on one host. The NameNode's plan also says how to format it the first time.

        Reads the templates and the jar directory; writes nothing.

        Raises:
            ValueError: ``role`` is not one of ``ROLES``, ``node`` is not below ``spec.nodes``, or an HDFS
                role of a spec without HDFS.
            PrerequisiteError: no Java, no Hadoop jars, no configuration templates.
        """
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
        if role in ("namenode", "datanode") and not spec.hdfs:
            raise ValueError(f"a {role} is part of HDFS: the cluster's spec must have hdfs")
        if not 0 <= node < spec.nodes:
            raise ValueError(f"node must be in [0, {spec.nodes}), got {node}")
        java = self._check_prerequisites()
        logs = self.dir / "logs"
        if role == "zookeeper":
            files, settings = self._zk_files(spec, "0.0.0.0")
            return DaemonPlan(
                command=tuple(self._zk_command(java, spec, console=True)),
                env={},
                files=files,
                settings=settings,
                directories=(logs, self.dir / "zk"),
            )
        tarball, jars = self._tarball_state()
        name = {"resourcemanager": "rm", "namenode": "nn", "nodemanager": f"nm-{node}", "datanode": f"dn-{node}"}[role]
        main, heap = _MAINS[name.split("-")[0]]
        files, settings = self._conf_files(
            name, spec, tarball, node=None if role in ("resourcemanager", "namenode") else node, placement=placement
        )
        command, added = self._daemon_command(java, name, main, heap, rm=role == "resourcemanager", console=True)
        hdfs_dirs = (self.dir / "hdfs",) if role in ("namenode", "datanode") else ()
        return DaemonPlan(
            command=tuple(command),
            env=added,
            files=files,
            settings=settings,
            directories=(logs, *hdfs_dirs),
            archive=tarball,
            archive_jars=len(jars),
            format_command=tuple(self._format_command(java)) if role == "namenode" else (),
            formatted=self._namenode_image if role == "namenode" else None,
        )

    def prepare(self, plan: DaemonPlan) -> None:
        """Create what ``plan`` needs on disk: its directories, the ApplicationMaster archive (packed when
        stale), its configuration files."""
        for directory in plan.directories:
            directory.mkdir(parents=True, exist_ok=True)
        if plan.archive is not None:
            self._dependency_tarball(lambda msg: log.info("%s", msg))
        _write_files(plan.files)

    def daemon_command(
        self, role: str, spec: ClusterSpec, placement: Placement, *, node: int = 0
    ) -> tuple[list[str], dict[str, str]]:
        """:meth:`daemon_plan`, prepared on disk (:meth:`prepare`): the command line and environment to run.

        Raises:
            ValueError: ``role`` is not one of ``ROLES``, or ``node`` is not below ``spec.nodes``.
            PrerequisiteError: no Java, no Hadoop jars, no configuration templates.
        """
        plan = self.daemon_plan(role, spec, placement, node=node)
        self.prepare(plan)
        return list(plan.command), dict(plan.env)

    def _spawn(
        self,
        name: str,
        cmd: list[str],
        env: dict[str, str] | None,
        *,
        append_output: bool = False,
        host: Host | None = None,
    ) -> Daemon:
        """Start one daemon in a session of its own, its stdout and stderr to ``logs/<name>.out`` (appended to
        on a restart, so what the previous run printed stays); on ``host``, inside its namespace (the
        commands that enter it replace themselves with the daemon, so the pid is the daemon's)."""
        out = self.dir / "logs" / f"{name}.out"
        proc_env = dict(os.environ)
        proc_env.update(env or {})
        with out.open("ab" if append_output else "wb") as stdout:
            proc = subprocess.Popen(
                host.command(cmd) if host else cmd,
                stdout=stdout,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.dir,
                env=proc_env,
                start_new_session=True,
            )
        log.info("started %s pid %d", name, proc.pid)
        daemon = Daemon(name, proc.pid, _start_ticks(proc.pid), self.dir / "logs" / f"{name}.log")
        _CHILDREN[proc.pid] = proc
        return daemon

    def _wait_nodes(
        self,
        spec: ClusterSpec,
        nms: list[Daemon],
        timeout: float,
        say: Progress,
        *,
        fresh_since: Mapping[str, float] | None = None,
    ) -> None:
        """Block until every NM of ``nms`` is RUNNING in the RM (polled every 0.5 s, at most ``timeout`` s).
        An NM named in ``fresh_since`` must also have reported its health since that time (seconds since
        the epoch): after a restart the RM lists the NM it knew until the new one registers.

        Raises:
            DaemonStartError: an NM exited, or one did not register in time (naming it, with its log).
        """
        since_ms = {name: at * 1000 for name, at in (fresh_since or {}).items()}
        auth = self._rm_auth(spec)
        seen = -1
        ready: set[str] = set()

        def node_id(d: Daemon) -> str:
            index = int(d.name.removeprefix("nm-"))
            return f"{spec.node_host(index)}:{spec.nm_ports(index)['yarn.nodemanager.address']}"

        def key(node: str) -> str:
            # Node ids are "<host>:<NM port>". On loopback the host is what 127.0.0.1 resolves to, and the
            # port tells which NM a node is; on hosts every NM has the same port and its host's name.
            return node if spec.hosts else node.rsplit(":", 1)[-1]

        def all_running() -> bool:
            nonlocal ready, seen
            for d in nms:
                if not _alive(d):
                    raise DaemonStartError(d.name, "exited before registering", d.log, _tail(d))
            nodes = {key(n.node_id): n for n in _rm_nodes(spec.rm_url, auth)}
            ready = {
                d.name
                for d in nms
                if (n := nodes.get(key(node_id(d)))) is not None
                and n.state == "RUNNING"
                and n.last_health_update_ms >= since_ms.get(d.name, 0)
            }
            if len(ready) != seen:
                seen = len(ready)
                say(f"{seen}/{len(nms)} NodeManagers RUNNING")
            return len(ready) == len(nms)

        def missing(_state: RetryCallState) -> bool:
            worst = next((d for d in nms if d.name not in ready), nms[0])
            raise DaemonStartError(
                worst.name, f"did not register with the ResourceManager within {timeout:.0f} s", worst.log, _tail(worst)
            )

        if nms:
            _poll(all_running, timeout, 0.5, missing)

    # ------------------------------------------------------------------ down

    def down(self, *, progress: Progress | None = None) -> list[Daemon]:
        """Stop exactly the daemons ``up`` recorded, then any container process they left behind.

        NMs first, then the RM, then ZooKeeper; each gets SIGTERM and ``DAEMON_GRACE_S`` before SIGKILL.
        The NodeManagers leave their containers running (supervised NM recovery), so the containers are
        stopped last, with everything else left behind. On hosts, the host network goes last: every
        namespace (with any process still in it), link, the bridge and the hosts files, also when ``up``
        crashed before it recorded a daemon. Blocks until every process is gone.

        Returns:
            The daemons that were stopped.

        Raises:
            ClusterNotUpError: nothing is recorded in the cluster directory (no daemon, no host network).
            HostNetworkError: a part of the host network could not be removed.
        """
        say = progress or (lambda _msg: None)
        state = self._read_state()
        if state is None:
            if HostNetwork.recorded(self.dir) is None:
                raise ClusterNotUpError(f"no cluster in {self.dir}")
            say("no daemon recorded; removing the host network that `up` made")
            self._kill_orphans()
            self._destroy_network(say)
            return []
        _spec, daemons = state
        alive = [d for d in daemons if _alive(d)]
        # Below the daemons now; a container process that made a session of its own is still here, and
        # the NodeManagers may leave their containers running when they stop (NM recovery).
        below = _descendants(p for d in alive if (p := _process(d)) is not None)
        say(f"stopping {', '.join(d.name for d in alive) or 'nothing (all daemons already exited)'}")
        self._stop(daemons)
        orphans = self._kill_orphans(below)
        if orphans:
            say(f"stopped {len(orphans)} leftover container processes")
        self._destroy_network(say)
        self.state_file.unlink(missing_ok=True)
        return alive

    def _stop(self, daemons: Iterable[Daemon]) -> None:
        """NodeManagers together, then the RM, the DataNodes, the NameNode, then ZooKeeper and the KDC."""
        by_name = list(daemons)
        for wave in (
            [d for d in by_name if d.name.startswith("nm-")],
            [d for d in by_name if d.name == "rm"],
            [d for d in by_name if d.name.startswith("dn-")],
            [d for d in by_name if d.name == "nn"],
            [d for d in by_name if d.name in ("zk", "kdc")],
        ):
            _terminate(wave, grace=DAEMON_GRACE_S)

    def _kill_orphans(self, known: Iterable[psutil.Process] = ()) -> list[int]:
        """Stop what is left of this cluster: the ``known`` processes (found below its daemons before they
        stopped) that still run, and the processes that name this cluster on their command line, with
        everything below them. Never this process or its ancestors. SIGTERM, then SIGKILL after
        ``LEFTOVER_GRACE_S``; blocks until they are gone (at most a few seconds more).

        Returns:
            The pids stopped.
        """
        spared = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
        roots = [p for p in known if _still_runs(p)] + self._named_processes()
        victims = [p for p in _descendants(roots, including=True) if p.pid not in spared]
        for proc in victims:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _gone, left = psutil.wait_procs(victims, timeout=LEFTOVER_GRACE_S)
        for proc in left:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(left, timeout=5.0)
        return [p.pid for p in victims]

    def _named_processes(self) -> list[psutil.Process]:
        """Processes whose command line names this cluster: a daemon (``-Dsubmarine.cluster.dir=<dir>``, the
        KDC's pid file ``<dir>/krb5/kdc.pid``), or a container's launch script or ApplicationMaster (a path
        under ``<dir>/nm-<i>/``)."""
        daemon_flag = f"-Dsubmarine.cluster.dir={self.dir}"
        kdc_pid_file = str(self.dir / "krb5" / "kdc.pid")
        container_paths = f"{self.dir}/nm-"
        named = []
        for proc in psutil.process_iter(["cmdline"]):
            args = proc.info["cmdline"] or []
            if daemon_flag in args or kdc_pid_file in args or any(container_paths in arg for arg in args):
                named.append(proc)
        return named

    # ------------------------------------------------------------------ status

    def _hosts(self, spec: ClusterSpec) -> list[HostStatus]:
        """Each host of a cluster on hosts, whether its namespace exists, and the daemons placed on it."""
        network = self.network(spec)
        if network is None:
            return []
        present = {h.index for h in network.present()}
        placed = {name: spec.daemon_host(name) for name in spec.daemon_names()}
        return [
            HostStatus(host=h, present=h.index in present, daemons=tuple(n for n, i in placed.items() if i == h.index))
            for h in network.all_hosts
        ]

    def status(self) -> ClusterStatus:
        """The recorded daemons (and whether each runs), nodes, capacity and running yarn services.

        Blocks for at most a few seconds (HTTP timeouts to the RM). An RM that does not answer is
        reported in ``rm_error``, not raised.

        Raises:
            ClusterNotUpError: nothing is recorded in the cluster directory.
        """
        state = self._read_state()
        if state is None:
            raise ClusterNotUpError(f"no cluster in {self.dir}; start one with `submarine cluster up`")
        spec, daemons = state
        info = _namenode_info(spec.webhdfs_url) if spec.webhdfs_url else None
        result = ClusterStatus(
            rm_url=spec.rm_url,
            daemons=[(d, _alive(d)) for d in daemons],
            hosts=self._hosts(spec),
            default_fs=spec.default_fs if spec.hdfs else None,
            webhdfs_url=spec.webhdfs_url,
            datanodes_live=None if info is None else len(info["live"]),
        )
        try:
            auth = self._rm_auth(spec)
            metrics = _get_json(f"{spec.rm_url}/ws/v1/cluster/metrics", auth=auth)["clusterMetrics"]
            nodes = _rm_nodes(spec.rm_url, auth)
            with self.rm_client(spec, retries=0) as yarn:
                apps = yarn.list()
                queue_reports = yarn.queues() if spec.queues else []
        except (requests.RequestException, YarnError) as exc:
            return dataclasses.replace(result, rm_error=f"ResourceManager at {spec.rm_url} not answering: {exc}")
        services = [
            ServiceSummary(
                name=a.name,
                app_id=a.id,
                state=str(a.state),
                allocated_memory_mb=a.allocated_mb or 0,
                containers=a.running_containers or 0,
            )
            for a in apps
        ]
        return dataclasses.replace(
            result,
            nodes=nodes,
            services=sorted(services, key=lambda s: s.name),
            total_memory_mb=int(metrics["totalMB"]),
            allocated_memory_mb=int(metrics["allocatedMB"]),
            total_vcores=int(metrics["totalVirtualCores"]),
            allocated_vcores=int(metrics["allocatedVirtualCores"]),
            queues=queue_reports,
        )


# ---------------------------------------------------------------------- helpers

_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
#: Each JVM daemon's main class and heap, by the prefix of its name.
_MAINS = {"rm": (RM_MAIN, RM_HEAP), "nm": (NM_MAIN, NM_HEAP), "nn": (NN_MAIN, NN_HEAP), "dn": (DN_MAIN, DN_HEAP)}


def _datanode_address(spec: ClusterSpec, index: int) -> str:
    """The data-transfer address DataNode ``index`` registers with the NameNode."""
    host = host_address(spec.subnet, index) if spec.hosts else spec.host
    return f"{host}:{spec.datanode_ports(index)['dfs.datanode.address']}"


def _datanode_registered(spec: ClusterSpec, index: int) -> bool:
    """Whether DataNode ``index`` says (its JMX servlet) that it is registered with the NameNode."""
    host = host_address(spec.subnet, index) if spec.hosts else spec.host
    port = spec.datanode_ports(index)["dfs.datanode.http.address"]
    try:
        beans = _get_json(f"http://{host}:{port}/jmx", params={"qry": "Hadoop:service=DataNode,name=DataNodeInfo"})[
            "beans"
        ]
        actors = json.loads(beans[0]["BPServiceActorInfo"])
    except (requests.RequestException, KeyError, IndexError, ValueError, TypeError):
        return False
    return any(actor.get("ActorState") == "RUNNING" for actor in actors)


def _namenode_info(webhdfs_url: str) -> dict[str, Any] | None:
    """The NameNode's live DataNodes (by name, each with its ``xferaddr``) and whether it is in safe mode,
    from its JMX servlet at its web address; None while it does not answer."""
    try:
        beans = _get_json(f"{webhdfs_url}/jmx", params={"qry": "Hadoop:service=NameNode,name=NameNodeInfo"})["beans"]
        return {"live": json.loads(beans[0]["LiveNodes"]), "safemode": bool(beans[0].get("Safemode"))}
    except (requests.RequestException, KeyError, IndexError, ValueError, TypeError):
        return None


def _java_path() -> str:
    home = os.environ.get("JAVA_HOME")
    path = os.environ.get("PATH", "")
    return f"{home}/bin:{path}" if home else path


def _java_home(java: str) -> str:
    return os.environ.get("JAVA_HOME") or str(Path(java).resolve().parent.parent)


def _write_files(files: Mapping[Path, bytes]) -> None:
    """Write each file; a script (``#!``) executable by its owner and readable by all, the others as the umask
    says."""
    for path, content in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        if content.startswith(b"#!"):
            path.chmod(0o755)


def hdfs_addresses(conf_dir: Path) -> tuple[str, str] | None:
    """The HDFS a Hadoop client configuration names: its ``fs.defaultFS`` and the NameNode's WebHDFS address
    (``http://`` + ``dfs.namenode.http-address``), or None when its file system is not HDFS.

    Raises:
        PrerequisiteError: the directory lacks ``core-site.xml``, or names HDFS without ``hdfs-site.xml``
            saying where its NameNode's web address is.
    """
    try:
        default_fs = _xml_value((conf_dir / "core-site.xml").read_bytes(), "fs.defaultFS") or ""
        if not default_fs.startswith("hdfs://"):
            return None
        web = _xml_value((conf_dir / "hdfs-site.xml").read_bytes(), "dfs.namenode.http-address")
    except (OSError, ET.ParseError) as exc:
        raise PrerequisiteError(f"HADOOP_CONF_DIR {conf_dir}: {exc}") from exc
    if not web:
        raise PrerequisiteError(f"HADOOP_CONF_DIR {conf_dir}: hdfs-site.xml has no dfs.namenode.http-address")
    return default_fs, f"http://{web}"


def spnego_settings(realm: KerberosRealm) -> dict[str, str]:
    """The ``core-site.xml`` settings that put a daemon's web endpoints (the RM's REST API, Services API
    ``/app/v1/services`` and UI; a NodeManager's REST API and UI) behind SPNEGO with the realm's
    ``HTTP/<host>`` key: no anonymous access, ``?user.name=`` no longer names anyone. RPC between the daemons
    stays simple auth."""
    return {
        "hadoop.http.filter.initializers": "org.apache.hadoop.security.AuthenticationFilterInitializer",
        "hadoop.http.authentication.type": "kerberos",
        "hadoop.http.authentication.simple.anonymous.allowed": "false",
        "hadoop.http.authentication.kerberos.principal": realm.http_principal,
        "hadoop.http.authentication.kerberos.keytab": str(realm.http_keytab),
    }


def _xml_value(text: bytes, key: str) -> str | None:
    """The value of one property of a Hadoop ``*-site.xml``, or None."""
    for prop in ET.fromstring(text).findall("property"):
        if prop.findtext("name") == key:
            return (prop.findtext("value") or "").strip()
    return None


def _override_xml(path: Path, values: dict[str, str]) -> None:
    path.write_bytes(_xml_with(path.read_bytes(), values))


def _xml_with(text: bytes, values: Mapping[str, str]) -> bytes:
    """A Hadoop ``*-site.xml`` with ``values`` set (existing properties changed, new ones added)."""
    root = ET.fromstring(text)
    tree = ET.ElementTree(root)
    existing = {p.findtext("name"): p for p in root.findall("property")}
    for key, value in values.items():
        prop = existing.get(key)
        if prop is None:
            prop = ET.SubElement(root, "property")
            ET.SubElement(prop, "name").text = key
            ET.SubElement(prop, "value")
        value_el = prop.find("value")
        if value_el is None:
            value_el = ET.SubElement(prop, "value")
        value_el.text = value
    out = io.BytesIO()
    tree.write(out, encoding="utf-8", xml_declaration=True)
    return out.getvalue()


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As the JVM servers do: a port in TIME_WAIT after a previous cluster is free to bind.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _start_ticks(pid: int) -> int:
    """The process's start time in clock ticks since boot, or -1 when there is no such process. With the
    pid it names one process: a pid is reused, a start time is not (and, unlike the wall-clock
    ``create_time``, it does not move when the system clock is set)."""
    try:
        created = psutil.Process(pid).create_time()
    except psutil.Error:
        return -1
    return round((created - psutil.boot_time()) * _CLOCK_TICKS)


def _process(d: Daemon) -> psutil.Process | None:
    """The recorded daemon's process while it runs (not a zombie, not another process with its pid)."""
    try:
        proc = psutil.Process(d.pid)
        if _start_ticks(d.pid) != d.start_ticks or proc.status() == psutil.STATUS_ZOMBIE:
            return None
    except psutil.Error:
        return None
    return proc


def _alive(d: Daemon) -> bool:
    child = _CHILDREN.get(d.pid)
    if child is not None and child.poll() is not None:
        return False
    return _process(d) is not None


def _still_runs(proc: psutil.Process) -> bool:
    """The same process as when ``proc`` was made (psutil checks its start time) and not a zombie."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _descendants(roots: Iterable[psutil.Process], *, including: bool = False) -> list[psutil.Process]:
    """Every process below ``roots`` (and the roots themselves, ``including``), each once."""
    found: dict[int, psutil.Process] = {}
    for root in roots:
        if including:
            found[root.pid] = root
        with contextlib.suppress(psutil.Error):
            for child in root.children(recursive=True):
                found.setdefault(child.pid, child)
    return list(found.values())


def _terminate(daemons: list[Daemon], grace: float, *, group: bool = True) -> None:
    """SIGTERM every daemon, wait up to ``grace`` seconds for all, then SIGKILL the process group of each
    one left (each daemon leads its own session), or with ``group=False`` the daemon alone: a NodeManager's
    group holds its containers' launch scripts, which a restarted NodeManager takes back."""
    procs = {d.name: p for d in daemons if (p := _process(d)) is not None}
    for proc in procs.values():
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _gone, left = psutil.wait_procs(list(procs.values()), timeout=grace)
    for name, proc in procs.items():
        if proc in left:
            log.warning("%s (pid %d) ignored SIGTERM for %.0f s; killing it", name, proc.pid, grace)
            with contextlib.suppress(ProcessLookupError, psutil.Error):
                if group:
                    os.killpg(proc.pid, signal.SIGKILL)
                else:
                    proc.kill()
    psutil.wait_procs(left, timeout=5.0)
    for d in daemons:
        _reap(d.pid)


def _reap(pid: int) -> None:
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        _CHILDREN.pop(pid, None)


def _tail(d: Daemon, lines: int = 25) -> str:
    chunks = []
    for path in (d.log, d.log.with_suffix(".out")):
        try:
            text = path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            continue
        if text:
            chunks.append("\n".join(text))
    return "\n".join(chunks) or "(no log output)"


def _wait(ready: Callable[[], bool], timeout: float, daemon: Daemon, what: str) -> None:
    """Block until ``ready()`` (polled every 0.3 s, at most ``timeout`` s).

    Raises:
        DaemonStartError: the daemon exited meanwhile, or ``ready()`` stayed false (``what``).
    """

    def check() -> bool:
        if ready():
            return True
        if not _alive(daemon):
            raise DaemonStartError(daemon.name, "exited during start", daemon.log, _tail(daemon))
        return False

    def timed_out(_state: RetryCallState) -> bool:
        raise DaemonStartError(daemon.name, f"{what} within {timeout:.0f} s", daemon.log, _tail(daemon))

    _poll(check, timeout, 0.3, timed_out)


def _poll(
    check: Callable[[], bool], timeout: float, interval: float, give_up: Callable[[RetryCallState], bool]
) -> None:
    """Call ``check`` every ``interval`` s until it returns True; after ``timeout`` s, ``give_up`` (which
    raises). What ``check`` raises ends the polling."""
    Retrying(
        stop=stop_after_delay(timeout),
        wait=wait_fixed(interval),
        retry=retry_if_result(lambda done: not done),
        retry_error_callback=give_up,
    )(check)


def _zk_ok(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"
    except OSError:
        return False


def _get_json(url: str, params: dict[str, str] | None = None, *, auth: requests.auth.AuthBase | None = None) -> dict:
    """GET a ResourceManager REST resource as the YARN user (the cluster refuses anonymous requests): with
    ``auth`` (SPNEGO on a secure cluster) on a session of its own that sends no cookie in its stead (see
    ``yarn.client.refuse_cookies``), else simple auth."""
    query = {**({} if auth is not None else {"user.name": env.yarn_user()}), **(params or {})}
    with refuse_cookies(requests.Session()) as session:
        resp = session.get(url, params=query, timeout=5.0, headers={"Accept": "application/json"}, auth=auth)
    resp.raise_for_status()
    return resp.json()


def _rm_started(rm_url: str, auth: requests.auth.AuthBase | None = None) -> bool:
    try:
        info = _get_json(f"{rm_url}/ws/v1/cluster/info", auth=auth)["clusterInfo"]
    except (requests.RequestException, KeyError, ValueError):
        return False
    return info.get("state") == "STARTED"


def _rm_nodes(rm_url: str, auth: requests.auth.AuthBase | None = None) -> list[NodeInfo]:
    try:
        raw = _get_json(f"{rm_url}/ws/v1/cluster/nodes", auth=auth)
    except requests.RequestException:
        return []
    nodes = (raw.get("nodes") or {}).get("node") or []
    return [
        NodeInfo(
            node_id=n["id"],
            state=n["state"],
            used_memory_mb=int(n.get("usedMemoryMB", 0)),
            available_memory_mb=int(n.get("availMemoryMB", 0)),
            used_vcores=int(n.get("usedVirtualCores", 0)),
            available_vcores=int(n.get("availableVirtualCores", 0)),
            containers=int(n.get("numContainers", 0)),
            last_health_update_ms=int(n.get("lastHealthUpdate", 0)),
            used_gpus=resource_values(n.get("usedResource")).get(GPU_RESOURCE, 0),
            available_gpus=resource_values(n.get("availableResource")).get(GPU_RESOURCE, 0),
        )
        for n in nodes
    ]
