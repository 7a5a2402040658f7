"""Training-side settings from arguments and from the environment; the training side's imports."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from tf_hooks.api import MetricsConfigError
from tf_hooks.config import HOOK_ONLY_OPTIONS, ConnectionOptions, MetricsConfig

ROOT = Path(__file__).resolve().parents[2]
VARIABLES = (
    "SUBMARINE_METRICS_ENDPOINT",
    "SUBMARINE_METRICS_TOKEN",
    "SUBMARINE_METRICS_TOKEN_FILE",
    "SUBMARINE_METRICS_TLS_CA",
    "SUBMARINE_METRICS_TLS",
    "SUBMARINE_METRICS_EVERY_N",
    "SUBMARINE_JOB_ID",
    "SUBMARINE_WORKER_INSTANCE",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_nothing_set_means_disabled() -> None:
    config = MetricsConfig.from_env()
    assert not config.enabled
    assert config.every_n == 1 and config.token is None and not config.tls


def test_reads_every_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "token").write_text("s3cret\n")
    (tmp_path / "ca.pem").write_bytes(b"PEM")
    monkeypatch.setenv("SUBMARINE_METRICS_ENDPOINT", "metrics.example:50061")
    monkeypatch.setenv("SUBMARINE_JOB_ID", "mnist-7")
    monkeypatch.setenv("SUBMARINE_WORKER_INSTANCE", "worker-3")
    monkeypatch.setenv("SUBMARINE_METRICS_TOKEN_FILE", str(tmp_path / "token"))
    monkeypatch.setenv("SUBMARINE_METRICS_TLS_CA", str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SUBMARINE_METRICS_EVERY_N", "10")
    config = MetricsConfig.from_env(queue_size=5)
    assert (config.endpoint, config.job_id, config.instance) == ("metrics.example:50061", "mnist-7", "worker-3")
    assert (config.token, config.tls, config.tls_ca, config.every_n, config.queue_size) == (
        "s3cret",
        True,
        b"PEM",
        10,
        5,
    )
    monkeypatch.setenv("SUBMARINE_METRICS_TOKEN", "from-env")
    assert MetricsConfig.from_env().token == "from-env"
    assert MetricsConfig.from_env(token="arg", job_id="other", every_n=2).token == "arg"


def test_tls_flag_without_ca(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUBMARINE_METRICS_TLS", "1")
    config = MetricsConfig.from_env(endpoint="h:1", job_id="j")
    assert config.tls and config.tls_ca is None


@pytest.mark.parametrize(
    ("env", "kwargs", "message"),
    [
        ({"SUBMARINE_METRICS_ENDPOINT": "h:1"}, {}, "SUBMARINE_JOB_ID"),
        ({"SUBMARINE_METRICS_EVERY_N": "0"}, {}, "SUBMARINE_METRICS_EVERY_N"),
        ({"SUBMARINE_METRICS_EVERY_N": "ten"}, {}, "SUBMARINE_METRICS_EVERY_N"),
        ({"SUBMARINE_METRICS_TOKEN_FILE": "/nonexistent/token"}, {}, "SUBMARINE_METRICS_TOKEN_FILE"),
        ({}, {"job_id": "Not_Valid"}, "Not_Valid"),
        ({}, {"instance": "has space"}, "has space"),
        ({}, {"token": "a b"}, "token"),
        ({}, {"queue_sise": 3}, "queue_sise"),
        ({}, {"flush_interval": 0}, "flush_interval"),
        ({}, {"max_batch_points": 10_001}, "max_batch_points must be at most 10000"),
        ({}, {"endpoint": " ", "job_id": "j"}, "endpoint"),
    ],
)
def test_bad_settings_name_themselves(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], kwargs: dict[str, object], message: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(MetricsConfigError, match=message):
        MetricsConfig.from_env(**kwargs)  # type: ignore[arg-type]


def test_training_side_imports_only_env_limits_and_the_wires_it_speaks() -> None:
    """The metrics service's stubs and the agent's channel (the job's own wire: its messages and framing); never
    the controller, the driver or the agent themselves."""
    allowed = (
        "submarine_elastic.env",
        "submarine_elastic.limits",
        "submarine_elastic.resources",
        "submarine_elastic.rpc",
        "submarine_elastic.metrics.proto",
        "submarine_elastic.protocol.proto",
        "submarine_elastic.protocol.channel",
        # tf_hooks.emulate: the measured GPU profiles, the simulator's own model, so that an emulated step and
        # a simulated one take the same time (read only by a job run with --emulate)
        "submarine_elastic.sim.physics",
        "submarine_elastic.sim.api",
    )
    offenders = []
    for path in sorted((ROOT / "tf_hooks").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
                if node.module == "submarine_elastic":
                    names = [f"submarine_elastic.{alias.name}" for alias in node.names]
            for name in names:
                if name.startswith("submarine_elastic") and not name.startswith(allowed):
                    offenders.append(f"{path.relative_to(ROOT)}: {name}")
    assert not offenders


def test_importing_the_hooks_package_loads_neither_tensorflow_nor_grpc() -> None:
    code = (
        "import sys, tf_hooks, tf_hooks.api, tf_hooks.config\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'grpc'))\n"
        "print(loaded)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


class FakeHorovod:
    def __init__(self, initialized: bool) -> None:
        self.initialized = initialized

    def is_initialized(self) -> bool:
        return self.initialized

    def rank(self) -> int:
        return 2

    def size(self) -> int:
        return 3


def test_ring_comes_from_horovod_only_when_it_is_initialized(monkeypatch: pytest.MonkeyPatch) -> None:
    from tf_hooks._horovod import horovod_ring

    monkeypatch.delitem(sys.modules, "horovod.tensorflow.keras", raising=False)
    monkeypatch.delitem(sys.modules, "horovod.tensorflow", raising=False)
    assert horovod_ring() is None
    monkeypatch.setitem(sys.modules, "horovod.tensorflow", FakeHorovod(initialized=False))
    assert horovod_ring() is None
    monkeypatch.setitem(sys.modules, "horovod.tensorflow", FakeHorovod(initialized=True))
    assert horovod_ring() == (2, 3)


def test_the_hook_options_are_the_config_fields_plus_the_hooks_own() -> None:
    # One list of settings: both hooks take ReportingOptions, MetricsConfig.from_env the connection part.
    fields = {f.name for f in dataclasses.fields(MetricsConfig)} - {"tls"}  # tls follows from tls_ca
    assert set(ConnectionOptions.__optional_keys__) == fields
    assert HOOK_ONLY_OPTIONS == {"batch_size", "rank", "world_size", "sink", "gradient_noise"}
