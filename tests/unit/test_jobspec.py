"""`submarine job run` flags to the job's YARN service spec, validated before anything is sent."""

from __future__ import annotations

import base64

import pytest
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.elastic.api import FlexRefusedError, Limits
from submarine_elastic.elastic.jobspec import JobRequest, JobSpecError, WorkerResources, build_service, parse_env


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
    return JobRequest(**args)


def test_the_spec_has_a_driver_that_ends_the_service_and_n_worker_agents():
    spec = build_service(request()).to_dict()
    driver, worker = spec["components"]
    assert driver["name"] == "driver" and driver["number_of_containers"] == 1
    assert driver["restart_policy"] == "NEVER"
    assert driver["configuration"]["properties"] == {"yarn.service.container-state-report-as-service-state": "true"}
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
    ("text", "expected"),
    [
        ("memory-mb=2048,vcores=2", WorkerResources(2048, 2)),
        ("memory=4G,vcores=1,gpu=1", WorkerResources(4096, 1, 1)),
        ("memory=512M", WorkerResources(512, 1)),
    ],
)
def test_worker_resources(text: str, expected: WorkerResources):
    assert WorkerResources.parse(text) == expected


@pytest.mark.parametrize("text", ["vcores=2", "memory-mb=abc", "memory-mb=0", "disk=5", "memory-mb"])
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
