"""Keep every test away from the user's own controller, job tokens and cluster."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# pytest-xdist's workers run with COLUMNS=80 and LINES=24, which rich takes as the fixed size of the consoles the
# CLI makes on import: without them, a test's output is as wide as without xdist (or as its COLUMNS says).
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)


@pytest.fixture(autouse=True)
def _private_state_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path_factory.getbasetemp() / "submarine-home"
    monkeypatch.setenv("SUBMARINE_CONTROLLER_DIR", str(Path(home) / "controller"))
    monkeypatch.setenv("SUBMARINE_JOBS_DIR", str(Path(home) / "jobs"))
    monkeypatch.setenv("SUBMARINE_CLUSTER_DIR", str(Path(home) / "cluster"))
    monkeypatch.setenv("SUBMARINE_CA_DIR", str(Path(home) / "ca"))
