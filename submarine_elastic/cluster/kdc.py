"""The pseudo-cluster's own MIT Kerberos KDC (``submarine cluster up --secure``).

A realm of its own (:data:`REALM`) on loopback, its configuration, database and keytabs under
``<cluster dir>/krb5/`` (mode 0700), and a ``krb5kdc`` that listens on one unprivileged port (TCP and UDP)
and runs as a daemon of the cluster. Nothing here touches ``/etc/krb5.conf`` or the system's KDC.

Layout of ``<cluster dir>/krb5/``::

    krb5.conf         the clients' configuration (``KRB5_CONFIG``; the RM's ``java.security.krb5.conf``)
    kdc.conf          the KDC's (``KRB5_KDC_PROFILE``)
    principal*        the KDC's database; ``stash`` its master key
    http.keytab       ``HTTP/<host>@REALM``: the ResourceManager's SPNEGO key
    <user>.keytab     ``<user>@REALM``: the user's key (``SUBMARINE_YARN_KEYTAB``), which jobs get as a secret

The tools are MIT's (Debian's ``krb5-kdc`` and ``krb5-admin-server``): ``kdb5_util`` creates the database,
``kadmin.local`` the principals and keytabs, ``krb5kdc`` serves them.
"""

from __future__ import annotations

import getpass
import os
import secrets
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from submarine_elastic.cluster.api import ClusterSpec, KerberosSetupError, PrerequisiteError

__all__ = ["KDC_TOOLS", "REALM", "TOOL_TIMEOUT_S", "KerberosRealm", "kdc_answers"]

#: The realm of every secure pseudo-cluster (one per cluster directory; each has its own KDC and keys).
REALM = "SUBMARINE.TEST"
#: MIT's tools the realm needs, and the Debian package that has each.
KDC_TOOLS = {"krb5kdc": "krb5-kdc", "kdb5_util": "krb5-kdc", "kadmin.local": "krb5-admin-server"}
#: Where Debian puts them; a non-root PATH often lacks /usr/sbin.
_SBIN = ("/usr/sbin", "/usr/local/sbin", "/sbin")
#: Seconds one ``kdb5_util`` or ``kadmin.local`` call may take.
TOOL_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class KerberosRealm:
    """The files and names of one pseudo-cluster's realm.

    Args:
        dir: ``<cluster dir>/krb5``.
        host: the address the KDC listens on and the RM's web address names (its ``HTTP/<host>``).
        port: the KDC's port (TCP and UDP).
        user: the user whose principal and keytab are made (the one who runs the cluster).
        logs: directory of ``kdc.log``.
    """

    dir: Path
    host: str
    port: int
    user: str
    logs: Path
    realm: str = REALM

    @classmethod
    def of_cluster(cls, cluster_dir: Path, spec: ClusterSpec) -> KerberosRealm:
        """The realm of a ``secure`` cluster in ``cluster_dir`` (its KDC on ``spec``'s host and KDC port; the
        user's principal is the login user's)."""
        return cls(
            dir=cluster_dir / "krb5",
            host=spec.host,
            port=spec.kdc_port,
            user=getpass.getuser(),
            logs=cluster_dir / "logs",
        )

    @property
    def krb5_conf(self) -> Path:
        return self.dir / "krb5.conf"

    @property
    def kdc_conf(self) -> Path:
        return self.dir / "kdc.conf"

    @property
    def http_principal(self) -> str:
        return f"HTTP/{self.host}@{self.realm}"

    @property
    def http_keytab(self) -> Path:
        return self.dir / "http.keytab"

    @property
    def user_principal(self) -> str:
        return f"{self.user}@{self.realm}"

    @property
    def user_keytab(self) -> Path:
        return self.dir / f"{self.user}.keytab"

    @property
    def pid_file(self) -> Path:
        return self.dir / "kdc.pid"

    def client_env(self) -> dict[str, str]:
        """What a client of the cluster sets to authenticate as the user (printed by ``cluster up --secure``)."""
        return {
            "KRB5_CONFIG": str(self.krb5_conf),
            "SUBMARINE_YARN_AUTH": "kerberos",
            "SUBMARINE_YARN_PRINCIPAL": self.user_principal,
            "SUBMARINE_YARN_KEYTAB": str(self.user_keytab),
        }

    def kdc_env(self) -> dict[str, str]:
        """The environment of the KDC and of the tools that write its database."""
        return {"KRB5_CONFIG": str(self.krb5_conf), "KRB5_KDC_PROFILE": str(self.kdc_conf)}

    def tool(self, name: str) -> str:
        """The path of one of :data:`KDC_TOOLS`.

        Raises:
            PrerequisiteError: it is not installed (naming the Debian package).
        """
        path = shutil.which(name) or shutil.which(name, path=os.pathsep.join(_SBIN))
        if path is None:
            raise PrerequisiteError(
                f"--secure needs MIT Kerberos' {name}, which is not installed; on Debian: "
                f"apt-get install {' '.join(sorted(set(KDC_TOOLS.values())))} (scripts/install.sh does)"
            )
        return path

    def check_tools(self) -> None:
        """Raises PrerequisiteError naming the first of :data:`KDC_TOOLS` that is missing."""
        for name in KDC_TOOLS:
            self.tool(name)

    def write_config(self) -> None:
        """``krb5.conf`` and ``kdc.conf`` for this realm, in a directory only the user reads."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o700)
        addr = f"{self.host}:{self.port}"
        self.krb5_conf.write_text(
            "[libdefaults]\n"
            f"  default_realm = {self.realm}\n"
            "  dns_lookup_kdc = false\n"
            "  dns_lookup_realm = false\n"
            "  dns_canonicalize_hostname = false\n"
            "  rdns = false\n"
            "  udp_preference_limit = 1\n"
            "  ticket_lifetime = 24h\n"
            "  forwardable = false\n"
            # A kinit with this configuration leaves the user's usual credentials cache alone.
            f"  default_ccache_name = FILE:{self.dir}/krb5cc_%{{uid}}\n"
            "\n[realms]\n"
            f"  {self.realm} = {{\n    kdc = {addr}\n  }}\n"
            "\n[domain_realm]\n"
            f"  {self.host} = {self.realm}\n"
        )
        self.kdc_conf.write_text(
            "[kdcdefaults]\n"
            f"  kdc_listen = {addr}\n"
            f"  kdc_tcp_listen = {addr}\n"
            "\n[realms]\n"
            f"  {self.realm} = {{\n"
            f"    database_name = {self.dir}/principal\n"
            f"    key_stash_file = {self.dir}/stash\n"
            f"    acl_file = {self.dir}/kadm5.acl\n"
            f"    kdc_listen = {addr}\n"
            f"    kdc_tcp_listen = {addr}\n"
            "    max_life = 24h\n"
            "    max_renewable_life = 7d\n"
            "  }\n"
            "\n[logging]\n"
            f"  kdc = FILE:{self.logs}/kdc.log\n"
        )
        (self.dir / "kadm5.acl").write_text("")

    def create(self) -> None:
        """The realm's database (a random master key, stashed) and its principals, each with a random key
        exported to its keytab (mode 0600): :attr:`http_principal` and :attr:`user_principal`.

        Raises:
            PrerequisiteError: a tool is missing.
            KerberosSetupError: a tool failed or hung, or a keytab was not written (the tool and its output named).
        """
        self.write_config()
        master = secrets.token_urlsafe(24)
        # The master key on stdin (entered twice), never on a command line others may read.
        self._run(self.tool("kdb5_util"), "create", "-s", "-r", self.realm, stdin=f"{master}\n{master}\n")
        for principal, keytab in ((self.http_principal, self.http_keytab), (self.user_principal, self.user_keytab)):
            keytab.unlink(missing_ok=True)
            self._kadmin(f"addprinc -randkey {principal}")
            out = self._kadmin(f"ktadd -k {keytab} {principal}")
            if not keytab.is_file():  # kadmin.local exits 0 when a query fails
                raise KerberosSetupError(f"kadmin.local wrote no keytab for {principal}: {out.strip()}")
            keytab.chmod(0o600)

    def kdc_command(self) -> list[str]:
        """``krb5kdc`` in the foreground; its pid file names the cluster's directory (how ``down`` finds it)."""
        return [self.tool("krb5kdc"), "-n", "-r", self.realm, "-P", str(self.pid_file)]

    def _kadmin(self, query: str) -> str:
        return self._run(self.tool("kadmin.local"), "-r", self.realm, "-q", query)

    def _run(self, *cmd: str, stdin: str = "") -> str:
        """Run one of the tools; returns what it printed.

        Raises:
            KerberosSetupError: it failed, or took longer than ``TOOL_TIMEOUT_S`` (its output named).
        """
        name = Path(cmd[0]).name
        try:
            done = subprocess.run(
                cmd,
                check=True,
                input=stdin,
                capture_output=True,
                text=True,
                timeout=TOOL_TIMEOUT_S,
                env={**os.environ, **self.kdc_env()},
            )
        except subprocess.CalledProcessError as exc:
            output = (exc.stdout + exc.stderr).strip()
            raise KerberosSetupError(f"{name} failed (exit {exc.returncode}): {output}") from exc
        except subprocess.TimeoutExpired as exc:
            raise KerberosSetupError(f"{name} did not finish within {TOOL_TIMEOUT_S:g} s") from exc
        return done.stdout + done.stderr


def kdc_answers(host: str, port: int) -> bool:
    """Whether something accepts TCP connections on the KDC's port."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False
