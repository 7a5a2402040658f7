"""Which network interface carries traffic to a peer: what Horovod's rendezvous and Gloo are told to use.

On one host every process reaches every other over loopback; across hosts the ranks must use the interface
that routes to the driver (the container's own address is on it). These functions ask the kernel, never a
name guessed from a list: a UDP socket "connected" to the peer sends nothing but makes the kernel pick the
route and the source address, and the interface is the one holding that address.
"""

from __future__ import annotations

import ipaddress
import socket

import psutil

__all__ = ["interface_for_address", "interface_towards", "gloo_interface"]

#: The interface of loopback traffic.
LOOPBACK = "lo"
#: Any port does: a connected UDP socket sends nothing until written to.
_PROBE_PORT = 9


def interface_for_address(address: str) -> str | None:
    """The interface holding the IPv4 ``address``, or None when none does (not an address of this host).

    Raises:
        ValueError: ``address`` is not an IP address.
    """
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
