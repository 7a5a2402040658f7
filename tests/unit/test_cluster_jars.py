"""`submarine cluster install-jars`: Maven resolves the shipped project once; a failure leaves nothing half-done."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from submarine_elastic.cluster import ClusterError
from submarine_elastic.cluster.jars import install_jars, jars_current


def fake_mvn(bin_dir: Path, script: str) -> Path:
    bin_dir.mkdir(exist_ok=True)
    mvn = bin_dir / "mvn"
    mvn.write_text("#!/bin/sh\n" + script)
    mvn.chmod(mvn.stat().st_mode | stat.S_IXUSR)
    return bin_dir / "calls"


# Writes one jar where -DoutputDirectory= says, and counts its calls.
RESOLVES = """echo x >> "$(dirname "$0")/calls"
for a in "$@"; do case "$a" in -DoutputDirectory=*) d="${a#-DoutputDirectory=}";; esac; done
touch "$d/hadoop-yarn-server-resourcemanager-3.4.2.jar"
"""


def test_jars_are_resolved_once_then_found_current(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_mvn(tmp_path / "bin", RESOLVES)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    dest = tmp_path / "lib"
    assert install_jars(dest) == dest
    assert [p.name for p in dest.glob("*.jar")] == ["hadoop-yarn-server-resourcemanager-3.4.2.jar"]
    assert jars_current(dest)
    install_jars(dest)
    assert calls.read_text().count("x") == 1


def test_a_failed_resolution_names_maven_output_and_leaves_no_classpath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_mvn(tmp_path / "bin", 'echo "[ERROR] Could not resolve org.apache.hadoop:hadoop-common"; exit 1\n')
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(ClusterError, match=r"exit 1\):\n\[ERROR\] Could not resolve org.apache.hadoop:hadoop-common"):
        install_jars(tmp_path / "lib")
    assert not (tmp_path / "lib").exists()
    assert not (tmp_path / "lib.partial").exists()


def test_no_maven_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ClusterError, match="Maven is required"):
        install_jars(tmp_path / "lib")
