"""Keep every test away from the user's own controller, job tokens and cluster."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _private_state_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path_factory.getbasetemp() / "submarine-home"
    monkeypatch.setenv("SUBMARINE_CONTROLLER_DIR", str(Path(home) / "controller"))
    monkeypatch.setenv("SUBMARINE_JOBS_DIR", str(Path(home) / "jobs"))
    monkeypatch.setenv("SUBMARINE_CLUSTER_DIR", str(Path(home) / "cluster"))
    monkeypatch.setenv("SUBMARINE_CA_DIR", str(Path(home) / "ca"))
