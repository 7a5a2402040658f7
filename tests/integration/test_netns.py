"""Hosts as network namespaces, made for real (root): they reach each other by name and nothing else, a host
is cut off and joined again, its processes die at once, and ``destroy`` leaves nothing behind, also after a
``create`` that failed halfway."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from submarine_elastic.cluster import netns
from submarine_elastic.cluster.netns import HostNetwork, HostNetworkError
from tests.integration.conftest import eventually

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="making network namespaces needs root (CI runs as root)"),
]

SERVE = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 40123)); s.listen(); print("ready", flush=True)
while True:
    c, _ = s.accept(); c.sendall(socket.gethostbyname(sys.argv[1]).encode()); c.close()
"""
CONNECT = """
import socket, sys
try:
    c = socket.create_connection((sys.argv[1], 40123), timeout=float(sys.argv[2])); print(c.recv(64).decode())
except OSError as exc:
    print(type(exc).__name__, exc.errno)
"""


def run_on(host: netns.Host | None, code: str, *args: str) -> str:
    argv = [sys.executable, "-c", code, *args]
    done = subprocess.run(host.command(argv) if host else argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def leftovers(plan: HostNetwork) -> list[str]:
    names = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    spaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    found = [h.namespace for h in plan.all_hosts if h.namespace in spaces]
    found += [
        name
        for name in [plan.bridge, *(h.link for h in plan.all_hosts)]
        if f" {name}:" in names or f" {name}@" in names
    ]
    found += [str(netns.NETNS_ETC / h.namespace) for h in plan.all_hosts if (netns.NETNS_ETC / h.namespace).exists()]
    return found


@pytest.fixture()
def network(tmp_path: Path) -> Iterator[HostNetwork]:
    plan = HostNetwork(tmp_path, 3, "198.18.200.0/24")
    plan.create()
    try:
        yield plan
    finally:
        plan.destroy()
        assert leftovers(plan) == []


def test_hosts_reach_each_other_by_name_and_nothing_beyond_the_bridge(network: HostNetwork):
    h0, h1, h2 = network.all_hosts
    server = subprocess.Popen(h1.command([sys.executable, "-c", SERVE, "host-2"]), stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        # By name from another host (its hosts file), and the name of a third host resolves there too.
        assert run_on(h0, CONNECT, "host-1", "5") == h2.address
        # By address from the root namespace, through the bridge.
        assert run_on(None, CONNECT, h1.address, "5") == h2.address
        # Loopback inside a host is its own: host 0 does not see host 1's port on 127.0.0.1.
        assert run_on(h0, CONNECT, "127.0.0.1", "2").startswith("ConnectionRefusedError")
        # No route beyond the subnet (10.255.255.1 stands for any address outside it): unreachable at once.
        assert run_on(h0, CONNECT, "10.255.255.1", "2") == "OSError 101"

        network.set_link(1, up=False)
        assert run_on(h0, CONNECT, "host-1", "2").startswith("TimeoutError")
        network.set_link(1, up=True)
        assert run_on(h0, CONNECT, "host-1", "10") == h2.address
    finally:
        server.kill()
        server.wait()


def test_killing_a_host_kills_every_process_in_it_and_no_other(network: HostNetwork):
    h0, h1 = network.host(0), network.host(1)
    on_h1 = [subprocess.Popen(h1.command(["sleep", "600"])) for _ in range(3)]
    on_h0 = subprocess.Popen(h0.command(["sleep", "600"]))
    try:
        # Each enters host 1 as it starts (ip netns exec joins the namespace, then runs sleep).
        started = {p.pid for p in on_h1}
        eventually(lambda: started <= set(netns.namespace_pids(h1.namespace)), "the 3 processes in host 1", 10, 0.05)
        assert netns.kill_namespace_processes(h1.namespace) == 3
        # Gone (and reaped by the kill's wait), while host 0's process lives on.
        assert not [p.pid for p in on_h1 if psutil.pid_exists(p.pid)]
        assert on_h0.poll() is None
        assert netns.namespace_pids(h1.namespace) == []
    finally:
        on_h0.kill()
        on_h0.wait()


def test_destroy_after_a_create_that_failed_halfway_leaves_nothing(tmp_path: Path):
    plan = HostNetwork(tmp_path, 3, "198.18.201.0/24")
    # Host 2's link name is taken, so create fails after the bridge and hosts 0 and 1 exist.
    subprocess.run(["ip", "link", "add", plan.host(2).link, "type", "bridge"], check=True)
    try:
        with pytest.raises(HostNetworkError, match=f"ip link add {plan.host(2).link} .* failed"):
            plan.create()
        assert HostNetwork.recorded(tmp_path) == plan
        assert plan.host(0).namespace in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        removed = HostNetwork.recorded(tmp_path).destroy()  # type: ignore[union-attr]
        assert f"bridge {plan.bridge}" in removed
        assert leftovers(plan) == []
        assert HostNetwork.recorded(tmp_path) is None
        assert plan.destroy() == [], "destroying what is gone is not an error"
    finally:
        subprocess.run(["ip", "link", "del", plan.host(2).link], capture_output=True, check=False)


def test_a_second_create_of_the_same_plan_is_refused_naming_the_namespace(network: HostNetwork):
    with pytest.raises(HostNetworkError, match=f"namespace {network.host(0).namespace} already exists"):
        HostNetwork(network.state_dir, 3, network.subnet).create()


ROUTE = """
import sys
from submarine_elastic import netif
print(*netif.interface_towards(sys.argv[1]), netif.gloo_interface(sys.argv[2]))
try:
    netif.interface_towards("10.255.255.1")
except OSError as exc:
    print("unreachable", exc.errno)
"""


def test_the_interface_towards_another_host_is_found_from_the_route(network: HostNetwork):
    h0 = network.host(0)
    repo = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        h0.command(["env", f"PYTHONPATH={repo}", sys.executable, "-c", ROUTE, "host-1", h0.address]),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == [f"eth0 {h0.address} eth0", "unreachable 101"]
