"""``submarine cluster up|down|restart|status|daemon``: the local Hadoop YARN pseudo-cluster, or one of its
daemons in the foreground (a container of the docker-compose cluster)."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
from pathlib import Path

import click
from rich.console import Console

from submarine_elastic.cli.tables import table
from submarine_elastic.cluster import (
    DEFAULT_SUBNET,
    MAX_GPUS_PER_NODE,
    MAX_HOSTS,
    ROLES,
    ClusterError,
    ClusterSpec,
    DaemonPlan,
    LocalCluster,
    Placement,
    QueueSpec,
)
from submarine_elastic.cluster.queues import parse_queues

console = Console()
err = Console(stderr=True)


def _cluster(cluster_dir: Path | None) -> LocalCluster:
    return LocalCluster(cluster_dir)


def _progress(msg: str) -> None:
    err.print(f"[dim]•[/dim] {msg}")


dir_option = click.option(
    "--cluster-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="State directory of the cluster [default: $SUBMARINE_CLUSTER_DIR or ~/.submarine-elastic/cluster].",
)


@click.group()
def cluster() -> None:
    """Start, stop and inspect the local Hadoop YARN pseudo-cluster."""


node_memory_option = click.option(
    "--node-memory-mb",
    type=click.IntRange(min=512),
    default=4096,
    show_default=True,
    help="Memory each NodeManager offers to containers.",
)
node_vcores_option = click.option(
    "--node-vcores",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Virtual cores each NodeManager offers to containers.",
)
gpus_option = click.option(
    "--gpus-per-node",
    type=click.IntRange(min=0, max=MAX_GPUS_PER_NODE),
    default=0,
    show_default=True,
    help="GPUs each NodeManager offers as YARN's yarn.io/gpu, found by YARN's GPU plugin through a stand-in "
    "nvidia-smi (copies of a real H200's; no CUDA device behind them); 0: no GPU resource type.",
)


def _queues(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[QueueSpec, ...]:
    try:
        return parse_queues(value) if value else ()
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc


queues_option = click.option(
    "--queues",
    callback=_queues,
    default=None,
    metavar="NAME:CAPACITY[:MAX],...",
    help="CapacityScheduler queues under root, each with its guaranteed and maximum share of the cluster in "
    "percent (e.g. prod:60,research:40:100; MAX defaults to 100, the guarantees add up to 100), and the "
    "preemption monitor on: a queue below its guarantee takes it back from queues above theirs "
    "[default: the one queue root.default, no preemption].",
)
port_base_option = click.option(
    "--port-base",
    type=click.IntRange(min=1024, max=65000),
    default=18000,
    show_default=True,
    help="Ports are base+offset: ZooKeeper base+181, RM web base+88, NM i base+100+10i.",
)


@cluster.command()
@dir_option
@click.option(
    "--nodes",
    type=click.IntRange(min=1, max=16),
    default=None,
    help="Number of NodeManagers [default: 2; on --hosts one a host].",
)
@click.option(
    "--hosts",
    type=click.IntRange(min=1, max=MAX_HOSTS),
    default=None,
    help="Run the daemons on this many hosts, network namespaces joined by a bridge (needs root and iproute2): "
    "ZooKeeper and the RM on host-0, a NodeManager on each host.",
)
@click.option(
    "--subnet",
    default=None,
    help=f"With --hosts, the IPv4 range the bridge and the hosts take their addresses from "
    f"[default: {DEFAULT_SUBNET}].",
)
@node_memory_option
@node_vcores_option
@gpus_option
@queues_option
@port_base_option
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=180,
    show_default=True,
    help="Seconds to wait for each daemon to get ready.",
)
@click.option(
    "--secure",
    is_flag=True,
    help="Start a Kerberos KDC of the cluster's own (realm SUBMARINE.TEST, port base+89) and put the RM's web "
    "endpoints behind SPNEGO; prints what a client sets to authenticate.",
)
@click.option(
    "--hdfs/--no-hdfs",
    default=None,
    help="HDFS: a NameNode (on host-0) and a DataNode beside each NodeManager, the cluster's fs.defaultFS; job "
    "files are then kept on it [default: on with --hosts, off on loopback].",
)
@click.option(
    "--fresh",
    is_flag=True,
    help="Over the directory of a cluster that died (power loss, reboot): clear it and start a new cluster, "
    "dropping its jobs [default: start the same cluster again, its jobs relaunched by YARN].",
)
def up(
    cluster_dir: Path | None,
    nodes: int | None,
    hosts: int | None,
    subnet: str | None,
    node_memory_mb: int,
    node_vcores: int,
    gpus_per_node: int,
    queues: tuple[QueueSpec, ...],
    port_base: int,
    timeout: float,
    secure: bool,
    hdfs: bool | None,
    fresh: bool,
) -> None:
    """Start ZooKeeper, a ResourceManager (with the YARN Services API) and NodeManagers on loopback, or with
    --hosts on that many hosts (network namespaces); with --hdfs also a NameNode and DataNodes. Over a cluster
    that died, start it again with its state (same options), unless --fresh."""
    if hosts is None and subnet is not None:
        raise click.BadParameter("--subnet places hosts: give --hosts too", param_hint="--subnet")
    if hosts is not None and nodes not in (None, hosts):
        raise click.BadParameter(
            f"a cluster on hosts runs one NodeManager a host: --nodes {nodes} with --hosts {hosts}",
            param_hint="--nodes",
        )
    try:
        spec = ClusterSpec(
            nodes=hosts or nodes or 2,
            node_memory_mb=node_memory_mb,
            node_vcores=node_vcores,
            port_base=port_base,
            secure=secure,
            hosts=hosts or 0,
            subnet=subnet or DEFAULT_SUBNET,
            hdfs=hdfs,
            gpus_per_node=gpus_per_node,
            queues=queues,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    local = _cluster(cluster_dir)
    try:
        url = local.up(spec, timeout=timeout, progress=_progress, fresh=fresh)
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    console.print(f"ResourceManager: [bold]{url}[/bold]", soft_wrap=True)
    if spec.hdfs:
        console.print(f"HDFS: [bold]{spec.default_fs}[/bold] (WebHDFS {spec.webhdfs_url})", soft_wrap=True)
    network = local.network(spec)
    if network is not None:
        for host in network.all_hosts:
            console.print(f"{host.name} {host.address} (namespace {host.namespace})", highlight=False)
    if secure:
        realm = local.realm(spec)
        console.print(
            f"Kerberos realm {realm.realm}, KDC {spec.host}:{spec.kdc_port}; to authenticate as {realm.user_principal}:"
        )
        for key, value in realm.client_env().items():
            console.print(f"export {key}={shlex.quote(value)}", soft_wrap=True, highlight=False)


@cluster.command()
@dir_option
@click.argument("role", type=click.Choice(ROLES))
@click.option("--zk-host", default="zookeeper", show_default=True, help="Host name ZooKeeper is reached by.")
@click.option("--rm-host", default="resourcemanager", show_default=True, help="Host name the RM is reached by.")
@click.option("--nn-host", default="namenode", show_default=True, help="Host name the NameNode is reached by.")
@click.option(
    "--hdfs",
    is_flag=True,
    help="The cluster has HDFS: fs.defaultFS on the NameNode at --nn-host (namenode and datanode imply it).",
)
@click.option(
    "--node-host", default=None, help="Host name this NodeManager is reached by [default: this machine's name]."
)
@click.option(
    "--node",
    type=click.IntRange(min=0, max=15),
    default=0,
    show_default=True,
    help="Which NodeManager this is, for several on one host (its ports and directories).",
)
@node_memory_option
@node_vcores_option
@gpus_option
@queues_option
@port_base_option
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print what it would write (files and the settings they change, directories, the AM archive), "
    "the environment and the command, and write nothing.",
)
@click.option(
    "--prepare",
    is_flag=True,
    help="Write the configuration and the AM archive, print the environment and the command, and stop "
    "(an image build prepares the archive so).",
)
def daemon(
    cluster_dir: Path | None,
    role: str,
    zk_host: str,
    rm_host: str,
    nn_host: str,
    hdfs: bool,
    node_host: str | None,
    node: int,
    node_memory_mb: int,
    node_vcores: int,
    gpus_per_node: int,
    queues: tuple[QueueSpec, ...],
    port_base: int,
    dry_run: bool,
    prepare: bool,
) -> None:
    """Run one daemon (ROLE) in the foreground, logging to stderr.

    What each container of the docker-compose cluster runs: the daemons reach each other by host name
    and listen on every interface. `up` starts all of them on one host instead.
    """
    if dry_run and prepare:
        raise click.BadParameter("--dry-run writes nothing and --prepare writes: choose one", param_hint="--prepare")
    try:
        spec = ClusterSpec(
            nodes=node + 1,
            node_memory_mb=node_memory_mb,
            node_vcores=node_vcores,
            port_base=port_base,
            hdfs=hdfs or role in ("namenode", "datanode"),
            gpus_per_node=gpus_per_node,
            queues=queues,
        )
        placement = Placement(
            zk_host=zk_host, rm_host=rm_host, node_host=node_host or socket.gethostname(), nn_host=nn_host
        )
        local = _cluster(cluster_dir)
        plan = local.daemon_plan(role, spec, placement, node=node)
    except (ClusterError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    if dry_run:
        _show_plan(plan)
    else:
        local.prepare(plan)
    if dry_run or prepare:
        for key, value in sorted(plan.env.items()):
            click.echo(f"{key}={shlex.quote(value)}")
        click.echo(shlex.join(plan.command))
        return
    os.chdir(local.dir)
    if role == "resourcemanager" and spec.hdfs:
        # What `up` makes on a fresh HDFS before the RM starts: the shared directories, the AM's jar archive.
        try:
            local.prepare_hdfs(f"http://{nn_host}:{spec.namenode_web_port}", progress=lambda m: click.echo(m, err=True))
        except ClusterError as exc:
            raise click.ClickException(str(exc)) from exc
    if plan.formatted is not None and not plan.formatted.is_file():
        click.echo(f"formatting the NameNode's name directory (no {plan.formatted} yet)", err=True)
        done = subprocess.run(plan.format_command, env={**os.environ, **plan.env}, check=False)
        if done.returncode != 0:
            raise click.ClickException(f"the NameNode's format failed (exit {done.returncode})")
    os.execve(plan.command[0], list(plan.command), {**os.environ, **plan.env})


def _show_plan(plan: DaemonPlan) -> None:
    """What :meth:`LocalCluster.prepare` would do, as shell comments."""
    for directory in plan.directories:
        if not directory.is_dir():
            click.echo(f"# would create {directory}/")
    if plan.archive is not None and plan.archive_jars:
        click.echo(f"# would pack {plan.archive_jars} jars into {plan.archive}")
    if plan.formatted is not None and not plan.formatted.is_file():
        click.echo(f"# would format the NameNode first: {shlex.join(plan.format_command)}")
    for path in plan.files:
        click.echo(f"# would write {path}")
        for key, value in plan.settings.get(path, {}).items():
            click.echo(f"#   {key}={value}")


@cluster.command()
@dir_option
def down(cluster_dir: Path | None) -> None:
    """Stop exactly the daemons `up` started, and any container they left behind; on hosts, remove every
    namespace, link, the bridge and the hosts files (also after an `up` that crashed)."""
    try:
        stopped = _cluster(cluster_dir).down(progress=_progress)
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    console.print(f"stopped {len(stopped)} daemons")


@cluster.command()
@dir_option
@click.argument("daemon_name", metavar="DAEMON")
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=180,
    show_default=True,
    help="Seconds to wait for the daemon, then for every NodeManager, to get ready.",
)
def restart(cluster_dir: Path | None, daemon_name: str, timeout: float) -> None:
    """Restart one daemon: zk, rm or nm-K (as `cluster status` names them).

    Stops it (SIGTERM, SIGKILL after 15 s; nothing to stop if it died), starts it again with its configuration
    and ports, and waits until the RM answers and every NodeManager is RUNNING. Running services keep their
    containers: the RM recovers its applications from ZooKeeper, a NodeManager takes its containers back.
    """
    try:
        started = _cluster(cluster_dir).restart(daemon_name, timeout=timeout, progress=_progress)
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    console.print(f"{started.name} restarted: pid {started.pid}")


@cluster.command()
@dir_option
def status(cluster_dir: Path | None) -> None:
    """Show the daemons, the nodes, capacity used and free, each queue's guaranteed, maximum and used share and
    what it waits for, and the YARN services running."""
    try:
        st = _cluster(cluster_dir).status()
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from exc
    daemons = table(f"daemons (ResourceManager {st.rm_url})", "daemon", "pid", "running", "log")
    for d, alive in st.daemons:
        daemons.add_row(d.name, str(d.pid), "[green]yes[/green]" if alive else "[red]no[/red]", str(d.log))
    console.print(daemons)
    if st.hosts:
        hosts = table("hosts", "host", "address", "namespace", "daemons")
        for h in st.hosts:
            namespace = h.host.namespace if h.present else f"[red]{h.host.namespace} (missing)[/red]"
            hosts.add_row(h.host.name, h.host.address, namespace, ", ".join(h.daemons))
        console.print(hosts)
    if st.default_fs is not None:
        live = "not answering" if st.datanodes_live is None else f"{st.datanodes_live} DataNodes live"
        console.print(f"HDFS: {st.default_fs} (WebHDFS {st.webhdfs_url}), {live}", soft_wrap=True, highlight=False)
    if st.rm_error:
        raise click.ClickException(st.rm_error)
    gpus = any(n.used_gpus or n.available_gpus for n in st.nodes)
    nodes = table(
        "nodes", "node", "state", "containers", "memory used/free MB", "vcores used/free", *(("gpus used/free",) * gpus)
    )
    for n in st.nodes:
        nodes.add_row(
            n.node_id,
            n.state,
            str(n.containers),
            f"{n.used_memory_mb}/{n.available_memory_mb}",
            f"{n.used_vcores}/{n.available_vcores}",
            *((f"{n.used_gpus}/{n.available_gpus}",) * gpus),
        )
    console.print(nodes)
    used_gpus = sum(n.used_gpus for n in st.nodes)
    total_gpus = used_gpus + sum(n.available_gpus for n in st.nodes)
    console.print(
        f"capacity: memory {st.allocated_memory_mb}/{st.total_memory_mb} MB used, "
        f"vcores {st.allocated_vcores}/{st.total_vcores} used"
        + (f", gpus {used_gpus}/{total_gpus} used" if gpus else "")
    )
    if st.queues:
        queues = table(
            "queues (percent of the cluster)",
            *("queue", "guaranteed", "max", "used", "memory used MB", "pending containers", "pending MB"),
            droppable=("pending MB", "memory used MB"),
        )
        for q in st.queues:
            queues.add_row(
                q.path,
                f"{q.capacity:g}%",
                f"{q.max_capacity:g}%",
                f"{q.used_capacity:.1f}%",
                str(q.used_memory_mb),
                str(q.pending_containers),
                str(q.pending_memory_mb),
            )
        console.print(queues)
    services = table(
        "yarn services",
        "name",
        "application",
        "state",
        "containers",
        "memory MB",
        names=2,
        droppable=("memory MB", "containers"),
    )
    for s in st.services:
        services.add_row(s.name, s.app_id, s.state, str(s.containers), str(s.allocated_memory_mb))
    console.print(services if st.services else "no yarn services running")


@cluster.command("install-jars")
@click.option(
    "--dest",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the jars go [default: $SUBMARINE_HADOOP_LIB or share/submarine-elastic/hadoop/lib of this Python].",
)
def install_jars_command(dest: Path | None) -> None:
    """Resolve the Hadoop YARN and ZooKeeper jars from Maven Central (needs mvn and Java 17); skipped when current."""
    from submarine_elastic.cluster.jars import install_jars

    try:
        install_jars(dest, progress=_progress)
    except ClusterError as exc:
        raise click.ClickException(str(exc)) from exc
