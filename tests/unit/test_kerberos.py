"""Kerberos (SPNEGO) to the ResourceManager, against a real MIT KDC and a real GSSAPI acceptor.

The module creates a realm with the pseudo-cluster's own code (``cluster.kdc``) and starts its ``krb5kdc`` on a
free loopback port; an HTTP server in this process plays the RM's web endpoints with the realm's ``HTTP/<host>``
keytab, as Hadoop's SPNEGO filter does (a ``Negotiate`` challenge, the server's mutual-authentication token on
the answer, a ``hadoop.auth`` cookie), or plays a server that does not prove itself. Needs MIT Kerberos' KDC
tools (``scripts/install.sh`` installs them); skipped where they are missing.
"""

from __future__ import annotations

import base64
import getpass
import json
import os
import socket
import stat
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from submarine_elastic.cluster import probes
from submarine_elastic.cluster.api import PrerequisiteError
from submarine_elastic.cluster.kdc import KerberosRealm, kdc_answers
from submarine_elastic.controller.backend import YarnJobBackend
from submarine_elastic.protocol.api import Limits
from submarine_elastic.submit.jobspec import (
    KEYTAB_FILE,
    JobRequest,
    JobSpecError,
    WorkerResources,
    build_service,
    with_credentials,
    write_secrets,
)
from submarine_elastic.yarn import YarnAuthError, YarnServiceClient, spnego_auth

gssapi = pytest.importorskip("gssapi")
requests_gssapi = pytest.importorskip("requests_gssapi")

NODES = {
    "nodes": {
        "node": [
            {
                "id": "nm-a:1",
                "state": "RUNNING",
                "availMemoryMB": 3072,
                "availableVirtualCores": 3,
                "usedMemoryMB": 1024,
                "usedVirtualCores": 1,
            }
        ]
    }
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def realm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KerberosRealm]:
    base = tmp_path_factory.mktemp("krb")
    kdc = KerberosRealm(dir=base / "krb5", host="127.0.0.1", port=_free_port(), user=getpass.getuser(), logs=base)
    try:
        kdc.check_tools()
    except PrerequisiteError as exc:
        pytest.skip(str(exc))
    kdc.create()
    proc = subprocess.Popen(kdc.kdc_command(), env={**os.environ, **kdc.kdc_env()}, stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if kdc_answers(kdc.host, kdc.port):
                break
            assert proc.poll() is None, (base / "kdc.log").read_text()
            threading.Event().wait(0.05)
        yield kdc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture()
def krb5_config(realm: KerberosRealm, monkeypatch: pytest.MonkeyPatch) -> KerberosRealm:
    monkeypatch.setenv("KRB5_CONFIG", str(realm.krb5_conf))
    # No credentials cache to fall back on: every login here comes from a keytab.
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{realm.dir}/no-such-cache")
    return realm


@dataclass
class Seen:
    principals: list[str] = field(default_factory=list)
    cookies: list[str | None] = field(default_factory=list)
    unauthenticated: int = 0


class FakeRM:
    """The RM's web endpoints behind SPNEGO, in a thread: ``proves`` decides whether its answers carry the
    server's mutual-authentication token (Hadoop's filter sends it) or not (a server that does not prove it
    holds the RM's key). It answers every authenticated GET with ``body``."""

    def __init__(self, realm: KerberosRealm, body: dict[str, Any], *, proves: bool = True) -> None:
        self.seen = Seen()
        creds = gssapi.Credentials(usage="accept", store={"keytab": str(realm.http_keytab)})
        rm = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                rm.seen.cookies.append(self.headers.get("Cookie"))
                auth = self.headers.get("Authorization", "")
                if not auth.startswith("Negotiate "):
                    rm.seen.unauthenticated += 1
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", "Negotiate")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                ctx = gssapi.SecurityContext(creds=creds, usage="accept")
                token = ctx.step(base64.b64decode(auth.split(" ", 1)[1]))
                rm.seen.principals.append(str(ctx.initiator_name))
                data = json.dumps(body).encode()
                self.send_response(200)
                if proves and token:
                    self.send_header("WWW-Authenticate", f"Negotiate {base64.b64encode(token).decode()}")
                self.send_header("Set-Cookie", "hadoop.auth=u=someone&t=kerberos; Path=/; HttpOnly")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeRM:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def kerberos_client(url: str, realm: KerberosRealm) -> YarnServiceClient:
    return YarnServiceClient(
        url, auth="kerberos", keytab=realm.user_keytab, principal=realm.user_principal, retries=0, timeout=5.0
    )


# ------------------------------------------------------------------------------------------- the client


def test_mutual_authentication_is_required() -> None:
    auth = spnego_auth()
    assert auth.mutual_authentication == requests_gssapi.REQUIRED  # type: ignore[attr-defined]
    client = YarnServiceClient("http://rm.test:8088", auth="kerberos")
    assert client._auth is not None
    assert client._auth.mutual_authentication == requests_gssapi.REQUIRED  # type: ignore[attr-defined]


def test_the_client_logs_in_from_a_keytab_and_authenticates_every_request(krb5_config: KerberosRealm) -> None:
    with FakeRM(krb5_config, {"hadoop_version": "3.4.2"}) as rm, kerberos_client(rm.url, krb5_config) as client:
        assert client.hadoop_version() == "3.4.2"
        assert client.hadoop_version() == "3.4.2"
    assert rm.seen.principals == [krb5_config.user_principal] * 2
    # Each request carries its own token, never the server's cookie: an answer to a cookie proves nothing.
    assert rm.seen.cookies == [None, None]
    assert rm.seen.unauthenticated == 0


def test_a_server_that_does_not_prove_itself_is_refused(krb5_config: KerberosRealm) -> None:
    with FakeRM(krb5_config, {"hadoop_version": "3.4.2"}, proves=False) as rm:
        with kerberos_client(rm.url, krb5_config) as client:
            with pytest.raises(YarnAuthError, match="did not prove it holds the ResourceManager's Kerberos key"):
                client.hadoop_version()
    assert rm.seen.principals == [krb5_config.user_principal]


def test_a_keytab_without_the_principal_is_a_clear_error(krb5_config: KerberosRealm) -> None:
    with pytest.raises(YarnAuthError, match=rf"cannot log in as nobody@{krb5_config.realm} from keytab"):
        YarnServiceClient(
            "http://127.0.0.1:1",
            auth="kerberos",
            keytab=krb5_config.user_keytab,
            principal=f"nobody@{krb5_config.realm}",
        )
    with pytest.raises(YarnAuthError, match="is not a readable file"):
        YarnServiceClient("http://127.0.0.1:1", auth="kerberos", keytab=krb5_config.dir / "missing.keytab")


# ------------------------------------------------------------------------- the controller and the cluster


def test_the_controllers_capacity_check_is_authenticated(
    krb5_config: KerberosRealm, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUBMARINE_YARN_AUTH", "kerberos")
    monkeypatch.setenv("SUBMARINE_YARN_KEYTAB", str(krb5_config.user_keytab))
    monkeypatch.setenv("SUBMARINE_YARN_PRINCIPAL", krb5_config.user_principal)
    with FakeRM(krb5_config, NODES) as rm:
        backend = YarnJobBackend(rm.url)
        try:
            nodes = backend.nodes()
        finally:
            backend.close()
    assert nodes is not None and [n.node_id for n in nodes] == ["nm-a:1"]
    assert rm.seen.principals == [krb5_config.user_principal]
    # A server that does not prove itself gives the controller no capacity to act on.
    with FakeRM(krb5_config, NODES, proves=False) as impostor:
        backend = YarnJobBackend(impostor.url)
        try:
            assert backend.nodes() is None
        finally:
            backend.close()


def test_the_pseudo_clusters_own_reads_of_the_rm_are_authenticated(krb5_config: KerberosRealm) -> None:
    auth = spnego_auth(keytab=krb5_config.user_keytab, principal=krb5_config.user_principal)
    with FakeRM(krb5_config, NODES) as rm:
        nodes = probes.rm_nodes(rm.url, auth)
    assert [n.node_id for n in nodes] == ["nm-a:1"]
    assert rm.seen.principals == [krb5_config.user_principal]


def test_the_daemons_of_a_secure_cluster_run_their_web_endpoints_behind_spnego(tmp_path: Path) -> None:
    from submarine_elastic.cluster import ClusterSpec, LocalCluster

    cluster = LocalCluster(tmp_path, hadoop_lib=tmp_path / "lib")
    spec = ClusterSpec(nodes=1, port_base=23000, secure=True)
    realm = cluster.realm(spec)
    files, settings = cluster.conf.daemon_files("rm", spec, tmp_path / "dep.tar.gz")
    core = settings[tmp_path / "conf" / "rm" / "core-site.xml"]
    assert core["hadoop.http.authentication.type"] == "kerberos"
    assert core["hadoop.http.authentication.simple.anonymous.allowed"] == "false"
    assert core["hadoop.http.authentication.kerberos.principal"] == "HTTP/127.0.0.1@SUBMARINE.TEST"
    assert core["hadoop.http.authentication.kerberos.keytab"] == str(realm.http_keytab)
    assert "AuthenticationFilterInitializer" in core["hadoop.http.filter.initializers"]
    _files, nm_settings = cluster.conf.daemon_files("nm-0", spec, tmp_path / "dep.tar.gz", node=0)
    assert nm_settings[tmp_path / "conf" / "nm-0" / "core-site.xml"] == core
    whitelist = nm_settings[tmp_path / "conf" / "nm-0" / "yarn-site.xml"]["yarn.nodemanager.env-whitelist"]
    assert whitelist.split(",")[-1] == "KRB5_CONFIG"
    assert spec.daemon_names()[0] == "kdc" and spec.daemon_ports("kdc") == {23089: "Kerberos KDC"}


# ------------------------------------------------------------------------------------ the job's keytab


def _request(**kwargs: Any) -> JobRequest:
    return with_credentials(
        JobRequest(
            name="krb-job",
            launch_cmd="python train.py",
            limits=Limits(1, 1, 2),
            resources=WorkerResources.parse("memory-mb=1024,vcores=1"),
            rm_url="http://127.0.0.1:18088",
            driver_port=21234,
            insecure=True,
            **kwargs,
        )
    )


def test_the_keytab_goes_to_the_job_as_a_secret_file_never_in_the_spec(
    krb5_config: KerberosRealm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUBMARINE_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("SUBMARINE_YARN_AUTH", "kerberos")
    monkeypatch.setenv("SUBMARINE_YARN_KEYTAB", str(krb5_config.user_keytab))
    monkeypatch.setenv("SUBMARINE_YARN_PRINCIPAL", krb5_config.user_principal)
    keytab = krb5_config.user_keytab.read_bytes()
    req = _request()
    spec = build_service(req).to_dict()
    shown = json.dumps(spec)
    assert base64.b64encode(keytab).decode()[:24] not in shown and keytab.hex()[:24] not in shown
    assert "keytab=***" in repr(req.yarn_login) and keytab.hex() not in repr(req)
    env = spec["configuration"]["env"]
    assert env["SUBMARINE_YARN_AUTH"] == "kerberos"
    assert env["SUBMARINE_YARN_KEYTAB"] == f"$PWD/{KEYTAB_FILE}"
    assert env["SUBMARINE_YARN_PRINCIPAL"] == krb5_config.user_principal
    localized = {f["dest_file"]: f["src_file"] for f in spec["configuration"]["files"]}
    written = write_secrets(req) / KEYTAB_FILE
    assert localized[KEYTAB_FILE] == f"file://{written.resolve()}"
    assert written.read_bytes() == keytab
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    # The job's copy logs in as the user does, as the driver does in its container.
    monkeypatch.setenv("SUBMARINE_YARN_KEYTAB", str(written))
    with FakeRM(krb5_config, {"hadoop_version": "3.4.2"}) as rm:
        with YarnServiceClient(rm.url, retries=0) as client:
            assert client.hadoop_version() == "3.4.2"
    assert rm.seen.principals == [krb5_config.user_principal]


def test_simple_auth_gives_the_job_no_keytab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SUBMARINE_YARN_AUTH", raising=False)
    monkeypatch.setenv("SUBMARINE_YARN_KEYTAB", str(tmp_path / "ignored.keytab"))
    req = _request()
    assert req.yarn_login is None
    env = build_service(req).to_dict()["configuration"]["env"]
    assert "SUBMARINE_YARN_KEYTAB" not in env and "SUBMARINE_YARN_AUTH" not in env


@pytest.mark.parametrize(
    ("keytab", "principal", "error"),
    [
        (None, None, "set SUBMARINE_YARN_KEYTAB"),
        ("missing", None, "SUBMARINE_YARN_KEYTAB .*missing.keytab: cannot read it"),
        ("pem", None, "not a Kerberos keytab"),
        ("good", 'user"; touch /tmp/x; "@R', "is not a Kerberos principal"),
    ],
)
def test_kerberos_job_flags_that_cannot_work_are_refused(
    krb5_config: KerberosRealm,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    keytab: str | None,
    principal: str | None,
    error: str,
) -> None:
    monkeypatch.setenv("SUBMARINE_YARN_AUTH", "kerberos")
    monkeypatch.delenv("SUBMARINE_YARN_PRINCIPAL", raising=False)
    monkeypatch.delenv("SUBMARINE_YARN_KEYTAB", raising=False)
    paths = {
        "missing": tmp_path / "missing.keytab",
        "pem": tmp_path / "key.pem",
        "good": krb5_config.user_keytab,
    }
    paths["pem"].write_text("-----BEGIN PRIVATE KEY-----\n")
    if keytab is not None:
        monkeypatch.setenv("SUBMARINE_YARN_KEYTAB", str(paths[keytab]))
    if principal is not None:
        monkeypatch.setenv("SUBMARINE_YARN_PRINCIPAL", principal)
    with pytest.raises(JobSpecError, match=error):
        _request()


# ------------------------------------------------------------------------------------------- the realm


def test_the_realm_is_made_without_its_master_key_on_a_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from submarine_elastic.cluster import kdc as kdc_module

    calls: list[list[str]] = []
    run = subprocess.run

    def recording(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(list(cmd))
        return run(cmd, **kwargs)

    monkeypatch.setattr(kdc_module.subprocess, "run", recording)
    made = KerberosRealm(dir=tmp_path / "krb5", host="127.0.0.1", port=_free_port(), user="alice", logs=tmp_path)
    try:
        made.check_tools()
    except PrerequisiteError as exc:
        pytest.skip(str(exc))
    made.create()
    stash = (tmp_path / "krb5" / "stash").read_bytes()
    assert stash and [c[1] for c in calls][:1] == ["create"]
    assert all("-P" not in c for c in calls), "kdb5_util's -P puts the master key on its command line"
    assert {stat.S_IMODE(p.stat().st_mode) for p in (made.user_keytab, made.http_keytab)} == {0o600}
    assert stat.S_IMODE(made.dir.stat().st_mode) == 0o700
    assert made.user_principal == "alice@SUBMARINE.TEST"


def test_a_tool_that_fails_is_named_with_its_output(tmp_path: Path) -> None:
    from submarine_elastic.cluster import KerberosSetupError

    made = KerberosRealm(dir=tmp_path / "krb5", host="127.0.0.1", port=_free_port(), user="alice", logs=tmp_path)
    try:
        made.check_tools()
    except PrerequisiteError as exc:
        pytest.skip(str(exc))
    made.write_config()  # no database: kadmin.local cannot open it
    with pytest.raises(KerberosSetupError, match="kadmin.local"):
        made._kadmin("ktadd -k /dev/null nobody")


def test_one_client_shared_by_threads_authenticates_each_request(krb5_config: KerberosRealm) -> None:
    """The job's driver and the controller share one client between threads; requests-gssapi keeps a security
    context per host in its auth object, which one thread's request must not take from another's."""
    errors: list[BaseException] = []
    with FakeRM(krb5_config, {"hadoop_version": "3.4.2"}) as rm, kerberos_client(rm.url, krb5_config) as client:

        def calls() -> None:
            try:
                for _ in range(5):
                    assert client.hadoop_version() == "3.4.2"
            except BaseException as exc:  # noqa: BLE001 (collected for the assertion below)
                errors.append(exc)

        threads = [threading.Thread(target=calls) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert errors == []
    assert rm.seen.principals == [krb5_config.user_principal] * 40


def test_a_tool_that_hangs_is_stopped_after_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from submarine_elastic.cluster import KerberosSetupError
    from submarine_elastic.cluster import kdc as kdc_module

    assert kdc_module.TOOL_TIMEOUT_S == 60.0
    monkeypatch.setattr(kdc_module, "TOOL_TIMEOUT_S", 0.5)
    made = KerberosRealm(dir=tmp_path / "krb5", host="127.0.0.1", port=1, user="alice", logs=tmp_path)
    with pytest.raises(KerberosSetupError, match=r"sleep did not finish within 0\.5 s"):
        made._run("sleep", "30")
