"""Hosts on one machine: network namespaces joined by one bridge, the network of a multi-host pseudo-cluster.

Each host is a network namespace with one veth link to a bridge in the root namespace, its own address in
a private range (default ``198.18.0.0/15``, reserved for benchmarking, so it collides with no real network)
and a name every other host resolves: ``ip netns exec`` bind-mounts ``/etc/netns/<namespace>/hosts`` over
``/etc/hosts`` for whatever it starts, and each host's file lists every host. A host has no route beyond the
bridge: its only routes are its loopback and the cluster's subnet. The root namespace holds the bridge's
address in the subnet, so a command run there (the CLI, a test) reaches every host; traffic never leaves
the machine.

What :meth:`HostNetwork.create` makes is recorded in ``<state_dir>/hosts.json`` *before* it is made, so
:meth:`HostNetwork.destroy` removes every namespace, link, hosts file and process of the plan, also after a
crash halfway through ``create``; destroying what is already gone is not an error.

Making namespaces needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) and the ``ip`` command (iproute2):
without them :meth:`HostNetwork.create` refuses with :class:`HostNetworkUnavailableError` naming what is
missing, before anything is made.
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import json
import logging
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

import psutil

from submarine_elastic.cluster.api import ClusterError

__all__ = [
    "DEFAULT_SUBNET",
    "MAX_HOSTS",
    "Host",
    "HostNetwork",
    "HostNetworkError",
    "HostNetworkUnavailableError",
]

log = logging.getLogger(__name__)

#: Where host addresses come from by default: 198.18.0.0/15, set aside for benchmarking networks (RFC 2544).
DEFAULT_SUBNET = "198.18.0.0/15"
#: Hosts one network holds (the first addresses of the subnet go to the bridge, then host 0, 1, ...).
MAX_HOSTS = 64
#: Where ``ip netns exec`` finds a namespace's own ``/etc`` files.
NETNS_ETC = Path("/etc/netns")
#: The state file, in the cluster's directory.
STATE_FILE = "hosts.json"
#: Seconds a host's processes get to exit after SIGKILL before ``destroy`` reports them.
KILL_WAIT_S = 10.0


class HostNetworkError(ClusterError):
    """A namespace, link or address could not be made or removed (the command and its output named)."""


class HostNetworkUnavailableError(HostNetworkError):
    """This machine cannot make namespaces for us: no ``ip`` command, or not root (CAP_NET_ADMIN)."""


@dataclasses.dataclass(frozen=True)
class Host:
    """One host of the network.

    Attributes:
        index: 0, 1, ... (host 0 runs the cluster's central daemons).
        name: its host name, resolvable on every host (``host-0``, ...).
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
        """``argv`` run on this host (inside its namespace, with its hosts file)."""
        return ["ip", "netns", "exec", self.namespace, *argv]


@dataclasses.dataclass(frozen=True)
class HostNetwork:
    """The plan of ``hosts`` namespaces on one bridge: names and addresses are a pure function of the
    arguments, so ``create`` and a later ``destroy`` (another process, after a crash) agree.

    Attributes:
        state_dir: the cluster's directory; names derive from it, so two clusters never share a namespace.
        hosts: how many hosts (1..MAX_HOSTS).
        subnet: the range the bridge and the hosts take their addresses from (at least a /26 for 64 hosts).

    Raises:
        ValueError: ``hosts`` out of range, or ``subnet`` not an IPv4 network with room for them.
    """

    state_dir: Path
    hosts: int
    subnet: str = DEFAULT_SUBNET

    def __post_init__(self) -> None:
        if not 1 <= self.hosts <= MAX_HOSTS:
            raise ValueError(f"hosts must be 1..{MAX_HOSTS}, got {self.hosts}")
        try:
            network = ipaddress.ip_network(self.subnet)
        except ValueError as exc:
            raise ValueError(f"subnet {self.subnet!r} is not an IP network: {exc}") from None
        if not isinstance(network, ipaddress.IPv4Network):
            raise ValueError(f"subnet {self.subnet!r} is not an IPv4 network")
        if network.num_addresses - 2 < self.hosts + 1:
            raise ValueError(f"subnet {self.subnet} has no room for a bridge and {self.hosts} hosts")

    @property
    def tag(self) -> str:
        """Four hex digits of the state directory's path: the names' stem (a link name has at most 15 bytes)."""
        return hashlib.sha256(str(self.state_dir.resolve()).encode()).hexdigest()[:4]

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.subnet)

    @property
    def bridge(self) -> str:
        """The bridge's name in the root namespace."""
        return f"se{self.tag}br"

    @property
    def bridge_address(self) -> str:
        """The root namespace's address on the bridge (the subnet's first host address)."""
        return str(self.network.network_address + 1)

    def host(self, index: int) -> Host:
        """Host ``index`` of the plan.

        Raises:
            IndexError: no such host.
        """
        if not 0 <= index < self.hosts:
            raise IndexError(f"host {index}: this network has hosts 0..{self.hosts - 1}")
        return Host(
            index=index,
            name=f"host-{index}",
            namespace=f"se{self.tag}-host-{index}",
            address=str(self.network.network_address + 2 + index),
            link=f"se{self.tag}v{index}",
        )

    @property
    def all_hosts(self) -> list[Host]:
        return [self.host(i) for i in range(self.hosts)]

    def hosts_file(self) -> str:
        """The ``/etc/hosts`` every host sees: loopback, then every host by name."""
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        lines += [f"{h.address} {h.name}" for h in self.all_hosts]
        return "\n".join(lines) + "\n"

    # -- making and removing ---------------------------------------------------------------------------

    def create(self) -> list[Host]:
        """Makes the bridge, then each host: its namespace, its veth pair (``eth0`` inside), its address, its
        hosts file. Returns the hosts. Blocks for the ``ip`` commands (well under a second a host).

        Raises:
            HostNetworkUnavailableError: no ``ip`` command, or not permitted to make namespaces.
            HostNetworkError: a namespace of the plan already exists (another cluster, or one not destroyed:
                ``destroy`` it), or an ``ip`` command failed (what was made stays recorded for ``destroy``).
        """
        _check_prerequisites()
        existing = set(_namespaces())
        taken = [h.namespace for h in self.all_hosts if h.namespace in existing]
        if taken:
            raise HostNetworkError(
                f"namespace {taken[0]} already exists: a host network of {self.state_dir} was not destroyed "
                "(submarine cluster down removes it)"
            )
        self._record()
        prefix = self.network.prefixlen
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.bridge_address}/{prefix}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        hosts_file = self.hosts_file()
        for host in self.all_hosts:
            etc = NETNS_ETC / host.namespace
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text(hosts_file)
            _ip("netns", "add", host.namespace)
            inner = f"{host.link}i"
            _ip("link", "add", host.link, "type", "veth", "peer", "name", inner)
            _ip("link", "set", inner, "netns", host.namespace)
            _ip("link", "set", host.link, "master", self.bridge)
            _ip("link", "set", host.link, "up")
            _ip("-n", host.namespace, "link", "set", inner, "name", "eth0")
            _ip("-n", host.namespace, "addr", "add", f"{host.address}/{prefix}", "dev", "eth0")
            _ip("-n", host.namespace, "link", "set", "eth0", "up")
            _ip("-n", host.namespace, "link", "set", "lo", "up")
        log.info("host network %s: %d hosts on %s (%s)", self.bridge, self.hosts, self.subnet, self.bridge_address)
        return self.all_hosts

    def destroy(self) -> list[str]:
        """Kills every process in the plan's namespaces (SIGKILL), removes the namespaces (their veth pairs go
        with them), the bridge, any veth left in the root namespace, the hosts files and the state file.
        Idempotent: what is already gone is skipped. Returns what it removed, for the caller to report.

        Raises:
            HostNetworkUnavailableError: no ``ip`` command.
            HostNetworkError: something of the plan could not be removed.
        """
        if shutil.which("ip") is None:
            raise HostNetworkUnavailableError("the ip command (iproute2) is not installed")
        removed: list[str] = []
        existing = set(_namespaces())
        for host in self.all_hosts:
            if host.namespace in existing:
                killed = kill_namespace_processes(host.namespace)
                if killed:
                    removed.append(f"{killed} processes on {host.name}")
                _ip("netns", "del", host.namespace)
                removed.append(f"namespace {host.namespace}")
            # The namespace's removal takes its veth pair along, a moment later: gone by now or not, both fine.
            if _link_exists(host.link) and _delete_link(host.link):
                removed.append(f"link {host.link}")
            etc = NETNS_ETC / host.namespace
            if etc.exists():
                shutil.rmtree(etc)
                removed.append(str(etc))
        if _link_exists(self.bridge) and _delete_link(self.bridge):
            removed.append(f"bridge {self.bridge}")
        (self.state_dir / STATE_FILE).unlink(missing_ok=True)
        return removed

    def set_link(self, index: int, up: bool) -> None:
        """Cuts host ``index`` off the bridge (``up=False``: its packets go nowhere, its processes live on)
        or joins it again.

        Raises:
            HostNetworkError: the link is not there.
        """
        _ip("link", "set", self.host(index).link, "up" if up else "down")

    def _record(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        namespaces = [h.namespace for h in self.all_hosts]
        state = {"hosts": self.hosts, "subnet": self.subnet, "bridge": self.bridge, "namespaces": namespaces}
        (self.state_dir / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")

    @classmethod
    def recorded(cls, state_dir: Path) -> HostNetwork | None:
        """The network recorded in ``state_dir`` (made, or being made, by ``create``), or None.

        Raises:
            HostNetworkError: the state file is unreadable.
        """
        path = state_dir / STATE_FILE
        if not path.exists():
            return None
        try:
            state = json.loads(path.read_text())
            return cls(state_dir, int(state["hosts"]), str(state["subnet"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise HostNetworkError(f"{path} is not a host network's state: {exc}") from None


def namespace_pids(namespace: str) -> list[int]:
    """The processes whose network namespace is ``namespace`` (``ip netns pids``)."""
    done = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, check=False)
    return [int(p) for p in done.stdout.split() if p.isdigit()]


def kill_namespace_processes(namespace: str) -> int:
    """SIGKILLs every process in ``namespace`` at once (a host losing power) and waits for them to go.
    Returns how many there were.

    Raises:
        HostNetworkError: some were still alive ``KILL_WAIT_S`` later.
    """
    procs = []
    for pid in namespace_pids(namespace):
        try:
            proc = psutil.Process(pid)
            proc.send_signal(signal.SIGKILL)
            procs.append(proc)
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(procs, timeout=KILL_WAIT_S)
    if alive:
        raise HostNetworkError(f"processes {[p.pid for p in alive]} in {namespace} survived SIGKILL")
    return len(procs)


def _check_prerequisites() -> None:
    if shutil.which("ip") is None:
        raise HostNetworkUnavailableError(
            "the ip command (iproute2) is not installed: hosts are network namespaces it makes "
            "(apt-get install iproute2); the loopback cluster needs none"
        )
    if os.geteuid() != 0:
        raise HostNetworkUnavailableError(
            "making network namespaces needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN): run as root, "
            "or use the loopback cluster"
        )


def _namespaces() -> list[str]:
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def _link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True, check=False).returncode == 0


def _delete_link(name: str) -> bool:
    """Deletes link ``name``; False when it was gone already."""
    try:
        _ip("link", "del", name)
    except HostNetworkError as exc:
        if "Cannot find device" in str(exc):
            return False
        raise
    return True


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip()
        if "Operation not permitted" in detail:
            raise HostNetworkUnavailableError(f"ip {' '.join(args)}: {detail} (needs CAP_NET_ADMIN)")
        raise HostNetworkError(f"ip {' '.join(args)} failed: {detail}")
