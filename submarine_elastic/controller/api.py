"""The controller's interface: what the CLI, the py4j bridge and the tests talk to, and what it asks of a cluster.

The controller closes the loop: it hosts the metrics service, keeps every job it knows of (submitted
through it, reported by a JVM caller, or seen in the ResourceManager's application list), runs the
policy engine on every metrics window and on every arrival or departure, and applies the decisions
through each job's driver (graceful scale-in, stop-free scale-out). Its state persists in SQLite.

Callers outside the controller's process reach it through its gRPC API
(:mod:`submarine_elastic.controller.client`), which implements :class:`Controller`; every value a caller
hands in is checked here, by :class:`JobSubmission` and :class:`MetricsReport`, whichever way it came.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from submarine_elastic.limits import JOB_NAME, MAX_ABS_VALUE, MAX_INT64, MAX_WORLD_SIZE, QUEUE
from submarine_elastic.policy import QueueShare
from submarine_elastic.protocol.api import verdict
from submarine_elastic.protocol.proto import elastic_pb2 as pb
from submarine_elastic.states import Transitions

#: The longest policy spec a job may name (``scaling-efficiency(probe_every_steps=30, threshold=0.7)``).
MAX_POLICY_SPEC_LENGTH = 512
#: The most GPUs a job's worker container may ask (a worker's GPUs come from one node).
MAX_GPUS_PER_WORKER = 64


class ControllerError(Exception):
    """Base of every error raised by :mod:`submarine_elastic.controller`."""


class UnknownJobError(ControllerError, LookupError):
    """No job of that id is known to the controller."""


class InvalidJobError(ControllerError, ValueError):
    """A job was reported with bad limits or a bad id; the message names the value."""


class IllegalTransitionError(ControllerError):
    """A job or a decision was asked to change state in a way it cannot (a finished job running again)."""


class ControllerUnavailableError(ControllerError):
    """The controller does not run, or does not answer at its address within the call's deadline."""


class ControllerAuthError(ControllerError, PermissionError):
    """The controller refused the caller's token (or the caller cannot read it)."""


class JobState(StrEnum):
    """Where one run of a job is.

    ``PENDING`` (submitted with ``job run``, YARN has not shown its application yet) -> ``RUNNING`` ->
    ``FINISHED``; a pending job may finish without running (its submission failed). Setting the state a
    job is in changes nothing (each state lists itself in :data:`JOB_TRANSITIONS`); any other change raises
    :class:`IllegalTransitionError` (a name submitted again is a new run, not a transition).
    """

    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"

    def check(self, new: JobState) -> JobState:
        """``new`` if a job in this state may move to it.

        Raises:
            IllegalTransitionError: it may not (named).
        """
        if not JOB_TRANSITIONS.can(self, new):
            raise IllegalTransitionError(f"a {self} job cannot become {new}")
        return new


JOB_TRANSITIONS = Transitions(
    JobState,
    {
        JobState.PENDING: (JobState.PENDING, JobState.RUNNING, JobState.FINISHED),
        JobState.RUNNING: (JobState.RUNNING, JobState.FINISHED),
        JobState.FINISHED: (JobState.FINISHED,),
    },
)


class JobSource(StrEnum):
    """How the controller learned of a job."""

    CLI = "cli"  # submarine job run
    BRIDGE = "bridge"  # a JVM caller, through the py4j bridge
    YARN = "yarn"  # seen in the ResourceManager's application list

    @property
    def first_state(self) -> JobState:
        """``job run`` tells the controller before YARN hears of the job; the others report running jobs."""
        return JobState.PENDING if self is JobSource.CLI else JobState.RUNNING


class DecisionState(StrEnum):
    """Where a decision is.

    ``PENDING`` (sent to the job's driver, not converged yet) -> ``APPLIED`` once YARN has exactly that many
    worker containers READY and the driver's ring has that world size, ``FAILED`` when the driver did not take
    it (or the job ended or was submitted again first), or ``STALLED`` when it has not converged within the
    controller's bound; a stalled decision may still become ``APPLIED`` or ``FAILED``. No state moves to itself
    (:data:`DECISION_TRANSITIONS`); any other change raises :class:`IllegalTransitionError`. The values are the
    ones every earlier release wrote (a pending decision reads back as ``pending``).
    """

    PENDING = "pending"
    APPLIED = "applied"
    FAILED = "failed"
    STALLED = "stalled"

    @property
    def converging(self) -> bool:
        """Pending or stalled: the job may still reach the decided size."""
        return self in (DecisionState.PENDING, DecisionState.STALLED)

    def check(self, new: DecisionState) -> DecisionState:
        """``new`` if a decision in this state may move to it.

        Raises:
            IllegalTransitionError: it may not (named).
        """
        if not DECISION_TRANSITIONS.can(self, new):
            raise IllegalTransitionError(f"a decision {self} cannot become {new}")
        return new


DECISION_TRANSITIONS = Transitions(
    DecisionState,
    {
        DecisionState.PENDING: (DecisionState.APPLIED, DecisionState.FAILED, DecisionState.STALLED),
        DecisionState.STALLED: (DecisionState.APPLIED, DecisionState.FAILED),
        DecisionState.APPLIED: (),
        DecisionState.FAILED: (),
    },
)


def _whole(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidJobError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return value


def _real(name: str, value: object, *, low: float) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not low <= value <= MAX_ABS_VALUE
    ):
        raise InvalidJobError(f"{name} must be finite and in [{low:g}, {MAX_ABS_VALUE:g}], got {value!r}")
    return float(value)


def check_job_id(job_id: object) -> str:
    """``job_id`` if it is a job name (:data:`submarine_elastic.limits.JOB_NAME`).

    Raises:
        InvalidJobError: it is not; the message names it and the rule.
    """
    problem = JOB_NAME.problem(job_id)
    if problem is not None:
        raise InvalidJobError(problem)
    return job_id  # type: ignore[return-value]  # JOB_NAME matched: a str


@dataclass(frozen=True)
class JobSubmission:
    """A job as a caller reports it, checked on construction: the one place a submission is validated.

    Attributes:
        job_id: the job's (YARN service) name.
        min_workers, max_workers, workers: its limits and starting size, ``1 <= min <= workers <= max``,
            at most :data:`~submarine_elastic.limits.MAX_WORLD_SIZE`.
        elastic: whether its size may change; a fixed-size job has ``min == max``.
        source: who reports it.
        policy: the job policy it asked for (``--policy``), at most :data:`MAX_POLICY_SPEC_LENGTH`
            printable characters; None: the controller's default.
        gpus: ``yarn.io/gpu`` of each worker container, 0..:data:`MAX_GPUS_PER_WORKER` (0: none).
        queue: the YARN queue it runs in (``job run --queue``: a leaf name or a dotted path); None: the
            cluster's default.

    Raises:
        InvalidJobError: any of the above does not hold (the job and the value named).
    """

    job_id: str
    min_workers: int
    max_workers: int
    workers: int
    elastic: bool = True
    source: JobSource = JobSource.CLI
    policy: str | None = None
    gpus: int = 0
    queue: str | None = None

    def __post_init__(self) -> None:
        check_job_id(self.job_id)
        if self.queue is not None and (problem := QUEUE.problem(self.queue)):
            raise InvalidJobError(f"job {self.job_id!r}: {problem}")
        _whole(f"job {self.job_id!r}: gpus", self.gpus, 0, MAX_GPUS_PER_WORKER)
        for name in ("min_workers", "max_workers", "workers"):
            _whole(f"job {self.job_id!r}: {name}", getattr(self, name), 1, MAX_WORLD_SIZE)
        if not self.min_workers <= self.workers <= self.max_workers:
            raise InvalidJobError(
                f"job {self.job_id!r}: workers {self.workers} must lie within min {self.min_workers} "
                f"and max {self.max_workers}"
            )
        if not isinstance(self.elastic, bool):
            raise InvalidJobError(f"job {self.job_id!r}: elastic must be a bool, got {self.elastic!r}")
        if not self.elastic and self.min_workers != self.max_workers:
            raise InvalidJobError(
                f"job {self.job_id!r}: a fixed-size job needs min == max, got {self.min_workers} and {self.max_workers}"
            )
        try:
            object.__setattr__(self, "source", JobSource(self.source))
        except ValueError:
            raise InvalidJobError(
                f"job {self.job_id!r}: source must be one of {', '.join(JobSource)}, got {self.source!r}"
            ) from None
        if self.policy is not None and (
            not isinstance(self.policy, str)
            or not 0 < len(self.policy) <= MAX_POLICY_SPEC_LENGTH
            or not self.policy.isprintable()
        ):
            raise InvalidJobError(
                f"job {self.job_id!r}: a policy is 1-{MAX_POLICY_SPEC_LENGTH} printable characters, "
                f"got {self.policy if not isinstance(self.policy, str) else self.policy[:40]!r}"
            )

    def record(self, submitted_at: float, *, app_id: str | None = None) -> JobRecord:
        """The job's record as the controller first keeps it: at its starting size, in its source's first state."""
        return JobRecord(
            self.job_id,
            self.min_workers,
            self.max_workers,
            self.workers,
            self.workers,
            self.elastic,
            self.source.first_state,
            submitted_at,
            self.source,
            app_id=app_id,
            policy=self.policy,
            queue=self.queue,
            requested=self.workers,
        )


@dataclass(frozen=True)
class MetricsReport:
    """Metrics of a job from a caller that does not stream them over gRPC (a JVM scheduler), checked on
    construction.

    Attributes:
        job_id: the job.
        world_size: the ring size they were measured at, in [1, MAX_WORLD_SIZE].
        step: the training step, in [0, 2**63 - 1].
        samples_per_second: the job's throughput, finite and in [0, MAX_ABS_VALUE].
        loss: its loss, finite and at most MAX_ABS_VALUE in magnitude, or None.

    Raises:
        InvalidJobError: a value out of its range (the job and the value named).
    """

    job_id: str
    world_size: int
    step: int
    samples_per_second: float
    loss: float | None = None

    def __post_init__(self) -> None:
        who = f"job {self.job_id!r}"
        _whole(f"{who}: world_size", self.world_size, 1, MAX_WORLD_SIZE)
        _whole(f"{who}: step", self.step, 0, MAX_INT64)
        rate = _real(f"{who}: samples_per_second", self.samples_per_second, low=0)
        object.__setattr__(self, "samples_per_second", rate)
        if self.loss is not None:
            object.__setattr__(self, "loss", _real(f"{who}: loss", self.loss, low=-MAX_ABS_VALUE))


@dataclass(frozen=True)
class JobRecord:
    """A job as the controller knows it: one run of a job name (a name submitted again is a new run).

    Attributes:
        job_id: the job's (YARN service) name.
        min_workers, max_workers: its limits; equal for a fixed-size job.
        workers: its ring size as last read from its driver (the size it asked for until then).
        target: the worker count last decided for it.
        elastic: whether its size may change.
        state: see :class:`JobState`.
        submitted_at: wall-clock seconds when the controller learned of this run.
        source: see :class:`JobSource`.
        run: 1 for the first job of this name, one more for each later submission of the name.
        app_id: the YARN application of this run, once the controller has seen it.
        observed_at: wall-clock seconds when ``workers`` was last read from the driver, or None.
        policy: the job policy it was submitted with, or None (the controller's default).
        last_resize_at: wall-clock seconds of its last resize (the start of its cooldown), or None.
        queue: the YARN queue it was submitted to, or None (the cluster's default).
        requested: the worker count it was submitted with (a policy's ``JobView.requested_workers``), or None
            (a record kept before it was stored).
    """

    job_id: str
    min_workers: int
    max_workers: int
    workers: int
    target: int
    elastic: bool
    state: JobState
    submitted_at: float
    source: JobSource
    run: int = 1
    app_id: str | None = None
    observed_at: float | None = None
    policy: str | None = None
    last_resize_at: float | None = None
    queue: str | None = None
    requested: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", self.state if type(self.state) is JobState else JobState(self.state))
        object.__setattr__(self, "source", self.source if type(self.source) is JobSource else JobSource(self.source))

    @property
    def live(self) -> bool:
        """Not finished."""
        return self.state is not JobState.FINISHED


@dataclass(frozen=True)
class DecisionRecord:
    """One size change the controller decided, with why and what came of it.

    Attributes:
        job_id, time: which job, when (wall-clock seconds).
        from_workers, to_workers: the change.
        reason: the policy's one-line reason.
        state: see :class:`DecisionState`.
        error: why applying it failed; set exactly when it did.
        run: which run of the job name it was for (see :attr:`JobRecord.run`).
        progress: while it is pending or stalled, why it has not converged as last read (``YARN has 3
            of 1``, ``ring has 2 of 3``); None before the first read, and once it is applied or failed.

    Raises:
        ValueError: an error without a failure, a failure without an error, or progress on a decision
            that is applied or failed.
    """

    job_id: str
    time: float
    from_workers: int
    to_workers: int
    reason: str
    state: DecisionState = DecisionState.PENDING
    error: str | None = None
    run: int = 1
    progress: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", DecisionState(self.state))
        if (self.state is DecisionState.FAILED) != (self.error is not None):
            raise ValueError(f"a decision has an error exactly when it failed, got {self.state} and {self.error!r}")
        if self.progress is not None and not self.state.converging:
            raise ValueError(f"only a pending or stalled decision has progress, got {self.state} and {self.progress!r}")

    @property
    def applied(self) -> bool:
        """YARN and the job's ring both have the new size."""
        return self.state is DecisionState.APPLIED

    def describe(self) -> str:
        """Its state for a reader: ``applied``, ``failed: <error>``, ``pending: <why>``, ``stalled: <why>``."""
        why = self.error if self.state is DecisionState.FAILED else self.progress
        return f"{self.state}: {why}" if why else str(self.state)


@dataclass(frozen=True)
class JobStatus:
    """A job with its latest decision (None if its size was never changed in this run)."""

    job: JobRecord
    last_decision: DecisionRecord | None


@dataclass(frozen=True)
class ControllerInfo:
    """What a running controller tells its callers (its state file ``controller.json``). A plain dataclass,
    not a pydantic model: every CLI command reads it, and none should pay for importing pydantic.

    Attributes:
        pid, create_time: its process (``create_time`` as :mod:`psutil` reports it: a recycled pid is not it).
        address: ``host:port`` of its gRPC API (:mod:`submarine_elastic.controller.client`).
        metrics_endpoint: ``host:port`` of the metrics service it hosts.
        db: its SQLite state.
        rm_url: the ResourceManager it manages.
        policy, arbiter: its default job policy and its arbiter.
        bridge_port, bridge_token_file: the py4j bridge, when it serves one.
        bridge_tls_dir: the bridge's mutual TLS files for the JVM (``jvm.crt``, ``jvm.key``, ``ca.crt``); None
            when it serves plain TCP (``--insecure``) or no bridge.
    """

    pid: int
    create_time: float
    address: str
    metrics_endpoint: str
    db: str
    rm_url: str
    policy: str
    arbiter: str
    bridge_port: int | None = None
    bridge_token_file: str | None = None
    bridge_tls_dir: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str | bytes) -> ControllerInfo:
        """Raises: ValueError: not the JSON of a ControllerInfo (what is wrong named)."""
        fields = json.loads(text)
        if not isinstance(fields, dict):
            raise ValueError(f"a controller's state is a JSON object, got {type(fields).__name__}")
        kinds: dict[str, type | tuple[type, ...]] = {
            "pid": int,
            "create_time": (int, float),
            "address": str,
            "metrics_endpoint": str,
            "db": str,
            "rm_url": str,
            "policy": str,
            "arbiter": str,
            "bridge_port": (int, type(None)),
            "bridge_token_file": (str, type(None)),
            "bridge_tls_dir": (str, type(None)),
        }
        for name, kind in kinds.items():
            value = fields.get(name)
            if isinstance(value, bool) or not isinstance(value, kind):
                raise ValueError(f"a controller's state has {name}={value!r}")
        checked: dict[str, Any] = {name: fields.get(name) for name in kinds}
        return cls(**checked)


class ControllerView(ABC):
    """What may be read of a controller: its jobs and decisions."""

    @abstractmethod
    def jobs(self) -> list[JobRecord]:
        """Every job the controller knows (the latest run of each name), in submission order."""

    @abstractmethod
    def job(self, job_id: str) -> JobRecord:
        """The latest run of a job.

        Raises:
            UnknownJobError: no such job.
        """

    @abstractmethod
    def decision(self, job_id: str) -> DecisionRecord | None:
        """The latest decision for a job's latest run, or None if its size was never changed.

        Raises:
            UnknownJobError: no such job.
        """

    @abstractmethod
    def timeline(self, job_id: str, *, all_runs: bool = False) -> list[DecisionRecord]:
        """Every decision for a job's latest run (with ``all_runs``: for every run of the name), oldest first.

        Raises:
            UnknownJobError: no such job.
        """

    def statuses(self, *, include_finished: bool = True) -> list[JobStatus]:
        """Every job (only the live ones unless ``include_finished``) with its latest decision."""
        return [JobStatus(j, self.decision(j.job_id)) for j in self.jobs() if include_finished or j.live]


class Controller(ControllerView):
    """What a caller of the controller may do. Every method blocks for at most a few seconds (a
    database write, an RPC); decisions are applied in the background.
    """

    def job_submitted(
        self,
        job_id: str,
        min_workers: int,
        max_workers: int,
        workers: int,
        *,
        elastic: bool = True,
        source: JobSource = JobSource.CLI,
        policy: str | None = None,
        gpus: int = 0,
        queue: str | None = None,
    ) -> JobRecord:
        """A job arrived: :meth:`submit` of the :class:`JobSubmission` these values make.

        Raises:
            InvalidJobError: as :meth:`submit`, or values that make no :class:`JobSubmission` (named).
        """
        return self.submit(
            JobSubmission(job_id, min_workers, max_workers, workers, elastic, source, policy, gpus, queue)
        )

    @abstractmethod
    def submit(self, job: JobSubmission) -> JobRecord:
        """A job arrived (checked already: see :class:`JobSubmission`). A name the controller knew already starts
        a new run of it. Runs the policies for the new situation (it may take workers from others).

        Raises:
            InvalidJobError: a policy that does not load (named), or ``gpus`` per worker that no node of the
                cluster has (as ``job run`` refuses them).
        """

    @abstractmethod
    def job_finished(self, job_id: str) -> None:
        """A job left; its capacity goes back to the others. Finishing a finished job changes nothing.

        Raises:
            UnknownJobError: no such job.
        """

    @abstractmethod
    def report_metrics(
        self, job_id: str, world_size: int, step: int, samples_per_second: float, loss: float | None = None
    ) -> None:
        """Metrics for a job from a caller that does not stream them over gRPC (see :class:`MetricsReport`).

        Raises:
            UnknownJobError: no such job.
            InvalidJobError: a value out of its range (named).
        """


@dataclass(frozen=True)
class Resources:
    """Memory, virtual cores and GPUs (``yarn.io/gpu``): a container's size, or the room on a node (negative when
    short).

    Attributes:
        memory_mb: megabytes.
        vcores: virtual cores.
        gpus: GPUs (0: a container that asks none, or a node without any).
    """

    memory_mb: int
    vcores: int
    gpus: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.memory_mb + other.memory_mb, self.vcores + other.vcores, self.gpus + other.gpus)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.memory_mb - other.memory_mb, self.vcores - other.vcores, self.gpus - other.gpus)

    def holds(self, size: Resources) -> bool:
        """Whether one container of ``size`` fits in this room: memory, vcores and GPUs each."""
        return self.memory_mb >= size.memory_mb and self.vcores >= size.vcores and self.gpus >= size.gpus

    def count(self, size: Resources) -> int:
        """How many containers of ``size`` fit in this room: memory, vcores and (for a size that asks any) GPUs
        all; negative when the room is short (``-1``: one container of ``size`` has to go before one fits).

        Raises:
            ValueError: ``size`` is not positive in memory and vcores, or asks negative GPUs.
        """
        if size.memory_mb <= 0 or size.vcores <= 0 or size.gpus < 0:
            raise ValueError(f"a container size must be positive, got {size}")
        fits = min(self.memory_mb // size.memory_mb, self.vcores // size.vcores)
        return min(fits, self.gpus // size.gpus) if size.gpus else fits

    def __str__(self) -> str:
        gpus = f", {self.gpus} GPU{'' if self.gpus == 1 else 's'}" if self.gpus else ""
        return f"{self.memory_mb} MB, {self.vcores} vcore{'' if self.vcores == 1 else 's'}{gpus}"


#: The worker size assumed for a job before YARN reports its spec (the job template's default).
DEFAULT_WORKER = Resources(2048, 1)


@dataclass(frozen=True)
class NodeResources:
    """One RUNNING node as the ResourceManager reports it.

    Attributes:
        node_id: the NodeManager's id (``host:port``).
        free: what no container holds now (a reservation YARN keeps on the node does not reduce it).
    """

    node_id: str
    free: Resources
    #: the GPUs the node has in all (``yarn.io/gpu`` of its total resource; 0: none)
    gpus: int = 0


@dataclass(frozen=True)
class JobFootprint:
    """What one job takes on the cluster, as YARN sees it.

    Attributes:
        worker: the size of one of its worker containers.
        workers_allocated: worker containers YARN has given it (their room is no longer free).
        unplaced: its other containers (ApplicationMaster, driver) that YARN has not given it yet; they
            will take room before any worker of a job that arrived later.
        ended_app: the application of a run of the job whose ApplicationMaster says it ended (SUCCEEDED, FAILED
            or STOPPED), else None. It takes nothing, and the controller ends the job then if that is the run
            it knows: the ResourceManager lists the application as running for up to 40 s more.
    """

    worker: Resources
    workers_allocated: int = 0
    unplaced: tuple[Resources, ...] = ()
    ended_app: str | None = None

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
        queue: the YARN queue it runs in, when reported.
    """

    name: str
    app_id: str
    workers: int
    started_at: float = 0.0
    queue: str | None = None


@dataclass(frozen=True)
class JobSize:
    """A job's size as its driver reports it.

    Attributes:
        target: the worker count the job's driver holds as its target (it reconciles YARN and the ring
            toward it).
        ring: the world size of its ring (0 while the ring has not formed).
        yarn_ready: READY containers of its worker component as the driver last read them; None when not known.
        leaving: workers the driver is taking out of the ring.
    """

    target: int
    ring: int
    yarn_ready: int | None
    leaving: tuple[str, ...] = ()

    def lag(self, workers: int) -> str | None:
        """Why the job does not have ``workers`` yet (``the driver's target is 2; YARN has 3 of 1; ring has 2
        of 1``); None when the driver's target is ``workers`` and its verdict
        (:func:`submarine_elastic.elastic.reconcile.verdict`, the one the driver reports) says converged."""
        why = [] if self.target == workers else [f"the driver's target is {self.target}"]
        judged = verdict(workers, self.ring, self.leaving, self.yarn_ready)
        if not judged.converged:
            why.append(judged.lag)
        return "; ".join(why) or None


@dataclass(frozen=True)
class DriverStatus:
    """A job as its driver answers one Status call: all the controller reads of the job's driver in a round.

    Attributes:
        size: its target, ring, READY workers and leavers (what a decision is followed by); None when not known.
        ring: the world size of its ring while the ring runs; None while it has not formed.
        instances: the instance names of its ring members (``worker-0``, ...).
        batch_limits: the global batch sizes ``(min, max)`` a policy may set (``SUBMARINE_MIN_BATCH_SIZE``...).
        placement: its ring members on each node, most first; () when not known.
        batch_size: the global batch its driver last set (a target's); None: the job's own, never set.
    """

    size: JobSize | None
    ring: int | None
    instances: tuple[str, ...] = ()
    batch_limits: tuple[int, int] | None = None
    placement: tuple[int, ...] = ()
    batch_size: int | None = None


class JobBackend(ABC):
    """How the controller sees and changes the jobs on a cluster (the real one:
    :class:`~submarine_elastic.controller.backend.YarnJobBackend`). Every method blocks for at most its
    own bounded calls to the ResourceManager or a job's driver, except :meth:`replace`, which blocks up to
    its ``timeout``.
    """

    @abstractmethod
    def nodes(self) -> list[NodeResources] | None:
        """The cluster's RUNNING nodes with their free room; None if the RM did not answer."""

    @abstractmethod
    def footprint(self, job_id: str) -> JobFootprint | None:
        """The job's worker size, the workers YARN gave it, and its containers still to be placed; None
        when YARN does not know it as a job (not submitted yet, or not one of ours)."""

    def default_worker(self) -> Resources:
        """The worker size assumed for a job whose footprint is not known yet."""
        return DEFAULT_WORKER

    def status(self, job_id: str) -> DriverStatus | None:
        """The job as its driver reports it now, in one call; None if its driver does not answer. The default,
        for a backend that sees only rings (a test's), builds it from :meth:`ring_size` and the optional
        :meth:`size`, :meth:`instances`, :meth:`batch_limits` and :meth:`placement` of the job."""
        ring = self.ring_size(job_id)
        return DriverStatus(
            size=self.size(job_id),
            ring=ring,
            instances=self.instances(job_id) if ring is not None else (),
            batch_limits=self.batch_limits(job_id),
            placement=self.placement(job_id) if ring is not None else (),
        )

    def ring_size(self, job_id: str) -> int | None:
        """For the default :meth:`status`: the job's ring size, or None while it has no ring.

        Raises:
            NotImplementedError: the backend answers :meth:`status` itself.
        """
        raise NotImplementedError(f"{type(self).__name__} answers status() or ring_size()")

    def size(self, job_id: str) -> JobSize | None:
        """For the default :meth:`status`: the job's target, ring and READY worker containers; the default takes
        the ring size for all three."""
        ring = self.ring_size(job_id)
        return None if ring is None else JobSize(target=ring, ring=ring, yarn_ready=ring)

    @abstractmethod
    def set_target(self, job_id: str, target: pb.Target) -> None:
        """Give the job's driver ``target`` (the worker count, and optionally the batch: global batch,
        accumulation steps, learning rate); returns once the driver has taken it (it applies the count when its
        resizer gets to it, at once unless a resize of its own is still running; its workers take the batch at
        their next commit, with no restart). The resize itself runs in the driver: the controller follows it
        with :meth:`status`.

        Raises:
            Exception: the driver refused the target or did not answer; the controller records the message.
        """

    def batch_limits(self, job_id: str) -> tuple[int, int] | None:
        """For the default :meth:`status`: the job's batch limits; None: none."""
        return None

    def placement(self, job_id: str) -> tuple[int, ...]:
        """For the default :meth:`status`: the job's ring members per node; () when not known."""
        return ()

    def instances(self, job_id: str) -> tuple[str, ...]:
        """For the default :meth:`status`: the instance names of the job's ring members; () when unknown."""
        return ()

    def replace(self, job_id: str, instances: tuple[str, ...], timeout: float) -> None:
        """Swap the named workers for fresh ones, keeping the job's size; blocks until done.

        Raises:
            Exception: any failure (the default: this backend cannot replace workers).
        """
        raise NotImplementedError(f"{type(self).__name__} cannot replace workers")

    def queues(self) -> list[QueueShare]:
        """The scheduler's leaf queues with their guaranteed and maximum shares of the cluster, named by their
        leaf names; [] where it has none or they cannot be read (the cluster is then one pool). Blocks for at
        most one request to the RM."""
        return []

    @abstractmethod
    def cluster_jobs(self) -> dict[str, ClusterApp] | None:
        """Live yarn-service applications by name; None if the RM did not answer."""

    def application_ended(self, app_id: str) -> bool | None:
        """Whether ``app_id``, absent from :meth:`cluster_jobs`, has ended as the RM says (None: the RM does not
        know it or did not answer). By default an application absent from that listing has ended."""
        return True

    def job_ended(self, job_id: str) -> None:  # noqa: B027 - optional hook, default no-op
        """A job ended on its own (its application is gone): remove what was kept for it (its secrets). Raises
        OSError when something could not be removed (the controller logs it and goes on)."""
