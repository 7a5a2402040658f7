"""The controller's interface: what the CLI, the py4j bridge and the tests talk to.

The controller closes the loop: it hosts the metrics service, keeps every job it knows of (submitted
through it, reported by a JVM caller, or seen in the ResourceManager's application list), runs the
policy engine on every metrics window and on every arrival or departure, and applies the decisions
through each job's driver (graceful scale-in, stop-free scale-out). Its state persists in SQLite.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


class ControllerError(Exception):
    """Base of every error raised by :mod:`submarine_elastic.controller`."""


class UnknownJobError(ControllerError, LookupError):
    """No job of that id is known to the controller."""


class InvalidJobError(ControllerError, ValueError):
    """A job was reported with bad limits or a bad id; the message names the value."""


@dataclass(frozen=True)
class JobRecord:
    """A job as the controller knows it.

    Attributes:
        job_id: the job's (YARN service) name.
        min_workers, max_workers: its limits; equal for a fixed-size job.
        workers: the worker count it runs with now (as last confirmed).
        target: the worker count last decided for it.
        elastic: whether its size may change.
        state: ``pending``, ``running`` or ``finished``.
        submitted_at: wall-clock seconds when the controller learned of it.
        source: ``cli``, ``bridge`` or ``yarn`` (seen in the ResourceManager's application list).
    """

    job_id: str
    min_workers: int
    max_workers: int
    workers: int
    target: int
    elastic: bool
    state: str
    submitted_at: float
    source: str


@dataclass(frozen=True)
class DecisionRecord:
    """One size change the controller decided, with why and what came of it.

    Attributes:
        job_id, time: which job, when (wall-clock seconds).
        from_workers, to_workers: the change.
        reason: the policy's one-line reason.
        applied: True once the job's driver confirmed the new size.
        error: why applying it failed, if it did.
    """

    job_id: str
    time: float
    from_workers: int
    to_workers: int
    reason: str
    applied: bool = False
    error: str | None = None


class Controller(ABC):
    """What a caller of the controller may do. Every method blocks for at most a few seconds (a
    database write, an RPC to a job's driver); decisions are applied in the background.
    """

    @abstractmethod
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
        """A job arrived. Runs the policies for the new situation (it may take workers from others).

        Raises:
            InvalidJobError: bad id or limits (``min <= workers <= max``, all >= 1).
        """

    @abstractmethod
    def job_finished(self, job_id: str) -> None:
        """A job left; its capacity goes back to the others.

        Raises:
            UnknownJobError: no such job.
        """

    @abstractmethod
    def report_metrics(
        self, job_id: str, world_size: int, step: int, samples_per_second: float, loss: float | None = None
    ) -> None:
        """Metrics for a job from a caller that does not stream them over gRPC (e.g. a JVM scheduler).

        Raises:
            UnknownJobError: no such job.
            InvalidJobError: a negative or non-finite value (named).
        """

    @abstractmethod
    def decision(self, job_id: str) -> DecisionRecord | None:
        """The latest decision for a job, or None if its size was never changed.

        Raises:
            UnknownJobError: no such job.
        """

    @abstractmethod
    def jobs(self) -> list[JobRecord]:
        """Every job the controller knows, in submission order."""

    @abstractmethod
    def timeline(self, job_id: str) -> list[DecisionRecord]:
        """Every decision for a job, oldest first.

        Raises:
            UnknownJobError: no such job.
        """
