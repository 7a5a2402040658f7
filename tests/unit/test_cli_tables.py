"""The CLI's tables at an 80-column terminal (``COLUMNS=80``): every name whole, no line wider than 80."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from submarine_elastic.cli import cluster as cluster_cli
from submarine_elastic.cli.main import cli
from submarine_elastic.cli.tables import table
from submarine_elastic.cluster.api import ClusterStatus, Daemon, NodeInfo, ServiceSummary
from submarine_elastic.yarn.api import QueueReport

LOG = Path("/root/.submarine-elastic/cluster/logs/resourcemanager-with-a-long-name.log")


def status() -> ClusterStatus:
    """A cluster with queues, two nodes, a long log path and a service with a long application id."""
    queues = [
        QueueReport("prod", "root.prod", "RUNNING", 60, 100, 12.5, used_memory_mb=1024, pending_containers=3),
        QueueReport("research", "root.research", "RUNNING", 40, 100, 80, used_memory_mb=6144, pending_memory_mb=2048),
    ]
    return ClusterStatus(
        rm_url="http://127.0.0.1:18088",
        daemons=[(Daemon("rm", 4242, 1, LOG), True), (Daemon("nm-0", 4243, 1, LOG.with_name("nm-0.log")), True)],
        nodes=[NodeInfo(f"localhost:1961{i}", "RUNNING", 2048, 2048, 2, 2, 3) for i in range(2)],
        services=[ServiceSummary("elastic-mnist-long-job", "application_1764650000000_0042", "STABLE", 6144, 4)],
        queues=queues,
    )


@pytest.fixture()
def at_80(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(cluster_cli, "console", Console(width=80, force_terminal=False, color_system=None))


class _Cluster:
    def status(self) -> ClusterStatus:
        return status()


def test_cluster_status_at_80_columns_keeps_every_name_whole(
    at_80: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cluster_cli, "_cluster", lambda _dir: _Cluster())
    result = CliRunner().invoke(cli, ["cluster", "status"], catch_exceptions=False)
    out = capsys.readouterr().out + result.output
    assert result.exit_code == 0, out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80, "\n".join(line for line in lines if len(line) > 80)
    for name in ("root.research", "root.prod", "localhost:19610", "localhost:19611", "elastic-mnist-long-job",
                 "application_1764650000000_0042"):  # fmt: skip
        assert any(name in line for line in lines), f"{name} cut:\n{out}"
    assert "…" not in out and "..." not in out
    # the log's path is wrapped over lines, not cut: its pieces put back together are the whole path
    log_cells = "".join(line.split("│")[-2].strip() for line in lines if line.count("│") == 5)
    assert str(LOG) in log_cells, out


def test_a_name_column_is_as_wide_as_its_longest_name() -> None:
    names = table(None, "queue", "guaranteed", "maximum", "used", "pending containers", "pending memory MB")
    names.add_row("root.research.deep-learning", "40%", "100%", "80.0%", "3", "2048")
    console = Console(width=80, record=True, color_system=None)
    console.print(names)
    text = console.export_text()
    assert "root.research.deep-learning" in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_job_list_at_80_columns_keeps_names_and_application_ids_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    from submarine_elastic.cli import job as job_cli
    from submarine_elastic.yarn.api import AppSummary

    apps = [AppSummary("application_1764650000000_0042", "elastic-mnist-with-a-long-name", "RUNNING", "research-user")]

    class _Yarn:
        def __enter__(self) -> _Yarn:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def list(self) -> list[AppSummary]:
            return apps

    console = Console(width=80, record=True, color_system=None)
    monkeypatch.setattr(job_cli, "console", console)
    monkeypatch.setattr(job_cli, "_yarn", _Yarn)
    result = CliRunner().invoke(cli, ["job", "list"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    text = console.export_text()
    assert "elastic-mnist-with-a-long-name" in text and "application_1764650000000_0042" in text, text
    assert max(len(line) for line in text.splitlines()) <= 80
