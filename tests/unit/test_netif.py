"""Which interface carries traffic to a peer, asked of this machine's kernel; which addresses are loopback."""

from __future__ import annotations

import socket

import pytest

from submarine_elastic import netif


def test_loopback_traffic_uses_lo():
    assert netif.interface_for_address("127.0.0.1") == "lo"
    assert netif.interface_towards("127.0.0.1") == ("lo", "127.0.0.1")
    assert netif.interface_towards("localhost") == ("lo", "127.0.0.1")
    assert netif.gloo_interface("127.0.0.1") == "lo"


def test_an_address_no_interface_holds_is_none_and_a_non_address_is_refused():
    assert netif.interface_for_address("192.0.2.77") is None  # TEST-NET-1: on no interface here
    with pytest.raises(ValueError):
        netif.interface_for_address("host-1")


def test_the_override_wins_and_an_unresolvable_host_is_an_error():
    assert netif.gloo_interface("127.0.0.1", override="eth7") == "eth7"
    with pytest.raises(OSError):
        netif.gloo_interface("no-such-host.invalid")


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.0.0.2",
        "127.1.2.3:8080",
        "localhost",
        "LocalHost",
        "localhost:50051",
        "::1",
        "[::1]",
        "[::1]:50051",
        "http://127.0.0.1:18088",
        "http://localhost:8088/ws/v1",
        "https://[::1]:8090",
        " 127.0.0.1 ",
    ],
)
def test_loopback_is_127_slash_8_ipv6_one_and_localhost_in_any_form(address: str):
    assert netif.is_loopback(address) is True


@pytest.mark.parametrize(
    "address",
    [
        "0.0.0.0",
        "::",
        "[::]",
        "",
        "10.1.2.3",
        "10.1.2.3:8088",
        "128.0.0.1",
        "localhost.example.com",
        "http://localhost.example.com:8088",
        "http://127.example.com:8088",
        "http://rm:8088/?next=http://127.0.0.1",
        "http://[::1",
        "::ffff:10.0.0.1",
    ],
)
def test_anything_else_is_not_loopback(address: str):
    assert netif.is_loopback(address) is False


def test_a_name_is_never_resolved_to_decide(monkeypatch: pytest.MonkeyPatch):
    looked_up: list[str] = []

    def resolve(name: str, *args: object, **kwargs: object) -> object:
        looked_up.append(name)
        raise AssertionError(f"{name} was looked up")

    monkeypatch.setattr(socket, "gethostbyname", resolve)
    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    assert netif.is_loopback("this-host") is False
    # A name the resolver would map to loopback is still not loopback: bind is taken as written.
    with pytest.raises(ValueError, match="advertise 127.0.0.1 is loopback while the service listens on this-host"):
        netif.service_addresses("127.0.0.1", bind="this-host", advertise="127.0.0.1")
    assert looked_up == []
