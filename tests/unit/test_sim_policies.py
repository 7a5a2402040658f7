"""The live policy engine driven by the simulator: snapshot mapping, loading by name, and what it buys."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest

from submarine_elastic import env
from submarine_elastic.policy import Snapshot, loss_window
from submarine_elastic.policy.engine import PolicyEngine
from submarine_elastic.sim import (
    BatchRule,
    ClusterConfig,
    ClusterView,
    JobSpec,
    JobView,
    ResizeCosts,
    SchedulerError,
    SimConfig,
    SimResult,
    StaticFifo,
    TraceCatalog,
    load_workload,
    simulate,
)
from submarine_elastic.sim.api import MeasuredStep
from submarine_elastic.sim.policy_adapter import PolicyScheduler, to_snapshot
from submarine_elastic.sim.schedulers import load_scheduler
from submarine_elastic.sim.workload import sample_jobs, scale_arrivals

from ._sim_toy import TOY, write_toy_data

ELASTIC = ["greedy+fair-share", "greedy+goodput", "scaling-efficiency+fair-share", "utility(deadline_s=3600)+goodput"]


def view_job(**kw: object) -> JobView:
    base: dict[str, object] = {
        "name": "a",
        "application": "cifar10",
        "arrival_s": 5.0,
        "requested_replicas": 2,
        "requested_batch_size": 256,
        "min_replicas": 1,
        "max_replicas": 16,
        "workers": 2,
        "batch_size": 256.0,
        "progress": 0.25,
        "attained_gpu_s": 100.0,
        "run_s": 50.0,
        "epoch": 3,
        "metric": 0.6,
        "throughput": MappingProxyType({1: 900.0, 2: 1700.0}),
        "efficiency": 0.8,
        "resizing": False,
        "last_resize_s": 40.0,
        "steps": 1234,
        "steps_at": MappingProxyType({1: 200, 2: 1034}),
        "metric_history": (0.4, 0.5, 0.6),
        "metric_higher_is_better": True,
        "noise_scale": 500.0,
        "remaining_examples": 1e6,
    }
    base.update(kw)
    return JobView(**base)  # type: ignore[arg-type]


def test_snapshot_carries_what_the_policies_read():
    view = ClusterView(100.0, ClusterConfig(2, 4), 6, (view_job(),))
    snap = to_snapshot(view)
    assert isinstance(snap, Snapshot)
    assert (snap.now, snap.capacity, snap.free) == (100.0, 8, 6)
    (job,) = snap.jobs
    assert (job.job_id, job.min_workers, job.max_workers, job.elastic) == ("a", 1, 16, True)
    assert (job.current_workers, job.pending_workers, job.submitted_at, job.last_resize_at) == (2, 0, 5.0, 40.0)
    m = job.metrics
    assert m.step == 1234
    assert {k: (t.samples_per_second, t.steps) for k, t in m.throughput.items()} == {1: (900, 200), 2: (1700, 1034)}
    assert m.loss_window == (-0.4, -0.5, -0.6)  # accuracy, negated: lower is better like a loss
    assert (m.gradient_noise_scale, m.batch_size, m.remaining_samples) == (500.0, 256, 1e6)


def test_error_metrics_stay_as_they_are_and_fixed_jobs_have_one_size():
    view = ClusterView(0.0, ClusterConfig(1, 4), 4, (view_job(metric_higher_is_better=False, requested_replicas=8),))
    (job,) = to_snapshot(view, elastic=False).jobs
    assert job.metrics.loss_window == (0.4, 0.5, 0.6)
    assert (job.min_workers, job.max_workers, job.elastic) == (4, 4, False)


def test_a_loss_window_follows_its_metric_history():
    """Loss windows are made once per history: a new epoch's history, the other sense, and a zero of either sign
    each give their own, never one made for another."""

    def window(history: tuple[float, ...], higher: bool = True) -> tuple[float, ...]:
        view = ClusterView(
            0.0, ClusterConfig(1, 4), 4, (view_job(metric_history=history, metric_higher_is_better=higher),)
        )
        return to_snapshot(view).jobs[0].metrics.loss_window

    assert window((0.4, 0.5)) == (-0.4, -0.5)
    assert window((0.4, 0.5, 0.7)) == (-0.4, -0.5, -0.7)
    assert window((0.4, 0.5), higher=False) == (0.4, 0.5)
    assert window((0.4, 0.5)) == (-0.4, -0.5)
    for zero in (0.0, -0.0):  # equal keys: each gives what a window made afresh gives
        assert str(window((zero, 0.5))) == str(loss_window(enumerate((zero, 0.5)), higher_is_better=True))


def test_a_jobs_configurations_follow_its_measurements():
    """The StepTimes a job's configurations become are converted anew where one changed, kept where it did not."""
    one, two = MeasuredStep(1, 1, 32.0, 0, 0.5, 0.1, 10), MeasuredStep(2, 1, 32.0, 0, 0.4, 0.2, 5)

    def configurations(*measured: MeasuredStep) -> list[tuple[int, float, int]]:
        view = ClusterView(0.0, ClusterConfig(1, 4), 4, (view_job(configurations=measured),))
        return [(m.workers, m.seconds, m.steps) for m in to_snapshot(view).jobs[0].metrics.configurations]

    assert configurations(one, two) == [(1, 0.5, 10), (2, 0.4, 5)]
    assert configurations(one, replace(two, steps=9)) == [(1, 0.5, 10), (2, 0.4, 9)]
    assert configurations(replace(one, seconds=0.7), replace(two, steps=9)) == [(1, 0.7, 10), (2, 0.4, 9)]
    assert configurations(two) == [(2, 0.4, 5)]


def test_bad_view_values_are_reported_naming_the_job():
    view = ClusterView(0.0, ClusterConfig(1, 4), 4, (view_job(noise_scale=float("nan")),))
    with pytest.raises(SchedulerError, match="gradient_noise_scale"):
        to_snapshot(view)


def test_schedulers_load_by_name_with_options():
    assert load_scheduler("fifo").name == "fifo"
    assert load_scheduler("greedy").name == "greedy+fair-share"
    sched = load_scheduler("utility(deadline_s=7200, hysteresis=0.2)+goodput", cooldown_s=0)
    assert isinstance(sched, PolicyScheduler)
    assert sched.name == "utility(deadline_s=7200, hysteresis=0.2)+goodput"
    assert sched.engine.job_policy.deadline_s == 7200  # type: ignore[attr-defined]
    assert sched.engine.cooldown_s == 0
    composite = load_scheduler("composite(policies=[convergence, scaling-efficiency])")
    assert isinstance(composite, PolicyScheduler)
    assert [p.name for p in composite.engine.job_policy.policies] == ["convergence", "scaling-efficiency"]  # type: ignore[attr-defined]
    user = load_scheduler("submarine_elastic.policy.basic:GreedyPolicy+submarine_elastic.policy.goodput:GoodputArbiter")
    assert isinstance(user, PolicyScheduler)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "a scheduler is needed"),
        ("no-such-policy", "scheduler 'no-such-policy': no policy named 'no-such-policy'"),
        ("fair-share", "is a cluster arbiter, not a job policy"),
        ("greedy+static", "is a job policy, not a cluster arbiter"),
        ("utility", "needs price_per_worker_hour and value_per_sample, or deadline_s"),
        ("greedy(bogus)", "option 'bogus' of 'greedy' must be key=value"),
        ("greedy(x=1", "unbalanced parentheses"),
        ("greedy+fair-share+goodput", r"expected JOB_POLICY\[\+ARBITER\]"),
    ],
)
def test_bad_scheduler_specs_say_what_is_wrong(spec: str, message: str):
    with pytest.raises(SchedulerError, match=message):
        load_scheduler(spec)


def test_policy_engine_refusals_are_counted_not_raised():
    sched = PolicyScheduler(PolicyEngine())
    assert sched.refusals == 0
    with pytest.raises(TypeError, match="PolicyEngine"):
        PolicyScheduler(object())  # type: ignore[arg-type]


def test_an_arrival_to_a_full_cluster_starts_at_once_under_an_elastic_policy(tmp_path_factory: pytest.TempPathFactory):
    catalog = TraceCatalog(write_toy_data(tmp_path_factory.mktemp("toy")))
    jobs = [JobSpec("a", 0, TOY, 4, 4), JobSpec("late", 10, TOY, 1, 1)]
    cluster = ClusterConfig(1, 4)
    config = SimConfig(costs=ResizeCosts.free())
    fifo = simulate(jobs, cluster, StaticFifo(), catalog=catalog, config=config)
    elastic = simulate(jobs, cluster, load_scheduler("greedy", cooldown_s=0), catalog=catalog, config=config)
    assert fifo.jobs[1].queueing_s == pytest.approx(15)
    assert elastic.jobs[1].queueing_s == 0  # no head-of-line blocking: it takes a worker from "a"
    assert elastic.summary.mean_jct_s < fifo.summary.mean_jct_s
    assert elastic.summary.resizes >= 1


@pytest.fixture(scope="module")
def contended() -> list[JobSpec]:
    """30 jobs of workload-2 (no imagenet: days on one GPU) arriving 10x faster, for a 16-GPU cluster."""
    data = env.settings().pollux_data_directory()
    jobs = load_workload(data / "workloads" / "workload-2.csv")
    jobs = [j for j in jobs if j.application != "imagenet"]
    return scale_arrivals(sample_jobs(jobs, 30, seed=1), 0.1)


@pytest.fixture(scope="module")
def fifo_on_contended(contended: list[JobSpec]) -> float:
    result = simulate(contended, ClusterConfig(4, 4), StaticFifo())
    assert result.summary.finished == len(contended)
    return result.summary.mean_jct_s


@pytest.mark.parametrize("spec", ELASTIC)
def test_elastic_policies_beat_static_fifo_on_a_contended_workload(
    spec: str, contended: list[JobSpec], fifo_on_contended: float
):
    result = simulate(contended, ClusterConfig(4, 4), load_scheduler(spec))
    assert result.summary.finished == len(contended)
    assert result.summary.mean_jct_s < 0.9 * fifo_on_contended
    assert result.summary.resizes > 0


def _builtin_specs() -> list[str]:
    from submarine_elastic.policy import JobPolicy
    from submarine_elastic.policy.loader import BUILTIN_POLICIES, load_policy_class

    options = {"utility": "(deadline_s=600)", "composite": "(policies=[convergence, greedy])"}
    jobs = [n for n in BUILTIN_POLICIES if issubclass(load_policy_class(n), JobPolicy)]
    arbiters = [n for n in BUILTIN_POLICIES if n not in jobs]
    return [f"{j}{options.get(j, '')}+{a}" for j in sorted(jobs) for a in sorted(arbiters)]


@pytest.mark.parametrize("spec", _builtin_specs())
def test_every_builtin_policy_and_arbiter_drives_a_toy_cluster_to_the_end(
    spec: str, tmp_path_factory: pytest.TempPathFactory
):
    catalog = TraceCatalog(write_toy_data(tmp_path_factory.mktemp("toy")))
    jobs = [JobSpec(f"j{i}", i * 7.0, TOY, 1 + i % 4, 1 + i % 4) for i in range(10)]
    config = SimConfig(interval_s=10, costs=ResizeCosts(start_s=1, scale_out_s=2, scale_in_s=0.5))
    first = simulate(jobs, ClusterConfig(2, 4), load_scheduler(spec, cooldown_s=20), catalog=catalog, config=config)
    again = simulate(jobs, ClusterConfig(2, 4), load_scheduler(spec, cooldown_s=20), catalog=catalog, config=config)
    assert first.summary.finished == len(jobs)
    assert first.jobs == again.jobs  # deterministic
    assert all(u.allocated_gpus <= 8 for u in first.utilisation)


def test_snapshot_carries_what_the_goodput_policy_fits():
    measured = (MeasuredStep(1, 1, 128.0, 0, 0.1, 0.001, 50), MeasuredStep(4, 1, 64.0, 1, 0.2, 0.02, 70))
    job_view = view_job(
        min_batch_size=128, max_batch_size=4096, max_local_batch=512, configurations=measured, placement=(1, 1)
    )
    live = ClusterView(100.0, ClusterConfig(2, 4), 6, (job_view,), ResizeCosts(scale_out_s=0.6, scale_in_s=0.2))
    snap = to_snapshot(live)
    (job,) = snap.jobs
    assert snap.slots_per_node == 4
    assert (job.placement, job.nodes) == ((1, 1), 2)
    assert [
        (m.workers, m.nodes, m.local_batch, m.accum_steps, m.seconds, m.sync_seconds, m.steps)
        for m in job.metrics.configurations
    ] == [
        (1, 1, 128.0, 0, 0.1, 0.001, 50),
        (4, 1, 64.0, 1, 0.2, 0.02, 70),
    ]
    assert (job.metrics.accum_steps, job.metrics.resize_cost_s) == (1, 0.6)
    assert (job.min_batch_size, job.max_batch_size, job.max_local_batch, job.requested_workers) == (128, 4096, 512, 2)
    restart = ClusterView(100.0, ClusterConfig(2, 4), 6, (job_view,), ResizeCosts.restart(30.0), "fixed-global")
    (held,) = to_snapshot(restart).jobs
    assert held.metrics.resize_cost_s == 30.0
    assert (held.min_batch_size, held.max_batch_size) == (None, None)  # the batch is not the policy's to choose


def test_the_nodes_a_policy_decides_go_to_the_simulator():
    from submarine_elastic.policy import Allocation as PolicyAllocation
    from submarine_elastic.policy import ClusterArbiter, StaticPolicy

    class Packs(ClusterArbiter):
        name = "packs"

        def allocate(self, snapshot: Snapshot, requests: object) -> list[PolicyAllocation]:
            return [PolicyAllocation("a", 2, "one node", nodes=1)]

    scheduler = PolicyScheduler(PolicyEngine(StaticPolicy(), Packs()))
    view = ClusterView(100.0, ClusterConfig(2, 4), 6, (view_job(placement=(1, 1), last_resize_s=None),))
    assert scheduler.allocate(view)["a"].nodes == 1


def _goodput_run(costs: ResizeCosts, rule: BatchRule) -> SimResult:
    catalog = TraceCatalog()
    jobs = [
        JobSpec("cifar10-a", 0.0, "cifar10", 4, 512),
        JobSpec("cifar10-b", 300.0, "cifar10", 2, 256),
        JobSpec("bert-c", 600.0, "bert", 2, 24),
    ]
    config = SimConfig(costs=costs, batch_rule=rule)
    return simulate(jobs, ClusterConfig(2, 4), load_scheduler("goodput+goodput"), catalog=catalog, config=config)


def test_the_simulator_applies_the_goodput_batch_decisions():
    adaptive = _goodput_run(ResizeCosts(), BatchRule.FIXED_LOCAL)
    assert adaptive.summary.finished == 3
    batches = {c.job: set() for c in adaptive.allocations}
    for change in adaptive.allocations:
        batches[change.job].add(round(change.batch_size))
    assert len(batches["bert-c"]) > 2 and len(batches["cifar10-b"]) > 1  # the batch followed the noise scale
    # with a change of workers the batch is the one chosen for the new count, not the rule's 128 per worker
    assert all(round(c.batch_size) == 512 for c in adaptive.allocations if c.job == "cifar10-a")
    fixed = _goodput_run(ResizeCosts(), BatchRule.FIXED_GLOBAL)
    assert fixed.summary.finished == 3
    requested = {"cifar10-a": 512, "cifar10-b": 256, "bert-c": 24}
    assert all(round(c.batch_size) == requested[c.job] for c in fixed.allocations)
