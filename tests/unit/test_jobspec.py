"""`submarine job run` flags to the job's YARN service spec, validated before anything is sent."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.protocol.api import FlexRefusedError, Limits
from submarine_elastic.submit.jobspec import (
    CLIENT_CERT,
    CLIENT_KEY,
    TLS_FILES,
    DriverTls,
    JobRequest,
    JobSpecError,
    WorkerResources,
    build_service,
    parse_env,
    with_credentials,
    write_secrets,
)
from submarine_elastic.submit.service import submit
from submarine_elastic.submit.store import forget_job, load_token
from submarine_elastic.yarn import YarnError
from tests.tls import self_signed


@pytest.fixture(autouse=True)
def jobs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SUBMARINE_JOBS_DIR", str(tmp_path / "jobs"))
    return tmp_path / "jobs"


def request(**kw: object) -> JobRequest:
    args: dict = {
        "name": "mnist",
        "launch_cmd": 'python train.py --msg "hi"',
        "limits": Limits(2, 1, 4),
        "resources": WorkerResources(2048, 1),
        "rm_url": "http://127.0.0.1:18088",
        "driver_port": 31000,
        "token": "t0ken",
        "python": "/venv/bin/python",
    }
    args.update(kw)
    return with_credentials(JobRequest(**args))


def test_the_spec_has_a_relaunched_driver_that_ends_the_service_and_n_worker_agents():
    spec = build_service(request()).to_dict()
    driver, worker = spec["components"]
    assert driver["name"] == "driver" and driver["number_of_containers"] == 1
    # A driver that dies is relaunched (after 1 s); one that exits 0 (the job ended) ends the service.
    assert driver["restart_policy"] == "ON_FAILURE"
    properties = driver["configuration"]["properties"]
    assert properties["yarn.service.container-state-report-as-service-state"] == "true"
    assert properties["yarn.service.container-failure.retry-interval-ms"] == "1000"
    assert driver["launch_command"] == "/venv/bin/python -m submarine_elastic.elastic.driver"
    assert worker["number_of_containers"] == 2 and worker["restart_policy"] == "ALWAYS"
    assert worker["resource"] == {"cpus": 1, "memory": "2048"}
    assert worker["launch_command"] == "/venv/bin/python -m submarine_elastic.elastic.agent"
    cmd = base64.b64decode(worker["configuration"]["env"]["SUBMARINE_WORKER_CMD_B64"]).decode()
    assert cmd == 'python train.py --msg "hi"'  # any quoting survives YARN's launch script
    env = spec["configuration"]["env"]
    assert (env["SUBMARINE_MIN_WORKERS"], env["SUBMARINE_NUM_WORKERS"], env["SUBMARINE_MAX_WORKERS"]) == ("1", "2", "4")
    assert env["SUBMARINE_DRIVER_PORT"] == "31000"
    assert env["SUBMARINE_GLOO_IFACE"] == "lo"


@pytest.mark.parametrize(
    ("rm_url", "iface"),
    [
        ("http://localhost:8088", "lo"),
        ("http://[::1]:8088", "lo"),
        ("http://127.0.0.2:8088", "lo"),
        ("http://localhost.example.com:8088", None),  # a name that begins like localhost is another host
        ("http://rm.example.com:8088", None),
    ],
)
def test_only_a_resourcemanager_on_loopback_puts_gloo_on_lo(rm_url: str, iface: str | None):
    env = build_service(request(rm_url=rm_url)).to_dict()["configuration"]["env"]
    assert env.get("SUBMARINE_GLOO_IFACE") == iface  # unset: the driver's own interface


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("memory-mb=2048,vcores=2", WorkerResources(2048, 2)),
        ("memory=4G,vcores=1,gpu=1", WorkerResources(4096, 1, 1)),
        ("memory=512M", WorkerResources(512, 1)),
    ],
)
def test_worker_resources(text: str, expected: WorkerResources):
    assert WorkerResources.parse(text) == expected


@pytest.mark.parametrize("text", ["vcores=2", "memory-mb=abc", "memory-mb=0", "disk=lots", "memory-mb"])
def test_bad_worker_resources_name_the_flag(text: str):
    with pytest.raises(JobSpecError, match="--worker_resources"):
        WorkerResources.parse(text)


def test_limits_name_the_flag():
    with pytest.raises(ValueError, match="--num_workers 5 must lie within --min_workers 1 and --max_workers 4"):
        Limits(5, 1, 4)
    with pytest.raises(FlexRefusedError, match="above the job's --max_workers 4"):
        Limits(2, 1, 4).check_target(5)
    with pytest.raises(FlexRefusedError, match="below the job's --min_workers 1"):
        Limits(2, 1, 4).check_target(0)


def test_env_pairs():
    assert parse_env(["A=1", "B_2=x=y"]) == {"A": "1", "B_2": "x=y"}
    for bad in ("NOEQUALS", "1A=2", 'A="q"'):
        with pytest.raises(JobSpecError, match="--env"):
            parse_env([bad])


def test_a_bad_flag_is_refused_before_anything_is_sent():
    # No ResourceManager answers on this address: reaching it would be a different error.
    runner = CliRunner()
    env = {"SUBMARINE_RM_URL": "http://127.0.0.1:9"}
    for args, flag in (
        (["--num_workers", "3", "--max_workers", "2", "--elastic"], "--max_workers"),
        (["--worker_resources", "memory-mb=-1"], "--worker_resources"),
        (["--name", "Bad_Name"], "name"),
        (["--min_workers", "1"], "--min_workers"),
    ):
        base = ["job", "run", "--name", "ok", "--worker_launch_cmd", "python t.py"]
        result = runner.invoke(cli, base + args, env=env)
        assert result.exit_code != 0, args
        assert flag in result.output, result.output
        assert "unreachable" not in result.output


def test_secrets_reach_the_containers_as_files_never_as_values_in_the_spec(tmp_path: Path):
    req = request(env={"SUBMARINE_METRICS_TOKEN": "m3trics-secret", "OTHER": "1"})
    spec = build_service(req).to_dict()
    text = json.dumps(spec)
    assert "t0ken" not in text and "m3trics-secret" not in text
    env = spec["configuration"]["env"]
    assert "SUBMARINE_JOB_TOKEN" not in env and "SUBMARINE_METRICS_TOKEN" not in env
    assert env["SUBMARINE_JOB_TOKEN_FILE"] == "$PWD/job.token"
    assert env["SUBMARINE_METRICS_TOKEN_FILE"] == "$PWD/metrics.token"
    assert env["OTHER"] == "1"
    files = {f["dest_file"]: f for f in spec["configuration"]["files"]}
    assert {dest: f["src_file"] for dest, f in files.items()} == {
        dest: f"file://{tmp_path / 'jobs' / 'mnist' / dest}"
        for dest in ("job.token", "metrics.token", *TLS_FILES.values())
    }
    assert {f["type"] for f in files.values()} == {"STATIC"}


def test_secrets_are_written_readable_by_their_owner_only(tmp_path: Path):
    req = request(env={"SUBMARINE_METRICS_TOKEN": "m3trics-secret"})
    directory = write_secrets(req)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in directory.iterdir()} == {
        name: 0o600 for name in ("job.token", "metrics.token", *TLS_FILES.values(), CLIENT_CERT, CLIENT_KEY)
    }
    assert (directory / "job.token").read_text() == "t0ken"
    assert (directory / "metrics.token").read_text() == "m3trics-secret"


class RecordingYarn:
    """Stands in for the RM: records what it is sent, refuses it when told to."""

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.created: list[dict] = []

    def destroy(self, name: str, missing_ok: bool = False) -> None:
        pass

    def create(self, service: Any, wait: bool = False) -> None:
        if self.refuse:
            raise YarnError("quota exceeded")
        self.created.append(service.to_dict())


def test_a_refused_job_leaves_no_secret_behind(tmp_path: Path):
    req = request()
    with pytest.raises(YarnError, match="quota"):
        submit(RecordingYarn(refuse=True), req)  # type: ignore[arg-type]
    assert not (tmp_path / "jobs" / "mnist").exists()
    assert load_token("mnist") is None
    yarn = RecordingYarn()
    submit(yarn, req)  # type: ignore[arg-type]
    assert (tmp_path / "jobs" / "mnist" / "job.token").read_text() == "t0ken"
    assert load_token("mnist") == "t0ken"
    forget_job("mnist")
    assert load_token("mnist") is None


def test_driver_tls_files_reach_the_containers_and_the_key_stays_out_of_the_spec(tmp_path: Path):
    cert, key = self_signed(tmp_path / "pki")
    tls = DriverTls.load(cert, key)
    assert tls.ca == tls.cert  # self-signed: the certificate is its own authority
    assert "PRIVATE" not in repr(tls)
    req = request(tls=tls)
    spec = build_service(req).to_dict()
    assert "PRIVATE KEY" not in json.dumps(spec) and "t0ken" not in repr(req)
    env = spec["configuration"]["env"]
    assert env["SUBMARINE_DRIVER_TLS_CERT_FILE"] == "$PWD/driver.crt"
    assert env["SUBMARINE_DRIVER_TLS_KEY_FILE"] == "$PWD/driver.key"
    assert env["SUBMARINE_DRIVER_TLS_CA_FILE"] == "$PWD/driver-ca.crt"
    assert {f["dest_file"] for f in spec["configuration"]["files"]} == {"job.token", *TLS_FILES.values()}
    assert "SUBMARINE_DRIVER_TLS_NAME" not in env  # the given certificate names the driver's hosts
    written = write_secrets(req)
    assert (written / "driver.key").read_text() == key.read_text()
    assert stat.S_IMODE((written / "driver.key").stat().st_mode) == 0o600


def test_driver_tls_files_that_are_not_pem_name_the_flag(tmp_path: Path):
    cert, key = self_signed(tmp_path / "pki")
    with pytest.raises(JobSpecError, match=r"--tls_key .*key\.txt: cannot read it"):
        DriverTls.load(cert, tmp_path / "key.txt")
    with pytest.raises(JobSpecError, match=r"--tls_cert .*key\.pem: no PEM CERTIFICATE in it"):
        DriverTls.load(key, key)
    with pytest.raises(JobSpecError, match=r"--tls_ca .*key\.pem: no PEM CERTIFICATE in it"):
        DriverTls.load(cert, key, key)


@pytest.mark.parametrize(
    "flags",
    [
        ["--tls_key", "k.pem"],
        ["--tls_cert", "c.pem"],
        ["--tls_ca", "c.pem"],
        ["--tls_ca", "c.pem", "--tls_key", "k.pem"],
    ],
)
def test_job_run_refuses_half_a_tls_setup_and_sends_nothing(flags: list[str]):
    result = CliRunner().invoke(
        cli,
        ["job", "run", "--name", "tls-half", "--worker_launch_cmd", "python t.py", *flags],
        env={"SUBMARINE_RM_URL": "http://127.0.0.1:9"},  # nothing listens: a request would fail differently
    )
    assert result.exit_code == 2
    assert "--tls_cert and --tls_key go together" in result.output
    assert load_token("tls-half") is None


def test_am_attempts_and_failed_containers_count_for_ten_minutes_unless_conf_says_otherwise() -> None:
    # A job of hours survives an ApplicationMaster lost now and then, and workers lost now and then: only what
    # failed in the last 10 minutes counts towards YARN's limits; --conf sets them as the user wants.
    props = build_service(request()).to_dict()["configuration"]["properties"]
    assert props == {
        "yarn.service.am-failure.validity-interval-ms": "600000",
        "yarn.service.container-failure-per-component.threshold": "100",
        "yarn.service.node-blacklist.threshold": "20",
        "yarn.service.failure-count-reset.window": "600",
    }
    conf = {"yarn.service.am-failure.validity-interval-ms": "-1", "yarn.service.am-restart.max-attempts": "5"}
    props = build_service(request(conf=conf)).to_dict()["configuration"]["properties"]
    assert props["yarn.service.am-failure.validity-interval-ms"] == "-1"
    assert props["yarn.service.am-restart.max-attempts"] == "5"
    assert props["yarn.service.failure-count-reset.window"] == "600"
