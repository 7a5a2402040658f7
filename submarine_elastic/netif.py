"""Which network interface carries traffic to a peer: what Horovod's rendezvous and Gloo are told to use; and
whether an address is loopback, the one rule of every service that serves plaintext (:func:`is_loopback`).

On one host every process reaches every other over loopback; across hosts the ranks must use the interface
that routes to the driver (the container's own address is on it). These functions ask the kernel, never a
name guessed from a list: a UDP socket "connected" to the peer sends nothing but makes the kernel pick the
route and the source address, and the interface is the one holding that address.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

__all__ = [
    "interface_for_address",
    "interface_towards",
    "gloo_interface",
    "is_loopback",
    "service_addresses",
    "WILDCARDS",
]

#: The interface of loopback traffic, and its address.
LOOPBACK = "lo"
LOOPBACK_ADDRESS = "127.0.0.1"
#: Bind addresses that listen on every interface: no client can dial them.
WILDCARDS = frozenset({"", "0.0.0.0", "::", "[::]"})
#: Any port does: a connected UDP socket sends nothing until written to.
_PROBE_PORT = 9


def is_loopback(address: str) -> bool:
    """Whether ``address`` names this machine's loopback: an IPv4 address in 127.0.0.0/8, ``::1`` or the name
    ``localhost`` (any case), given as a host, ``host:port``, ``[v6]:port`` or a URL (``http://127.0.0.1:8088``).

    Whether a service may serve plaintext, and whether a cluster runs on this machine, is decided by this
    one rule. It reads the address as written and resolves no name: a resolver's answer (``/etc/hosts``
    maps a Debian host's own name to 127.0.1.1) may differ between the check and the bind, or on the
    machine that dials, and a check must not wait on DNS. So any other name, a wildcard bind (``0.0.0.0``)
    and what is not an address count as not loopback: the safe side, where TLS is needed.
    """
    text = address.strip()
    try:
        if "://" in text:
            host = urlsplit(text).hostname or ""
        elif text.startswith("["):
            host = text[1:].partition("]")[0]
        elif text.count(":") == 1:
            host = text.partition(":")[0]
        else:
            host = text
        return host.lower() == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # not an address (or a URL with a broken [v6] host)
        return False


def interface_for_address(address: str) -> str | None:
    """The interface holding the IPv4 ``address``, or None when none does (not an address of this host).

    Raises:
        ValueError: ``address`` is not an IP address.
    """
    import psutil  # here, not at the top: the job CLI imports this module for is_loopback alone

    wanted = ipaddress.ip_address(address)
    if wanted.is_loopback:
        return LOOPBACK
    for name, addresses in psutil.net_if_addrs().items():
        for entry in addresses:
            if entry.family == socket.AF_INET and ipaddress.ip_address(entry.address) == wanted:
                return name
    return None


def interface_towards(peer: str) -> tuple[str, str]:
    """(interface, source address) the kernel uses to reach ``peer`` (a host name or an IPv4 address).

    Raises:
        OSError: ``peer`` does not resolve, or no route leads to it (``ENETUNREACH``).
        LookupError: the source address the kernel picked is on no interface (a race with an address change).
    """
    target = socket.gethostbyname(peer)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((target, _PROBE_PORT))
        source = str(probe.getsockname()[0])
    name = interface_for_address(source)
    if name is None:
        raise LookupError(f"the route to {peer} ({target}) leaves from {source}, which no interface holds")
    return name, source


def gloo_interface(advertised_host: str, override: str | None = None) -> str:
    """The interface a job's driver tells its ranks to use: ``override`` when given (``SUBMARINE_GLOO_IFACE``),
    else the one holding the address the driver advertises (what its workers dial), else loopback.

    Raises:
        OSError: ``advertised_host`` does not resolve.
    """
    if override:
        return override
    address = socket.gethostbyname(advertised_host)
    return interface_for_address(address) or LOOPBACK


def service_addresses(rm_host: str, bind: str | None = None, advertise: str | None = None) -> tuple[str, str]:
    """(bind, advertise) of a service on this machine that a cluster's containers dial (the controller's
    metrics service): where it listens, and the address jobs are told.

    ``bind`` defaults to the address this machine reaches the ResourceManager ``rm_host`` from: loopback for a
    cluster on loopback, the bridge's address for a cluster on namespace hosts, this machine's address on the
    cluster's network otherwise; every NodeManager, and so every container, reaches it. ``advertise`` defaults
    to ``bind``; for a wildcard bind, to the address towards the ResourceManager, or with the ResourceManager
    on loopback this machine's first address that is not: never loopback.

    Raises:
        OSError: ``rm_host`` does not resolve, or no route leads to it, while a default needs the route.
        LookupError: a wildcard bind on a machine whose only address is loopback, and no ``advertise``.
        ValueError: ``advertise`` is loopback while ``bind`` is not (as written: see :func:`is_loopback`).
    """
    if advertise is not None and bind is not None and not is_loopback(bind) and is_loopback(advertise):
        raise ValueError(
            f"advertise {advertise} is loopback while the service listens on {bind}: containers on other hosts "
            "could not reach it"
        )
    if bind is not None and bind not in WILDCARDS:
        return bind, advertise or bind
    if bind is not None and advertise is not None:
        return bind, advertise
    towards = socket.gethostbyname(rm_host)
    source = LOOPBACK_ADDRESS if ipaddress.ip_address(towards).is_loopback else interface_towards(towards)[1]
    if bind is None:
        return source, advertise or source
    if source == LOOPBACK_ADDRESS:
        source = _first_routable_address()
    return bind, source


def _first_routable_address() -> str:
    import psutil

    for addresses in psutil.net_if_addrs().values():
        for entry in addresses:
            if entry.family == socket.AF_INET and not ipaddress.ip_address(entry.address).is_loopback:
                return str(entry.address)
    raise LookupError("this machine has no IPv4 address but loopback to advertise a wildcard bind at")
