"""Test certificates: self-signed ones made with the openssl command, and the cluster CA's."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import pytest

from submarine_elastic import tls
from submarine_elastic.metrics.server import TlsCredentials


def self_signed(directory: Path, hosts: Iterable[str] = ("localhost", "127.0.0.1")) -> tuple[Path, Path]:
    """A self-signed certificate naming ``hosts`` (host names and IP addresses) and its key, PEM files
    in ``directory``. Skips the calling test where openssl is not installed."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed; it makes the test certificate")

    def entry(host: str) -> str:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return f"DNS:{host}"
        return f"IP:{host}"

    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "cert.pem", directory / "key.pem"
    names = ",".join(dict.fromkeys(entry(h) for h in hosts))
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        + ["-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=submarine-test"]
        + ["-addext", f"subjectAltName={names}"],
        check=True,
        capture_output=True,
    )
    return cert, key


def cluster_metrics_tls(*hosts: str) -> TlsCredentials:
    """Mutual TLS for a test's metrics service, as the controller serves it: a certificate of the cluster's CA
    (``SUBMARINE_CA_DIR``) for loopback and ``hosts``, and callers' certificates of that CA required. ``job run``
    gives every job that reports metrics one, and the CA."""
    ca = tls.cluster_ca()
    issued = ca.issue_server("test metrics", tls.loopback_hosts(*hosts))
    return TlsCredentials(issued.cert, issued.key, client_ca=ca.cert_pem)
