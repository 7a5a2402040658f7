"""What a job logs in and speaks TLS with, read from the submitter's files: the driver's Kerberos login to the
ResourceManager (:class:`YarnLogin`) and the TLS of its control plane (:class:`DriverTls`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from submarine_elastic import env
from submarine_elastic.submit.api import JobSpecError

#: The first byte of a keytab file (MIT's format, versions 0x0501 and 0x0502).
_KEYTAB_MAGIC = 0x05
#: A principal that may go into the spec (and so into the containers' launch script) as it is.
_PRINCIPAL = re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)?(@[A-Za-z0-9._-]+)?")
#: A keytab path that may go into the spec as it is (``--keytab`` without ``--distribute_keytab``).
_NODE_PATH = re.compile(r"/[A-Za-z0-9._/-]+")


@dataclass(frozen=True)
class YarnLogin:
    """How a job's driver logs in to a Kerberos-secured ResourceManager (``SUBMARINE_YARN_AUTH=kerberos``): the
    submitter's keytab, given to the job as a secret file (``jobspec.KEYTAB_FILE``, never in the spec), and the
    principal to log in as (default: the keytab's first). With ``node_path`` (Submarine's ``--keytab`` without
    ``--distribute_keytab``) the keytab is not copied: every node has it at that path, which the spec names."""

    keytab: bytes
    principal: str | None = None
    node_path: str | None = None

    def __repr__(self) -> str:  # never show the key
        return f"YarnLogin(principal={self.principal!r}, node_path={self.node_path!r}, keytab=***)"

    @classmethod
    def from_env(cls) -> YarnLogin | None:
        """The submitter's login for the job (``SUBMARINE_YARN_KEYTAB``, ``SUBMARINE_YARN_PRINCIPAL``) when
        ``SUBMARINE_YARN_AUTH=kerberos``; None with simple auth.

        Raises:
            JobSpecError: kerberos without a keytab (a credentials cache cannot be given to a job), or a
                keytab that cannot be read or is not one (the file named).
        """
        settings = env.settings()
        if settings.yarn_auth != "kerberos":
            return None
        path = settings.yarn_keytab
        if path is None:
            raise JobSpecError(
                "SUBMARINE_YARN_AUTH=kerberos: the job's driver logs in to the ResourceManager from a keytab; "
                "set SUBMARINE_YARN_KEYTAB (and SUBMARINE_YARN_PRINCIPAL) to the keytab the job may use, or "
                "give --keytab"
            )
        return cls.load(path, settings.yarn_principal, flags=("SUBMARINE_YARN_KEYTAB", "SUBMARINE_YARN_PRINCIPAL"))

    @classmethod
    def load(
        cls,
        path: Path,
        principal: str | None,
        *,
        distribute: bool = True,
        flags: tuple[str, str] = ("--keytab", "--principal"),
    ) -> YarnLogin:
        """The login from the keytab ``path`` (read here: ``job run`` talks to the RM with it too) as
        ``principal``; ``distribute=False``: the nodes hold it at the same path, the job gets no copy.

        Raises:
            JobSpecError: the keytab cannot be read or is not one, the principal is not one, or a path to leave
                on the nodes is not absolute plain characters (naming ``flags``).
        """
        keytab_flag, principal_flag = flags
        try:
            keytab = path.read_bytes()
        except OSError as exc:
            raise JobSpecError(f"{keytab_flag} {path}: cannot read it ({exc.strerror})") from exc
        if not keytab or keytab[0] != _KEYTAB_MAGIC:
            raise JobSpecError(f"{keytab_flag} {path}: not a Kerberos keytab")
        if principal is not None and not _PRINCIPAL.fullmatch(principal):
            raise JobSpecError(
                f"{principal_flag} {principal!r} is not a Kerberos principal (name[/instance]@REALM of "
                "letters, digits and ._-)"
            )
        node_path = None
        if not distribute:
            node_path = str(path.absolute())
            if not _NODE_PATH.fullmatch(node_path):
                raise JobSpecError(
                    f"{keytab_flag} {path}: without --distribute_keytab the spec names this path for every node, "
                    "and it must be absolute, of letters, digits and ._/- only"
                )
        return cls(keytab=keytab, principal=principal, node_path=node_path)


@dataclass(frozen=True)
class DriverTls:
    """TLS for the job driver's control plane: its certificate chain and key, and the certificates its
    callers (the agents, ``job flex|show``) trust for it, all PEM. The certificate must name the hosts
    the driver may run on."""

    cert: str
    key: str
    ca: str

    def __repr__(self) -> str:  # never show the key
        return "DriverTls(cert=..., key=***, ca=...)"

    @classmethod
    def load(cls, cert: Path, key: Path, ca: Path | None = None) -> DriverTls:
        """Reads the PEM files (``ca`` defaults to ``cert``, for a self-signed certificate).

        Raises:
            JobSpecError: a file cannot be read or holds no PEM block of the right kind (the flag named).
        """

        def pem(flag: str, path: Path, kinds: tuple[str, ...]) -> str:
            try:
                text = path.read_text()
            except (OSError, UnicodeDecodeError) as exc:
                raise JobSpecError(f"{flag} {path}: cannot read it ({exc})") from exc
            if not any(f"-----BEGIN {kind}-----" in text for kind in kinds):
                raise JobSpecError(f"{flag} {path}: no PEM {' or '.join(kinds)} in it")
            return text

        certificate = pem("--tls_cert", cert, ("CERTIFICATE",))
        return cls(
            cert=certificate,
            key=pem("--tls_key", key, ("PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY")),
            ca=certificate if ca is None else pem("--tls_ca", ca, ("CERTIFICATE",)),
        )
