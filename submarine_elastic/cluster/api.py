"""Value types and errors of the local pseudo-cluster (``submarine cluster up|down|status``)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from submarine_elastic.yarn import QueueReport

#: What the cluster says as it goes (``up``, ``restart``, ``down``): one line at a time.
Progress = Callable[[str], None]
#: Where host addresses come from by default: 198.18.0.0/15, set aside for benchmarking networks (RFC 2544).
DEFAULT_SUBNET = "198.18.0.0/15"
#: Hosts one network holds (the first addresses of the subnet go to the bridge, then host 0, 1, ...).
MAX_HOSTS = 64
#: The address of the loopback cluster's every daemon.
LOOPBACK = "127.0.0.1"
#: Stand-in GPUs one NodeManager may have (``up --gpus-per-node``): as many as one host's PCIe slots hold.
MAX_GPUS_PER_NODE = 16
#: A queue's name (``up --queues``): what CapacityScheduler takes as one path element.
QUEUE_NAME = re.compile(r"[a-z][a-z0-9_-]*")


class ClusterError(Exception):
    """Base of every error raised by ``submarine_elastic.cluster``."""


class PrerequisiteError(ClusterError):
    """Java, the Hadoop jars or the configuration templates are missing."""


class PortInUseError(ClusterError):
    """A port the cluster needs is already taken by another process."""

    def __init__(self, port: int, role: str) -> None:
        super().__init__(
            f"port {port} ({role}) is already in use on 127.0.0.1; stop what holds it or choose another --port-base"
        )
        self.port = port
        self.role = role


class KerberosSetupError(ClusterError):
    """The secure cluster's Kerberos realm could not be created (the tool and its output named)."""


class ClusterAlreadyUpError(ClusterError):
    """``up`` was called while daemons recorded in the cluster directory still run."""


class ClusterNotUpError(ClusterError):
    """The cluster directory records no running cluster."""


class ClusterSpecChangedError(ClusterError):
    """``up`` over the directory of a cluster that died, with options other than the ones it ran with."""


class GpuDiscoveryError(ClusterError):
    """``nvidia-smi -x -q`` output that is not XML, or lacks what YARN's GPU discovery reads."""


class UnknownDaemonError(ClusterError):
    """A daemon was named that the cluster does not have."""

    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        super().__init__(f"unknown daemon {name!r}: this cluster's daemons are {', '.join(known)}")
        self.name = name
        self.known = known


class DaemonNotRunningError(ClusterError):
    """A daemon that another one needs is not running (``restart`` of the RM while ZooKeeper is down)."""


class DaemonStartError(ClusterError):
    """A daemon exited or did not become ready in time; the message carries the tail of its log."""

    def __init__(self, daemon: str, reason: str, log: Path, log_tail: str) -> None:
        super().__init__(f"{daemon} {reason}; last lines of {log}:\n{log_tail}")
        self.daemon = daemon
        self.log = log
        self.log_tail = log_tail


def host_network(hosts: int, subnet: str) -> ipaddress.IPv4Network:
    """``subnet`` as a network, checked to hold a bridge and ``hosts`` hosts.

    Raises:
        ValueError: ``hosts`` out of 1..MAX_HOSTS, or ``subnet`` not an IPv4 network with room for them.
    """
    if not 1 <= hosts <= MAX_HOSTS:
        raise ValueError(f"hosts must be 1..{MAX_HOSTS}, got {hosts}")
    try:
        network = ipaddress.ip_network(subnet)
    except ValueError as exc:
        raise ValueError(f"subnet {subnet!r} is not an IP network: {exc}") from None
    if not isinstance(network, ipaddress.IPv4Network):
        raise ValueError(f"subnet {subnet!r} is not an IPv4 network")
    if network.num_addresses - 2 < hosts + 1:
        raise ValueError(f"subnet {subnet} has no room for a bridge and {hosts} hosts")
    return network


def host_address(subnet: str, index: int) -> str:
    """Host ``index``'s address in ``subnet``: the subnet's first host address is the bridge's, then host 0, 1, ..."""
    return str(ipaddress.IPv4Network(subnet).network_address + 2 + index)


def host_name(index: int) -> str:
    """Host ``index``'s host name, which every host of the network resolves."""
    return f"host-{index}"


@dataclass(frozen=True)
class Host:
    """One host of a host network (``cluster.netns``).

    Attributes:
        index: 0, 1, ... (host 0 runs the cluster's central daemons).
        name: its host name, resolvable on every host (``host-0``, ...), and what ``hostname`` says on it.
        namespace: the network namespace it is (``ip netns exec <namespace> ...`` runs a command on it).
        address: its IPv4 address on the bridge.
        link: the bridge side of its veth pair, in the root namespace (set it down to cut the host off).
    """

    index: int
    name: str
    namespace: str
    address: str
    link: str

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run on this host: inside its network namespace, with its hosts file (``ip netns exec``)
        and its host name (a UTS namespace of its own, named by writing the kernel's hostname file, so
        ``argv`` keeps the pid the command started with)."""
        name_it = 'echo "$0" > /proc/sys/kernel/hostname && exec "$@"'
        return ["ip", "netns", "exec", self.namespace, "unshare", "--uts", "sh", "-c", name_it, self.name, *argv]


@dataclass(frozen=True)
class QueueSpec:
    """One CapacityScheduler queue under ``root`` (``up --queues NAME:CAPACITY[:MAX]``).

    Raises:
        ValueError: a name not ``[a-z][a-z0-9_-]*`` (or ``default``, which the hierarchy replaces), a capacity
            out of 0..100, or a maximum out of capacity..100 (naming the queue).
    """

    name: str
    #: the share of the cluster guaranteed to the queue (percent)
    capacity: int
    #: the share it may grow to while others leave theirs idle (percent)
    max_capacity: int = 100

    def __post_init__(self) -> None:
        if not QUEUE_NAME.fullmatch(self.name):
            raise ValueError(f"queue name must match {QUEUE_NAME.pattern}, got {self.name!r}")
        if not 0 <= self.capacity <= 100:
            raise ValueError(f"queue {self.name!r}: capacity must be 0..100 percent, got {self.capacity}")
        if not self.capacity <= self.max_capacity <= 100:
            raise ValueError(
                f"queue {self.name!r}: maximum capacity must be {self.capacity}..100 percent (at least its "
                f"capacity), got {self.max_capacity}"
            )


def check_queues(queues: Sequence[QueueSpec]) -> None:
    """Checks ``queues`` as one hierarchy under ``root``.

    Raises:
        ValueError: a name given twice, or guarantees that do not add up to 100 (naming them).
    """
    names = [q.name for q in queues]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"queue {twice[0]!r} is given twice")
    total = sum(q.capacity for q in queues)
    if queues and total != 100:
        shares = ", ".join(f"{q.name} {q.capacity}" for q in queues)
        raise ValueError(f"the queues' guaranteed capacities must add up to 100, got {total} ({shares})")


@dataclass(frozen=True)
class ClusterSpec:
    """What ``up`` starts: ZooKeeper, one ResourceManager and ``nodes`` NodeManagers, on loopback or, with
    ``hosts``, on that many hosts (network namespaces, ``cluster.netns``): ZooKeeper and the ResourceManager
    on host 0, one NodeManager on every host.

    Every port is ``port_base`` plus a fixed offset (see :meth:`rm_ports`, :meth:`nm_ports`), so two clusters
    with different bases and directories can run side by side. On hosts every NodeManager has the same ports
    (each host its own address).

    Raises:
        ValueError: a value out of range; on hosts, ``nodes`` not one a host, ``host`` not host 0's address,
            or ``secure`` (not yet on hosts).
    """

    nodes: int = 2
    node_memory_mb: int = 4096
    node_vcores: int = 4
    port_base: int = 18000
    #: the address ZooKeeper, the RM (and the KDC) listen on: loopback, or on hosts host 0's address (the
    #: default loopback becomes it)
    host: str = LOOPBACK
    #: a Kerberos KDC of the cluster's own, and SPNEGO on the ResourceManager's web endpoints (``up --secure``)
    secure: bool = False
    #: 0: every daemon on loopback; else how many hosts (``up --hosts``), one NodeManager each
    hosts: int = 0
    #: the range the hosts take their addresses from (``up --subnet``)
    subnet: str = DEFAULT_SUBNET
    #: HDFS: a NameNode (on host 0) and a DataNode on every node, the cluster's ``fs.defaultFS`` (``up --hdfs``);
    #: None: on hosts yes, on loopback no
    hdfs: bool | None = None
    #: GPUs each NodeManager offers (``up --gpus-per-node``), found by YARN's GPU plugin through a stand-in
    #: ``nvidia-smi``; 0: the cluster has no ``yarn.io/gpu`` resource type at all
    gpus_per_node: int = 0
    #: CapacityScheduler queues under ``root`` with the preemption monitor on (``up --queues``); empty: the one
    #: queue ``root.default`` and no preemption
    queues: tuple[QueueSpec, ...] = ()

    def __post_init__(self) -> None:
        if self.hdfs is None:
            # The default follows from the layout; a frozen value is set once, here.
            object.__setattr__(self, "hdfs", bool(self.hosts))
        if self.hosts < 0:
            raise ValueError(f"hosts must be 0 (loopback) or 1..{MAX_HOSTS}, got {self.hosts}")
        if self.hosts:
            host_network(self.hosts, self.subnet)
            if self.nodes != self.hosts:
                raise ValueError(
                    f"a cluster on hosts has one NodeManager a host: nodes {self.nodes}, hosts {self.hosts}"
                )
            if self.secure:
                raise ValueError("a secure cluster runs on loopback only: its Kerberos keys name 127.0.0.1")
            expected = host_address(self.subnet, 0)
            if self.host == LOOPBACK:
                # The central daemons' address follows from the subnet; a frozen value is set once, here.
                object.__setattr__(self, "host", expected)
            elif self.host != expected:
                raise ValueError(f"host must be host 0's address {expected} on a cluster on hosts, got {self.host}")
        if self.hdfs and self.secure:
            raise ValueError(
                "HDFS on a secure cluster is not supported: its NameNode and DataNodes would need Kerberos "
                "principals of their own; run `up --secure` without --hdfs"
            )
        if self.nodes < 1:
            raise ValueError(f"nodes must be at least 1, got {self.nodes}")
        if self.node_memory_mb < 512:
            raise ValueError(f"node_memory_mb must be at least 512, got {self.node_memory_mb}")
        if self.node_vcores < 1:
            raise ValueError(f"node_vcores must be at least 1, got {self.node_vcores}")
        if not 0 <= self.gpus_per_node <= MAX_GPUS_PER_NODE:
            raise ValueError(f"gpus_per_node must be 0..{MAX_GPUS_PER_NODE}, got {self.gpus_per_node}")
        check_queues(self.queues)
        if not 1024 <= self.port_base <= 65535 - 100 - 10 * self.nodes:
            raise ValueError(f"port_base {self.port_base} leaves no room for the cluster's ports")

    @property
    def zk_port(self) -> int:
        return self.port_base + 181

    @property
    def rm_web_port(self) -> int:
        return self.port_base + 88

    @property
    def rm_url(self) -> str:
        return f"http://{self.host}:{self.rm_web_port}"

    @property
    def namenode_port(self) -> int:
        """The NameNode's RPC port: ``fs.defaultFS`` is ``hdfs://<host>:<this>``."""
        return self.port_base + 20

    @property
    def namenode_web_port(self) -> int:
        """The NameNode's web port (WebHDFS, ``/webhdfs/v1``)."""
        return self.port_base + 70

    @property
    def default_fs(self) -> str:
        """The cluster's ``fs.defaultFS``: its HDFS, or without one the local file system."""
        return f"hdfs://{self.host}:{self.namenode_port}" if self.hdfs else "file:///"

    @property
    def webhdfs_url(self) -> str | None:
        """The NameNode's WebHDFS address (``http://<host>:<port>``), None without HDFS."""
        return f"http://{self.host}:{self.namenode_web_port}" if self.hdfs else None

    @property
    def kdc_port(self) -> int:
        """The KDC's port (TCP and UDP) of a secure cluster."""
        return self.port_base + 89

    def rm_ports(self) -> dict[str, int]:
        """RM addresses by ``yarn-site.xml`` key."""
        base = self.port_base
        return {
            "yarn.resourcemanager.scheduler.address": base + 30,
            "yarn.resourcemanager.resource-tracker.address": base + 31,
            "yarn.resourcemanager.address": base + 32,
            "yarn.resourcemanager.admin.address": base + 33,
            "yarn.resourcemanager.webapp.address": base + 88,
        }

    def nm_ports(self, index: int) -> dict[str, int]:
        """NodeManager ``index``'s addresses by ``yarn-site.xml`` key (on hosts, the same for every one)."""
        base = self.port_base + 100 + 10 * (0 if self.hosts else index)
        return {
            "yarn.nodemanager.address": base,
            "yarn.nodemanager.localizer.address": base + 1,
            "yarn.nodemanager.webapp.address": base + 2,
        }

    def namenode_ports(self) -> dict[str, int]:
        """The NameNode's addresses by ``hdfs-site.xml`` key."""
        return {"dfs.namenode.rpc-address": self.namenode_port, "dfs.namenode.http-address": self.namenode_web_port}

    def datanode_ports(self, index: int) -> dict[str, int]:
        """DataNode ``index``'s addresses by ``hdfs-site.xml`` key: beside its NodeManager's (on hosts, the same
        for every one)."""
        base = self.port_base + 100 + 10 * (0 if self.hosts else index)
        return {
            "dfs.datanode.address": base + 3,
            "dfs.datanode.http.address": base + 4,
            "dfs.datanode.ipc.address": base + 5,
        }

    def node_host(self, index: int) -> str:
        """The host name NodeManager ``index`` is reached by: its host's name, or on loopback ``host``."""
        return host_name(index) if self.hosts else self.host

    def daemon_host(self, name: str) -> int | None:
        """The host a daemon runs on (ZooKeeper and the RM on host 0, ``nm-K`` on host K), None on loopback.

        Raises:
            ValueError: ``name`` is not one of :meth:`daemon_names`.
        """
        if name not in self.daemon_names():
            raise ValueError(f"daemon must be one of {', '.join(self.daemon_names())}, got {name!r}")
        if not self.hosts:
            return None
        return int(name.split("-", 1)[1]) if name.startswith(("nm-", "dn-")) else 0

    def daemon_names(self) -> tuple[str, ...]:
        """The daemons' names, as ``cluster status`` shows them and ``cluster restart`` takes them, in the
        order ``up`` starts them: HDFS (``nn``, ``dn-K``) before YARN, whose NodeManagers localize from it."""
        hdfs = ("nn", *(f"dn-{i}" for i in range(self.nodes))) if self.hdfs else ()
        return (*(("kdc",) if self.secure else ()), "zk", *hdfs, "rm", *(f"nm-{i}" for i in range(self.nodes)))

    def daemon_ports(self, name: str) -> dict[int, str]:
        """The ports one daemon binds, with the role each plays.

        Raises:
            ValueError: ``name`` is not one of :meth:`daemon_names`.
        """
        if name == "zk":
            return {self.zk_port: "ZooKeeper client port"}
        if name == "kdc" and self.secure:
            return {self.kdc_port: "Kerberos KDC"}
        if name == "rm":
            return {p: f"ResourceManager {k}" for k, p in self.rm_ports().items()}
        if name == "nn" and self.hdfs:
            return {p: f"NameNode {k}" for k, p in self.namenode_ports().items()}
        if name.startswith("dn-") and name in self.daemon_names():
            index = int(name.removeprefix("dn-"))
            return {p: f"DataNode {name} {k}" for k, p in self.datanode_ports(index).items()}
        if name in self.daemon_names():
            index = int(name.removeprefix("nm-"))
            return {p: f"NodeManager {name} {k}" for k, p in self.nm_ports(index).items()}
        raise ValueError(f"daemon must be one of {', '.join(self.daemon_names())}, got {name!r}")

    def all_ports(self) -> dict[int, str]:
        """Every port the cluster binds, with the role it plays (for the port-in-use check)."""
        return {p: role for name in self.daemon_names() for p, role in self.daemon_ports(name).items()}


ROLES = ("zookeeper", "resourcemanager", "nodemanager", "namenode", "datanode")


@dataclass(frozen=True)
class Placement:
    """Where the daemons of a cluster whose daemons do not share one host listen (the docker-compose
    cluster: one container per daemon). Each daemon binds every interface and is reached by its host name.
    """

    zk_host: str
    rm_host: str
    #: the host name the NodeManager (or the DataNode) itself is reached by (its container's name)
    node_host: str
    #: the host name the NameNode is reached by (on a cluster with HDFS)
    nn_host: str = "namenode"

    def __post_init__(self) -> None:
        for name in ("zk_host", "rm_host", "node_host", "nn_host"):
            value = getattr(self, name)
            if not value or not all(c.isalnum() or c in ".-" for c in value):
                raise ValueError(f"{name} must be a host name or an IPv4 address, got {value!r}")


@dataclass(frozen=True)
class DaemonPlan:
    """What running one daemon in the foreground takes, before anything is written.

    Attributes:
        command: the command line to exec.
        env: variables it adds to the environment.
        files: every configuration file to write, path -> content.
        settings: for each file the settings it overrides in the shared templates (to show a reader).
        directories: directories to create.
        archive: the ApplicationMaster's jar archive the configuration points at (None for ZooKeeper).
        archive_jars: how many jars must be packed into it first (0 while it is up to date).
        format_command: the NameNode's format, run before ``command`` while ``formatted`` does not exist.
        formatted: the file a formatted name directory holds.
    """

    command: tuple[str, ...]
    env: Mapping[str, str]
    files: Mapping[Path, bytes]
    settings: Mapping[Path, Mapping[str, str]]
    directories: tuple[Path, ...]
    archive: Path | None = None
    archive_jars: int = 0
    #: the NameNode's: the command that formats its name directory, to run first while ``formatted`` is absent
    format_command: tuple[str, ...] = ()
    formatted: Path | None = None


@dataclass(frozen=True)
class Daemon:
    """One JVM that ``up`` started: its role, pid, the pid's start time (guards against pid reuse)."""

    name: str
    pid: int
    start_ticks: int
    log: Path


@dataclass(frozen=True)
class GpuDevice:
    """One GPU as ``nvidia-smi -x -q`` describes it (the fields YARN's GPU discovery and a worker's pinning use).

    Attributes:
        minor_number: the device's number (``/dev/nvidia<minor>``), which YARN assigns and
            ``CUDA_VISIBLE_DEVICES`` may name.
        uuid: ``GPU-...``, unique to the device.
        product_name: e.g. ``NVIDIA H100 80GB HBM3``.
        pci_bus_id: ``00000000:18:00.0``.
        memory_total_mib: its frame buffer.
    """

    minor_number: int
    uuid: str
    product_name: str
    pci_bus_id: str
    memory_total_mib: int


@dataclass(frozen=True)
class NodeInfo:
    node_id: str
    state: str
    used_memory_mb: int
    available_memory_mb: int
    used_vcores: int
    available_vcores: int
    containers: int
    #: when the NodeManager last reported its health (ms since the epoch); a restarted one reports anew
    last_health_update_ms: int = 0
    #: ``yarn.io/gpu`` in use and free (0 and 0 on a node, or a cluster, without GPUs)
    used_gpus: int = 0
    available_gpus: int = 0


@dataclass(frozen=True)
class ServiceSummary:
    name: str
    app_id: str
    state: str
    allocated_memory_mb: int
    containers: int


@dataclass(frozen=True)
class HostStatus:
    host: Host
    #: its network namespace exists
    present: bool
    #: the daemons placed on it (``zk``, ``rm``, ``nm-K``)
    daemons: tuple[str, ...]


@dataclass(frozen=True)
class ClusterStatus:
    """What ``submarine cluster status`` shows."""

    rm_url: str
    daemons: list[tuple[Daemon, bool]]
    #: on a cluster on hosts, each host, whether its namespace exists, and the daemons it runs
    hosts: list[HostStatus] = field(default_factory=list)
    nodes: list[NodeInfo] = field(default_factory=list)
    services: list[ServiceSummary] = field(default_factory=list)
    total_memory_mb: int = 0
    allocated_memory_mb: int = 0
    total_vcores: int = 0
    allocated_vcores: int = 0
    rm_error: str | None = None
    #: the cluster's HDFS (``hdfs://...``) and its WebHDFS address, None without HDFS
    default_fs: str | None = None
    webhdfs_url: str | None = None
    #: DataNodes the NameNode counts live, None when it does not answer (or without HDFS)
    datanodes_live: int | None = None
    #: on a cluster with queues (``up --queues``), each leaf queue as the scheduler reports it
    queues: list[QueueReport] = field(default_factory=list)
