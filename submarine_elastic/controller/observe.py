"""A controller round's observation: everything the round's step reads, read once.

:meth:`Observer.observe` asks each live job's driver for its status once (:meth:`.JobBackend.status`), reads each
job's metrics (:class:`.jobmetrics.MetricsReader`), and, unless the controller was given ``--capacity`` slots, the
cluster's nodes, each job's footprint and the scheduler's queues; a job whose run YARN shows ended (its application
the one the controller knows for it) is left out of the round and named in :attr:`.step.Observation.ended`. What
it remembers between rounds is what it read: each job run's footprint (YARN shows none for a while after a job's
ApplicationMaster restarts), each job's batch limits (its driver's, while the driver does not answer), the
capacity filter of dips (:class:`.capacity.CapacityFilter`) and each job's loss window (what of it the next round's
points leave as it is). It is used by the round's thread only.
"""

from __future__ import annotations

from collections.abc import Sequence

from submarine_elastic.controller.api import DriverStatus, JobBackend, JobFootprint, JobRecord
from submarine_elastic.controller.capacity import CapacityFilter, count_slots, slot_unit
from submarine_elastic.controller.jobmetrics import MetricsReader
from submarine_elastic.controller.step import ClusterRoom, Observation, takes_part
from submarine_elastic.controller.store import ControllerStore
from submarine_elastic.metrics.api import MetricsStore


class Observer:
    """Reads a round's :class:`~.step.Observation`.

    Args:
        backend, store, metrics: the cluster, the SQLite state (the throughput history), the metrics store.
        settle: seconds a drop of capacity must last to count.
    """

    def __init__(
        self,
        backend: JobBackend,
        store: ControllerStore,
        metrics: MetricsStore,
        *,
        settle: float,
    ) -> None:
        self.backend, self.store, self.metrics = backend, store, metrics
        self._filter = CapacityFilter(settle)
        self._footprints: dict[tuple[str, int], JobFootprint] = {}
        self._batch_limits: dict[str, tuple[int, int] | None] = {}
        self._reader = MetricsReader(store, metrics)

    def statuses(self, jobs: Sequence[JobRecord]) -> dict[str, DriverStatus | None]:
        """One status call to each job's driver."""
        return {job.job_id: self.backend.status(job.job_id) for job in jobs}

    def observe(self, jobs: Sequence[JobRecord], now: float, capacity: int | None) -> Observation:
        """The round's observation of the live ``jobs`` at ``now``, given ``capacity`` slots (``--capacity``) or
        counting the cluster (None)."""
        statuses = self.statuses(jobs)
        for job_id, status in statuses.items():
            if status is not None:
                self._batch_limits[job_id] = status.batch_limits
        cluster = None
        ended: tuple[JobRecord, ...] = ()
        if capacity is None:
            rings = {job_id: status.ring if status is not None else None for job_id, status in statuses.items()}
            cluster, gone = self._cluster(jobs, rings, now)
            if gone:
                ended = tuple(job for job in jobs if job.job_id in gone)
                jobs = [job for job in jobs if job.job_id not in gone]
                statuses = {job_id: status for job_id, status in statuses.items() if job_id not in gone}
        self._batch_limits = {job.job_id: self._batch_limits.get(job.job_id) for job in jobs}
        self._reader.keep_only(self._batch_limits)
        return Observation(
            now=now,
            jobs=tuple(jobs),
            ended=ended,
            statuses=statuses,
            metrics={job.job_id: self._reader.read(job.job_id) for job in jobs},
            batch_limits=dict(self._batch_limits),
            queues=tuple(self.backend.queues()) if cluster is not None else (),
            capacity=capacity,
            cluster=cluster,
        )

    def _cluster(
        self, jobs: Sequence[JobRecord], rings: dict[str, int | None], now: float
    ) -> tuple[ClusterRoom | None, set[str]]:
        """The nodes, the footprint of each job that takes part, and the slots they make (None when the nodes are
        unknown); and the jobs whose service YARN shows ended."""
        nodes = self.backend.nodes()
        if nodes is None:
            return None, set()
        known: dict[str, JobFootprint] = {}
        ended: set[str] = set()
        for job in jobs:
            key = (job.job_id, job.run)
            found = self.backend.footprint(job.job_id)
            if found is not None and found.ended_app is not None:
                if found.ended_app == job.app_id:  # this run's application: a run not seen yet is not ended
                    ended.add(job.job_id)
                continue
            if found is not None:
                self._footprints[key] = found
            if key in self._footprints:
                known[job.job_id] = self._footprints[key]
        jobs = [job for job in jobs if job.job_id not in ended]
        managed = [job for job in jobs if takes_part(job, rings[job.job_id], job.job_id in known)]
        sized = [known[job.job_id].worker for job in managed if job.job_id in known]
        unit = slot_unit(sized or [self.backend.default_worker()])
        footprints = {job.job_id: known.get(job.job_id, JobFootprint(unit)) for job in managed}
        live_keys = {(job.job_id, job.run) for job in jobs}
        self._footprints = {k: v for k, v in self._footprints.items() if k in live_keys}
        slots = count_slots(nodes, footprints)
        if slots is None:
            return ClusterRoom(tuple(nodes), footprints, None), ended
        kept = self._filter.update(now, slots.unit, slots.held + slots.free + slots.reserved)
        return ClusterRoom(tuple(nodes), footprints, slots, kept), ended
