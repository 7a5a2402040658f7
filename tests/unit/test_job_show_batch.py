"""``submarine job show``: the job's batch setting and its history with each change's reason, from its driver's
Status (a real ``JobDriver`` on an in-process gRPC server bound to port 0; the RM down, so the CLI asks the
driver at its last known address)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import grpc
import pytest
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.elastic.driver import JobDriver
from submarine_elastic.protocol.api import BatchLimits, Limits
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.protocol.proto import elastic_pb2_grpc as pb_grpc
from tests.unit._driver_support import serving

TOKEN = "job-token"


@pytest.fixture()
def driver(monkeypatch: pytest.MonkeyPatch) -> Iterator[JobDriver]:
    """The job ``mnist``'s driver with batch limits 32..512; the RM unreachable, the CLI knows the driver."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        monkeypatch.setenv("SUBMARINE_RM_URL", f"http://127.0.0.1:{s.getsockname()[1]}")
    servicer = JobDriver(
        "mnist",
        Limits(2, 1, 3),
        yarn=None,  # type: ignore[arg-type]
        token=TOKEN,
        iface="lo",
        elastic_timeout=60,
        batch_limits=BatchLimits(32, 512),
    )
    with serving(servicer, "mnist", TOKEN):
        yield servicer


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """One table row a line, as a wide terminal shows it."""
    from submarine_elastic.cli import job as job_cli

    monkeypatch.setattr(job_cli.console, "_width", 200)


def show() -> str:
    result = CliRunner().invoke(cli, ["job", "show", "mnist"])
    assert result.exit_code == 0, result.output
    return result.output


def flex_batch(batch: int, accum: int, lr: float | None, reason: str) -> None:
    channel = grpc.insecure_channel(remember_address())
    with channel:
        pb_grpc.ElasticDriverStub(channel).SetTarget(
            pb.Target(workers=2, batch_size=batch, accum_steps=accum, learning_rate=lr, reason=reason),
            metadata=(("authorization", f"Bearer {TOKEN}"),),
            timeout=5,
        )


def remember_address() -> str:
    from submarine_elastic.submit.store import last_driver_address

    address = last_driver_address("mnist")
    assert address is not None
    return address


def test_show_gives_the_batch_setting_and_its_history_with_each_reason(driver: JobDriver) -> None:
    flex_batch(64, 0, None, "goodput: noise scale 300 samples, batch 64 best")
    flex_batch(256, 1, 0.05, "goodput: noise scale 2100 [samples], batch 256 best")
    out = show()
    words = " ".join(out.split())
    assert "limits 1..3, batch limits 32..512" in words
    now = "batch: global batch 256, accumulation steps 1 (2 micro-batches a step), learning rate 0.05; setting 2"
    assert now in words
    rows = [line for line in out.splitlines() if "goodput: noise scale" in line]
    assert len(rows) == 2, out
    first, second = (" ".join(r.replace("│", " ").split()) for r in rows)
    assert first.endswith("1 64 0 the job's rule goodput: noise scale 300 samples, batch 64 best")
    assert second.endswith("2 256 1 0.05 goodput: noise scale 2100 [samples], batch 256 best")


def test_show_of_a_job_whose_batch_was_never_set_prints_no_batch(driver: JobDriver) -> None:
    out = show()
    assert "phase waiting" in out
    assert "batch:" not in out and "batch settings" not in out
