"""The checked-in gRPC stubs are exactly what scripts/gen_protos.sh writes from the .proto files."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GENERATED = [
    Path("submarine_elastic") / package / "proto" / f"{package}{suffix}"
    for package in ("metrics", "elastic")
    for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
]


def _pinned_version() -> str:
    for line in (ROOT / "scripts/gen_protos.sh").read_text().splitlines():
        if line.startswith("GRPCIO_TOOLS_VERSION="):
            return line.split("=", 1)[1].strip()
    raise AssertionError("scripts/gen_protos.sh does not pin GRPCIO_TOOLS_VERSION")


def test_setup_cfg_pins_the_same_grpcio_tools() -> None:
    assert f"grpcio-tools=={_pinned_version()}" in (ROOT / "setup.cfg").read_text()


def test_generated_stubs_are_current(tmp_path: Path) -> None:
    try:
        installed = importlib.metadata.version("grpcio-tools")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("grpcio-tools is not installed (pip install -e '.[test]' installs the pinned one)")
    assert installed == _pinned_version(), (
        f"grpcio-tools {installed} is installed but scripts/gen_protos.sh pins {_pinned_version()}"
    )
    subprocess.run(
        ["bash", str(ROOT / "scripts/gen_protos.sh"), "--out", str(tmp_path)],
        check=True,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
    )
    stale = [str(path) for path in GENERATED if (tmp_path / path).read_bytes() != (ROOT / path).read_bytes()]
    assert not stale, f"stale stubs {stale}: run scripts/gen_protos.sh and commit the result"


def test_stubs_load_on_the_installed_runtime() -> None:
    from submarine_elastic.metrics.proto import metrics_pb2, metrics_pb2_grpc

    assert metrics_pb2.DESCRIPTOR.package == "submarine.metrics.v1"
    assert hasattr(metrics_pb2_grpc, "MetricsServiceStub")
