"""The one module that reaches into Horovod's elastic runner: everything else of the job driver goes through it.

Horovod's ``ElasticDriver`` has no interface for what the job's driver needs beyond starting a ring, so this
module uses a few of its private members, checked when it is imported (:func:`check_horovod`): a Horovod release
this module is not written for, or one that renamed a member it uses, fails the driver at start-up with the
versions named, not a job at run time. What it offers the driver (torch elastic's ``RendezvousHandler`` is the
model of such a seam):

1. :func:`new_ring` and :class:`BoundRendezvousServer`: Horovod's elastic driver and its rendezvous server
   listening on one address; :func:`slot_env`, a slot's environment (what ``horovodrun`` would give it).
2. :func:`quicken` and :func:`watch`: how soon the ring hears that its hosts changed, and that it is never left
   untold. Horovod (0.28) reads host discovery once a second, notifies the ring's rank 0 of a change with a
   timestamp in whole seconds, and rank 0 acts on a notification (interrupts the ring at its next commit) only
   when the timestamp is later than that of the last one it acted on; notifications that reach it while the
   ring re-forms are dropped with the rest of its queue (``State.on_reset``). So, left as it is, a warm joiner
   (or a leaver the driver withdrew) waited up to a second before the ring heard of it; a second change within
   the same second as the one the ring last re-formed for, or one noticed between forming the new ring and rank
   0's reset, was never acted on (the ring trained on without the joiner, or with the leaver). :func:`quicken`
   makes the driver look every :data:`DISCOVERY_POLL_S` and stamp notifications to the microsecond;
   :func:`watch` tells rank 0 again when the ring's hosts still lag discovery a second after it first saw
   them lag, and the ring is not re-forming.
3. :func:`wait_for_reform` (blocks while Horovod forms a ring) and :func:`ring_registered` (the ring's rank 0
   registered its notification service with this driver).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping

import horovod
from horovod.runner.common.util.hosts import SlotInfo
from horovod.runner.elastic import driver as horovod_driver
from horovod.runner.elastic.discovery import DiscoveredHosts, HostDiscovery, HostManager
from horovod.runner.elastic.driver import ElasticDriver
from horovod.runner.elastic.registration import WorkerStateRegistry
from horovod.runner.elastic.rendezvous import create_rendezvous_handler
from horovod.runner.elastic.worker import HostUpdateResult
from horovod.runner.gloo_run import create_run_env_vars, create_slot_env_vars
from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer, RendezvousServer
from horovod.runner.util.threads import in_thread

from submarine_elastic.protocol.api import ElasticError

__all__ = [
    "ElasticDriver",
    "HostDiscovery",
    "SlotInfo",
    "BoundRendezvousServer",
    "HorovodVersionError",
    "check_horovod",
    "new_ring",
    "pending_update",
    "quicken",
    "renotify",
    "ring_registered",
    "slot_env",
    "wait_for_reform",
    "watch",
]

log = logging.getLogger("submarine_elastic.driver")

#: The Horovod releases this module is written for (``major.minor``).
SUPPORTED_VERSIONS = ("0.28",)
#: How often Horovod's driver reads host discovery (Horovod's own constant: 1 s).
DISCOVERY_POLL_S = 0.1
#: How often :func:`watch` checks whether the ring's hosts lag discovery.
RENOTIFY_S = 1.0


class HorovodVersionError(ElasticError):
    """The installed Horovod is not one this adapter is written for, or lacks a member it uses."""


def _set_in_init(cls: type, name: str) -> bool:
    """Whether ``cls.__init__`` assigns ``self.<name>`` (an instance attribute no class attribute announces)."""
    init = getattr(cls, "__init__", None)
    code = getattr(init, "__code__", None)
    return code is not None and name in code.co_names


#: What this module uses of Horovod beyond its public API: (owner, member).
PRIVATE_MEMBERS: tuple[tuple[object, str], ...] = (
    (horovod_driver, "DISCOVER_HOSTS_FREQUENCY_SECS"),
    (horovod_driver, "_epoch_time_s"),
    (ElasticDriver, "_worker_registry"),
    (ElasticDriver, "_host_manager"),
    (ElasticDriver, "_min_num_proc"),
    (ElasticDriver, "_wait_hosts_cond"),
    (ElasticDriver, "_shutdown"),
    (ElasticDriver, "_get_host_assignments"),
    (ElasticDriver, "_notify_workers_host_changes"),
    (WorkerStateRegistry, "_action_event"),
    (WorkerStateRegistry, "get_recorded_slots"),
    (WorkerStateRegistry, "last_rendezvous"),
    (HostManager, "current_hosts"),
    (DiscoveredHosts, "count_available_slots"),
    (RendezvousServer, "_httpd"),
    (RendezvousServer, "_listen_thread"),
    (RendezvousServer, "_verbose"),
)


def missing_members(members: Iterable[tuple[object, str]]) -> list[str]:
    """The members of ``members`` their owner does not have, as ``Owner.name``: a module's or class's attribute,
    or an instance attribute the class's ``__init__`` assigns."""
    missing = []
    for owner, name in members:
        if hasattr(owner, name) or (isinstance(owner, type) and _set_in_init(owner, name)):
            continue
        missing.append(f"{getattr(owner, '__name__', owner)}.{name}")
    return missing


def check_horovod(version: str, members: Iterable[tuple[object, str]] = PRIVATE_MEMBERS) -> None:
    """Checks that Horovod ``version`` is one of :data:`SUPPORTED_VERSIONS` and has every member this module uses.

    Raises:
        HorovodVersionError: it is not, naming the installed and the supported versions (and the members missing).
    """
    supported = ", ".join(f"{v}.x" for v in SUPPORTED_VERSIONS)
    if ".".join(version.split(".")[:2]) not in SUPPORTED_VERSIONS:
        raise HorovodVersionError(
            f"Horovod {version} is installed; the job driver is written for Horovod {supported} (it uses members of "
            f"Horovod's elastic driver that other releases may not have)"
        )
    missing = missing_members(members)
    if missing:
        raise HorovodVersionError(
            f"Horovod {version} lacks what the job driver uses of it ({', '.join(missing)}); it is written for "
            f"Horovod {supported}"
        )


check_horovod(horovod.__version__)


class BoundRendezvousServer(RendezvousServer):
    """Horovod's rendezvous server listening on one address: Horovod's own binds every interface, where any
    host that reaches the driver's could read and write the ring's key-value store.

    ``on_ring`` (when set) is told each ring's hosts before its workers may rendezvous in it: what is recorded
    there is never older than a ring that trained."""

    on_ring: Callable[[tuple[str, ...]], None] | None = None

    def init(self, host_alloc_plan: list[SlotInfo]) -> None:
        """Opens the rendezvous of the ring ``host_alloc_plan`` describes (Horovod's driver calls it at each
        re-form), after telling :attr:`on_ring` its hosts."""
        if self.on_ring is not None:
            self.on_ring(tuple(sorted({slot.hostname for slot in host_alloc_plan})))
        super().init(host_alloc_plan)

    def start(self, handler_cls: type = RendezvousHandler, host: str = "127.0.0.1") -> int:
        """Listens on ``host`` (a free port) and serves in a thread; returns the port.

        Raises:
            OSError: ``host`` is not an address of this machine.
        """
        self._httpd = RendezvousHTTPServer((host, 0), handler_cls, self._verbose)
        self._listen_thread = in_thread(target=self._httpd.serve_forever)
        return int(self._httpd.server_address[1])


def new_ring(
    rendezvous: BoundRendezvousServer,
    discovery: HostDiscovery,
    min_workers: int,
    max_workers: int,
    timeout: int,
    host: str,
) -> tuple[ElasticDriver, int]:
    """Horovod's elastic driver for a job of ``[min_workers, max_workers]``, its discovery quickened
    (:func:`quicken`) and watched (:func:`watch`), and its rendezvous server started on ``host``; returns the
    driver and the rendezvous port.

    Raises:
        OSError: ``host`` is not an address of this machine.
    """
    quicken()
    ring = ElasticDriver(
        rendezvous,
        discovery,
        min_workers,
        max_workers,
        timeout=timeout,
        reset_limit=None,
        cooldown_range=None,
        verbose=0,
    )
    watch(ring)
    port = rendezvous.start(create_rendezvous_handler(ring), host=host)
    return ring, port


def slot_env(server_ip: str, iface: str, port: int, slot: SlotInfo) -> Mapping[str, str]:
    """The Horovod environment of ``slot`` in a ring whose rendezvous is ``server_ip:port`` (Gloo on ``iface``)."""
    run = create_run_env_vars(server_ip, [iface], port, elastic=True)
    return {**{k: str(v) for k, v in run.items()}, **create_slot_env_vars(slot)}


def quicken(poll_s: float = DISCOVERY_POLL_S) -> None:
    """Makes every Horovod elastic driver of this process read discovery every ``poll_s`` seconds and stamp its
    notifications with ``time.time()`` (to the microsecond, not whole seconds)."""
    horovod_driver.DISCOVER_HOSTS_FREQUENCY_SECS = poll_s
    horovod_driver._epoch_time_s = time.time


def pending_update(driver: ElasticDriver) -> HostUpdateResult:
    """How the hosts discovery offers differ from the ring's (``no_update``: they do not, or too few are
    offered to form a ring, or the ring is re-forming: some of its workers already asked for their new slot)."""
    if driver._worker_registry.get_recorded_slots():
        return HostUpdateResult.no_update
    hosts = driver._host_manager.current_hosts
    if hosts.count_available_slots() < driver._min_num_proc:
        return HostUpdateResult.no_update
    wanted, _ = driver._get_host_assignments(hosts)
    ring = driver.host_assignments
    if wanted == ring:
        return HostUpdateResult.no_update
    update = HostUpdateResult.no_update
    if set(ring) - set(wanted):
        update |= HostUpdateResult.removed
    if set(wanted) - set(ring) or any(len(wanted[h]) > len(ring[h]) for h in set(wanted) & set(ring)):
        update |= HostUpdateResult.added
    return update or HostUpdateResult.mixed


def renotify(driver: ElasticDriver) -> HostUpdateResult:
    """Tells the ring's rank 0 of the change :func:`pending_update` finds (if any); returns it. Holds the
    driver's hosts lock meanwhile, as Horovod's own discovery loop does."""
    with driver._wait_hosts_cond:
        update = pending_update(driver)
        if update is not HostUpdateResult.no_update:
            log.info("the ring's hosts lag discovery (%s): telling its rank 0 again", update.name)
            driver._notify_workers_host_changes(driver._host_manager.current_hosts, update)
        return update


def watch(driver: ElasticDriver, every: float = RENOTIFY_S) -> threading.Thread:
    """Starts a daemon thread that, every ``every`` seconds until the driver finishes, looks for a change
    :func:`pending_update` finds and calls :func:`renotify` when it is still there a period later (Horovod's own
    notice normally has the ring re-forming by then; one it dropped does not)."""

    def loop() -> None:
        lagging = False
        while not driver._shutdown.wait(every):
            try:
                if lagging:
                    lagging = renotify(driver) is not HostUpdateResult.no_update
                else:
                    with driver._wait_hosts_cond:
                        lagging = pending_update(driver) is not HostUpdateResult.no_update
            except (RuntimeError, ValueError) as exc:  # the hosts changed under the check: it runs again
                log.warning("could not check the ring's hosts against discovery: %s", exc)

    thread = threading.Thread(target=loop, daemon=True, name="host-updates")
    thread.start()
    return thread


def wait_for_reform(driver: ElasticDriver, timeout: float | None = None) -> bool:
    """Blocks while ``driver`` forms a new ring (its workers all asked for their slots; it may wait there for
    enough of them), up to ``timeout`` s (None: until it has); returns whether it is not forming one."""
    return bool(driver._worker_registry._action_event.wait(timeout))


def ring_registered(driver: ElasticDriver) -> bool:
    """Whether the ring's rank 0 registered its notification service with ``driver`` (so later host changes
    reach the ring)."""
    coordinator = driver.get_coordinator_info()
    return coordinator is not None and driver.get_worker_client(coordinator) is not None


#: The longest :func:`leave_for` waits for Horovod's discovery thread (it reads the hosts once a second) to see a
#: withdrawn host gone.
DISCOVERY_LAG_S = 10.0


def _wait_until_undiscovered(driver: ElasticDriver, host: str, timeout: float = DISCOVERY_LAG_S) -> None:
    """Waits until Horovod's host manager no longer lists ``host``. Horovod forms the next ring from the hosts its
    discovery thread last read, not from discovery now: a slot recorded ready before that thread saw its host
    withdrawn is given a place in the next ring that no process fills, and the ring waits in Gloo's rendezvous
    until it aborts (every rank killed by SIGABRT, the job failed). Seen in a flex through YARN whose worker's
    container was stopped 40 ms after it was withdrawn. The thread notifies the driver's hosts condition when
    the hosts change; the wait wakes at least once a second to notice the driver finished."""
    deadline = time.monotonic() + timeout
    with driver._wait_hosts_cond:
        while host in driver._host_manager.current_hosts.available_hosts and not driver.finished():
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning(
                    "%s is still among Horovod's hosts %.0f s after it was withdrawn; it leaves anyway", host, timeout
                )
                return
            driver._wait_hosts_cond.wait(min(left, 1.0))


def leave_for(driver: ElasticDriver, host: str, local_rank: int, *, every: float = 0.1) -> None:
    """Stands in, at the ring's re-form, for the process of ``host``'s slot ``local_rank``: one withdrawn from
    discovery that ended before it asked for its slot in the next ring, as a leaving process does (its slot
    then comes back empty and it exits, :func:`tf_hooks.elastic.autojoin.join_or_leave`). Horovod forms that
    ring once every slot of the last one has recorded a state; an exit recorded instead is a failure (the host
    blacklisted, a clean one the job's success). The slot is recorded ready, which blocks until the others
    have come to the re-form and the new ring is assigned; first it waits until Horovod's discovery has seen
    the host gone (:func:`_wait_until_undiscovered`). One recorded already (the process asked, then was stopped
    while it waited) is waited for until the new ring is. Returns at once when the driver finished."""
    registry = driver._worker_registry
    if (host, local_rank) not in set(registry.get_recorded_slots()):
        _wait_until_undiscovered(driver, host)
        driver.record_ready(host, local_rank)
        return
    formed_in = registry.last_rendezvous()
    while registry.last_rendezvous() == formed_in and not driver.finished():
        time.sleep(every)
