"""The reconcile step's answer to a worker count someone else gave YARN (``yarn app -flex``, ``-decommission``,
the Services REST API): the operator's target within the job's limits, else refused and YARN put back."""

from __future__ import annotations

from submarine_elastic.elastic.reconcile import THROUGH_YARN, Member, TargetBook, yarn_change
from submarine_elastic.protocol.api import Limits

LIMITS = Limits(num=2, min=1, max=3)
LIVE = [Member("worker-0", 0, rank=1), Member("worker-1", 1, rank=0)]


def test_the_count_the_driver_gave_is_no_change():
    assert yarn_change(2, 2, LIMITS, live=LIVE) is None
    assert yarn_change(None, 2, LIMITS, live=LIVE) is None


def test_a_flex_up_within_the_limits_is_the_operators_target():
    change = yarn_change(3, 2, LIMITS, live=LIVE)
    assert change is not None and change.target is not None and not change.refused
    assert change.target.workers == 3
    assert list(change.target.remove) == []
    assert change.target.reason == f"flex {THROUGH_YARN}: 2 -> 3 workers"


def test_a_flex_down_names_the_instances_yarn_stops_not_the_highest_rank():
    # YARN stops its highest-numbered instance (worker-1, here rank 0): that one leaves the ring, no other.
    change = yarn_change(1, 2, LIMITS, live=LIVE)
    assert change is not None and change.target is not None
    assert change.target.workers == 1
    assert list(change.target.remove) == ["worker-1"]


def test_a_decommission_names_the_instance_the_operator_named():
    change = yarn_change(1, 2, LIMITS, decommissioned=["worker-0"], live=LIVE)
    assert change is not None and change.target is not None
    assert list(change.target.remove) == ["worker-0"]
    assert change.target.reason == f"decommission of worker-0 {THROUGH_YARN}: 2 -> 1 workers"


def test_instances_the_driver_removes_or_long_gone_are_not_the_operators():
    change = yarn_change(1, 2, LIMITS, decommissioned=["worker-0", "worker-7"], removing=["worker-0"], live=LIVE)
    assert change is not None and change.target is not None
    assert list(change.target.remove) == ["worker-1"]  # YARN's own choice: no live decommission of the operator's


def test_a_count_above_the_limits_is_refused_and_put_back():
    change = yarn_change(5, 2, LIMITS, live=LIVE)
    assert change is not None and change.target is None
    assert change.put_back == 2
    assert "5 is above the job's --max_workers 3; refused, YARN put back to 2" in change.refused


def test_a_count_below_the_limits_is_refused_and_put_back():
    change = yarn_change(0, 2, LIMITS, live=LIVE)
    assert change is not None and change.target is None
    assert "0 is below the job's --min_workers 1; refused, YARN put back to 2" in change.refused


def test_a_refusal_is_kept_in_the_timeline_and_the_count_queued_again_under_its_version():
    book = TargetBook(2, clock=lambda: 100.0)
    book.noted(5, 2, "refused")
    book.put_back("refused")
    assert book.workers == 2 and book.version == 0
    (event,) = book.timeline
    assert (event.from_workers, event.to_workers, event.reason) == (5, 2, "refused")
    queued = book.next(timeout=0)
    assert queued is not None and queued.workers == 2 and queued.version == 0


def test_a_target_may_remove_several_known_instances():
    from submarine_elastic.elastic.reconcile import target_problem
    from submarine_elastic.protocol.proto import elastic_pb2 as pb

    target = pb.Target(workers=1, remove=["worker-1", "worker-2"])
    known = (name for name in ("worker-0", "worker-1", "worker-2"))  # read once, as the driver passes them
    assert target_problem(target, LIMITS, None, known) is None
