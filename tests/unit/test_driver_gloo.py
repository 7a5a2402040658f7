"""The interface and address a job's driver gives Horovod's rendezvous and Gloo: the ones holding the
address its workers dial it at, never loopback on a host the workers do not share."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import psutil
import pytest

from submarine_elastic.elastic.ringhost import gloo_endpoint
from submarine_elastic.protocol.api import GlooInterfaceError

#: A driver on host 1 of a hosts cluster: eth0 holds a second address first, then the host's own.
ADDRESSES = {
    "lo": [("127.0.0.1",)],
    "eth0": [("10.0.0.5",), ("198.18.0.3",)],
    "eth1": [],
}


@pytest.fixture(autouse=True)
def interfaces(monkeypatch: pytest.MonkeyPatch) -> None:
    def net_if_addrs() -> dict[str, list[SimpleNamespace]]:
        return {
            name: [SimpleNamespace(family=socket.AF_INET, address=a) for (a,) in addresses]
            for name, addresses in ADDRESSES.items()
        }

    monkeypatch.setattr(psutil, "net_if_addrs", net_if_addrs)


def test_a_driver_on_a_host_uses_the_interface_and_address_its_workers_dial():
    assert gloo_endpoint("198.18.0.3", None) == ("eth0", "198.18.0.3")
    assert gloo_endpoint("10.0.0.5", None) == ("eth0", "10.0.0.5")


def test_a_driver_on_loopback_uses_lo():
    assert gloo_endpoint("127.0.0.1", None) == ("lo", "127.0.0.1")


def test_the_override_wins_with_its_interfaces_address():
    assert gloo_endpoint("198.18.0.3", "lo") == ("lo", "127.0.0.1")
    assert gloo_endpoint("127.0.0.1", "eth0") == ("eth0", "10.0.0.5")


def test_an_override_without_an_ipv4_address_is_refused_by_name():
    with pytest.raises(GlooInterfaceError, match="'eth1'"):
        gloo_endpoint("198.18.0.3", "eth1")
    with pytest.raises(GlooInterfaceError, match="'eth9'"):
        gloo_endpoint("198.18.0.3", "eth9")


def test_an_unresolvable_driver_address_is_an_error():
    with pytest.raises(OSError):
        gloo_endpoint("no-such-host.invalid", None)
