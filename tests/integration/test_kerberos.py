"""A job on a Kerberos-secured pseudo-cluster: its own MIT KDC, the ResourceManager's web endpoints behind SPNEGO.

The module starts one secure cluster of its own (``cluster up --secure``, ports ``SUBMARINE_TEST_PORT_BASE`` +
1100) and runs one small job through the CLI as a user would, with the environment ``cluster up --secure``
prints: ``job run``, ``job flex`` (the job's driver flexes YARN itself, logged in from the keytab ``job run``
gave it as a secret) and ``job kill``, every call to the RM authenticated by SPNEGO with mutual
authentication required, across a restart of the KDC. Calls that are not authenticated are refused.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.cluster import ClusterSpec, LocalCluster
from submarine_elastic.submit.client import JobClient
from submarine_elastic.submit.jobspec import KEYTAB_FILE, job_dir
from submarine_elastic.yarn import ServiceNotFoundError, YarnAuthError, YarnServiceClient
from tests.integration.conftest import PORT_BASE, cli_args, eventually
from tests.integration.jobcheck import REPO, SAMPLES

pytestmark = pytest.mark.integration

SPEC = ClusterSpec(nodes=2, node_memory_mb=4096, node_vcores=4, port_base=PORT_BASE + 1100, secure=True)


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("secure-cluster"))
    before = os.environ.get("KRB5_CONFIG")  # up points this process at the realm; later modules get it back
    started = time.monotonic()
    cluster.up(SPEC, timeout=240)
    print(f"secure cluster up in {time.monotonic() - started:.1f} s")
    try:
        yield cluster
    finally:
        cluster.down()
        if before is None:
            os.environ.pop("KRB5_CONFIG", None)
        else:
            os.environ["KRB5_CONFIG"] = before


@pytest.fixture()
def login(secure_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment `cluster up --secure` tells the user to set, in this process too."""
    client_env = {"SUBMARINE_RM_URL": SPEC.rm_url, **secure_cluster.realm(SPEC).client_env()}
    for key, value in client_env.items():
        monkeypatch.setenv(key, value)
    return client_env


def submarine(client_env: dict[str, str], *args: str) -> str:
    result = CliRunner().invoke(cli, cli_args(args), env=client_env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_a_job_runs_flexes_and_is_killed_with_kerberos_and_nothing_unauthenticated_gets_in(
    secure_cluster: LocalCluster, login: dict[str, str], tmp_path: Path
) -> None:
    started = time.monotonic()
    realm = secure_cluster.realm(SPEC)
    rm = SPEC.rm_url

    # Unauthenticated: no credentials at all, or simple auth's ?user.name=, on the RM's REST and Services API
    # and a NodeManager's REST API.
    nm = f"http://{SPEC.host}:{SPEC.nm_ports(0)['yarn.nodemanager.webapp.address']}/ws/v1/node"
    for url in (f"{rm}/ws/v1/cluster/info", f"{rm}/ws/v1/cluster/nodes", f"{rm}/app/v1/services/version", nm):
        for params in ({}, {"user.name": realm.user}):
            answer = requests.get(url, params=params, timeout=10)
            assert answer.status_code == 401, (url, params, answer.status_code)
            assert answer.headers.get("WWW-Authenticate") == "Negotiate"
    with YarnServiceClient(rm, auth="simple", user=realm.user, retries=0) as simple:
        with pytest.raises(YarnAuthError, match="401"):
            simple.nodes()

    # The KDC is a daemon of the cluster like the others: restarted, its realm and keys stay.
    secure_cluster.restart("kdc", timeout=60)

    name = "kerberos-job"
    cmd = (
        f"{sys.executable} {REPO}/examples/train_elastic.py --samples {SAMPLES} --epochs 100 --step-sleep 0.03 "
        f"--until-file {tmp_path}/stop --log-dir {tmp_path}/log"
    )
    submarine(
        login, "job", "run", "--name", name, "--elastic", "--num_workers", "1", "--min_workers", "1",
        "--max_workers", "2", "--worker_resources", "memory-mb=1024,vcores=1", "--worker_launch_cmd", cmd,
    )  # fmt: skip
    with YarnServiceClient(rm, poll_interval=0.5) as yarn:  # SPNEGO, from the environment
        try:
            # The keytab went to the job as a secret file; the spec YARN holds names only its path.
            assert (job_dir(name) / KEYTAB_FILE).read_bytes() == realm.user_keytab.read_bytes()
            with JobClient(name, yarn, locate_timeout=120) as job:
                job.wait_for_size(1, timeout=240)
            spec_env = yarn.status(name).raw["configuration"]["env"]
            assert spec_env["SUBMARINE_YARN_AUTH"] == "kerberos"
            assert spec_env["SUBMARINE_YARN_KEYTAB"] == f"$PWD/{KEYTAB_FILE}"
            assert spec_env["SUBMARINE_YARN_PRINCIPAL"] == realm.user_principal

            # The driver resizes its own job: it flexes YARN's worker component, authenticated from the keytab.
            out = submarine(login, "job", "flex", name, "--workers", "2", "--timeout", "240")
            assert "ring has 2 workers" in out
            ready = eventually(lambda: len(yarn.ready_instances(name, "worker")) == 2, "2 workers READY", 60)
            assert ready
            assert yarn.status(name).component("worker").number_of_containers == 2

            # Neither the service the RM shows nor the RM's log (every spec it is sent) holds the keytab.
            rm_log = (secure_cluster.dir / "logs" / "rm.log").read_text(errors="replace")
            assert f"name: {name}" in rm_log, "the RM no longer logs the spec: this check checks nothing"
            keytab_b64 = base64.b64encode(realm.user_keytab.read_bytes()).decode()
            for shown in (json.dumps(yarn.status(name).raw), rm_log):
                assert keytab_b64[:40] not in shown

            submarine(login, "job", "kill", name)
            with pytest.raises(ServiceNotFoundError):
                yarn.status(name)
            assert not job_dir(name).exists()
        finally:
            yarn.destroy(name, missing_ok=True)
    print(f"secure job run, flex and kill took {time.monotonic() - started:.1f} s")
