"""Certificates for the project's TLS: a per-cluster certificate authority and the certificates it issues.

:func:`cluster_ca` opens the cluster's CA, creating it on first use in a directory of its own
(``SUBMARINE_CA_DIR``, default ``~/.submarine-elastic/ca``: directory mode 0700, ``ca.key`` mode 0600,
``ca.crt``). It issues the server certificates of the services that outlive a job (the controller's API
and metrics service, ``submarine metrics serve``) and the client certificates that open them (a job's
hooks, the CLI).

A job's control plane has a CA of its own (:meth:`CertificateAuthority.create`, kept in memory only):
``submarine job run`` issues with it the driver's server certificate, the agents' and the CLI's client
certificates, and forgets its key. The driver trusts only that CA for its clients, so a certificate of
another job, or of the cluster, does not open it; and no key is left from which more could be issued.
The driver runs on whichever NodeManager YARN picks, so its certificate names the job
(:func:`driver_server_name`) and its clients check that name (gRPC's ``ssl_target_name_override``)
instead of the host they dial.

Keys are ECDSA P-256. This module does no networking and imports neither gRPC nor the rest of the project
beyond ``env``.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import ipaddress
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from submarine_elastic import env
from submarine_elastic.files import write_atomic

#: How long the cluster's CA certificate is valid.
CA_VALID_DAYS = 3650
#: How long a certificate it issues (a service's, a job's, a client's) is valid.
LEAF_VALID_DAYS = 365
#: Certificates are valid from this long before they are issued, for clocks a little behind the issuer's.
CLOCK_SKEW = datetime.timedelta(minutes=5)
#: The cluster CA's files in its directory.
CA_CERT = "ca.crt"
CA_KEY = "ca.key"
_LOCK = "ca.lock"
#: The domain of the names a job's driver certificate carries (see :func:`driver_server_name`).
DRIVER_NAME_DOMAIN = "driver.submarine-elastic.invalid"


class TlsError(Exception):
    """Base of this module's errors."""


class CaError(TlsError):
    """The cluster CA cannot be read or created; the message names the file and why."""


class CertificateRequestError(TlsError, ValueError):
    """A certificate was asked for with a bad name or host; the message names the value."""


@dataclass(frozen=True)
class Issued:
    """A certificate, its private key and the certificate of the CA that issued it, all PEM."""

    cert: bytes
    key: bytes
    ca: bytes

    def __repr__(self) -> str:  # never show the key
        return f"Issued({common_name(self.cert)!r}, key=***)"

    def write(self, directory: Path, stem: str) -> tuple[Path, Path]:
        """Writes ``<stem>.crt`` and ``<stem>.key`` (mode 0600) into ``directory``; returns both paths."""
        cert, key = directory / f"{stem}.crt", directory / f"{stem}.key"
        write_private(cert, self.cert)
        write_private(key, self.key)
        return cert, key


class CertificateAuthority:
    """A CA key and its self-signed certificate: issues server and client certificates.

    Build one with :meth:`create` (in memory) or :func:`cluster_ca` (on disk).
    """

    def __init__(self, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
        self._key = key
        self._cert = cert
        self.cert_pem = cert.public_bytes(serialization.Encoding.PEM)

    def __repr__(self) -> str:
        return f"CertificateAuthority({self.name!r})"

    @property
    def name(self) -> str:
        return common_name(self.cert_pem)

    @classmethod
    def create(cls, name: str, *, days: int = CA_VALID_DAYS) -> CertificateAuthority:
        """A new CA called ``name`` (its certificate's common name), valid ``days`` days.

        Raises:
            CertificateRequestError: ``name`` is empty or too long for a common name (64 characters).
        """
        _check_name(name)
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = _now()
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - CLOCK_SKEW)
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert)

    def issue_server(self, name: str, hosts: Sequence[str], *, days: int = LEAF_VALID_DAYS) -> Issued:
        """A server certificate called ``name`` for ``hosts`` (DNS names or IP addresses: a client checks
        the one it dials, or the name it is told to expect, against them).

        Raises:
            CertificateRequestError: a bad ``name``, no host, or a host that is neither an IP address nor a
                DNS name.
        """
        if not hosts:
            raise CertificateRequestError(f"a server certificate for {name!r} needs at least one host")
        return self._issue(name, ExtendedKeyUsageOID.SERVER_AUTH, [_san(h) for h in dict.fromkeys(hosts)], days)

    def issue_client(self, name: str, *, days: int = LEAF_VALID_DAYS) -> Issued:
        """A client certificate called ``name`` (its common name: who holds it).

        Raises:
            CertificateRequestError: a bad ``name``.
        """
        return self._issue(name, ExtendedKeyUsageOID.CLIENT_AUTH, [], days)

    def _issue(self, name: str, usage: x509.ObjectIdentifier, sans: list[x509.GeneralName], days: int) -> Issued:
        _check_name(name)
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - CLOCK_SKEW)
            .not_valid_after(min(now + datetime.timedelta(days=days), self._cert.not_valid_after_utc))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_encipherment=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    content_commitment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return Issued(
            cert=cert.public_bytes(serialization.Encoding.PEM),
            key=key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
            ca=self.cert_pem,
        )


def cluster_ca(directory: Path | None = None) -> CertificateAuthority:
    """The cluster's CA in ``directory`` (default: ``SUBMARINE_CA_DIR``), created on first use.

    Processes that open it at the same time agree on one CA (the first creates it under a lock). A key
    file that others than its owner may read is refused, not used.

    Raises:
        CaError: the directory cannot be made, a file cannot be read or written, holds no CA, or the key
            is readable by group or others (each named, with why).
    """
    where = directory if directory is not None else env.settings().ca_directory()
    try:
        where.mkdir(parents=True, exist_ok=True, mode=0o700)
        where.chmod(0o700)
    except OSError as exc:
        raise CaError(f"cannot make the CA directory {where}: {exc.strerror or exc}") from exc
    with _locked(where / _LOCK):
        if not (where / CA_KEY).exists():
            ca = CertificateAuthority.create(f"submarine-elastic cluster CA ({where})"[:64])
            write_private(
                where / CA_KEY,
                ca._key.private_bytes(
                    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                ),
            )
            write_private(where / CA_CERT, ca.cert_pem, mode=0o644)
            return ca
        return _load(where)


def _load(where: Path) -> CertificateAuthority:
    key_path, cert_path = where / CA_KEY, where / CA_CERT
    try:
        mode = stat.S_IMODE(key_path.stat().st_mode)
        if mode & 0o077:
            raise CaError(f"the CA key {key_path} has mode {mode:04o}: others may read it; chmod 600 it")
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    except OSError as exc:
        raise CaError(f"cannot read the cluster CA in {where}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise CaError(f"the cluster CA in {where} holds no PEM key and certificate: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CaError(f"the CA key {key_path} is not an EC key")
    if key.public_key().public_numbers() != cert.public_key().public_numbers():  # type: ignore[union-attr]
        raise CaError(f"the CA key {key_path} does not belong to the certificate {cert_path}")
    return CertificateAuthority(key, cert)


def cluster_ca_cert(directory: Path | None = None) -> bytes:
    """The cluster CA's certificate (PEM), for a client that only checks servers against it.

    Raises:
        CaError: the CA was not created yet or cannot be read.
    """
    path = (directory if directory is not None else env.settings().ca_directory()) / CA_CERT
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CaError(f"cannot read the cluster CA certificate {path}: {exc.strerror or exc}") from exc


def driver_server_name(job: str) -> str:
    """The name a job's driver certificate carries and its clients expect: one per job, whatever host
    YARN runs the driver on."""
    return f"{job}.{DRIVER_NAME_DOMAIN}"


def loopback_hosts(*hosts: str) -> list[str]:
    """``hosts`` (a wildcard bind address left out) and the names of this machine's loopback."""
    wildcard = {"", "0.0.0.0", "::", "[::]"}
    return list(dict.fromkeys([h.strip("[]") for h in hosts if h not in wildcard] + ["localhost", "127.0.0.1", "::1"]))


def common_name(cert_pem: bytes) -> str:
    """The subject common name of the first certificate in ``cert_pem`` ('' without one).

    Raises:
        ValueError: ``cert_pem`` holds no PEM certificate.
    """
    names = x509.load_pem_x509_certificate(cert_pem).subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


def write_private(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Writes ``data`` to ``path`` atomically, the file created with ``mode`` (never wider, even for a moment)."""
    write_atomic(path, data, mode=mode)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise CaError(f"cannot lock the CA directory ({path}): {exc.strerror or exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _san(host: str) -> x509.GeneralName:
    text = host.strip().strip("[]")
    try:
        return x509.IPAddress(ipaddress.ip_address(text))
    except ValueError:
        pass
    labels = text.rstrip(".").split(".")
    if not text or len(text) > 253 or not all(_dns_label(label) for label in labels):
        raise CertificateRequestError(f"{host!r} is neither an IP address nor a DNS name")
    return x509.DNSName(text.lower())


def _dns_label(label: str) -> bool:
    return 0 < len(label) <= 63 and label.replace("-", "").isalnum() and label.isascii() and label[0] != "-"


def _check_name(name: str) -> None:
    if not name or len(name) > 64 or not name.isprintable():
        raise CertificateRequestError(f"a certificate name must be 1-64 printable characters, got {name!r}")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
