"""The host network's plan (names, addresses, hosts file) and its refusals, without making anything."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from submarine_elastic.cluster import netns
from submarine_elastic.cluster.netns import HostNetwork, HostNetworkError, HostNetworkUnavailableError


def test_the_plan_gives_each_host_a_name_a_namespace_and_an_address_in_the_subnet(tmp_path: Path):
    plan = HostNetwork(tmp_path, 3)
    hosts = plan.all_hosts
    assert [h.name for h in hosts] == ["host-0", "host-1", "host-2"]
    assert len({h.namespace for h in hosts}) == 3
    subnet = ipaddress.ip_network(netns.DEFAULT_SUBNET)
    addresses = [plan.bridge_address, *(h.address for h in hosts)]
    assert len(set(addresses)) == 4
    assert all(ipaddress.ip_address(a) in subnet for a in addresses)
    # Linux link names hold at most 15 bytes.
    assert all(len(name) <= 15 for name in [plan.bridge, *(h.link for h in hosts), *(f"{h.link}i" for h in hosts)])


def test_two_clusters_never_share_a_namespace_or_a_link(tmp_path: Path):
    a, b = HostNetwork(tmp_path / "a", 2), HostNetwork(tmp_path / "b", 2)
    assert a.bridge != b.bridge
    assert not {h.namespace for h in a.all_hosts} & {h.namespace for h in b.all_hosts}
    assert HostNetwork(tmp_path / "a", 2) == a, "destroy, in another process, finds what create made"


def test_every_host_resolves_every_other_by_name(tmp_path: Path):
    plan = HostNetwork(tmp_path, 3, "10.77.0.0/24")
    lines = plan.hosts_file().splitlines()
    assert "127.0.0.1 localhost" in lines
    for host in plan.all_hosts:
        assert f"{host.address} {host.name}" in lines
    argv = plan.host(1).command(["hostname"])
    assert argv[:4] == ["ip", "netns", "exec", plan.host(1).namespace] and argv[-2:] == ["host-1", "hostname"]


@pytest.mark.parametrize(
    ("hosts", "subnet", "message"),
    [
        (0, netns.DEFAULT_SUBNET, "hosts must be 1..64, got 0"),
        (65, netns.DEFAULT_SUBNET, "hosts must be 1..64, got 65"),
        (3, "198.18.0.0/30", "no room for a bridge and 3 hosts"),
        (2, "fd00::/64", "not an IPv4 network"),
        (2, "198.18.0.1/15", "is not an IP network"),
    ],
)
def test_a_plan_that_cannot_be_made_is_refused_naming_the_value(tmp_path: Path, hosts: int, subnet: str, message: str):
    with pytest.raises(ValueError, match=message):
        HostNetwork(tmp_path, hosts, subnet)


def test_a_host_outside_the_plan_is_refused(tmp_path: Path):
    with pytest.raises(IndexError, match="hosts 0..1"):
        HostNetwork(tmp_path, 2).host(2)


def test_without_the_ip_command_create_refuses_before_making_anything(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(netns.shutil, "which", lambda _: None)
    with pytest.raises(HostNetworkUnavailableError, match="ip command .*not installed"):
        HostNetwork(tmp_path, 2).create()
    assert not (tmp_path / netns.STATE_FILE).exists()


def test_without_root_create_refuses_before_making_anything(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(netns.shutil, "which", lambda _: "/usr/sbin/ip")
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    with pytest.raises(HostNetworkUnavailableError, match="needs root"):
        HostNetwork(tmp_path, 2).create()
    assert not (tmp_path / netns.STATE_FILE).exists()


def test_the_recorded_plan_is_read_back_and_a_corrupt_record_is_named(tmp_path: Path):
    assert HostNetwork.recorded(tmp_path) is None
    plan = HostNetwork(tmp_path, 3, "10.77.0.0/24")
    plan._record()
    assert HostNetwork.recorded(tmp_path) == plan
    (tmp_path / netns.STATE_FILE).write_text("{")
    with pytest.raises(HostNetworkError, match="is not a host network's state"):
        HostNetwork.recorded(tmp_path)
