"""The two records a job's driver writes: what its next incarnation needs (:class:`DriverState`), and how the job
ended (:class:`JobOutcome`, read by ``submarine job show`` after the service is gone).

Each is one typed, validated model written and read as JSON, the protobuf messages it holds (resize events,
failures, batch targets, incarnations) as their JSON mapping (``preserving_proto_field_name``). Reading checks
every field: a record whose fields are of the wrong type, negative where a count is meant, or not messages of
their kind is refused with a message that names the fields. Both files are written atomically
(:func:`submarine_elastic.files.write_atomic`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Self, TypeVar

from google.protobuf import json_format
from google.protobuf.message import Message
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, ValidationError, field_validator

from submarine_elastic.files import write_atomic
from submarine_elastic.protocol.api import JobPhase
from submarine_elastic.protocol.proto import elastic_pb2 as pb

log = logging.getLogger("submarine_elastic.driver")

#: How the reason a job lost whole ends with begins (every worker gone with the driver, as in a power loss, and no
#: checkpoint: ``DriverState.error``); a later driver incarnation finds it by it.
WHOLE_JOB_LOST = "the whole job was lost"
#: How the timeline entry of a new ring that a relaunched driver forms, none of its predecessor's workers left
#: (lost, or the job stopped and started again), begins; ``job show`` finds it by it.
RING_GONE = "no worker of its ring outlived the previous driver"

_M = TypeVar("_M", bound=Message)


def _plain(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _parser(kind: type[_M]) -> Callable[[object], _M]:
    """Takes a ``kind`` message as it is, or parses one from its JSON mapping."""

    def parse(value: object) -> _M:
        if isinstance(value, kind):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"a {kind.__name__} is a JSON object, not {type(value).__name__}")
        try:
            return json_format.ParseDict(value, kind())
        except json_format.ParseError as exc:
            raise ValueError(f"not a {kind.__name__}: {str(exc).splitlines()[0]}") from None

    return parse


_AS_DICT = PlainSerializer(_plain, return_type=dict)
ResizeEvent = Annotated[pb.ResizeEvent, BeforeValidator(_parser(pb.ResizeEvent)), _AS_DICT]
WorkerFailure = Annotated[pb.WorkerFailure, BeforeValidator(_parser(pb.WorkerFailure)), _AS_DICT]
Target = Annotated[pb.Target, BeforeValidator(_parser(pb.Target)), _AS_DICT]
DriverIncarnation = Annotated[pb.DriverIncarnation, BeforeValidator(_parser(pb.DriverIncarnation)), _AS_DICT]
Count = Annotated[int, Field(ge=0, strict=True)]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", arbitrary_types_allowed=True)

    def to_json(self) -> str:
        return self.model_dump_json()

    def save(self, path: Path) -> None:
        """Writes the record to ``path`` atomically.

        Raises:
            OSError: the file cannot be written.
        """
        write_atomic(path, self.to_json())

    @classmethod
    def from_json(cls, text: str | bytes) -> Self:
        """The record ``text`` holds.

        Raises:
            ValueError: it is not JSON, or a field is missing or wrong (each named, with what is wrong).
        """
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            problems = [
                f"{'.'.join(str(p) for p in e['loc']) or 'the record'}: {e['msg']}"
                for e in exc.errors(include_url=False)
            ]
            raise ValueError(f"not a {cls.__name__} record: {'; '.join(problems)}") from None


class DriverState(_Record):
    """What a driver incarnation leaves its successor: written when it changes, read back by the next incarnation
    of the same YARN application.

    ``target`` is the worker count the driver last applied, ``requested`` the latest one a client asked for (a
    resize queued when the driver died is taken up again), ``world_size`` the ring's size then, ``removing`` the
    instances a scale-in removes by name that YARN had not confirmed gone, ``version`` the last target version it
    gave (the next incarnation's targets go on from it), ``preempted_from`` the target before YARN's preemptions
    that the job is growing back to (0: none), ``ring`` the Horovod hosts (agent ids) of the last ring it opened
    a rendezvous for (empty before its first): only they hold the job's newest committed state.
    """

    app: str = ""
    target: Count = 0
    requested: Count = 0
    world_size: Count = 0
    removing: tuple[str, ...] = ()
    timeline: tuple[ResizeEvent, ...] = ()
    failures: tuple[WorkerFailure, ...] = ()
    incarnations: tuple[DriverIncarnation, ...] = ()
    error: str = ""
    batch_timeline: tuple[Target, ...] = ()
    version: Count = 0
    preempted_from: Count = 0
    ring: tuple[str, ...] = ()

    @classmethod
    def load(cls, path: Path | None, app: str) -> DriverState | None:
        """The state a previous incarnation of application ``app`` left at ``path``; None when there is none (or
        it belongs to another run of a job of the same name). An unreadable or invalid file is logged and
        ignored: the new incarnation then rebuilds its view from the agents alone."""
        if path is None or not path.exists():
            return None
        try:
            state = cls.from_json(path.read_bytes())
        except (OSError, ValueError) as exc:
            log.warning("ignoring the previous driver's state in %s: %s", path, exc)
            return None
        return state if state.app == app else None


class StateKeeper:
    """Keeps the driver's state file at ``path`` up to date: :meth:`keep` writes a state only when it differs from
    the last one written. Safe under concurrent calls (the driver's persist loop, a re-forming ring, its end)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._written = ""
        self._lock = threading.Lock()

    def keep(self, state_now: Callable[[], DriverState]) -> None:
        """Writes the state ``state_now`` gives if it changed; a file that cannot be written is logged (and tried
        again next time). The state is taken under the keeper's lock, so an older one never overwrites a newer."""
        with self._lock:
            text = state_now().to_json()
            if text == self._written:
                return
            try:
                write_atomic(self.path, text)
            except OSError as exc:
                log.warning("cannot keep the driver's state in %s: %s", self.path, exc)
            self._written = text


class JobOutcome(_Record):
    """How a job ended, as its driver recorded it: ``phase`` finished or failed, the reason, when, the first
    failed training processes, the batch settings it took (oldest first; empty when its batch was never set), and
    every resize it applied or refused (its timeline, oldest first)."""

    job: str = ""
    phase: JobPhase
    error: str = ""
    time: float = 0.0
    failures: tuple[WorkerFailure, ...] = ()
    batch_timeline: tuple[Target, ...] = ()
    timeline: tuple[ResizeEvent, ...] = ()

    @field_validator("phase")
    @classmethod
    def _ended(cls, phase: JobPhase) -> JobPhase:
        if phase not in (JobPhase.FINISHED, JobPhase.FAILED):
            raise ValueError(f"a job's outcome is finished or failed, not {phase.value}")
        return phase
