"""The one settings model: what the submit side writes is what the containers read back, a switch has one
rule, and a refused variable is an error of its own field only, naming the variable and the value."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from submarine_elastic import env
from submarine_elastic.settings import NAMES, SettingsError, container_env, env_name, switch


def test_a_field_names_its_variable_once() -> None:
    assert env_name("checkpoint_every") == "SUBMARINE_CHECKPOINT_EVERY"
    assert env_name("nm_host") == "NM_HOST"
    assert env_name("horovod_elastic_timeout") == "HOROVOD_ELASTIC_TIMEOUT"
    assert {"SUBMARINE_JOB_ID", "SUBMARINE_WORKER_CMD_B64", "CONTAINER_ID"} <= NAMES


@pytest.mark.parametrize(("text", "value"), [("1", True), ("TRUE", True), ("yes", True), ("", False), ("No", False)])
def test_one_rule_for_every_switch(text: str, value: bool) -> None:
    assert switch("SUBMARINE_METRICS_TLS", text) is value


@pytest.mark.parametrize("name", ["SUBMARINE_INSECURE", "SUBMARINE_METRICS_TLS", "SUBMARINE_ELASTIC"])
def test_a_switch_that_is_neither_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv(name, "maybe")
    field = name.removeprefix("SUBMARINE_").lower()
    with pytest.raises(SettingsError, match=f"^{name} must be 1/true/yes or 0/false/no, got 'maybe'$"):
        getattr(env.settings(), field)


def test_what_the_submit_side_writes_the_containers_read_back(monkeypatch: pytest.MonkeyPatch) -> None:
    written = container_env(
        job_id="mnist",
        driver_port=31000,
        num_workers=2,
        min_workers=1,
        max_workers=4,
        elastic=True,
        insecure=False,
        workdir=Path("/work"),
        checkpoint_every=7,
        hung_after_s=2.5,
        worker_cmd_b64=base64.b64encode(b"python t.py").decode(),
        gloo_iface=None,
    )
    assert written["SUBMARINE_ELASTIC"] == "1" and written["SUBMARINE_INSECURE"] == "0"
    assert "SUBMARINE_GLOO_IFACE" not in written  # None: left unset
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
    for name, value in written.items():
        monkeypatch.setenv(name, value)
    read = env.settings()
    assert (read.job_id, read.driver_port, read.worker_limits(), read.elastic, read.insecure) == (
        "mnist",
        31000,
        (2, 1, 4),
        True,
        False,
    )
    assert (read.workdir, read.checkpoint_every, read.hung_after_s) == (Path("/work"), 7, 2.5)
    assert base64.b64decode(read.worker_cmd_b64 or "") == b"python t.py"


def test_the_submit_side_cannot_write_a_value_the_reader_refuses() -> None:
    with pytest.raises(SettingsError, match="^SUBMARINE_NUM_WORKERS must be a positive integer, got 0$"):
        container_env(num_workers=0)
    with pytest.raises(SettingsError, match="no such setting: nope"):
        container_env(nope=1)


def test_a_refused_variable_fails_only_its_own_readers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUBMARINE_CHECKPOINT_EVERY", "ten")
    monkeypatch.setenv("SUBMARINE_JOB_ID", "mnist")
    settings = env.settings()
    assert settings.job_id == "mnist"
    assert settings.problems() == ["SUBMARINE_CHECKPOINT_EVERY must be a positive integer (commits), got 'ten'"]
    with pytest.raises(SettingsError, match="SUBMARINE_CHECKPOINT_EVERY"):
        _ = settings.checkpoint_every
    monkeypatch.setenv("SUBMARINE_CHECKPOINT_EVERY", "3")
    assert env.settings().checkpoint_every == 3 and env.settings().problems() == []


def test_an_empty_variable_is_an_unset_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUBMARINE_WORKER_GPUS", "")
    monkeypatch.setenv("SUBMARINE_RM_URL", "")
    assert (env.settings().worker_gpus, env.settings().rm_url) == (0, None)


def test_pairs_that_go_together_name_both(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SUBMARINE_AGENT_TLS_CERT_FILE", str(tmp_path / "a.crt"))
    monkeypatch.delenv("SUBMARINE_AGENT_TLS_KEY_FILE", raising=False)
    with pytest.raises(
        SettingsError, match="SUBMARINE_AGENT_TLS_CERT_FILE and SUBMARINE_AGENT_TLS_KEY_FILE go together"
    ):
        env.settings().read_agent_tls()


def test_horovods_elastic_timeout_is_read_by_the_count_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOROVOD_ELASTIC_TIMEOUT", raising=False)
    assert env.settings().horovod_elastic_timeout == 600
    monkeypatch.setenv("HOROVOD_ELASTIC_TIMEOUT", "soon")
    with pytest.raises(SettingsError, match=r"^HOROVOD_ELASTIC_TIMEOUT must be a positive integer \(seconds\)"):
        _ = env.settings().horovod_elastic_timeout
