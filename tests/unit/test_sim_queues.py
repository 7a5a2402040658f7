"""Queues in the simulator: a workload tagged with queues replays under the controller's per-queue arbitration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from submarine_elastic.cli.main import cli
from submarine_elastic.policy import QueueShare
from submarine_elastic.sim import ClusterConfig, JobSpec, ResizeCosts, SimConfig, SimResult, TraceCatalog, simulate
from submarine_elastic.sim.schedulers import load_scheduler
from submarine_elastic.sim.workload import parse_workload, write_workload

from ._sim_toy import TOY, write_toy_data

#: On 8 GPUs: prod is guaranteed 4 and may take all 8; research is guaranteed 4 and may hold 6 at most.
QUEUES = (QueueShare("prod", 0.5, 1.0), QueueShare("research", 0.5, 0.75))


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> TraceCatalog:
    return TraceCatalog(write_toy_data(tmp_path_factory.mktemp("toy")))


def by_queue(result: SimResult, jobs: list[JobSpec]) -> list[tuple[float, dict[str, int]]]:
    """Each queue's workers from each time on at which an allocation changed."""
    queue_of = {j.name: j.queue or "prod" for j in jobs}
    workers: dict[str, int] = {}
    timeline: list[tuple[float, dict[str, int]]] = []
    for change in result.allocations:
        workers[change.job] = change.workers
        totals = {q.name: sum(n for job, n in workers.items() if queue_of[job] == q.name) for q in QUEUES}
        if timeline and timeline[-1][0] == change.time_s:
            timeline[-1] = (change.time_s, totals)
        else:
            timeline.append((change.time_s, totals))
    return timeline


def run(catalog: TraceCatalog, jobs: list[JobSpec], spec: str = "greedy+fair-share") -> SimResult:
    scheduler = load_scheduler(spec, cooldown_s=0, queues=QUEUES)
    return simulate(jobs, ClusterConfig(2, 4), scheduler, catalog=catalog, config=SimConfig(1.0, ResizeCosts.free()))


@pytest.mark.parametrize("spec", ["greedy+fair-share", "greedy+goodput"])
def test_a_queue_never_holds_more_than_its_maximum(catalog: TraceCatalog, spec: str) -> None:
    jobs = [JobSpec(f"r{i}", 2.0 * i, TOY, 1, 1, max_replicas=8, queue="research") for i in range(3)]
    result = run(catalog, jobs, spec)
    assert result.summary.finished == 3
    timeline = by_queue(result, jobs)
    assert max(totals["research"] for _, totals in timeline) == 6  # 75 % of 8, though 2 GPUs stay idle


def test_an_idle_guarantee_is_lent_and_given_back_when_its_jobs_arrive(catalog: TraceCatalog) -> None:
    jobs = [
        JobSpec("r", 0.0, TOY, 1, 1, max_replicas=8, queue="research"),
        JobSpec("p", 5.0, TOY, 1, 1, max_replicas=8),  # no queue: the first, prod
    ]
    timeline = by_queue(run(catalog, jobs), jobs)
    before = [totals for t, totals in timeline if t < 5.0]
    at_arrival = next(totals for t, totals in timeline if t == 5.0)
    assert before[-1] == {"prod": 0, "research": 6}  # research borrows 2 of prod's idle 4
    assert at_arrival == {"prod": 4, "research": 4}  # prod's guarantee back in the round it arrives


def test_the_queue_column_round_trips(tmp_path: Path) -> None:
    jobs = [JobSpec("a", 0.0, TOY, 1, 1, queue="research"), JobSpec("b", 1.0, TOY, 1, 1)]
    write_workload(jobs, tmp_path / "w.csv")
    assert parse_workload((tmp_path / "w.csv").read_text().splitlines(keepends=True)) == jobs


def test_sim_run_takes_queues_and_names_a_queue_it_does_not_have(tmp_path: Path) -> None:
    data = write_toy_data(tmp_path / "data")
    workload = tmp_path / "w.csv"
    workload.write_text(
        f"name,time,application,num_replicas,batch_size,queue\na,0,{TOY},1,1,research\nb,0,{TOY},1,1,\n"
    )
    base = ["sim", "run", "--data", str(data), "-w", str(workload), "-c", "2x4", "-p", "greedy+fair-share"]
    out = tmp_path / "out"
    ok = CliRunner().invoke(cli, [*base, "--queues", "prod:50,research:50:75", "-o", str(out), "--no-plots"])
    assert ok.exit_code == 0, ok.output
    assert json.loads((out / "summary.json").read_text())[0]["finished"] == 2
    unknown = CliRunner().invoke(cli, [*base, "--queues", "prod:60,dev:40", "-o", str(out)])
    assert unknown.exit_code == 1
    assert "job 'a' is in queue 'research', which --queues does not have (prod, dev)" in unknown.output
    bad = CliRunner().invoke(cli, [*base, "--queues", "prod:60,research:30", "-o", str(out)])
    assert bad.exit_code == 2
    assert "must add up to 100" in bad.output
