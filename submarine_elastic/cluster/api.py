"""Value types and errors of the local pseudo-cluster (``submarine cluster up|down|status``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


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


@dataclass(frozen=True)
class ClusterSpec:
    """What ``up`` starts: ZooKeeper, one ResourceManager and ``nodes`` NodeManagers on loopback.

    Every port is ``port_base`` plus a fixed offset (see :meth:`ports`), so two clusters with
    different bases and directories can run side by side.
    """

    nodes: int = 2
    node_memory_mb: int = 4096
    node_vcores: int = 4
    port_base: int = 18000
    host: str = "127.0.0.1"
    #: a Kerberos KDC of the cluster's own, and SPNEGO on the ResourceManager's web endpoints (``up --secure``)
    secure: bool = False

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"nodes must be at least 1, got {self.nodes}")
        if self.node_memory_mb < 512:
            raise ValueError(f"node_memory_mb must be at least 512, got {self.node_memory_mb}")
        if self.node_vcores < 1:
            raise ValueError(f"node_vcores must be at least 1, got {self.node_vcores}")
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
        """NodeManager ``index``'s addresses by ``yarn-site.xml`` key."""
        base = self.port_base + 100 + 10 * index
        return {
            "yarn.nodemanager.address": base,
            "yarn.nodemanager.localizer.address": base + 1,
            "yarn.nodemanager.webapp.address": base + 2,
        }

    def daemon_names(self) -> tuple[str, ...]:
        """The daemons' names, as ``cluster status`` shows them and ``cluster restart`` takes them."""
        return (*(("kdc",) if self.secure else ()), "zk", "rm", *(f"nm-{i}" for i in range(self.nodes)))

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
        if name in self.daemon_names():
            index = int(name.removeprefix("nm-"))
            return {p: f"NodeManager {name} {k}" for k, p in self.nm_ports(index).items()}
        raise ValueError(f"daemon must be one of {', '.join(self.daemon_names())}, got {name!r}")

    def all_ports(self) -> dict[int, str]:
        """Every port the cluster binds, with the role it plays (for the port-in-use check)."""
        return {p: role for name in self.daemon_names() for p, role in self.daemon_ports(name).items()}


ROLES = ("zookeeper", "resourcemanager", "nodemanager")


@dataclass(frozen=True)
class Placement:
    """Where the daemons of a cluster whose daemons do not share one host listen (the docker-compose
    cluster: one container per daemon). Each daemon binds every interface and is reached by its host name.
    """

    zk_host: str
    rm_host: str
    #: the host name the NodeManager itself is reached by (its container's name)
    node_host: str

    def __post_init__(self) -> None:
        for name in ("zk_host", "rm_host", "node_host"):
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
    """

    command: tuple[str, ...]
    env: Mapping[str, str]
    files: Mapping[Path, bytes]
    settings: Mapping[Path, Mapping[str, str]]
    directories: tuple[Path, ...]
    archive: Path | None = None
    archive_jars: int = 0


@dataclass(frozen=True)
class Daemon:
    """One JVM that ``up`` started: its role, pid, the pid's start time (guards against pid reuse)."""

    name: str
    pid: int
    start_ticks: int
    log: Path


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


@dataclass(frozen=True)
class ServiceSummary:
    name: str
    app_id: str
    state: str
    allocated_memory_mb: int
    containers: int


@dataclass(frozen=True)
class ClusterStatus:
    """What ``submarine cluster status`` shows."""

    rm_url: str
    daemons: list[tuple[Daemon, bool]]
    nodes: list[NodeInfo] = field(default_factory=list)
    services: list[ServiceSummary] = field(default_factory=list)
    total_memory_mb: int = 0
    allocated_memory_mb: int = 0
    total_vcores: int = 0
    allocated_vcores: int = 0
    rm_error: str | None = None
