"""How soon Horovod's elastic driver tells the ring that its hosts changed, and that it never leaves it untold.

Horovod's ``ElasticDriver`` (0.28.1) reads host discovery once a second, notifies the ring's rank 0 of a
change with a timestamp in whole seconds, and rank 0 acts on a notification (interrupts the ring at its next
commit) only when the timestamp is later than that of the last one it acted on; notifications that reach it
while the ring re-forms are dropped with the rest of its queue (``State.on_reset``). So, left as it is:

- a warm joiner, or a leaver the job's driver withdrew, waited up to a second before the ring heard of it;
- a second change within the same second as the one the ring last re-formed for was never acted on;
- a change the driver noticed between forming the new ring and rank 0's reset was never acted on.

In the last two cases the ring trained on without the joiner, or with the leaver, until some other change.
:func:`quicken` makes the driver look every :data:`DISCOVERY_POLL_S` (the job driver's discovery answers
from memory, see :class:`~submarine_elastic.elastic.ringhost.AgentRegistry`) and stamp notifications to the
microsecond; :func:`watch` tells rank 0 again when the ring's hosts still lag discovery a second after it
first saw them lag, and the ring is not re-forming.
"""

from __future__ import annotations

import logging
import threading
import time

from horovod.runner.elastic import driver as horovod_driver
from horovod.runner.elastic.driver import ElasticDriver
from horovod.runner.elastic.worker import HostUpdateResult

log = logging.getLogger("submarine_elastic.driver")

#: How often Horovod's driver reads host discovery (Horovod's own constant: 1 s).
DISCOVERY_POLL_S = 0.1
#: How often :func:`watch` checks whether the ring's hosts lag discovery.
RENOTIFY_S = 1.0


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
