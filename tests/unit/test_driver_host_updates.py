"""The ring hears of every host change: Horovod's own elastic driver, rank 0's notification service and its
elastic state (real, in this process), with :mod:`submarine_elastic.elastic.horovod_adapter` applied; only the
worker processes and the rendezvous server are left out (the test plays rank 0)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from horovod.common.elastic import ObjectState
from horovod.common.exceptions import HostsUpdatedInterrupt
from horovod.runner.common.util import secret
from horovod.runner.elastic import driver as horovod_driver
from horovod.runner.elastic.discovery import HostDiscovery
from horovod.runner.elastic.driver import ElasticDriver
from horovod.runner.elastic.worker import WorkerNotificationManager, WorkerNotificationService

from submarine_elastic.elastic import horovod_adapter

RENOTIFY_S = 0.3


class Discovery(HostDiscovery):
    """The hosts (each one slot) the job's driver offers Horovod: what the agent registry does."""

    def __init__(self) -> None:
        super().__init__()
        self.hosts = ["a"]

    def find_available_hosts_and_slots(self) -> dict[str, int]:
        return dict.fromkeys(self.hosts, 1)


class Rendezvous:
    """What the elastic driver asks of its rendezvous server (the test's rank 0 asks the driver directly)."""

    def init(self, host_assignments: object) -> None:
        pass

    def stop(self) -> None:
        pass


@dataclass
class Ring:
    driver: ElasticDriver
    discovery: Discovery
    state: ObjectState  # rank 0's elastic state, as hvd.elastic.run registers it

    def interrupted(self) -> bool:
        """Rank 0's commit: True when it interrupts the ring to re-form."""
        try:
            self.state.check_host_updates()
        except HostsUpdatedInterrupt:
            return True
        return False

    def interrupted_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.interrupted():
                return True
            time.sleep(0.02)
        return False

    def reform(self) -> None:
        """Every rank of the ring asks for its new slot (Horovod's reset): the driver forms the next ring."""
        hosts = list(self.driver.host_assignments)
        ranks = [threading.Thread(target=self.driver.record_ready, args=(host, 0)) for host in hosts]
        for rank in ranks:
            rank.start()
        for rank in ranks:
            rank.join(10)

    def notifications_waiting(self) -> int:
        return self.state._host_messages.qsize()


@pytest.fixture()
def ring(monkeypatch: pytest.MonkeyPatch) -> Iterator[Ring]:
    for name in ("DISCOVER_HOSTS_FREQUENCY_SECS", "_epoch_time_s"):  # Horovod's as they were, after the test
        monkeypatch.setattr(horovod_driver, name, getattr(horovod_driver, name))
    horovod_adapter.quicken()
    discovery = Discovery()
    driver = ElasticDriver(Rendezvous(), discovery, min_num_proc=1, max_num_proc=4, timeout=10)
    workers_end = threading.Event()

    def start_worker(slot_info: object, events: object) -> tuple[int, float]:
        workers_end.wait()
        return 0, time.time()

    driver.start(1, start_worker)
    manager = WorkerNotificationManager()
    key = secret.make_secret_key()
    service = WorkerNotificationService(key, None, manager)
    driver.register_worker_server("a", 0, service.addresses(), key)
    state = ObjectState(bcast_object=lambda obj: obj, get_rank=lambda: 0)
    manager.register_listener(state)
    horovod_adapter.watch(driver, every=RENOTIFY_S)
    yield Ring(driver, discovery, state)
    workers_end.set()
    driver.stop()
    service.shutdown()


def test_a_joiner_is_heard_within_a_tenth_of_a_second_not_a_second(ring: Ring) -> None:
    ring.discovery.hosts.append("b")
    started = time.monotonic()
    assert ring.interrupted_within(2.0)
    assert time.monotonic() - started < 0.5  # Horovod's own poll: up to 1 s


def test_a_second_joiner_within_the_same_second_is_not_dropped(ring: Ring) -> None:
    """Horovod stamps notifications in whole seconds and rank 0 ignores one no later than the last it acted
    on: a second joiner warm within that second would have waited for some other change."""
    while time.time() % 1.0 > 0.1:  # start at the top of a second, so both changes fall within it
        time.sleep(0.01)
    ring.discovery.hosts.append("b")
    assert ring.interrupted_within(0.4)
    ring.reform()
    ring.state.on_reset()
    ring.discovery.hosts.append("c")
    assert ring.interrupted_within(RENOTIFY_S / 2)  # Horovod's own notification, not the watch's
    assert sorted(ring.driver.host_assignments) == ["a", "b"]


def test_a_change_noticed_while_rank_0_resets_is_told_again_and_nothing_else_is(ring: Ring) -> None:
    ring.discovery.hosts.append("b")
    assert ring.interrupted_within(2.0)
    ring.reform()
    ring.discovery.hosts.append("c")  # noticed after the new ring was formed, before rank 0's reset ...
    deadline = time.monotonic() + 2.0
    while not ring.notifications_waiting() and time.monotonic() < deadline:
        time.sleep(0.01)
    ring.state.on_reset()  # ... which drops it with rank 0's queue
    assert not ring.interrupted()
    assert ring.interrupted_within(3 * RENOTIFY_S)  # told again
    ring.reform()
    ring.state.on_reset()
    assert sorted(ring.driver.host_assignments) == ["a", "b", "c"]
    assert not ring.interrupted_within(3 * RENOTIFY_S)  # the ring has every host: nothing more to tell
