"""The cluster's CA (submarine_elastic/tls.py): created once, private, and what it issues."""

from __future__ import annotations

import ipaddress
import os
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from submarine_elastic import tls


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_cluster_ca_is_created_on_first_use_with_a_private_key(tmp_path: Path) -> None:
    where = tmp_path / "ca"
    ca = tls.cluster_ca(where)
    assert _mode(where) == 0o700
    assert _mode(where / tls.CA_KEY) == 0o600
    assert (where / tls.CA_CERT).read_bytes() == ca.cert_pem
    assert tls.cluster_ca(where).cert_pem == ca.cert_pem  # opened again, not made anew
    assert tls.cluster_ca_cert(where) == ca.cert_pem


def test_the_default_directory_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUBMARINE_CA_DIR", str(tmp_path / "elsewhere"))
    ca = tls.cluster_ca()
    assert (tmp_path / "elsewhere" / tls.CA_CERT).read_bytes() == ca.cert_pem


def test_processes_opening_it_at_once_agree_on_one_ca(tmp_path: Path) -> None:
    seen: list[bytes] = []
    threads = [threading.Thread(target=lambda: seen.append(tls.cluster_ca(tmp_path).cert_pem)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(seen)) == 1


def test_a_key_others_may_read_is_refused(tmp_path: Path) -> None:
    tls.cluster_ca(tmp_path)
    os.chmod(tmp_path / tls.CA_KEY, 0o644)
    with pytest.raises(tls.CaError, match=r"ca.key has mode 0644"):
        tls.cluster_ca(tmp_path)


def test_a_key_of_another_certificate_is_refused(tmp_path: Path) -> None:
    tls.cluster_ca(tmp_path / "a")
    tls.cluster_ca(tmp_path / "b")
    os.replace(tmp_path / "b" / tls.CA_KEY, tmp_path / "a" / tls.CA_KEY)
    with pytest.raises(tls.CaError, match="does not belong"):
        tls.cluster_ca(tmp_path / "a")


def test_a_server_certificate_names_its_hosts_and_is_signed_by_the_ca(tmp_path: Path) -> None:
    ca = tls.cluster_ca(tmp_path)
    issued = ca.issue_server("metrics", ["10.1.2.3", "nm-1.example", *tls.loopback_hosts("0.0.0.0")])
    cert = x509.load_pem_x509_certificate(issued.cert)
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.cert_pem))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["nm-1.example", "localhost"]
    assert sans.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("10.1.2.3"),
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert issued.ca == ca.cert_pem
    assert "PRIVATE KEY" not in repr(issued)


def test_a_client_certificate_names_its_holder() -> None:
    ca = tls.CertificateAuthority.create("job a")
    issued = ca.issue_client("a/agent")
    assert tls.common_name(issued.cert) == "a/agent"
    usage = x509.load_pem_x509_certificate(issued.cert).extensions.get_extension_for_class(x509.ExtendedKeyUsage)
    assert list(usage.value) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_issued_files_are_private(tmp_path: Path) -> None:
    cert, key = tls.CertificateAuthority.create("x").issue_client("c").write(tmp_path, "client")
    assert _mode(cert) == 0o600 and _mode(key) == 0o600
    assert b"PRIVATE KEY" in key.read_bytes()


@pytest.mark.parametrize("host", ["", "bad host", "-x.example", "a" * 64 + ".example", "x_y.example"])
def test_a_bad_host_is_refused_naming_it(host: str) -> None:
    ca = tls.CertificateAuthority.create("x")
    with pytest.raises(tls.CertificateRequestError, match="neither an IP address nor a DNS name"):
        ca.issue_server("s", [host])


def test_a_server_certificate_needs_a_host_and_a_name() -> None:
    ca = tls.CertificateAuthority.create("x")
    with pytest.raises(tls.CertificateRequestError, match="at least one host"):
        ca.issue_server("s", [])
    with pytest.raises(tls.CertificateRequestError, match="1-64 printable"):
        ca.issue_client("")


def test_a_driver_name_is_one_dns_name_per_job() -> None:
    assert tls.driver_server_name("job-1") == "job-1.driver.submarine-elastic.invalid"
    tls.CertificateAuthority.create("x").issue_server("d", [tls.driver_server_name("a" * 63)])
