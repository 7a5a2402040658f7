"""Which interface carries traffic to a peer, asked of this machine's kernel."""

from __future__ import annotations

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
