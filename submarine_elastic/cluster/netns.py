"""Hosts on one machine: network namespaces joined by one bridge, the network of a multi-host pseudo-cluster.

Each host is a network namespace with one veth link to a bridge in the root namespace, its own address in
a private range (default ``198.18.0.0/15``, reserved for benchmarking, so it collides with no real network)
and a name every other host resolves: ``ip netns exec`` bind-mounts ``/etc/netns/<namespace>/hosts`` over
``/etc/hosts`` for whatever it starts, and each host's file lists every host. What :meth:`Host.command` runs
also has the host's name as its own (``hostname``, and what a JVM takes for its local host). A host has no
route beyond the bridge: its only routes are its loopback and the cluster's subnet. The root namespace holds
the bridge's address in the subnet, so a command run there (the CLI, a test) reaches every host; traffic
never leaves the machine.

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
import socket
import subprocess
from pathlib import Path

import psutil

from submarine_elastic.cluster.api import (
    DEFAULT_SUBNET,
    MAX_HOSTS,
    ClusterError,
    Host,
    host_address,
    host_name,
    host_network,
)

__all__ = [
    "DEFAULT_SUBNET",
    "check_prerequisites",
    "MAX_HOSTS",
    "Host",
    "HostNetwork",
    "HostNetworkError",
    "HostNetworkUnavailableError",
]

log = logging.getLogger(__name__)

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
        host_network(self.hosts, self.subnet)

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
            name=host_name(index),
            namespace=f"se{self.tag}-host-{index}",
            address=host_address(self.subnet, index),
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
                ``destroy`` it), an address of this machine lies in the subnet, or an ``ip`` command failed
                (what was made stays recorded for ``destroy``).
        """
        check_prerequisites()
        existing = set(_namespaces())
        taken = [h.namespace for h in self.all_hosts if h.namespace in existing]
        if taken:
            raise HostNetworkError(
                f"namespace {taken[0]} already exists: a host network of {self.state_dir} was not destroyed "
                "(submarine cluster down removes it)"
            )
        for interface, address in _root_addresses():
            if ipaddress.ip_address(address) in self.network:
                raise HostNetworkError(
                    f"subnet {self.subnet} overlaps address {address} of {interface}: another network uses it "
                    "(another cluster on hosts?); choose another subnet"
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

    def present(self) -> list[Host]:
        """The plan's hosts whose namespace exists now (all after ``create``, none after ``destroy``)."""
        existing = set(_namespaces())
        return [h for h in self.all_hosts if h.namespace in existing]

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


def check_prerequisites() -> None:
    """Refuses, before anything is made, where this machine cannot make hosts.

    Raises:
        HostNetworkUnavailableError: no ``ip`` command, or not root; the message says what to do.
    """
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


def _root_addresses() -> list[tuple[str, str]]:
    """(interface, IPv4 address) of every address this namespace holds."""
    return [
        (name, entry.address)
        for name, entries in psutil.net_if_addrs().items()
        for entry in entries
        if entry.family == socket.AF_INET
    ]


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
