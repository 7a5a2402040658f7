"""The controller's API over TLS with a certificate of the cluster's CA, as ``controller serve`` runs it;
its clients check it, and plaintext is only for loopback and only when asked for."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from submarine_elastic import tls
from submarine_elastic.controller.api import ControllerAuthError, ControllerUnavailableError
from submarine_elastic.controller.client import ControllerClient
from submarine_elastic.controller.memory import InMemoryController
from submarine_elastic.controller.server import ControllerServer
from submarine_elastic.controller.service import ControllerService
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.policy import PolicyEngine, load_arbiter, load_job_policy
from submarine_elastic.rpc import ServerTls
from tests.unit.test_controller_api import Cluster

TOKEN = "controller-tls-token"


@pytest.fixture()
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ControllerServer]:
    monkeypatch.delenv("SUBMARINE_INSECURE", raising=False)
    engine = PolicyEngine(load_job_policy("greedy"), load_arbiter("fair-share"), cooldown_s=0)
    store = ControllerStore(tmp_path / "state" / "controller.db")
    service = ControllerService(store, engine, Cluster(), capacity=4, clock=lambda: 1000.0)
    issued = tls.cluster_ca().issue_server("controller", tls.loopback_hosts())
    with ControllerServer(service, token=TOKEN, tls=ServerTls(issued.cert, issued.key)) as server:
        yield server
    store.close()


def test_a_client_checks_the_api_against_the_cluster_ca(served: ControllerServer) -> None:
    with ControllerClient(served.address, TOKEN, timeout=5) as client:
        assert client.jobs() == []


def test_a_plaintext_client_gets_nothing(served: ControllerServer) -> None:
    with ControllerClient(served.address, TOKEN, timeout=2, insecure=True) as client:
        with pytest.raises(ControllerUnavailableError):
            client.jobs()


def test_a_server_of_another_ca_is_not_trusted(served: ControllerServer, tmp_path: Path) -> None:
    other = tls.cluster_ca(tmp_path / "other-ca").cert_pem
    with ControllerClient(served.address, TOKEN, timeout=2, ca=other) as client:
        with pytest.raises(ControllerUnavailableError):
            client.jobs()


def test_a_client_without_the_cluster_ca_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SUBMARINE_INSECURE", raising=False)
    monkeypatch.setenv("SUBMARINE_CA_DIR", str(tmp_path / "never-made"))
    with pytest.raises(ControllerAuthError, match=r"cannot check the controller's TLS certificate: .*never-made"):
        ControllerClient("127.0.0.1:9", TOKEN)


def test_plaintext_is_refused_beyond_loopback() -> None:
    with pytest.raises(ValueError, match="needs TLS: plaintext is served on loopback only"):
        ControllerServer(object(), token=TOKEN, host="0.0.0.0")  # type: ignore[arg-type]


def test_plaintext_is_served_on_any_loopback_address() -> None:
    for host in ("127.0.0.2", "[::1]", "LOCALHOST"):  # 127.0.0.0/8, ::1 as a URL writes it, any case
        ControllerServer(InMemoryController(), token=TOKEN, host=host)
    with pytest.raises(ValueError, match="localhost.example.com needs TLS"):
        ControllerServer(InMemoryController(), token=TOKEN, host="localhost.example.com")
