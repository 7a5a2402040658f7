"""``submarine job show`` names the node each worker runs on, as its agent reported it (a real ``JobDriver`` on an
in-process gRPC server; the RM down, so the CLI asks the driver at its last known address)."""

from __future__ import annotations

from submarine_elastic.elastic.driver import JobDriver
from submarine_elastic.elastic.ringhost import AgentHandle
from tests.unit.test_job_show_batch import driver, show, wide_console  # noqa: F401 - fixtures


def test_show_names_the_node_of_each_worker(driver: JobDriver) -> None:  # noqa: F811
    for number, node in enumerate(("node-a:8041", "node-b:8041")):
        driver.registry.add(AgentHandle(f"a{number}", f"worker-{number}", f"c{number}", "localhost", node=node))
    rows = [" ".join(line.replace("│", " ").split()) for line in show().splitlines() if "worker-" in line]
    assert rows == ["worker-0 c0 attached - node-a:8041", "worker-1 c1 attached - node-b:8041"]


def test_show_of_workers_whose_node_is_unknown_has_no_node_column(driver: JobDriver) -> None:  # noqa: F811
    driver.registry.add(AgentHandle("a0", "worker-0", "c0", "localhost"))
    [header] = [line for line in show().splitlines() if "instance" in line]
    assert "container" in header and "node" not in header
