"""The controller's values on the wire: :mod:`.api` records <-> ``controller.proto`` messages, both ways,
for the gRPC server and its client."""

from __future__ import annotations

from typing import Any

from submarine_elastic.controller.api import (
    DecisionRecord,
    DecisionState,
    InvalidJobError,
    JobRecord,
    JobSource,
    JobState,
    JobStatus,
)
from submarine_elastic.controller.proto import controller_pb2 as pb

_JOB_STATES = {
    JobState.PENDING: pb.JOB_STATE_PENDING,
    JobState.RUNNING: pb.JOB_STATE_RUNNING,
    JobState.FINISHED: pb.JOB_STATE_FINISHED,
}
_SOURCES = {
    JobSource.CLI: pb.JOB_SOURCE_CLI,
    JobSource.BRIDGE: pb.JOB_SOURCE_BRIDGE,
    JobSource.YARN: pb.JOB_SOURCE_YARN,
}
_DECISION_STATES = {
    DecisionState.PENDING: pb.DECISION_STATE_IN_PROGRESS,
    DecisionState.APPLIED: pb.DECISION_STATE_APPLIED,
    DecisionState.FAILED: pb.DECISION_STATE_FAILED,
    DecisionState.STALLED: pb.DECISION_STATE_STALLED,
}


_JOB_STATE_OF: dict[int, JobState] = {v: k for k, v in _JOB_STATES.items()}
_SOURCE_OF: dict[int, JobSource] = {v: k for k, v in _SOURCES.items()}
_DECISION_STATE_OF: dict[int, DecisionState] = {v: k for k, v in _DECISION_STATES.items()}


def source_to_proto(source: JobSource) -> pb.JobSource:
    return _SOURCES[JobSource(source)]


def source_from_proto(value: int) -> JobSource:
    """Raises: InvalidJobError: unset or unknown (named)."""
    found = _SOURCE_OF.get(value)
    if found is None:
        named = pb.JobSource.Name(value) if value in pb.JobSource.values() else str(value)
        raise InvalidJobError(f"source must be one of {', '.join(JobSource)}, got {named}")
    return found


def _optional(message: Any, name: str) -> Any:
    """An optional field's value, None when unset (proto3 ``optional``)."""
    return getattr(message, name) if message.HasField(name) else None


def job_to_proto(job: JobRecord) -> pb.Job:
    message = pb.Job(
        job_id=job.job_id,
        min_workers=job.min_workers,
        max_workers=job.max_workers,
        workers=job.workers,
        target=job.target,
        elastic=job.elastic,
        state=_JOB_STATES[job.state],
        submitted_at=job.submitted_at,
        source=_SOURCES[job.source],
        run=job.run,
    )
    for name in ("app_id", "observed_at", "policy", "last_resize_at", "queue", "requested"):
        value = getattr(job, name)
        if value is not None:
            setattr(message, name, value)
    return message


def job_from_proto(message: pb.Job) -> JobRecord:
    return JobRecord(
        job_id=message.job_id,
        min_workers=message.min_workers,
        max_workers=message.max_workers,
        workers=message.workers,
        target=message.target,
        elastic=message.elastic,
        state=_JOB_STATE_OF[message.state],
        submitted_at=message.submitted_at,
        source=_SOURCE_OF[message.source],
        run=message.run,
        app_id=_optional(message, "app_id"),
        observed_at=_optional(message, "observed_at"),
        policy=_optional(message, "policy"),
        last_resize_at=_optional(message, "last_resize_at"),
        queue=_optional(message, "queue"),
        requested=_optional(message, "requested"),
    )


def decision_to_proto(decision: DecisionRecord) -> pb.Decision:
    message = pb.Decision(
        job_id=decision.job_id,
        time=decision.time,
        from_workers=decision.from_workers,
        to_workers=decision.to_workers,
        reason=decision.reason,
        state=_DECISION_STATES[decision.state],
        run=decision.run,
    )
    if decision.error is not None:
        message.error = decision.error
    if decision.progress is not None:
        message.progress = decision.progress
    return message


def decision_from_proto(message: pb.Decision) -> DecisionRecord:
    return DecisionRecord(
        job_id=message.job_id,
        time=message.time,
        from_workers=message.from_workers,
        to_workers=message.to_workers,
        reason=message.reason,
        state=_DECISION_STATE_OF[message.state],
        error=_optional(message, "error"),
        run=message.run,
        progress=_optional(message, "progress"),
    )


def status_to_proto(status: JobStatus) -> pb.JobStatus:
    message = pb.JobStatus(job=job_to_proto(status.job))
    if status.last_decision is not None:
        message.last_decision.CopyFrom(decision_to_proto(status.last_decision))
    return message


def status_from_proto(message: pb.JobStatus) -> JobStatus:
    last = decision_from_proto(message.last_decision) if message.HasField("last_decision") else None
    return JobStatus(job_from_proto(message.job), last)
