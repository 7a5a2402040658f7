"""A real Hadoop YARN pseudo-cluster on loopback: ZooKeeper, a ResourceManager with the YARN
Services API, and N NodeManagers, each its own JVM started from the Maven-resolved jars.

With ``ClusterSpec.hosts`` the same daemons run on that many hosts instead, network namespaces on one
bridge (``cluster.netns``): ZooKeeper and the RM on host 0 bound to its address, one NodeManager on every
host bound to its host name, so every container of host K runs inside namespace K (a NodeManager's children
inherit it). The CLI in the root namespace reaches the RM at host 0's address, through the bridge.

:class:`LocalCluster` runs the steps; each part has its module: the state file (``state``), the Hadoop
configuration (``hadoop_conf``), the JVM command lines (``jvm``), the processes (``processes``), what the
daemons answer (``probes``, ``hdfs``), the jars and the AM's archive (``jars``), one daemon in the foreground
(``foreground``).

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

A cluster that died (every daemon gone, ``cluster.json`` left: a power loss, a reboot) is started again by
``up`` with the state kept in ``zk/``, ``hdfs/``, ``krb5/`` and ``nm-<i>/`` (``state.recovery``); ``up --fresh``
clears the directory first, as ``up`` does after ``down``.

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

import dataclasses
import os
import shutil
import time
from pathlib import Path
from typing import Any

import requests

from submarine_elastic import env
from submarine_elastic.cluster import foreground
from submarine_elastic.cluster.api import (
    ClusterAlreadyUpError,
    ClusterNotUpError,
    ClusterSpec,
    ClusterStatus,
    Daemon,
    DaemonNotRunningError,
    DaemonPlan,
    Host,
    HostStatus,
    Placement,
    PortInUseError,
    PrerequisiteError,
    Progress,
    ServiceSummary,
    UnknownDaemonError,
)
from submarine_elastic.cluster.hadoop_conf import CONF_FILES, HadoopConf, write_files
from submarine_elastic.cluster.hdfs import (
    format_namenode,
    init_hdfs,
    namenode_info,
    wait_datanodes,
    wait_writable,
)
from submarine_elastic.cluster.jars import am_archive, pack_am_archive
from submarine_elastic.cluster.jvm import JvmCommands, find_java
from submarine_elastic.cluster.kdc import KerberosRealm, kdc_answers
from submarine_elastic.cluster.netns import HostNetwork, check_prerequisites
from submarine_elastic.cluster.probes import get_json, rm_nodes, rm_started, wait_nodes, zk_ok
from submarine_elastic.cluster.processes import (
    DAEMON_GRACE_S,
    alive,
    clear_container_pid_files,
    descendants,
    kill_leftovers,
    port_free,
    process_of,
    spawn,
    stop_in_order,
    terminate,
    wait_ready,
)
from submarine_elastic.cluster.state import KEPT_ON_RECOVERY, STATE_FILE, ZK_DATA, StateFile, recovery
from submarine_elastic.yarn import YarnError, YarnServiceClient, spnego_auth


class LocalCluster:
    """Starts, stops and inspects the pseudo-cluster kept in ``cluster_dir``.

    Args:
        cluster_dir: state directory (default ``env.settings().cluster_directory()``).
        hadoop_lib: directory of the Hadoop jars (default ``env.settings().hadoop_lib_directory()``).
        conf_template: the shared configuration files (default ``env.settings().hadoop_conf_template()``).
    """

    def __init__(
        self,
        cluster_dir: Path | None = None,
        *,
        hadoop_lib: Path | None = None,
        conf_template: Path | None = None,
    ) -> None:
        self.dir = (cluster_dir or env.settings().cluster_directory()).resolve()
        self.lib = (hadoop_lib or env.settings().hadoop_lib_directory()).resolve()
        self.conf_template = (conf_template or env.settings().hadoop_conf_template()).resolve()
        self.state = StateFile(self.dir / STATE_FILE)
        self.conf = HadoopConf(self.dir, self.conf_template)
        self.jvm = JvmCommands(self.dir, self.lib)

    # ------------------------------------------------------------------ state

    @property
    def state_file(self) -> Path:
        return self.state.path

    def spec(self) -> ClusterSpec:
        """The spec of the cluster recorded in the directory.

        Raises:
            ClusterNotUpError: nothing is recorded there.
        """
        state = self.state.read()
        if state is None:
            raise ClusterNotUpError(f"no cluster in {self.dir}; start one with `submarine cluster up`")
        return state[0]

    def running_daemons(self) -> list[Daemon]:
        """Recorded daemons whose process still runs."""
        state = self.state.read()
        return [d for d in state[1] if alive(d)] if state else []

    # ------------------------------------------------------------------ up

    def up(
        self, spec: ClusterSpec, *, timeout: float = 180.0, progress: Progress | None = None, fresh: bool = False
    ) -> str:
        """Start ZooKeeper, the RM and the NMs; block until every NM is RUNNING in the RM.

        Over the directory of a cluster that died (its state file outlived every daemon: a power loss, a
        reboot), the same cluster starts again with its state (``state.recovery``): ZooKeeper's data, HDFS, the
        realm and the NodeManagers' recovery directories are kept, so the RM recovers its applications, each
        NodeManager reports its dead containers lost, and YARN Services relaunches every job (a new
        ApplicationMaster attempt). What a power loss leaves stale is cleared: processes of the cluster still
        running, the containers' pid files, the host network. ``fresh`` (``up --fresh``), nothing recorded (a
        cluster stopped by ``down``), an unreadable state file or ZooKeeper's data gone: the directory is
        cleared and a new cluster starts.

        Blocks for up to ``timeout`` seconds per phase (ZooKeeper, RM, NMs). On any failure every
        process started so far is stopped again, so nothing is left half-started.

        Returns:
            The RM web address.

        Raises:
            ClusterAlreadyUpError: daemons recorded in ``cluster_dir`` still run.
            ClusterSpecChangedError: a cluster that died is kept there, and ``spec`` is not the one it ran with
                (nothing was changed).
            PrerequisiteError: no Java, no Hadoop jars, no configuration templates.
            PortInUseError: a port of ``spec`` is taken.
            HostNetworkUnavailableError: on hosts, no ``ip`` command or not root (nothing was made).
            HostNetworkError: on hosts, a namespace could not be made (what was made is removed again).
            DaemonStartError: a daemon exited early or did not get ready in time (with its log tail).
        """
        say = progress or (lambda _msg: None)
        running = self.running_daemons()
        if running:
            pids = ", ".join(f"{d.name}={d.pid}" for d in running)
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
                if not port_free(spec.host, port):
                    raise PortInUseError(port, role)

        recovering = False
        if self.dir.exists():
            recovering, why = (False, "") if fresh else recovery(self.state, spec, self.dir / ZK_DATA)
            if why:
                say(f"the cluster in {self.dir} died; " + (f"starting it again: {why}" if recovering else why))
            # What the dead cluster left running, and its host network, go either way.
            kill_leftovers(self.dir)
            self._destroy_network(say)
            kept = KEPT_ON_RECOVERY + tuple(f"nm-{i}" for i in range(spec.nodes)) if recovering else ()
            for sub in ("conf", "zk", "hdfs", "logs", "tmp", "yarn-services", "krb5") + tuple(
                f"nm-{i}" for i in range(64)
            ):
                if sub not in kept:
                    shutil.rmtree(self.dir / sub, ignore_errors=True)
            if recovering:
                cleared = clear_container_pid_files(self.dir)
                if cleared:
                    say(f"{len(cleared)} containers of the dead cluster: their pid files cleared (reported lost)")
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)

        tarball = pack_am_archive(self.lib, say)
        started: list[Daemon] = []
        network = self.network(spec)
        try:
            if network is not None:
                say(f"making {spec.hosts} hosts on {spec.subnet}: namespaces joined by bridge {network.bridge}")
                network.create()
            if spec.secure:
                realm = self.realm(spec)
                if recovering and realm.user_keytab.is_file() and realm.http_keytab.is_file():
                    say(f"Kerberos realm {realm.realm} kept in {realm.dir}; its KDC on {spec.host}:{spec.kdc_port}")
                    realm.write_config()
                else:
                    say(f"creating Kerberos realm {realm.realm} in {realm.dir}; its KDC on {spec.host}:{spec.kdc_port}")
                    realm.create()
                started.append(self._start_kdc(realm, append_output=recovering))
                self.state.write(spec, started)
                wait_ready(lambda: kdc_answers(spec.host, spec.kdc_port), timeout, started[-1], "did not listen")
            say(f"starting ZooKeeper on {spec.host}:{spec.zk_port}{self._on(spec, 'zk')}")
            started.append(self._start_zookeeper(java, spec, append_output=recovering))
            self.state.write(spec, started)
            wait_ready(lambda: zk_ok(spec.host, spec.zk_port), timeout, started[-1], "did not answer 'ruok'")
            if spec.hdfs:
                self._start_hdfs(java, spec, tarball, started, timeout, say, append_output=recovering)

            say(f"starting ResourceManager (web {spec.rm_url}){self._on(spec, 'rm')}")
            self.conf.write("rm", spec, tarball)
            started.append(self._start_daemon(java, "rm", spec, append_output=recovering))
            self.state.write(spec, started)
            auth = self._rm_auth(spec)
            wait_ready(lambda: rm_started(spec.rm_url, auth), timeout, started[-1], "did not answer on its web address")

            say(f"starting {spec.nodes} NodeManagers" + (", one on each host" if spec.hosts else ""))
            nm_daemons = []
            for i in range(spec.nodes):
                self.conf.write(f"nm-{i}", spec, tarball, node=i)
                nm_daemons.append(self._start_daemon(java, f"nm-{i}", spec, append_output=recovering))
                started.append(nm_daemons[-1])
                self.state.write(spec, started)
            wait_nodes(spec, nm_daemons, timeout, say, auth)
        except BaseException:
            say("start failed; stopping what was started")
            stop_in_order(started)
            if network is not None:
                self._destroy_network(say)
            if not recovering:
                # (A cluster being started again keeps its state file: the next `up` tries again.)
                self.state.remove()
            raise
        say(f"cluster up: ResourceManager at {spec.rm_url}")
        return spec.rm_url

    def _start_hdfs(
        self,
        java: str,
        spec: ClusterSpec,
        tarball: Path,
        started: list[Daemon],
        timeout: float,
        say: Progress,
        *,
        append_output: bool = False,
    ) -> None:
        """Format the NameNode (once: a name directory that holds an image is kept), start it and a DataNode
        per node, wait until every DataNode is live and the NameNode out of safe mode, then make what YARN
        and the jobs need on it (``hdfs.init_hdfs``). Appends each daemon to ``started`` as it starts.

        Raises:
            DaemonStartError: the format failed, or a daemon exited or did not get ready in time.
        """
        say(f"starting HDFS: NameNode {spec.default_fs} (WebHDFS {spec.webhdfs_url}){self._on(spec, 'nn')}")
        self.conf.write("nn", spec, tarball)
        format_namenode(self.dir, self.jvm.format_namenode(java))
        started.append(self._start_daemon(java, "nn", spec, append_output=append_output))
        self.state.write(spec, started)
        datanodes = []
        for i in range(spec.nodes):
            self.conf.write(f"dn-{i}", spec, tarball)
            datanodes.append(self._start_daemon(java, f"dn-{i}", spec, append_output=append_output))
            started.append(datanodes[-1])
            self.state.write(spec, started)
        wait_datanodes(spec, started[-spec.nodes - 1], datanodes, timeout, say)
        init_hdfs(str(spec.webhdfs_url), self.dir, tarball, say)

    def prepare_hdfs(self, webhdfs_url: str, *, timeout: float = 180.0, progress: Progress | None = None) -> None:
        """What ``up`` makes on a fresh HDFS (``hdfs.init_hdfs``), for a cluster whose daemons start one by one
        (``submarine cluster daemon resourcemanager --hdfs``): blocks until the NameNode at ``webhdfs_url``
        has a live DataNode and is out of safe mode (polled every second, at most ``timeout`` s), then makes it.

        Raises:
            DaemonStartError: no NameNode with a live DataNode in time, or HDFS refused the files.
        """
        say = progress or (lambda _msg: None)
        say(f"waiting for HDFS at {webhdfs_url}")
        wait_writable(webhdfs_url, timeout, self.dir / "logs" / "nn.log")
        tarball, _jars = am_archive(self.lib)
        init_hdfs(webhdfs_url, self.dir, tarball, say)

    def _check_prerequisites(self) -> str:
        java = find_java()
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

    def realm(self, spec: ClusterSpec) -> KerberosRealm:
        """The Kerberos realm of a ``secure`` cluster in this directory (its files, principals and KDC address;
        the user's principal is the login user's)."""
        return KerberosRealm.of_cluster(self.dir, spec)

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
        return spawn(self.dir, "kdc", realm.kdc_command(), env=realm.kdc_env(), append_output=append_output)

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

    def _start_zookeeper(self, java: str, spec: ClusterSpec, *, append_output: bool = False) -> Daemon:
        (self.dir / "zk").mkdir(exist_ok=True)
        write_files(self.conf.zk_files(spec, spec.host)[0])
        return spawn(
            self.dir, "zk", self.jvm.zookeeper(java), env=None, append_output=append_output, host=self._host(spec, "zk")
        )

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
        state = self.state.read()
        if state is None:
            raise ClusterNotUpError(f"no cluster in {self.dir}; start one with `submarine cluster up`")
        spec, daemons = state
        if name not in spec.daemon_names():
            raise UnknownDaemonError(name, spec.daemon_names())
        by_name = {d.name: d for d in daemons}
        needs = {"kdc": None, "zk": None, "rm": "zk", "nn": None}.get(name, "nn" if name.startswith("dn-") else "rm")
        if needs is not None and not (needs in by_name and alive(by_name[needs])):
            raise DaemonNotRunningError(
                f"{name} needs {needs}, which is not running; restart it first: `submarine cluster restart {needs}`"
            )
        java = self._check_prerequisites()
        conf = self.realm(spec).kdc_conf if name == "kdc" else self.dir / "conf" / name
        if not conf.exists():
            raise PrerequisiteError(f"{name}'s configuration {conf} is gone; `submarine cluster up` writes it anew")

        old = by_name.get(name)
        if old is not None and alive(old):
            say(f"stopping {name} (pid {old.pid})")
            terminate([old], grace=DAEMON_GRACE_S, group=False)
        else:
            say(f"{name} is not running" + (f" (pid {old.pid} has exited)" if old else ""))
        if not spec.hosts:
            # On hosts the daemon's namespace holds only the cluster's processes.
            for port, role in sorted(spec.daemon_ports(name).items()):
                if not port_free(spec.host, port):
                    raise PortInUseError(port, role)

        say(f"starting {name}{self._on(spec, name)}")
        started_at = time.time()
        if name == "kdc":
            new = self._start_kdc(self.realm(spec), append_output=True)
        elif name == "zk":
            new = spawn(
                self.dir, "zk", self.jvm.zookeeper(java), env=None, append_output=True, host=self._host(spec, "zk")
            )
        else:
            new = self._start_daemon(java, name, spec, append_output=True)
        by_name[name] = new
        daemons = [by_name[n] for n in spec.daemon_names() if n in by_name]
        self.state.write(spec, daemons)

        if name == "kdc":
            wait_ready(lambda: kdc_answers(spec.host, spec.kdc_port), timeout, new, "did not listen")
        if name == "zk":
            wait_ready(lambda: zk_ok(spec.host, spec.zk_port), timeout, new, "did not answer 'ruok'")
        if name == "nn" or name.startswith("dn-"):
            datanodes = [d for d in daemons if d.name.startswith("dn-") and alive(d)]
            wait_datanodes(spec, by_name["nn"], datanodes, timeout, say)
        rm = by_name["rm"]
        if not alive(rm):
            say("rm is not running: `submarine cluster restart rm` starts it")
            return new
        auth = self._rm_auth(spec)
        wait_ready(lambda: rm_started(spec.rm_url, auth), timeout, rm, "did not answer on its web address")
        nms = [d for d in daemons if d.name.startswith("nm-")]
        down = [d.name for d in nms if not alive(d)]
        if down:
            say(f"not running: {', '.join(down)} (`submarine cluster restart` starts each)")
        running = [d for d in nms if d.name not in down]
        fresh = {name: started_at} if name.startswith("nm-") else None
        wait_nodes(spec, running, timeout, say, auth, fresh_since=fresh)
        say(f"{name} restarted (pid {new.pid}); cluster healthy after {time.time() - started_at:.1f} s")
        return new

    def _start_daemon(self, java: str, name: str, spec: ClusterSpec, *, append_output: bool = False) -> Daemon:
        """Start the RM (``rm``), a NodeManager (``nm-<i>``), the NameNode (``nn``) or a DataNode (``dn-<i>``)
        from its configuration in ``conf/<name>``."""
        realm = self.realm(spec) if spec.secure else None
        return spawn(
            self.dir,
            name,
            *self.jvm.daemon(java, name, realm=realm),
            append_output=append_output,
            host=self._host(spec, name),
        )

    def daemon_plan(self, role: str, spec: ClusterSpec, placement: Placement, *, node: int = 0) -> DaemonPlan:
        """What running one daemon of ``spec`` in the foreground takes (``submarine cluster daemon``; see
        ``foreground.plan_daemon``), reached by the host names of ``placement``. Writes nothing.

        Raises:
            ValueError: ``role`` is not one of ``ROLES``, ``node`` is not below ``spec.nodes``, or an HDFS
                role of a spec without HDFS.
            PrerequisiteError: no Java, no Hadoop jars, no configuration templates.
        """
        foreground.check_role(role, spec, node)
        return foreground.plan_daemon(self.conf, self.jvm, self._check_prerequisites(), role, spec, placement, node)

    def prepare(self, plan: DaemonPlan) -> None:
        """Create what ``plan`` needs on disk: its directories, the ApplicationMaster archive (packed when
        stale), its configuration files."""
        foreground.prepare(plan, self.lib)

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
        state = self.state.read()
        if state is None:
            if HostNetwork.recorded(self.dir) is None:
                raise ClusterNotUpError(f"no cluster in {self.dir}")
            say("no daemon recorded; removing the host network that `up` made")
            kill_leftovers(self.dir)
            self._destroy_network(say)
            return []
        _spec, daemons = state
        running = [d for d in daemons if alive(d)]
        # Below the daemons now; a container process that made a session of its own is still here, and
        # the NodeManagers may leave their containers running when they stop (NM recovery).
        below = descendants(p for d in running if (p := process_of(d)) is not None)
        say(f"stopping {', '.join(d.name for d in running) or 'nothing (all daemons already exited)'}")
        stop_in_order(daemons)
        orphans = kill_leftovers(self.dir, below)
        if orphans:
            say(f"stopped {len(orphans)} leftover container processes")
        self._destroy_network(say)
        self.state.remove()
        return running

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
        state = self.state.read()
        if state is None:
            raise ClusterNotUpError(f"no cluster in {self.dir}; start one with `submarine cluster up`")
        spec, daemons = state
        info = namenode_info(spec.webhdfs_url) if spec.webhdfs_url else None
        result = ClusterStatus(
            rm_url=spec.rm_url,
            daemons=[(d, alive(d)) for d in daemons],
            hosts=self._hosts(spec),
            default_fs=spec.default_fs if spec.hdfs else None,
            webhdfs_url=spec.webhdfs_url,
            datanodes_live=None if info is None else len(info["live"]),
        )
        try:
            auth = self._rm_auth(spec)
            metrics = get_json(f"{spec.rm_url}/ws/v1/cluster/metrics", auth=auth)["clusterMetrics"]
            nodes = rm_nodes(spec.rm_url, auth)
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
