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
    """A job as the controller knows it: one run of a job name (a name submitted again is a new run).

    Attributes:
        job_id: the job's (YARN service) name.
        min_workers, max_workers: its limits; equal for a fixed-size job.
        workers: its ring size as last read from its driver (the size it asked for until then).
        target: the worker count last decided for it.
        elastic: whether its size may change.
        state: ``pending``, ``running`` or ``finished``.
        submitted_at: wall-clock seconds when the controller learned of this run.
        source: ``cli``, ``bridge`` or ``yarn`` (seen in the ResourceManager's application list).
        run: 1 for the first job of this name, one more for each later submission of the name.
        app_id: the YARN application of this run, once the controller has seen it.
        observed_at: wall-clock seconds when ``workers`` was last read from the driver, or None.
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
    run: int = 1
    app_id: str | None = None
    observed_at: float | None = None


@dataclass(frozen=True)
class Resources:
    """Memory and virtual cores: a container's size, or the room on a node (negative when short).

    Attributes:
        memory_mb: megabytes.
        vcores: virtual cores.
    """

    memory_mb: int
    vcores: int

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.memory_mb + other.memory_mb, self.vcores + other.vcores)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.memory_mb - other.memory_mb, self.vcores - other.vcores)

    def count(self, size: Resources) -> int:
        """How many containers of ``size`` fit in this room: memory and vcores both; negative when the
        room is short (``-1``: one container of ``size`` has to go before one fits).

        Raises:
            ValueError: ``size`` is not positive in both.
        """
        if size.memory_mb <= 0 or size.vcores <= 0:
            raise ValueError(f"a container size must be positive, got {size}")
        return min(self.memory_mb // size.memory_mb, self.vcores // size.vcores)

    def __str__(self) -> str:
        return f"{self.memory_mb} MB, {self.vcores} vcore{'' if self.vcores == 1 else 's'}"


@dataclass(frozen=True)
class NodeResources:
    """One RUNNING node as the ResourceManager reports it.

    Attributes:
        node_id: the NodeManager's id (``host:port``).
        free: what no container holds now (a reservation YARN keeps on the node does not reduce it).
    """

    node_id: str
    free: Resources


@dataclass(frozen=True)
class JobFootprint:
    """What one job takes on the cluster, as YARN sees it.

    Attributes:
        worker: the size of one of its worker containers.
        workers_allocated: worker containers YARN has given it (their room is no longer free).
        unplaced: its other containers (ApplicationMaster, driver) that YARN has not given it yet; they
            will take room before any worker of a job that arrived later.
    """

    worker: Resources
    workers_allocated: int = 0
    unplaced: tuple[Resources, ...] = ()

    def __post_init__(self) -> None:
        if self.worker.memory_mb <= 0 or self.worker.vcores <= 0:
            raise ValueError(f"a worker container must have memory and vcores, got {self.worker}")
        if self.workers_allocated < 0:
            raise ValueError(f"workers_allocated must be >= 0, got {self.workers_allocated}")


@dataclass(frozen=True)
class ClusterApp:
    """A live yarn-service application (any, not only the controller's jobs).

    Attributes:
        name: its service name.
        app_id: its YARN application id: tells two runs of one name apart.
        workers: the containers it holds besides its ApplicationMaster and driver (at least 1).
        started_at: wall-clock seconds when the ResourceManager started it (0 when not reported).
    """

    name: str
    app_id: str
    workers: int
    started_at: float = 0.0


@dataclass(frozen=True)
class DecisionRecord:
    """One size change the controller decided, with why and what came of it.

    Attributes:
        job_id, time: which job, when (wall-clock seconds).
        from_workers, to_workers: the change.
        reason: the policy's one-line reason.
        applied: True once the job's driver confirmed the new size.
        error: why applying it failed, if it did.
        run: which run of the job name it was for (see :attr:`JobRecord.run`).
    """

    job_id: str
    time: float
    from_workers: int
    to_workers: int
    reason: str
    applied: bool = False
    error: str | None = None
    run: int = 1


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
