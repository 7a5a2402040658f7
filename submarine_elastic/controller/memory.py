"""A controller that only remembers: jobs, the metrics reported for them, and decisions a test injects.

It runs no policy and touches no cluster. ``submarine bridge serve --controller memory`` uses it so a JVM
caller can be developed against the bridge without a cluster, and tests use it wherever they need a
correct :class:`~submarine_elastic.controller.api.Controller` and want to say themselves what the
decisions are (:meth:`InMemoryController.decide`). It checks what callers hand in exactly as the live
controller does (:class:`~submarine_elastic.controller.api.JobSubmission`,
:class:`~submarine_elastic.controller.api.MetricsReport`). Every method is thread-safe and never blocks
on I/O.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

from submarine_elastic.controller.api import (
    Controller,
    DecisionRecord,
    DecisionState,
    InvalidJobError,
    JobRecord,
    JobState,
    JobSubmission,
    MetricsReport,
    UnknownJobError,
)
from submarine_elastic.limits import MAX_WORLD_SIZE


class InMemoryController(Controller):
    """A thread-safe :class:`Controller` that keeps everything in memory and decides nothing itself.

    Args:
        clock: wall-clock seconds, for ``submitted_at`` and decision times (injectable for tests).
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[str, JobRecord] = {}
        self._decisions: dict[str, list[DecisionRecord]] = {}
        self._metrics: dict[str, list[MetricsReport]] = {}

    # ------------------------------------------------------------------ Controller

    def submit(self, job: JobSubmission) -> JobRecord:
        """Record a job (a known id is replaced, keeping its place, decisions and metrics)."""
        with self._lock:
            record = job.record(self._clock())
            self._jobs[job.job_id] = record
            self._decisions.setdefault(job.job_id, [])
            self._metrics.setdefault(job.job_id, [])
            return record

    def job_finished(self, job_id: str) -> None:
        """Mark a job finished; it stays listed. Finishing it again changes nothing.

        Raises:
            UnknownJobError: no such job.
        """
        with self._lock:
            job = self._job(job_id)
            self._jobs[job_id] = replace(job, state=job.state.check(JobState.FINISHED))

    def report_metrics(
        self, job_id: str, world_size: int, step: int, samples_per_second: float, loss: float | None = None
    ) -> None:
        """Record one metrics report (see :meth:`metrics`).

        Raises:
            UnknownJobError: no such job.
            InvalidJobError: a value out of its range (named).
        """
        with self._lock:
            self._job(job_id)
        report = MetricsReport(job_id, world_size, step, samples_per_second, loss)
        with self._lock:
            self._metrics[job_id].append(report)

    def jobs(self) -> list[JobRecord]:
        """Every job recorded, in submission order (a resubmitted id keeps its first place)."""
        with self._lock:
            return list(self._jobs.values())

    def job(self, job_id: str) -> JobRecord:
        with self._lock:
            return self._job(job_id)

    def decision(self, job_id: str) -> DecisionRecord | None:
        """The latest injected decision for a job, or None.

        Raises:
            UnknownJobError: no such job.
        """
        with self._lock:
            self._job(job_id)
            decisions = self._decisions[job_id]
            return decisions[-1] if decisions else None

    def timeline(self, job_id: str, *, all_runs: bool = False) -> list[DecisionRecord]:
        """Every injected decision for a job, oldest first (a job here has one run).

        Raises:
            UnknownJobError: no such job.
        """
        with self._lock:
            self._job(job_id)
            return list(self._decisions[job_id])

    # ------------------------------------------------------------------ for tests and tools

    def decide(
        self, job_id: str, to_workers: int, reason: str, *, applied: bool = False, error: str | None = None
    ) -> DecisionRecord:
        """Inject a decision as a policy would make it: the job's target becomes ``to_workers``, and, when
        ``applied``, so does its worker count; with an ``error`` it failed.

        Raises:
            UnknownJobError: no such job.
            InvalidJobError: ``to_workers`` outside the job's limits, an empty reason, or both ``applied``
                and ``error``.
        """
        if isinstance(to_workers, bool) or not isinstance(to_workers, int) or not 1 <= to_workers <= MAX_WORLD_SIZE:
            raise InvalidJobError(f"job {job_id!r}: to_workers must be an integer in [1, {MAX_WORLD_SIZE}]")
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidJobError(f"job {job_id!r}: a decision needs a reason, got {reason!r}")
        if applied and error is not None:
            raise InvalidJobError(f"job {job_id!r}: a decision that failed was not applied")
        state = (
            DecisionState.APPLIED if applied else DecisionState.FAILED if error is not None else DecisionState.PENDING
        )
        with self._lock:
            job = self._job(job_id)
            if not job.min_workers <= to_workers <= job.max_workers:
                raise InvalidJobError(
                    f"job {job_id!r}: to_workers {to_workers} must lie within min {job.min_workers} "
                    f"and max {job.max_workers}"
                )
            record = DecisionRecord(job_id, self._clock(), job.target, to_workers, reason, state, error)
            self._decisions[job_id].append(record)
            self._jobs[job_id] = replace(job, target=to_workers, workers=to_workers if applied else job.workers)
            return record

    def metrics(self, job_id: str) -> list[MetricsReport]:
        """Every metrics report recorded for a job, oldest first.

        Raises:
            UnknownJobError: no such job.
        """
        with self._lock:
            self._job(job_id)
            return list(self._metrics[job_id])

    def _job(self, job_id: str) -> JobRecord:
        job = self._jobs.get(job_id) if isinstance(job_id, str) else None
        if job is None:
            raise UnknownJobError(f"no job named {job_id!r}")
        return job
