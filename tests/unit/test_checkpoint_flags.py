"""`submarine job run --checkpoint_path/--checkpoint_every`: validated before anything is sent, and carried
to the containers as SUBMARINE_CHECKPOINT_PATH/SUBMARINE_CHECKPOINT_EVERY, which the training side reads."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from submarine_elastic import env
from submarine_elastic.cli.main import cli
from submarine_elastic.submit.jobspec import JobSpecError, build_service
from submarine_elastic.submit.store import load_token
from tests.unit.test_jobspec import request
from tf_hooks.elastic.checkpoint import CheckpointConfigError, Checkpointer, resolve


@pytest.fixture(autouse=True)
def jobs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SUBMARINE_JOBS_DIR", str(tmp_path / "jobs"))
    return tmp_path / "jobs"


def job_run(*flags: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli,
        ["job", "run", "--name", "ckpt", "--worker_launch_cmd", "python t.py", *flags],
        env={"SUBMARINE_RM_URL": "http://127.0.0.1:9"},  # nothing listens: a request would fail differently
    )
    return result.exit_code, " ".join(result.output.split())


def test_the_checkpoint_flags_reach_every_container():
    spec = build_service(request(checkpoint_path="/shared/ckpt/mnist", checkpoint_every=20)).to_dict()
    environment = spec["configuration"]["env"]
    assert environment["SUBMARINE_CHECKPOINT_PATH"] == "/shared/ckpt/mnist"
    assert environment["SUBMARINE_CHECKPOINT_EVERY"] == "20"


def test_without_checkpoint_every_the_job_gets_the_training_sides_default():
    environment = build_service(request(checkpoint_path="/shared/ckpt")).to_dict()["configuration"]["env"]
    assert "SUBMARINE_CHECKPOINT_EVERY" not in environment
    no_checkpoints = build_service(request()).to_dict()["configuration"]["env"]
    assert not {"SUBMARINE_CHECKPOINT_PATH", "SUBMARINE_CHECKPOINT_EVERY"} & set(no_checkpoints)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--checkpoint_path", "/c", "--checkpoint_every", "0"],
            "--checkpoint_every must be a whole number of commits >= 1, got 0",
        ),
        (
            ["--checkpoint_path", "/c", "--checkpoint_every", "-5"],
            "--checkpoint_every must be a whole number of commits >= 1, got -5",
        ),
        (["--checkpoint_every", "10"], "--checkpoint_every needs --checkpoint_path"),
        (["--checkpoint_path", " "], "--checkpoint_path must not be empty"),
        (["--checkpoint_path", '/c/"x"'], "--checkpoint_path must not contain double quotes"),
    ],
)
def test_job_run_refuses_bad_checkpoint_flags_naming_them_and_sends_nothing(flags: list[str], message: str):
    code, out = job_run(*flags)
    assert code == 1, out
    assert message in out
    assert "unreachable" not in out and "Traceback" not in out
    assert load_token("ckpt") is None


def test_a_checkpoint_every_that_is_not_a_number_is_refused_by_the_flag():
    code, out = job_run("--checkpoint_path", "/c", "--checkpoint_every", "often")
    assert code == 2
    assert "--checkpoint_every" in out and "'often' is not a valid integer" in out


def test_the_request_refuses_what_the_flags_refuse():
    with pytest.raises(JobSpecError, match="--checkpoint_every must be a whole number of commits >= 1, got 0"):
        request(checkpoint_path="/c", checkpoint_every=0)
    with pytest.raises(JobSpecError, match="--checkpoint_every needs --checkpoint_path"):
        request(checkpoint_every=3)
    assert request(checkpoint_path="/c", checkpoint_every=1).checkpoint_every == 1


@pytest.mark.parametrize("value", ["0", "-1", "ten", "2.5"])
def test_a_bad_checkpoint_every_in_the_environment_is_named(monkeypatch: pytest.MonkeyPatch, value: str):
    monkeypatch.setenv("SUBMARINE_CHECKPOINT_EVERY", value)
    with pytest.raises(ValueError, match=f"SUBMARINE_CHECKPOINT_EVERY must be a positive integer .*{value!r}"):
        _ = env.settings().checkpoint_every
    monkeypatch.setenv("SUBMARINE_CHECKPOINT_PATH", "/shared/ckpt")
    with pytest.raises(CheckpointConfigError, match="SUBMARINE_CHECKPOINT_EVERY"):
        Checkpointer.from_env()


def test_the_training_side_reads_the_job_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv("SUBMARINE_CHECKPOINT_PATH", raising=False)
    monkeypatch.delenv("SUBMARINE_CHECKPOINT_EVERY", raising=False)
    assert Checkpointer.from_env() is None
    assert resolve(None) is None
    monkeypatch.setenv("SUBMARINE_CHECKPOINT_PATH", str(tmp_path / "ckpt"))
    from_env = Checkpointer.from_env()
    assert from_env is not None and (from_env.directory, from_env.every) == (tmp_path / "ckpt", 50)
    monkeypatch.setenv("SUBMARINE_CHECKPOINT_EVERY", "7")
    from_env = resolve(None)
    assert from_env is not None and from_env.every == 7
    assert resolve(False) is None
    explicit = resolve(tmp_path / "mine")
    assert explicit is not None and (explicit.directory, explicit.every) == (tmp_path / "mine", 7)


@pytest.mark.parametrize(
    ("directory", "every", "message"),
    [
        ("hdfs://nn:8020/ckpt", 5, "is a URL: the elastic helpers write checkpoints to a directory"),
        ("", 5, "must not be empty"),
        ("/c", 0, "every must be a whole number of commits >= 1, got 0"),
    ],
)
def test_an_unusable_checkpoint_setting_is_refused_naming_it(directory: str, every: int, message: str):
    with pytest.raises(CheckpointConfigError, match=message):
        Checkpointer(directory, every)


def test_a_url_in_the_environment_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SUBMARINE_CHECKPOINT_PATH", "hdfs://nn:8020/ckpt")
    with pytest.raises(CheckpointConfigError, match="SUBMARINE_CHECKPOINT_PATH: .*checkpoint=False"):
        Checkpointer.from_env()
