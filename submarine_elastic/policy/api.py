"""The policy package's interface: the snapshot a policy reads, the decisions it returns, the two
policy levels and the errors.

Everything a policy needs arrives in a :class:`Snapshot`; nothing here reads a clock, a file or the
network, so the same policy objects run in the live controller and in the trace-driven simulator and
give the same answers for the same snapshots. Time is ``Snapshot.now``, in seconds on whatever clock
the caller uses (wall clock live, simulated time offline); only differences of times matter.

Two levels:

* a :class:`JobPolicy` says what one job would like (its target worker count, optionally batch size,
  learning rate and workers to replace), with a one-line reason;
* a :class:`ClusterArbiter` says who gets what when the jobs together want more than the cluster has.

:class:`~submarine_elastic.policy.engine.PolicyEngine` runs both, contains their failures and applies
the anti-flapping rules. History a policy needs between calls either comes in the snapshot (throughput
by world size, loss window, step times) or lives in the policy's :meth:`PolicyBase.state_dict`, which
must be JSON-serialisable so a controller can persist it and lose nothing on a restart.

Value types check their arguments when built and raise :class:`InvalidSnapshotError` or
:class:`InvalidDecisionError` naming the bad value. Mappings given to them are copied; treat the copies
as read-only.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from submarine_elastic.limits import INSTANCE, batch_setting_problem
from submarine_elastic.policy._checks import (
    check_count,
    check_finite,
    finite_floats,
    is_instance_name,
    is_mapping,
    is_number,
    is_sequence,
)

__all__ = [
    "Allocation",
    "ClusterArbiter",
    "DEFAULT_QUEUE",
    "Decision",
    "InvalidDecisionError",
    "InvalidSnapshotError",
    "JobMetrics",
    "JobPolicy",
    "JobView",
    "NotAPolicyError",
    "PolicyAttributeError",
    "PolicyBase",
    "PolicyConfigError",
    "PolicyError",
    "PolicyLoadError",
    "PolicyNotFoundError",
    "PolicyStateError",
    "QueueShare",
    "Refusal",
    "Request",
    "Snapshot",
    "StepTime",
    "Throughput",
]


# --------------------------------------------------------------------------------------------- errors


class PolicyError(Exception):
    """Base of every error raised by :mod:`submarine_elastic.policy`."""


class InvalidSnapshotError(PolicyError, ValueError):
    """A :class:`Snapshot`, :class:`JobView`, :class:`JobMetrics` or :class:`Throughput` was built from a
    bad value (negative count, NaN, duplicate job id, ...). The message names the value."""


class InvalidDecisionError(PolicyError, ValueError):
    """A :class:`Decision`, :class:`Allocation` or :class:`Request` was built from a bad value. Raised
    inside a policy, it is contained by the engine like any other policy failure."""


class PolicyConfigError(PolicyError, ValueError):
    """A policy, arbiter or engine was constructed with a bad parameter; the message names it."""


class PolicyStateError(PolicyError, ValueError):
    """``load_state_dict`` was given state this policy cannot read (wrong shape or version)."""


class PolicyLoadError(PolicyError):
    """A policy named by ``module:Class`` or by entry-point name could not be loaded.

    Attributes:
        spec: the name or ``module:Class`` string that was asked for.
    """

    def __init__(self, message: str, *, spec: str) -> None:
        super().__init__(message)
        self.spec = spec


class PolicyNotFoundError(PolicyLoadError, LookupError):
    """No entry point of that name, or the module of ``module:Class`` cannot be imported."""


class PolicyAttributeError(PolicyLoadError, AttributeError):
    """The module imported but has no attribute of that name."""


class NotAPolicyError(PolicyLoadError, TypeError):
    """The object found is not a :class:`JobPolicy` or :class:`ClusterArbiter` subclass (or not the
    kind that was asked for)."""


# ------------------------------------------------------------------------------------------- helpers


def _check_reason(err: type[PolicyError], reason: object) -> None:
    if not isinstance(reason, str) or not reason.strip():
        raise err(f"reason must be a non-empty string, got {reason!r}")
    if "\n" in reason or "\r" in reason:
        raise err(f"reason must be one line, got {reason!r}")


# --------------------------------------------------------------------------------------- value types


@dataclass(frozen=True)
class Throughput:
    """Aggregate throughput of a job measured at one world size.

    Attributes:
        samples_per_second: samples per second of the whole job (all workers together), >= 0.
        steps: how many training steps the measurement covers; policies that probe wait for enough
            of them before trusting the figure.
    """

    samples_per_second: float
    steps: int = 0

    def __post_init__(self) -> None:
        check_finite(InvalidSnapshotError, "samples_per_second", self.samples_per_second)
        check_count(InvalidSnapshotError, "steps", self.steps)


@dataclass(frozen=True)
class StepTime:
    """The measured time of one optimizer step of a job in one configuration.

    A configuration is the worker count, the nodes they span, the per-worker micro-batch and the
    gradient-accumulation steps: each step runs ``accum_steps + 1`` micro-batches of ``local_batch``
    samples per worker, then synchronises the gradients once (global batch
    ``workers * local_batch * (accum_steps + 1)``).

    Attributes:
        workers: workers in the step (>= 1).
        nodes: nodes they ran on (1 to ``workers``).
        local_batch: samples per worker per micro-batch (> 0).
        accum_steps: micro-batches accumulated before the synchronisation, beyond the first (>= 0).
        seconds: wall seconds of the whole step (> 0).
        sync_seconds: the part spent synchronising gradients, when measured apart (0 to ``seconds``).
        steps: how many steps the figure covers (>= 0).
    """

    workers: int
    nodes: int
    local_batch: float
    accum_steps: int
    seconds: float
    sync_seconds: float | None = None
    steps: int = 0

    def __post_init__(self) -> None:
        check_count(InvalidSnapshotError, "StepTime.workers", self.workers, minimum=1)
        check_count(InvalidSnapshotError, "StepTime.nodes", self.nodes, minimum=1)
        if self.nodes > self.workers:
            raise InvalidSnapshotError(f"StepTime.nodes ({self.nodes}) exceeds its workers ({self.workers})")
        check_finite(InvalidSnapshotError, "StepTime.local_batch", self.local_batch, positive=True)
        check_count(InvalidSnapshotError, "StepTime.accum_steps", self.accum_steps)
        check_finite(InvalidSnapshotError, "StepTime.seconds", self.seconds, positive=True)
        if self.sync_seconds is not None:
            check_finite(InvalidSnapshotError, "StepTime.sync_seconds", self.sync_seconds)
            if self.sync_seconds > self.seconds:
                raise InvalidSnapshotError(
                    f"StepTime.sync_seconds ({self.sync_seconds}) exceeds the step's seconds ({self.seconds})"
                )
        check_count(InvalidSnapshotError, "StepTime.steps", self.steps)

    @property
    def global_batch(self) -> float:
        """Samples per optimizer step of the whole job."""
        return self.workers * self.local_batch * (self.accum_steps + 1)


@dataclass(frozen=True)
class JobMetrics:
    """What a job's training has reported, as far as policies care. Every field may be unknown.

    Attributes:
        step: the last global step reported (0 before the first report).
        throughput: measured throughput by world size, for every size the job has run at so far.
        step_times: recent step times in seconds per worker instance name (``worker-0``), oldest first.
        loss_window: recent loss values, oldest first, evenly spaced in steps (one per metrics window).
        gradient_noise_scale: the gradient noise scale B_noise (in samples), when the hook reports it.
        batch_size: the current global batch size, in samples.
        learning_rate: the current learning rate.
        remaining_samples: samples left until the job is done, when known (deadline policies need it).
        configurations: measured step times, one per configuration the job ran in (oldest first); what
            the goodput policy fits its throughput model to.
        accum_steps: the current gradient-accumulation steps (beyond the first micro-batch).
        resize_cost_s: seconds of training a change of the job's workers costs, as measured.
    """

    step: int = 0
    throughput: Mapping[int, Throughput] = field(default_factory=dict, hash=False)
    step_times: Mapping[str, tuple[float, ...]] = field(default_factory=dict, hash=False)
    loss_window: tuple[float, ...] = ()
    gradient_noise_scale: float | None = None
    batch_size: int | None = None
    learning_rate: float | None = None
    remaining_samples: float | None = None
    configurations: tuple[StepTime, ...] = ()
    accum_steps: int | None = None
    resize_cost_s: float | None = None

    def __post_init__(self) -> None:
        check_count(InvalidSnapshotError, "step", self.step)
        if not is_mapping(self.throughput):
            raise InvalidSnapshotError(f"throughput must map world size to Throughput, got {self.throughput!r}")
        throughput: dict[int, Throughput] = {}
        for size, value in self.throughput.items():
            check_count(InvalidSnapshotError, "throughput world size", size, minimum=1)
            if not isinstance(value, Throughput):
                raise InvalidSnapshotError(f"throughput[{size}] must be a Throughput, got {value!r}")
            throughput[size] = value
        object.__setattr__(self, "throughput", dict(sorted(throughput.items())))
        if not is_mapping(self.step_times):
            raise InvalidSnapshotError(f"step_times must map instance name to times, got {self.step_times!r}")
        step_times: dict[str, tuple[float, ...]] = {}
        for name, times in self.step_times.items():
            if not is_instance_name(name):
                raise InvalidSnapshotError(f"step_times key must be a worker instance name, got {name!r}")
            if not is_sequence(times):
                raise InvalidSnapshotError(f"step_times[{name!r}] must be a sequence of seconds, got {times!r}")
            values = tuple(times)
            if finite_floats(values) and min(values, default=0.0) >= 0:
                step_times[name] = values  # floats already
                continue
            for t in values:
                check_finite(InvalidSnapshotError, f"step_times[{name!r}] entry", t)
            step_times[name] = tuple(map(float, values))
        object.__setattr__(self, "step_times", dict(sorted(step_times.items())))
        if not is_sequence(self.loss_window):
            raise InvalidSnapshotError(f"loss_window must be a sequence of numbers, got {self.loss_window!r}")
        losses = tuple(self.loss_window)
        if not finite_floats(losses):
            for loss in losses:
                if not is_number(loss) or not math.isfinite(loss):
                    raise InvalidSnapshotError(f"loss_window entries must be finite numbers, got {loss!r}")
            losses = tuple(map(float, losses))
        object.__setattr__(self, "loss_window", losses)
        if self.gradient_noise_scale is not None:
            check_finite(InvalidSnapshotError, "gradient_noise_scale", self.gradient_noise_scale)
        if self.batch_size is not None:
            check_count(InvalidSnapshotError, "batch_size", self.batch_size, minimum=1)
        if self.learning_rate is not None:
            check_finite(InvalidSnapshotError, "learning_rate", self.learning_rate, positive=True)
        if self.remaining_samples is not None:
            check_finite(InvalidSnapshotError, "remaining_samples", self.remaining_samples)
        if not is_sequence(self.configurations):
            raise InvalidSnapshotError(f"configurations must be a sequence of StepTime, got {self.configurations!r}")
        for measured in self.configurations:
            if not isinstance(measured, StepTime):
                raise InvalidSnapshotError(f"configurations must hold StepTime objects, got {measured!r}")
        object.__setattr__(self, "configurations", tuple(self.configurations))
        if self.accum_steps is not None:
            check_count(InvalidSnapshotError, "accum_steps", self.accum_steps)
        if self.resize_cost_s is not None:
            check_finite(InvalidSnapshotError, "resize_cost_s", self.resize_cost_s)

    @property
    def loss_trend(self) -> float | None:
        """Least-squares slope of :attr:`loss_window` per window entry; None with fewer than 2 entries."""
        n = len(self.loss_window)
        if n < 2:
            return None
        mean_x = (n - 1) / 2
        mean_y = sum(self.loss_window) / n
        num = sum((i - mean_x) * (y - mean_y) for i, y in enumerate(self.loss_window))
        den = sum((i - mean_x) ** 2 for i in range(n))
        return num / den

    def samples_per_second(self, world_size: int) -> float | None:
        """Measured aggregate throughput at ``world_size``, or None if the job never ran at that size."""
        measured = self.throughput.get(world_size)
        return None if measured is None else measured.samples_per_second


#: The queue of a job that names none, and the one queue of a cluster without queues.
DEFAULT_QUEUE = "default"


@dataclass(frozen=True)
class QueueShare:
    """One leaf queue as the policies see it.

    Attributes:
        name: the queue's name (its leaf name, as jobs name it).
        guaranteed: its guaranteed share of the cluster, 0..1 (the RM's absolute capacity over 100).
        maximum: the share it may grow to, ``guaranteed``..1 (absolute maximum capacity over 100).

    Raises:
        InvalidSnapshotError: an empty name, or a share out of range (naming the queue).
    """

    name: str
    guaranteed: float
    maximum: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidSnapshotError(f"a queue's name must be a non-empty string, got {self.name!r}")
        for what in ("guaranteed", "maximum"):
            value = getattr(self, what)
            if not isinstance(value, int | float) or not math.isfinite(value) or not 0 <= value <= 1:
                raise InvalidSnapshotError(f"queue {self.name!r}: {what} must be a share in [0, 1], got {value!r}")
        if self.maximum < self.guaranteed:
            raise InvalidSnapshotError(
                f"queue {self.name!r}: maximum {self.maximum} is below its guaranteed {self.guaranteed}"
            )

    def slots(self, available: int) -> tuple[int, int]:
        """(guaranteed, maximum) whole slots of ``available``; a share's rounding error leaves slots idle,
        never over the share (an epsilon absorbs float error, ``0.6 * 10``)."""
        return math.floor(available * self.guaranteed + 1e-6), math.floor(available * self.maximum + 1e-6)


@dataclass(frozen=True)
class JobView:
    """One job as the policies see it.

    Attributes:
        job_id: the job's name (its YARN service name).
        min_workers: the fewest workers the job may run with (>= 1).
        max_workers: the most workers the job may run with (>= min_workers).
        elastic: whether the job can change size while it runs. A job that is not elastic runs at
            exactly ``min_workers``, which must then equal ``max_workers``.
        current_workers: workers running now (READY).
        pending_workers: workers asked for and not READY yet; counted against capacity. A job that
            has neither current nor pending workers is waiting to start.
        submitted_at: when the job arrived (``Snapshot.now`` clock).
        last_resize_at: when the job's worker set last changed (resize or replacement), or None.
        instances: names of the job's running worker instances (``worker-0``, ...), when known.
        metrics: what its training has reported.
        min_batch_size: the smallest global batch a policy may choose; with ``max_batch_size``, the
            range the job lets policies choose its batch from. Both None: the batch is not a policy's
            to choose.
        max_batch_size: the largest global batch a policy may choose.
        max_local_batch: the most samples a worker fits in one micro-batch; a larger per-worker batch
            is reached by gradient accumulation. None: unknown (no accumulation is planned).
        requested_workers: the worker count the job was submitted with, when known (its user's choice,
            where a policy that explores may start it).
        placement: how its running workers are spread over nodes: the workers on each node it uses, most
            first (``(4, 2)``: four on one node, two on another), when known; empty when not.
        queue: the YARN queue it runs in (:data:`DEFAULT_QUEUE` when it names none).
    """

    job_id: str
    min_workers: int
    max_workers: int
    elastic: bool = True
    current_workers: int = 0
    pending_workers: int = 0
    submitted_at: float = 0.0
    last_resize_at: float | None = None
    instances: tuple[str, ...] = ()
    metrics: JobMetrics = field(default_factory=JobMetrics)
    min_batch_size: int | None = None
    max_batch_size: int | None = None
    max_local_batch: int | None = None
    requested_workers: int | None = None
    placement: tuple[int, ...] = ()
    queue: str = DEFAULT_QUEUE

    def __post_init__(self) -> None:
        if not isinstance(self.job_id, str) or not self.job_id:
            raise InvalidSnapshotError(f"job_id must be a non-empty string, got {self.job_id!r}")
        check_count(InvalidSnapshotError, f"{self.job_id}: min_workers", self.min_workers, minimum=1)
        check_count(InvalidSnapshotError, f"{self.job_id}: max_workers", self.max_workers, minimum=1)
        if self.max_workers < self.min_workers:
            raise InvalidSnapshotError(
                f"{self.job_id}: max_workers ({self.max_workers}) is below min_workers ({self.min_workers})"
            )
        if not isinstance(self.elastic, bool):
            raise InvalidSnapshotError(f"{self.job_id}: elastic must be a bool, got {self.elastic!r}")
        if not self.elastic and self.min_workers != self.max_workers:
            raise InvalidSnapshotError(
                f"{self.job_id}: a job that is not elastic needs min_workers == max_workers, "
                f"got {self.min_workers} and {self.max_workers}"
            )
        check_count(InvalidSnapshotError, f"{self.job_id}: current_workers", self.current_workers)
        check_count(InvalidSnapshotError, f"{self.job_id}: pending_workers", self.pending_workers)
        if not is_number(self.submitted_at) or not math.isfinite(self.submitted_at):
            raise InvalidSnapshotError(f"{self.job_id}: submitted_at must be finite, got {self.submitted_at!r}")
        if self.last_resize_at is not None and (
            not is_number(self.last_resize_at) or not math.isfinite(self.last_resize_at)
        ):
            raise InvalidSnapshotError(
                f"{self.job_id}: last_resize_at must be a finite number or None, got {self.last_resize_at!r}"
            )
        if not is_sequence(self.instances):
            raise InvalidSnapshotError(f"{self.job_id}: instances must be a sequence of names, got {self.instances!r}")
        for name in self.instances:
            if not is_instance_name(name):
                raise InvalidSnapshotError(f"{self.job_id}: bad instance name {name!r}")
        object.__setattr__(self, "instances", tuple(self.instances))
        if not isinstance(self.metrics, JobMetrics):
            raise InvalidSnapshotError(f"{self.job_id}: metrics must be a JobMetrics, got {self.metrics!r}")
        if (self.min_batch_size is None) != (self.max_batch_size is None):
            raise InvalidSnapshotError(
                f"{self.job_id}: min_batch_size and max_batch_size come together, got "
                f"{self.min_batch_size!r} and {self.max_batch_size!r}"
            )
        if self.min_batch_size is not None:
            check_count(InvalidSnapshotError, f"{self.job_id}: min_batch_size", self.min_batch_size, minimum=1)
            check_count(InvalidSnapshotError, f"{self.job_id}: max_batch_size", self.max_batch_size, minimum=1)
            if self.max_batch_size < self.min_batch_size:  # type: ignore[operator]
                raise InvalidSnapshotError(
                    f"{self.job_id}: max_batch_size ({self.max_batch_size}) is below min_batch_size "
                    f"({self.min_batch_size})"
                )
        if self.max_local_batch is not None:
            check_count(InvalidSnapshotError, f"{self.job_id}: max_local_batch", self.max_local_batch, minimum=1)
        if self.requested_workers is not None:
            check_count(InvalidSnapshotError, f"{self.job_id}: requested_workers", self.requested_workers, minimum=1)
        if not is_sequence(self.placement):
            raise InvalidSnapshotError(
                f"{self.job_id}: placement must be a sequence of worker counts, got {self.placement!r}"
            )
        for count in self.placement:
            check_count(InvalidSnapshotError, f"{self.job_id}: placement entry", count, minimum=1)
        if sum(self.placement) > self.holding:
            raise InvalidSnapshotError(
                f"{self.job_id}: placement {tuple(self.placement)} places more workers than it holds ({self.holding})"
            )
        object.__setattr__(self, "placement", tuple(sorted(self.placement, reverse=True)))
        if not isinstance(self.queue, str) or not self.queue:
            raise InvalidSnapshotError(f"{self.job_id}: queue must be a non-empty string, got {self.queue!r}")

    @property
    def holding(self) -> int:
        """Workers the job holds against capacity: current plus pending."""
        return self.current_workers + self.pending_workers

    @property
    def waiting(self) -> bool:
        """True while the job holds fewer than ``min_workers`` (not started yet, or lost workers)."""
        return self.holding < self.min_workers

    @property
    def nodes(self) -> int | None:
        """Nodes its running workers span, when its :attr:`placement` is known."""
        return len(self.placement) if self.placement else None

    @property
    def known_instances(self) -> frozenset[str]:
        """Instance names the snapshot knows for this job: :attr:`instances` plus those with step times."""
        return frozenset(self.instances) | frozenset(self.metrics.step_times)


@dataclass(frozen=True)
class Snapshot:
    """The whole input of one policy round.

    Attributes:
        now: the current time, seconds (the only clock policies see).
        capacity: worker slots of the cluster in total.
        free: worker slots free now, after every job in :attr:`jobs` and every application the policies
            do not manage (someone else's) took theirs.
        jobs: the jobs the policies manage, in the caller's order; job ids are unique.
        slots_per_node: worker slots of one node, when the nodes are alike (None: unknown); what a
            policy that counts placement takes a job of ``k`` workers to span (``ceil(k / slots)`` nodes).
        queues: the cluster's leaf queues; every job's queue is one of them. Empty (or one queue): the
            slots are one pool. With two or more, the engine splits them among the queues
            (:mod:`~submarine_elastic.policy.queues`) and decides within each.
    """

    now: float
    capacity: int
    free: int
    jobs: tuple[JobView, ...] = ()
    slots_per_node: int | None = None
    queues: tuple[QueueShare, ...] = ()

    def __post_init__(self) -> None:
        if not is_number(self.now) or not math.isfinite(self.now):
            raise InvalidSnapshotError(f"now must be a finite number, got {self.now!r}")
        check_count(InvalidSnapshotError, "capacity", self.capacity)
        check_count(InvalidSnapshotError, "free", self.free)
        if self.free > self.capacity:
            raise InvalidSnapshotError(f"free ({self.free}) exceeds capacity ({self.capacity})")
        if not is_sequence(self.jobs):
            raise InvalidSnapshotError(f"jobs must be a sequence of JobView, got {self.jobs!r}")
        seen: set[str] = set()
        for job in self.jobs:
            if not isinstance(job, JobView):
                raise InvalidSnapshotError(f"jobs must hold JobView objects, got {job!r}")
            if job.job_id in seen:
                raise InvalidSnapshotError(f"job id {job.job_id!r} appears twice")
            seen.add(job.job_id)
        object.__setattr__(self, "jobs", tuple(self.jobs))
        if self.slots_per_node is not None:
            check_count(InvalidSnapshotError, "slots_per_node", self.slots_per_node, minimum=1)
        self._check_queues()

    def _check_queues(self) -> None:
        if not is_sequence(self.queues):
            raise InvalidSnapshotError(f"queues must be a sequence of QueueShare, got {self.queues!r}")
        object.__setattr__(self, "queues", tuple(self.queues))
        if not self.queues:
            return
        names = [q.name for q in self.queues if isinstance(q, QueueShare)]
        if len(names) != len(self.queues):
            raise InvalidSnapshotError(f"queues must hold QueueShare objects, got {self.queues!r}")
        if len(set(names)) != len(names):
            raise InvalidSnapshotError(f"a queue appears twice in {names}")
        total = sum(q.guaranteed for q in self.queues)
        if total > 1 + 1e-6:
            raise InvalidSnapshotError(f"the queues' guaranteed shares add up to {total:.4f}, over the whole cluster")
        for job in self.jobs:
            if job.queue not in names:
                raise InvalidSnapshotError(f"{job.job_id}: queue {job.queue!r} is not one of the queues {names}")

    @property
    def available(self) -> int:
        """Slots the managed jobs may hold in total: what they hold now plus what is free, at most
        :attr:`capacity` (a racy snapshot can count a pending container twice)."""
        return min(self.capacity, self.free + sum(job.holding for job in self.jobs))

    def job(self, job_id: str) -> JobView | None:
        """The job with that id, or None."""
        for job in self.jobs:
            if job.job_id == job_id:
                return job
        return None


@dataclass(frozen=True)
class Decision:
    """What should change for one job.

    Attributes:
        job_id: the job it is about.
        target_workers: the worker count the job should have (holding, when only other fields change).
        reason: one line a person can read in the job's timeline.
        batch_size: a new global batch size, or None to leave it.
        learning_rate: a new learning rate, or None to leave it.
        replace: worker instances to decommission and replace by fresh ones (size unchanged by this).
        accum_steps: the gradient-accumulation steps that go with ``batch_size`` (micro-batches beyond
            the first per step), or None to leave it to the job.
        nodes: the most nodes the ``target_workers`` should span (``1``: all on one node), or None for
            wherever they are placed. With ``target_workers`` equal to what the job holds, a ``nodes`` below
            the nodes it spans asks to move its workers closer together.
    """

    job_id: str
    target_workers: int
    reason: str
    batch_size: int | None = None
    learning_rate: float | None = None
    replace: tuple[str, ...] = ()
    accum_steps: int | None = None
    nodes: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.job_id, str) or not self.job_id:
            raise InvalidDecisionError(f"job_id must be a non-empty string, got {self.job_id!r}")
        check_count(InvalidDecisionError, f"{self.job_id}: target_workers", self.target_workers)
        _check_reason(InvalidDecisionError, self.reason)
        problem = batch_setting_problem(self.batch_size, self.accum_steps or 0, self.learning_rate)
        if problem is not None:
            raise InvalidDecisionError(f"{self.job_id}: {problem}")
        if not is_sequence(self.replace):
            raise InvalidDecisionError(f"{self.job_id}: replace must be a sequence of names, got {self.replace!r}")
        for name in self.replace:
            if not INSTANCE.matches(name):
                raise InvalidDecisionError(f"{self.job_id}: bad instance name in replace: {name!r}")
        if len(set(self.replace)) != len(self.replace):
            raise InvalidDecisionError(f"{self.job_id}: replace names an instance twice: {self.replace!r}")
        object.__setattr__(self, "replace", tuple(self.replace))
        _check_nodes(self.job_id, self.nodes, self.target_workers)


@dataclass(frozen=True)
class Refusal:
    """A policy output the engine did not apply, and why. The job it names keeps its size.

    Attributes:
        job_id: the job the refused output was about, or None when the whole round of a policy was
            refused (it raised).
        source: the policy's name (``JobPolicy.name`` / ``ClusterArbiter.name``) or ``engine``.
        reason: one line saying what was wrong.
    """

    job_id: str | None
    source: str
    reason: str


@dataclass(frozen=True)
class Request:
    """What the engine hands an arbiter for one job: the job policy's wish after containment and the
    anti-flapping rules.

    Attributes:
        job: the job.
        desired: the size its job policy would like, within ``[min_workers, max_workers]``.
        settled: True while the job is in its cooldown: an arbiter should leave it at its holding,
            except to shrink it (never below ``min_workers``) so that a waiting job can start, and only
            while it is ``preemptible``.
        reason: the job policy's reason for ``desired``.
        preemptible: False while the job is settled and was shrunk within its cooldown already: not even a
            waiting job may take workers from it before the cooldown ends.
    """

    job: JobView
    desired: int
    settled: bool
    reason: str
    preemptible: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.job, JobView):
            raise InvalidDecisionError(f"job must be a JobView, got {self.job!r}")
        check_count(InvalidDecisionError, f"{self.job.job_id}: desired", self.desired)
        if not self.job.min_workers <= self.desired <= self.job.max_workers:
            raise InvalidDecisionError(
                f"{self.job.job_id}: desired {self.desired} is outside [{self.job.min_workers}, {self.job.max_workers}]"
            )
        _check_reason(InvalidDecisionError, self.reason)

    @property
    def job_id(self) -> str:
        return self.job.job_id

    @property
    def holding(self) -> int:
        return self.job.holding


@dataclass(frozen=True)
class Allocation:
    """An arbiter's answer for one job: the worker count it gets, and why (one line).

    An arbiter that chooses the batch with the workers (``goodput``) also gives the global batch size
    and gradient-accumulation steps for that count; they take the place of the job policy's. An arbiter
    that places jobs gives ``nodes``, the most nodes the workers should span (as :attr:`Decision.nodes`).
    """

    job_id: str
    workers: int
    reason: str
    batch_size: int | None = None
    accum_steps: int | None = None
    nodes: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.job_id, str) or not self.job_id:
            raise InvalidDecisionError(f"job_id must be a non-empty string, got {self.job_id!r}")
        check_count(InvalidDecisionError, f"{self.job_id}: workers", self.workers)
        _check_reason(InvalidDecisionError, self.reason)
        problem = batch_setting_problem(self.batch_size, self.accum_steps or 0)
        if problem is not None:
            raise InvalidDecisionError(f"{self.job_id}: {problem}")
        _check_nodes(self.job_id, self.nodes, self.workers)


def _check_nodes(job_id: str, nodes: object, workers: int) -> None:
    if nodes is None:
        return
    check_count(InvalidDecisionError, f"{job_id}: nodes", nodes, minimum=1)
    if nodes > max(workers, 1):  # type: ignore[operator]
        raise InvalidDecisionError(f"{job_id}: nodes ({nodes}) exceeds its workers ({workers})")


# ---------------------------------------------------------------------------------------- interfaces


class PolicyBase(ABC):  # noqa: B024 - no abstract method of its own; the two subclasses add them
    """What job policies and arbiters share: a name and serialisable state.

    ``name`` is the entry-point name the policy is registered under (``scaling-efficiency``); it
    appears in logs and in :class:`Refusal`. Policies must be deterministic: the same sequence of
    snapshots (and the same loaded state) gives the same outputs.
    """

    name: ClassVar[str] = ""

    @property
    def display_name(self) -> str:
        """``name``, or the class name when a user policy sets none."""
        return self.name or type(self).__name__

    def state_dict(self) -> dict[str, Any]:
        """Everything the policy remembers between rounds, as JSON-serialisable data.

        The default holds nothing. Does not block.
        """
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (possibly from another process).

        Raises:
            PolicyStateError: ``state`` is not something this policy wrote.
        """
        if not is_mapping(state):
            raise PolicyStateError(f"{self.display_name}: state must be a mapping, got {state!r}")
        if state:
            raise PolicyStateError(f"{self.display_name}: keeps no state, got keys {sorted(state)}")


class JobPolicy(PolicyBase):
    """What one job would like. Subclasses implement :meth:`propose`; the hooks are optional.

    The engine calls, per round and per job: :meth:`before_train` the first time it sees the job,
    :meth:`on_resize` when the job's running worker count changed since the last round,
    :meth:`after_step` when the job reported new steps, then :meth:`propose` (elastic jobs only), and
    :meth:`after_train` once the job has left the snapshot. An exception from any of them is contained:
    logged, recorded as a :class:`Refusal`, and the job keeps its size.
    """

    def before_train(self, job: JobView, snapshot: Snapshot) -> None:
        """The job appeared for the first time (arrived, or the engine restarted without its state)."""

    def after_step(self, job: JobView, snapshot: Snapshot) -> None:
        """The job reported a new metrics window (``job.metrics.step`` advanced)."""

    def on_resize(self, job: JobView, previous_workers: int, snapshot: Snapshot) -> None:
        """The job's running worker count changed from ``previous_workers`` to ``job.current_workers``."""

    def after_train(self, job_id: str, snapshot: Snapshot) -> None:
        """The job left the snapshot (finished, killed or failed). Drop what you kept for it."""

    @abstractmethod
    def propose(self, job: JobView, snapshot: Snapshot) -> Decision | None:
        """What this job would like now.

        Return None for "no opinion" (the job keeps its size, or gets its minimum while waiting), or a
        :class:`Decision` for ``job.job_id`` whose ``target_workers`` lies within
        ``[job.min_workers, job.max_workers]``. Capacity is the arbiter's concern, not the job policy's.
        Must not block.
        """


class ClusterArbiter(PolicyBase):
    """Who gets what when the jobs together want more than the cluster has."""

    @abstractmethod
    def allocate(self, snapshot: Snapshot, requests: Sequence[Request]) -> Sequence[Allocation]:
        """Split ``snapshot.available`` slots among the jobs of ``requests``.

        Return an :class:`Allocation` for each job whose size should change (a job left out keeps its
        holding). Rules the engine enforces, refusing any allocation that breaks them: every job is
        known; a job ends within ``[min_workers, max_workers]`` or keeps its holding (a waiting job may
        stay at 0); a job that is not elastic only goes from waiting to its fixed size; a settled job
        does not grow, and shrinks only in a round in which a waiting job starts and only while it is
        ``preemptible``; the total is at most ``snapshot.available``. Must not block.
        """
