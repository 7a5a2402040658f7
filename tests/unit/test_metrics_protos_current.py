"""The checked-in gRPC stubs are exactly what scripts/gen_protos.sh writes from the .proto files."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Every .proto of the package: a new one that the script does not compile has no fresh stubs, and fails.
PROTOS = sorted(p.relative_to(ROOT) for p in (ROOT / "submarine_elastic").rglob("*.proto"))
GENERATED = [
    proto.with_name(proto.stem + suffix) for proto in PROTOS for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
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
    assert {"metrics", "elastic", "controller"} <= {p.stem for p in PROTOS}
    missing = [str(path) for path in GENERATED if not (tmp_path / path).is_file()]
    assert not missing, f"scripts/gen_protos.sh does not compile {missing}: add their .proto to its PROTOS"
    stale = [str(path) for path in GENERATED if (tmp_path / path).read_bytes() != (ROOT / path).read_bytes()]
    assert not stale, f"stale stubs {stale}: run scripts/gen_protos.sh and commit the result"


def test_stubs_load_on_the_installed_runtime() -> None:
    from submarine_elastic.controller.proto import controller_pb2, controller_pb2_grpc
    from submarine_elastic.metrics.proto import metrics_pb2, metrics_pb2_grpc

    assert metrics_pb2.DESCRIPTOR.package == "submarine.metrics.v1"
    assert hasattr(metrics_pb2_grpc, "MetricsServiceStub")
    assert controller_pb2.DESCRIPTOR.package == "submarine.controller.v1"
    assert hasattr(controller_pb2_grpc, "ControllerServiceStub")
