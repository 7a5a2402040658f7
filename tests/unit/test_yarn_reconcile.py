"""The YARN client's reconciliation step as a unit: the service read in, what it sends to YARN out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from submarine_elastic.yarn import (
    ComponentNotFoundError,
    ComponentTarget,
    RMUnreachableError,
    ServiceStateError,
    ServiceStatus,
    YarnTimeoutError,
)
from submarine_elastic.yarn.reconcile import REFLEX_AFTER_POLLS, Reconciliation

from .test_yarn_client import service_json


class FakeRm:
    """Answers each read with the next of ``reads`` (an exception is raised), and records what is sent."""

    def __init__(self, *reads: dict[str, Any] | Exception) -> None:
        self.reads = list(reads)
        self.sent: list[tuple[Any, ...]] = []

    def status(self, name: str) -> ServiceStatus:
        read = self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]
        if isinstance(read, Exception):
            raise read
        return ServiceStatus.from_json(read)

    def flex(self, name: str, component: str, n: int) -> None:
        self.sent.append(("flex", name, component, n))

    def decommission(self, name: str, component: str, instances: Sequence[str]) -> None:
        self.sent.append(("decommission", name, component, tuple(instances)))


def run(rm: FakeRm, count: int, remove: tuple[str, ...] = ()) -> Reconciliation:
    return Reconciliation(rm, "job", "worker", ComponentTarget(count, remove), clock=lambda: 5.0)


READY2 = [("worker-0", "READY"), ("worker-1", "READY")]


def test_a_component_at_its_target_converges_at_the_first_read_and_nothing_is_sent():
    rm = FakeRm(service_json("STABLE", READY2))
    result = run(rm, 2).step()
    assert result is not None and result.converged and result.error is None
    assert (result.target, result.desired, result.ready, result.ready_instances) == (2, 2, 2, ("worker-0", "worker-1"))
    assert rm.sent == [] and not result.flexed


def test_a_flex_is_sent_at_once_and_again_only_after_reads_without_effect():
    rm = FakeRm(service_json("STABLE", READY2))
    reconciliation = run(rm, 3)
    for _ in range(REFLEX_AFTER_POLLS):
        assert reconciliation.step() is None
    assert rm.sent == [("flex", "job", "worker", 3)]
    assert reconciliation.step() is None
    assert rm.sent == [("flex", "job", "worker", 3)] * 2
    assert reconciliation.timed_out().flexed


def test_a_listed_instance_to_remove_is_decommissioned_once_before_any_flex():
    decided = service_json("STABLE", READY2, desired=1, decommissioned=["worker-1"])
    rm = FakeRm(service_json("STABLE", READY2), decided)
    reconciliation = run(rm, 1, remove=("worker-1",))
    assert reconciliation.step() is None
    assert rm.sent == [("decommission", "job", "worker", ("worker-1",))]
    for _ in range(REFLEX_AFTER_POLLS):
        reconciliation.step()
    assert rm.sent == [("decommission", "job", "worker", ("worker-1",))], "already decommissioned, count at target"
    assert reconciliation.timed_out().decommissioned == ("worker-1",)


def test_the_flex_a_decommission_leaves_to_do_goes_at_the_read_that_shows_it_taken():
    """Seen in CI: a scale-in 5 -> 2 of a ring of 4 while a fifth instance waited for a GPU. The decommission of
    two ring workers left the RM at 3 and freed their GPUs; waiting reads before the flex to 2 let the fifth
    start and join the ring, which then re-formed twice (to 3, back to 2)."""
    ring = [(f"worker-{i}", "READY") for i in range(4)]
    taken = service_json("STABLE", ring, desired=3, decommissioned=["worker-1", "worker-3"])
    done = service_json(
        "STABLE", [("worker-0", "READY"), ("worker-2", "READY")], decommissioned=["worker-1", "worker-3"]
    )
    rm = FakeRm(service_json("STABLE", ring, desired=5), service_json("STABLE", ring, desired=5), taken, done)
    reconciliation = run(rm, 2, remove=("worker-1", "worker-3"))
    assert reconciliation.step() is None
    assert reconciliation.step() is None  # not taken yet: not sent again so soon
    assert rm.sent == [("decommission", "job", "worker", ("worker-1", "worker-3"))]
    assert reconciliation.step() is None
    assert rm.sent[1:] == [("flex", "job", "worker", 2)]
    result = reconciliation.step()
    assert result is not None and result.converged and result.ready_instances == ("worker-0", "worker-2")
    assert len(rm.sent) == 2


def test_nothing_is_sent_to_a_service_that_is_not_running_yet():
    rm = FakeRm(service_json("ACCEPTED", []))
    assert run(rm, 2).step() is None
    assert rm.sent == []


def test_an_unreachable_rm_is_tried_through_and_named_when_time_runs_out():
    rm = FakeRm(RMUnreachableError("connection refused"))
    reconciliation = run(rm, 2)
    assert reconciliation.step() is None
    result = reconciliation.timed_out()
    assert not result.converged and isinstance(result.error, YarnTimeoutError)
    assert "nothing read" in str(result.error) and "connection refused" in str(result.error)


@pytest.mark.parametrize(
    ("read", "error"),
    [
        (service_json("STOPPED", READY2), ServiceStateError),
        ({**service_json("STABLE", READY2), "components": [{"name": "ps", "number_of_containers": 1}]},
         ComponentNotFoundError),
    ],
)  # fmt: skip
def test_a_stopped_service_or_a_missing_component_ends_it_with_the_error(read: dict[str, Any], error: type):
    result = run(FakeRm(read), 2).step()
    assert result is not None and not result.converged and isinstance(result.error, error)
