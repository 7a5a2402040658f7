"""The driver's YARN side as a unit: the target it records, the pause between reconciliations (doubled after each
miss, capped), YARN's READY workers as last read, why YARN lags, and when it stops reconciling."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from submarine_elastic.elastic import yarnsync
from submarine_elastic.elastic.yarnsync import YarnSync
from submarine_elastic.yarn import ReconcileResult, ServiceNotFoundError, YarnError, YarnTimeoutError


class Backend:
    """The two calls YarnSync makes of a backend, answered from a script of results."""

    def __init__(self, results: Sequence[ReconcileResult]) -> None:
        self.results = list(results)
        self.targets: list[tuple[int, tuple[str, ...]]] = []

    def set_target(self, name: str, component: str, n: int, *, remove: Sequence[str] = ()) -> None:
        self.targets.append((n, tuple(remove)))

    def reconcile(
        self, name: str, component: str, n: int | None = None, *, timeout: float, give_way: object = None
    ) -> ReconcileResult:
        assert timeout == yarnsync.RECONCILE_SLICE_S
        self.give_way = give_way
        return self.results.pop(0)


def result(ready: int, target: int = 3, *, desired: int | None = 3, error: YarnError | None = None) -> ReconcileResult:
    converged = error is None and ready == target == desired
    return ReconcileResult("job", "worker", target, desired, ready, (), "STABLE", converged, error=error)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_pause_doubles_after_each_miss_up_to_its_cap_and_is_none_once_yarn_has_the_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(yarnsync, "RECONCILE_PAUSE_MAX_S", 5.0)
    timeout = YarnTimeoutError("still 1 of 3")
    backend = Backend([result(1, error=timeout)] * 4 + [result(3)])
    sync = YarnSync(backend, "job")  # type: ignore[arg-type]
    assert sync.pause() is None and not sync.reconciling
    sync.set_target(3)
    pauses = [sync.pause()]
    for _ in range(4):
        sync.reconcile()
        pauses.append(sync.pause())
    assert pauses == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert sync.reconcile().converged and sync.pause() is None and not sync.reconciling
    sync.set_target(2)
    assert sync.pause() == 1.0  # a new target starts over


def test_instances_removed_by_name_accumulate_until_yarn_confirms_them_gone() -> None:
    backend = Backend([result(2, target=2, desired=2)])
    sync = YarnSync(backend, "job", removing=("worker-4",))  # type: ignore[arg-type]
    sync.set_target(3, ("worker-1",))
    sync.set_target(2, ("worker-2", "worker-1"))
    assert backend.targets == [(3, ("worker-4", "worker-1")), (2, ("worker-4", "worker-1", "worker-2"))]
    assert sync.removing == ("worker-4", "worker-1", "worker-2")
    sync.reconcile()
    assert sync.removing == ()


def test_ready_is_the_newer_of_the_last_reconciliation_and_the_container_watch() -> None:
    clock = Clock()
    backend = Backend([result(2, error=YarnTimeoutError("2 of 3")), result(3)])
    sync = YarnSync(backend, "job", clock=clock)  # type: ignore[arg-type]
    assert sync.ready() is None
    sync.watched(1)
    assert sync.ready() == 1
    sync.set_target(3)
    clock.now = 101.0
    sync.reconcile()
    assert sync.ready() == 2
    clock.now = 102.0
    sync.watched(5)
    assert sync.ready() == 2  # while it reconciles, the reconciliation's own count
    sync.reconcile()
    clock.now = 103.0
    sync.watched(4)
    assert sync.ready() == 4  # YARN has the target: the watch's newer read


def test_lag_names_a_resize_yarn_lacks_but_not_containers_it_is_starting() -> None:
    backend = Backend(
        [result(1, desired=3, error=YarnTimeoutError("1 of 3")), result(1, desired=2, error=YarnError("RM down"))]
    )
    sync = YarnSync(backend, "job")  # type: ignore[arg-type]
    sync.set_target(3)
    sync.reconcile()
    assert sync.lag() == ""  # YARN has the target and starts containers
    sync.reconcile()
    assert sync.lag() == "YARN does not have the resize to 3 workers yet: RM down"
    sync.stop()
    assert sync.lag() == "" and sync.pause() is None


def test_a_service_that_is_gone_stops_the_reconciliation() -> None:
    backend = Backend([result(0, error=ServiceNotFoundError("no service job"))])
    sync = YarnSync(backend, "job")  # type: ignore[arg-type]
    sync.set_target(3)
    assert not sync.reconcile().converged
    assert not sync.reconciling


def test_a_slice_hands_the_backend_what_says_a_new_resize_waits() -> None:
    """A scale-in asked while YARN still lacked the scale-out before it waited for the rest of a 10 s slice (9.1 s
    from request to ring, against 3.0 s once YARN had it): the backend is asked after each read whether to give
    way."""
    backend = Backend([result(2, error=YarnTimeoutError("still 2 of 3"))])
    sync = YarnSync(backend, "job")  # type: ignore[arg-type]
    sync.set_target(3)
    waiting: list[int] = []
    sync.reconcile(give_way=lambda: bool(waiting))
    assert callable(backend.give_way) and not backend.give_way()
    waiting.append(1)
    assert backend.give_way()
