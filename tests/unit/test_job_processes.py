"""The driver's and the agent's entry points refuse clearly when the files YARN should have localized
are missing, and never show a secret in doing so."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from submarine_elastic.elastic import agent, driver


@pytest.fixture()
def job_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name, value in {
        "SUBMARINE_JOB_ID": "tls-job",
        "SUBMARINE_DRIVER_PORT": "31000",
        "SUBMARINE_RM_URL": "http://127.0.0.1:9",
        "SUBMARINE_NUM_WORKERS": "1",
        "SUBMARINE_MIN_WORKERS": "1",
        "SUBMARINE_MAX_WORKERS": "1",
        "SUBMARINE_WORKER_CMD_B64": "dHJ1ZQ==",  # true
    }.items():
        monkeypatch.setenv(name, value)
    token = tmp_path / "job.token"
    token.write_text("s3cret-token-value")
    monkeypatch.setenv("SUBMARINE_JOB_TOKEN_FILE", str(token))
    return tmp_path


def test_the_driver_refuses_a_missing_tls_key(
    job_env: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SUBMARINE_DRIVER_TLS_CERT_FILE", str(job_env / "driver.crt"))
    monkeypatch.setenv("SUBMARINE_DRIVER_TLS_KEY_FILE", str(job_env / "driver.key"))
    with caplog.at_level(logging.ERROR):
        assert driver.main() == 2
    assert "driver.crt" in caplog.text
    assert "s3cret-token-value" not in caplog.text


def test_the_driver_refuses_half_a_tls_setup(
    job_env: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SUBMARINE_DRIVER_TLS_CERT_FILE", str(job_env / "job.token"))
    with caplog.at_level(logging.ERROR):
        assert driver.main() == 2
    assert "SUBMARINE_DRIVER_TLS_CERT_FILE and SUBMARINE_DRIVER_TLS_KEY_FILE go together" in caplog.text


def test_the_agent_refuses_a_missing_token_file(
    job_env: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SUBMARINE_JOB_TOKEN_FILE", str(job_env / "gone.token"))
    with caplog.at_level(logging.ERROR):
        assert agent.main() == 2
    assert "gone.token" in caplog.text
