"""Interfaces, value types and errors of the trace-driven cluster simulator.

A run replays a :class:`JobSpec` workload on a :class:`ClusterConfig` under a :class:`Scheduler` and
returns a :class:`SimResult` (``sim.output.write_result`` writes one to files). Schedulers see a
:class:`ClusterView` each round and answer a target :class:`Allocation` per job; the simulator places workers
on nodes, charges :class:`ResizeCosts`, and moves each job forward with the measured job physics of
:mod:`submarine_elastic.sim.physics`. Everything here is pure data: nothing blocks, nothing touches the
network, and nothing here imports the modules beside it.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field


class SimError(Exception):
    """Base of every error raised by ``submarine_elastic.sim``."""


class WorkloadError(SimError, ValueError):
    """A workload file cannot be read; the message names the file, the line and the job where known."""

    def __init__(self, source: str, reason: str, line: int | None = None, job: str | None = None) -> None:
        where = source
        if line is not None:
            where += f" line {line}"
        if job is not None:
            where += f" (job {job!r})"
        super().__init__(f"{where}: {reason}")
        self.source = source
        self.line = line
        self.job = job
        self.reason = reason


class TraceDataError(SimError):
    """The measured traces of an application are missing or malformed; the message names the file."""


class UnknownApplicationError(TraceDataError, KeyError):
    """No traces exist for this application name."""

    def __init__(self, name: str, known: tuple[str, ...]) -> None:
        super().__init__(name)
        self.name = name
        self.known = known

    def __str__(self) -> str:
        return f"unknown application {self.name!r}; known: {', '.join(self.known) or 'none'}"


class SchedulerError(SimError):
    """A scheduler answered something the simulator cannot apply (unknown job, more GPUs than exist)."""


@dataclass(frozen=True)
class JobSpec:
    """One job of a workload: when it arrives, what it trains, and what its user asked for.

    ``num_replicas`` and ``batch_size`` are what a static scheduler runs; elastic schedulers start from
    them and may change both within ``min_replicas``..``max_replicas`` (``None``: the simulator's default).
    ``queue`` is the YARN queue it is submitted to (``None``: the first queue of the run).
    """

    name: str
    arrival_s: float
    application: str
    num_replicas: int
    batch_size: int
    min_replicas: int | None = None
    max_replicas: int | None = None
    queue: str | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("job name must not be empty")
        if not math.isfinite(self.arrival_s) or self.arrival_s < 0:
            raise ValueError(f"job {self.name!r}: arrival time must be >= 0 seconds, got {self.arrival_s}")
        if self.num_replicas < 1:
            raise ValueError(f"job {self.name!r}: num_replicas must be >= 1, got {self.num_replicas}")
        if self.batch_size < 1:
            raise ValueError(f"job {self.name!r}: batch_size must be >= 1, got {self.batch_size}")
        if self.min_replicas is not None and self.min_replicas < 1:
            raise ValueError(f"job {self.name!r}: min_replicas must be >= 1, got {self.min_replicas}")
        low = self.min_replicas or 1
        high = self.max_replicas if self.max_replicas is not None else self.num_replicas
        if not low <= self.num_replicas <= high:
            raise ValueError(
                f"job {self.name!r}: num_replicas {self.num_replicas} is outside min_replicas..max_replicas "
                f"{low}..{high}"
            )


@dataclass(frozen=True)
class ClusterConfig:
    """A homogeneous GPU cluster: ``nodes`` machines with ``gpus_per_node`` GPUs each (one worker per GPU)."""

    nodes: int = 16
    gpus_per_node: int = 4

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"nodes must be >= 1, got {self.nodes}")
        if self.gpus_per_node < 1:
            raise ValueError(f"gpus_per_node must be >= 1, got {self.gpus_per_node}")

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @classmethod
    def parse(cls, text: str) -> ClusterConfig:
        """Parse ``NODESxGPUS`` (``16x4``).

        Raises:
            ValueError: the text is not two positive integers joined by ``x``.
        """
        parts = text.lower().split("x")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
            raise ValueError(f"cluster must look like NODESxGPUS (e.g. 16x4), got {text!r}")
        return cls(nodes=int(parts[0]), gpus_per_node=int(parts[1]))

    def __str__(self) -> str:
        return f"{self.nodes}x{self.gpus_per_node}"


@dataclass(frozen=True)
class ResizeCosts:
    """Seconds a job makes no progress (while holding its GPUs) after a change of its workers.

    ``start_s``: from zero workers to some (first start, or resume after preemption); ``scale_out_s``: more
    workers; ``scale_in_s``: fewer, but not zero. Moving a job's workers to other nodes costs the dearest of
    the three (:meth:`move`). The defaults are the pauses the live system measured
    (benchmarks/bench_elastic.py, benchmarks/results/elastic.md: scale-out 0.37-0.60 s with pre-warmed joiners
    against 4.8-5.5 s for stock Horovod elastic, scale-in 0.09-0.28 s, across runs; the defaults take the upper
    end); a checkpoint-restart system pays about 30 s for every change (:meth:`restart`).
    """

    start_s: float = 0.0
    scale_out_s: float = 0.6
    scale_in_s: float = 0.2

    def __post_init__(self) -> None:
        for name in ("start_s", "scale_out_s", "scale_in_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be >= 0 seconds, got {value}")

    @classmethod
    def restart(cls, seconds: float = 30.0) -> ResizeCosts:
        """Every change costs ``seconds``, as in checkpoint-restart systems."""
        return cls(start_s=seconds, scale_out_s=seconds, scale_in_s=seconds)

    @classmethod
    def free(cls) -> ResizeCosts:
        return cls(start_s=0.0, scale_out_s=0.0, scale_in_s=0.0)

    def move(self) -> float:
        """Pause for moving a job's workers to other nodes (at the same count or with a resize): the dearest
        change, the whole job stopping and starting elsewhere."""
        return max(self.start_s, self.scale_out_s, self.scale_in_s)

    def cost(self, old_workers: int, new_workers: int) -> float:
        """Pause for a change from ``old_workers`` to ``new_workers`` (0 when unchanged or stopping)."""
        if new_workers == 0 or new_workers == old_workers:
            return 0.0
        if old_workers == 0:
            return self.start_s
        return self.scale_out_s if new_workers > old_workers else self.scale_in_s


@dataclass(frozen=True)
class MeasuredStep:
    """One configuration a simulated job ran in, and its iteration time there (what a live job's step
    times per configuration are): ``workers`` on ``nodes``, ``local_batch`` samples per worker per
    micro-batch, ``accum_steps`` micro-batches beyond the first, ``seconds`` per iteration of which
    ``sync_seconds`` synchronising, over ``steps`` iterations."""

    workers: int
    nodes: int
    local_batch: float
    accum_steps: int
    seconds: float
    sync_seconds: float
    steps: int


@dataclass(frozen=True)
class JobView:
    """What a scheduler sees of one job that has arrived and not finished.

    ``throughput`` maps each world size the job has run at to the examples per second it reached there
    (measured by the simulated job, like the metrics service measures a live one) and ``steps_at`` to the
    iterations it ran there; ``efficiency`` is the statistical efficiency of the current batch size
    (progress per example relative to the job's initial batch size, in (0, 1]) and ``noise_scale`` the
    gradient noise scale in examples. ``progress`` is the fraction of the job's work done, in [0, 1];
    ``remaining_examples`` what is left of it in examples at the initial batch size. ``metric_history``
    holds the validation metric after each of the last (up to ``policy.LOSS_WINDOW``) epochs, oldest first.
    ``min_batch_size`` and ``max_batch_size`` are the application's validated range of global batch sizes,
    ``max_local_batch`` the largest per-GPU micro-batch measured (more per worker takes gradient accumulation),
    ``configurations`` the iteration time of each configuration it ran in, most recent last; ``placement`` its
    workers on each node it uses, most first; ``queue`` the queue it was submitted to (None: none named).
    """

    name: str
    application: str
    arrival_s: float
    requested_replicas: int
    requested_batch_size: int
    min_replicas: int
    max_replicas: int
    workers: int
    batch_size: float
    progress: float
    attained_gpu_s: float
    run_s: float
    epoch: int
    metric: float | None
    throughput: Mapping[int, float]
    efficiency: float
    resizing: bool
    last_resize_s: float | None = None
    steps: int = 0
    steps_at: Mapping[int, int] = field(default_factory=dict)
    metric_history: tuple[float, ...] = ()
    metric_higher_is_better: bool = True
    noise_scale: float | None = None
    remaining_examples: float = 0.0
    min_batch_size: int = 1
    max_batch_size: int = 1
    max_local_batch: int = 1
    configurations: tuple[MeasuredStep, ...] = ()
    placement: tuple[int, ...] = ()
    queue: str | None = None


@dataclass(frozen=True)
class ClusterView:
    """The whole cluster at one scheduling round: capacity, free GPUs, and the active jobs in arrival order;
    the resize costs the run charges, and its batch rule (``fixed-local`` or ``fixed-global``)."""

    now_s: float
    cluster: ClusterConfig
    free_gpus: int
    jobs: tuple[JobView, ...]
    costs: ResizeCosts = field(default_factory=ResizeCosts)
    batch_rule: str = "fixed-local"


@dataclass(frozen=True)
class Allocation:
    """A scheduler's target for one job: ``workers`` (0: hold no GPUs), optionally a new global batch, and
    optionally the most nodes the workers should span (``nodes``: the simulator packs them on that many where
    it can, moving the job's workers when they span more; None: it keeps them where they are)."""

    workers: int
    batch_size: int | None = None
    nodes: int | None = None

    def __post_init__(self) -> None:
        if self.workers < 0:
            raise ValueError(f"workers must be >= 0, got {self.workers}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.nodes is not None and not 1 <= self.nodes <= max(self.workers, 1):
            raise ValueError(f"nodes must be between 1 and the workers ({self.workers}), got {self.nodes}")


class Scheduler(ABC):
    """Decides, every round, how many workers each active job should hold.

    Jobs left out of the answer keep what they hold. The simulator shrinks before it grows, so an answer
    is feasible when the targets sum to at most the cluster's GPUs. ``allocate`` must not block; it is
    called once per round on the simulator's thread.
    """

    #: Short name used in tables, file names and plots.
    name: str = "scheduler"

    @abstractmethod
    def allocate(self, view: ClusterView) -> Mapping[str, Allocation]:
        """Return the target allocation of some or all of ``view.jobs``.

        Raises:
            SchedulerError: the scheduler cannot decide (a wrapped policy failed).
        """

    def job_finished(self, name: str) -> None:  # noqa: B027 - optional hook, default no-op
        """Called when a job completes, so a stateful scheduler can forget it."""


@dataclass(frozen=True)
class JobResult:
    """How one job fared. Times are seconds since the start of the run; ``None`` where it never happened.
    ``resizes`` counts changes of its worker count, ``moves`` its workers moved onto fewer nodes."""

    name: str
    application: str
    arrival_s: float
    requested_replicas: int
    requested_batch_size: int
    start_s: float | None
    completion_s: float | None
    gpu_s: float
    resizes: int
    preemptions: int
    max_workers: int
    final_batch_size: float
    moves: int = 0

    @property
    def jct_s(self) -> float | None:
        return None if self.completion_s is None else self.completion_s - self.arrival_s

    @property
    def queueing_s(self) -> float | None:
        return None if self.start_s is None else self.start_s - self.arrival_s


@dataclass(frozen=True)
class UtilSample:
    """Cluster state from ``time_s`` until the next sample."""

    time_s: float
    allocated_gpus: int
    running_jobs: int
    pending_jobs: int


@dataclass(frozen=True)
class AllocationChange:
    """A job's worker count (and batch size) from ``time_s`` on."""

    time_s: float
    job: str
    workers: int
    batch_size: float


@dataclass(frozen=True)
class SimSummary:
    """The headline numbers of one run (JSON-ready through :meth:`as_dict`)."""

    scheduler: str
    workload: str
    cluster: str
    jobs: int
    finished: int
    mean_jct_s: float
    median_jct_s: float
    p99_jct_s: float
    makespan_s: float
    mean_queueing_s: float
    mean_utilisation: float
    resizes: int
    preemptions: int
    rounds: int
    wall_s: float
    resize_costs: ResizeCosts = field(default_factory=ResizeCosts)
    moves: int = 0

    @property
    def speed(self) -> float:
        """Simulator speed: jobs x simulated hours per wall-clock second."""
        return self.jobs * self.makespan_s / 3600.0 / max(self.wall_s, 1e-9)

    def as_dict(self) -> dict[str, object]:
        return {
            "scheduler": self.scheduler,
            "workload": self.workload,
            "cluster": self.cluster,
            "jobs": self.jobs,
            "finished": self.finished,
            "mean_jct_s": self.mean_jct_s,
            "median_jct_s": self.median_jct_s,
            "p99_jct_s": self.p99_jct_s,
            "makespan_s": self.makespan_s,
            "mean_queueing_s": self.mean_queueing_s,
            "mean_utilisation": self.mean_utilisation,
            "resizes": self.resizes,
            "preemptions": self.preemptions,
            "moves": self.moves,
            "rounds": self.rounds,
            "wall_s": self.wall_s,
            "speed_job_hours_per_s": self.speed,
            "resize_costs": {
                "start_s": self.resize_costs.start_s,
                "scale_out_s": self.resize_costs.scale_out_s,
                "scale_in_s": self.resize_costs.scale_in_s,
            },
        }


@dataclass(frozen=True)
class SimResult:
    """Everything a run produced: the summary, one row per job, and the time series for plots."""

    summary: SimSummary
    jobs: tuple[JobResult, ...]
    utilisation: tuple[UtilSample, ...]
    allocations: tuple[AllocationChange, ...]
