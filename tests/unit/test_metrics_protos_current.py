"""The checked-in gRPC stubs are exactly what scripts/gen_protos.sh writes from the .proto files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


def _lower_bound(requirement: str) -> tuple[int, ...]:
    """The ``>=`` bound of one of setup.cfg's install_requires lines, e.g. ``protobuf>=5.29.0,<8``."""
    for line in (ROOT / "setup.cfg").read_text().splitlines():
        name, sep, rest = line.strip().partition(">=")
        if sep and name == requirement:
            return tuple(int(part) for part in rest.split(",")[0].split("."))
    raise AssertionError(f"setup.cfg has no '{requirement}>=' requirement")


def test_every_runtime_setup_cfg_allows_loads_the_stubs() -> None:
    """Generated code refuses an older runtime: the gencode must be no newer than the oldest protobuf and
    grpcio that setup.cfg lets pip install (TensorFlow 2.18 keeps protobuf below 6)."""
    stub = (ROOT / "submarine_elastic/metrics/proto/metrics_pb2.py").read_text()
    gencode = next(line for line in stub.splitlines() if line.startswith("# Protobuf Python Version: "))
    assert tuple(int(p) for p in gencode.rsplit(" ", 1)[1].split(".")) <= _lower_bound("protobuf")
    grpc_stub = (ROOT / "submarine_elastic/metrics/proto/metrics_pb2_grpc.py").read_text()
    stamped = next(line for line in grpc_stub.splitlines() if line.startswith("GRPC_GENERATED_VERSION = "))
    assert stamped == f"GRPC_GENERATED_VERSION = '{_pinned_version()}'"
    assert tuple(int(p) for p in _pinned_version().split(".")) <= _lower_bound("grpcio")
    assert "grpcio-tools" not in (ROOT / "setup.cfg").read_text(), (
        "grpcio-tools needs protobuf <6, TensorFlow 2.21 >=6.31.1: the generator has its own directory"
    )


def test_generated_stubs_are_current(tmp_path: Path) -> None:
    # The script runs its pinned generator (installed on first use under build/, by scripts/install.sh in CI).
    generated = subprocess.run(
        ["bash", str(ROOT / "scripts/gen_protos.sh"), "--out", str(tmp_path)],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
    )
    assert generated.returncode == 0, generated.stderr
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
