"""The in-memory controller: the Controller contract, injected decisions, and thread safety."""

from __future__ import annotations

import math
import threading
from typing import Any

import pytest

from submarine_elastic.controller.api import (
    Controller,
    DecisionRecord,
    InvalidJobError,
    JobRecord,
    MetricsReport,
    UnknownJobError,
)
from submarine_elastic.controller.memory import InMemoryController


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@pytest.fixture()
def controller() -> InMemoryController:
    return InMemoryController(clock=Clock())


def test_it_is_a_controller(controller: InMemoryController) -> None:
    assert isinstance(controller, Controller)
    assert controller.jobs() == []


def test_a_submitted_job_is_recorded_as_given(controller: InMemoryController) -> None:
    record = controller.job_submitted("job-a", 1, 4, 3, source="bridge")
    assert record == JobRecord("job-a", 1, 4, 3, 3, True, "running", 101.0, "bridge", requested=3)
    assert controller.jobs() == [record]
    assert controller.decision("job-a") is None
    assert controller.timeline("job-a") == []
    assert controller.metrics("job-a") == []


@pytest.mark.parametrize(
    ("args", "kwargs", "named"),
    [
        (("Job-A", 1, 1, 1), {}, "'Job-A'"),
        (("", 1, 1, 1), {}, "''"),
        (("a" * 64, 1, 1, 1), {}, "1-63 characters"),
        ((None, 1, 1, 1), {}, "None"),
        (("job-a", 0, 1, 1), {}, "min_workers must be an integer in [1, 100000], got 0"),
        (("job-a", 1, 1.5, 1), {}, "max_workers must be an integer in [1, 100000], got 1.5"),
        (("job-a", 1, 2, True), {}, "workers must be an integer in [1, 100000], got True"),
        (("job-a", 2, 4, 5), {}, "workers 5 must lie within min 2 and max 4"),
        (("job-a", 3, 2, 2), {}, "min 3 and max 2"),
        (("job-a", 1, 2, 2), {"elastic": False}, "fixed-size job needs min == max, got 1 and 2"),
        (("job-a", 1, 2, 2), {"elastic": "yes"}, "elastic must be a bool"),
        (("job-a", 1, 2, 2), {"source": "web"}, "source must be one of cli, bridge, yarn, got 'web'"),
    ],
)
def test_bad_jobs_are_refused_naming_the_value(
    controller: InMemoryController, args: tuple[Any, ...], kwargs: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidJobError) as raised:
        controller.job_submitted(*args, **kwargs)
    assert named in str(raised.value)
    assert controller.jobs() == []


def test_a_resubmitted_job_keeps_its_place_and_history(controller: InMemoryController) -> None:
    controller.job_submitted("job-a", 1, 4, 4)
    controller.job_submitted("job-b", 1, 1, 1, elastic=False)
    controller.decide("job-a", 2, "shrink")
    again = controller.job_submitted("job-a", 2, 6, 3)
    assert [j.job_id for j in controller.jobs()] == ["job-a", "job-b"]
    assert (again.min_workers, again.max_workers, again.workers, again.target) == (2, 6, 3, 3)
    assert [d.reason for d in controller.timeline("job-a")] == ["shrink"]


def test_a_finished_job_stays_listed(controller: InMemoryController) -> None:
    controller.job_submitted("job-a", 1, 2, 2)
    controller.job_finished("job-a")
    controller.job_finished("job-a")
    assert [(j.job_id, j.state) for j in controller.jobs()] == [("job-a", "finished")]


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.job_finished("ghost"),
        lambda c: c.report_metrics("ghost", 1, 1, 1.0),
        lambda c: c.decision("ghost"),
        lambda c: c.timeline("ghost"),
        lambda c: c.metrics("ghost"),
        lambda c: c.decide("ghost", 1, "why"),
        lambda c: c.decision(None),
    ],
)
def test_unknown_jobs(controller: InMemoryController, call: Any) -> None:
    with pytest.raises(UnknownJobError, match="no job named"):
        call(controller)


def test_metrics_are_recorded_in_order(controller: InMemoryController) -> None:
    controller.job_submitted("job-a", 1, 4, 2)
    controller.report_metrics("job-a", 2, 0, 100.0)
    controller.report_metrics("job-a", 2, 10, 120, 0.5)
    assert controller.metrics("job-a") == [
        MetricsReport("job-a", 2, 0, 100.0, None),
        MetricsReport("job-a", 2, 10, 120.0, 0.5),
    ]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ((0, 1, 1.0), "world_size must be an integer in [1, 100000], got 0"),
        ((100_001, 1, 1.0), "world_size must be an integer in [1, 100000], got 100001"),
        ((1, -1, 1.0), "step must be an integer in [0, 9223372036854775807], got -1"),
        ((1, 1.5, 1.0), "step must be an integer in [0, 9223372036854775807], got 1.5"),
        ((1, 1, -0.1), "samples_per_second must be finite and in [0, 1e+15], got -0.1"),
        ((1, 1, math.inf), "samples_per_second must be finite and in [0, 1e+15], got inf"),
        ((1, 1, 1.0, math.nan), "loss must be finite and in [-1e+15, 1e+15], got nan"),
        ((1, 1, "fast"), "samples_per_second must be finite and in [0, 1e+15], got 'fast'"),
    ],
)
def test_bad_metrics_are_refused_naming_the_value(
    controller: InMemoryController, args: tuple[Any, ...], named: str
) -> None:
    controller.job_submitted("job-a", 1, 4, 2)
    with pytest.raises(InvalidJobError) as raised:
        controller.report_metrics("job-a", *args)
    assert named in str(raised.value)
    assert controller.metrics("job-a") == []


def test_injected_decisions_move_the_target_and_when_applied_the_workers(controller: InMemoryController) -> None:
    controller.job_submitted("job-a", 1, 4, 4)
    first = controller.decide("job-a", 2, "job-b arrived")
    assert first == DecisionRecord("job-a", 102.0, 4, 2, "job-b arrived")
    assert (controller.jobs()[0].workers, controller.jobs()[0].target) == (4, 2)
    second = controller.decide("job-a", 3, "job-b left", applied=True)
    assert (second.from_workers, second.to_workers, second.applied) == (2, 3, True)
    assert (controller.jobs()[0].workers, controller.jobs()[0].target) == (3, 3)
    failed = controller.decide("job-a", 4, "grow", error="flex timed out")
    assert failed.error == "flex timed out"
    assert controller.decision("job-a") == failed
    assert controller.timeline("job-a") == [first, second, failed]


@pytest.mark.parametrize(
    ("to_workers", "reason", "named"),
    [(5, "grow", "to_workers 5 must lie within min 1 and max 4"), (0, "x", "to_workers"), (2, " ", "needs a reason")],
)
def test_bad_decisions_are_refused(controller: InMemoryController, to_workers: int, reason: str, named: str) -> None:
    controller.job_submitted("job-a", 1, 4, 4)
    with pytest.raises(InvalidJobError, match=named):
        controller.decide("job-a", to_workers, reason)
    assert controller.timeline("job-a") == []


def test_concurrent_callers_lose_nothing() -> None:
    controller = InMemoryController()
    threads, reports = 8, 300
    for t in range(threads):
        controller.job_submitted(f"job-{t}", 1, 8, 1)
    start = threading.Barrier(threads)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            start.wait(10)
            for i in range(reports):
                controller.report_metrics(f"job-{(t + i) % threads}", 1, i, float(t))
                if i % 50 == 0:
                    controller.decide(f"job-{t}", 1 + i // 50, f"round {i}")
                    controller.jobs()
        except BaseException as exc:  # reported below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(30)
    assert not errors
    assert not any(w.is_alive() for w in workers)
    assert sum(len(controller.metrics(f"job-{t}")) for t in range(threads)) == threads * reports
    for t in range(threads):
        assert [d.to_workers for d in controller.timeline(f"job-{t}")] == [1, 2, 3, 4, 5, 6]
        assert controller.jobs()[t].target == 6
