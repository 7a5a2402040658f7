"""The job driver's YARN side: the worker component's target it set, and what YARN had when it last looked.

1. :meth:`YarnSync.set_target` records a resize's count (and the instances it removes by name, with those of an
   earlier scale-in YARN has not confirmed gone) as YARN's target; from then on the resizer reconciles
   (:meth:`YarnSync.reconcile`, a slice of at most :data:`RECONCILE_SLICE_S` at a time) until YARN has it, pausing
   between slices (:meth:`YarnSync.pause`: doubled after each slice that did not get there).
2. :meth:`YarnSync.watched` keeps the READY count the driver's container watch read.
3. :meth:`YarnSync.ready` and :meth:`YarnSync.lag` answer ``Status``: YARN's READY workers as last read, and why
   YARN does not have the target yet.
4. :attr:`YarnSync.count` is the worker count the driver last gave YARN (or took from it, :meth:`YarnSync.adopt`:
   an operator's change through YARN's own tools), and :meth:`YarnSync.worker` reads YARN's worker component
   with the :attr:`YarnSync.generation` it was read at: a count YARN has that differs from ``count``, read while
   the driver neither reconciles nor set a new count since, came from someone else.

Every method is safe under concurrent calls (the resizer, the container watch and the gRPC threads).
:func:`replaced_by_yarn` judges what YARN lists of the driver component.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence

from tenacity import RetryCallState, Retrying, wait_exponential

from submarine_elastic.elastic.reconcile import ENDED_CONTAINER_STATES
from submarine_elastic.protocol.api import WORKER_COMPONENT
from submarine_elastic.yarn import (
    ComponentNotFoundError,
    ComponentStatus,
    ContainerStatus,
    ReconcileResult,
    ServiceBackend,
    ServiceNotFoundError,
    YarnError,
    YarnTimeoutError,
)
from submarine_elastic.yarn.api import TERMINAL_SERVICE_STATES

log = logging.getLogger("submarine_elastic.driver")

#: The longest one reconciliation with YARN holds the resizer before it looks for a new resize; it gives way at
#: once when one comes (a scale-in asked while YARN lacked the scale-out before it waited for the rest of the
#: slice: 9.1 s from request to ring, against 3.0 s once YARN had it).
RECONCILE_SLICE_S = 10.0
#: Pause between reconciliations while YARN lacks the target: doubled after each one that did not get
#: there, up to the maximum, so a job waiting for capacity does not poll the ResourceManager all the time.
RECONCILE_PAUSE_S = 1.0
RECONCILE_PAUSE_MAX_S = 60.0


class YarnSync:
    """The worker component's target and YARN's last answers about it, for one job.

    Attributes:
        result: the last reconciliation (None before the first).
    """

    def __init__(
        self,
        yarn: ServiceBackend,
        job: str,
        *,
        removing: Iterable[str] = (),
        count: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._yarn = yarn
        self._job = job
        self._clock = clock
        self._lock = threading.Lock()
        self.result: ReconcileResult | None = None
        self._synced_at = 0.0
        #: READY workers of YARN's worker component at the container watch's last read, and when
        self._watched: tuple[int, float] | None = None
        self._reconciling = False
        self._misses = 0
        #: instances a scale-in removes by name that YARN has not confirmed gone yet
        self._removing = tuple(removing)
        #: the worker count the driver last gave YARN, or took from it (None: not known yet)
        self._count = count
        #: bumped each time the driver gives YARN a count or takes one from it
        self._generation = 0

    @property
    def reconciling(self) -> bool:
        """YARN may lack the target: the resizer reconciles between resizes."""
        with self._lock:
            return self._reconciling

    @property
    def removing(self) -> tuple[str, ...]:
        """The instances YARN is to remove by name and has not confirmed gone."""
        with self._lock:
            return self._removing

    @property
    def count(self) -> int | None:
        """The worker count the driver last gave YARN or took from it (None: not known yet)."""
        with self._lock:
            return self._count

    @property
    def generation(self) -> int:
        """Bumped by :meth:`set_target` and :meth:`adopt`: a read of YARN from an older generation is stale."""
        with self._lock:
            return self._generation

    def adopt(self, workers: int) -> None:
        """YARN was given ``workers`` by someone else and the driver takes it: it is the count YARN should have from
        now on (nothing is sent; the resizer's next :meth:`set_target` confirms it)."""
        with self._lock:
            self._count = workers
            self._generation += 1

    def worker(self) -> tuple[ComponentStatus | None, int]:
        """YARN's worker component as read now (None: not listed, or YARN did not answer), and the
        :attr:`generation` the read began at. Blocks for one REST call."""
        generation = self.generation
        try:
            status = self._yarn.status(self._job)
        except YarnError as exc:
            log.debug("cannot read the worker component from YARN: %s", exc)
            return None, generation
        return status.component(WORKER_COMPONENT), generation

    def set_target(self, workers: int, remove: Sequence[str] = ()) -> None:
        """Records ``workers`` as YARN's target, removing ``remove`` (and what an earlier scale-in still removes)
        by name; reconciliation starts over.

        Raises:
            YarnError: the backend refused the target.
        """
        with self._lock:
            self._removing = tuple(dict.fromkeys((*self._removing, *remove)))
            self._yarn.set_target(self._job, WORKER_COMPONENT, workers, remove=self._removing)
            self._count = workers
            self._generation += 1
            self._reconciling = True
            self._misses = 0

    def stop(self) -> None:
        """Stops reconciling: YARN has the target, or never will (its service or component is gone)."""
        with self._lock:
            self._reconciling = False

    def pause(self) -> float | None:
        """How long the resizer may wait for a new resize before its next slice (None: as long as it likes, YARN
        has the target): :data:`RECONCILE_PAUSE_S`, doubled after each slice that missed, at most
        :data:`RECONCILE_PAUSE_MAX_S`."""
        with self._lock:
            if not self._reconciling:
                return None
            attempt = RetryCallState(Retrying(), None, (), {})
            attempt.attempt_number = self._misses + 1
        return float(wait_exponential(multiplier=RECONCILE_PAUSE_S, max=RECONCILE_PAUSE_MAX_S)(attempt))

    def reconcile(self, give_way: Callable[[], bool] | None = None) -> ReconcileResult:
        """One slice of reconciliation (at most :data:`RECONCILE_SLICE_S`, blocking the caller that long, or until
        ``give_way()`` says a new resize waits: asked after each read of YARN); its result is kept for
        :meth:`ready` and :meth:`lag`. Failures come back in the result, never raised."""
        result = self._yarn.reconcile(self._job, WORKER_COMPONENT, timeout=RECONCILE_SLICE_S, give_way=give_way)
        gone = isinstance(result.error, ServiceNotFoundError | ComponentNotFoundError) or (
            result.service_state in TERMINAL_SERVICE_STATES
        )
        with self._lock:
            self.result, self._synced_at = result, self._clock()
            if result.converged:
                self._reconciling, self._removing = False, ()
            else:
                self._misses += 1
                self._reconciling = self._reconciling and not gone
        if result.converged:
            log.info("YARN has the target: %d workers (%s)", result.target, ", ".join(result.ready_instances))
        elif gone:
            log.error("stopped reconciling the workers with YARN: %s", result.error)
        elif result.desired != result.target or not isinstance(result.error, YarnTimeoutError):
            log.warning("YARN does not have the resize to %d workers yet: %s", result.target, result.error)
        return result

    def watched(self, ready: int) -> None:
        """The container watch read ``ready`` READY workers in YARN's worker component just now."""
        with self._lock:
            self._watched = (ready, self._clock())

    def ready(self) -> int | None:
        """YARN's READY workers as the driver last read them: its latest reconciliation while it reconciles (or
        when that is newer), else the container watch's read; None before either."""
        with self._lock:
            result, watched = self.result, self._watched
            if result is not None and (self._reconciling or watched is None or self._synced_at >= watched[1]):
                return result.ready
            return watched[0] if watched is not None else None

    def lag(self) -> str:
        """Why YARN does not have the worker target yet ('' when it has it, or only starts containers)."""
        with self._lock:
            result, reconciling = self.result, self._reconciling
        if not reconciling or result is None or result.converged or result.error is None:
            return ""
        if result.desired == result.target and isinstance(result.error, YarnTimeoutError):
            return ""  # YARN has the target and is starting (or relaunching) containers
        return f"YARN does not have the resize to {result.target} workers yet: {result.error}"


def replaced_by_yarn(container_id: str, containers: Sequence[ContainerStatus]) -> str:
    """Why YARN no longer counts the driver in ``container_id`` as the job's ('' while it does, or outside YARN:
    no container id), from what YARN lists of the driver component: its container is listed as ended (lost with
    its NodeManager), or the driver runs in a later container. Only positive evidence counts, as for the workers
    (:func:`~submarine_elastic.elastic.reconcile.lost_agents`)."""
    if not container_id:
        return ""
    mine = next((c for c in containers if c.id == container_id), None)
    if mine is not None and mine.state in ENDED_CONTAINER_STATES:
        return f"YARN counts this driver's container {container_id} {mine.state}"
    later = [c.id for c in containers if c.state not in ENDED_CONTAINER_STATES and c.id != container_id]
    if mine is None and later:
        return f"YARN runs the job's driver in container {later[0]}, not in this one ({container_id})"
    return ""
