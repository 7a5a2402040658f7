"""A controller that only remembers: jobs, the metrics reported for them, and decisions a test injects.

It runs no policy and touches no cluster. ``submarine bridge serve --controller memory`` uses it so a JVM
caller can be developed against the bridge without a cluster, and tests use it wherever they need a
correct :class:`~submarine_elastic.controller.api.Controller` and want to say themselves what the
decisions are (:meth:`InMemoryController.decide`). Every method is thread-safe and never blocks on I/O.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from submarine_elastic.controller.api import (
    Controller,
    DecisionRecord,
    InvalidJobError,
    JobRecord,
    UnknownJobError,
)

#: A job id is a YARN service name.
_JOB_ID = re.compile(r"[a-z][a-z0-9-]{0,62}")
_SOURCES = ("cli", "bridge", "yarn")


@dataclass(frozen=True)
class MetricsReport:
    """One :meth:`Controller.report_metrics` call as the in-memory controller recorded it."""

    job_id: str
    world_size: int
    step: int
    samples_per_second: float
    loss: float | None
    time: float


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidJobError(f"{name} must be an integer >= 1, got {value!r}")
    return value


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

    def job_submitted(
        self,
        job_id: str,
        min_workers: int,
        max_workers: int,
        workers: int,
        *,
        elastic: bool = True,
        source: str = "cli",
    ) -> JobRecord:
        """Record a job (a known id is replaced, keeping its place, decisions and metrics).

        Raises:
            InvalidJobError: bad id, limits, ``elastic`` flag or source (named in the message).
        """
        if not isinstance(job_id, str) or not _JOB_ID.fullmatch(job_id):
            raise InvalidJobError(f"job id must match [a-z][a-z0-9-]* (at most 63 characters), got {job_id!r}")
        _positive_int("min_workers", min_workers)
        _positive_int("max_workers", max_workers)
        _positive_int("workers", workers)
        if not min_workers <= workers <= max_workers:
            raise InvalidJobError(
                f"job {job_id!r}: workers {workers} must lie within min {min_workers} and max {max_workers}"
            )
        if not isinstance(elastic, bool):
            raise InvalidJobError(f"job {job_id!r}: elastic must be a bool, got {elastic!r}")
        if not elastic and min_workers != max_workers:
            raise InvalidJobError(
                f"job {job_id!r}: a fixed-size job needs min == max, got {min_workers} and {max_workers}"
            )
        if source not in _SOURCES:
            raise InvalidJobError(f"job {job_id!r}: source must be one of {', '.join(_SOURCES)}, got {source!r}")
        with self._lock:
            record = JobRecord(
                job_id, min_workers, max_workers, workers, workers, elastic, "running", self._clock(), source
            )
            self._jobs[job_id] = record
            self._decisions.setdefault(job_id, [])
            self._metrics.setdefault(job_id, [])
            return record

    def job_finished(self, job_id: str) -> None:
        """Mark a job finished; it stays listed. Finishing it again changes nothing.

        Raises:
            UnknownJobError: no such job.
        """
        with self._lock:
            self._jobs[job_id] = replace(self._job(job_id), state="finished")

    def report_metrics(
        self, job_id: str, world_size: int, step: int, samples_per_second: float, loss: float | None = None
    ) -> None:
        """Record one metrics report (see :meth:`metrics`).

        Raises:
            UnknownJobError: no such job.
            InvalidJobError: a negative, non-integer or non-finite value (named).
        """
        with self._lock:
            self._job(job_id)
        _positive_int("world_size", world_size)
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise InvalidJobError(f"job {job_id!r}: step must be an integer >= 0, got {step!r}")
        if not _finite(samples_per_second) or samples_per_second < 0:
            raise InvalidJobError(
                f"job {job_id!r}: samples_per_second must be finite and >= 0, got {samples_per_second!r}"
            )
        if loss is not None and not _finite(loss):
            raise InvalidJobError(f"job {job_id!r}: loss must be finite, got {loss!r}")
        report = MetricsReport(
            job_id, world_size, step, float(samples_per_second), None if loss is None else float(loss), self._clock()
        )
        with self._lock:
            self._metrics[job_id].append(report)

    def decision(self, job_id: str) -> DecisionRecord | None:
        """The latest injected decision for a job, or None.

        Raises:
            UnknownJobError: no such job.
        """
        with self._lock:
            self._job(job_id)
            decisions = self._decisions[job_id]
            return decisions[-1] if decisions else None

    def jobs(self) -> list[JobRecord]:
        """Every job recorded, in submission order (a resubmitted id keeps its first place)."""
        with self._lock:
            return list(self._jobs.values())

    def timeline(self, job_id: str) -> list[DecisionRecord]:
        """Every injected decision for a job, oldest first.

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
        ``applied``, so does its worker count.

        Raises:
            UnknownJobError: no such job.
            InvalidJobError: ``to_workers`` outside the job's limits, or an empty reason.
        """
        _positive_int("to_workers", to_workers)
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidJobError(f"job {job_id!r}: a decision needs a reason, got {reason!r}")
        with self._lock:
            job = self._job(job_id)
            if not job.min_workers <= to_workers <= job.max_workers:
                raise InvalidJobError(
                    f"job {job_id!r}: to_workers {to_workers} must lie within min {job.min_workers} "
                    f"and max {job.max_workers}"
                )
            record = DecisionRecord(job_id, self._clock(), job.target, to_workers, reason, applied, error)
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


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
