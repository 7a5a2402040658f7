"""The simulator on workloads whose job completion times are known exactly (see ``_sim_toy``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from submarine_elastic.sim import (
    Allocation,
    BatchRule,
    ClusterConfig,
    ClusterView,
    JobSpec,
    ResizeCosts,
    Scheduler,
    SchedulerError,
    SimConfig,
    StaticBackfill,
    StaticFifo,
    Tiresias,
    TraceCatalog,
    simulate,
)
from submarine_elastic.sim.api import SimResult
from submarine_elastic.sim.output import write_result

from ._sim_toy import TOY, write_toy_data

FREE = SimConfig(costs=ResizeCosts.free())
ONE_NODE = ClusterConfig(nodes=1, gpus_per_node=4)
TWO_NODES = ClusterConfig(nodes=2, gpus_per_node=4)


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> TraceCatalog:
    return TraceCatalog(write_toy_data(tmp_path_factory.mktemp("toy")))


def job(name: str, arrival: float, workers: int, **kw: int) -> JobSpec:
    return JobSpec(name, arrival, TOY, workers, workers, **kw)


def run(catalog: TraceCatalog, jobs: list[JobSpec], scheduler: Scheduler, **kw: object) -> SimResult:
    config = kw.pop("config", FREE)
    cluster = kw.pop("cluster", ONE_NODE)
    return simulate(jobs, cluster, scheduler, catalog=catalog, config=config)  # type: ignore[arg-type]


def jcts(result: SimResult) -> dict[str, float | None]:
    return {j.name: j.jct_s for j in result.jobs}


# --- one job ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheduler", [StaticFifo(), StaticBackfill(), Tiresias()], ids=lambda s: s.name)
def test_one_job_runs_alone_at_its_requested_size(catalog: TraceCatalog, scheduler: Scheduler):
    result = run(catalog, [job("a", 10, 4)], scheduler)
    (a,) = result.jobs
    assert a.start_s == 10
    assert a.jct_s == pytest.approx(25.0)
    assert a.gpu_s == pytest.approx(100.0)
    assert (a.resizes, a.preemptions, a.max_workers) == (0, 0, 4)
    s = result.summary
    assert (s.finished, s.mean_jct_s, s.makespan_s, s.mean_queueing_s) == (1, pytest.approx(25), pytest.approx(25), 0)
    assert s.mean_utilisation == pytest.approx(1.0)


def test_start_cost_delays_a_job_by_exactly_the_cost(catalog: TraceCatalog):
    config = SimConfig(costs=ResizeCosts(start_s=30, scale_out_s=0, scale_in_s=0))
    result = run(catalog, [job("a", 0, 2)], StaticFifo(), config=config)
    assert jcts(result) == {"a": pytest.approx(30 + 50)}
    assert result.jobs[0].gpu_s == pytest.approx(2 * 80)


def test_job_larger_than_the_cluster_runs_on_all_of_it(catalog: TraceCatalog):
    result = run(catalog, [job("wide", 0, 8)], StaticFifo())
    assert result.jobs[0].max_workers == 4
    assert result.jobs[0].final_batch_size == 8  # its batch of 8, two per worker: 8 progress per second
    assert result.jobs[0].jct_s == pytest.approx(12.5)


# --- two jobs contending ------------------------------------------------------------------------------


@pytest.mark.parametrize("scheduler", [StaticFifo(), StaticBackfill(), Tiresias()], ids=lambda s: s.name)
def test_two_jobs_for_the_whole_cluster_run_one_after_the_other(catalog: TraceCatalog, scheduler: Scheduler):
    result = run(catalog, [job("a", 0, 4), job("b", 0, 4)], scheduler)
    assert jcts(result) == {"a": pytest.approx(25), "b": pytest.approx(50)}
    assert result.jobs[1].queueing_s == pytest.approx(25)
    assert result.summary.mean_jct_s == pytest.approx(37.5)
    assert result.summary.p99_jct_s == pytest.approx(25 + 0.99 * 25)


def test_fifo_blocks_behind_the_head_and_backfill_does_not(catalog: TraceCatalog):
    # a holds 3 GPUs for 100/3 s; b wants 4 and waits; c wants 1, which is free now
    jobs = [job("a", 0, 3), job("b", 1, 4), job("c", 2, 1)]
    fifo = jcts(run(catalog, jobs, StaticFifo()))
    assert fifo["a"] == pytest.approx(100 / 3)
    assert fifo["b"] == pytest.approx(100 / 3 + 25 - 1)
    assert fifo["c"] == pytest.approx(100 / 3 + 25 + 100 - 2)
    backfill = jcts(run(catalog, jobs, StaticBackfill()))
    assert backfill["c"] == pytest.approx(100)  # starts at once on the free GPU
    assert backfill["b"] == pytest.approx(102 + 25 - 1)  # needs all four: waits for a (33 s) and c (102 s)


def test_tiresias_preempts_a_demoted_job_for_a_fresh_one(catalog: TraceCatalog):
    # a (4 GPUs) runs from 0; b (2 GPUs) waits. Rounds every 5 s; threshold 20 GPU-s.
    # t=5: a has 20 GPU-s -> demoted; b starts, a is preempted (it needs 4, 2 are left).
    # t=15: b has 20 GPU-s (progress 20) -> demoted after a; a resumes (80 left at 4/s: done at 35).
    # t=35: b resumes with 80 left at 2/s: done at 75.
    config = SimConfig(interval_s=5, costs=ResizeCosts.free())
    result = run(catalog, [job("a", 0, 4), job("b", 0, 2)], Tiresias(threshold_gpu_s=20), config=config)
    assert jcts(result) == {"a": pytest.approx(35), "b": pytest.approx(75)}
    assert [j.preemptions for j in result.jobs] == [1, 1]


# --- a job arriving to a full cluster ----------------------------------------------------------------


@pytest.mark.parametrize("scheduler", [StaticFifo(), StaticBackfill(), Tiresias()], ids=lambda s: s.name)
def test_arrival_to_a_full_cluster_waits_for_the_static_baselines(catalog: TraceCatalog, scheduler: Scheduler):
    result = run(catalog, [job("a", 0, 4), job("late", 10, 1)], scheduler)
    assert jcts(result) == {"a": pytest.approx(25), "late": pytest.approx(25 - 10 + 100)}


def test_tiresias_lets_an_arrival_to_a_full_cluster_in_at_once(catalog: TraceCatalog):
    # t=10: a has 40 GPU-s >= 30 -> demoted; late starts at once and a is preempted (progress 40).
    # t=60 (round): late has 50 GPU-s -> demoted after a; a resumes: 60 left at 4/s, done at 75.
    # t=75: late resumes with 50 left at 1/s: done at 125.
    result = run(catalog, [job("a", 0, 4), job("late", 10, 1)], Tiresias(threshold_gpu_s=30))
    assert jcts(result) == {"a": pytest.approx(75), "late": pytest.approx(115)}
    assert result.jobs[1].queueing_s == 0


def test_restart_costs_are_paid_on_preemption_and_resume(catalog: TraceCatalog):
    # as above, but every start costs 30 s (GPUs held, no progress):
    # a: starts at 0, paused to 30, preempted at 10 with nothing done. late: starts at 10, paused to 40,
    # progress 20 by t=60, preempted. a: resumes at 60, paused to 90, 100 at 4/s: done at 115.
    # late: resumes at 115, paused to 145, 80 left at 1/s: done at 225.
    config = SimConfig(costs=ResizeCosts.restart(30))
    result = run(catalog, [job("a", 0, 4), job("late", 10, 1)], Tiresias(threshold_gpu_s=30), config=config)
    assert jcts(result) == {"a": pytest.approx(115), "late": pytest.approx(215)}


# --- elastic mechanics, with a scripted scheduler ------------------------------------------------------


class Scripted(Scheduler):
    """Gives each job the worker count (and batch, and nodes to span) of the latest step of its script at or
    before now."""

    name = "scripted"

    def __init__(self, script: Mapping[str, list[tuple[float, int, int | None]] | list[Step]]) -> None:
        self.script = script

    def allocate(self, view: ClusterView) -> Mapping[str, Allocation]:
        out = {}
        for j in view.jobs:
            steps = [s for s in self.script.get(j.name, []) if s[0] <= view.now_s]
            if steps:
                _, workers, batch, *nodes = steps[-1]
                span = nodes[0] if nodes else None
                tighter = span is not None and len(j.placement) > span
                if workers != j.workers or (batch is not None and batch != j.batch_size) or tighter:
                    out[j.name] = Allocation(workers, batch, span)
        return out


Step = tuple[float, int, int | None, int | None]


def test_a_job_asked_onto_fewer_nodes_is_moved_and_pays_a_move(catalog: TraceCatalog):
    """Without nodes asked, a job grows where it is (onto a second node when its own is full); asked onto one node,
    it is moved where it fits whole, for the dearest change's pause."""
    config = SimConfig(interval_s=10, costs=ResizeCosts(start_s=0, scale_out_s=1, scale_in_s=0.5))
    script: dict[str, list[Step]] = {
        "a": [(0, 2, None, None), (10, 4, None, None), (20, 4, None, 1)],
        "b": [(0, 1, None, None)],
    }
    result = run(catalog, [job("a", 0, 2), job("b", 0, 1)], Scripted(script), config=config, cluster=TWO_NODES)
    # a: 0..10 at 2/s -> 20; paused to 11; 11..20 at 4/s -> 56 (on 3 + 1 GPUs); moved at 20, paused to 21; 44 at 4/s
    assert jcts(result)["a"] == pytest.approx(32)
    (a,) = [j for j in result.jobs if j.name == "a"]
    assert (a.resizes, a.moves) == (1, 1)
    assert result.summary.moves == 1


def test_scale_out_pays_its_pause_and_speeds_the_job_up(catalog: TraceCatalog):
    config = SimConfig(interval_s=10, costs=ResizeCosts(start_s=0, scale_out_s=5, scale_in_s=0))
    sched = Scripted({"a": [(0, 2, None), (10, 4, None)]})
    result = run(catalog, [job("a", 0, 2)], sched, config=config)
    # 0..10 at 2/s -> 20; paused 10..15; 80 left at 4/s -> 20 s: done at 35
    assert jcts(result) == {"a": pytest.approx(35)}
    assert result.jobs[0].resizes == 1
    assert [(c.time_s, c.workers) for c in result.allocations] == [(0, 2), (10, 4), (pytest.approx(35), 0)]


@pytest.mark.parametrize(("rule", "expected"), [(BatchRule.FIXED_LOCAL, 25.0), (BatchRule.FIXED_GLOBAL, 50.0)])
def test_batch_rule_decides_what_more_workers_buy(catalog: TraceCatalog, rule: BatchRule, expected: float):
    config = SimConfig(costs=ResizeCosts.free(), batch_rule=rule)
    result = run(catalog, [job("a", 0, 2)], Scripted({"a": [(0, 4, None)]}), config=config)
    assert jcts(result) == {"a": pytest.approx(expected)}


def test_a_scheduler_may_set_the_batch_size(catalog: TraceCatalog):
    result = run(catalog, [job("a", 0, 2)], Scripted({"a": [(0, 2, 8)]}))
    assert jcts(result) == {"a": pytest.approx(100 / 8)}
    assert result.jobs[0].final_batch_size == 8


def test_epoch_boundaries_change_the_rate_exactly(tmp_path: Path):
    # pure signal in epoch 2 (grad_var 0): gain 1 whatever the batch, so 4 workers progress 1/s there
    root = write_toy_data(tmp_path)
    v = root / "traces" / TOY / "validation-64.csv"
    for path in (v, v.with_name("validation-1.csv")):
        path.write_text("progress,iteration,metric,grad_sqr,grad_var\n50,50,0.5,0.0,1.0\n100,100,0.9,1.0,0.0\n")
    result = run(TraceCatalog(root), [job("a", 0, 4)], StaticFifo())
    assert jcts(result) == {"a": pytest.approx(50 / 4 + 50 / 1)}


# --- the scheduler contract ---------------------------------------------------------------------------


class Overbooking(Scheduler):
    name = "overbooking"

    def allocate(self, view: ClusterView) -> Mapping[str, Allocation]:
        return {j.name: Allocation(4) for j in view.jobs}


class Stranger(Scheduler):
    name = "stranger"

    def allocate(self, view: ClusterView) -> Mapping[str, Allocation]:
        return {"nobody": Allocation(1)}


def test_more_workers_than_gpus_is_refused_naming_the_scheduler(catalog: TraceCatalog):
    with pytest.raises(SchedulerError, match=r"overbooking allocated 8 workers .* 4 GPUs"):
        run(catalog, [job("a", 0, 4), job("b", 0, 4)], Overbooking())


def test_unknown_job_is_refused_naming_it(catalog: TraceCatalog):
    with pytest.raises(SchedulerError, match="'nobody'"):
        run(catalog, [job("a", 0, 4)], Stranger())


def test_workers_outside_the_job_limits_are_refused(catalog: TraceCatalog):
    with pytest.raises(SchedulerError, match=r"outside its limits 1\.\.2"):
        run(catalog, [job("a", 0, 2, max_replicas=2)], Scripted({"a": [(0, 3, None)]}))


class Never(Scheduler):
    name = "never"

    def allocate(self, view: ClusterView) -> Mapping[str, Allocation]:
        return {}


def test_a_scheduler_that_never_starts_a_job_ends_the_run_with_it_unfinished(catalog: TraceCatalog):
    result = run(catalog, [job("a", 0, 1)], Never())
    assert result.jobs[0].completion_s is None
    assert result.summary.finished == 0


def test_runs_are_deterministic(catalog: TraceCatalog):
    jobs = [job(f"j{i}", i * 3.0, 1 + i % 4) for i in range(12)]
    config = SimConfig(interval_s=7, costs=ResizeCosts.restart(3))
    first = run(catalog, jobs, Tiresias(threshold_gpu_s=50), config=config)
    second = run(catalog, jobs, Tiresias(threshold_gpu_s=50), config=config)
    assert first.jobs == second.jobs
    assert first.allocations == second.allocations
    assert first.utilisation == second.utilisation


def test_placement_as_asked_moves_a_job_only_onto_fewer_nodes():
    from submarine_elastic.sim.engine import _Nodes

    cluster = ClusterConfig(nodes=3, gpus_per_node=4)
    nodes = _Nodes(cluster)
    a, b, c, d, e = (_bare_job(name, cluster) for name in "abcde")
    nodes.grow(a, 2)
    nodes.grow(b, 3)
    assert (a.nodes, b.nodes) == ({0: 2}, {1: 3})
    assert not nodes.place(a, 4, 1)  # fits where it is
    assert a.nodes == {0: 4}
    nodes.grow(c, 2)
    nodes.shrink(a, 1)
    assert nodes.free == [1, 1, 2]
    nodes.grow(c, 1)  # its own node first
    nodes.grow(d, 2)  # no node has two free: one on each of nodes 0 and 1
    assert (c.nodes, d.nodes, nodes.free) == ({2: 3}, {0: 1, 1: 1}, [0, 0, 1])
    nodes.shrink(c, 3)
    assert nodes.place(d, 2, 1)  # node 2 holds both once d's own worker there is counted free: moved there
    assert d.nodes == {2: 2} and nodes.free == [1, 1, 2]
    nodes.grow(e, 1)  # best fit: node 0
    assert not nodes.place(e, 3, 1)  # neither in place nor moved fits one node: grows where it is, on two
    assert e.nodes == {0: 1, 2: 2} and nodes.free == [0, 1, 0]


def _bare_job(name: str, cluster: ClusterConfig):  # noqa: ANN202 - a _Job, private
    from submarine_elastic.sim.engine import _Job

    class _App:  # only what _Job reads at construction
        def clamp_batch(self, b: float) -> float:
            return b

        def max_useful_replicas(self) -> int:
            return 64

        epochs = 1

    return _Job(JobSpec(name, 0, TOY, 1, 1), _App(), cluster, 64)  # type: ignore[arg-type]


def test_placement_packs_jobs_and_keeps_workers_in_place():
    from submarine_elastic.sim.engine import _Job, _Nodes

    cluster = ClusterConfig(nodes=3, gpus_per_node=4)
    nodes = _Nodes(cluster)

    class _App:  # only what _Job reads at construction
        def clamp_batch(self, b: float) -> float:
            return b

        def max_useful_replicas(self) -> int:
            return 64

        epochs = 1

    def new(name: str) -> _Job:
        return _Job(JobSpec(name, 0, TOY, 1, 1), _App(), cluster, 64)  # type: ignore[arg-type]

    a, b, c = new("a"), new("b"), new("c")
    nodes.grow(a, 3)
    assert a.nodes == {0: 3}
    nodes.grow(b, 2)  # best fit: a node with exactly enough would win; here the emptiest that fits
    assert b.nodes == {1: 2}
    nodes.grow(c, 6)  # does not fit on one node: the nodes with most free first
    assert c.nodes == {2: 4, 1: 2}
    nodes.shrink(c, 2)  # fewest workers first
    assert c.nodes == {2: 4}
    nodes.grow(a, 3)  # stays on its node first, then best fit for the rest
    assert a.nodes == {0: 4, 1: 2}
    assert nodes.free == [0, 0, 0]


def test_written_files_hold_one_row_per_job(catalog: TraceCatalog, tmp_path: Path):
    import csv
    import json

    result = run(catalog, [job("a", 0, 4), job("b", 0, 4)], StaticFifo())
    paths = write_result(result, tmp_path / "out")
    rows = list(csv.DictReader(paths["jobs"].open()))
    assert [(r["name"], float(r["jct_s"])) for r in rows] == [("a", 25.0), ("b", 50.0)]
    summary = json.loads(paths["summary"].read_text())
    assert summary["mean_jct_s"] == pytest.approx(37.5)
    assert summary["finished"] == 2
    assert paths["utilisation"].read_text().startswith("time_s,allocated_gpus")


def test_a_jobs_measured_configurations_follow_its_steps_and_reconfigurations(catalog: TraceCatalog):
    """The configurations a job shows are, after every advance and reconfiguration, those its measurements make:
    the one it runs in gains its steps, a new one comes last, one taken up again moves last."""
    from submarine_elastic.sim.api import MeasuredStep
    from submarine_elastic.sim.engine import _Job, _Nodes

    def made(j: _Job) -> tuple[MeasuredStep, ...]:
        return tuple(MeasuredStep(*key, s, sync, int(n)) for key, (s, sync, n) in j.measured.items())

    cluster = TWO_NODES
    nodes = _Nodes(cluster)
    j = _Job(job("a", 0.0, 1), catalog.get(TOY), cluster, 64)
    assert j.measured_steps() == made(j) == ()
    t = 0.0
    for workers in (1, 2, 2, 4, 1, 4):
        if workers > j.workers:
            nodes.grow(j, workers - j.workers)
        elif workers < j.workers:
            nodes.shrink(j, j.workers - workers)
        j.workers = workers
        j.reconfigure(float(workers))
        assert j.measured_steps() == made(j)
        for _ in range(3):
            t += 2.5
            j.advance(t)
            assert j.measured_steps() == made(j)
    assert [m.workers for m in j.measured_steps()] == [2, 1, 4]
