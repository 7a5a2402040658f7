"""No ``submarine job run`` flag runs anything in a container's launch script.

YARN writes every variable of a service spec into each container's launch script as ``export NAME="value"``
without escaping. These tests render the spec the same way and run it with bash: a value that could expand
or run a command is refused before anything is written or sent, naming the flag and the character, and
every value that is accepted reaches the container unchanged.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from submarine_elastic.cli.main import cli
from submarine_elastic.submit.jobspec import JobRequest, JobSpecError, build_service
from submarine_elastic.submit.store import load_token
from tests.unit.test_jobspec import request as spec_request

#: What an attack leaves behind when it runs: a file in the directory the launch script runs in.
SENTINEL = "pwned"
#: The attacks found by probing, and the character each is refused for (the first one in it).
ATTACKS = {
    "command substitution": ("$(touch pwned)", "a dollar sign ('$')"),
    "backquotes": ("`touch pwned`", "a backquote ('`')"),
    "quote break-out": ('"; touch pwned; echo "', "double quotes ('\"')"),
    "escaped quote": ('x\\"; touch pwned; echo "', "a backslash ('\\\\')"),
    "newline": ("/data\ntouch pwned", "a newline ('\\n')"),
}
#: Each flag that lands in the spec's environment, as a request field (the flag named in the refusal).
PATH_FLAGS = {"--checkpoint_path": "checkpoint_path", "--input_path": "input_path", "--workdir": "workdir"}


@pytest.fixture(autouse=True)
def jobs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SUBMARINE_JOBS_DIR", str(tmp_path / "jobs"))
    return tmp_path / "jobs"


def request(**kw: Any) -> JobRequest:
    """test_jobspec's request, run from /work."""
    return spec_request(**{"workdir": Path("/work"), **kw})


def launch_script(env: dict[str, str]) -> str:
    """The environment part of a container's launch script, as YARN's NodeManager writes it."""
    return "".join(f'export {name}="{value}"\n' for name, value in env.items())


def worker_env(req: JobRequest) -> dict[str, str]:
    """A worker container's environment in its spec: the service's, then its component's."""
    spec = build_service(req).to_dict()
    worker = next(c for c in spec["components"] if c["name"] == "worker")
    return {**spec["configuration"]["env"], **worker["configuration"]["env"]}


def run_script(script: str, cwd: Path, *names: str) -> list[str]:
    """Runs ``script`` with bash in ``cwd``; returns the values the named variables have after it."""
    shown = " ".join(f'"${name}"' for name in names)
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", f"{script}printf '%s\\0' {shown}"],
        cwd=cwd,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=30,
        check=False,
    )
    return done.stdout.decode().split("\0")[: len(names)]


def test_the_attacks_run_when_written_into_the_launch_script_unchecked(tmp_path: Path):
    # What a spec that carried them would do: shows the harness below can see an attack succeed.
    for attack, _ in (ATTACKS["command substitution"], ATTACKS["backquotes"], ATTACKS["quote break-out"]):
        (tmp_path / SENTINEL).unlink(missing_ok=True)
        run_script(launch_script({"X": attack}), tmp_path, "X")
        assert (tmp_path / SENTINEL).exists(), attack


@pytest.mark.parametrize(("attack", "character"), ATTACKS.values(), ids=ATTACKS.keys())
def test_an_env_value_that_the_launch_script_would_interpret_is_refused_naming_flag_and_character(
    attack: str, character: str
):
    with pytest.raises(JobSpecError) as refused:
        request(env={"DATA_DIR": attack})
    assert str(refused.value).startswith(f"--env DATA_DIR must not contain {character}")


@pytest.mark.parametrize("flag", PATH_FLAGS)
@pytest.mark.parametrize(("attack", "character"), ATTACKS.values(), ids=ATTACKS.keys())
def test_a_path_that_the_launch_script_would_interpret_is_refused_naming_flag_and_character(
    flag: str, attack: str, character: str
):
    value: Any = Path(f"/shared/{attack}") if flag == "--workdir" else f"/shared/{attack}"
    with pytest.raises(JobSpecError) as refused:
        request(**{PATH_FLAGS[flag]: value})
    assert str(refused.value).startswith(f"{flag} must not contain {character}")


@pytest.mark.parametrize(
    "flags",
    [
        ["--env", "DATA_DIR=$(touch pwned)"],
        ["--env", "OK=1", "--env", "DATA_DIR=`touch pwned`"],
        ["--checkpoint_path", '/c"; touch pwned; echo "'],
        ["--input_path", "hdfs:///in/$(touch pwned)"],
        ["--workdir", 'w"; touch pwned; echo "'],
    ],
    ids=["env-subst", "env-backquote", "checkpoint-quote", "input-subst", "workdir-quote"],
)
def test_job_run_refuses_the_attack_before_anything_is_written_or_sent(
    flags: list[str], jobs_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        cli,
        ["job", "run", "--name", "inject", "--worker_launch_cmd", "python t.py", *flags],
        env={"SUBMARINE_RM_URL": "http://127.0.0.1:9"},  # nothing listens: a request would fail differently
    )
    output = " ".join(result.output.split())
    assert result.exit_code == 1, output
    flag = flags[-2] if flags[-2] != "--env" else "--env DATA_DIR"
    assert f"{flag} must not contain" in output
    assert "unreachable" not in output
    assert load_token("inject") is None
    assert not jobs_dir.exists() or not any(jobs_dir.iterdir())
    assert not (tmp_path / SENTINEL).exists()


def test_the_launch_command_and_a_secret_may_hold_anything_and_still_run_nothing(tmp_path: Path):
    # The command travels base64-encoded and a secret as a localized file: neither is in the script.
    attack = '"; touch pwned; echo "$(touch pwned)`touch pwned`'
    req = request(launch_cmd=f"python t.py --x '{attack}'", env={"SUBMARINE_METRICS_TOKEN": attack})
    run_script(launch_script(worker_env(req)), tmp_path, "SUBMARINE_WORKER_CMD_B64")
    assert not (tmp_path / SENTINEL).exists()


# Every printable character except those refused, with spaces, single quotes, globs, ;&|<>(){}#~! more often.
_ACCEPTED = st.text(
    st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters='$`"\\')
    | st.sampled_from(list("'*?~!;&|<>(){}#[] ")),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=_ACCEPTED, path=_ACCEPTED)
def test_every_accepted_value_reaches_the_container_unchanged(value: str, path: str, tmp_path: Path):
    req = request(env={"USER_VALUE": value}, input_path=path, checkpoint_path=f"/c/{path}")
    seen = run_script(
        launch_script(worker_env(req)), tmp_path, "USER_VALUE", "SUBMARINE_INPUT_PATH", "SUBMARINE_CHECKPOINT_PATH"
    )
    assert seen == [value, path, f"/c/{path}"]
    assert not (tmp_path / SENTINEL).exists()


def launch_command(req: JobRequest, component: str) -> str:
    spec = build_service(req).to_dict()
    return next(c for c in spec["components"] if c["name"] == component)["launch_command"]


@pytest.mark.parametrize("component", ["driver", "worker"])
def test_the_interpreter_starts_the_containers_from_a_directory_with_a_space(component: str, tmp_path: Path):
    # The NodeManager runs a launch command as exec /bin/bash -c "<command>": an unquoted interpreter path
    # with a space ran "/opt/my" with the rest as arguments.
    python = tmp_path / "my venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\nprintf "%s " "$@" > started\n')
    python.chmod(0o755)
    command = launch_command(request(python=str(python)), component)
    run_script(f'/bin/bash -c "{command}"\n', tmp_path)
    module = "driver" if component == "driver" else "agent"
    assert (tmp_path / "started").read_text() == f"-m submarine_elastic.elastic.{module} "


@pytest.mark.parametrize(("attack", "character"), ATTACKS.values(), ids=ATTACKS.keys())
def test_an_interpreter_path_the_launch_script_would_interpret_is_refused(attack: str, character: str):
    with pytest.raises(JobSpecError) as refused:
        request(python=f"/venvs/{attack}/bin/python")
    assert str(refused.value).startswith(f"the Python interpreter must not contain {character}")


@pytest.mark.parametrize("queue", ["", "a b", "root;default", "root..default", "q$(id)", "root/default", "x" * 256])
def test_a_queue_that_is_not_a_yarn_queue_name_is_refused_naming_the_flag(queue: str):
    with pytest.raises(JobSpecError, match="^--queue: .* is not a YARN queue name"):
        request(queue=queue)


@pytest.mark.parametrize(
    "image", ["", "Tensorflow/tf", "img;id", "img:$(id)", "img:tag:tag", "a b", "img@sha256:short", "/img", "img/"]
)
def test_a_docker_image_that_is_not_an_image_reference_is_refused_naming_the_flag(image: str):
    with pytest.raises(JobSpecError, match="^--docker_image: .* is not an image reference"):
        request(docker_image=image)


@pytest.mark.parametrize("queue", ["default", "root.research.team-a", "q_1"])
@pytest.mark.parametrize(
    "image",
    ["tensorflow/tensorflow:2.18.0", "registry.example.com:5000/ml/train:v1.2", "busybox@sha256:" + "0" * 64],
)
def test_a_queue_and_an_image_that_are_names_reach_the_spec_unchanged(queue: str, image: str):
    spec = build_service(request(queue=queue, docker_image=image)).to_dict()
    assert spec["queue"] == queue
    worker = next(c for c in spec["components"] if c["name"] == "worker")
    assert worker["artifact"] == {"type": "DOCKER", "id": image}
