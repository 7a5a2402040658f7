"""Where the controller's services listen and the address jobs are told: routable towards the cluster, never
loopback unless the cluster is on it, and named in the certificates its clients check."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from submarine_elastic import netif, tls
from submarine_elastic.controller import locate
from submarine_elastic.controller.api import ControllerInfo
from submarine_elastic.controller.client import ControllerClient
from submarine_elastic.daemon import process
from submarine_elastic.rpc import open_channel

#: A cluster on namespace hosts: the RM on host 0, this machine on the bridge.
RM_HOST, BRIDGE = "198.18.0.2", "198.18.0.1"


@pytest.fixture()
def on_a_bridge(monkeypatch: pytest.MonkeyPatch) -> None:
    def towards(peer: str) -> tuple[str, str]:
        assert peer == RM_HOST
        return "sebr", BRIDGE

    monkeypatch.setattr(netif, "interface_towards", towards)


def only(addresses: dict[str, list[str]]) -> object:
    return lambda: {
        name: [SimpleNamespace(family=socket.AF_INET, address=a) for a in found] for name, found in addresses.items()
    }


def test_a_cluster_on_loopback_keeps_the_controller_on_loopback():
    assert netif.service_addresses("127.0.0.1") == ("127.0.0.1", "127.0.0.1")
    assert netif.service_addresses("localhost") == ("127.0.0.1", "127.0.0.1")


@pytest.mark.usefixtures("on_a_bridge")
def test_a_cluster_on_hosts_gets_the_address_towards_its_resourcemanager():
    assert netif.service_addresses(RM_HOST) == (BRIDGE, BRIDGE)
    assert netif.service_addresses(RM_HOST, bind="0.0.0.0") == ("0.0.0.0", BRIDGE)
    assert netif.service_addresses(RM_HOST, advertise="ctl.example") == (BRIDGE, "ctl.example")


def test_a_given_address_is_advertised_as_it_is():
    assert netif.service_addresses("127.0.0.1", bind="192.0.2.9") == ("192.0.2.9", "192.0.2.9")
    assert netif.service_addresses("127.0.0.1", bind="0.0.0.0", advertise="ctl.example") == ("0.0.0.0", "ctl.example")


def test_a_wildcard_bind_is_never_advertised_as_loopback(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(psutil, "net_if_addrs", only({"lo": ["127.0.0.1"], "eth0": ["192.0.2.7"]}))
    assert netif.service_addresses("127.0.0.1", bind="0.0.0.0") == ("0.0.0.0", "192.0.2.7")
    with pytest.raises(ValueError, match="advertise 127.0.0.1 is loopback while the service listens on 0.0.0.0"):
        netif.service_addresses("127.0.0.1", bind="0.0.0.0", advertise="127.0.0.1")
    monkeypatch.setattr(psutil, "net_if_addrs", only({"lo": ["127.0.0.1"]}))
    with pytest.raises(LookupError, match="no IPv4 address but loopback"):
        netif.service_addresses("127.0.0.1", bind="0.0.0.0")


def test_a_resourcemanager_that_does_not_resolve_is_an_error():
    with pytest.raises(OSError):
        netif.service_addresses("no-such-host.invalid")


def routable_address() -> str | None:
    for addresses in psutil.net_if_addrs().values():
        for entry in addresses:
            if entry.family == socket.AF_INET and not entry.address.startswith("127."):
                return str(entry.address)
    return None


@pytest.fixture()
def wildcard_controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ControllerInfo]:
    if routable_address() is None:
        pytest.skip("this machine has no address but loopback")
    monkeypatch.delenv("SUBMARINE_INSECURE", raising=False)
    monkeypatch.setenv("SUBMARINE_CA_DIR", str(tmp_path / "ca"))
    where = tmp_path / "controller"
    info = process.start("http://127.0.0.1:9", bind="0.0.0.0", directory=where, timeout=60)
    try:
        yield info
    finally:
        process.stop(where)


def test_a_controller_on_every_interface_advertises_a_routable_address_its_certificates_name(
    wildcard_controller: ControllerInfo, tmp_path: Path
):
    info = wildcard_controller
    host = info.metrics_endpoint.rsplit(":", 1)[0]
    assert host == routable_address()
    assert info.address.rsplit(":", 1)[0] == host
    # A job's hook dials the advertised address and checks the certificate against the cluster's CA.
    issued = tls.cluster_ca().issue_client("job probe")
    with open_channel(info.metrics_endpoint, ca=issued.ca, client_cert=(issued.cert, issued.key)) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    token = locate.read_token(tmp_path / "controller", locate.API_TOKEN)
    with ControllerClient(info.address, token, timeout=10) as client:
        assert client.jobs() == []
