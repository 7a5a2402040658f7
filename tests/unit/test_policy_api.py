"""Value types of the policy API: what they accept, what they reject (naming the value), what they derive."""

from __future__ import annotations

import math
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from submarine_elastic.policy import (
    Allocation,
    Decision,
    InvalidDecisionError,
    InvalidSnapshotError,
    JobMetrics,
    JobView,
    PolicyError,
    PolicyStateError,
    Request,
    Snapshot,
    StaticPolicy,
    Throughput,
)

from ._policy_support import job, snapshot


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Throughput(-1.0), "samples_per_second must be >= 0, got -1.0"),
        (lambda: Throughput(math.nan), "samples_per_second must be a finite number, got nan"),
        (lambda: Throughput(1.0, steps=-2), "steps must be an int >= 0, got -2"),
        (lambda: JobMetrics(throughput={0: Throughput(1.0)}), "throughput world size must be an int >= 1, got 0"),
        (
            lambda: JobMetrics(throughput={1: 5.0}),  # type: ignore[dict-item]
            r"throughput\[1\] must be a Throughput, got 5.0",
        ),
        (lambda: JobMetrics(step_times={"bad name!": (1.0,)}), "step_times key must be a worker instance name"),
        (
            lambda: JobMetrics(step_times={"worker-0": (1.0, math.inf)}),
            "step_times\\['worker-0'\\] entry must be a finite",
        ),
        (lambda: JobMetrics(loss_window=(1.0, math.nan)), "loss_window entries must be finite numbers, got nan"),
        (lambda: JobMetrics(batch_size=0), "batch_size must be an int >= 1, got 0"),
        (lambda: JobMetrics(learning_rate=0.0), "learning_rate must be > 0, got 0.0"),
        (lambda: JobView("", 1, 2), "job_id must be a non-empty string, got ''"),
        (lambda: JobView("a", 0, 2), "a: min_workers must be an int >= 1, got 0"),
        (lambda: JobView("a", 3, 2), r"a: max_workers \(2\) is below min_workers \(3\)"),
        (lambda: JobView("a", 1, 2, elastic=False), "a job that is not elastic needs min_workers == max_workers"),
        (lambda: JobView("a", 1, 2, current_workers=-1), "a: current_workers must be an int >= 0, got -1"),
        (lambda: JobView("a", 1, 2, pending_workers=True), "a: pending_workers must be an int >= 0, got True"),
        (lambda: JobView("a", 1, 2, last_resize_at=math.inf), "a: last_resize_at must be a finite number or None"),
        (lambda: Snapshot(now=0.0, capacity=-1, free=0), "capacity must be an int >= 0, got -1"),
        (lambda: Snapshot(now=0.0, capacity=2, free=3), r"free \(3\) exceeds capacity \(2\)"),
        (lambda: Snapshot(now=math.nan, capacity=2, free=0), "now must be a finite number, got nan"),
        (lambda: Snapshot(now=0.0, capacity=4, free=0, jobs=(job("x"), job("x"))), "job id 'x' appears twice"),
    ],
)
def test_snapshot_types_reject_bad_values(build: object, message: str) -> None:
    with pytest.raises(InvalidSnapshotError, match=message) as info:
        build()  # type: ignore[operator]
    assert isinstance(info.value, PolicyError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Decision("a", -1, "x"), "a: target_workers must be an int >= 0, got -1"),
        (
            lambda: Decision("a", 2.0, "x"),  # type: ignore[arg-type]
            "a: target_workers must be an int >= 0, got 2.0",
        ),
        (lambda: Decision("a", 2, "  "), "reason must be a non-empty string"),
        (lambda: Decision("a", 2, "two\nlines"), "reason must be one line"),
        (lambda: Decision("a", 2, "x", batch_size=0), "a: batch size must lie in \\[1, 16777216\\], got 0"),
        (
            lambda: Decision("a", 2, "x", learning_rate=-0.1),
            "a: learning rate must be a finite number > 0 \\(or none: the job's rule\\), got -0.1",
        ),
        (
            lambda: Decision("a", 2, "x", replace="worker-0"),  # type: ignore[arg-type]
            "a: replace must be a sequence of names",
        ),
        (lambda: Decision("a", 2, "x", replace=("worker-0", "worker-0")), "replace names an instance twice"),
        (lambda: Allocation("a", -3, "x"), "a: workers must be an int >= 0, got -3"),
        (lambda: Decision("a", 2, "x", nodes=0), "a: nodes must be an int >= 1, got 0"),
        (lambda: Decision("a", 2, "x", nodes=3), r"a: nodes \(3\) exceeds its workers \(2\)"),
        (lambda: Allocation("a", 4, "x", nodes=5), r"a: nodes \(5\) exceeds its workers \(4\)"),
        (lambda: Request(job("a", max_workers=4), 5, settled=False, reason="x"), r"a: desired 5 is outside \[1, 4\]"),
    ],
)
def test_decision_types_reject_bad_values(build: object, message: str) -> None:
    with pytest.raises(InvalidDecisionError, match=message):
        build()  # type: ignore[operator]


@settings(max_examples=50, deadline=None)
@given(target=st.integers(max_value=-1))
def test_any_negative_target_is_rejected(target: int) -> None:
    with pytest.raises(InvalidDecisionError):
        Decision("a", target, "x")


@settings(max_examples=50, deadline=None)
@given(lo=st.integers(1, 50), hi=st.integers(1, 50), current=st.integers(0, 60), pending=st.integers(0, 5))
def test_job_views_build_exactly_when_the_limits_are_ordered(lo: int, hi: int, current: int, pending: int) -> None:
    if hi < lo:
        with pytest.raises(InvalidSnapshotError):
            JobView("a", lo, hi, current_workers=current)
        return
    view = JobView("a", lo, hi, current_workers=current, pending_workers=pending)
    assert view.holding == current + pending
    assert view.waiting == (current + pending < lo)


def test_derived_values() -> None:
    view = job(current=2, pending=1, step_times={"worker-0": [1.0]}, instances=("worker-1",), loss=[3.0, 2.0, 1.0])
    assert view.holding == 3
    assert view.known_instances == {"worker-0", "worker-1"}
    assert view.metrics.loss_trend == pytest.approx(-1.0)
    assert JobMetrics().loss_trend is None
    assert view.metrics.samples_per_second(3) is None
    snap = snapshot(view, capacity=8, free=2)
    assert snap.available == 5
    assert snap.job("job-a") is view and snap.job("nope") is None
    assert Snapshot(now=0.0, capacity=4, free=4, jobs=(job(current=3),)).available == 4  # never above capacity


def test_a_placement_is_workers_per_node_most_first() -> None:
    view = JobView("a", 1, 8, current_workers=6, placement=[2, 4])
    assert view.placement == (4, 2) and view.nodes == 2
    assert JobView("a", 1, 8, current_workers=6).nodes is None  # not known
    with pytest.raises(InvalidSnapshotError, match=r"a: placement \(4, 4\) places more workers than it holds \(6\)"):
        JobView("a", 1, 8, current_workers=6, placement=(4, 4))
    with pytest.raises(InvalidSnapshotError, match="a: placement entry must be an int >= 1, got 0"):
        JobView("a", 1, 8, current_workers=6, placement=(6, 0))
    with pytest.raises(InvalidSnapshotError, match="a: placement must be a sequence of worker counts"):
        JobView("a", 1, 8, current_workers=6, placement="42")  # type: ignore[arg-type]
    assert Decision("a", 0, "stop", nodes=1).nodes == 1  # a job stopping may still say where it would go


def test_mappings_are_copied_and_values_survive_pickling() -> None:
    throughput = {2: Throughput(10.0, 3)}
    metrics = JobMetrics(throughput=throughput, step_times={"worker-0": [1.0, 2.0]})  # type: ignore[dict-item]
    throughput[3] = Throughput(1.0)
    assert list(metrics.throughput) == [2]
    assert metrics.step_times == {"worker-0": (1.0, 2.0)}
    snap = snapshot(JobView("a", 1, 2, metrics=metrics))
    assert pickle.loads(pickle.dumps(snap)) == snap
    assert isinstance(hash(snap.jobs[0]), int)


def test_a_policy_without_state_refuses_someone_elses() -> None:
    policy = StaticPolicy()
    assert policy.state_dict() == {}
    policy.load_state_dict({})
    with pytest.raises(PolicyStateError, match="static: keeps no state, got keys \\['x'\\]"):
        policy.load_state_dict({"x": 1})
